-- ratelab sliding window counter: mirrors `SlidingCounter` (decide, stamp, settle, reset,
-- forgettable_at) in crates/sliding-window/src/counter.rs.
-- KEYS[1]  struct '<dddd': the current window index, the previous and the current count,
--          and the fence (the first window whose receipts may give back; 0 before any
--          reset) (32 bytes); then, once a receipt was settled, the windows' ledger (see
--          `read_spent` in prologue.lua)
-- ARGV[1]  protocol version     ARGV[2]  now, µs, or "" to read Redis TIME     ARGV[3]  cost
-- ARGV[4]  TTL slack, ms (0 with Redis TIME)     ARGV[5]  deadline, Unix µs, or ""
-- ARGV[6]  the operation: check, peek, settle:<actual>:<stamp_at>:<stamp_mark> or reset
-- P[1]  window length W, µs   P[2]  limit   P[3]  µs per step   P[4]  steps per window
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, delay_us, stamp_at,
-- stamp_mark}.
-- limit x steps < 2^48 and counts below 2^36: every product below is exact.
-- (prologue.lua comes first: it checks the protocol version and the deadline, and sets
-- now, cost, op, actual, stamp_at, stamp_mark, slack, skew, P, args_ok, the ceilings and
-- the helpers.)
local W, limit, step, steps = P[1], P[2], P[3], P[4]
-- The steps are the quota's own: step = ceil(W / 2^16), steps = ceil(W / step).
if not (args_ok and #P == 4 and window_ok(W, limit) and fits(limit) and step >= 1
    and step * 65536 >= W and (step - 1) * 65536 < W
    and steps * step >= W and (steps - 1) * step < W) then
  return redis.error_reply('ratelab sliding-counter: invalid arguments')
end

local index, previous, current, fence = 0, 0, 0, 0
-- The receipts settled in the windows that still weigh (the fence is kept apart).
local spent = spent_new()
-- The key holds something a receipt could still claim.
local held = false
-- The instant both windows' counts no longer weigh: back to full.
local function full_at()
  if current > 0 then return index * W + 2 * W end
  if previous > 0 then return index * W + W end
  return 0
end
-- A fence, or a window's settlements, are kept until the window after it has ended: by
-- then no receipt before it can name the current or the previous window.
local function forgettable_at()
  local fenced, settled = 0, 0
  if fence > 0 then fenced = (fence + 1) * W end
  local latest = spent_latest(spent)
  if latest then settled = (latest + 2) * W end
  return math.max(full_at(), fenced, settled)
end
local raw, err = read_string('sliding-counter', 32, 'spent')
if err then return err end
if raw then
  index, previous, current, fence = struct.unpack('<dddd', raw)
  if not (stored(index) and stored(previous) and stored(current) and stored(fence)
      and previous <= MAX_COUNT and current <= MAX_COUNT and fence <= index + 1) then
    return corrupt('sliding-counter', string.format('window %s, counts %s and %s, fence %s',
      tostring(index), tostring(previous), tostring(current), tostring(fence)))
  end
  if index * W > now + skew then
    return corrupt('sliding-counter', string.format('window %d starts after now', index))
  end
  spent, err = read_spent('sliding-counter', raw, 32)
  if err then return err end
  held = forgettable_at() > now
  if not held then index, previous, current, fence, spent = 0, 0, 0, 0, spent_new() end
end
-- Moves the windows forward to `t`'s, if it is later.
local function roll(t)
  local i = math.floor(t / W)
  if i == index + 1 then
    index, previous, current = i, current, 0
  elseif i > index + 1 then
    index, previous, current = i, 0, 0
  end
end
-- The first step in a window at which `units` fit on top of `weighing` weighted, or nil.
local function first_step(weighing, units)
  if weighing == 0 then return 0 end
  local s = math.max(0, steps - math.floor(units * steps / weighing))
  if s * step < W then return s end
  return nil
end
-- What a request of `c` at `t` gets, on rolled copies (cost 0 always passes, even over
-- counts a settlement took past the limit); the windows after it.
local function decide(t, c)
  local kept = {index, previous, current}
  roll(t)
  local start = index * W
  -- After a clock went back, take the window's start: the previous window then weighs
  -- in full, the most it can.
  local k = math.floor(math.max(0, t - start) / step)
  local room = math.floor(math.max(0, limit * steps - previous * (steps - k)) / steps)
  local reply
  if current + c <= room or c == 0 then
    current = current + c
    reply = {1, limit, math.max(0, room - current), 0, math.max(0, full_at() - t), 0, 0, 0}
  else
    local retry_at
    if limit - current - c >= 0 then
      local s = first_step(previous, limit - current - c)
      if s then retry_at = start + s * step end
    end
    if not retry_at then
      local s = first_step(current, limit - c)
      if s then retry_at = start + W + s * step else retry_at = start + 2 * W end
    end
    reply = {0, limit, math.max(0, room - current), retry_at - t, full_at() - t, 0, 0, 0}
  end
  local after = {index, previous, current}
  index, previous, current = kept[1], kept[2], kept[3]
  return reply, after
end
local function store()
  if forgettable_at() <= now then
    if raw then redis.call('DEL', KEYS[1]) end
    return
  end
  redis.call('SET', KEYS[1], struct.pack('<dddd', index, previous, current, fence)
    .. spent_tail(spent), 'PX', ttl(forgettable_at()))
end

if op == 'check' or op == 'peek' then
  local reply, after = decide(now, cost)
  if op == 'check' and reply[1] == 1 and cost > 0 then
    index, previous, current = after[1], after[2], after[3]
    store()
    reply[7], reply[8] = index, current + spent_given_at(spent, index)
  end
  return reply
end
roll(now)
if op == 'settle' then
  -- Receipts of windows that no longer weigh give nothing back.
  spent_expire(spent, math.max(0, index - 1))
  if actual < cost then
    -- Only from the admission's own window, while it still weighs: the current one, or
    -- the previous one. After, it no longer counts, and other units must not be given
    -- back instead; once per stamp.
    local unused = cost - actual
    if stamp_at >= fence and stamp_at == index then
      if spent_take(spent, current) then
        local taken = math.min(unused, current)
        current = current - taken
        spent_gave(spent, stamp_at, taken)
      end
    elseif stamp_at >= fence and stamp_at + 1 == index then
      if spent_take(spent, previous) then
        local taken = math.min(unused, previous)
        previous = previous - taken
        spent_gave(spent, stamp_at, taken)
      end
    end
  else
    -- Past the limit if need be: the window refuses until it weighs less.
    current = current + (actual - cost)
  end
  -- Nothing left that a receipt could claim: a key never seen.
  if forgettable_at() <= now then index, previous, current, fence, spent = 0, 0, 0, 0, spent_new() end
  if current > MAX_COUNT then
    return out_of_range('sliding-counter', string.format('%d units in a window, past 2^36',
      current))
  end
  store()
  return (decide(now, 0))
end
-- reset: only a key that holds something a receipt could still claim keeps a tombstone:
-- this window's receipts, and every earlier one's, give nothing back.
if held then
  previous, current, fence = 0, 0, index + 1
  spent_expire(spent, index + 1)
end
store()
return (decide(now, 0))
