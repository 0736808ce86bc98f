-- ratelab sliding window log: mirrors `SlidingLog` (decide, stamp, settle, reset,
-- forgettable_at) in crates/sliding-window/src/log.rs.
-- KEYS[1]  the log: a sorted set, one member per admitted unit, scored by the µs it was
--          admitted at (members "<µs>:<n>", n numbering the units of that µs from 1), and,
--          after a reset, the member "fence" scored by the latest instant the reset saw
--          (receipts of units logged at or before it give nothing back)
-- ARGV[1]  protocol version     ARGV[2]  now, µs, or "" to read Redis TIME     ARGV[3]  cost
-- ARGV[4]  TTL slack, ms (0 with Redis TIME)     ARGV[5]  deadline, Unix µs, or ""
-- ARGV[6]  the operation: check, peek, settle:<actual>:<stamp_at>:<stamp_mark> or reset
-- P[1]  window length W, µs     P[2]  limit per window
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, delay_us, stamp_at,
-- stamp_mark}.
-- O(log n + units added, removed or expired) per call.
-- (prologue.lua comes first: it checks the protocol version and the deadline, and sets
-- now, cost, op, actual, stamp_at, stamp_mark, slack, skew, P, args_ok, the ceilings and
-- the helpers.)
local W, limit = P[1], P[2]
-- At most 10 000 units: one member per unit (MAX_STORED_LOG_LIMIT in
-- crates/sliding-window/src/lib.rs).
if not (args_ok and #P == 2 and window_ok(W, limit) and limit <= 10000 and fits(limit)) then
  return redis.error_reply('ratelab sliding-log: invalid arguments')
end

local key = KEYS[1]
-- A unit admitted at `at` counts while at > cutoff = now - W: scores above `live`.
local cutoff = now - W
local live = string.format('(%d', cutoff)
-- A command Redis refused: another type is corrupt state; anything else (a read-only
-- replica, memory full) passes as Redis said it, so that a client sees an outage.
local function refused(reply)
  if reply.err:sub(1, 9) == 'WRONGTYPE' then
    return corrupt('sliding-log', 'a ' .. redis.call('TYPE', key).ok .. ', not a zset')
  end
  return reply
end
-- Live units, and the fence's score (fence - 1) while it fences. A peek writes nothing,
-- not even the pruning: it counts the live units only.
local total, fence_score
if op == 'peek' then
  local counted = redis.pcall('ZCOUNT', key, live, '+inf')
  if type(counted) == 'table' and counted.err then return refused(counted) end
  total = counted
else
  local removed = redis.pcall('ZREMRANGEBYSCORE', key, '-inf', cutoff)
  if type(removed) == 'table' and removed.err then return refused(removed) end
  total = redis.call('ZCARD', key)
end
local fence_text = redis.call('ZSCORE', key, 'fence')
if fence_text then
  local score = tonumber(fence_text)
  if score == nil or score > cutoff then
    if not stored(score) or score > now + skew then
      return corrupt('sliding-log', 'fence at ' .. show(fence_text))
    end
    fence_score, total = score, total - 1
  end
end
if total > MAX_LOG_UNITS then
  return corrupt('sliding-log', string.format('%d units, more than %d', total, MAX_LOG_UNITS))
end
-- The instant of a member as the scripts write them ("<at>:<n>" scored `at`, n from 1),
-- or nil.
local function unit(member, score)
  local at = tonumber(score)
  if not stored(at) or at > now + skew then return nil end
  local n = member:match('^' .. string.format('%d', at) .. ':([1-9]%d*)$')
  if n == nil then return nil end
  return at
end
local function bad_entry(member, score)
  return corrupt('sliding-log', 'entry ' .. show(member) .. ' at ' .. show(score))
end
-- The newest unit's instant (the fence may sort after it), checked.
local newest = nil
local function read_newest()
  newest = nil
  if total == 0 then return nil end
  local e = redis.call('ZRANGE', key, -2, -1, 'WITHSCORES')
  local member, score = e[#e - 1], e[#e]
  if member == 'fence' then member, score = e[1], e[2] end
  newest = unit(member, score)
  if newest == nil then return bad_entry(member, score) end
end
local bad = read_newest()
if bad then return bad end
-- Units logged at `at` (the fence is no unit).
local function count_at(at)
  local n = redis.call('ZCOUNT', key, at, at)
  if fence_score == at then n = n - 1 end
  return n
end
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
-- The key's TTL: until its last unit, and its fence, have left the window.
local function expire()
  local last = newest or fence_score
  if fence_score and fence_score > last then last = fence_score end
  if last then redis.call('PEXPIRE', key, ttl(last + W)) end
end
-- What a peek of cost 0 answers.
local function full_reply()
  local reset = 0
  if newest then reset = math.max(0, newest + W - now) end
  return {1, limit, math.max(0, limit - total), 0, reset, 0, 0, 0}
end

if op == 'check' or op == 'peek' then
  if total + cost <= limit or cost == 0 then
    local stamp = 0
    if cost > 0 then
      -- After a clock went back, log at the latest instant seen: the entry then stays
      -- longer, never shorter.
      local at = now
      if newest and newest > at then at = newest end
      if op == 'check' then
        local first = 0
        if newest == at then first = count_at(at) end
        add_units(at, first, cost)
        stamp = at
      end
      total, newest = total + cost, at
      if op == 'check' then expire() end
    end
    local reply = full_reply()
    reply[7] = stamp
    return reply
  end
  -- The live unit whose leaving frees enough room for `cost`, oldest first; the fence
  -- sorts after the units of its own instant.
  local offset = total + cost - limit - 1
  if fence_score then
    local before = redis.call('ZCOUNT', key, live, fence_score) - 1
    if before <= offset then offset = offset + 1 end
  end
  local e = redis.call('ZRANGEBYSCORE', key, live, '+inf', 'WITHSCORES', 'LIMIT', offset, 1)
  local freeing = unit(e[1], e[2])
  if freeing == nil then return bad_entry(e[1], e[2]) end
  return {0, limit, math.max(0, limit - total), freeing + W - now, newest + W - now, 0, 0, 0}
end
if op == 'settle' then
  if actual < cost then
    -- Units leave only from the instant the admission was logged at (units of one
    -- instant are interchangeable), while they are in the log and after the fence.
    if fence_score == nil or stamp_at > fence_score then
      local here = count_at(stamp_at)
      local taken = math.min(cost - actual, here)
      -- The last `taken` numbers of that instant go, checked first: they must be units the
      -- scripts wrote there.
      local from = here - taken + 1
      while from <= here do
        local names = {}
        for i = from, math.min(here, from + 999) do
          names[#names + 1] = string.format('%d:%d', stamp_at, i)
        end
        local scores = redis.call('ZMSCORE', key, unpack(names))
        for i = 1, #names do
          if tonumber(scores[i]) ~= stamp_at then
            return corrupt('sliding-log', string.format('no unit %s', show(names[i])))
          end
        end
        from = from + #names
      end
      from = here - taken + 1
      while from <= here do
        local names = {}
        for i = from, math.min(here, from + 999) do
          names[#names + 1] = string.format('%d:%d', stamp_at, i)
        end
        redis.call('ZREM', key, unpack(names))
        from = from + #names
      end
      total = total - taken
    end
  elseif actual > cost then
    -- Past the limit if need be, logged as an admission now.
    local extra = actual - cost
    if total + extra > MAX_LOG_UNITS then
      return out_of_range('sliding-log', string.format('%d units, past %d', total + extra,
        MAX_LOG_UNITS))
    end
    local at = now
    if newest and newest > at then at = newest end
    local first = 0
    if newest == at then first = count_at(at) end
    add_units(at, first, extra)
    total = total + extra
  end
  bad = read_newest()
  if bad then return bad end
  expire()
  return full_reply()
end
-- reset: only a key that holds something a receipt could still claim keeps a tombstone,
-- the fence: every receipt so far names an instant up to the latest one seen.
if total > 0 or fence_score then
  local latest = now
  if newest and newest > latest then latest = newest end
  redis.call('DEL', key)
  redis.call('ZADD', key, latest, 'fence')
  redis.call('PEXPIRE', key, ttl(latest + W))
end
total, newest = 0, nil
return full_reply()
