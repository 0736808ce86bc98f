-- ratelab sliding window log: mirrors `SlidingLog::decide` in
-- crates/sliding-window/src/log.rs.
-- KEYS[1]  the log: a sorted set, one member per admitted unit, scored by the µs it
--          was admitted at (members "<µs>:<n>", n counting the units of that µs)
-- ARGV[1]  protocol version     ARGV[2]  now, µs, or "" to read Redis TIME     ARGV[3]  cost
-- ARGV[4]  TTL slack, ms (0 with Redis TIME)     ARGV[5]  deadline, Unix µs, or ""
-- ARGV[6]  window length W, µs     ARGV[7]  limit per window
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, delay_us}.
-- O(log n + units added or expired) per call.
-- (prologue.lua comes first: it checks the protocol version and the deadline, and sets
-- now, cost, slack, skew, P, args_ok and the helpers read_string, stored, corrupt and show.)
local W, limit = P[1], P[2]
if not (args_ok and limit and cost <= limit and W >= 1) then
  return redis.error_reply('ratelab sliding-log: invalid arguments')
end

local key = KEYS[1]
-- A unit admitted at `at` counts while at + W > now.
local removed = redis.pcall('ZREMRANGEBYSCORE', key, '-inf', now - W)
if type(removed) == 'table' and removed.err then
  return corrupt('sliding-log', 'a ' .. redis.call('TYPE', key).ok .. ', not a zset')
end
local total = redis.call('ZCARD', key)
if total > limit then
  return corrupt('sliding-log', string.format('%d entries, limit %d', total, limit))
end
local newest = nil
if total > 0 then
  local entry = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  newest = tonumber(entry[2])
  if not stored(newest) or newest > now + skew then
    return corrupt('sliding-log', 'entry ' .. show(entry[1]) .. ' at ' .. show(entry[2]))
  end
end
if total + cost <= limit then
  if cost > 0 then
    -- After a clock went back, log at the latest instant seen: the entry then
    -- stays longer, never shorter.
    local at = now
    if newest and newest > at then at = newest end
    local first = 0
    if newest == at then first = redis.call('ZCOUNT', key, at, at) end
    -- In chunks: unpack() of a long list would overflow Lua's C stack.
    local added = 0
    while added < cost do
      local args, n = {}, math.min(cost - added, 1000)
      for i = 1, n do
        args[2 * i - 1] = at
        args[2 * i] = string.format('%d:%d', at, first + added + i)
      end
      redis.call('ZADD', key, unpack(args))
      added = added + n
    end
    redis.call('PEXPIRE', key, math.ceil((at + W - now) / 1000) + slack)
    total, newest = total + cost, at
  end
  local reset = 0
  if newest then reset = newest + W - now end
  if reset < 0 then reset = 0 end
  return {1, limit, limit - total, 0, reset, 0}
end
-- The unit whose leaving frees enough room for `cost`.
local needed = total + cost - limit
local freeing = tonumber(redis.call('ZRANGE', key, needed - 1, needed - 1, 'WITHSCORES')[2])
return {0, limit, limit - total, freeing + W - now, newest + W - now, 0}
