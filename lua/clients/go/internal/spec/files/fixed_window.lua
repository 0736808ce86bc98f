-- ratelab fixed window: mirrors `FixedWindow` (decide, stamp, settle, reset,
-- forgettable_at) in crates/fixed-window/src/lib.rs.
-- KEYS[1]  struct '<ddd': the window index, the units counted in it, and the fence (the
--          first window whose receipts may give back; 0 before any reset) (24 bytes);
--          then, once a receipt was settled, the window's ledger (see `read_spent` in
--          prologue.lua)
-- ARGV[1]  protocol version     ARGV[2]  now, µs, or "" to read Redis TIME     ARGV[3]  cost
-- ARGV[4]  TTL slack, ms (0 with Redis TIME)     ARGV[5]  deadline, Unix µs, or ""
-- ARGV[6]  the operation: check, peek, settle:<actual>:<stamp_at>:<stamp_mark> or reset
-- P[1]  window length W, µs     P[2]  limit per window
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, delay_us, stamp_at,
-- stamp_mark}.
-- (prologue.lua comes first: it checks the protocol version and the deadline, and sets
-- now, cost, op, actual, stamp_at, stamp_mark, slack, skew, P, args_ok, the ceilings and
-- the helpers.)
local W, limit = P[1], P[2]
if not (args_ok and #P == 2 and window_ok(W, limit) and fits(limit)) then
  return redis.error_reply('ratelab fixed-window: invalid arguments')
end

local index, count, fence = 0, 0, 0
-- The receipts settled in the current window (the fence is kept apart).
local spent = spent_new()
-- The key holds something a receipt could still claim.
local held = false
-- A fence, or a window's settlements, are kept until the window has ended: by then no
-- receipt before it can name the current window.
local function forgettable_at()
  local full_at = 0
  if count > 0 then full_at = (index + 1) * W end
  local settled = 0
  local latest = spent_latest(spent)
  if latest then settled = (latest + 1) * W end
  return math.max(full_at, fence * W, settled)
end
local raw, err = read_string('fixed-window', 24, 'spent')
if err then return err end
if raw then
  index, count, fence = struct.unpack('<ddd', raw)
  if not (stored(index) and stored(count) and stored(fence) and count <= MAX_COUNT
      and fence <= index + 1) then
    return corrupt('fixed-window', string.format('window %s, count %s, fence %s',
      tostring(index), tostring(count), tostring(fence)))
  end
  -- A window that starts after now (beyond a stepped-back clock) was never written
  -- with this window length: it would refuse until a far future.
  if index * W > now + skew then
    return corrupt('fixed-window', string.format('window %d starts after now', index))
  end
  spent, err = read_spent('fixed-window', raw, 24)
  if err then return err end
  held = forgettable_at() > now
  if not held then index, count, fence, spent = 0, 0, 0, spent_new() end
end
-- What a request of `c` at `t` gets (cost 0 always passes, even over a count a
-- settlement took past the limit); the window and count after it. A clock that went
-- back stays in the window it had reached.
local function decide(t, c)
  local i, n = index, count
  if math.floor(t / W) > i then i, n = math.floor(t / W), 0 end
  local until_end = (i + 1) * W - t
  if n + c <= limit or c == 0 then
    n = n + c
    local reset = until_end
    if n == 0 then reset = 0 end
    return {1, limit, math.max(0, limit - n), 0, reset, 0, 0, 0}, i, n
  end
  return {0, limit, math.max(0, limit - n), until_end, until_end, 0, 0, 0}, index, count
end
local function store()
  if forgettable_at() <= now then
    if raw then redis.call('DEL', KEYS[1]) end
    return
  end
  redis.call('SET', KEYS[1], struct.pack('<ddd', index, count, fence) .. spent_tail(spent), 'PX',
    ttl(forgettable_at()))
end

if op == 'check' or op == 'peek' then
  local reply, i, n = decide(now, cost)
  if op == 'check' and reply[1] == 1 and cost > 0 then
    index, count = i, n
    store()
    reply[7], reply[8] = index, count + spent_given_at(spent, index)
  end
  return reply
end
-- A settlement or a reset stays in the window the key had reached.
local current = math.max(index, math.floor(now / W))
if op == 'settle' then
  -- Receipts of earlier windows give nothing back any more.
  spent_expire(spent, current)
  if actual < cost then
    -- Only from the admission's own window, while it is the current one: units
    -- counted in a window that has ended are not given to this one; once per stamp.
    if stamp_at == current and index == current and stamp_at >= fence
        and spent_take(spent, count) then
      local taken = math.min(cost - actual, count)
      count = count - taken
      spent_gave(spent, current, taken)
    end
  elseif actual > cost then
    if current > index then index, count = current, 0 end
    -- Past the limit if need be: the window refuses until it ends.
    count = count + (actual - cost)
  end
  -- Nothing left that a receipt could claim: a key never seen.
  if forgettable_at() <= now then index, count, fence, spent = 0, 0, 0, spent_new() end
  if count > MAX_COUNT then
    return out_of_range('fixed-window', string.format('%d units in a window, past 2^36', count))
  end
  store()
  return (decide(now, 0))
end
-- reset: only a key that holds something a receipt could still claim keeps a tombstone:
-- this window's receipts, and every earlier one's, give nothing back.
if held then
  index, count, fence = current, 0, current + 1
  spent_expire(spent, current + 1)
end
store()
return (decide(now, 0))
