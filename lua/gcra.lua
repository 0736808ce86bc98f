-- ratelab GCRA: mirrors `Gcra::decide` in crates/gcra/src/lib.rs exactly.
-- KEYS[1]  the theoretical arrival time (TAT), µs, an integer string
-- ARGV[1]  now, µs, or "" to read Redis TIME     ARGV[2]  cost
-- ARGV[3]  TTL slack, ms (0 with Redis TIME)
-- ARGV[4]  emission interval T, µs   ARGV[5]  tolerance = burst x T, µs   ARGV[6]  burst
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, delay_us}: integers
-- below 2^53, exact in Lua's doubles (Redis passes numbers to commands exactly too).
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local cost, slack = tonumber(ARGV[2]), tonumber(ARGV[3])
local T, tau, cap = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
if not (cost and slack and T and tau and cap) or now < 0 or cost < 0 or cost > cap
    or cost % 1 ~= 0 or now % 1 ~= 0 or T < 1 then
  return redis.error_reply('ratelab gcra: invalid arguments')
end
if now > 4503599627370496 then now = 4503599627370496 end

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
