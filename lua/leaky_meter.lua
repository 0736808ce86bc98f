-- ratelab leaky bucket (meter): mirrors `LeakyMeter::decide` in
-- crates/leaky-bucket/src/meter.rs.
-- KEYS[1]  the level: struct '<dd' (µs of draining left, instant it was measured in µs)
-- ARGV[1]  now, µs, or "" to read Redis TIME     ARGV[2]  cost
-- ARGV[3]  TTL slack, ms (0 with Redis TIME)
-- ARGV[4]  µs per unit T     ARGV[5]  depth = burst x T, µs     ARGV[6]  capacity (burst)
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, delay_us}.
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local cost, slack = tonumber(ARGV[2]), tonumber(ARGV[3])
local T, depth, cap = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
if not (cost and slack and T and depth and cap) or now < 0 or cost < 0 or cost > cap
    or cost % 1 ~= 0 or now % 1 ~= 0 or T < 1 then
  return redis.error_reply('ratelab leaky-meter: invalid arguments')
end
if now > 4503599627370496 then now = 4503599627370496 end

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
