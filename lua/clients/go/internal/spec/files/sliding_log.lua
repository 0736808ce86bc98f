-- ratelab sliding window log: mirrors `SlidingLog` (decide, stamp, settle, reset,
-- forgettable_at) in crates/sliding-window/src/log.rs.
-- KEYS[1]  the log: a sorted set, one member per admitted unit, scored by the µs it was
--          admitted at (members "<µs>:<n>", n numbering the units of that µs from 1), and,
--          after a reset, the member "fence" scored by the latest instant the reset saw
--          (receipts of units logged at or before it give nothing back), and once a
--          receipt was settled, the member "ledger:<the ledger>" scored 2^53 (after every
--          instant), the ledger as `read_spent` in prologue.lua reads it after a state
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
-- The ledger's member, scored 2^53 (no unit is): read by every call but a peek, which
-- only leaves it out of its count.
local LEDGER_SCORE = 9007199254740992
local spent, ledger_name = spent_new(), nil
local found = redis.call('ZRANGEBYSCORE', key, LEDGER_SCORE, LEDGER_SCORE)
if #found > 0 then
  ledger_name, total = found[1], total - #found
  if op ~= 'peek' then
    local tail = #ledger_name - 7
    if #found > 1 or ledger_name:sub(1, 7) ~= 'ledger:' or tail < 24 or (tail - 24) % 16 ~= 0
        or tail > 24 + 16 * (MAX_GIVEN + MAX_SETTLED) then
      return corrupt('sliding-log', 'ledger ' .. show(ledger_name))
    end
    local err
    spent, err = read_spent('sliding-log', ledger_name, 7)
    if err then return err end
  end
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
  -- The ledger sorts last, and the fence may sort after the newest unit.
  local e = redis.call('ZRANGE', key, -3, -1, 'WITHSCORES')
  local i = #e - 1
  while i > 1 and (e[i] == 'fence' or e[i] == ledger_name) do i = i - 2 end
  local member, score = e[i], e[i + 1]
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
-- The key's TTL: until its last unit, its fence, and the instants its ledger holds
-- settlements for have left the window.
local function expire()
  local last = newest or fence_score
  if fence_score and fence_score > last then last = fence_score end
  local settled = spent_latest(spent)
  if settled and (last == nil or settled > last) then last = settled end
  if last then redis.call('PEXPIRE', key, ttl(last + W)) end
end
-- Writes the ledger's member as `spent` now holds it (none when it holds nothing).
local function store_ledger()
  local name = nil
  if spent_has_tail(spent) then name = 'ledger:' .. spent_tail(spent) end
  if name == ledger_name then return end
  if ledger_name then redis.call('ZREM', key, ledger_name) end
  if name then redis.call('ZADD', key, LEDGER_SCORE, name) end
  ledger_name = name
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
      local mark = 0
      if op == 'check' then
        local first = 0
        if newest == at then first = count_at(at) end
        add_units(at, first, cost)
        stamp, mark = at, first + cost + spent_given_at(spent, at)
      end
      total, newest = total + cost, at
      if op == 'check' then expire() end
      local reply = full_reply()
      reply[7], reply[8] = stamp, mark
      return reply
    end
    return full_reply()
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
  -- Receipts of instants that have left the log give nothing back.
  spent_expire(spent, math.max(0, cutoff + 1))
  if actual < cost then
    -- Units leave only from the instant the admission was logged at (units of one
    -- instant are interchangeable), while they are in the log and after the fence; once
    -- per stamp.
    local here = 0
    if fence_score == nil or stamp_at > fence_score then here = count_at(stamp_at) end
    if here > 0 and spent_take(spent, here) then
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
      spent_gave(spent, stamp_at, taken)
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
  store_ledger()
  bad = read_newest()
  if bad then return bad end
  expire()
  return full_reply()
end
-- reset: only a key that holds something a receipt could still claim keeps a tombstone,
-- the fence: every receipt so far names an instant up to the latest one seen.
local settled = spent_latest(spent)
if total > 0 or fence_score or (settled and settled + W > now) then
  local latest = now
  if newest and newest > latest then latest = newest end
  redis.call('DEL', key)
  redis.call('ZADD', key, latest, 'fence')
  redis.call('PEXPIRE', key, ttl(latest + W))
end
total, newest = 0, nil
return full_reply()
