-- ratelab script prologue: prepended to every algorithm script when it is loaded
-- (the script sent to Redis is this file followed by the algorithm's file).
-- The protocol (every argument, reply and error, the key scheme): lua/README.md.
--
-- Version 2 added the operation (ARGV[6]: check, peek or refund) before the
-- parameters; version 3 has a refund say how long the admission it gives back still
-- weighs ("refund:<owed>"). Version 1 calls are still answered, as checks, and version 2
-- checks and peeks exactly as before; a version 2 refund, which cannot say it, is
-- invalid arguments.
--
-- ARGV[1]  the protocol version: "3" (or "2", the same layout without refunds), or
--          "1" for the version 1 layout (a check). In every version of the protocol the
--          first argument, so that a caller built for another version gets the error
--          "ratelab: protocol version 1, 2 or 3 expected, got ..." and never a decision
--          made from arguments it meant otherwise.
-- ARGV[2]  now, µs, or "" to read Redis TIME     ARGV[3]  cost
-- ARGV[4]  TTL slack, ms: keys live this much longer than their state needs, and a
--          stored instant may be this much ahead of now (a client clock that stepped back)
-- ARGV[5]  deadline: Unix µs on the Redis clock after which the call must not run, or ""
--          for none. A call that starts later writes nothing and answers the error
--          "ratelab expired: ..." (its caller has given up on it: charging it would
--          consume quota for a request that was never told it passed).
-- Versions 2 and 3:
-- ARGV[6]  the operation, `op` below:
--          check   decide a request of `cost`, consuming it if it passes (version 1's only
--                  operation);
--          peek    the decision a check of `cost` would get now, writing nothing (not even
--                  the sliding log's pruning): a check at the same instant decides the same;
--          refund:<owed>  give back up to `cost` units of one admission that still weighs on
--                  the key for `owed` µs (its reset_after, less the time since it was
--                  decided, erring low): only what it still holds comes back (see each
--                  algorithm's file and `Algorithm::refund` in crates/core), never above
--                  the capacity (a full key stays full); writes the state with its TTL,
--                  or deletes the key when it is full again; answers what a peek of cost 0
--                  would then.
--          Anything else: "ratelab <algorithm>: invalid arguments".
-- ARGV[7...]  the algorithm's parameters, P[1], P[2], ...
-- Version 1:
-- ARGV[6...]  the algorithm's parameters, P[1], P[2], ...; the operation is check.
-- A reset is no script: DEL of the key.
-- Every argument but the operation must be a non-negative integer below 2^53 (exact in
-- Lua's doubles); `args_ok` says whether they all were. `now` is clamped at 2^52 µs, as
-- the in-memory runners clamp it.
-- Stored state is never trusted: `read_string` and `stored` below let each script
-- answer "ratelab <algorithm>: corrupt state at <key>: <what>" for anything it could
-- not have written, instead of resetting, admitting everything or refusing forever.
if ARGV[1] ~= '1' and ARGV[1] ~= '2' and ARGV[1] ~= '3' then
  local got = 'nothing'
  if ARGV[1] == '' then got = '""'
  elseif ARGV[1] then got = ARGV[1]:sub(1, 32):gsub('[^%w%p ]', '?') end
  return redis.error_reply('ratelab: protocol version 1, 2 or 3 expected, got ' .. got)
end
-- Decimal only: Lua's `tonumber` would also read hexadecimal ("0x10") and stop at a
-- NUL byte ("1\0junk"), which the module and the Rust clients never accept.
local function integer(s)
  if s == nil or s:find('[xX%z]') then return nil end
  local n = tonumber(s)
  if n and n >= 0 and n % 1 == 0 and n < 9007199254740992 then return n end
  return nil
end
local now, cost, slack, deadline = integer(ARGV[2]), integer(ARGV[3]), integer(ARGV[4]),
  integer(ARGV[5])
local args_ok = cost ~= nil and slack ~= nil and (now ~= nil or ARGV[2] == '')
  and (deadline ~= nil or ARGV[5] == '')
local op, first = 'check', 6
if ARGV[1] ~= '1' then op, first = ARGV[6], 7 end
-- A refund says how long the admission it gives back still weighs on the key:
-- "refund:<owed>", owed in µs (see `refund` above), from version 3. A bare "refund"
-- is invalid.
local owed = nil
if ARGV[1] == '3' and op and op:sub(1, 7) == 'refund:' then
  owed = integer(op:sub(8))
  op = 'refund'
  if owed == nil then args_ok = false end
elseif op ~= 'check' and op ~= 'peek' then
  args_ok = false
end
local P = {}
for i = first, #ARGV do
  P[i - first + 1] = integer(ARGV[i])
  if P[i - first + 1] == nil then args_ok = false end
end
local clock
if args_ok and (now == nil or deadline ~= nil) then
  local t = redis.call('TIME')
  clock = t[1] * 1000000 + t[2]
end
if args_ok and deadline ~= nil and clock > deadline then
  return redis.error_reply(string.format(
    'ratelab expired: ran %d us after its deadline; nothing was charged', clock - deadline))
end
if args_ok and now == nil then now = clock end
if args_ok and now > 4503599627370496 then now = 4503599627370496 end
-- How far ahead of now a stored instant may be: the slack (a client clock may step
-- back that far), and one second for Redis clocks that differ after a failover.
local skew = 1000000
if args_ok then skew = skew + slack * 1000 end

-- The parameters some valid quota gives (`Quota` in crates/core/src/quota.rs), so
-- that the scripts refuse exactly what the module and the Rust runners refuse: no
-- parameters that no quota has (a tolerance that is not burst x T, a window shorter
-- than its limit) reach an algorithm.
-- A rate: `cap` units, one back every `T` µs (some period of at most 2^50 µs rounds
-- up to T: the shortest is cap x (T - 1) + 1).
local function rate_ok(T, cap)
  return T ~= nil and cap ~= nil and T >= 1 and cap >= 1 and cap <= 4294967295
    and cap * (T - 1) + 1 <= 1125899906842624
end
-- A window: `limit` units per `W` µs, at most one per µs, W at most 2^50 µs.
local function window_ok(W, limit)
  return W ~= nil and limit ~= nil and limit >= 1 and limit <= 4294967295
    and W >= limit and W <= 1125899906842624
end

-- At most 32 bytes of `raw`, printable: bytes outside ASCII punctuation and
-- alphanumerics as \xNN.
local function show(raw)
  local s = tostring(raw)
  local cut = ''
  if #s > 32 then s, cut = s:sub(1, 32), '...' end
  return '"' .. s:gsub('[^%w%p ]', function(c) return string.format('\\x%02x', c:byte()) end) .. cut .. '"'
end
local function corrupt(algorithm, what)
  return redis.error_reply(string.format('ratelab %s: corrupt state at %s: %s',
    algorithm, show(KEYS[1]):sub(2, -2), what))
end
-- A number as the scripts write them: finite, a non-negative integer below 2^53.
local function stored(x)
  return x ~= nil and x == x and x >= 0 and x % 1 == 0 and x < 9007199254740992
end
-- The key's string value (false when there is none), or an error reply when the
-- key holds another type or a string not `size` bytes long (when `size` is given).
local function read_string(algorithm, size)
  local raw = redis.pcall('GET', KEYS[1])
  if type(raw) == 'table' and raw.err then
    return nil, corrupt(algorithm, 'a ' .. redis.call('TYPE', KEYS[1]).ok .. ', not a string')
  end
  if raw and size and #raw ~= size then
    return nil, corrupt(algorithm, string.format('%d bytes, not %d: %s', #raw, size, show(raw)))
  end
  return raw
end
