//! Usage per tenant: every ended run (stored or not, whatever its status) tallied by (tenant, UTC
//! day, model): runs, input and output tokens, MCP calls. A run's end adds to a map in memory
//! ([`Tallies`]); the map is flushed to the backend as one batch every [`FLUSH_EVERY`] (a task
//! [`Store`](super::Store) starts), on [`Store::flush`](super::Store::flush) (the graceful
//! shutdown) and before a read, so the hot path writes nothing to the store per run. The backend
//! adds each flushed row to what it holds (SQLite: the `usage` table; Redis: a hash per tenant and
//! day; memory: a map). `responses-relay usage` reads the rows ([`Since`] says from which day).
//!
//! Invariants: a flushed tally is taken out of the map before it is written and given back if the
//! write failed, so a tally is counted once unless a write fails after the backend applied it; a
//! run's day is the UTC day of its Response's `created_at`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use super::{Backend, StoreError, Tenant};

/// How often the tallies in memory are flushed to the backend.
pub const FLUSH_EVERY: Duration = Duration::from_secs(10);

/// What one (tenant, day, model) adds up to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub runs: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub mcp_calls: u64,
}

impl Tally {
    /// Adds `other` (saturating: absurd counts from an upstream must not overflow).
    pub fn add(&mut self, other: &Tally) {
        self.runs = self.runs.saturating_add(other.runs);
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.mcp_calls = self.mcp_calls.saturating_add(other.mcp_calls);
    }
}

/// One row of the report: a tenant's runs of one model on one UTC day (`YYYY-MM-DD`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRow {
    pub tenant: String,
    pub day: String,
    pub model: String,
    pub tally: Tally,
}

impl UsageRow {
    pub fn total_tokens(&self) -> u64 {
        self.tally
            .input_tokens
            .saturating_add(self.tally.output_tokens)
    }
}

/// Sorts rows by tenant, day, model (the order every read answers in).
pub fn sort_rows(rows: &mut [UsageRow]) {
    rows.sort_by(|a, b| (&a.tenant, &a.day, &a.model).cmp(&(&b.tenant, &b.day, &b.model)));
}

type Key = (Tenant, String, String);

/// The tallies of runs ended since the last flush, and the backend they are flushed to.
pub(super) struct Tallies {
    pending: Mutex<HashMap<Key, Tally>>,
    backend: Backend,
}

impl Tallies {
    /// The tallies of a store over `backend`, flushed every [`FLUSH_EVERY`] by a task on the
    /// current tokio runtime (none outside one: then on [`Tallies::flush`] only). The task holds
    /// them weakly: it ends once the store is gone.
    pub(super) fn start(backend: Backend) -> Arc<Tallies> {
        let tallies = Arc::new(Tallies {
            pending: Mutex::default(),
            backend,
        });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(flush_every(Arc::downgrade(&tallies)));
        }
        tallies
    }

    /// Writes every pending tally to the backend as one batch; on failure they are kept for the
    /// next flush.
    pub(super) async fn flush(&self) -> Result<(), StoreError> {
        let rows = self.take();
        if rows.is_empty() {
            return Ok(());
        }
        let written = match &self.backend {
            Backend::Memory(m) => {
                m.add_usage(&rows);
                Ok(())
            }
            Backend::Sqlite(s) => s.add_usage(rows.clone()).await,
            Backend::Redis(r) => {
                // Per tenant: only the tenants whose tallies were not kept are given back.
                return r.add_usage(rows).await.map_err(|(e, unkept)| {
                    self.give_back(unkept);
                    e
                });
            }
        };
        if written.is_err() {
            self.give_back(rows);
        }
        written
    }

    /// Adds one ended run of `tenant` created at `created_at` (unix seconds).
    pub(super) fn add(&self, tenant: &Tenant, created_at: i64, model: &str, tally: Tally) {
        let key = (tenant.clone(), day_of(created_at), model.to_string());
        self.pending
            .lock()
            .expect("usage tallies poisoned")
            .entry(key)
            .or_default()
            .add(&tally);
    }

    /// Takes every pending tally out, as rows.
    pub(super) fn take(&self) -> Vec<UsageRow> {
        let pending = std::mem::take(&mut *self.pending.lock().expect("usage tallies poisoned"));
        pending
            .into_iter()
            .map(|((tenant, day, model), tally)| UsageRow {
                tenant: tenant.as_str().to_string(),
                day,
                model,
                tally,
            })
            .collect()
    }

    /// Puts back rows a failed flush took, for the next one.
    pub(super) fn give_back(&self, rows: Vec<UsageRow>) {
        let mut pending = self.pending.lock().expect("usage tallies poisoned");
        for r in rows {
            pending
                .entry((Tenant::new(&r.tenant), r.day, r.model))
                .or_default()
                .add(&r.tally);
        }
    }
}

/// Flushes the tallies every [`FLUSH_EVERY`] while the store lives.
async fn flush_every(tallies: Weak<Tallies>) {
    let mut every = tokio::time::interval(FLUSH_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await; // the first tick is at once
    loop {
        every.tick().await;
        let Some(t) = tallies.upgrade() else {
            return;
        };
        if let Err(e) = t.flush().await {
            tracing::warn!(error = %e, "could not write the usage tallies; kept for the next flush");
        }
    }
}

/// Where a report starts: `Nd` (N days ago), `Nh` (N hours ago), or a UTC day `YYYY-MM-DD`. A
/// duration starts at the UTC day holding that instant, so every run inside it is counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Since {
    /// This many seconds before now.
    Ago(i64),
    /// This UTC day (`YYYY-MM-DD`, checked).
    Day(String),
}

/// The farthest back a duration reaches (100 years).
const MAX_AGO_DAYS: i64 = 36_500;

impl Since {
    /// `--since`'s value: `7d`, `24h`, `30d`, or `YYYY-MM-DD`.
    pub fn parse(s: &str) -> Result<Since, String> {
        let bad =
            || format!("'{s}': expected a number of days or hours (7d, 24h) or a day (YYYY-MM-DD)");
        if day_number(s).is_some() {
            return Ok(Since::Day(s.to_string()));
        }
        if !s.is_ascii() {
            return Err(bad());
        }
        let (n, unit) = s.split_at(s.len().saturating_sub(1));
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let n: i64 = n.parse().map_err(|_| bad())?;
        let secs = match unit {
            "d" if n <= MAX_AGO_DAYS => n * 86_400,
            "h" if n <= MAX_AGO_DAYS * 24 => n * 3_600,
            "d" | "h" => return Err(format!("'{s}': at most {MAX_AGO_DAYS} days back")),
            _ => return Err(bad()),
        };
        Ok(Since::Ago(secs))
    }

    /// The first UTC day of the report when it is `now` (unix seconds).
    pub fn first_day(&self, now: i64) -> String {
        match self {
            Since::Ago(secs) => day_of(now - secs),
            Since::Day(d) => d.clone(),
        }
    }
}

/// The UTC day (`YYYY-MM-DD`) of a unix time in seconds.
pub fn day_of(unix: i64) -> String {
    let (y, m, d) = civil_from_days(unix.div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// The days since 1970-01-01 of a day written `YYYY-MM-DD` (a real date: no 2023-02-30).
pub fn day_number(day: &str) -> Option<i64> {
    let b = day.as_bytes();
    if b.len() != 10
        || b[4] != b'-'
        || b[7] != b'-'
        || ![0, 1, 2, 3, 5, 6, 8, 9]
            .iter()
            .all(|&i| b[i].is_ascii_digit())
    {
        return None;
    }
    let y: i64 = day[..4].parse().ok()?;
    let m: u32 = day[5..7].parse().ok()?;
    let d: u32 = day[8..].parse().ok()?;
    let n = days_from_civil(y, m, d);
    // A day that does not exist comes back as another one.
    (civil_from_days(n) == (y, m, d)).then_some(n)
}

/// Howard Hinnant's `days_from_civil`: days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Howard Hinnant's `civil_from_days`: the date of a day number (days since 1970-01-01).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The rows of a report: a store URL's tallies of `tenant` (every tenant's with `None`) from
/// `since_day` on, read without opening the store as a relay does (no recovery, no writer).
/// Used by `responses-relay usage`, also on the store of a stopped relay.
pub async fn read(
    kind: &super::StoreKind,
    tenant: Option<&Tenant>,
    since_day: &str,
) -> Result<Vec<UsageRow>, StoreError> {
    match kind {
        super::StoreKind::Memory => Err(StoreError::Internal(
            "a memory store lives in its relay's process: there is nothing to read".into(),
        )),
        super::StoreKind::Sqlite(path) => {
            let (path, tenant, since) = (path.clone(), tenant.cloned(), since_day.to_string());
            tokio::task::spawn_blocking(move || {
                super::sqlite::usage_at(&path, tenant.as_ref(), &since)
            })
            .await
            .map_err(|e| StoreError::Internal(e.to_string()))?
        }
        super::StoreKind::Redis(url) => super::redis::usage_at(url, tenant, since_day).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_days_hours_and_dates() {
        assert_eq!(Since::parse("7d"), Ok(Since::Ago(7 * 86_400)));
        assert_eq!(Since::parse("30d"), Ok(Since::Ago(30 * 86_400)));
        assert_eq!(Since::parse("24h"), Ok(Since::Ago(86_400)));
        assert_eq!(Since::parse("0d"), Ok(Since::Ago(0)));
        assert_eq!(
            Since::parse("2024-02-29"),
            Ok(Since::Day("2024-02-29".into()))
        );
    }

    #[test]
    fn since_refuses_what_is_not_a_duration_or_a_real_day() {
        for bad in [
            "",
            "d",
            "7",
            "7w",
            "-7d",
            "+7d",
            "7.5d",
            " 7d",
            "7 d",
            "2023-02-29",
            "2024-13-01",
            "2024-1-01",
            "24-01-01",
            "2024/01/01",
            "2024-01-00",
            "36501d",
            "99999999999999999999d",
            "7é",
        ] {
            let e = Since::parse(bad).expect_err(bad);
            assert!(e.contains(&format!("'{bad}'")), "{bad}: {e}");
        }
    }

    #[test]
    fn a_duration_starts_at_the_utc_day_holding_that_instant() {
        // 2024-03-10T12:00:00Z
        let now = 1_710_072_000;
        assert_eq!(Since::Ago(0).first_day(now), "2024-03-10");
        assert_eq!(Since::parse("24h").unwrap().first_day(now), "2024-03-09");
        assert_eq!(Since::parse("7d").unwrap().first_day(now), "2024-03-03");
        assert_eq!(Since::parse("13h").unwrap().first_day(now), "2024-03-09");
        assert_eq!(Since::parse("12h").unwrap().first_day(now), "2024-03-10");
        assert_eq!(
            Since::parse("2020-01-01").unwrap().first_day(now),
            "2020-01-01"
        );
    }

    #[test]
    fn days_and_unix_times_agree_both_ways() {
        assert_eq!(day_of(0), "1970-01-01");
        assert_eq!(day_of(86_399), "1970-01-01");
        assert_eq!(day_of(-1), "1969-12-31");
        assert_eq!(day_of(1_700_000_000), "2023-11-14");
        assert_eq!(day_of(951_782_400), "2000-02-29");
        for n in [-719_000, -1, 0, 1, 11_016, 19_782, 2_932_896] {
            assert_eq!(day_number(&day_of(n * 86_400)), Some(n), "{n}");
        }
        assert_eq!(day_number("1900-02-29"), None);
        assert_eq!(day_number("2000-02-29"), Some(11_016));
    }

    #[test]
    fn tallies_add_up_per_tenant_day_and_model_and_a_failed_flush_gives_them_back() {
        let t = Tallies::start(Backend::Memory(super::super::memory::Memory::default()));
        let (a, b) = (Tenant::new("a"), Tenant::new("b"));
        let one = Tally {
            runs: 1,
            input_tokens: 10,
            output_tokens: 3,
            mcp_calls: 1,
        };
        t.add(&a, 1_700_000_000, "m", one);
        t.add(&a, 1_700_000_001, "m", one);
        t.add(&a, 1_700_000_000 + 86_400, "m", one);
        t.add(&b, 1_700_000_000, "m", one);
        let mut rows = t.take();
        sort_rows(&mut rows);
        let days: Vec<_> = rows
            .iter()
            .map(|r| (r.tenant.as_str(), r.day.as_str(), r.tally.runs))
            .collect();
        assert_eq!(
            days,
            [
                ("a", "2023-11-14", 2),
                ("a", "2023-11-15", 1),
                ("b", "2023-11-14", 1)
            ]
        );
        assert_eq!(rows[0].tally.input_tokens, 20);
        assert_eq!(rows[0].total_tokens(), 26);
        assert!(t.take().is_empty());
        t.add(&a, 1_700_000_000, "m", one);
        t.give_back(rows);
        let mut again = t.take();
        sort_rows(&mut again);
        assert_eq!(again[0].tally.runs, 3);
        assert_eq!(again.len(), 3);
    }
}
