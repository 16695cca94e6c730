-- One atomic check (and charge) of a request's limit counters: the arithmetic of
-- src/limits/bucket.rs, kept in step with it.
-- KEYS: the counters. ARGV: op ('try', 'add' or 'peek'), now (ms), a slot's member, a slot's
-- lease (ms), then per key: rule ('r' rate, 'd' UTC-day budget, 's' slots), max, period (ms),
-- cost. 'try' applies every cost only if each fits; 'add' applies them all; 'peek' none.
-- Returns {1 if applied (or fitting), the use of each counter (after, if applied) as text}.
local op, now, member, lease = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local day = math.floor(now / 86400000)
local used, ok = {}, 1
local function arg(i, k) return ARGV[4 + (i - 1) * 4 + k] end
for i, key in ipairs(KEYS) do
  local rule, max, period, cost = arg(i, 1), tonumber(arg(i, 2)), tonumber(arg(i, 3)), tonumber(arg(i, 4))
  local u
  if rule == 's' then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
    u = redis.call('ZCARD', key)
  else
    local h = redis.call('HMGET', key, 'u', 'a')
    u = tonumber(h[1]) or 0
    local at = tonumber(h[2]) or 0
    if rule == 'r' then
      u = math.max(0, u - math.max(0, now - at) * max / period)
    elseif at ~= day then
      u = 0
    end
  end
  used[i] = u
  if op == 'try' then
    local fits
    if cost == 0 then fits = u < max else fits = u + cost <= max end
    if not fits then ok = 0 end
  end
end
if op ~= 'peek' and ok == 1 then
  for i, key in ipairs(KEYS) do
    local rule, period, cost = arg(i, 1), tonumber(arg(i, 3)), tonumber(arg(i, 4))
    if cost > 0 then
      if rule == 's' then
        redis.call('ZADD', key, now + lease, member)
        redis.call('PEXPIRE', key, lease * 2)
      elseif rule == 'd' then
        redis.call('HSET', key, 'u', tostring(used[i] + cost), 'a', tostring(day))
        redis.call('PEXPIRE', key, 2 * 86400000)
      else
        redis.call('HSET', key, 'u', tostring(used[i] + cost), 'a', string.format('%d', now))
        redis.call('PEXPIRE', key, 2 * period)
      end
      used[i] = used[i] + cost
    end
  end
end
local out = {ok}
for i = 1, #used do out[i + 1] = tostring(used[i]) end
return out
