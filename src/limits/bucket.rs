//! The arithmetic of one counter, pure: how much of a limit is used at a given time, whether a
//! cost fits, how long until it would, and how long until the counter is back to its initial
//! state (OpenAI's `x-ratelimit-reset-*`).
//!
//! Three rules: a **rate** (requests, tokens or MCP calls per minute) is a leaky bucket, its use
//! draining continuously at `max` per period, so a client that waits gets capacity back smoothly
//! (as OpenAI's limits behave); a **day** budget is a fixed UTC day, spent until the next 00:00
//! UTC; **slots** (concurrent runs) count what is live. The Redis script (`redis.lua`) is the same
//! arithmetic; keep the two in step.
//!
//! Invariant: a cost of 0 asks "is anything left" (`used < max`), the question for token
//! budgets, which a run may overrun once admitted; a positive cost must fit whole.

/// One day in milliseconds.
pub const DAY_MS: u64 = 86_400_000;

/// How a counter's use comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// A leaky bucket draining `max` per `period_ms`.
    Rate { period_ms: u64 },
    /// A budget for the UTC day.
    Day,
    /// Live things, each released when it ends.
    Slots,
}

/// A counter's stored state: its use, and when that was true (a rate: the time in ms; a day
/// budget: the UTC day's number; slots: unused).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Level {
    pub used: f64,
    pub at: u64,
}

impl Rule {
    /// The use at `now_ms` of a counter stored as `level`.
    pub fn used_now(self, level: Level, max: u64, now_ms: u64) -> f64 {
        match self {
            Rule::Rate { period_ms } => {
                let drained =
                    now_ms.saturating_sub(level.at) as f64 * max as f64 / period_ms as f64;
                (level.used - drained).max(0.0)
            }
            Rule::Day if level.at == now_ms / DAY_MS => level.used,
            Rule::Day => 0.0,
            Rule::Slots => level.used,
        }
    }

    /// The level after adding `cost` to a use of `used` at `now_ms`.
    pub fn add(self, used: f64, cost: f64, now_ms: u64) -> Level {
        Level {
            used: used + cost,
            at: match self {
                Rule::Day => now_ms / DAY_MS,
                _ => now_ms,
            },
        }
    }
}

/// Whether `cost` fits in a counter whose use is `used` (see the module's invariant).
pub fn fits(used: f64, cost: f64, max: u64) -> bool {
    if cost == 0.0 {
        used < max as f64
    } else {
        used + cost <= max as f64
    }
}

/// What is left of `max` at a use of `used`.
pub fn remaining(used: f64, max: u64) -> u64 {
    max.saturating_sub(used.ceil().max(0.0) as u64)
}

/// Milliseconds until a counter at `used` is back to its initial state (nothing used).
pub fn reset_ms(rule: Rule, used: f64, max: u64, now_ms: u64) -> u64 {
    match rule {
        Rule::Rate { period_ms } => (used * period_ms as f64 / max as f64).ceil() as u64,
        Rule::Day if used > 0.0 => until_midnight(now_ms),
        Rule::Day | Rule::Slots => 0,
    }
}

/// Milliseconds until `cost` would fit in a counter at `used` (0 if it fits now). Slots free up
/// when a run ends, which no clock can tell: a second is suggested.
pub fn retry_ms(rule: Rule, used: f64, cost: f64, max: u64, now_ms: u64) -> u64 {
    if fits(used, cost, max) {
        return 0;
    }
    match rule {
        Rule::Rate { period_ms } => {
            let per_ms = max as f64 / period_ms as f64;
            if cost == 0.0 {
                ((used - max as f64) / per_ms).floor() as u64 + 1
            } else {
                ((used + cost - max as f64) / per_ms).ceil() as u64
            }
        }
        Rule::Day => until_midnight(now_ms),
        Rule::Slots => 1_000,
    }
}

/// Milliseconds from `now_ms` to the next 00:00 UTC.
pub fn until_midnight(now_ms: u64) -> u64 {
    DAY_MS - now_ms % DAY_MS
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Rule = Rule::Rate { period_ms: 60_000 };

    #[test]
    fn a_rate_drains_continuously_at_its_limit_per_period() {
        let level = Level { used: 60.0, at: 0 };
        assert_eq!(MINUTE.used_now(level, 60, 0), 60.0);
        assert_eq!(MINUTE.used_now(level, 60, 1_000), 59.0);
        assert_eq!(MINUTE.used_now(level, 60, 30_000), 30.0);
        assert_eq!(MINUTE.used_now(level, 60, 120_000), 0.0);
    }

    #[test]
    fn a_request_fits_whole_and_says_when_it_would() {
        assert!(fits(59.0, 1.0, 60));
        assert!(!fits(59.5, 1.0, 60));
        // 0.5 of a request drains in 500 ms at 60 a minute.
        assert_eq!(retry_ms(MINUTE, 59.5, 1.0, 60, 0), 500);
        assert_eq!(retry_ms(MINUTE, 10.0, 1.0, 60, 0), 0);
    }

    #[test]
    fn a_token_budget_admits_while_anything_is_left_and_may_be_overrun() {
        assert!(fits(999.0, 0.0, 1_000));
        assert!(!fits(1_000.0, 0.0, 1_000));
        // 500 over at 1,000 a minute: 30 s, and 1 ms more for something to be left.
        assert_eq!(retry_ms(MINUTE, 1_500.0, 0.0, 1_000, 0), 30_001);
    }

    #[test]
    fn a_day_budget_is_spent_until_the_next_utc_midnight() {
        let day = Rule::Day;
        let noon = 3 * DAY_MS + DAY_MS / 2;
        let level = day.add(0.0, 900.0, noon);
        assert_eq!(day.used_now(level, 1_000, noon + 1), 900.0);
        assert_eq!(day.used_now(level, 1_000, 4 * DAY_MS), 0.0);
        assert_eq!(retry_ms(day, 1_000.0, 0.0, 1_000, noon), DAY_MS / 2);
        assert_eq!(reset_ms(day, 900.0, 1_000, noon), DAY_MS / 2);
        assert_eq!(reset_ms(day, 0.0, 1_000, noon), 0);
    }

    #[test]
    fn reset_is_the_time_until_nothing_is_used() {
        assert_eq!(reset_ms(MINUTE, 6.0, 60, 0), 6_000);
        assert_eq!(reset_ms(MINUTE, 0.0, 60, 0), 0);
        assert_eq!(remaining(6.2, 60), 53);
        assert_eq!(remaining(70.0, 60), 0);
    }

    #[test]
    fn slots_count_what_is_live_and_do_not_drain() {
        let s = Rule::Slots;
        assert_eq!(s.used_now(Level { used: 2.0, at: 0 }, 2, 99_999), 2.0);
        assert!(!fits(2.0, 1.0, 2));
        assert_eq!(retry_ms(s, 2.0, 1.0, 2, 0), 1_000);
    }
}
