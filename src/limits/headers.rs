//! OpenAI's rate-limit headers: `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, the
//! reset written as OpenAI writes it (Go's duration format: `20ms`, `1.2s`, `6m0s`, `1h2m3s`).

use hyper::header::{HeaderMap, HeaderName, HeaderValue};

use super::Reading;

/// `ms` as OpenAI writes a reset: milliseconds under a second, else hours, minutes and seconds
/// (with up to three decimals), the larger units only when not zero.
pub fn duration(ms: u64) -> String {
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    let (h, m) = (ms / 3_600_000, ms / 60_000 % 60);
    let s = (ms % 60_000) as f64 / 1_000.0;
    let secs = format!("{s:.3}");
    let secs = secs.trim_end_matches('0').trim_end_matches('.');
    match (h, m) {
        (0, 0) => format!("{secs}s"),
        (0, m) => format!("{m}m{secs}s"),
        (h, m) => format!("{h}h{m}m{secs}s"),
    }
}

/// Sets the three headers of `what` (`requests` or `tokens`) from `reading`.
pub fn set(headers: &mut HeaderMap, what: &str, reading: &Reading) {
    let mut put = |name: &str, value: String| {
        if let (Ok(n), Ok(v)) = (
            HeaderName::try_from(format!("x-ratelimit-{name}-{what}")),
            HeaderValue::try_from(value),
        ) {
            headers.insert(n, v);
        }
    };
    put("limit", reading.max.to_string());
    put("remaining", reading.remaining.to_string());
    put("reset", duration(reading.reset_ms));
}

#[cfg(test)]
mod tests {
    use super::duration;

    #[test]
    fn resets_are_written_as_openai_writes_them() {
        assert_eq!(duration(0), "0ms");
        assert_eq!(duration(20), "20ms");
        assert_eq!(duration(1_200), "1.2s");
        assert_eq!(duration(1_000), "1s");
        assert_eq!(duration(17_654), "17.654s");
        assert_eq!(duration(360_000), "6m0s");
        assert_eq!(duration(90_500), "1m30.5s");
        assert_eq!(duration(3_723_000), "1h2m3s");
        assert_eq!(duration(7_200_000), "2h0m0s");
    }
}
