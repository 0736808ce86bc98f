-- ratelab sliding window log: mirrors `SlidingLog::decide` in
-- crates/sliding-window/src/log.rs.
-- KEYS[1]  the log: a sorted set, one member per admitted unit, scored by the µs it
--          was admitted at (members "<µs>:<n>", n counting the units of that µs)
-- ARGV[1]  protocol version     ARGV[2]  now, µs, or "" to read Redis TIME     ARGV[3]  cost
-- ARGV[4]  TTL slack, ms (0 with Redis TIME)     ARGV[5]  deadline, Unix µs, or ""
-- ARGV[6]  (version 2) the operation: check, peek or refund:<owed>; then the parameters P[1], ...
--          from ARGV[7] (version 1: from ARGV[6], and the operation is check):
-- P[1]  window length W, µs     P[2]  limit per window
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, delay_us}.
-- O(log n + units added or expired) per call.
-- (prologue.lua comes first: it checks the protocol version and the deadline, and sets
-- now, cost, slack, skew, P, args_ok and the helpers read_string, stored, corrupt and show.)
local W, limit = P[1], P[2]
-- At most 10 000 units: one member per unit (MAX_STORED_LOG_LIMIT in
-- crates/sliding-window/src/lib.rs).
if not (args_ok and window_ok(W, limit) and limit <= 10000 and cost <= limit) then
  return redis.error_reply('ratelab sliding-log: invalid arguments')
end

local key = KEYS[1]
-- A unit admitted at `at` counts while at + W > now: scores above `live`.
local live = string.format('(%d', now - W)
local function wrong_type()
  return corrupt('sliding-log', 'a ' .. redis.call('TYPE', key).ok .. ', not a zset')
end
local total
if op == 'peek' then
  -- A peek writes nothing, not even the pruning: it counts the live units only.
  total = redis.pcall('ZCOUNT', key, live, '+inf')
  if type(total) == 'table' and total.err then return wrong_type() end
else
  local removed = redis.pcall('ZREMRANGEBYSCORE', key, '-inf', now - W)
  if type(removed) == 'table' and removed.err then return wrong_type() end
  total = redis.call('ZCARD', key)
end
if total > limit then
  return corrupt('sliding-log', string.format('%d entries, limit %d', total, limit))
end
local newest = nil
-- The newest instant of a set holding `count` units, checked.
local function read_newest(count)
  newest = nil
  if count > 0 then
    local entry = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    newest = tonumber(entry[2])
    if not stored(newest) or newest > now + skew then
      return corrupt('sliding-log', 'entry ' .. show(entry[1]) .. ' at ' .. show(entry[2]))
    end
  end
end
local bad = read_newest(total)
if bad then return bad end
-- Adds `n` units at `at`, numbered from `first + 1`: the members of one instant are
-- always "<at>:1" to "<at>:<count>", so that the next unit's name is new.
-- In chunks: unpack() of a long list would overflow Lua's C stack.
local function add_units(at, first, n)
  local added = 0
  while added < n do
    local args, k = {}, math.min(n - added, 1000)
    for i = 1, k do
      args[2 * i - 1] = at
      args[2 * i] = string.format('%d:%d', at, first + added + i)
    end
    redis.call('ZADD', key, unpack(args))
    added = added + k
  end
end
if op == 'refund' then
  -- The oldest live units leave first: never a unit newer than the refunded ones, which
  -- are still in the log (the client sends only units still owed). An instant's units
  -- are dropped together and the ones that stay are added back as "<at>:1"..., keeping
  -- the numbering dense.
  -- Nothing owed: the admission's units have left the log, and none goes in their place.
  local left = 0
  if owed > 0 then left = math.min(cost, total) end
  total = total - left
  while left > 0 do
    local entry = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    local oldest = tonumber(entry[2])
    if not stored(oldest) or oldest > now + skew then
      return corrupt('sliding-log', 'entry ' .. show(entry[1]) .. ' at ' .. show(entry[2]))
    end
    local here = redis.call('ZCOUNT', key, oldest, oldest)
    redis.call('ZREMRANGEBYSCORE', key, oldest, oldest)
    if here > left then
      add_units(oldest, 0, here - left)
      left = 0
    else
      left = left - here
    end
  end
  bad = read_newest(total)
  if bad then return bad end
  if total > 0 then
    redis.call('PEXPIRE', key, math.ceil((newest + W - now) / 1000) + slack)
  else
    newest = nil
  end
  cost = 0
end
if total + cost <= limit then
  if cost > 0 then
    -- After a clock went back, log at the latest instant seen: the entry then
    -- stays longer, never shorter.
    local at = now
    if newest and newest > at then at = newest end
    if op == 'check' then
      local first = 0
      if newest == at then first = redis.call('ZCOUNT', key, at, at) end
      add_units(at, first, cost)
      redis.call('PEXPIRE', key, math.ceil((at + W - now) / 1000) + slack)
    end
    total, newest = total + cost, at
  end
  local reset = 0
  if newest then reset = newest + W - now end
  if reset < 0 then reset = 0 end
  return {1, limit, limit - total, 0, reset, 0}
end
-- The live unit whose leaving frees enough room for `cost`.
local needed = total + cost - limit
local freeing = tonumber(redis.call('ZRANGEBYSCORE', key, live, '+inf', 'WITHSCORES', 'LIMIT',
  needed - 1, 1)[2])
return {0, limit, limit - total, freeing + W - now, newest + W - now, 0}
