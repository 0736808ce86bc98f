-- ratelab script prologue: prepended to every algorithm script when it is loaded
-- (the script sent to Redis is this file followed by the algorithm's file).
-- The protocol (every argument, reply and error, the key scheme): lua/README.md.
--
-- Version 5: a check answers the stamp of its admission, which no other admission of the
-- key shares (a window's mark counts its units); a settlement gives back from one
-- admission only what the key provably still holds of it (the rule of
-- crates/core/src/receipt.rs), and never twice. A reset is a script call. Versions 1 to
-- 4 are no longer answered: versions 1 to 3's keys hold state in formats these scripts
-- do not read, version 3's refund trusted a duration the caller computed, and version
-- 4's stamps could be settled again and again.
--
-- ARGV[1]  the protocol version: "5". In every version of the protocol the first
--          argument, so that a caller built for another version gets the error
--          "ratelab: protocol version 5 expected, got ..." and never a decision made from
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
if ARGV[1] ~= '5' then
  local got = 'nothing'
  if ARGV[1] == '' then got = '""'
  elseif ARGV[1] then got = ARGV[1]:sub(1, 32):gsub('[^%w%p ]', '?') end
  return redis.error_reply('ratelab: protocol version 5 expected, got ' .. got)
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
-- (`tail` true) `size` bytes followed by 0 to 64 shifts of 24 bytes, or for a window
-- (`tail` 'spent') `size` bytes followed by nothing or by its ledger (24 bytes, then
-- 16 per entry, up to 64 tallies and 64 settled stamps).
local MAX_RECENT_SHIFTS = 64
local MAX_GIVEN, MAX_SETTLED = 64, 64
local function read_string(algorithm, size, tail_kind)
  local raw = redis.pcall('GET', KEYS[1])
  if type(raw) == 'table' and raw.err then
    return nil, corrupt(algorithm, 'a ' .. redis.call('TYPE', KEYS[1]).ok .. ', not a string')
  end
  if raw and #raw ~= size then
    local tail = #raw - size
    if tail_kind == 'spent' then
      if tail < 24 or (tail - 24) % 16 ~= 0 or tail > 24 + 16 * (MAX_GIVEN + MAX_SETTLED) then
        return nil, corrupt(algorithm, string.format(
          '%d bytes, not %d (plus a ledger of 24 and 16 per entry): %s', #raw, size, show(raw)))
      end
    elseif not tail_kind then
      return nil, corrupt(algorithm, string.format('%d bytes, not %d: %s', #raw, size, show(raw)))
    elseif tail < 0 or tail % 24 ~= 0 or tail > 24 * MAX_RECENT_SHIFTS then
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
-- `position` (made at or before it), and how much of that its own settlements gave
-- (those made at exactly its position): exactly, for those in `recent`; the whole of any
-- older one, in both. nil for a mark ahead of the total (a stamp of another incarnation
-- of the key). `position` may be 2^53 or more (then inexact, but still above every
-- stored position: the comparisons hold).
local function shifts_moved(total, recent, mark, position)
  if mark > total then return nil end
  local n = #recent
  local covered = total
  if n > 0 then covered = recent[1][1] end
  local moved = math.max(0, covered - mark)
  local own = moved
  for i = 1, n do
    local after = total
    if i < n then after = recent[i + 1][1] end
    if recent[i][1] >= mark and recent[i][2] <= position then
      moved = moved + (after - recent[i][1])
      if recent[i][2] == position then own = own + (after - recent[i][1]) end
    end
  end
  return moved, own
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
-- behind its mark), an end that has passed, an end later than the state's, or an
-- admission whose own settlements gave `unused` already (a replay). The admission's end
-- is its stamp less the shifts made since its mark at or before its position
-- (`stamp_at + stamp_mark`). Every give-back is recorded as a shift at that position,
-- the last admission's too: no later admission is then stamped as this one was.
local function debt_release(full_at, ledger, recent, at_now, unused, tolerance)
  shifts_expire(recent, full_at, at_now, tolerance)
  if ledger >= LEDGER_CEILING then return 0, ledger end
  local position = stamp_at + stamp_mark
  local moved, own = shifts_moved(ledger, recent, stamp_mark, position)
  if moved == nil then return 0, ledger end
  local e = stamp_at - moved
  if e <= at_now or e > full_at then return 0, ledger end
  local back = math.min(math.max(0, unused - own), e - at_now)
  if back == 0 then return 0, ledger end
  -- A shift the ledger cannot record: nothing given.
  local total = shifts_record(ledger, recent, position, at_now, back)
  if total == nil then return 0, ledger end
  return back, total
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

-- A window's ledger (`Spent` in crates/core/src/spent.rs): after the window's state
-- (which holds the fence), nothing, or 24 bytes (struct '<ddd': the floor's at and mark,
-- the number of tallies) followed by the tallies {at, units given back there} in
-- increasing order of at, then the settled stamps {at, mark} in increasing order, 16
-- bytes each. Read here as {floor_at, floor_mark, given = {...}, settled = {...}}.
local function spent_new()
  return {floor_at = 0, floor_mark = 0, given = {}, settled = {}}
end
local function stamp_less(a_at, a_mark, b_at, b_mark)
  return a_at < b_at or (a_at == b_at and a_mark < b_mark)
end
-- The ledger after the first `size` bytes of a window's `raw` state, checked as
-- `Spent::from_parts` accepts it: the ledger, or nil and the error reply.
local function read_spent(algorithm, raw, size)
  local spent = spent_new()
  if not raw or #raw == size then return spent end
  local entries = (#raw - size - 24) / 16
  local fa, fm, n = struct.unpack('<ddd', raw, size + 1)
  if not (stored(fa) and stored(fm) and stored(n) and n <= MAX_GIVEN and n <= entries) then
    return nil, corrupt(algorithm, string.format('ledger floor %s:%s, %s tallies of %d entries',
      tostring(fa), tostring(fm), tostring(n), entries))
  end
  local pairs_ = {}
  for i = 1, entries do
    local a, b = struct.unpack('<dd', raw, size + 24 + 16 * (i - 1) + 1)
    if not (stored(a) and stored(b)) then
      return nil, corrupt(algorithm, string.format('ledger entry %d of %d: %s, %s', i, entries,
        tostring(a), tostring(b)))
    end
    pairs_[i] = {a, b}
  end
  spent.floor_at, spent.floor_mark = fa, fm
  local ok = entries - n <= MAX_SETTLED
  for i = 1, n do
    local e = pairs_[i]
    if e[2] == 0 or (i > 1 and spent.given[i - 1][1] >= e[1]) then ok = false end
    spent.given[i] = e
  end
  for i = n + 1, entries do
    local e = pairs_[i]
    local prev_at, prev_mark = fa, fm
    if i > n + 1 then prev_at, prev_mark = pairs_[i - 1][1], pairs_[i - 1][2] end
    if not stamp_less(prev_at, prev_mark, e[1], e[2]) then ok = false end
    spent.settled[i - n] = e
  end
  if not ok then
    return nil, corrupt(algorithm, string.format('ledger of %d entries out of order', entries))
  end
  return spent
end
local function spent_has_tail(spent)
  return spent.floor_at ~= 0 or spent.floor_mark ~= 0 or #spent.given > 0 or #spent.settled > 0
end
-- The bytes that follow a window's state.
local function spent_tail(spent)
  if not spent_has_tail(spent) then return '' end
  local parts = {struct.pack('<ddd', spent.floor_at, spent.floor_mark, #spent.given)}
  for i = 1, #spent.given do parts[#parts + 1] = struct.pack('<dd', spent.given[i][1], spent.given[i][2]) end
  for i = 1, #spent.settled do
    parts[#parts + 1] = struct.pack('<dd', spent.settled[i][1], spent.settled[i][2])
  end
  return table.concat(parts)
end
-- `Spent::given_at`: the units given back at `at`.
local function spent_given_at(spent, at)
  for i = 1, #spent.given do
    if spent.given[i][1] == at then return spent.given[i][2] end
  end
  return 0
end
-- `Spent::raise_floor`.
local function spent_raise_floor(spent, at, mark)
  if stamp_less(spent.floor_at, spent.floor_mark, at, mark) then
    spent.floor_at, spent.floor_mark = at, mark
    local kept = {}
    for i = 1, #spent.settled do
      local e = spent.settled[i]
      if stamp_less(at, mark, e[1], e[2]) then kept[#kept + 1] = e end
    end
    spent.settled = kept
  end
end
-- `Spent::take`: whether the stamp (stamp_at, stamp_mark) may give back, `counted`
-- units being counted at its window or instant; if so it is listed as settled.
local function spent_take(spent, counted)
  if stamp_mark == 0 or stamp_mark > counted + spent_given_at(spent, stamp_at)
      or not stamp_less(spent.floor_at, spent.floor_mark, stamp_at, stamp_mark) then
    return false
  end
  local i = 1
  while i <= #spent.settled and stamp_less(spent.settled[i][1], spent.settled[i][2], stamp_at, stamp_mark) do
    i = i + 1
  end
  if i <= #spent.settled and spent.settled[i][1] == stamp_at and spent.settled[i][2] == stamp_mark then
    return false
  end
  table.insert(spent.settled, i, {stamp_at, stamp_mark})
  if #spent.settled > MAX_SETTLED then
    local oldest = table.remove(spent.settled, 1)
    spent_raise_floor(spent, oldest[1], oldest[2])
  end
  return true
end
-- `Spent::gave`: tallies `units` given back at `at`.
local function spent_gave(spent, at, units)
  if units == 0 then return end
  local i = 1
  while i <= #spent.given and spent.given[i][1] < at do i = i + 1 end
  if i <= #spent.given and spent.given[i][1] == at then
    spent.given[i][2] = spent.given[i][2] + units
    return
  end
  table.insert(spent.given, i, {at, units})
  if #spent.given > MAX_GIVEN then
    local oldest = table.remove(spent.given, 1)
    spent_raise_floor(spent, oldest[1], 9007199254740991)
  end
end
-- `Spent::expire`: forgets what concerns windows or instants before `live`.
local function spent_expire(spent, live)
  local settled, given = {}, {}
  for i = 1, #spent.settled do
    if spent.settled[i][1] >= live then settled[#settled + 1] = spent.settled[i] end
  end
  for i = 1, #spent.given do
    if spent.given[i][1] >= live then given[#given + 1] = spent.given[i] end
  end
  spent.settled, spent.given = settled, given
  if spent.floor_at < live then spent.floor_at, spent.floor_mark = 0, 0 end
end
-- `Spent::latest`: the latest window or instant it holds anything for, or nil.
local function spent_latest(spent)
  local latest = nil
  if #spent.given > 0 then latest = spent.given[#spent.given][1] end
  if #spent.settled > 0 then
    local at = spent.settled[#spent.settled][1]
    if latest == nil or at > latest then latest = at end
  end
  if spent.floor_at ~= 0 or spent.floor_mark ~= 0 then
    if latest == nil or spent.floor_at > latest then latest = spent.floor_at end
  end
  return latest
end

-- GCRA and the leaky queue (`Schedule` in crates/core/src/toolkit/schedule.rs, the
-- debts' receipts in crates/core/src/toolkit/debt.rs): one instant, the key's full-again
-- instant F (GCRA's TAT, the queue's next free slot), moved c x T later by each
-- admission, with room for tau = burst x T of debt ahead of now; with `queue`, an
-- admission also says how long to wait for its slot. KEYS[1] holds struct '<ddd': F,
-- the ledger's total and the latest instant the key was written at, then the ledger's
-- recent shifts (`read_shifts`). `algorithm` names it in errors, `instant` names F.
local function run_schedule(algorithm, instant, queue)
  local T, tau, cap = P[1], P[2], P[3]
  if not (args_ok and #P == 3 and rate_ok(T, cap) and tau == cap * T and fits(cap)) then
    return redis.error_reply('ratelab ' .. algorithm .. ': invalid arguments')
  end
  local raw, err = read_string(algorithm, 24, true)
  if err then return err end
  local full, ledger, latest = 0, 0, 0
  -- The ledger's recent shifts (read by a settlement or a reset), or their bytes as
  -- read (kept by a check).
  local recent, kept = {}, ''
  -- The key holds something a receipt could still claim.
  local held = false
  -- Once a settlement moved other admissions (a ledger), the key is kept a tolerance
  -- longer: no admission ends later than its instant plus the tolerance.
  local function forgettable_at()
    if ledger == 0 then return full end
    return full + tau
  end
  if raw then
    full, ledger, latest = struct.unpack('<ddd', raw)
    if not (stored(full) and stored(ledger) and ledger <= LEDGER_CEILING and stored(latest)
        and full <= MAX_END) then
      return corrupt(algorithm, string.format('%s %s, ledger %s, written at %s', instant,
        tostring(full), tostring(ledger), tostring(latest)))
    end
    if latest > now + skew then
      return corrupt(algorithm, string.format('written at %d, after now', latest))
    end
    if op == 'settle' or op == 'reset' then
      recent, err = read_shifts(algorithm, raw, 24, ledger)
      if err then return err end
    elseif #raw > 24 then
      kept = raw:sub(25)
    end
    -- Nothing it holds can still be claimed: a key never seen.
    held = forgettable_at() > now
    if not held then full, ledger, latest, recent, kept = 0, 0, 0, {}, '' end
  end
  -- What a request of `c` at `t` gets (cost 0 always passes, and a peek reserves no
  -- slot); F after it.
  local function decide(t, c)
    local start = math.max(full, t)
    local finish = start + c * T
    if finish <= t + tau or c == 0 then
      local delay = 0
      if queue and c > 0 then delay = start - t end
      return {1, cap, math.floor(math.max(0, t + tau - finish) / T), 0, finish - t, delay, 0, 0},
        finish
    end
    return {0, cap, math.floor(math.max(0, t + tau - start) / T), finish - tau - t,
      start - t, 0, 0, 0}, full
  end
  -- Writes the state (with `at`, the instant it was decided at), or deletes the key
  -- when it can be forgotten at `at`.
  local function store(at)
    if forgettable_at() <= at then
      if raw then redis.call('DEL', KEYS[1]) end
      return
    end
    latest = math.max(latest, at)
    redis.call('SET', KEYS[1], struct.pack('<ddd', full, ledger, latest) ..
      shifts_tail(kept, recent), 'PX', ttl(forgettable_at()))
  end

  if op == 'check' or op == 'peek' then
    local reply, after = decide(now, cost)
    if op == 'check' and reply[1] == 1 and cost > 0 then
      full = after
      store(now)
      reply[7], reply[8] = full, ledger
    end
    return reply
  end
  if op == 'settle' then
    -- Never before the latest instant the key was written at: a client clock that
    -- went back must not find an admission's end still ahead.
    local at = math.max(now, latest)
    if actual < cost then
      -- What the admission did not use, as far as it is still ahead: every later
      -- admission moves up with it.
      local back
      back, ledger = debt_release(full, ledger, recent, at, (cost - actual) * T, tau)
      full = full - back
    elseif actual > cost then
      -- Debt beyond the tolerance: later requests wait it out.
      full = math.max(full, at) + (actual - cost) * T
    end
    -- Nothing left that a receipt could claim: a key never seen.
    if forgettable_at() <= at then full, ledger, recent = 0, 0, {} end
    if full > MAX_END then
      return out_of_range(algorithm, string.format('debt until %d, past 2^52 + 2^51', full))
    end
    if shifts_out_of_range(recent) then
      return out_of_range(algorithm, "a shift's position at 2^53 or past")
    end
    store(at)
    return (decide(at, 0))
  end
  -- reset: only a key that holds something a receipt could still claim keeps a
  -- tombstone.
  if held then
    ledger = debt_reset(full, ledger, recent, now, tau)
    full = now
  end
  store(now)
  return (decide(now, 0))
end
