-- ratelab leaky bucket (queue): mirrors `LeakyQueue::decide` in
-- crates/leaky-bucket/src/queue.rs.
-- KEYS[1]  the next free slot, µs, an integer string
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
  return redis.error_reply('ratelab leaky-queue: invalid arguments')
end

local raw, err = read_string('leaky-queue')
if err then return err end
local slot = 0
if raw then
  slot = integer(raw)
  if not slot then return corrupt('leaky-queue', 'not a timestamp: ' .. show(raw)) end
  if slot > now + depth + skew then
    return corrupt('leaky-queue', 'next slot ' .. raw .. ' beyond now + depth')
  end
end
if slot < now then slot = now end
if op == 'refund' then
  -- What the admission still holds; never before now: a free slot in the past is an
  -- empty queue.
  slot = slot - math.min(cost * T, owed)
  if slot <= now then
    slot = now
    if raw then redis.call('DEL', KEYS[1]) end
  else
    redis.call('SET', KEYS[1], slot, 'PX', math.ceil((slot - now) / 1000) + slack)
  end
  cost = 0
end
local after = slot + cost * T
if after - now <= depth then
  if cost > 0 then
    if op == 'check' then
      redis.call('SET', KEYS[1], after, 'PX', math.ceil((after - now) / 1000) + slack)
    end
    return {1, cap, math.floor((depth - (after - now)) / T), 0, after - now, slot - now}
  end
  return {1, cap, math.floor((depth - (after - now)) / T), 0, after - now, 0}
end
local room = depth - (slot - now)
if room < 0 then room = 0 end
return {0, cap, math.floor(room / T), after - depth - now, slot - now, 0}
