//! Limits a team can share a relay by: requests, tokens and MCP calls per minute, a daily token
//! budget and concurrent runs, for each relay key and for each tenant (shared by all its keys),
//! and calls per minute to each registered MCP server, for every key.
//!
//! An [`Account`] is what one key is held to (its own limits, its tenant's, the servers'); the
//! [`Limiter`] keeps the counters: in this process, or in the Redis store so that every relay on
//! it enforces the same ones (one script per check: atomic, one round trip). A request is
//! admitted ([`Limiter::admit`]) before its run is prepared; its tokens are charged as each model
//! turn reports them ([`Limiter::charge`]); each MCP call asks [`Limiter::mcp_call`]. The answers
//! carry what OpenAI's `x-ratelimit-*` headers say ([`Snapshot`]).
//!
//! Invariants: a key with no limits has no account, and nothing here runs for it. A request is
//! refused for tokens only when a budget is already spent (a run admitted may overrun it; its
//! tokens are charged when known). A concurrent-run slot ([`Lease`]) is released when dropped,
//! however its run ends; in Redis it is a lease that lapses if its relay dies. Counters that
//! cannot be reached fail open (a warning and a metric) unless the operator chose to fail closed.

mod account;
mod bucket;
mod headers;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

pub use account::{Account, Limit, Spec};
use account::{Counter, Owner};
use bucket::{Level, Rule};
pub use headers::duration as reset_text;

use crate::store::redis::Conn;

/// A limit as the headers and `GET /v1/limits` show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    pub max: u64,
    pub remaining: u64,
    /// Until the counter is back to its initial state.
    pub reset_ms: u64,
}

/// What OpenAI's headers say: the tightest requests limit and the tightest tokens limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub requests: Option<Reading>,
    pub tokens: Option<Reading>,
}

impl Snapshot {
    /// Sets `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` for what is limited.
    pub fn apply(&self, headers: &mut hyper::HeaderMap) {
        if let Some(r) = &self.requests {
            headers::set(headers, "requests", r);
        }
        if let Some(r) = &self.tokens {
            headers::set(headers, "tokens", r);
        }
    }

    fn tighten(slot: &mut Option<Reading>, r: Reading) {
        if slot.is_none_or(|s| r.remaining < s.remaining) {
            *slot = Some(r);
        }
    }
}

/// Why a request (or an MCP call) is refused.
#[derive(Debug, Clone)]
pub enum Refused {
    /// Over `limit`: the message names it and when to retry.
    Over {
        limit: Limit,
        message: String,
        retry_ms: u64,
        snapshot: Snapshot,
    },
    /// The counters cannot be reached and the relay fails closed.
    Unavailable,
}

impl Refused {
    /// A spent daily budget (OpenAI's `insufficient_quota`), not a rate.
    pub fn is_quota(&self) -> bool {
        matches!(
            self,
            Refused::Over {
                limit: Limit::TokensPerDay,
                ..
            }
        )
    }

    /// The HTTP status a refusal is told with (also an MCP call's `http_error` code): 429 over a
    /// limit, 503 when the limits cannot be checked.
    pub fn status(&self) -> u16 {
        match self {
            Refused::Over { .. } => 429,
            Refused::Unavailable => 503,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Refused::Over { message, .. } => message.clone(),
            Refused::Unavailable => {
                "The relay cannot check its rate limits now (their store is unreachable); try again shortly."
                    .into()
            }
        }
    }
}

/// A request admitted: what the headers say, and its concurrent-run slots (if limited).
#[derive(Debug, Default)]
pub struct Admission {
    pub snapshot: Snapshot,
    pub lease: Option<Lease>,
}

/// Where the limits read the time (ms since the epoch): the system's, or one a test moves.
#[derive(Debug, Clone, Default)]
pub enum Clock {
    #[default]
    System,
    Manual(Arc<AtomicU64>),
}

impl Clock {
    /// A clock that reads `start_ms` until moved.
    pub fn manual(start_ms: u64) -> Self {
        Clock::Manual(Arc::new(AtomicU64::new(start_ms)))
    }

    pub fn now_ms(&self) -> u64 {
        match self {
            Clock::System => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            Clock::Manual(t) => t.load(Ordering::SeqCst),
        }
    }

    /// Moves a manual clock on (the system clock moves by itself).
    pub fn advance(&self, by: Duration) {
        if let Clock::Manual(t) = self {
            t.fetch_add(by.as_millis() as u64, Ordering::SeqCst);
        }
    }
}

/// What one check does with its costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// Applies every cost only if each fits.
    Try,
    /// Applies every cost.
    Add,
    /// Applies none.
    Peek,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Try => "try",
            Op::Add => "add",
            Op::Peek => "peek",
        }
    }
}

/// Where the counters live.
enum Backend {
    Local(Mutex<HashMap<String, Level>>),
    Redis(Arc<Conn>),
}

/// A concurrent-run slot held for as long as its run lives; released on drop.
#[derive(Debug)]
pub struct Lease {
    limiter: Weak<Inner>,
    member: String,
    keys: Vec<String>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(inner) = self.limiter.upgrade() {
            inner.release(&self.member, &self.keys);
        }
    }
}

/// How long a Redis slot lease lasts unless renewed, and how often this relay renews its own.
const LEASE_MS: u64 = 30_000;
const RENEW_EVERY: Duration = Duration::from_secs(10);
/// At most one warning about unreachable counters per this long.
const WARN_EVERY_MS: u64 = 10_000;

const SCRIPT: &str = include_str!("limits/counters.lua");
/// The longest a check waits on Redis before it counts as unreachable (and fails open or closed).
const CHECK_WITHIN: Duration = Duration::from_millis(500);
/// Renews slots: `ARGV[1]` the lease (ms), `ARGV[2]` now (ms; empty: Redis's clock), then one
/// member per key; each key's own expiry is pushed back too, so a long run keeps its slot.
const RENEW: &str = r#"
local now = tonumber(ARGV[2])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local lease = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  if redis.call('ZSCORE', key, ARGV[i + 2]) then
    redis.call('ZADD', key, 'XX', now + lease, ARGV[i + 2])
    redis.call('PEXPIRE', key, lease * 2)
  end
end
return 1
"#;

/// The counters: in this process, or in Redis for every relay on it. Cheap to clone.
#[derive(Clone)]
pub struct Limiter {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Backend,
    clock: Clock,
    fail_closed: bool,
    metrics: Arc<crate::metrics::Metrics>,
    /// Slot members: this relay's instance and a sequence number.
    instance: String,
    next: AtomicU64,
    /// This relay's live Redis slots (member → keys), renewed until released.
    live: Mutex<HashMap<String, Vec<String>>>,
    warned_at: AtomicU64,
    /// Until when (ms) reads for headers skip the shared counters, which just failed.
    down_until: AtomicU64,
}

impl Limiter {
    /// Counters in `redis` when given (shared by every relay on it), else in this process.
    pub fn new(
        redis: Option<Arc<Conn>>,
        clock: Clock,
        fail_closed: bool,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        let shared = redis.is_some();
        let inner = Arc::new(Inner {
            backend: match redis {
                Some(c) => Backend::Redis(c),
                None => Backend::Local(Mutex::default()),
            },
            clock,
            fail_closed,
            metrics,
            instance: format!("{:016x}", rand::random::<u64>()),
            next: AtomicU64::new(0),
            live: Mutex::default(),
            warned_at: AtomicU64::new(0),
            down_until: AtomicU64::new(0),
        });
        if shared && let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(renew_leases(Arc::downgrade(&inner)));
        }
        Limiter { inner }
    }

    pub fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    /// Admits one request that starts a run: a request counted, a concurrent-run slot taken,
    /// and refused if a token budget is already spent.
    pub async fn admit(&self, account: &Account) -> Result<Admission, Refused> {
        self.take(account, true).await
    }

    /// Admits one request that starts no run (`compact`, `input_tokens`): counted, no slot.
    pub async fn admit_request(&self, account: &Account) -> Result<Snapshot, Refused> {
        self.take(account, false).await.map(|a| a.snapshot)
    }

    async fn take(&self, account: &Account, slot: bool) -> Result<Admission, Refused> {
        use Limit::*;
        let kinds: &[Limit] = if slot {
            &[Requests, Tokens, TokensPerDay, Runs]
        } else {
            &[Requests, Tokens, TokensPerDay]
        };
        let checked: Vec<(&Counter, f64)> = account
            .of(kinds)
            // A request and a slot cost one; a token budget is only asked whether anything is left.
            .map(|c| {
                (
                    c,
                    if matches!(c.limit, Requests | Runs) {
                        1.0
                    } else {
                        0.0
                    },
                )
            })
            .collect();
        let member = format!(
            "{}-{}",
            self.inner.instance,
            self.inner.next.fetch_add(1, Ordering::Relaxed)
        );
        let now = self.inner.clock.now_ms();
        let (applied, used) = match self.inner.check(Op::Try, &checked, &member, now).await {
            Ok(r) => r,
            Err(e) => return self.unreachable(account, e).map(|()| Admission::default()),
        };
        let snapshot = snapshot(&checked, &used, now);
        if !applied {
            return Err(self.refusal(account, &checked, &used, now, snapshot));
        }
        let keys: Vec<String> = checked
            .iter()
            .filter(|(c, _)| c.limit == Runs)
            .map(|(c, _)| c.key.clone())
            .collect();
        let lease = (!keys.is_empty()).then(|| self.inner.hold(member, keys));
        Ok(Admission { snapshot, lease })
    }

    /// Charges `tokens` (a model turn's input and output) to the account's token limits, in
    /// the background.
    pub fn charge(&self, account: &Arc<Account>, tokens: u64) {
        if tokens == 0
            || account
                .of(&[Limit::Tokens, Limit::TokensPerDay])
                .next()
                .is_none()
        {
            return;
        }
        let counters = move |account: &Account| -> Vec<(Counter, f64)> {
            account
                .of(&[Limit::Tokens, Limit::TokensPerDay])
                .map(|c| (c.clone(), tokens as f64))
                .collect()
        };
        match &self.inner.backend {
            Backend::Local(map) => {
                let counters = counters(account);
                let refs: Vec<(&Counter, f64)> = counters.iter().map(|(c, n)| (c, *n)).collect();
                let now = self.inner.clock.now_ms();
                check_local(
                    &mut map.lock().expect("limits poisoned"),
                    Op::Add,
                    &refs,
                    now,
                );
            }
            Backend::Redis(_) => {
                let Ok(rt) = tokio::runtime::Handle::try_current() else {
                    return;
                };
                let (this, account) = (self.clone(), account.clone());
                rt.spawn(async move {
                    let counters = counters(&account);
                    let refs: Vec<(&Counter, f64)> =
                        counters.iter().map(|(c, n)| (c, *n)).collect();
                    let now = this.inner.clock.now_ms();
                    if let Err(e) = this.inner.check(Op::Add, &refs, "", now).await {
                        let _ = this.unreachable(&account, e);
                    }
                });
            }
        }
    }

    /// Admits one MCP call to `server` (a registered server's name; `None` for one the request
    /// declared): the account's MCP calls per minute, and the server's calls per minute.
    pub async fn mcp_call(&self, account: &Account, server: Option<&str>) -> Result<(), Refused> {
        let checked: Vec<(&Counter, f64)> = account
            .counters
            .iter()
            .filter(|c| match &c.owner {
                Owner::Server(s) => Some(s.as_str()) == server,
                _ => c.limit == Limit::McpCalls,
            })
            .map(|c| (c, 1.0))
            .collect();
        if checked.is_empty() {
            return Ok(());
        }
        let now = self.inner.clock.now_ms();
        match self.inner.check(Op::Try, &checked, "", now).await {
            Ok((true, _)) => Ok(()),
            Ok((false, used)) => {
                Err(self.refusal(account, &checked, &used, now, Snapshot::default()))
            }
            Err(e) => self.unreachable(account, e),
        }
    }

    /// What the headers say now, nothing counted (`None` if the counters cannot be reached).
    pub async fn peek(&self, account: &Account) -> Option<Snapshot> {
        let counters: Vec<(&Counter, f64)> = account
            .of(&[Limit::Requests, Limit::Tokens, Limit::TokensPerDay])
            .map(|c| (c, 0.0))
            .collect();
        let now = self.inner.clock.now_ms();
        let (_, used) = self.inner.check(Op::Peek, &counters, "", now).await.ok()?;
        Some(snapshot(&counters, &used, now))
    }

    /// Every limit of the account with its use now, as `GET /v1/limits` shows them.
    pub async fn report(&self, account: &Account) -> Result<serde_json::Value, Refused> {
        let counters: Vec<(&Counter, f64)> = account.counters.iter().map(|c| (c, 0.0)).collect();
        let now = self.inner.clock.now_ms();
        let (_, used) = self
            .inner
            .check(Op::Peek, &counters, "", now)
            .await
            .map_err(|_| Refused::Unavailable)?;
        let limits: Vec<serde_json::Value> = counters
            .iter()
            .zip(&used)
            .map(|((c, _), &u)| {
                let r = reading(c, u, now);
                let mut entry = serde_json::json!({
                    "limit": c.limit.name(),
                    "scope": match c.owner { Owner::Key => "key", Owner::Tenant => "tenant", Owner::Server(_) => "mcp_server" },
                    "max": c.max,
                    "used": u.ceil() as u64,
                    "remaining": r.remaining,
                    "reset": reset_text(r.reset_ms),
                    "resets_at": (now + r.reset_ms).div_ceil(1000),
                });
                if let Owner::Server(s) = &c.owner {
                    entry["server"] = s.as_str().into();
                }
                entry
            })
            .collect();
        Ok(
            serde_json::json!({"object": "relay.limits", "tenant": account.tenant(), "limits": limits}),
        )
    }

    /// The refusal for the counter that keeps the request out longest.
    fn refusal(
        &self,
        account: &Account,
        checked: &[(&Counter, f64)],
        used: &[f64],
        now: u64,
        snapshot: Snapshot,
    ) -> Refused {
        let (c, u, retry_ms) = checked
            .iter()
            .zip(used)
            .map(|((c, cost), &u)| {
                (
                    *c,
                    u,
                    bucket::retry_ms(c.limit.rule(), u, *cost, c.max, now),
                )
            })
            .max_by_key(|(_, _, retry)| *retry)
            .expect("a refusal has a counter over its limit");
        // Redis and this process may round a use just over the limit apart: never "now".
        let retry_ms = retry_ms.max(1);
        self.inner
            .metrics
            .rate_limited(account.tenant(), c.limit.name());
        let whose = account.whose(c);
        let (used, max, wait) = (u.ceil() as u64, c.max, reset_text(retry_ms));
        let message = match c.limit {
            Limit::TokensPerDay => format!(
                "You exceeded the daily token budget of {whose} (tokens per day): limit {max}, used {used}. It resets at 00:00 UTC, in {wait}."
            ),
            Limit::Runs => format!(
                "Too many concurrent runs for {whose}: limit {max}, running {used}. Please try again when one has ended."
            ),
            Limit::ServerCalls => format!(
                "Rate limit reached for {whose} (calls per minute): limit {max}, used {used}. Please try again in {wait}."
            ),
            other => format!(
                "Rate limit reached for {whose} on {}: limit {max}, used {used}. Please try again in {wait}.",
                other.words()
            ),
        };
        Refused::Over {
            limit: c.limit,
            message,
            retry_ms,
            snapshot,
        }
    }

    /// Counters out of reach: a warning (at most one per 10 s) and a metric; the request goes
    /// on, unless the relay fails closed.
    fn unreachable(&self, account: &Account, e: crate::store::StoreError) -> Result<(), Refused> {
        self.inner.metrics.limits_unavailable();
        let now = self.inner.clock.now_ms();
        let last = self.inner.warned_at.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= WARN_EVERY_MS
            && self
                .inner
                .warned_at
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                tenant = account.tenant(),
                error = %e,
                fail_closed = self.inner.fail_closed,
                "rate-limit counters unreachable; requests are {}",
                if self.inner.fail_closed { "refused (503)" } else { "let through unlimited" }
            );
        }
        if self.inner.fail_closed {
            Err(Refused::Unavailable)
        } else {
            Ok(())
        }
    }
}

impl Inner {
    /// One check of `counters` (each with its cost) at `now`: whether the costs were applied,
    /// and each counter's use (after them, if applied).
    async fn check(
        &self,
        op: Op,
        counters: &[(&Counter, f64)],
        member: &str,
        now: u64,
    ) -> Result<(bool, Vec<f64>), crate::store::StoreError> {
        if counters.is_empty() {
            return Ok((true, Vec::new()));
        }
        match &self.backend {
            Backend::Local(map) => Ok(check_local(
                &mut map.lock().expect("limits poisoned"),
                op,
                counters,
                now,
            )),
            Backend::Redis(conn) => {
                let keys: Vec<String> = counters.iter().map(|(c, _)| c.key.clone()).collect();
                let mut cmd = crate::store::redis::script(SCRIPT, &keys);
                // Redis's own clock, so that relays whose clocks differ share one time; a test's
                // manual clock is passed instead.
                let now = match self.clock {
                    Clock::System => String::new(),
                    Clock::Manual(_) => now.to_string(),
                };
                cmd.arg(op.as_str()).arg(now).arg(member).arg(LEASE_MS);
                for (c, cost) in counters {
                    let rule = match c.limit.rule() {
                        Rule::Rate { .. } => "r",
                        Rule::Day => "d",
                        Rule::Slots => "s",
                    };
                    let period = match c.limit.rule() {
                        Rule::Rate { period_ms } => period_ms,
                        _ => bucket::DAY_MS,
                    };
                    cmd.arg(rule).arg(c.max).arg(period).arg(*cost);
                }
                if self.down_until.load(Ordering::Relaxed) > self.clock.now_ms() && op == Op::Peek {
                    // Just failed: a read for headers does not wait on it again.
                    return Err(crate::store::StoreError::Unavailable(
                        "the limits' counters failed a moment ago".into(),
                    ));
                }
                let out: Vec<String> =
                    match tokio::time::timeout(CHECK_WITHIN, conn.query(&cmd)).await {
                        Ok(Ok(out)) => out,
                        Ok(Err(e)) => return Err(self.went_down(e)),
                        Err(_) => {
                            return Err(self.went_down(crate::store::StoreError::Unavailable(
                                "Redis did not answer a limit check in time".into(),
                            )));
                        }
                    };
                let applied = out.first().is_some_and(|v| v == "1");
                let used = out
                    .iter()
                    .skip(1)
                    .map(|v| v.parse::<f64>().unwrap_or(0.0))
                    .collect();
                Ok((applied, used))
            }
        }
    }

    /// Notes that the shared counters just failed (reads for headers skip them for a second).
    fn went_down(&self, e: crate::store::StoreError) -> crate::store::StoreError {
        self.down_until
            .store(self.clock.now_ms() + 1_000, Ordering::Relaxed);
        e
    }

    /// A slot taken under `member` in `keys`, kept (and, in Redis, renewed) until dropped.
    fn hold(self: &Arc<Self>, member: String, keys: Vec<String>) -> Lease {
        if let Backend::Redis(_) = self.backend {
            self.live
                .lock()
                .expect("limits poisoned")
                .insert(member.clone(), keys.clone());
        }
        Lease {
            limiter: Arc::downgrade(self),
            member,
            keys,
        }
    }

    fn release(&self, member: &str, keys: &[String]) {
        match &self.backend {
            Backend::Local(map) => {
                let mut map = map.lock().expect("limits poisoned");
                for k in keys {
                    if let Some(level) = map.get_mut(k) {
                        level.used = (level.used - 1.0).max(0.0);
                    }
                }
            }
            Backend::Redis(conn) => {
                self.live.lock().expect("limits poisoned").remove(member);
                let Ok(rt) = tokio::runtime::Handle::try_current() else {
                    return; // The lease lapses by itself.
                };
                let mut cmd = ::redis::cmd("EVAL");
                cmd.arg(
                    "for i, key in ipairs(KEYS) do redis.call('ZREM', key, ARGV[1]) end return 1",
                )
                .arg(keys.len())
                .arg(keys)
                .arg(member);
                let conn = conn.clone();
                rt.spawn(async move {
                    if let Err(e) = conn.query::<i64>(&cmd).await {
                        tracing::debug!(error = %e, "a concurrent-run slot was not released (it lapses by itself)");
                    }
                });
            }
        }
    }
}

/// The in-process check: the arithmetic of `bucket`, under the map's lock.
fn check_local(
    map: &mut HashMap<String, Level>,
    op: Op,
    counters: &[(&Counter, f64)],
    now: u64,
) -> (bool, Vec<f64>) {
    let mut used: Vec<f64> = counters
        .iter()
        .map(|(c, _)| {
            let level = map.get(&c.key).copied().unwrap_or_default();
            c.limit.rule().used_now(level, c.max, now)
        })
        .collect();
    let fits = op != Op::Try
        || counters
            .iter()
            .zip(&used)
            .all(|((c, cost), &u)| bucket::fits(u, *cost, c.max));
    if op == Op::Peek || !fits {
        return (fits, used);
    }
    for ((c, cost), u) in counters.iter().zip(used.iter_mut()) {
        if *cost > 0.0 {
            let level = c.limit.rule().add(*u, *cost, now);
            map.insert(c.key.clone(), level);
            *u = level.used;
        }
    }
    (true, used)
}

/// A counter's reading at a use of `used`.
fn reading(c: &Counter, used: f64, now: u64) -> Reading {
    Reading {
        max: c.max,
        remaining: bucket::remaining(used, c.max),
        reset_ms: bucket::reset_ms(c.limit.rule(), used, c.max, now),
    }
}

/// The headers' view of checked counters: the tightest requests and tokens limits.
fn snapshot(counters: &[(&Counter, f64)], used: &[f64], now: u64) -> Snapshot {
    let mut s = Snapshot::default();
    for ((c, _), &u) in counters.iter().zip(used) {
        match c.limit {
            Limit::Requests => Snapshot::tighten(&mut s.requests, reading(c, u, now)),
            Limit::Tokens | Limit::TokensPerDay => {
                Snapshot::tighten(&mut s.tokens, reading(c, u, now))
            }
            _ => {}
        }
    }
    s
}

/// Renews this relay's live Redis slots until the limiter is gone.
async fn renew_leases(inner: Weak<Inner>) {
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        let Some(inner) = inner.upgrade() else { return };
        let Backend::Redis(conn) = &inner.backend else {
            return;
        };
        let held: Vec<(String, String)> = inner
            .live
            .lock()
            .expect("limits poisoned")
            .iter()
            .flat_map(|(m, keys)| keys.iter().map(|k| (k.clone(), m.clone())))
            .collect();
        if held.is_empty() {
            continue;
        }
        let now = match inner.clock {
            Clock::System => String::new(),
            Clock::Manual(_) => inner.clock.now_ms().to_string(),
        };
        // One call per slot held (each key may be of another tenant: another hash slot on a
        // cluster), pipelined.
        let cmds: Vec<::redis::Cmd> = held
            .iter()
            .map(|(key, member)| {
                let mut cmd = ::redis::cmd("EVAL");
                cmd.arg(RENEW)
                    .arg(1)
                    .arg(key)
                    .arg(LEASE_MS)
                    .arg(&now)
                    .arg(member);
                cmd
            })
            .collect();
        if let Some(Err(e)) = conn.send(cmds, &[]).await.into_iter().find(Result::is_err) {
            tracing::debug!(error = %e, "concurrent-run slots not renewed");
        }
    }
}
