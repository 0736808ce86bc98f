-- ratelab GCRA: mirrors `Gcra::decide` in crates/gcra/src/lib.rs exactly.
-- KEYS[1]  the theoretical arrival time (TAT), µs, an integer string
-- ARGV[1]  now, µs, or "" to read Redis TIME     ARGV[2]  cost
-- ARGV[3]  TTL slack, ms (0 with Redis TIME)
-- ARGV[4]  emission interval T, µs   ARGV[5]  tolerance = burst x T, µs   ARGV[6]  burst
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, delay_us}: integers
-- below 2^53, exact in Lua's doubles (Redis passes numbers to commands exactly too).
-- (prologue.lua comes first: it sets now, cost, slack, P and args_ok.)
local T, tau, cap = P[1], P[2], P[3]
if not (args_ok and cap and cost <= cap and T >= 1) then
  return redis.error_reply('ratelab gcra: invalid arguments')
end

local tat = tonumber(redis.call('GET', KEYS[1])) or 0
if tat < now then tat = now end
local next = tat + cost * T
if next <= now + tau then
  if cost > 0 then
    redis.call('SET', KEYS[1], next, 'PX', math.ceil((next - now) / 1000) + slack)
  end
  return {1, cap, math.floor((now + tau - next) / T), 0, next - now, 0}
end
local room = now + tau - tat
if room < 0 then room = 0 end
return {0, cap, math.floor(room / T), next - tau - now, tat - now, 0}
