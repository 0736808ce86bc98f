-- ratelab GCRA: mirrors `Gcra::decide` in crates/gcra/src/lib.rs exactly.
-- KEYS[1]  the theoretical arrival time (TAT), µs, an integer string
-- ARGV[1]  protocol version     ARGV[2]  now, µs, or "" to read Redis TIME     ARGV[3]  cost
-- ARGV[4]  TTL slack, ms (0 with Redis TIME)     ARGV[5]  deadline, Unix µs, or ""
-- ARGV[6]  (version 2) the operation: check, peek or refund:<owed>; then the parameters P[1], ...
--          from ARGV[7] (version 1: from ARGV[6], and the operation is check):
-- P[1]  emission interval T, µs   P[2]  tolerance = burst x T, µs   P[3]  burst
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, delay_us}: integers
-- below 2^53, exact in Lua's doubles (Redis passes numbers to commands exactly too).
-- (prologue.lua comes first: it checks the protocol version and the deadline, and sets
-- now, cost, op, slack, skew, P, args_ok and the helpers read_string, stored, corrupt and
-- show.) op: check, peek (writes nothing) or refund (see prologue.lua; `owed` is its µs).
local T, tau, cap = P[1], P[2], P[3]
if not (args_ok and rate_ok(T, cap) and tau == cap * T and cost <= cap) then
  return redis.error_reply('ratelab gcra: invalid arguments')
end

local raw, err = read_string('gcra')
if err then return err end
local tat = 0
if raw then
  tat = integer(raw)
  if not tat then return corrupt('gcra', 'not a timestamp: ' .. show(raw)) end
  -- Written as at most now + tolerance: anything later would refuse for longer
  -- than this quota can.
  if tat > now + tau + skew then
    return corrupt('gcra', 'timestamp ' .. raw .. ' beyond now + tolerance')
  end
end
if tat < now then tat = now end
if op == 'refund' then
  -- What the admission still holds of the debt; never before now: a TAT in the past
  -- already means full capacity.
  tat = tat - math.min(cost * T, owed)
  if tat <= now then
    tat = now
    if raw then redis.call('DEL', KEYS[1]) end
  else
    redis.call('SET', KEYS[1], tat, 'PX', math.ceil((tat - now) / 1000) + slack)
  end
  cost = 0
end
local next = tat + cost * T
if next <= now + tau then
  if cost > 0 and op == 'check' then
    redis.call('SET', KEYS[1], next, 'PX', math.ceil((next - now) / 1000) + slack)
  end
  return {1, cap, math.floor((now + tau - next) / T), 0, next - now, 0}
end
local room = now + tau - tat
if room < 0 then room = 0 end
return {0, cap, math.floor(room / T), next - tau - now, tat - now, 0}
