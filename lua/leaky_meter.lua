-- ratelab leaky bucket (meter): mirrors `LeakyMeter::decide` in
-- crates/leaky-bucket/src/meter.rs.
-- KEYS[1]  the level: struct '<dd' (µs of draining left, instant it was measured in µs)
-- ARGV[1]  now, µs, or "" to read Redis TIME     ARGV[2]  cost
-- ARGV[3]  TTL slack, ms (0 with Redis TIME)
-- ARGV[4]  µs per unit T     ARGV[5]  depth = burst x T, µs     ARGV[6]  capacity (burst)
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, delay_us}.
-- (prologue.lua comes first: it sets now, cost, slack, P and args_ok.)
local T, depth, cap = P[1], P[2], P[3]
if not (args_ok and cap and cost <= cap and T >= 1) then
  return redis.error_reply('ratelab leaky-meter: invalid arguments')
end

local water, at = 0, 0
local raw = redis.call('GET', KEYS[1])
if raw then water, at = struct.unpack('<dd', raw) end
-- A clock that went back drains nothing: measure from the later instant.
local measured = at
if now > measured then measured = now end
water = water - (measured - at)
if water < 0 then water = 0 end
local ahead = measured - now
local poured = water + cost * T
if poured <= depth then
  if cost > 0 then
    redis.call('SET', KEYS[1], struct.pack('<dd', poured, measured), 'PX',
      math.ceil((ahead + poured) / 1000) + slack)
  end
  return {1, cap, math.floor((depth - poured) / T), 0, ahead + poured, 0}
end
return {0, cap, math.floor((depth - water) / T), ahead + poured - depth, ahead + water, 0}
