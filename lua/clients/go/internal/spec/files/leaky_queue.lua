-- ratelab leaky bucket (queue): mirrors `LeakyQueue` (decide, stamp, settle, reset,
-- forgettable_at) in crates/leaky-bucket/src/queue.rs.
-- KEYS[1]  struct '<ddd': the next free slot, the ledger's total, and the latest instant
--          the key was written at, µs (24 bytes); then the ledger's recent shifts, 24
--          bytes each (see `read_shifts` in prologue.lua)
-- ARGV[1]  protocol version     ARGV[2]  now, µs, or "" to read Redis TIME     ARGV[3]  cost
-- ARGV[4]  TTL slack, ms (0 with Redis TIME)     ARGV[5]  deadline, Unix µs, or ""
-- ARGV[6]  the operation: check, peek, settle:<actual>:<stamp_at>:<stamp_mark> or reset
-- P[1]  µs per unit T     P[2]  depth = burst x T, µs     P[3]  capacity (burst)
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, delay_us, stamp_at,
-- stamp_mark}.
-- (prologue.lua comes first: it checks the protocol version and the deadline, and sets
-- now, cost, op, actual, stamp_at, stamp_mark, slack, skew, P, args_ok, the ceilings and
-- the helpers.)
local T, depth, cap = P[1], P[2], P[3]
if not (args_ok and #P == 3 and rate_ok(T, cap) and depth == cap * T and fits(cap)) then
  return redis.error_reply('ratelab leaky-queue: invalid arguments')
end

local raw, err = read_string('leaky-queue', 24, true)
if err then return err end
local slot, ledger, latest = 0, 0, 0
-- The ledger's recent shifts (read by a settlement or a reset), or their bytes as read
-- (kept by a check).
local recent, kept = {}, ''
-- The key holds something a receipt could still claim.
local held = false
-- A ledger keeps the key a depth longer (as GCRA's).
local function forgettable_at()
  if ledger == 0 then return slot end
  return slot + depth
end
if raw then
  slot, ledger, latest = struct.unpack('<ddd', raw)
  if not (stored(slot) and stored(ledger) and ledger <= LEDGER_CEILING and stored(latest) and slot <= MAX_END) then
    return corrupt('leaky-queue', string.format('next slot %s, ledger %s, written at %s',
      tostring(slot), tostring(ledger), tostring(latest)))
  end
  if latest > now + skew then
    return corrupt('leaky-queue', string.format('written at %d, after now', latest))
  end
  if op == 'settle' or op == 'reset' then
    recent, err = read_shifts('leaky-queue', raw, 24, ledger)
    if err then return err end
  elseif #raw > 24 then
    kept = raw:sub(25)
  end
  held = forgettable_at() > now
  if not held then slot, ledger, latest, recent, kept = 0, 0, 0, {}, '' end
end
-- What a request of `c` at `t` gets (cost 0 always passes); the next free slot after it.
local function decide(t, c)
  local first = math.max(slot, t)
  local after = first + c * T
  if after - t <= depth or c == 0 then
    local room = math.floor(math.max(0, depth - (after - t)) / T)
    -- A peek reserves no slot, so it has nothing to wait for.
    local delay = 0
    if c > 0 then delay = first - t end
    return {1, cap, room, 0, after - t, delay, 0, 0}, after
  end
  return {0, cap, math.floor(math.max(0, depth - (first - t)) / T), after - depth - t,
    first - t, 0, 0, 0}, slot
end
local function store(at)
  if forgettable_at() <= at then
    if raw then redis.call('DEL', KEYS[1]) end
    return
  end
  latest = math.max(latest, at)
  redis.call('SET', KEYS[1], struct.pack('<ddd', slot, ledger, latest) .. shifts_tail(kept, recent),
    'PX', ttl(forgettable_at()))
end

if op == 'check' or op == 'peek' then
  local reply, after = decide(now, cost)
  if op == 'check' and reply[1] == 1 and cost > 0 then
    slot = after
    store(now)
    reply[7], reply[8] = slot, ledger
  end
  return reply
end
if op == 'settle' then
  -- Never before the latest instant the key was written at.
  local at = math.max(now, latest)
  if actual < cost then
    -- The slots the admission did not use, as far as they are still ahead: every later
    -- slot moves up with them.
    local back
    back, ledger = debt_release(slot, ledger, recent, at, (cost - actual) * T, depth)
    slot = slot - back
  elseif actual > cost then
    slot = math.max(slot, at) + (actual - cost) * T
  end
  -- Nothing left that a receipt could claim: a key never seen.
  if forgettable_at() <= at then slot, ledger, recent = 0, 0, {} end
  if slot > MAX_END then
    return out_of_range('leaky-queue', string.format('debt until %d, past 2^52 + 2^51', slot))
  end
  if shifts_out_of_range(recent) then
    return out_of_range('leaky-queue', "a shift's position at 2^53 or past")
  end
  store(at)
  return (decide(at, 0))
end
-- reset: only a key that holds something a receipt could still claim keeps a tombstone.
if held then
  ledger = debt_reset(slot, ledger, recent, now, depth)
  slot = now
end
store(now)
return (decide(now, 0))
