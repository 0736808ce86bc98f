-- ratelab token bucket: mirrors `TokenBucket::decide` in crates/token-bucket/src/lib.rs.
-- KEYS[1]  the bucket: struct '<Id' (whole tokens as a 4-byte integer, the instant they
--          were counted in µs as a double: 12 bytes, exact below 2^53)
-- ARGV[1]  protocol version     ARGV[2]  now, µs, or "" to read Redis TIME     ARGV[3]  cost
-- ARGV[4]  TTL slack, ms (0 with Redis TIME)     ARGV[5]  deadline, Unix µs, or ""
-- ARGV[6]  (version 2) the operation: check, peek or refund:<owed>; then the parameters P[1], ...
--          from ARGV[7] (version 1: from ARGV[6], and the operation is check):
-- P[1]  µs per token T     P[2]  capacity (burst)
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, delay_us}.
-- (prologue.lua comes first: it checks the protocol version and the deadline, and sets
-- now, cost, op, slack, skew, P, args_ok and the helpers read_string, stored, corrupt and
-- show.) op: check, peek (writes nothing) or refund (see prologue.lua; `owed` is its µs).
local T, cap = P[1], P[2]
if not (args_ok and rate_ok(T, cap) and cost <= cap) then
  return redis.error_reply('ratelab token-bucket: invalid arguments')
end

local tokens, last = cap, 0
local raw, err = read_string('token-bucket', 12)
if err then return err end
if raw then
  tokens, last = struct.unpack('<Id', raw)
  if not (stored(last) and tokens <= cap) then
    return corrupt('token-bucket', string.format('%s tokens of %d, at %s', tostring(tokens), cap,
      tostring(last)))
  end
  if last > now + skew then
    return corrupt('token-bucket', string.format('counted at %d, after now', last))
  end
end
-- Whole tokens that arrived; the fraction of the next stays as time since `last`.
local function refill()
  if now > last then
    local arrived = math.floor((now - last) / T)
    if tokens + arrived >= cap then
      tokens, last = cap, now
    else
      tokens, last = tokens + arrived, last + arrived * T
    end
  end
end
refill()
if op == 'refund' then
  -- After the refill: tokens that arrived on their own are not given twice. Then full
  -- sooner by what the admission still holds: whole tokens, and the rest as an earlier
  -- next token.
  local debt = math.min(cost * T, owed)
  local whole = math.floor(debt / T)
  if tokens + whole >= cap then
    tokens = cap
  else
    tokens = tokens + whole
    last = last - (debt - whole * T)
    if last < 0 then last = 0 end
  end
  local reset = last + (cap - tokens) * T - now
  if reset <= 0 then
    if raw then redis.call('DEL', KEYS[1]) end
  else
    redis.call('SET', KEYS[1], struct.pack('<Id', tokens, last), 'PX',
      math.ceil(reset / 1000) + slack)
  end
  -- The answer is a peek after it: a next token brought forward may be due now.
  refill()
  cost = 0
end
if cost <= tokens then
  tokens = tokens - cost
  local reset = last + (cap - tokens) * T - now
  if reset < 0 then reset = 0 end
  if cost > 0 and op == 'check' then
    redis.call('SET', KEYS[1], struct.pack('<Id', tokens, last), 'PX',
      math.ceil(reset / 1000) + slack)
  end
  return {1, cap, tokens, 0, reset, 0}
end
local reset = last + (cap - tokens) * T - now
if reset < 0 then reset = 0 end
return {0, cap, tokens, last + (cost - tokens) * T - now, reset, 0}
