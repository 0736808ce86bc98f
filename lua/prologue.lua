-- ratelab script prologue: prepended to every algorithm script when it is loaded
-- (the script sent to Redis is this file followed by the algorithm's file).
-- ARGV[1]  now, µs, or "" to read Redis TIME     ARGV[2]  cost
-- ARGV[3]  TTL slack, ms     ARGV[4...]  the algorithm's parameters, P[1], P[2], ...
-- Every argument must be a non-negative integer below 2^53 (exact in Lua's doubles);
-- `args_ok` says whether they all were. `now` is clamped at 2^52 µs, as the
-- in-memory runners clamp it.
local function integer(s)
  local n = tonumber(s)
  if n and n >= 0 and n % 1 == 0 and n < 9007199254740992 then return n end
  return nil
end
local now, cost, slack = integer(ARGV[1]), integer(ARGV[2]), integer(ARGV[3])
local args_ok = cost ~= nil and slack ~= nil and (now ~= nil or ARGV[1] == '')
local P = {}
for i = 4, #ARGV do
  P[i - 3] = integer(ARGV[i])
  if P[i - 3] == nil then args_ok = false end
end
if args_ok and now == nil then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
if args_ok and now > 4503599627370496 then now = 4503599627370496 end
