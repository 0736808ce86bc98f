-- ratelab leaky bucket (meter): mirrors `LeakyMeter` (decide, stamp, settle, reset,
-- forgettable_at) in crates/leaky-bucket/src/meter.rs.
-- KEYS[1]  struct '<ddd': µs of draining left, the instant it was measured (µs: the latest
--          instant the key was written at), and the ledger's total (24 bytes); then the
--          ledger's recent shifts, 24 bytes each (see `read_shifts` in prologue.lua)
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
  return redis.error_reply('ratelab leaky-meter: invalid arguments')
end

local water, at, ledger = 0, 0, 0
-- The ledger's recent shifts (read by a settlement or a reset), or their bytes as read
-- (kept by a check).
local recent, kept = {}, ''
-- The key holds something a receipt could still claim.
local held = false
-- A ledger keeps the key a depth longer (as GCRA's).
local function forgettable_at()
  if ledger == 0 then return at + water end
  return at + water + depth
end
local raw, err = read_string('leaky-meter', 24, true)
if err then return err end
if raw then
  water, at, ledger = struct.unpack('<ddd', raw)
  if not (stored(water) and stored(at) and stored(ledger) and ledger <= LEDGER_CEILING and at + water <= MAX_END) then
    return corrupt('leaky-meter', string.format('level %s, at %s, ledger %s', tostring(water),
      tostring(at), tostring(ledger)))
  end
  if at > now + skew then
    return corrupt('leaky-meter', string.format('measured at %d, after now', at))
  end
  if op == 'settle' or op == 'reset' then
    recent, err = read_shifts('leaky-meter', raw, 24, ledger)
    if err then return err end
  elseif #raw > 24 then
    kept = raw:sub(25)
  end
  held = forgettable_at() > now
  if not held then water, at, ledger, recent, kept = 0, 0, 0, {}, '' end
end
-- Drains the water to `t`: a clock that went back drains nothing (measure from the later
-- instant).
local function drain(t)
  local measured = math.max(at, t)
  return math.max(0, water - (measured - at)), measured
end
-- What a request of `c` at `t` gets (cost 0 always passes, even over water a settlement
-- poured beyond the depth); the level after it.
local function decide(t, c)
  local left, measured = drain(t)
  -- `measured - t` is the time the clock still owes after going back.
  local ahead = measured - t
  local poured = left + c * T
  if poured <= depth or c == 0 then
    return {1, cap, math.floor(math.max(0, depth - poured) / T), 0, ahead + poured, 0, 0, 0},
      poured, measured
  end
  return {0, cap, math.floor(math.max(0, depth - left) / T), ahead + poured - depth,
    ahead + left, 0, 0, 0}, water, at
end
local function store(t)
  if forgettable_at() <= t then
    if raw then redis.call('DEL', KEYS[1]) end
    return
  end
  redis.call('SET', KEYS[1], struct.pack('<ddd', water, at, ledger) .. shifts_tail(kept, recent),
    'PX', ttl(forgettable_at()))
end

if op == 'check' or op == 'peek' then
  local reply, poured, measured = decide(now, cost)
  if op == 'check' and reply[1] == 1 and cost > 0 then
    water, at = poured, measured
    store(now)
    reply[7], reply[8] = at + water, ledger
  end
  return reply
end
if op == 'settle' then
  -- Never before the latest instant the key was written at (the level's own).
  local t = math.max(now, at)
  local full_at = at + water
  water, at = drain(t)
  if actual < cost then
    -- Pour out what the admission still holds.
    local back
    back, ledger = debt_release(full_at, ledger, recent, t, (cost - actual) * T, depth)
    water = math.max(0, water - back)
  elseif actual > cost then
    -- Beyond the depth if need be: debt that later requests wait out.
    water = water + (actual - cost) * T
  end
  -- Nothing left that a receipt could claim: a key never seen.
  if forgettable_at() <= t then water, at, ledger, recent = 0, 0, 0, {} end
  if at + water > MAX_END then
    return out_of_range('leaky-meter', string.format('debt until %d, past 2^52 + 2^51',
      at + water))
  end
  if shifts_out_of_range(recent) then
    return out_of_range('leaky-meter', "a shift's position at 2^53 or past")
  end
  store(t)
  return (decide(t, 0))
end
-- reset: only a key that holds something a receipt could still claim keeps a tombstone.
if held then
  ledger = debt_reset(at + water, ledger, recent, now, depth)
  water, at = 0, math.max(at, now)
end
store(now)
return (decide(now, 0))
