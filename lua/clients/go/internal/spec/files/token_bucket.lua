-- ratelab token bucket: mirrors `TokenBucket` (decide, stamp, settle, reset,
-- forgettable_at) in crates/token-bucket/src/lib.rs.
-- KEYS[1]  struct '<Iddd': whole tokens (a 4-byte integer), the instant they were counted,
--          the ledger's total, and the latest instant the key was written at, µs (28
--          bytes); then the ledger's recent shifts, 24 bytes each (see `read_shifts` in
--          prologue.lua)
-- ARGV[1]  protocol version     ARGV[2]  now, µs, or "" to read Redis TIME     ARGV[3]  cost
-- ARGV[4]  TTL slack, ms (0 with Redis TIME)     ARGV[5]  deadline, Unix µs, or ""
-- ARGV[6]  the operation: check, peek, settle:<actual>:<stamp_at>:<stamp_mark> or reset
-- P[1]  µs per token T     P[2]  capacity (burst)
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, delay_us, stamp_at,
-- stamp_mark}.
-- (prologue.lua comes first: it checks the protocol version and the deadline, and sets
-- now, cost, op, actual, stamp_at, stamp_mark, slack, skew, P, args_ok, the ceilings and
-- the helpers.)
local T, cap = P[1], P[2]
if not (args_ok and #P == 2 and rate_ok(T, cap) and fits(cap)) then
  return redis.error_reply('ratelab token-bucket: invalid arguments')
end

local tokens, last, ledger, latest = cap, 0, 0, 0
-- The ledger's recent shifts (read by a settlement or a reset), or their bytes as read
-- (kept by a check).
local recent, kept = {}, ''
-- The key holds something a receipt could still claim.
local held = false
-- The instant the bucket holds `n` tokens, given what it holds.
local function when_holding(n)
  return last + math.max(0, n - tokens) * T
end
-- A ledger keeps the key a burst's time longer (as GCRA's).
local function forgettable_at()
  if ledger == 0 then return when_holding(cap) end
  return when_holding(cap) + cap * T
end
local raw, err = read_string('token-bucket', 28, true)
if err then return err end
if raw then
  tokens, last, ledger, latest = struct.unpack('<Iddd', raw)
  if not (stored(last) and stored(ledger) and ledger <= LEDGER_CEILING and stored(latest) and tokens <= cap
      and when_holding(cap) <= MAX_END) then
    return corrupt('token-bucket', string.format('%s tokens of %d, at %s, ledger %s, written at %s',
      tostring(tokens), cap, tostring(last), tostring(ledger), tostring(latest)))
  end
  if latest > now + skew then
    return corrupt('token-bucket', string.format('written at %d, after now', latest))
  end
  if op == 'settle' or op == 'reset' then
    recent, err = read_shifts('token-bucket', raw, 28, ledger)
    if err then return err end
  elseif #raw > 28 then
    kept = raw:sub(29)
  end
  held = forgettable_at() > now
  if not held then tokens, last, ledger, latest, recent, kept = cap, 0, 0, 0, {}, '' end
end
-- Adds the whole tokens that arrived by `t`, keeping the fraction of the next one as time
-- since `last`; a clock that went back (or a `last` a settlement put ahead) adds none.
local function refill(t)
  if t > last then
    local arrived = math.floor((t - last) / T)
    if tokens + arrived >= cap then
      tokens, last = cap, t
    else
      tokens, last = tokens + arrived, last + arrived * T
    end
  end
end
-- Makes the bucket full again at `full_at`, as seen at `t`: the tokens it lacks then,
-- and the time since the last whole one; past empty, `last` moves ahead of `t`.
local function set_full_at(full_at, t)
  if full_at <= t then
    tokens, last = cap, t
    return
  end
  local missing = math.ceil((full_at - t) / T)
  if missing <= cap then
    -- Before instant T the last whole token may fall before 0: count from 0 (full a
    -- fraction of an interval later, never sooner), as the Rust implementation must.
    tokens, last = cap - missing, math.max(full_at - missing * T, 0)
  else
    tokens, last = 0, full_at - cap * T
  end
end
-- What a request of `c` at `t` gets, from a refilled copy (only an admission with a cost
-- is written back); the bucket after it.
local function decide(t, c)
  local kept_tokens, kept_last = tokens, last
  refill(t)
  local reply
  if c <= tokens then
    tokens = tokens - c
    reply = {1, cap, tokens, 0, math.max(0, when_holding(cap) - t), 0, 0, 0}
  else
    reply = {0, cap, tokens, when_holding(c) - t, math.max(0, when_holding(cap) - t), 0, 0, 0}
  end
  local after_tokens, after_last = tokens, last
  tokens, last = kept_tokens, kept_last
  return reply, after_tokens, after_last
end
local function store(t)
  if forgettable_at() <= t then
    if raw then redis.call('DEL', KEYS[1]) end
    return
  end
  latest = math.max(latest, t)
  redis.call('SET', KEYS[1], struct.pack('<Iddd', tokens, last, ledger, latest)
    .. shifts_tail(kept, recent), 'PX', ttl(forgettable_at()))
end

if op == 'check' or op == 'peek' then
  local reply, after_tokens, after_last = decide(now, cost)
  if op == 'check' and reply[1] == 1 and cost > 0 then
    tokens, last = after_tokens, after_last
    store(now)
    reply[7], reply[8] = when_holding(cap), ledger
  end
  return reply
end
if op == 'settle' then
  -- Never before the latest instant the key was written at.
  local t = math.max(now, latest)
  local full_at = when_holding(cap)
  if actual < cost then
    -- Full sooner by what the admission still holds.
    local back
    back, ledger = debt_release(full_at, ledger, recent, t, (cost - actual) * T, cap * T)
    set_full_at(full_at - back, t)
  elseif actual > cost then
    -- Past empty if need be: debt that later requests wait out.
    set_full_at(math.max(full_at, t) + (actual - cost) * T, t)
  end
  -- Nothing left that a receipt could claim: a key never seen.
  if forgettable_at() <= t then tokens, last, ledger, recent = cap, 0, 0, {} end
  if when_holding(cap) > MAX_END then
    return out_of_range('token-bucket', string.format('debt until %d, past 2^52 + 2^51',
      when_holding(cap)))
  end
  if shifts_out_of_range(recent) then
    return out_of_range('token-bucket', "a shift's position at 2^53 or past")
  end
  store(t)
  return (decide(t, 0))
end
-- reset: only a key that holds something a receipt could still claim keeps a tombstone.
if held then
  ledger = debt_reset(when_holding(cap), ledger, recent, now, cap * T)
  set_full_at(now, now)
end
store(now)
return (decide(now, 0))
