//! Every number the design depends on, named, with the article's values as the
//! defaults. A rehearsal scales the durations with [`Settings::scaled`].

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::bugs::Bugs;

/// How long a seat is held while the candidate pays.
pub const HOLD: Duration = Duration::from_secs(10 * 60);
/// How often the reconciler sweeps.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(20);
/// The reconciler looks at holds within this long of their deadline, or past it.
pub const SWEEP_WINDOW: Duration = Duration::from_secs(6 * 60);
/// Holds the reconciler handles at a time.
pub const SWEEP_CONCURRENCY: usize = 8;
/// A sweep stops starting work after this long, so it ends before the next.
pub const SWEEP_BUDGET: Duration = Duration::from_secs(45);
/// Gateway queries that must fail in a row before a hold is extended.
pub const QUERY_FAILURES_BEFORE_EXTENSION: u32 = 3;
/// Extensions of one hold (each by [`HOLD`]) before a human is alerted.
pub const EXTENSIONS_MAX: u32 = 3;
/// SQS visibility timeout of a received message.
pub const VISIBILITY_TIMEOUT: Duration = Duration::from_secs(60);
/// Receives before a message moves to the dead-letter queue.
pub const RECEIVES_MAX: u32 = 5;
/// SQS FIFO deduplication window.
pub const DEDUPLICATION_WINDOW: Duration = Duration::from_secs(5 * 60);
/// The status document is rewritten at most this often (SET NX throttle).
pub const STATUS_THROTTLE: Duration = Duration::from_secs(2);
/// TTL of the gateway-token refresh lock: one refresher at a time.
pub const TOKEN_LOCK: Duration = Duration::from_secs(45);
/// The grant call's own deadline, independent of the request that triggered it.
pub const TOKEN_GRANT_DEADLINE: Duration = Duration::from_secs(30);
/// A failed grant keeps the lock this long, so the fleet does not retry in a loop.
pub const TOKEN_GRANT_BACKOFF: Duration = Duration::from_secs(60);
/// The token is refreshed this long before it expires.
pub const TOKEN_REFRESH_EARLY: Duration = Duration::from_secs(5 * 60);
/// Every HTTP handler answers within this long.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(8);
/// The Redis booking copy outlives the hold by this much.
pub const BOOKING_COPY_SLACK: Duration = Duration::from_secs(2 * 60);
/// A pending admission older than this whose request died is cleaned up.
pub const PENDING_STALE_AFTER: Duration = Duration::from_secs(60);
/// Redis connections per instance, sized for a burst (the article's 300).
pub const REDIS_POOL_SIZE: usize = 300;

/// The settings one instance runs with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// See [`HOLD`].
    #[serde(with = "millis")]
    pub hold: Duration,
    /// See [`SWEEP_INTERVAL`].
    #[serde(with = "millis")]
    pub sweep_interval: Duration,
    /// See [`SWEEP_WINDOW`].
    #[serde(with = "millis")]
    pub sweep_window: Duration,
    /// See [`SWEEP_CONCURRENCY`].
    pub sweep_concurrency: usize,
    /// See [`SWEEP_BUDGET`].
    #[serde(with = "millis")]
    pub sweep_budget: Duration,
    /// See [`QUERY_FAILURES_BEFORE_EXTENSION`].
    pub query_failures_before_extension: u32,
    /// See [`EXTENSIONS_MAX`].
    pub extensions_max: u32,
    /// See [`VISIBILITY_TIMEOUT`].
    #[serde(with = "millis")]
    pub visibility_timeout: Duration,
    /// See [`RECEIVES_MAX`].
    pub receives_max: u32,
    /// See [`DEDUPLICATION_WINDOW`].
    #[serde(with = "millis")]
    pub deduplication_window: Duration,
    /// See [`STATUS_THROTTLE`].
    #[serde(with = "millis")]
    pub status_throttle: Duration,
    /// See [`TOKEN_LOCK`].
    #[serde(with = "millis")]
    pub token_lock: Duration,
    /// See [`TOKEN_GRANT_DEADLINE`].
    #[serde(with = "millis")]
    pub token_grant_deadline: Duration,
    /// See [`TOKEN_GRANT_BACKOFF`].
    #[serde(with = "millis")]
    pub token_grant_backoff: Duration,
    /// See [`TOKEN_REFRESH_EARLY`].
    #[serde(with = "millis")]
    pub token_refresh_early: Duration,
    /// See [`REQUEST_DEADLINE`].
    #[serde(with = "millis")]
    pub request_deadline: Duration,
    /// See [`BOOKING_COPY_SLACK`].
    #[serde(with = "millis")]
    pub booking_copy_slack: Duration,
    /// See [`PENDING_STALE_AFTER`].
    #[serde(with = "millis")]
    pub pending_stale_after: Duration,
    /// See [`REDIS_POOL_SIZE`].
    pub redis_pool_size: usize,
    /// The bug zoo's switches ([`crate::bugs`]): none, unless a rehearsal
    /// asks to prove the harness catches one. Refused in production.
    #[serde(skip_serializing_if = "Bugs::is_empty")]
    pub bugs: Bugs,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            hold: HOLD,
            sweep_interval: SWEEP_INTERVAL,
            sweep_window: SWEEP_WINDOW,
            sweep_concurrency: SWEEP_CONCURRENCY,
            sweep_budget: SWEEP_BUDGET,
            query_failures_before_extension: QUERY_FAILURES_BEFORE_EXTENSION,
            extensions_max: EXTENSIONS_MAX,
            visibility_timeout: VISIBILITY_TIMEOUT,
            receives_max: RECEIVES_MAX,
            deduplication_window: DEDUPLICATION_WINDOW,
            status_throttle: STATUS_THROTTLE,
            token_lock: TOKEN_LOCK,
            token_grant_deadline: TOKEN_GRANT_DEADLINE,
            token_grant_backoff: TOKEN_GRANT_BACKOFF,
            token_refresh_early: TOKEN_REFRESH_EARLY,
            request_deadline: REQUEST_DEADLINE,
            booking_copy_slack: BOOKING_COPY_SLACK,
            pending_stale_after: PENDING_STALE_AFTER,
            redis_pool_size: REDIS_POOL_SIZE,
            bugs: Bugs::none(),
        }
    }
}

impl Settings {
    /// Every sale timer multiplied by `scale` and rounded to the millisecond (a
    /// rehearsal's time scale: with a 10-minute hold becoming 20 s, `scale` is
    /// 1/30). Counts stay as they are, and so do the two deadlines that bound
    /// real I/O rather than sale time: the request deadline and the grant call's.
    pub fn scaled(&self, scale: f64) -> Settings {
        let s = |d: Duration| {
            Duration::from_millis((d.as_millis() as f64 * scale.max(0.0)).round() as u64)
        };
        Settings {
            hold: s(self.hold),
            sweep_interval: s(self.sweep_interval),
            sweep_window: s(self.sweep_window),
            sweep_budget: s(self.sweep_budget),
            visibility_timeout: s(self.visibility_timeout),
            deduplication_window: s(self.deduplication_window),
            status_throttle: s(self.status_throttle),
            token_lock: s(self.token_lock),
            token_grant_backoff: s(self.token_grant_backoff),
            token_refresh_early: s(self.token_refresh_early),
            booking_copy_slack: s(self.booking_copy_slack),
            pending_stale_after: s(self.pending_stale_after),
            ..self.clone()
        }
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_articles_numbers() {
        let s = Settings::default();
        assert_eq!(s.hold, Duration::from_secs(600));
        assert_eq!(s.sweep_interval, Duration::from_secs(20));
        assert_eq!(s.sweep_window, Duration::from_secs(360));
        assert_eq!(s.sweep_concurrency, 8);
        assert_eq!(s.sweep_budget, Duration::from_secs(45));
        assert_eq!(s.extensions_max, 3);
        assert_eq!(s.query_failures_before_extension, 3);
        assert_eq!(s.visibility_timeout, Duration::from_secs(60));
        assert_eq!(s.receives_max, 5);
        assert_eq!(s.status_throttle, Duration::from_secs(2));
        assert_eq!(
            (s.token_lock, s.token_grant_deadline, s.token_grant_backoff),
            (
                Duration::from_secs(45),
                Duration::from_secs(30),
                Duration::from_secs(60)
            )
        );
        assert_eq!(s.redis_pool_size, 300);
    }

    #[test]
    fn scaling_shrinks_durations_only() {
        let s = Settings::default().scaled(1.0 / 30.0);
        assert_eq!(s.hold, Duration::from_secs(20));
        assert_eq!(s.sweep_interval, Duration::from_millis(667));
        assert_eq!(s.sweep_concurrency, 8);
        assert_eq!(s.extensions_max, 3);
        assert_eq!(
            s.request_deadline, REQUEST_DEADLINE,
            "real I/O deadlines do not scale"
        );
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Settings>(&json).unwrap(), s);
        let partial: Settings = serde_json::from_str(r#"{"hold": 1000}"#).unwrap();
        assert_eq!(partial.hold, Duration::from_secs(1));
        assert_eq!(partial.sweep_interval, SWEEP_INTERVAL);
    }
}
