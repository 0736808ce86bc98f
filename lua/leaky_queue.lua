-- ratelab leaky bucket (queue): mirrors `LeakyQueue::decide` in
-- crates/leaky-bucket/src/queue.rs.
-- KEYS[1]  the next free slot, µs, an integer string
-- ARGV[1]  now, µs, or "" to read Redis TIME     ARGV[2]  cost
-- ARGV[3]  TTL slack, ms (0 with Redis TIME)
-- ARGV[4]  µs per unit T     ARGV[5]  depth = burst x T, µs     ARGV[6]  capacity (burst)
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, delay_us}.
-- (prologue.lua comes first: it sets now, cost, slack, P and args_ok.)
local T, depth, cap = P[1], P[2], P[3]
if not (args_ok and cap and cost <= cap and T >= 1) then
  return redis.error_reply('ratelab leaky-queue: invalid arguments')
end

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
