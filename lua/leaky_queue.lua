-- ratelab leaky bucket (queue): mirrors `LeakyQueue::decide` in
-- crates/leaky-bucket/src/queue.rs.
-- KEYS[1]  the next free slot, µs, an integer string
-- ARGV[1]  protocol version     ARGV[2]  now, µs, or "" to read Redis TIME     ARGV[3]  cost
-- ARGV[4]  TTL slack, ms (0 with Redis TIME)     ARGV[5]  deadline, Unix µs, or ""
-- ARGV[6]  µs per unit T     ARGV[7]  depth = burst x T, µs     ARGV[8]  capacity (burst)
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, delay_us}.
-- (prologue.lua comes first: it checks the protocol version and the deadline, and sets
-- now, cost, slack, skew, P, args_ok and the helpers read_string, stored, corrupt and show.)
local T, depth, cap = P[1], P[2], P[3]
if not (args_ok and cap and cost <= cap and T >= 1) then
  return redis.error_reply('ratelab leaky-queue: invalid arguments')
end

local raw, err = read_string('leaky-queue')
if err then return err end
local slot = 0
if raw then
  slot = tonumber(raw)
  if not stored(slot) then return corrupt('leaky-queue', 'not a timestamp: ' .. show(raw)) end
  if slot > now + depth + skew then
    return corrupt('leaky-queue', 'next slot ' .. raw .. ' beyond now + depth')
  end
end
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
