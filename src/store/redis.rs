//! The Redis backend: several relays share one Redis, so any of them serves, resumes and cancels
//! any run.
//!
//! Keys of a run (all under the run's time to live):
//! - `relay:resp:{id}`: a hash with the input JSON, `status`, `background`, `tenant`,
//!   `deadline`, `turns` (each model turn's usage, once the run ended), the Response JSON
//!   (`response`) until the run is packed, and, while the run goes on, `owner` (the relay
//!   instance running it) and `lease` (unix ms until which that owner holds it), `cancel` when
//!   another relay asked to cancel it;
//!   once the run finished, `packed`: its whole log and final Response in one zstd blob (the
//!   format SQLite keeps, [`packed`](super::packed)), instead of `response` and the stream;
//! - `relay:log:{id}`: while the run goes on, a Stream, one entry per event (`seq`, `offset_ms`,
//!   `kind`, `data`), whose entry id is `0-{seq+1}`, so a duplicate or a gap is refused by Redis
//!   itself;
//! - `relay:item:{item_id}` (the default tenant's; data kept before tenants existed is its) or
//!   `relay:titem:{tenant}:{item_id}`: a hash with the item JSON and its run's id;
//! - `relay:tail:{id}`: set (for a few seconds) by a relay tailing the run live (below).
//!
//! Packing (issue 28): once Redis acknowledged a run's terminal event, its owner packs the log
//! it holds and replaces the stream by the blob and drops `response`, in one script (`PACK`)
//! that does so only for a finished run whose stream holds exactly the events packed. Every
//! event is still kept in the stream before any client sees it; a replay serves the packed
//! frames, the bytes the live clients got. Every read of a log takes the blob or the stream in
//! one script, so it never falls between the two; runs kept before packing (a finished stream,
//! `response`) read as before. A relay tailing a run live marks it (`relay:tail:{id}`, renewed
//! before it blocks on the stream): the owner does not pack a marked run, and tries again once
//! the mark lapsed, so a blocking read never waits on a stream that went away; a tail that
//! finds the stream gone reads the rest from the blob. A finished short run then holds about a
//! quarter of the memory it held with its stream (ARCHITECTURE.md, "Measured decisions").
//!
//! Tenants: the run's hash holds its `tenant` (none: the default tenant); every read of a run is
//! a script that answers nothing unless the hash's tenant is the reader's, and items live under
//! their tenant's key prefix, so one tenant's request cannot reach another's run or item.
//!
//! Two sorted sets index runs: `relay:leases` (unfinished runs by lease expiry) and
//! `relay:expiry` (runs by `expires_at`, for [`Redis::expire`]); a third per tenant,
//! `relay:runs:{tenant}`, holds its runs by the time they were stored (for [`Redis::runs`]).
//!
//! Every write is a Lua script (atomic per event), sent by one writer task per process in
//! pipelined batches, in the order the emitter appended; the events of one batch (of any runs)
//! go in one script call, which answers one code per event: an event is made visible on the
//! run's log only once Redis acknowledged it. Appends are fenced: a script refuses an event of a
//! run this relay no longer owns, of a finished run, or of a deleted one. A relay that owns runs
//! renews their leases every 250 ms and acts on cancel flags in the same call; any relay finishes
//! a run whose lease lapsed (its owner died) as `failed`, after claiming it atomically. Blocking reads
//! (`XREAD BLOCK`, to tail a run live on another relay) use a dedicated connection without a
//! response timeout. Redis Cluster is not supported (scripts touch keys of several slots).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use ::redis::aio::MultiplexedConnection;
use ::redis::{AsyncConnectionConfig, Client, FromRedisValue, RedisError};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::packed::{self, Packer};
use super::{Record, RunQuery, StoreError, Tenant, status_of, unfinished};
use crate::api::fold::Fold;
use crate::api::output_as_input;
use crate::api::request::InputItem;
use crate::api::response::{Conversation, Usage};
use crate::api::{Response, Sequenced};
use crate::eventlog::emitter::{LogSink, end_as_failed};
use crate::eventlog::log::{LogEntry, RunLog};
use crate::redact::mask_password as mask_url;

const RESP: &str = "relay:resp:";
const LOG: &str = "relay:log:";
const ITEM: &str = "relay:item:";
/// Other tenants' items: `relay:titem:{tenant}:{item_id}` (the scripts spell it out too). Not under
/// `relay:item:`, so no default-tenant item id (ids are the client's) can name another's item.
const TENANT_ITEM: &str = "relay:titem:";
/// How long an owner's lease lasts; it renews it every [`RENEW_EVERY`].
const LEASE_MS: u64 = 3000;
const RENEW_EVERY: Duration = Duration::from_millis(250);
/// How often a relay looks for runs whose owner died (every this many renewals).
const SWEEP_TICKS: u32 = 4;
/// A relay that claimed a dead owner's run holds it this long to finish it.
const CLAIM_MS: u64 = 30_000;
/// Largest number of writes sent in one pipeline.
const BATCH: usize = 512;
/// How long a blocking read waits before checking on the run.
const BLOCK_MS: u64 = 1000;
/// A relay tailing a live run marks it (`relay:tail:{id}`, lasting this long): while the mark
/// lasts, the run's stream is not replaced by its packed log, so a blocking read never waits on
/// a stream that went away. The owner tries again once the mark may have lapsed.
const TAIL: &str = "relay:tail:";
const MARK_MS: u64 = 5000;
/// A tailing relay renews its mark before a blocking read once the mark is this old.
const MARK_RENEW: Duration = Duration::from_millis(2000);
/// How many times the owner tries to pack a finished run that is still tailed (every
/// [`MARK_MS`]); after that its stream stays (it is read whole all the same).
const PACK_TRIES: u32 = 24;
/// Where a terminal event's Response JSON is in its group of [`APPEND`]'s ARGV.
const END_RESPONSE: usize = 8;

/// `XREAD`'s reply: per stream, its entries as (id, fields).
type StreamReply = Vec<(String, Vec<(String, HashMap<String, String>)>)>;

use super::FailHook;

const INSERT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = string.format('%d', now + tonumber(ARGV[3]))
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'response', ARGV[5], 'input', ARGV[6], 'status', ARGV[7], 'background', ARGV[8], 'owner', ARGV[2], 'lease', lease, 'tenant', ARGV[11])
local deadline = nil
local ttl = tonumber(ARGV[4])
if ttl > 0 then
  deadline = string.format('%d', tonumber(t[1]) + ttl)
  redis.call('HSET', KEYS[1], 'deadline', deadline)
  redis.call('EXPIREAT', KEYS[1], deadline)
  redis.call('ZADD', 'relay:expiry', ARGV[9], ARGV[1])
end
redis.call('ZADD', 'relay:leases', lease, ARGV[1])
redis.call('ZADD', 'relay:runs:' .. ARGV[11], now, ARGV[1])
for i = 12, #ARGV, 2 do
  local k = ARGV[10] .. ARGV[i]
  -- An input item keeps the run that first stored it (a later run that sends it again by id
  -- neither takes it over nor changes it).
  if redis.call('HSETNX', k, 'run', ARGV[1]) == 1 then
    redis.call('HSET', k, 'item', ARGV[i + 1])
    if deadline then redis.call('EXPIREAT', k, deadline) end
  end
end
return 1
"#;

/// Appends a batch of events, each to its own run. KEYS: per event, the run's hash and its log.
/// ARGV[1]: this relay's instance; ARGV[2]: the item key prefix (the run's tenant's is derived
/// from it and the run's `tenant`); then, per event, a group
/// prefixed by its length: id, stream entry id, seq, offset_ms, kind, data, terminal (`1`/`0`),
/// status, Response JSON, then (item id, item JSON) pairs. Answers, per event: 1 kept, 0 run
/// gone, -1 run finished, -2 run owned by another relay, -3 the log refused the entry.
const APPEND: &str = r#"
local out = {}
local a = 3
for e = 1, #KEYS / 2 do
  local n = tonumber(ARGV[a])
  local rk, lk, id = KEYS[2 * e - 1], KEYS[2 * e], ARGV[a + 1]
  local h = redis.call('HMGET', rk, 'status', 'owner', 'deadline', 'tenant')
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
        redis.call('ZREM', 'relay:leases', id)
        local ip = ARGV[2]
        if h[4] and h[4] ~= 'default' then ip = 'relay:titem:' .. h[4] .. ':' end
        for i = a + 10, a + n - 1, 2 do
          local k = ip .. ARGV[i]
          redis.call('HSET', k, 'item', ARGV[i + 1], 'run', id)
          if h[3] then redis.call('EXPIREAT', k, h[3]) end
        end
      end
    end
  end
  out[e] = code
  a = a + n + 1
end
return out
"#;

const RENEW: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = string.format('%d', now + tonumber(ARGV[2]))
local out = {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local k = ARGV[3] .. id
  local h = redis.call('HMGET', k, 'status', 'owner', 'cancel')
  if not h[1] then
    table.insert(out, 'gone:' .. id)
  elseif (h[1] ~= 'queued' and h[1] ~= 'in_progress') or h[2] ~= ARGV[1] then
    table.insert(out, 'lost:' .. id)
  else
    redis.call('HSET', k, 'lease', lease)
    redis.call('ZADD', 'relay:leases', lease, id)
    if h[3] then table.insert(out, 'cancel:' .. id) end
  end
end
return out
"#;

const CLAIM: &str = r#"
local h = redis.call('HMGET', KEYS[1], 'status', 'lease')
if (not h[1]) or (h[1] ~= 'queued' and h[1] ~= 'in_progress') then
  redis.call('ZREM', 'relay:leases', ARGV[3])
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if h[2] and tonumber(h[2]) > now then return 0 end
local lease = string.format('%d', now + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'lease', lease)
redis.call('ZADD', 'relay:leases', lease, ARGV[3])
return 1
"#;

const LAPSED: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', 'relay:leases', '-inf', string.format('%d', now), 'LIMIT', 0, 100)
"#;

const CANCEL: &str = r#"
local h = redis.call('HMGET', KEYS[1], 'status', 'tenant')
local s = h[1]
if (h[2] or 'default') ~= ARGV[1] then return 0 end
if s == 'queued' or s == 'in_progress' then
  redis.call('HSET', KEYS[1], 'cancel', '1')
  return 1
end
return 0
"#;

/// Deletes a run: ARGV[1] its id, ARGV[2] the item key prefix, ARGV[3] the tenant it must be of
/// (`*`: any, for expiry and recovery), then its item ids.
const DELETE: &str = r#"
local existed = redis.call('EXISTS', KEYS[1])
local t = redis.call('HGET', KEYS[1], 'tenant') or 'default'
if existed == 1 and ARGV[3] ~= '*' and t ~= ARGV[3] then return 0 end
local ip = ARGV[2]
if t ~= 'default' then ip = 'relay:titem:' .. t .. ':' end
for i = 4, #ARGV do
  local k = ip .. ARGV[i]
  if redis.call('HGET', k, 'run') == ARGV[1] then redis.call('DEL', k) end
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', 'relay:leases', ARGV[1])
redis.call('ZREM', 'relay:expiry', ARGV[1])
redis.call('ZREM', 'relay:runs:' .. t, ARGV[1])
return existed
"#;

/// Keeps the usage of each model turn (ARGV[2], JSON) of a run of tenant ARGV[1], if the run is
/// still there (never re-creating a deleted or expired one).
const KEEP_TURNS: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if (redis.call('HGET', KEYS[1], 'tenant') or 'default') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'turns', ARGV[2])
return 1
"#;

/// Reads fields of a run's hash, for one tenant: ARGV[1] the tenant, then the field names.
/// Answers nothing (an empty list) for a run of another tenant, or no run.
const READ: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
if (redis.call('HGET', KEYS[1], 'tenant') or 'default') ~= ARGV[1] then return {} end
return redis.call('HMGET', KEYS[1], unpack(ARGV, 2))
"#;

/// Replaces finished runs' streams by their packed logs. KEYS: per run, its hash, its log and
/// its tail mark; ARGV: per run, how many entries were packed and the packed log. A run is
/// packed only if it is finished, not tailed (no mark) and its stream holds exactly the packed
/// entries; then its hash keeps the blob (`packed`) instead of `response` (the blob holds it),
/// and the stream is deleted. Answers, per run: 1 packed, 0 not packed (gone, not finished,
/// already packed, or not the stream packed), -1 tailed (to try again later).
const PACK: &str = r#"
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

/// A run's status and log, read together: KEYS[1] its hash, KEYS[2] its stream; ARGV[1] the
/// tenant it must be of (`*`: any, the relay's own bookkeeping). Answers nothing (an empty list)
/// for no run (of that tenant, or with no status), else {status, packed log} for a packed run, else {status, false,
/// the stream's entries}.
const READ_LOG: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
local h = redis.call('HMGET', KEYS[1], 'status', 'packed', 'tenant')
if not h[1] then return {} end
if ARGV[1] ~= '*' and (h[3] or 'default') ~= ARGV[1] then return {} end
if h[2] then return {h[1], h[2]} end
return {h[1], false, redis.call('XRANGE', KEYS[2], '-', '+')}
"#;

/// One step of tailing a run: KEYS[1] its hash, KEYS[2] its stream, KEYS[3] its tail mark;
/// ARGV[1] the first stream entry id wanted, ARGV[2] how many entries at most, ARGV[3] the
/// mark's life (ms). Marks a run not yet finished as tailed. Answers nothing for a run gone,
/// else {status, packed log} once the stream was packed, else {status, false, entries from
/// ARGV[1]}.
const TAIL_STEP: &str = r#"
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
const CONV_ITEMS: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
return redis.call('LRANGE', KEYS[2], 0, -1)
"#;

const CONV_CREATE: &str = r#"
redis.call('HSET', KEYS[1], 'created_at', ARGV[1], 'metadata', ARGV[2])
if #ARGV > 2 then redis.call('RPUSH', KEYS[2], unpack(ARGV, 3)) end
return 1
"#;

const CONV_UPDATE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'metadata', ARGV[1])
return 1
"#;

const CONV_APPEND: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if #ARGV > 0 then redis.call('RPUSH', KEYS[2], unpack(ARGV)) end
return 1
"#;

const CONV_DELETE_ITEM: &str = r#"
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

/// How long a conversation's lock lasts at most (`--max-run-seconds`' default): the bound for a
/// `store: false` run, whose end Redis does not see, on a relay that stopped.
const CONV_LOCK_MS: u64 = 3_600_000;

const CONV_LOCK: &str = r#"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
local holder = redis.call('GET', KEYS[1])
if holder and string.sub(holder, 1, 5) == 'resp_' then
  local st = redis.call('HGET', 'relay:resp:' .. holder, 'status')
  if st and st ~= 'queued' and st ~= 'in_progress' then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 1
  end
end
return 0
"#;

const CONV_HOLD: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
return 1
"#;

const UNLOCK: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"#;

/// The key prefix of `tenant`'s items (the default tenant's is the one from before tenants).
fn item_prefix(tenant: &Tenant) -> String {
    if tenant.is_default() {
        ITEM.to_string()
    } else {
        format!("{TENANT_ITEM}{}:", tenant.as_str())
    }
}

fn script(body: &str, keys: &[String]) -> ::redis::Cmd {
    let mut c = ::redis::cmd("EVAL");
    c.arg(body).arg(keys.len()).arg(keys);
    c
}

fn unavailable(e: RedisError) -> StoreError {
    StoreError(format!("{}: Redis: {e}", super::UNAVAILABLE))
}

/// One lazily (re)connected multiplexed connection: dropped after any error that is not a
/// server's reply, so the next use reconnects (Redis restarted, network blip).
struct Conn {
    client: Client,
    config: AsyncConnectionConfig,
    cur: tokio::sync::Mutex<Option<MultiplexedConnection>>,
}

impl Conn {
    fn new(client: Client, config: AsyncConnectionConfig) -> Self {
        Conn {
            client,
            config,
            cur: tokio::sync::Mutex::new(None),
        }
    }

    async fn get(&self) -> Result<MultiplexedConnection, RedisError> {
        let mut cur = self.cur.lock().await;
        if let Some(c) = &*cur {
            return Ok(c.clone());
        }
        let c = self
            .client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        *cur = Some(c.clone());
        Ok(c)
    }

    async fn failed(&self, e: &RedisError) {
        if e.code().is_none() {
            *self.cur.lock().await = None;
        }
    }

    async fn query<T: FromRedisValue>(&self, cmd: &::redis::Cmd) -> Result<T, StoreError> {
        let mut c = self.get().await.map_err(unavailable)?;
        match cmd.query_async(&mut c).await {
            Ok(v) => Ok(v),
            Err(e) => {
                self.failed(&e).await;
                Err(unavailable(e))
            }
        }
    }
}

/// A run this relay runs and holds the lease of.
struct Owned {
    cancel: CancellationToken,
    fail: FailHook,
}

enum Cmd {
    Insert {
        id: String,
        cmd: ::redis::Cmd,
        owned: Option<Owned>,
    },
    /// `args`: the event's group of [`APPEND`]'s ARGV (without its length).
    Append {
        id: String,
        log: Arc<RunLog>,
        entry: LogEntry,
        terminal: bool,
        args: Vec<String>,
        fail: Option<FailHook>,
    },
    Flush {
        reply: oneshot::Sender<()>,
    },
}

struct Inner {
    client: Client,
    conn: Arc<Conn>,
    tx: mpsc::UnboundedSender<Cmd>,
    /// This process's name as an owner.
    instance: String,
    ttl: Option<Duration>,
    owned: Arc<Mutex<HashMap<String, Owned>>>,
    /// Logs of runs live on other relays, tailed from Redis (shared by this relay's readers).
    tails: Mutex<HashMap<String, Weak<RunLog>>>,
}

#[derive(Clone)]
pub struct Redis {
    inner: Arc<Inner>,
}

/// Appends one run's events through the writer.
pub struct Sink {
    id: String,
    tx: mpsc::UnboundedSender<Cmd>,
    fail: Option<FailHook>,
}

impl LogSink for Sink {
    fn append(&self, log: &Arc<RunLog>, entry: &LogEntry, terminal: Option<&Response>) {
        let mut args: Vec<String> = vec![
            self.id.clone(),
            format!("0-{}", entry.seq + 1),
            entry.seq.to_string(),
            entry.offset_ms.to_string(),
            entry.kind().to_string(),
            String::from_utf8_lossy(&entry.json()).into_owned(),
        ];
        match terminal {
            Some(r) => {
                args.push("1".into());
                args.push(status_of(r));
                args.push(serde_json::to_string(r).expect("serializes"));
                for o in &r.output {
                    if let Some(i) = output_as_input(o) {
                        args.push(o.id().to_string());
                        args.push(serde_json::to_string(&i).expect("serializes"));
                    }
                }
            }
            None => args.extend(["0".into(), String::new(), String::new()]),
        }
        let c = Cmd::Append {
            id: self.id.clone(),
            log: log.clone(),
            entry: entry.clone(),
            terminal: terminal.is_some(),
            args,
            fail: self.fail.clone(),
        };
        if self.tx.send(c).is_err() {
            tracing::error!("the Redis writer is gone; an event could not be kept");
        }
    }
}

impl Redis {
    /// Connects (failing at once if Redis cannot be reached) and starts the writer and the
    /// lease keeper. Needs a tokio runtime.
    pub fn open(url: &str, ttl: Option<Duration>) -> Result<Self, StoreError> {
        crate::install_tls();
        let shown = mask_url(url);
        let client = Client::open(url).map_err(|e| StoreError(format!("{shown}: {e}")))?;
        let rt = tokio::runtime::Handle::try_current()
            .map_err(|_| StoreError("the Redis store needs a tokio runtime".into()))?;
        // Fail fast on a wrong address or password (one short blocking round trip at start-up).
        let mut probe = client
            .get_connection_with_timeout(Duration::from_secs(2))
            .map_err(|e| StoreError(format!("cannot reach Redis at {shown}: {e}")))?;
        ::redis::cmd("PING")
            .query::<String>(&mut probe)
            .map_err(|e| StoreError(format!("Redis at {shown}: {e}")))?;
        drop(probe);
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_secs(5)));
        let conn = Arc::new(Conn::new(client.clone(), config));
        let (tx, rx) = mpsc::unbounded_channel();
        let owned: Arc<Mutex<HashMap<String, Owned>>> = Arc::default();
        let instance = format!("relay-{:016x}", rand::random::<u64>());
        let inner = Arc::new(Inner {
            client,
            conn: conn.clone(),
            tx,
            instance,
            ttl,
            owned: owned.clone(),
            tails: Mutex::default(),
        });
        rt.spawn(write_loop(conn, rx, owned, inner.instance.clone()));
        rt.spawn(keep_leases(Arc::downgrade(&inner)));
        tracing::info!(redis = %shown, instance = %inner.instance, "Redis store ready");
        Ok(Redis { inner })
    }

    fn resp_key(id: &str) -> String {
        format!("{RESP}{id}")
    }

    fn log_key(id: &str) -> String {
        format!("{LOG}{id}")
    }

    fn mark_key(id: &str) -> String {
        format!("{TAIL}{id}")
    }

    /// The sink a run's emitter appends through; `fail` ends the run if its events cannot be kept.
    pub fn sink(&self, id: &str, fail: Option<FailHook>) -> Sink {
        Sink {
            id: id.to_string(),
            tx: self.inner.tx.clone(),
            fail,
        }
    }

    /// Keeps a starting run (queued behind nothing: before its first event) and takes its lease.
    pub fn insert(
        &self,
        record: &Record,
        expires_at: Option<i64>,
        cancel: CancellationToken,
        fail: FailHook,
    ) {
        let r = &record.response;
        let mut args: Vec<String> = vec![
            r.id.clone(),
            self.inner.instance.clone(),
            LEASE_MS.to_string(),
            self.inner
                .ttl
                .map(|t| t.as_secs().max(1))
                .unwrap_or(0)
                .to_string(),
            serde_json::to_string(r).expect("serializes"),
            serde_json::to_string(&record.input).expect("serializes"),
            status_of(r),
            if r.background { "1".into() } else { "0".into() },
            expires_at.unwrap_or(0).to_string(),
            item_prefix(&record.tenant),
            record.tenant.as_str().to_string(),
        ];
        for i in &record.input {
            if let (Some(item_id), Ok(json)) = (i.id(), serde_json::to_string(i)) {
                args.push(item_id.to_string());
                args.push(json);
            }
        }
        let mut cmd = script(INSERT, &[Self::resp_key(&r.id)]);
        cmd.arg(args);
        let _ = self.inner.tx.send(Cmd::Insert {
            id: r.id.clone(),
            cmd,
            owned: Some(Owned { cancel, fail }),
        });
    }

    /// Fields of a run's hash, of any tenant (the relay's own bookkeeping).
    async fn fields(&self, id: &str, names: &[&str]) -> Result<Vec<Option<String>>, StoreError> {
        let mut cmd = ::redis::cmd("HMGET");
        cmd.arg(Self::resp_key(id)).arg(names);
        self.inner.conn.query(&cmd).await
    }

    /// Fields of `tenant`'s run `id`: `None` for a run of another tenant, or no run.
    async fn tenant_fields(
        &self,
        tenant: &Tenant,
        id: &str,
        names: &[&str],
    ) -> Result<Option<Vec<Option<String>>>, StoreError> {
        let mut cmd = script(READ, &[Self::resp_key(id)]);
        cmd.arg(tenant.as_str()).arg(names);
        let f: Vec<Option<String>> = self.inner.conn.query(&cmd).await?;
        Ok((f.len() == names.len()).then_some(f))
    }

    /// Claims the run if its owner's lease lapsed and finishes it as failed. True if it did.
    async fn recover(&self, id: &str) -> Result<bool, StoreError> {
        if self
            .inner
            .owned
            .lock()
            .expect("owned poisoned")
            .contains_key(id)
        {
            return Ok(false);
        }
        let mut claim = script(CLAIM, &[Self::resp_key(id)]);
        claim.arg(&self.inner.instance).arg(CLAIM_MS).arg(id);
        let claimed: i64 = self.inner.conn.query(&claim).await?;
        if claimed != 1 {
            return Ok(false);
        }
        let entries = self.entries(id).await?;
        let fold = fold_entries(&entries)?;
        if fold.response().is_none() {
            // Not even `response.created` was kept: nothing was ever visible; drop it.
            self.remove(None, id).await?;
            return Ok(true);
        }
        let log = Arc::new(RunLog::from_entries(entries, fold, false));
        end_as_failed(
            log.clone(),
            Arc::new(self.sink(id, None)),
            "The relay running this response stopped before it finished.",
        );
        if tokio::time::timeout(Duration::from_secs(10), log.wait_finished())
            .await
            .is_err()
        {
            return Err(StoreError(format!(
                "could not finish the abandoned run {id}"
            )));
        }
        tracing::warn!(response_id = %id, "finished a run whose relay stopped (its lease lapsed)");
        Ok(true)
    }

    /// The kept events of a run, in order (none for a run gone).
    async fn entries(&self, id: &str) -> Result<Vec<LogEntry>, StoreError> {
        Ok(self
            .read_log(None, id)
            .await?
            .map(|k| k.entries)
            .unwrap_or_default())
    }

    /// A run's status and kept events, read together (from its packed log once it has one, else
    /// from its stream): `None` for no run, or one of another tenant than `tenant` (`None`: any).
    async fn read_log(
        &self,
        tenant: Option<&Tenant>,
        id: &str,
    ) -> Result<Option<Kept>, StoreError> {
        let mut cmd = script(READ_LOG, &[Self::resp_key(id), Self::log_key(id)]);
        cmd.arg(tenant.map_or("*", Tenant::as_str));
        let reply: Vec<::redis::Value> = self.inner.conn.query(&cmd).await?;
        kept_of(id, reply)
    }

    /// One step of tailing run `id` ([`TAIL_STEP`]): `None` for a run gone; else its status and
    /// the events kept from `next` on (or, once it is packed, all of them), marking a run that
    /// goes on as tailed.
    async fn tail_step(&self, id: &str, next: u64) -> Result<Option<Kept>, StoreError> {
        let mut cmd = script(
            TAIL_STEP,
            &[Self::resp_key(id), Self::log_key(id), Self::mark_key(id)],
        );
        cmd.arg(format!("0-{}", next + 1)).arg(256).arg(MARK_MS);
        let reply: Vec<::redis::Value> = self.inner.conn.query(&cmd).await?;
        kept_of(id, reply)
    }

    pub async fn record(&self, tenant: &Tenant, id: &str) -> Result<Option<Record>, StoreError> {
        let Some((record, status)) = self.raw_record(tenant, id).await? else {
            return Ok(None);
        };
        if !unfinished(&status) {
            return Ok(Some(record));
        }
        if self.recover(id).await? {
            return Ok(self.raw_record(tenant, id).await?.map(|(r, _)| r));
        }
        // Live on another relay: its Response as the kept events describe it now.
        let mut record = record;
        let tailed = self
            .inner
            .tails
            .lock()
            .expect("tails poisoned")
            .get(id)
            .and_then(Weak::upgrade);
        let now = match tailed {
            Some(log) => log.snapshot(),
            None => match self.read_log(Some(tenant), id).await? {
                Some(k) => fold_entries(&k.entries)?.response().cloned(),
                None => return Ok(None),
            },
        };
        if let Some(r) = now {
            record.response = r;
        }
        Ok(Some(record))
    }

    async fn raw_record(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<(Record, String)>, StoreError> {
        let names = ["response", "input", "status", "packed"];
        let mut cmd = script(READ, &[Self::resp_key(id)]);
        cmd.arg(tenant.as_str()).arg(&names[..]);
        let f: Vec<Option<Vec<u8>>> = self.inner.conn.query(&cmd).await?;
        let [response, Some(input), Some(status), packed] =
            <[_; 4]>::try_from(f).unwrap_or_default()
        else {
            return Ok(None);
        };
        let bad =
            |e: serde_json::Error| StoreError(format!("stored response {id} is unreadable: {e}"));
        let response = match (packed, response) {
            // A packed run: its final Response is packed with its log.
            (Some(blob), _) => serde_json::from_slice(&packed::unpack(&blob)?.response),
            (None, Some(json)) => serde_json::from_slice(&json),
            (None, None) => return Ok(None),
        };
        let record = Record {
            tenant: tenant.clone(),
            response: response.map_err(bad)?,
            input: serde_json::from_slice(&input).map_err(bad)?,
        };
        let status = String::from_utf8(status)
            .map_err(|_| StoreError(format!("stored response {id} has a bad status")))?;
        Ok(Some((record, status)))
    }

    /// A run's log: complete for a finished run; for a run live on another relay, the kept
    /// events then, appended as that relay keeps them, the rest (tailed with `XREAD BLOCK`).
    pub async fn log(&self, tenant: &Tenant, id: &str) -> Result<Option<Arc<RunLog>>, StoreError> {
        // One read for a finished run: its status and log together.
        let Some(mut kept) = self.read_log(Some(tenant), id).await? else {
            return Ok(None);
        };
        if let Some(log) = self
            .inner
            .tails
            .lock()
            .expect("tails poisoned")
            .get(id)
            .and_then(Weak::upgrade)
        {
            return Ok(Some(log));
        }
        if unfinished(&kept.status) && self.recover(id).await? {
            let Some(again) = self.read_log(Some(tenant), id).await? else {
                return Ok(None);
            };
            kept = again;
        }
        let Kept { status, entries } = kept;
        if !unfinished(&status) {
            // Finished: its terminal event was kept with its status (one script), so the log
            // is whole; replayed as kept, as SQLite's are.
            return Ok(Some(Arc::new(RunLog::kept(entries))));
        }
        let fold = fold_entries(&entries)?;
        if fold.is_terminal() {
            return Ok(Some(Arc::new(RunLog::from_entries(entries, fold, true))));
        }
        let next = entries.len() as u64;
        let log = Arc::new(RunLog::from_entries(entries, fold, false));
        let mut tails = self.inner.tails.lock().expect("tails poisoned");
        tails.retain(|_, w| w.strong_count() > 0);
        if let Some(existing) = tails.get(id).and_then(Weak::upgrade) {
            return Ok(Some(existing));
        }
        tails.insert(id.to_string(), Arc::downgrade(&log));
        drop(tails);
        tokio::spawn(tail(self.clone(), id.to_string(), log.clone(), next));
        Ok(Some(log))
    }

    /// Keeps the usage of each model turn of `tenant`'s ended run `id` (nothing if it is gone).
    pub async fn keep_turns(
        &self,
        tenant: &Tenant,
        id: &str,
        turns: &[Usage],
    ) -> Result<(), StoreError> {
        let mut cmd = script(KEEP_TURNS, &[Self::resp_key(id)]);
        cmd.arg(tenant.as_str())
            .arg(serde_json::to_string(turns).expect("serializes"));
        let _: i64 = self.inner.conn.query(&cmd).await?;
        Ok(())
    }

    /// The usage of each model turn of `tenant`'s run `id`, if it was kept.
    pub async fn turns(&self, tenant: &Tenant, id: &str) -> Result<Option<Vec<Usage>>, StoreError> {
        let Some(f) = self.tenant_fields(tenant, id, &["turns"]).await? else {
            return Ok(None);
        };
        f[0].as_deref()
            .map(|j| {
                serde_json::from_str(j)
                    .map_err(|e| StoreError(format!("stored turns of {id} are unreadable: {e}")))
            })
            .transpose()
    }

    /// `tenant`'s runs as `query` wants them, newest stored first (up to `limit + 1`): the
    /// tenant's index read 100 at a time from after `query.after`, those runs' hashes read
    /// together for their status and Response.
    pub async fn runs(
        &self,
        tenant: &Tenant,
        query: &RunQuery,
    ) -> Result<Vec<Response>, StoreError> {
        let index = format!("relay:runs:{}", tenant.as_str());
        let mut from: i64 = match &query.after {
            Some(after) => {
                let mut cmd = ::redis::cmd("ZREVRANK");
                cmd.arg(&index).arg(after);
                let rank: Option<i64> = self.inner.conn.query(&cmd).await?;
                match rank {
                    Some(r) => r + 1,
                    None => return Ok(Vec::new()),
                }
            }
            None => 0,
        };
        const PAGE: i64 = 100;
        let mut found = Vec::new();
        loop {
            let mut cmd = ::redis::cmd("ZREVRANGE");
            cmd.arg(&index).arg(from).arg(from + PAGE - 1);
            let ids: Vec<String> = self.inner.conn.query(&cmd).await?;
            // Read together: the multiplexed connection pipelines them.
            let records =
                futures::future::try_join_all(ids.iter().map(|id| self.raw_record(tenant, id)))
                    .await?;
            // A run whose hash expired (its time to live) is gone, though still indexed.
            for (record, status) in records.into_iter().flatten() {
                if query.wants(&status, &record.response.model) {
                    found.push(record.response);
                    if found.len() > query.limit {
                        return Ok(found);
                    }
                }
            }
            if (ids.len() as i64) < PAGE {
                return Ok(found);
            }
            from += PAGE;
        }
    }

    pub async fn find_item(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<InputItem>, StoreError> {
        let mut cmd = ::redis::cmd("HGET");
        cmd.arg(format!("{}{id}", item_prefix(tenant))).arg("item");
        let item: Option<String> = self.inner.conn.query(&cmd).await?;
        item.map(|s| serde_json::from_str(&s).map_err(|e| StoreError(e.to_string())))
            .transpose()
    }

    /// Removes `tenant`'s run (nothing if it is another tenant's).
    pub async fn delete(&self, tenant: &Tenant, id: &str) -> Result<bool, StoreError> {
        self.remove(Some(tenant), id).await
    }

    /// Removes a run of `tenant`, or of any tenant with `None` (expiry, recovery).
    async fn remove(&self, tenant: Option<&Tenant>, id: &str) -> Result<bool, StoreError> {
        let mut items: Vec<String> = Vec::new();
        let owner = match tenant {
            Some(t) => t.clone(),
            None => Tenant::new(
                self.fields(id, &["tenant"]).await?[0]
                    .as_deref()
                    .unwrap_or(crate::config::DEFAULT_TENANT),
            ),
        };
        if let Some((record, _)) = self.raw_record(&owner, id).await? {
            items.extend(
                record
                    .input
                    .iter()
                    .filter_map(|i| i.id().map(str::to_string)),
            );
            items.extend(
                record
                    .response
                    .output
                    .iter()
                    .filter(|o| output_as_input(o).is_some())
                    .map(|o| o.id().to_string()),
            );
        }
        let mut cmd = script(DELETE, &[Self::resp_key(id), Self::log_key(id)]);
        cmd.arg(id)
            .arg(ITEM)
            .arg(tenant.map(|t| t.as_str()).unwrap_or("*"))
            .arg(items);
        let existed: i64 = self.inner.conn.query(&cmd).await?;
        Ok(existed == 1)
    }

    pub async fn expire(&self, now: i64, live: Vec<String>) -> Result<usize, StoreError> {
        let mut cmd = ::redis::cmd("ZRANGEBYSCORE");
        cmd.arg("relay:expiry").arg("-inf").arg(now);
        let ids: Vec<String> = self.inner.conn.query(&cmd).await?;
        let mut n = 0;
        for id in ids.iter().filter(|i| !live.contains(i)) {
            if self.remove(None, id).await? {
                n += 1;
            }
        }
        Ok(n)
    }

    pub async fn flush(&self) {
        let (reply, rx) = oneshot::channel();
        if self.inner.tx.send(Cmd::Flush { reply }).is_ok() {
            let _ = rx.await;
        }
    }

    /// Cancels a background run live on another relay: flags it (its owner acts within a
    /// renewal) and waits for its terminal event. Does nothing for other runs.
    pub async fn cancel_elsewhere(&self, tenant: &Tenant, id: &str) -> Result<(), StoreError> {
        let Some(f) = self
            .tenant_fields(tenant, id, &["status", "background"])
            .await?
        else {
            return Ok(());
        };
        let (Some(status), Some(background)) = (f[0].clone(), f[1].clone()) else {
            return Ok(());
        };
        if !unfinished(&status) || background != "1" {
            return Ok(());
        }
        let mut cancel = script(CANCEL, &[Self::resp_key(id)]);
        cancel.arg(tenant.as_str());
        let _: i64 = self.inner.conn.query(&cancel).await?;
        if let Some(log) = self.log(tenant, id).await? {
            let _ = tokio::time::timeout(Duration::from_secs(10), log.wait_finished()).await;
        }
        Ok(())
    }

    fn conv_key(tenant: &Tenant, id: &str) -> String {
        format!("relay:conv:{}:{id}", tenant.as_str())
    }

    fn conv_items_key(tenant: &Tenant, id: &str) -> String {
        format!("relay:conv-items:{}:{id}", tenant.as_str())
    }

    pub async fn create_conversation(
        &self,
        tenant: &Tenant,
        c: &Conversation,
        items: &[InputItem],
    ) -> Result<(), StoreError> {
        let mut cmd = script(
            CONV_CREATE,
            &[
                Self::conv_key(tenant, &c.id),
                Self::conv_items_key(tenant, &c.id),
            ],
        );
        cmd.arg(c.created_at)
            .arg(serde_json::to_string(&c.metadata).expect("serializes"));
        for i in items {
            cmd.arg(serde_json::to_string(i).expect("serializes"));
        }
        let _: i64 = self.inner.conn.query(&cmd).await?;
        Ok(())
    }

    pub async fn conversation(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<Conversation>, StoreError> {
        let mut cmd = ::redis::cmd("HMGET");
        cmd.arg(Self::conv_key(tenant, id))
            .arg("created_at")
            .arg("metadata");
        let f: Vec<Option<String>> = self.inner.conn.query(&cmd).await?;
        let (Some(created_at), Some(metadata)) = (f[0].clone(), f[1].clone()) else {
            return Ok(None);
        };
        Ok(Some(Conversation {
            id: id.to_string(),
            object: "conversation".into(),
            created_at: created_at.parse().unwrap_or(0),
            metadata: serde_json::from_str(&metadata).map_err(|e| StoreError(e.to_string()))?,
        }))
    }

    pub async fn conversation_items(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<Vec<InputItem>>, StoreError> {
        let mut cmd = script(
            CONV_ITEMS,
            &[Self::conv_key(tenant, id), Self::conv_items_key(tenant, id)],
        );
        cmd.arg(0);
        let rows: Option<Vec<String>> = self.inner.conn.query(&cmd).await?;
        rows.map(|rows| {
            rows.iter()
                .map(|s| serde_json::from_str(s).map_err(|e| StoreError(e.to_string())))
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()
    }

    pub async fn update_conversation(
        &self,
        tenant: &Tenant,
        id: &str,
        metadata: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<bool, StoreError> {
        let mut cmd = script(CONV_UPDATE, &[Self::conv_key(tenant, id)]);
        cmd.arg(serde_json::to_string(metadata).expect("serializes"));
        let n: i64 = self.inner.conn.query(&cmd).await?;
        Ok(n == 1)
    }

    pub async fn delete_conversation(&self, tenant: &Tenant, id: &str) -> Result<bool, StoreError> {
        let mut cmd = ::redis::cmd("DEL");
        cmd.arg(Self::conv_key(tenant, id))
            .arg(Self::conv_items_key(tenant, id));
        let n: i64 = self.inner.conn.query(&cmd).await?;
        Ok(n > 0)
    }

    pub async fn append_conversation(
        &self,
        tenant: &Tenant,
        id: &str,
        items: &[InputItem],
    ) -> Result<bool, StoreError> {
        let mut cmd = script(
            CONV_APPEND,
            &[Self::conv_key(tenant, id), Self::conv_items_key(tenant, id)],
        );
        for i in items {
            cmd.arg(serde_json::to_string(i).expect("serializes"));
        }
        let n: i64 = self.inner.conn.query(&cmd).await?;
        Ok(n == 1)
    }

    pub async fn delete_conversation_item(
        &self,
        tenant: &Tenant,
        id: &str,
        item_id: &str,
    ) -> Result<bool, StoreError> {
        let mut cmd = script(
            CONV_DELETE_ITEM,
            &[Self::conv_key(tenant, id), Self::conv_items_key(tenant, id)],
        );
        cmd.arg(item_id);
        let n: i64 = self.inner.conn.query(&cmd).await?;
        Ok(n == 1)
    }

    /// Takes a conversation for one run of any relay sharing this Redis: the lock's token, or
    /// `None` while another run holds it. A lock whose holder run (see `hold_conversation`) has
    /// ended is free: a relay that stopped holding one does not lock the conversation beyond its
    /// run, which another relay finishes once its lease lapses. Every lock lapses after the
    /// default longest a run may take (an hour).
    pub async fn lock_conversation(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<String>, StoreError> {
        let token = format!(
            "lock-{}-{:016x}",
            self.inner.instance,
            rand::random::<u64>()
        );
        let mut cmd = script(
            CONV_LOCK,
            &[format!("relay:conv-lock:{}:{id}", tenant.as_str())],
        );
        cmd.arg(&token).arg(CONV_LOCK_MS);
        let took: i64 = self.inner.conn.query(&cmd).await?;
        Ok((took == 1).then_some(token))
    }

    /// Makes run `run_id` the holder of a lock taken with `token`; whether it still held it.
    pub async fn hold_conversation(
        &self,
        tenant: &Tenant,
        id: &str,
        token: &str,
        run_id: &str,
    ) -> bool {
        let mut cmd = script(
            CONV_HOLD,
            &[format!("relay:conv-lock:{}:{id}", tenant.as_str())],
        );
        cmd.arg(token).arg(run_id);
        matches!(self.inner.conn.query::<i64>(&cmd).await, Ok(1))
    }

    pub async fn unlock_conversation(&self, tenant: &Tenant, id: &str, token: &str) {
        let mut cmd = script(
            UNLOCK,
            &[format!("relay:conv-lock:{}:{id}", tenant.as_str())],
        );
        cmd.arg(token);
        if let Err(e) = self.inner.conn.query::<i64>(&cmd).await {
            tracing::warn!(error = %e, "could not release a conversation's lock (it lapses on its own)");
        }
    }

    /// Whether Redis answers now (for new stored requests while it is away).
    pub async fn available(&self) -> Result<(), StoreError> {
        let _: String = self.inner.conn.query(&::redis::cmd("PING")).await?;
        Ok(())
    }
}

/// A run's status and kept events.
struct Kept {
    status: String,
    entries: Vec<LogEntry>,
}

/// [`READ_LOG`]'s or [`TAIL_STEP`]'s reply: `None` for a run gone; the entries of its packed log
/// (all of them) or of its stream (those read).
fn kept_of(id: &str, reply: Vec<::redis::Value>) -> Result<Option<Kept>, StoreError> {
    let bad = |why: String| StoreError(format!("the kept log of {id} is unreadable: {why}"));
    let mut it = reply.into_iter();
    let Some(status) = it.next() else {
        return Ok(None);
    };
    let status = String::from_redis_value(status).map_err(|e| bad(e.to_string()))?;
    let packed = match it.next() {
        Some(v) => Option::<Vec<u8>>::from_redis_value(v).map_err(|e| bad(e.to_string()))?,
        None => None,
    };
    let entries = match (packed, it.next()) {
        (Some(blob), _) => packed::unpack(&blob)?.entries,
        (None, Some(v)) => {
            let raw = Vec::<(String, HashMap<String, String>)>::from_redis_value(v)
                .map_err(|e| bad(e.to_string()))?;
            raw.into_iter()
                .map(|(_, f)| entry_of(&f))
                .collect::<Result<_, _>>()?
        }
        (None, None) => Vec::new(),
    };
    Ok(Some(Kept { status, entries }))
}

fn entry_of(f: &HashMap<String, String>) -> Result<LogEntry, StoreError> {
    let field = |k: &str| {
        f.get(k)
            .ok_or_else(|| StoreError(format!("a kept event has no '{k}'")))
    };
    let seq = field("seq")?
        .parse()
        .map_err(|_| StoreError("a kept event has a bad 'seq'".into()))?;
    let offset_ms = field("offset_ms")?.parse().unwrap_or(0);
    Ok(LogEntry {
        seq,
        offset_ms,
        frame: LogEntry::frame_for(field("kind")?, field("data")?.as_bytes()),
    })
}

fn event_of(e: &LogEntry) -> Result<crate::api::Event, StoreError> {
    let s: Sequenced = serde_json::from_slice(&e.json())
        .map_err(|err| StoreError(format!("kept event {} is unreadable: {err}", e.seq)))?;
    Ok(s.event)
}

fn fold_entries(entries: &[LogEntry]) -> Result<Fold, StoreError> {
    let mut fold = Fold::new();
    for e in entries {
        fold.apply(&event_of(e)?)
            .map_err(|err| StoreError(format!("kept event {} breaks the log: {err}", e.seq)))?;
    }
    Ok(fold)
}

/// Feeds `log` with the events another relay appends to the run's stream, from `next` on,
/// until the terminal event (or until no reader holds the log any more).
///
/// Each round first takes a step ([`TAIL_STEP`], one script) unless this relay marked the run
/// as tailed less than [`MARK_RENEW`] ago: it reads what was kept after `next` (from the stream,
/// or from the packed log once the owner replaced the stream by it) and, while the run goes on,
/// renews the mark. Then, caught up, it waits on the stream (`XREAD BLOCK`). The mark keeps the
/// owner from packing the stream away while this relay may be about to wait on it (a blocking
/// read of a deleted stream would wait its whole time before noticing): a finished run's stream
/// is gone only once no relay tailing it marked it for [`MARK_MS`].
async fn tail(store: Redis, id: String, log: Arc<RunLog>, mut next: u64) {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(None);
    let mut conn: Option<MultiplexedConnection> = None;
    let key = Redis::log_key(&id);
    let mut marked: Option<Instant> = None;
    let cannot_follow = "This relay could not follow the response's event log.";
    while !log.is_finished() && Arc::strong_count(&log) > 1 {
        if marked.is_none_or(|t| t.elapsed() >= MARK_RENEW) {
            let asked = Instant::now();
            match store.tail_step(&id, next).await {
                Ok(None) => {
                    // Deleted (or expired) while tailed: end the readers' streams.
                    end_tail(
                        &store,
                        &id,
                        &log,
                        "This response was deleted while it was running.",
                    );
                    return;
                }
                Ok(Some(Kept { status, entries })) => {
                    let live = unfinished(&status);
                    marked = live.then_some(asked);
                    let read = entries.len();
                    // A packed log holds every event; a stream's read starts at `next`.
                    let from = next;
                    let new = entries.into_iter().skip_while(|e| e.seq < from);
                    if let Err(e) = follow(&log, new, &mut next) {
                        tracing::error!(response_id = %id, error = %e, "a tailed event does not continue the log");
                        end_tail(&store, &id, &log, cannot_follow);
                        return;
                    }
                    if log.is_finished() {
                        break;
                    }
                    if !live && read == 0 {
                        // Finished, yet nothing kept after what this relay has: a log without
                        // its end (which a run's status is never written without).
                        tracing::error!(response_id = %id, "a finished run's kept log has no end");
                        end_tail(&store, &id, &log, cannot_follow);
                        return;
                    }
                    if !live {
                        continue;
                    }
                }
                Err(e) => {
                    tracing::warn!(response_id = %id, error = %e, "tailing a run failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            }
        }
        let c = match &mut conn {
            Some(c) => c,
            None => match store
                .inner
                .client
                .get_multiplexed_async_connection_with_config(&config)
                .await
            {
                Ok(c) => conn.insert(c),
                Err(e) => {
                    tracing::warn!(response_id = %id, error = %e, "cannot tail a run: Redis is unavailable; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            },
        };
        let mut cmd = ::redis::cmd("XREAD");
        cmd.arg("COUNT")
            .arg(256)
            .arg("BLOCK")
            .arg(BLOCK_MS)
            .arg("STREAMS")
            .arg(&key)
            .arg(format!("0-{next}"));
        let read: Result<Option<StreamReply>, RedisError> = cmd.query_async(c).await;
        match read {
            Ok(Some(streams)) => {
                let entries = streams
                    .into_iter()
                    .flat_map(|(_, entries)| entries)
                    .map(|(_, fields)| entry_of(&fields))
                    .collect::<Result<Vec<_>, _>>();
                if let Err(e) = entries.and_then(|e| follow(&log, e.into_iter(), &mut next)) {
                    tracing::error!(response_id = %id, error = %e, "a tailed event does not continue the log");
                    end_tail(&store, &id, &log, cannot_follow);
                    return;
                }
            }
            Ok(None) => {
                // Nothing new for a while: is the run still there, and its owner alive? (The
                // next round takes a step, which finds a run deleted, ended, or packed.)
                marked = None;
                match store.fields(&id, &["status"]).await {
                    Ok(f) if f[0].as_deref().is_some_and(unfinished) => {
                        if let Err(e) = store.recover(&id).await {
                            tracing::warn!(response_id = %id, error = %e, "could not finish an abandoned run");
                        }
                    }
                    _ => {}
                }
            }
            Err(e) => {
                tracing::warn!(response_id = %id, error = %e, "tailing a run failed; reconnecting");
                conn = None;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    store
        .inner
        .tails
        .lock()
        .expect("tails poisoned")
        .retain(|_, w| w.strong_count() > 0);
}

/// Appends `entries` (kept by another relay, from `*next` on) to a tailed log.
fn follow(
    log: &RunLog,
    entries: impl Iterator<Item = LogEntry>,
    next: &mut u64,
) -> Result<(), StoreError> {
    for e in entries {
        let ev = event_of(&e)?;
        log.append_kept(e, &ev).map_err(StoreError)?;
        *next += 1;
    }
    Ok(())
}

/// Ends a tailed log that will get no more events from Redis with a terminal event of its own
/// (open items closed, `response.failed` saying why), shown to this relay's readers only, so
/// that every stream still ends with a terminal event and `[DONE]`.
fn end_tail(store: &Redis, id: &str, log: &Arc<RunLog>, message: &str) {
    // Not shared any more: later readers and GETs go to Redis, not to this made-up ending.
    store.inner.tails.lock().expect("tails poisoned").remove(id);
    if log.snapshot().is_none() {
        // Not even `response.created` was seen: there is nothing to end.
        log.publish(log.len(), true);
        return;
    }
    end_as_failed(
        log.clone(),
        Arc::new(crate::eventlog::emitter::Immediate),
        message,
    );
}

/// The writer: takes every write from the channel in order, sends them as pipelined scripts,
/// then makes each kept event visible. A run whose write fails is failed through its hook; its
/// later events are shown to its live clients without being kept (so they get their terminal
/// event) and the run is left unfinished in Redis, where a relay finishes it as `failed`.
async fn write_loop(
    conn: Arc<Conn>,
    mut rx: mpsc::UnboundedReceiver<Cmd>,
    owned: Arc<Mutex<HashMap<String, Owned>>>,
    instance: String,
) {
    // Runs whose events Redis did not keep, with the reason their clients are told.
    let mut broken: HashMap<String, String> = HashMap::new();
    let mut packer = Packer::new()
        .inspect_err(|e| tracing::error!(error = %e, "finished runs will not be packed"))
        .ok();
    // Runs whose terminal event this batch kept: (id, log, its length, Response JSON).
    let mut ended: Vec<(String, Arc<RunLog>, usize, String)> = Vec::new();
    let mut batch = Vec::with_capacity(BATCH);
    // Waits for one command, then takes every one already queued (up to BATCH).
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        // The pipeline: each insert as its own script; the appends between two inserts as one
        // script call (so an insert still precedes its run's first event). `calls` holds, per
        // pipelined command, how many events it appends (0: an insert).
        let mut pipe = ::redis::pipe();
        pipe.ignore_errors();
        let mut sent = Vec::with_capacity(batch.len());
        let mut calls: Vec<usize> = Vec::new();
        let mut group: Vec<(&str, &[String])> = Vec::new();
        for c in &batch {
            match c {
                Cmd::Insert { cmd, .. } => {
                    if !group.is_empty() {
                        calls.push(group.len());
                        pipe.add_command(append_call(&instance, &group));
                        group.clear();
                    }
                    pipe.add_command(cmd.clone());
                    calls.push(0);
                    sent.push(true);
                }
                Cmd::Append { id, args, .. } if !broken.contains_key(id) => {
                    group.push((id, args));
                    sent.push(true);
                }
                _ => sent.push(false),
            }
        }
        if !group.is_empty() {
            calls.push(group.len());
            pipe.add_command(append_call(&instance, &group));
        }
        drop(group);
        let mut results = if calls.is_empty() {
            Vec::new().into_iter()
        } else {
            send(&conn, &pipe, &calls).await.into_iter()
        };
        for (c, was_sent) in batch.drain(..).zip(sent) {
            let result = if was_sent {
                Some(results.next().unwrap_or_else(|| Err("no reply".into())))
            } else {
                None
            };
            match c {
                Cmd::Insert { id, owned: o, .. } => match result {
                    Some(Ok(_)) => {
                        if let Some(o) = o
                            && !broken.contains_key(&id)
                        {
                            owned.lock().expect("owned poisoned").insert(id, o);
                        }
                    }
                    _ => {
                        tracing::error!(response_id = %id, "Redis could not keep a new run");
                        let message =
                            "The relay's store (Redis) is unavailable; this response was not kept.";
                        broken.insert(id.clone(), message.into());
                        if let Some(o) = o {
                            (o.fail)(message.into());
                        }
                    }
                },
                Cmd::Append {
                    id,
                    log,
                    entry,
                    terminal,
                    fail,
                    mut args,
                } => {
                    let kept = matches!(result, Some(Ok(1)));
                    if kept {
                        log.publish(entry.seq as usize + 1, terminal);
                        if terminal {
                            owned.lock().expect("owned poisoned").remove(&id);
                            if args.len() > END_RESPONSE {
                                let response = args.swap_remove(END_RESPONSE);
                                ended.push((id, log, entry.seq as usize + 1, response));
                            }
                        }
                        continue;
                    }
                    let skipped = result.is_none();
                    let lost = matches!(result, Some(Err(_)));
                    if let Some(r) = result {
                        let message = match r {
                            Ok(0) => "This response was deleted while it ran.".to_string(),
                            Ok(-1) | Ok(-2) => {
                                "Another relay took this response over (this relay lost its lease)."
                                    .to_string()
                            }
                            Ok(-3) => {
                                tracing::error!(response_id = %id, "Redis refused an event of the run's log (out of order)");
                                "The relay's store (Redis) refused an event; this response was not kept.".to_string()
                            }
                            Ok(code) => {
                                tracing::error!(response_id = %id, code, "Redis answered an event with an unknown code");
                                "The relay's store (Redis) answered unexpectedly; this response was not kept.".to_string()
                            }
                            Err(e) => {
                                tracing::error!(response_id = %id, error = %e, "Redis could not keep an event");
                                "The relay's store (Redis) became unavailable; this response was not kept.".to_string()
                            }
                        };
                        if !broken.contains_key(&id) {
                            owned.lock().expect("owned poisoned").remove(&id);
                            if let Some(f) = &fail {
                                f(message.clone());
                            }
                            broken.insert(id.clone(), message);
                        }
                    }
                    if terminal {
                        // Not kept (unless an error hid that Redis ran the script: then Redis
                        // holds the run's end, and it is asked), but the live clients still need
                        // their end, and it must not tell them the run completed.
                        if !(lost && end_was_kept(&conn, &id, &log).await) {
                            log.fail_pending_terminal(broken.get(&id).map_or(
                                "The relay's store (Redis) could not keep this response; it was not kept.",
                                String::as_str,
                            ));
                        }
                        log.publish(entry.seq as usize + 1, true);
                        broken.remove(&id);
                    } else if skipped {
                        log.publish(entry.seq as usize + 1, false);
                    }
                }
                Cmd::Flush { reply } => {
                    let _ = reply.send(());
                }
            }
        }
        if let Some(packer) = &mut packer
            && !ended.is_empty()
        {
            pack(&conn, packer, ended.drain(..));
        }
    }
}

/// Packs runs whose terminal event Redis acknowledged: each one's whole log and final Response
/// into one blob ([`packed`], as SQLite keeps a finished run), which then replaces its stream
/// and its `response` field ([`PACK`], one script for them all, sent beside the writer's next
/// batches). A run tailed by another relay is packed once that relay stopped marking it. A run
/// left unpacked (Redis away, this relay stopped first) keeps its stream: read whole all the
/// same.
fn pack(
    conn: &Arc<Conn>,
    packer: &mut Packer,
    ended: impl Iterator<Item = (String, Arc<RunLog>, usize, String)>,
) {
    let mut runs: Vec<(String, usize, Vec<u8>)> = Vec::new();
    for (id, log, n, response) in ended {
        let entries = log.entries_upto(n);
        match packer.pack(&entries, response.as_bytes()) {
            Ok(blob) => runs.push((id, entries.len(), blob)),
            Err(e) => {
                tracing::warn!(response_id = %id, error = %e, "could not pack a finished run")
            }
        }
    }
    if runs.is_empty() {
        return;
    }
    let conn = conn.clone();
    tokio::spawn(async move {
        for _ in 0..PACK_TRIES {
            let keys: Vec<String> = runs
                .iter()
                .flat_map(|(id, ..)| [Redis::resp_key(id), Redis::log_key(id), Redis::mark_key(id)])
                .collect();
            let mut cmd = script(PACK, &keys);
            for (_, n, blob) in &runs {
                cmd.arg(n).arg(blob.as_slice());
            }
            match conn.query::<Vec<i64>>(&cmd).await {
                Ok(codes) => {
                    runs = runs
                        .into_iter()
                        .zip(codes)
                        .filter(|(_, code)| *code == -1)
                        .map(|(r, _)| r)
                        .collect();
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not pack finished runs (their streams stay)");
                    return;
                }
            }
            if runs.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(MARK_MS)).await;
        }
    });
}

/// After an error on a run's end (whose reply may have been lost after Redis ran the script):
/// whether Redis holds the run with that end's status.
async fn end_was_kept(conn: &Conn, id: &str, log: &RunLog) -> bool {
    let Some(status) = log.snapshot().map(|r| status_of(&r)) else {
        return false;
    };
    let mut cmd = ::redis::cmd("HGET");
    cmd.arg(Redis::resp_key(id)).arg("status");
    matches!(conn.query::<Option<String>>(&cmd).await, Ok(Some(s)) if s == status)
}

/// One [`APPEND`] call for `events` (run id, group), in order.
fn append_call(instance: &str, events: &[(&str, &[String])]) -> ::redis::Cmd {
    let keys: Vec<String> = events
        .iter()
        .flat_map(|(id, _)| [Redis::resp_key(id), Redis::log_key(id)])
        .collect();
    let mut cmd = script(APPEND, &keys);
    cmd.arg(instance).arg(ITEM);
    for (_, args) in events {
        cmd.arg(args.len()).arg(*args);
    }
    cmd
}

/// Sends the writer's pipeline; one result per write: per insert its reply, per appended event
/// its code (every write of a command that failed gets that command's error).
async fn send(conn: &Conn, pipe: &::redis::Pipeline, calls: &[usize]) -> Vec<Result<i64, String>> {
    let replies: Vec<Result<::redis::Value, String>> = match conn.get().await {
        Ok(mut c) => match pipe
            .query_async::<Vec<::redis::RedisResult<::redis::Value>>>(&mut c)
            .await
        {
            Ok(v) => v
                .into_iter()
                .map(|r| r.map_err(|e| e.to_string()))
                .collect(),
            Err(e) => {
                conn.failed(&e).await;
                vec![Err(e.to_string()); calls.len()]
            }
        },
        Err(e) => vec![Err(e.to_string()); calls.len()],
    };
    let mut out = Vec::with_capacity(calls.iter().map(|n| (*n).max(1)).sum());
    for (events, reply) in calls.iter().zip(
        replies
            .into_iter()
            .chain(std::iter::repeat(Err("no reply".to_string()))),
    ) {
        match (*events, reply) {
            (0, r) => out.push(r.and_then(|v| i64::from_redis_value(v).map_err(|e| e.to_string()))),
            (n, Ok(v)) => match Vec::<i64>::from_redis_value(v) {
                Ok(codes) if codes.len() == n => out.extend(codes.into_iter().map(Ok)),
                Ok(codes) => out.extend(std::iter::repeat_n(
                    Err(format!("{} codes for {n} events", codes.len())),
                    n,
                )),
                Err(e) => out.extend(std::iter::repeat_n(Err(e.to_string()), n)),
            },
            (n, Err(e)) => out.extend(std::iter::repeat_n(Err(e), n)),
        }
    }
    out
}

/// Renews the leases of the runs this relay owns (acting on cancel flags and deletions), and
/// finishes runs whose owner died.
async fn keep_leases(inner: Weak<Inner>) {
    let mut tick = tokio::time::interval(RENEW_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n: u32 = 0;
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        let store = Redis { inner };
        n = n.wrapping_add(1);
        let ids: Vec<String> = store
            .inner
            .owned
            .lock()
            .expect("owned poisoned")
            .keys()
            .cloned()
            .collect();
        if !ids.is_empty() {
            let mut cmd = script(RENEW, &[]);
            cmd.arg(&store.inner.instance)
                .arg(LEASE_MS)
                .arg(RESP)
                .arg(&ids);
            match store.inner.conn.query::<Vec<String>>(&cmd).await {
                Ok(stops) => {
                    for s in stops {
                        let Some((what, id)) = s.split_once(':') else {
                            continue;
                        };
                        let mut owned = store.inner.owned.lock().expect("owned poisoned");
                        match what {
                            "cancel" => {
                                if let Some(o) = owned.get(id) {
                                    o.cancel.cancel();
                                }
                            }
                            "gone" => {
                                if let Some(o) = owned.remove(id) {
                                    o.cancel.cancel();
                                }
                            }
                            _ => {
                                if let Some(o) = owned.remove(id) {
                                    (o.fail)("Another relay took this response over (this relay lost its lease).".into());
                                }
                            }
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "could not renew run leases"),
            }
        }
        if n.is_multiple_of(SWEEP_TICKS) {
            let lapsed: Result<Vec<String>, _> = store.inner.conn.query(&script(LAPSED, &[])).await;
            for id in lapsed.unwrap_or_default() {
                if let Err(e) = store.recover(&id).await {
                    tracing::warn!(response_id = %id, error = %e, "could not finish an abandoned run");
                }
            }
        }
    }
}
