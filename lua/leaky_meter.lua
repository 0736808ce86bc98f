-- ratelab leaky bucket (meter): mirrors `LeakyMeter::decide` in
-- crates/leaky-bucket/src/meter.rs.
-- KEYS[1]  the level: struct '<dd' (µs of draining left, instant it was measured in µs)
-- ARGV[1]  protocol version     ARGV[2]  now, µs, or "" to read Redis TIME     ARGV[3]  cost
-- ARGV[4]  TTL slack, ms (0 with Redis TIME)     ARGV[5]  deadline, Unix µs, or ""
-- ARGV[6]  (version 2) the operation: check, peek or refund:<owed>; then the parameters P[1], ...
--          from ARGV[7] (version 1: from ARGV[6], and the operation is check):
-- P[1]  µs per unit T     P[2]  depth = burst x T, µs     P[3]  capacity (burst)
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, delay_us}.
-- (prologue.lua comes first: it checks the protocol version and the deadline, and sets
-- now, cost, op, slack, skew, P, args_ok and the helpers read_string, stored, corrupt and
-- show.) op: check, peek (writes nothing) or refund (see prologue.lua; `owed` is its µs).
local T, depth, cap = P[1], P[2], P[3]
if not (args_ok and rate_ok(T, cap) and depth == cap * T and cost <= cap) then
  return redis.error_reply('ratelab leaky-meter: invalid arguments')
end

local water, at = 0, 0
local raw, err = read_string('leaky-meter', 16)
if err then return err end
if raw then
  water, at = struct.unpack('<dd', raw)
  if not (stored(water) and stored(at) and water <= depth) then
    return corrupt('leaky-meter', string.format('level %s of %d, at %s', tostring(water), depth,
      tostring(at)))
  end
  if at > now + skew then
    return corrupt('leaky-meter', string.format('measured at %d, after now', at))
  end
end
-- A clock that went back drains nothing: measure from the later instant.
local measured = at
if now > measured then measured = now end
water = water - (measured - at)
if water < 0 then water = 0 end
local ahead = measured - now
if op == 'refund' then
  -- Drained to now above; pour out what the admission still holds, never below empty.
  water = water - math.min(cost * T, owed)
  if water < 0 then water = 0 end
  if ahead + water <= 0 then
    if raw then redis.call('DEL', KEYS[1]) end
  else
    redis.call('SET', KEYS[1], struct.pack('<dd', water, measured), 'PX',
      math.ceil((ahead + water) / 1000) + slack)
  end
  cost = 0
end
local poured = water + cost * T
if poured <= depth then
  if cost > 0 and op == 'check' then
    redis.call('SET', KEYS[1], struct.pack('<dd', poured, measured), 'PX',
      math.ceil((ahead + poured) / 1000) + slack)
  end
  return {1, cap, math.floor((depth - poured) / T), 0, ahead + poured, 0}
end
return {0, cap, math.floor((depth - water) / T), ahead + poured - depth, ahead + water, 0}
