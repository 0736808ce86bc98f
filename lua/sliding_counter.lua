-- ratelab sliding window counter: mirrors `SlidingCounter::decide` in
-- crates/sliding-window/src/counter.rs.
-- KEYS[1]  the windows: struct '<ddd' (current window index, previous count, current count)
-- ARGV[1]  protocol version     ARGV[2]  now, µs, or "" to read Redis TIME     ARGV[3]  cost
-- ARGV[4]  TTL slack, ms (0 with Redis TIME)     ARGV[5]  deadline, Unix µs, or ""
-- ARGV[6]  (version 2) the operation: check, peek or refund:<owed>; then the parameters P[1], ...
--          from ARGV[7] (version 1: from ARGV[6], and the operation is check):
-- P[1]  window length W, µs   P[2]  limit   P[3]  µs per step   P[4]  steps per window
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, delay_us}.
-- limit x steps < 2^48: every product below is exact.
-- (prologue.lua comes first: it checks the protocol version and the deadline, and sets
-- now, cost, op, slack, skew, P, args_ok and the helpers read_string, stored, corrupt and
-- show.) op: check, peek (writes nothing) or refund (see prologue.lua; `owed` is its µs).
local W, limit, step, steps = P[1], P[2], P[3], P[4]
-- The steps are the quota's own: step = ceil(W / 2^16), steps = ceil(W / step).
if not (args_ok and window_ok(W, limit) and cost <= limit and step and steps and step >= 1
    and step * 65536 >= W and (step - 1) * 65536 < W
    and steps * step >= W and (steps - 1) * step < W) then
  return redis.error_reply('ratelab sliding-counter: invalid arguments')
end

local index, previous, current = 0, 0, 0
local raw, err = read_string('sliding-counter', 24)
if err then return err end
if raw then
  index, previous, current = struct.unpack('<ddd', raw)
  if not (stored(index) and stored(previous) and stored(current) and previous <= limit
      and current <= limit) then
    return corrupt('sliding-counter', string.format('window %s, counts %s and %s of %d',
      tostring(index), tostring(previous), tostring(current), limit))
  end
  if index * W > now + skew then
    return corrupt('sliding-counter', string.format('window %d starts after now', index))
  end
end
local now_index = math.floor(now / W)
if now_index == index + 1 then
  index, previous, current = now_index, current, 0
elseif now_index > index + 1 then
  index, previous, current = now_index, 0, 0
end
local start = index * W
local function full_at()
  if current > 0 then return start + 2 * W end
  if previous > 0 then return start + W end
  return 0
end
if op == 'refund' then
  -- The admission weighs until the end of the window after its own: more than W still
  -- owed, it is in the current window; less, in the previous one (still weighing);
  -- nothing owed, it no longer counts, and no other unit is given back instead.
  if owed > W then
    current = current - math.min(cost, current)
  elseif owed > 0 then
    previous = previous - math.min(cost, previous)
  end
  local reset = full_at() - now
  if reset <= 0 then
    if raw then redis.call('DEL', KEYS[1]) end
  else
    redis.call('SET', KEYS[1], struct.pack('<ddd', index, previous, current), 'PX',
      math.ceil(reset / 1000) + slack)
  end
  cost = 0
end
-- After a clock went back, take the window's start: the previous window weighs in full.
local offset = now - start
if offset < 0 then offset = 0 end
local k = math.floor(offset / step)
local room = math.floor((limit * steps - previous * (steps - k)) / steps)
if current + cost <= room then
  current = current + cost
  local reset = full_at() - now
  if reset < 0 then reset = 0 end
  if cost > 0 and op == 'check' then
    redis.call('SET', KEYS[1], struct.pack('<ddd', index, previous, current), 'PX',
      math.ceil(reset / 1000) + slack)
  end
  return {1, limit, room - current, 0, reset, 0}
end
-- The first step at which `units` fit on top of `weighing` weighted, within a window.
local function first_step(weighing, units)
  if weighing == 0 then return 0 end
  local s = steps - math.floor(units * steps / weighing)
  if s < 0 then s = 0 end
  if s * step < W then return s end
  return nil
end
local retry_at
if limit - current - cost >= 0 then
  local s = first_step(previous, limit - current - cost)
  if s then retry_at = start + s * step end
end
if not retry_at then
  local s = first_step(current, limit - cost)
  if s then retry_at = start + W + s * step else retry_at = start + 2 * W end
end
local remaining = room - current
if remaining < 0 then remaining = 0 end
return {0, limit, remaining, retry_at - now, full_at() - now, 0}
