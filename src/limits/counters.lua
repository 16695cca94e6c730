-- One atomic check (and charge) of a request's limit counters: the arithmetic of
-- src/limits/bucket.rs, kept in step with it.
-- KEYS: the counters. ARGV: op ('try', 'add' or 'peek'), now (ms; empty: Redis's own clock, so
-- relays with skewed clocks share one time), a slot's member, a slot's lease (ms), then per
-- key: rule ('r' rate, 'd' UTC-day budget, 's' slots), max, period (ms), cost. 'try' applies
-- every cost only if each fits; 'add' applies them all; 'peek' none.
-- Returns {1 if applied (or fitting), the use of each counter (after, if applied) as text}.
local op, now, member, lease = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local day = math.floor(now / 86400000)
local used, ok, ats = {}, 1, {}
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
    ats[i] = at
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
    local rule, max, period, cost = arg(i, 1), tonumber(arg(i, 2)), tonumber(arg(i, 3)), tonumber(arg(i, 4))
    if cost > 0 then
      local u = used[i] + cost
      if rule == 's' then
        redis.call('ZADD', key, now + lease, member)
        redis.call('PEXPIRE', key, lease * 2)
      elseif rule == 'd' then
        redis.call('HSET', key, 'u', string.format('%.17g', u), 'a', tostring(day))
        redis.call('PEXPIRE', key, 2 * 86400000)
      else
        -- Never back in time (a charge that arrives late), and kept until it has drained, however
        -- far a run overran the limit.
        local at = math.max(now, ats[i] or 0)
        redis.call('HSET', key, 'u', string.format('%.17g', u), 'a', string.format('%d', at))
        redis.call('PEXPIRE', key, math.ceil(u * period / max) + period)
      end
      used[i] = used[i] + cost
    end
  end
end
local out = {ok}
for i = 1, #used do out[i + 1] = string.format('%.17g', used[i]) end
return out
