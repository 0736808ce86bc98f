-- ratelab fixed window: mirrors `FixedWindow::decide` in crates/fixed-window/src/lib.rs.
-- KEYS[1]  the counter: struct '<dd' (window index, units admitted in it)
-- ARGV[1]  protocol version     ARGV[2]  now, µs, or "" to read Redis TIME     ARGV[3]  cost
-- ARGV[4]  TTL slack, ms (0 with Redis TIME)     ARGV[5]  deadline, Unix µs, or ""
-- ARGV[6]  (version 2) the operation: check, peek or refund:<owed>; then the parameters P[1], ...
--          from ARGV[7] (version 1: from ARGV[6], and the operation is check):
-- P[1]  window length W, µs     P[2]  limit per window
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, delay_us}.
-- (prologue.lua comes first: it checks the protocol version and the deadline, and sets
-- now, cost, op, slack, skew, P, args_ok and the helpers read_string, stored, corrupt and
-- show.) op: check, peek (writes nothing) or refund (see prologue.lua; `owed` is its µs).
local W, limit = P[1], P[2]
if not (args_ok and window_ok(W, limit) and cost <= limit) then
  return redis.error_reply('ratelab fixed-window: invalid arguments')
end

local index, count = 0, 0
local raw, err = read_string('fixed-window', 16)
if err then return err end
if raw then
  index, count = struct.unpack('<dd', raw)
  if not (stored(index) and stored(count) and count <= limit) then
    return corrupt('fixed-window', string.format('window %s, count %s of %d', tostring(index),
      tostring(count), limit))
  end
  -- A window that starts after now (beyond a stepped-back clock) was never written
  -- with this window length: it would refuse until a far future.
  if index * W > now + skew then
    return corrupt('fixed-window', string.format('window %d starts after now', index))
  end
end
-- A clock that went back stays in the window it had reached.
local current = math.floor(now / W)
if current > index then index, count = current, 0 end
local until_end = (index + 1) * W - now
if op == 'refund' then
  -- Only while the admission's window has not ended (owed > 0): it is then this one.
  -- Its units counted in an ended window: giving them to this one would let others
  -- count for less.
  if owed > 0 then count = count - math.min(cost, count) end
  if count == 0 then
    if raw then redis.call('DEL', KEYS[1]) end
  else
    redis.call('SET', KEYS[1], struct.pack('<dd', index, count), 'PX',
      math.ceil(until_end / 1000) + slack)
  end
  cost = 0
end
if count + cost <= limit then
  count = count + cost
  if cost > 0 and op == 'check' then
    redis.call('SET', KEYS[1], struct.pack('<dd', index, count), 'PX',
      math.ceil(until_end / 1000) + slack)
  end
  if count == 0 then until_end = 0 end
  return {1, limit, limit - count, 0, until_end, 0}
end
return {0, limit, limit - count, until_end, until_end, 0}
