-- ratelab script prologue: prepended to every algorithm script when it is loaded
-- (the script sent to Redis is this file followed by the algorithm's file).
-- The protocol (every argument, reply and error, the key scheme): lua/README.md.
--
-- Version 4: a check answers the stamp of its admission, a settlement gives back from
-- one admission only what the key provably still holds of it (the rule of
-- crates/core/src/receipt.rs), a reset is a script call. Versions 1 to 3 are no longer
-- answered: their keys hold state in formats these scripts do not read, and version 3's
-- refund trusted a duration the caller computed.
--
-- ARGV[1]  the protocol version: "4". In every version of the protocol the first
--          argument, so that a caller built for another version gets the error
--          "ratelab: protocol version 4 expected, got ..." and never a decision made from
--          arguments it meant otherwise.
-- ARGV[2]  now, µs, or "" to read Redis TIME
-- ARGV[3]  cost: of the request (check, peek), or the cost the settled admission was
--          charged (settle); 0 for a reset
-- ARGV[4]  TTL slack, ms, at most 4503599627371 (2^52 µs, the range of instants): keys
--          live this much longer than their state needs, and a stored instant may be this
--          much ahead of now (a client clock that stepped back)
-- ARGV[5]  deadline: Unix µs on the Redis clock after which the call must not run, or ""
--          for none. A call that starts later writes nothing and answers the error
--          "ratelab expired: ..." (its caller has given up on it: charging it would
--          consume quota for a request that was never told it passed).
-- ARGV[6]  the operation, `op` below:
--          check   decide a request of `cost`, consuming it if it passes; an admission of a
--                  positive cost answers its stamp;
--          peek    the decision a check of `cost` would get now, writing nothing (not even
--                  the sliding log's pruning): a check at the same instant decides the same;
--          settle:<actual>:<stamp_at>:<stamp_mark>  the admission a check stamped so, of
--                  `cost`, finally counts for `actual` units: less gives back what the key
--                  provably still holds of it, more charges the difference as debt
--                  (`Algorithm::settle` in crates/core); answers what a peek of cost 0
--                  would then;
--          reset   the key back to full capacity, as if never seen, and no receipt issued
--                  before gives anything back afterwards (`Algorithm::reset`).
--          Anything else: "ratelab <algorithm>: invalid arguments".
-- ARGV[7...]  the algorithm's parameters, P[1], P[2], ...: exactly as many as it takes.
-- Every argument but the operation must be a non-negative integer below 2^53 (exact in
-- Lua's doubles); `args_ok` says whether they all were. `now` is clamped at 2^52 µs, as
-- the in-memory runners clamp it.
-- Replies: {allowed, limit, remaining, retry_after_us, reset_after_us, delay_us,
-- stamp_at, stamp_mark}, integers below 2^53.
-- Stored state is never trusted: `read_string` and `stored` below let each script
-- answer "ratelab <algorithm>: corrupt state at <key>: <what>" for anything it could
-- not have written, instead of resetting, admitting everything or refusing forever.
if ARGV[1] ~= '4' then
  local got = 'nothing'
  if ARGV[1] == '' then got = '""'
  elseif ARGV[1] then got = ARGV[1]:sub(1, 32):gsub('[^%w%p ]', '?') end
  return redis.error_reply('ratelab: protocol version 4 expected, got ' .. got)
end
-- Decimal only: Lua's `tonumber` would also read hexadecimal ("0x10") and stop at a
-- NUL byte ("1\0junk"), which the module and the Rust clients never accept.
local function integer(s)
  if s == nil or s:find('[xX%z]') then return nil end
  local n = tonumber(s)
  if n and n >= 0 and n % 1 == 0 and n < 9007199254740992 then return n end
  return nil
end
-- The most TTL slack, ms: 2^52 µs, the whole range of instants (no clock steps back
-- further), which also keeps slack x 1000 + 1 s below 2^53.
local MAX_SLACK = 4503599627371
local now, cost, slack, deadline = integer(ARGV[2]), integer(ARGV[3]), integer(ARGV[4]),
  integer(ARGV[5])
local args_ok = cost ~= nil and slack ~= nil and slack <= MAX_SLACK
  and (now ~= nil or ARGV[2] == '') and (deadline ~= nil or ARGV[5] == '')
-- The operation; a settlement's three numbers.
local op = ARGV[6]
local actual, stamp_at, stamp_mark
if op == nil then
  args_ok = false
elseif op:sub(1, 7) == 'settle:' then
  local a, at, mark = op:match('^settle:([^:]*):([^:]*):([^:]*)$')
  actual, stamp_at, stamp_mark = integer(a), integer(at), integer(mark)
  if actual == nil or stamp_at == nil or stamp_mark == nil then args_ok = false end
  op = 'settle'
elseif op == 'reset' then
  -- A reset takes no cost.
  if cost ~= 0 then args_ok = false end
elseif op ~= 'check' and op ~= 'peek' then
  args_ok = false
end
local P = {}
for i = 7, #ARGV do
  P[i - 6] = integer(ARGV[i])
  if P[i - 6] == nil then args_ok = false end
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
-- How far ahead of now a written instant may be: the slack (a client clock may step
-- back that far), and one second for Redis clocks that differ after a failover.
local skew = 1000000
if args_ok then skew = skew + slack * 1000 end
-- Whether `cost` (and a settlement's `actual`) fit in `cap` units.
local function fits(cap)
  return cost <= cap and (actual == nil or actual <= cap)
end

-- The ceilings of stored state (see "State" in lua/README.md). Settlements charge debt
-- whatever the room, once per receipt, so a key may owe far more than its capacity: a
-- debt may end up to 2^52 + 2^51 µs (with `now` at most 2^52 and a tolerance below
-- 2^50 + 2^32, every sum the algorithms make stays below 2^53); a window may count up
-- to 2^36 units (x 65536 steps, below 2^53); a sliding log may hold 100000 units (one
-- member each). A settlement or reset that would go past one answers "ratelab
-- <algorithm>: out of range at <key>: <what>" and writes nothing. A debt's ledger
-- stops at 2^52 (LEDGER_CEILING in crates/core/src/receipt.rs): a key reset again and
-- again while in debt reaches it, and then gives nothing back to any receipt until it
-- is forgotten.
local MAX_END = 6755399441055744
local MAX_COUNT = 68719476736
local MAX_LOG_UNITS = 100000
local LEDGER_CEILING = 4503599627370496

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
local function out_of_range(algorithm, what)
  return redis.error_reply(string.format('ratelab %s: out of range at %s: %s',
    algorithm, show(KEYS[1]):sub(2, -2), what))
end
-- A number as the scripts write them: finite, a non-negative integer below 2^53.
local function stored(x)
  return x ~= nil and x == x and x >= 0 and x % 1 == 0 and x < 9007199254740992
end
-- The key's string value (false when there is none), or an error reply when the
-- key holds another type or a string of another size: `size` bytes, or for a debt
-- (`shifts` true) `size` bytes followed by 0 to 64 shifts of 24 bytes.
local MAX_RECENT_SHIFTS = 64
local function read_string(algorithm, size, shifts)
  local raw = redis.pcall('GET', KEYS[1])
  if type(raw) == 'table' and raw.err then
    return nil, corrupt(algorithm, 'a ' .. redis.call('TYPE', KEYS[1]).ok .. ', not a string')
  end
  if raw and #raw ~= size then
    local tail = #raw - size
    if not shifts then
      return nil, corrupt(algorithm, string.format('%d bytes, not %d: %s', #raw, size, show(raw)))
    end
    if tail < 0 or tail % 24 ~= 0 or tail > 24 * MAX_RECENT_SHIFTS then
      return nil, corrupt(algorithm, string.format('%d bytes, not %d plus 24 per shift, up to 64: %s',
        #raw, size, show(raw)))
    end
  end
  return raw
end
-- The PX of a key that may be forgotten at `at` (µs, after now): the time until then,
-- rounded up to the millisecond, plus the slack.
local function ttl(at)
  return math.ceil((at - now) / 1000) + slack
end

-- A debt's ledger (`Shifts` in crates/core/src/receipt.rs): its total, what a stamp's
-- mark holds, kept in the state; and its most recent shifts (at most 64, oldest first),
-- stored after the state, 24 bytes each (struct '<ddd'), read here as a list `recent` of
-- {before, position, at}: a refund of an admission other than the last, or a reset,
-- moved every admission after `position` earlier by the next shift's `before` (or the
-- total) less this one's, at the instant `at`. A reset's position is 0. Only a
-- settlement or a reset reads them; a check writes their bytes back as they were.
--
-- The shifts stored after the first `size` bytes of a debt's `raw` state, checked as
-- `Shifts::from_parts` accepts them against the ledger's `total` (each number an
-- integer below 2^53, each `before` below the next one's, the last one's below the
-- total): the list, or nil and the error reply.
local function read_shifts(algorithm, raw, size, total)
  local recent = {}
  local n = (#raw - size) / 24
  for i = 1, n do
    local before, position, at = struct.unpack('<ddd', raw, size + 24 * (i - 1) + 1)
    if not (stored(before) and stored(position) and stored(at)) then
      return nil, corrupt(algorithm, string.format('shift %d of %d: before %s, position %s, at %s',
        i, n, tostring(before), tostring(position), tostring(at)))
    end
    if i > 1 and recent[i - 1][1] >= before then
      return nil, corrupt(algorithm, string.format('shift %d of %d: before %d, not below %d',
        i - 1, n, recent[i - 1][1], before))
    end
    recent[i] = {before, position, at}
  end
  if n > 0 and recent[n][1] >= total then
    return nil, corrupt(algorithm, string.format('shift %d of %d: before %d, not below %d',
      n, n, recent[n][1], total))
  end
  return recent
end
-- What follows a debt's state when it is written: the shifts a settlement or a reset
-- read (and changed), or the bytes a check read after the state, as they were (`kept`).
local function shifts_tail(kept, recent)
  if #recent == 0 then return kept end
  local parts = {}
  for i = 1, #recent do
    parts[i] = struct.pack('<ddd', recent[i][1], recent[i][2], recent[i][3])
  end
  return table.concat(parts)
end
-- A shift recorded at a position no double holds exactly (a stamp's at + mark from 2^53
-- up, reachable only near the ceilings) cannot be stored: out of range.
local function shifts_out_of_range(recent)
  return #recent > 0 and recent[#recent][2] >= 9007199254740992
end

-- `Shifts::moved`: how far the shifts made since `mark` moved an admission at
-- `position` (made at or before it: its own refund's too, so that a replayed stamp finds
-- its end moved by what it gave): exactly, for those in `recent`; the whole of any older
-- one. nil for a mark
-- ahead of the total (a stamp of another incarnation of the key). `position` may be
-- 2^53 or more (then inexact, but still above every stored position: the comparisons
-- hold).
local function shifts_moved(total, recent, mark, position)
  if mark > total then return nil end
  local n = #recent
  local covered = total
  if n > 0 then covered = recent[1][1] end
  local moved = math.max(0, covered - mark)
  for i = 1, n do
    local after = total
    if i < n then after = recent[i + 1][1] end
    if recent[i][1] >= mark and recent[i][2] <= position then
      moved = moved + (after - recent[i][1])
    end
  end
  return moved
end
-- `Shifts::record`: records a shift of `amount` at `position`, at `at`, dropping the
-- oldest of 64; the new total, or nil (nothing recorded) when it would reach the
-- ceiling.
local function shifts_record(total, recent, position, at, amount)
  if total + amount >= LEDGER_CEILING then return nil end
  if #recent == MAX_RECENT_SHIFTS then table.remove(recent, 1) end
  recent[#recent + 1] = {total, position, at}
  return total + amount
end
-- `Shifts::expire`: forgets the shifts no outstanding admission can have been moved
-- by: all of them when the state is full again at `full_at <= at_now`; otherwise those
-- made a `tolerance` ago or more (every admission before them has ended by then).
local function shifts_expire(recent, full_at, at_now, tolerance)
  local n = #recent
  local old = n
  if full_at > at_now then
    old = 0
    while old < n and recent[old + 1][3] + tolerance <= at_now do old = old + 1 end
  end
  if old == 0 then return end
  for i = 1, n do recent[i] = recent[i + old] end
end

-- The debts' rule (`debt_release` in crates/core/src/receipt.rs): what a settlement
-- deciding at `at_now` gives back, in µs of debt, of an admission stamped (stamp_at,
-- stamp_mark) that would give back `unused` µs, on a state full again at `full_at` whose
-- admissions end at most `tolerance` after their instant; and the ledger's total after
-- (`recent` changes in place). First the shifts older than the tolerance are forgotten.
-- Nothing at the ceiling, for a stamp of another incarnation of the key (the total
-- behind its mark), an end that has passed, or an end later than the state's (a replay
-- of the last admission). The admission's end is its stamp less the shifts made since
-- its mark before its position (`stamp_at + stamp_mark`). Giving back from any
-- admission but the last moves those after it: a shift is recorded there.
local function debt_release(full_at, ledger, recent, at_now, unused, tolerance)
  shifts_expire(recent, full_at, at_now, tolerance)
  if ledger >= LEDGER_CEILING then return 0, ledger end
  local position = stamp_at + stamp_mark
  local moved = shifts_moved(ledger, recent, stamp_mark, position)
  if moved == nil then return 0, ledger end
  local e = stamp_at - moved
  if e <= at_now or e > full_at then return 0, ledger end
  local back = math.min(unused, e - at_now)
  if e ~= full_at then
    -- A shift the ledger cannot record: nothing given.
    local total = shifts_record(ledger, recent, position, at_now, back)
    if total == nil then return 0, ledger end
    ledger = total
  end
  return back, ledger
end
-- `debt_reset`: the ledger's total after a reset at `at_now` of a state full again at
-- `full_at` (`recent` changes in place): a shift at position 0 past the end of every
-- admission still outstanding; unchanged when none can be; at the ceiling, with no
-- recent shifts, when the shift cannot be recorded.
local function debt_reset(full_at, ledger, recent, at_now, tolerance)
  shifts_expire(recent, full_at, at_now, tolerance)
  if ledger == 0 and #recent == 0 and full_at <= at_now then return 0 end
  local total = shifts_record(ledger, recent, 0, at_now, math.max(0, full_at - at_now) + 1)
  if total == nil then
    for i = #recent, 1, -1 do recent[i] = nil end
    return LEDGER_CEILING
  end
  return total
end
