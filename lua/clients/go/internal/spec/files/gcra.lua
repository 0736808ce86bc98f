-- ratelab GCRA: mirrors `Gcra` (decide, stamp, settle, reset, forgettable_at) in
-- crates/gcra/src/lib.rs exactly.
-- KEYS[1]  struct '<ddd': the theoretical arrival time (TAT), the ledger's total, and the
--          latest instant the key was written at, µs (24 bytes); then the ledger's recent
--          shifts, 24 bytes each (see `read_shifts` in prologue.lua)
-- ARGV[1]  protocol version     ARGV[2]  now, µs, or "" to read Redis TIME     ARGV[3]  cost
-- ARGV[4]  TTL slack, ms (0 with Redis TIME)     ARGV[5]  deadline, Unix µs, or ""
-- ARGV[6]  the operation: check, peek, settle:<actual>:<stamp_at>:<stamp_mark> or reset
-- P[1]  emission interval T, µs   P[2]  tolerance = burst x T, µs   P[3]  burst
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, delay_us, stamp_at,
-- stamp_mark}: integers below 2^53, exact in Lua's doubles.
-- (prologue.lua comes first: it checks the protocol version and the deadline, and sets
-- now, cost, op, actual, stamp_at, stamp_mark, slack, skew, P, args_ok, the ceilings and
-- the helpers.)
local T, tau, cap = P[1], P[2], P[3]
if not (args_ok and #P == 3 and rate_ok(T, cap) and tau == cap * T and fits(cap)) then
  return redis.error_reply('ratelab gcra: invalid arguments')
end

local raw, err = read_string('gcra', 24, true)
if err then return err end
local tat, ledger, latest = 0, 0, 0
-- The ledger's recent shifts (read by a settlement or a reset), or their bytes as read
-- (kept by a check).
local recent, kept = {}, ''
-- The key holds something a receipt could still claim.
local held = false
-- Once a settlement moved other admissions (a ledger), the key is kept a tolerance
-- longer: no admission ends later than its instant plus the tolerance.
local function forgettable_at()
  if ledger == 0 then return tat end
  return tat + tau
end
if raw then
  tat, ledger, latest = struct.unpack('<ddd', raw)
  if not (stored(tat) and stored(ledger) and ledger <= LEDGER_CEILING and stored(latest) and tat <= MAX_END) then
    return corrupt('gcra', string.format('TAT %s, ledger %s, written at %s', tostring(tat),
      tostring(ledger), tostring(latest)))
  end
  if latest > now + skew then
    return corrupt('gcra', string.format('written at %d, after now', latest))
  end
  if op == 'settle' or op == 'reset' then
    recent, err = read_shifts('gcra', raw, 24, ledger)
    if err then return err end
  elseif #raw > 24 then
    kept = raw:sub(25)
  end
  -- Nothing it holds can still be claimed: a key never seen.
  held = forgettable_at() > now
  if not held then tat, ledger, latest, recent, kept = 0, 0, 0, {}, '' end
end
-- What a request of `c` at `t` gets (cost 0 always passes); the TAT after it.
local function decide(t, c)
  local current = math.max(tat, t)
  local next = current + c * T
  if next <= t + tau or c == 0 then
    return {1, cap, math.floor(math.max(0, t + tau - next) / T), 0, next - t, 0, 0, 0}, next
  end
  return {0, cap, math.floor(math.max(0, t + tau - current) / T), next - tau - t,
    current - t, 0, 0, 0}, tat
end
-- Writes the state (with `at`, the instant it was decided at), or deletes the key when
-- it can be forgotten at `at`.
local function store(at)
  if forgettable_at() <= at then
    if raw then redis.call('DEL', KEYS[1]) end
    return
  end
  latest = math.max(latest, at)
  redis.call('SET', KEYS[1], struct.pack('<ddd', tat, ledger, latest) .. shifts_tail(kept, recent),
    'PX', ttl(forgettable_at()))
end

if op == 'check' or op == 'peek' then
  local reply, after = decide(now, cost)
  if op == 'check' and reply[1] == 1 and cost > 0 then
    tat = after
    store(now)
    reply[7], reply[8] = tat, ledger
  end
  return reply
end
if op == 'settle' then
  -- Never before the latest instant the key was written at: a client clock that went
  -- back must not find an admission's end still ahead.
  local at = math.max(now, latest)
  if actual < cost then
    local back
    back, ledger = debt_release(tat, ledger, recent, at, (cost - actual) * T, tau)
    tat = tat - back
  elseif actual > cost then
    -- Debt beyond the tolerance: later requests wait it out.
    tat = math.max(tat, at) + (actual - cost) * T
  end
  -- Nothing left that a receipt could claim: a key never seen.
  if forgettable_at() <= at then tat, ledger, recent = 0, 0, {} end
  if tat > MAX_END then
    return out_of_range('gcra', string.format('debt until %d, past 2^52 + 2^51', tat))
  end
  if shifts_out_of_range(recent) then
    return out_of_range('gcra', "a shift's position at 2^53 or past")
  end
  store(at)
  return (decide(at, 0))
end
-- reset: only a key that holds something a receipt could still claim keeps a tombstone.
if held then
  ledger = debt_reset(tat, ledger, recent, now, tau)
  tat = now
end
store(now)
return (decide(now, 0))
