-- ratelab leaky bucket (queue): mirrors `LeakyQueue::decide` in
-- crates/leaky-bucket/src/queue.rs.
-- KEYS[1]  the next free slot, µs, an integer string
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
  return redis.error_reply('ratelab leaky-queue: invalid arguments')
end
if now > 4503599627370496 then now = 4503599627370496 end

local slot = tonumber(redis.call('GET', KEYS[1])) or 0
if slot < now then slot = now end
local after = slot + cost * T
if after - now <= depth then
  if cost > 0 then
    redis.call('SET', KEYS[1], after, 'PX', math.ceil((after - now) / 1000) + slack)
    return {1, cap, math.floor((depth - (after - now)) / T), 0, after - now, slot - now}
  end
  return {1, cap, math.floor((depth - (after - now)) / T), 0, after - now, 0}
end
local room = depth - (slot - now)
if room < 0 then room = 0 end
return {0, cap, math.floor(room / T), after - depth - now, slot - now, 0}
