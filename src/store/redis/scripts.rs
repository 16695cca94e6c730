//! The Lua scripts every write and every tenant-scoped read of the Redis store is made of
//! (atomic each: Redis runs one script at a time). KEYS and ARGV as each one's doc says; key
//! names as [`super`]'s doc lays them out.

/// Keeps a starting run and takes its lease: `KEYS[1]` its hash; ARGV: its id, this relay's
/// instance, the lease's length (ms), its deadline (unix s, 0: none), the Response JSON, the input
/// JSON, status, background (`1`/`0`), the tenant. Its index entries and input items are written
/// beside it, each in its own slot ([`ITEM_KEEP`], `relay:leases`, `relay:runs:{tenant}`,
/// `relay:expiry`).
pub(super) const INSERT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = string.format('%d', now + tonumber(ARGV[3]))
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'response', ARGV[5], 'input', ARGV[6], 'status', ARGV[7], 'background', ARGV[8], 'owner', ARGV[2], 'lease', lease, 'tenant', ARGV[9])
if ARGV[4] ~= '0' then
  redis.call('HSET', KEYS[1], 'deadline', ARGV[4])
  redis.call('EXPIREAT', KEYS[1], ARGV[4])
end
return 1
"#;

/// Keeps an item: `KEYS[1]` its key; ARGV: its run's id, the item JSON, the deadline (unix s, 0:
/// none), and `nx` (an input item: one already kept keeps its run; a later run that sends it
/// again by id neither takes it over nor changes it) or `set` (an output item of the run).
pub(super) const ITEM_KEEP: &str = r#"
if ARGV[4] == 'nx' and redis.call('HSETNX', KEYS[1], 'run', ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'item', ARGV[2], 'run', ARGV[1])
if ARGV[3] ~= '0' then redis.call('EXPIREAT', KEYS[1], ARGV[3]) end
return 1
"#;

/// Deletes an item (`KEYS[1]`) if it is run `ARGV[1]`'s.
pub(super) const ITEM_DROP: &str = r#"
if redis.call('HGET', KEYS[1], 'run') == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"#;

/// Appends a batch of events, each to its own run (runs of one hash slot on a cluster). KEYS: per
/// event, the run's hash and its log. `ARGV[1]`: this relay's instance; then, per event, a group
/// prefixed by its length: id, stream entry id, seq, offset_ms, kind, data, terminal (`1`/`0`),
/// status, Response JSON. Answers, per event: 1 kept, 0 run gone, -1 run finished, -2 run owned
/// by another relay, -3 the log refused the entry.
pub(super) const APPEND: &str = r#"
local out = {}
local a = 2
for e = 1, #KEYS / 2 do
  local n = tonumber(ARGV[a])
  local rk, lk = KEYS[2 * e - 1], KEYS[2 * e]
  local h = redis.call('HMGET', rk, 'status', 'owner', 'deadline')
  local code = 1
  if not h[1] then code = 0
  elseif h[1] ~= 'queued' and h[1] ~= 'in_progress' then code = -1
  elseif h[2] ~= ARGV[1] then code = -2
  else
    local added = redis.pcall('XADD', lk, ARGV[a + 2], 'seq', ARGV[a + 3], 'offset_ms', ARGV[a + 4], 'kind', ARGV[a + 5], 'data', ARGV[a + 6])
    if type(added) == 'table' and added.err then code = -3
    else
      if h[3] and ARGV[a + 3] == '0' then redis.call('EXPIREAT', lk, h[3]) end
      if ARGV[a + 7] == '1' then
        redis.call('HSET', rk, 'status', ARGV[a + 8], 'response', ARGV[a + 9])
        redis.call('HDEL', rk, 'owner', 'lease', 'cancel')
      end
    end
  end
  out[e] = code
  a = a + n + 1
end
return out
"#;

/// Renews this relay's leases: KEYS the hashes of the runs it owns (of one hash slot on a
/// cluster); `ARGV[1]` its instance, `ARGV[2]` the lease's length (ms), then the runs' ids (as
/// KEYS). Answers `gone:{id}` (deleted), `lost:{id}` (finished, or owned by another relay now)
/// and `cancel:{id}` (another relay asked to cancel it) for the runs this relay must act on.
/// (`relay:leases` is renewed beside it.)
pub(super) const RENEW: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = string.format('%d', now + tonumber(ARGV[2]))
local out = {}
for i = 1, #KEYS do
  local id = ARGV[i + 2]
  local k = KEYS[i]
  local h = redis.call('HMGET', k, 'status', 'owner', 'cancel')
  if not h[1] then
    table.insert(out, 'gone:' .. id)
  elseif (h[1] ~= 'queued' and h[1] ~= 'in_progress') or h[2] ~= ARGV[1] then
    table.insert(out, 'lost:' .. id)
  else
    redis.call('HSET', k, 'lease', lease)
    if h[3] then table.insert(out, 'cancel:' .. id) end
  end
end
return out
"#;

/// Claims a run whose lease lapsed: `KEYS[1]` its hash; ARGV: this relay's instance, the claim's
/// length (ms). Answers 1 if this relay now owns it; 0 if its lease still holds; -1 if it is
/// finished or gone (it leaves `relay:leases`).
pub(super) const CLAIM: &str = r#"
local h = redis.call('HMGET', KEYS[1], 'status', 'lease')
if (not h[1]) or (h[1] ~= 'queued' and h[1] ~= 'in_progress') then return -1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if h[2] and tonumber(h[2]) > now then return 0 end
local lease = string.format('%d', now + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'lease', lease)
return 1
"#;

/// Up to 100 runs whose lease lapsed (by Redis's clock): `KEYS[1]` is `relay:leases`.
pub(super) const LAPSED: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now), 'LIMIT', 0, 100)
"#;

/// Asks the owner of a run to cancel it (the `cancel` flag, acted on at its next renewal):
/// `KEYS[1]` its hash, `ARGV[1]` the tenant it must be of. Answers 1 if the run was flagged.
pub(super) const CANCEL: &str = r#"
local h = redis.call('HMGET', KEYS[1], 'status', 'tenant')
local s = h[1]
if (h[2] or 'default') ~= ARGV[1] then return 0 end
if s == 'queued' or s == 'in_progress' then
  redis.call('HSET', KEYS[1], 'cancel', '1')
  return 1
end
return 0
"#;

/// Deletes a run's hash and log (`KEYS[1]`, `KEYS[2]`) if it is of tenant `ARGV[1]` (`*`: any,
/// for expiry and recovery). Answers 1 if it existed and was deleted, 0 if there was none, -1 if
/// it is another tenant's. (Its items and index entries are deleted beside it.)
pub(super) const DELETE: &str = r#"
local existed = redis.call('EXISTS', KEYS[1])
local t = redis.call('HGET', KEYS[1], 'tenant') or 'default'
if existed == 1 and ARGV[1] ~= '*' and t ~= ARGV[1] then return -1 end
redis.call('DEL', KEYS[1], KEYS[2])
return existed
"#;

/// Keeps the usage of each model turn (`ARGV[2]`, JSON) of a run of tenant `ARGV[1]`, if the run is
/// still there (never re-creating a deleted or expired one).
pub(super) const KEEP_TURNS: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if (redis.call('HGET', KEYS[1], 'tenant') or 'default') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'turns', ARGV[2])
return 1
"#;

/// Reads fields of a run's hash, for one tenant: `ARGV[1]` the tenant, then the field names.
/// Answers nothing (an empty list) for a run of another tenant, or no run.
pub(super) const READ: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
if (redis.call('HGET', KEYS[1], 'tenant') or 'default') ~= ARGV[1] then return {} end
return redis.call('HMGET', KEYS[1], unpack(ARGV, 2))
"#;

/// Replaces finished runs' streams by their packed logs (runs of one hash slot on a cluster).
/// KEYS: per run, its hash, its log and its tail mark; ARGV: per run, how many entries were packed and the packed log. A run is
/// packed only if it is finished, not tailed (no mark) and its stream holds exactly the packed
/// entries; then its hash keeps the blob (`packed`) instead of `response` (the blob holds it),
/// and the stream is deleted. Answers, per run: 1 packed, 0 not packed (gone, not finished,
/// already packed, or not the stream packed), -1 tailed (to try again later).
pub(super) const PACK: &str = r#"
local out = {}
for r = 1, #KEYS / 3 do
  local rk, lk, mk = KEYS[3 * r - 2], KEYS[3 * r - 1], KEYS[3 * r]
  local st = redis.call('HGET', rk, 'status')
  local code = 0
  if st and st ~= 'queued' and st ~= 'in_progress' then
    if redis.call('EXISTS', mk) == 1 then code = -1
    elseif redis.call('XLEN', lk) == tonumber(ARGV[2 * r - 1]) then
      redis.call('HSET', rk, 'packed', ARGV[2 * r])
      redis.call('HDEL', rk, 'response')
      redis.call('DEL', lk)
      code = 1
    end
  end
  out[r] = code
end
return out
"#;

/// A run's status and log, read together: `KEYS[1]` its hash, `KEYS[2]` its stream; `ARGV[1]` the
/// tenant it must be of (`*`: any, the relay's own bookkeeping). Answers nothing (an empty list)
/// for no run (of that tenant, or with no status), else {status, packed log} for a packed run, else {status, false,
/// the stream's entries}.
pub(super) const READ_LOG: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
local h = redis.call('HMGET', KEYS[1], 'status', 'packed', 'tenant')
if not h[1] then return {} end
if ARGV[1] ~= '*' and (h[3] or 'default') ~= ARGV[1] then return {} end
if h[2] then return {h[1], h[2]} end
return {h[1], false, redis.call('XRANGE', KEYS[2], '-', '+')}
"#;

/// One step of tailing a run: `KEYS[1]` its hash, `KEYS[2]` its stream, `KEYS[3]` its tail mark;
/// `ARGV[1]` the first stream entry id wanted, `ARGV[2]` how many entries at most, `ARGV[3]` the
/// mark's life (ms). Marks a run not yet finished as tailed. Answers nothing for a run gone,
/// else {status, packed log} once the stream was packed, else {status, false, entries from
/// `ARGV[1]`}.
pub(super) const TAIL_STEP: &str = r#"
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return {} end
if st == 'queued' or st == 'in_progress' then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  local p = redis.call('HGET', KEYS[1], 'packed')
  if p then return {st, p} end
end
return {st, false, redis.call('XRANGE', KEYS[2], ARGV[1], '+', 'COUNT', ARGV[2])}
"#;

/// A conversation's items (`nil` if there is no such conversation).
pub(super) const CONV_ITEMS: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
return redis.call('LRANGE', KEYS[2], 0, -1)
"#;

/// Keeps a new conversation: KEYS its hash and its item list; ARGV `created_at`, the metadata
/// JSON, then its first items' JSON.
pub(super) const CONV_CREATE: &str = r#"
redis.call('HSET', KEYS[1], 'created_at', ARGV[1], 'metadata', ARGV[2])
if #ARGV > 2 then redis.call('RPUSH', KEYS[2], unpack(ARGV, 3)) end
return 1
"#;

/// Replaces a conversation's metadata (`ARGV[1]`, JSON); 0 if there is no such conversation.
pub(super) const CONV_UPDATE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'metadata', ARGV[1])
return 1
"#;

/// Appends items (ARGV, JSON each) to a conversation; 0 if there is no such conversation.
pub(super) const CONV_APPEND: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if #ARGV > 0 then redis.call('RPUSH', KEYS[2], unpack(ARGV)) end
return 1
"#;

/// Removes the item with id `ARGV[1]` from a conversation; 1 if it was there.
pub(super) const CONV_DELETE_ITEM: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
for _, v in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
  local ok, item = pcall(cjson.decode, v)
  if ok and type(item) == 'table' and item.id == ARGV[1] then
    redis.call('LREM', KEYS[2], 1, v)
    return 1
  end
end
return 0
"#;

/// Takes a conversation's lock (`KEYS[1]`) with token `ARGV[1]` for `ARGV[2]` ms: 1 if taken,
/// else who holds it (a token, or the run holding it: `resp_...`, which may have ended).
pub(super) const CONV_LOCK: &str = r#"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return redis.call('GET', KEYS[1]) or ''
"#;

/// Takes a conversation's lock (`KEYS[1]`) from its holder `ARGV[3]` (a run that has ended) with
/// token `ARGV[1]` for `ARGV[2]` ms: 1 if taken; 0 if the holder changed meanwhile.
pub(super) const CONV_TAKE: &str = r#"
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[3] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"#;

/// Makes run `ARGV[2]` the holder of a lock taken with token `ARGV[1]` (keeping its expiry); 0 if
/// the token no longer holds it.
pub(super) const CONV_HOLD: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
return 1
"#;

/// Releases a lock (`KEYS[1]`) if token `ARGV[1]` still holds it.
pub(super) const UNLOCK: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"#;
