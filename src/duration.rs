//! The one rule for the durations a caller gives: timeouts, graces and intervals saturate at
//! [`MAX_TIMEOUT`], and TTLs are refused outside `(0, MAX_TTL]` (see
//! `check_ttl` in the builder). Every deadline is computed from a saturated value,
//! so no caller value (`Duration::MAX`, `u64::MAX` seconds) can overflow an `Instant`, a
//! clock sum or a provider's wire field; a zero timeout is a deadline that has already
//! passed, never an error.

use std::time::{Duration, Instant};

/// The longest timeout that means anything: 30 days, as long as [`MAX_TTL`](crate::builder::MAX_TTL)
/// (no sandbox lives longer on one TTL). Longer timeouts (up to `Duration::MAX`) saturate
/// at it: a command, cell, file operation, `create()`, template setup or teardown given one
/// is treated exactly as if given 30 days.
pub const MAX_TIMEOUT: Duration = crate::api::builder::MAX_TTL;

/// `d`, at most [`MAX_TIMEOUT`].
pub(crate) fn saturate(d: Duration) -> Duration {
    d.min(MAX_TIMEOUT)
}

/// `start + d`, with `d` saturated first: an `Instant` 30 days ahead is representable on
/// every platform Rust supports, where `start + Duration::MAX` panics.
#[cfg_attr(
    not(any(feature = "local", feature = "e2b")),
    allow(dead_code, reason = "used by the backends that keep deadlines as instants: local, e2b")
)]
pub(crate) fn after(start: Instant, d: Duration) -> Instant {
    let d = saturate(d);
    start.checked_add(d).unwrap_or(start)
}

/// Whole seconds of `d` rounded up (at least `min`), saturated: for wire fields in seconds.
#[cfg_attr(
    not(any(feature = "e2b", feature = "modal")),
    allow(dead_code, reason = "used by the backends that send seconds on the wire: e2b, modal")
)]
pub(crate) fn whole_seconds(d: Duration, min: u64) -> u64 {
    let d = saturate(d);
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(min)
}

#[cfg(test)]
mod tests {
    use super::{MAX_TIMEOUT, after, saturate, whole_seconds};
    use std::time::{Duration, Instant};

    #[test]
    fn extremes_saturate_and_never_panic() {
        let now = Instant::now();
        for d in [Duration::ZERO, Duration::from_nanos(1), Duration::from_secs(u64::MAX), Duration::MAX] {
            let at = after(now, d);
            assert!(at >= now && at <= now + MAX_TIMEOUT, "{d:?}");
            assert!(saturate(d) <= MAX_TIMEOUT);
            assert!(whole_seconds(d, 1) <= MAX_TIMEOUT.as_secs() && whole_seconds(d, 1) >= 1);
        }
        assert_eq!(whole_seconds(Duration::from_millis(1500), 0), 2);
        assert_eq!(whole_seconds(Duration::ZERO, 0), 0);
        assert_eq!(saturate(Duration::MAX), MAX_TIMEOUT);
    }
}
