//! Every number the design depends on, named, with the article's values as the
//! defaults. A rehearsal scales the durations with [`Settings::scaled`].
//! [`Settings::check`] asserts the relations between them that the code
//! relies on (each a [`Relation`], documented with the code that needs it);
//! servers and rehearsal fleets refuse to start with settings that break one.

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
/// A confirmation email whose send failed is tried again this long after
/// the failure, the wait doubling after each further failure (the email
/// sweep's back-off; `booking_service::outbox`).
pub const EMAIL_RETRY_BACKOFF: Duration = Duration::from_secs(20);
/// The longest wait between two tries of one email.
pub const EMAIL_RETRY_BACKOFF_MAX: Duration = Duration::from_secs(5 * 60);
/// Tries of one email (the winner's and the sweeps') before a human is
/// alerted (`email_undeliverable`); the sweeps then leave it owed, listed
/// by `booking emails pending` and sent by `booking emails resend`. With
/// the back-off above, the eighth try comes about twenty minutes after the
/// first.
pub const EMAIL_ATTEMPTS_MAX: u32 = 8;
/// Owed emails the email sweep sends per second at most (Amazon SES's
/// default sending rate out of the sandbox, 14 a second); a winner's own
/// send is not paced.
pub const EMAIL_SEND_RATE: u32 = 14;

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
    /// See [`EMAIL_RETRY_BACKOFF`].
    #[serde(with = "millis")]
    pub email_retry_backoff: Duration,
    /// See [`EMAIL_RETRY_BACKOFF_MAX`].
    #[serde(with = "millis")]
    pub email_retry_backoff_max: Duration,
    /// See [`EMAIL_ATTEMPTS_MAX`].
    pub email_attempts_max: u32,
    /// See [`EMAIL_SEND_RATE`] (emails a second).
    pub email_send_rate: u32,
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
            email_retry_backoff: EMAIL_RETRY_BACKOFF,
            email_retry_backoff_max: EMAIL_RETRY_BACKOFF_MAX,
            email_attempts_max: EMAIL_ATTEMPTS_MAX,
            email_send_rate: EMAIL_SEND_RATE,
            bugs: Bugs::none(),
        }
    }
}

impl Settings {
    /// Every sale timer multiplied by `scale` (> 0) and rounded to the
    /// millisecond (a rehearsal's time scale: with a 10-minute hold becoming
    /// 20 s, `scale` is 1/30). Counts stay as they are, and so does every
    /// number that is measured against real I/O or the gateway's own clock
    /// rather than against sale time:
    ///
    /// - the request deadline and the grant call's deadline (real calls);
    /// - the token lock, which must outlive the grant call
    ///   ([`Relation::TokenLockOutlivesGrant`]: a scaled 1.5 s lock under a
    ///   30 s grant let a second instance grant while the first still waited);
    /// - the grant back-off and the early refresh, which count against the
    ///   gateway's real hour (its grant allowance, its token lifetime);
    /// - and two timers are scaled no lower than the real-time margin they
    ///   carry: `pending_stale_after` waits out a whole request
    ///   ([`Relation::PendingStaleOutlivesRequest`]) and `booking_copy_slack`
    ///   covers the instances' clock skew ([`Relation::BookingCopyOutlivesHold`]).
    ///
    /// So the article's settings, scaled by any `scale` that leaves the sweep
    /// interval at least a millisecond, pass [`Settings::check`]. A `scale`
    /// of 0 or less gives zero timers, which `check` refuses.
    pub fn scaled(&self, scale: f64) -> Settings {
        // a float to integer cast saturates: a negative or NaN product is 0
        let s = |d: Duration| Duration::from_millis((d.as_millis() as f64 * scale).round() as u64);
        Settings {
            hold: s(self.hold),
            sweep_interval: s(self.sweep_interval),
            sweep_window: s(self.sweep_window),
            sweep_budget: s(self.sweep_budget),
            visibility_timeout: s(self.visibility_timeout).max(SCALED_VISIBILITY_MIN),
            deduplication_window: s(self.deduplication_window),
            status_throttle: s(self.status_throttle),
            booking_copy_slack: s(self.booking_copy_slack).max(CLOCK_SKEW_MAX),
            pending_stale_after: s(self.pending_stale_after)
                .max(self.request_deadline.saturating_add(CLOCK_SKEW_MAX)),
            email_retry_backoff: s(self.email_retry_backoff),
            email_retry_backoff_max: s(self.email_retry_backoff_max),
            // the sweep's pace in sale time stays what it was: a 1/30 sale
            // sends 30 times as many a (real) second, never fewer than one
            email_send_rate: (f64::from(self.email_send_rate) / scale)
                .round()
                .clamp(1.0, f64::from(u32::MAX)) as u32,
            ..self.clone()
        }
    }

    /// The reconciler lock's TTL with these settings: two sweep intervals,
    /// the budget and one gateway query (the reconciler's query timeout is
    /// the request deadline). `booking_service::reconciler::ReconcilerConfig::lock_ttl`
    /// computes the same.
    pub fn reconciler_lock_ttl(&self) -> Duration {
        self.sweep_interval
            .saturating_mul(2)
            .saturating_add(self.sweep_budget)
            .saturating_add(self.request_deadline)
    }

    /// The longest a reconciler sweep runs: it starts no record after the
    /// budget, and a record started just before runs one gateway query (at
    /// most the request deadline).
    pub fn longest_sweep(&self) -> Duration {
        self.sweep_budget.saturating_add(self.request_deadline)
    }

    /// Checks every [`Relation`] the design relies on between these
    /// numbers, in [`Relation::ALL`]'s order; the first broken one is the
    /// error, naming the relation and both sides with their values. A server
    /// refuses to start with settings that fail this.
    pub fn check(&self) -> Result<(), BrokenRelation> {
        Relation::ALL.iter().try_for_each(|r| r.check(self))
    }
}

/// How far two instances' wall clocks may disagree (NTP keeps a fleet within
/// milliseconds; this is the margin the relations allow for it). Deadlines
/// and admission times are written by one instance and read by another.
pub const CLOCK_SKEW_MAX: Duration = Duration::from_secs(1);

/// What the token lock's holder does around the grant call while it must
/// still hold the lock: one coordination read after taking it (a token may
/// have landed meanwhile) before the grant's own deadline starts, and one
/// coordination write after that deadline (storing the token, or extending
/// the lock for the back-off). Each Redis call may take up to the pool wait,
/// the connect and the response limit (2 + 2 + 1 s, `booking_redis::ledger`'s
/// `POOL_WAIT_MAX`, `CONNECT_MAX`, `RESPONSE_MAX`; a test there keeps them
/// within this).
pub const TOKEN_LOCK_MARGIN: Duration = Duration::from_secs(10);

/// The shortest visibility timeout [`Settings::scaled`] gives (the
/// article's 60 s scaled by 1/30 is exactly this). The worker extends the
/// visibility of the messages it holds half a timeout after the receive
/// (`booking_service::worker::VISIBILITY_HEARTBEAT_AT`); the other half must
/// cover that extension's answer over a real connection (one Redis answer is
/// bounded by `booking_redis::ledger::RESPONSE_MAX`, 1 s: a test there keeps
/// it within half of this). At the CI profile's scale (0.01) the visibility
/// was 0.6 s: a one-second blackhole on the Redis link outlived every
/// message in hand, and some were received five times within three seconds
/// and dead-lettered (the rehearsal matrix's `redis-link-blackhole` in CI).
pub const SCALED_VISIBILITY_MIN: Duration = Duration::from_secs(2);

/// bKash's documented lifetime of an `id_token` (`expires_in` 3600 s).
pub const GATEWAY_TOKEN_LIFETIME: Duration = Duration::from_secs(60 * 60);

/// The part of the request deadline the booking path keeps for its undo
/// (`booking_api::bookings::UNDO_RESERVE` is this one: a booking-server test
/// keeps the two equal).
pub const UNDO_RESERVE: Duration = Duration::from_millis(500);

/// A relation between settings that the design relies on, checked by
/// [`Settings::check`]. Each variant's documentation says which code relies
/// on it and what breaks without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Relation {
    /// `token_lock >= token_grant_deadline + TOKEN_LOCK_MARGIN`. The
    /// refresher (`booking_bkash::tokens`) takes the lock, reads once, then
    /// grants on its own deadline and only afterwards stores the token (and
    /// unlocks) or extends the lock for the back-off. If the lock lapses
    /// first, another instance finds no token and a free lock and grants
    /// again: two grants of an allowance of two an hour, and the back-off
    /// extension of a failed grant finds the lock gone.
    TokenLockOutlivesGrant,
    /// `token_refresh_early >= request_deadline`. A token handed out just
    /// before its refresh time is used by a gateway call bounded by the
    /// request deadline (the API's calls; the reconciler's query timeout is
    /// the request deadline too): it must not expire under that call.
    TokenRefreshCoversRequest,
    /// `token_refresh_early <= GATEWAY_TOKEN_LIFETIME / 2`.
    /// `booking_bkash::CachedToken::issued` uses a token for at least half
    /// its life whatever `refresh_early` says (for a gateway that issues
    /// shorter-lived tokens than documented); a setting past that would be
    /// silently cut for every token the gateway really issues.
    TokenRefreshWithinTokenLife,
    /// `pending_stale_after >= request_deadline + CLOCK_SKEW_MAX`. The
    /// reconciler undoes pending admissions older than this, as requests that
    /// died; a booking request lives at most the request deadline from before
    /// its admission (its undo included), as timed by another instance's
    /// clock. Shorter, and the reconciler gives back the seat of a request
    /// still creating its payment, which then fails a booking that would have
    /// succeeded.
    PendingStaleOutlivesRequest,
    /// `booking_copy_slack >= CLOCK_SKEW_MAX`. The booking copy lives `hold +
    /// booking_copy_slack` from after the hold's deadline was set; the
    /// callback accepts a payment until the deadline by its own instance's
    /// clock and then needs the copy (a fast payer's PAID record is written
    /// from it). The slack is what makes the copy outlive the hold.
    BookingCopyOutlivesHold,
    /// `sweep_window < hold`. The reconciler queries the gateway about every
    /// HELD record within the sweep window of its deadline, every sweep; a
    /// window as long as the hold queries every hold from its admission on,
    /// which is the gateway traffic the article keeps to the holds' last
    /// stretch (one rate-limited loop, predictable use of the gateway).
    SweepWindowWithinHold,
    /// `reconciler_lock_ttl > longest_sweep + sweep_interval`
    /// ([`Settings::reconciler_lock_ttl`], [`Settings::longest_sweep`]). The
    /// leader renews its lock at every sweep; the lock must outlive the
    /// longest sweep plus the wait for the next tick, or a second instance
    /// takes it under a sweep still running. With the computed TTL this
    /// reduces to a non-zero sweep interval (a zero one would also make the
    /// reconciler's `tokio::time::interval` panic).
    ReconcilerLockOutlivesSweep,
    /// `sweep_concurrency >= 1`. Records are handled this many at a time;
    /// none at a time never releases a seat (the reconciler must not need to
    /// clamp it).
    SweepConcurrencyPositive,
    /// `query_failures_before_extension >= 1`. `reconciler::decide` alerts
    /// when the failures reach this count with the extensions used up: at 0
    /// the count (at least 1 after a failure) never equals it and the human
    /// is never alerted.
    QueryFailuresPositive,
    /// `receives_max >= 1`. A message is dead-lettered after this many
    /// receives; at 0 every admission would go to the dead-letter queue
    /// unwritten (and SQS refuses a `maxReceiveCount` below 1).
    ReceivesPositive,
    /// `request_deadline >= 4 * UNDO_RESERVE`. The booking path stops its
    /// work [`UNDO_RESERVE`] before the request deadline so the undo still
    /// fits; with a shorter deadline the API shrinks the reserve to a quarter
    /// of it, too little for an undo's two tries on a slow ledger.
    UndoReserveFitsRequest,
    /// `email_retry_backoff_max >= email_retry_backoff >= 1 ms`. The email
    /// sweep waits the back-off after a failed send, doubled each time up
    /// to the maximum (`booking_service::outbox::backoff`): a zero back-off
    /// retries a failing mailer every sweep, and a maximum below the first
    /// wait would shrink the wait after a failure.
    EmailBackoffOrdered,
    /// `email_attempts_max >= 1` and `email_send_rate >= 1`. With no try
    /// allowed every owed email is given up at once; at a rate of 0 the
    /// sweep never sends one.
    EmailSenderPositive,
}

impl Relation {
    /// Every relation, in the order [`Settings::check`] checks them.
    pub const ALL: [Relation; 13] = [
        Relation::TokenLockOutlivesGrant,
        Relation::TokenRefreshCoversRequest,
        Relation::TokenRefreshWithinTokenLife,
        Relation::PendingStaleOutlivesRequest,
        Relation::BookingCopyOutlivesHold,
        Relation::SweepWindowWithinHold,
        Relation::ReconcilerLockOutlivesSweep,
        Relation::SweepConcurrencyPositive,
        Relation::QueryFailuresPositive,
        Relation::ReceivesPositive,
        Relation::UndoReserveFitsRequest,
        Relation::EmailBackoffOrdered,
        Relation::EmailSenderPositive,
    ];

    /// The relation's name, as errors and configuration messages print it.
    pub fn name(self) -> &'static str {
        match self {
            Relation::TokenLockOutlivesGrant => "token_lock_outlives_grant",
            Relation::TokenRefreshCoversRequest => "token_refresh_covers_request",
            Relation::TokenRefreshWithinTokenLife => "token_refresh_within_token_life",
            Relation::PendingStaleOutlivesRequest => "pending_stale_outlives_request",
            Relation::BookingCopyOutlivesHold => "booking_copy_outlives_hold",
            Relation::SweepWindowWithinHold => "sweep_window_within_hold",
            Relation::ReconcilerLockOutlivesSweep => "reconciler_lock_outlives_sweep",
            Relation::SweepConcurrencyPositive => "sweep_concurrency_positive",
            Relation::QueryFailuresPositive => "query_failures_positive",
            Relation::ReceivesPositive => "receives_positive",
            Relation::UndoReserveFitsRequest => "undo_reserve_fits_request",
            Relation::EmailBackoffOrdered => "email_backoff_ordered",
            Relation::EmailSenderPositive => "email_sender_positive",
        }
    }

    /// Whether `s` keeps this relation; the broken relation with both sides
    /// if not.
    pub fn check(self, s: &Settings) -> Result<(), BrokenRelation> {
        let broken = |left: String, op: &'static str, right: String| {
            Err(BrokenRelation {
                relation: self,
                left,
                op,
                right,
            })
        };
        let d = |name: &str, v: Duration| format!("{name} ({v:?})");
        let at_least_one = |name: &str, v: u64| {
            if v < 1 {
                broken(format!("{name} ({v})"), ">=", "1".into())
            } else {
                Ok(())
            }
        };
        match self {
            Relation::TokenLockOutlivesGrant => {
                let need = s.token_grant_deadline.saturating_add(TOKEN_LOCK_MARGIN);
                if s.token_lock < need {
                    return broken(
                        d("token_lock", s.token_lock),
                        ">=",
                        format!(
                            "token_grant_deadline ({:?}) + TOKEN_LOCK_MARGIN ({TOKEN_LOCK_MARGIN:?}) = {need:?}",
                            s.token_grant_deadline
                        ),
                    );
                }
            }
            Relation::TokenRefreshCoversRequest => {
                if s.token_refresh_early < s.request_deadline {
                    return broken(
                        d("token_refresh_early", s.token_refresh_early),
                        ">=",
                        d("request_deadline", s.request_deadline),
                    );
                }
            }
            Relation::TokenRefreshWithinTokenLife => {
                let half = GATEWAY_TOKEN_LIFETIME / 2;
                if s.token_refresh_early > half {
                    return broken(
                        d("token_refresh_early", s.token_refresh_early),
                        "<=",
                        format!(
                            "GATEWAY_TOKEN_LIFETIME ({GATEWAY_TOKEN_LIFETIME:?}) / 2 = {half:?}"
                        ),
                    );
                }
            }
            Relation::PendingStaleOutlivesRequest => {
                let need = s.request_deadline.saturating_add(CLOCK_SKEW_MAX);
                if s.pending_stale_after < need {
                    return broken(
                        d("pending_stale_after", s.pending_stale_after),
                        ">=",
                        format!(
                            "request_deadline ({:?}) + CLOCK_SKEW_MAX ({CLOCK_SKEW_MAX:?}) = {need:?}",
                            s.request_deadline
                        ),
                    );
                }
            }
            Relation::BookingCopyOutlivesHold => {
                if s.booking_copy_slack < CLOCK_SKEW_MAX {
                    return broken(
                        d("booking_copy_slack", s.booking_copy_slack),
                        ">=",
                        d("CLOCK_SKEW_MAX", CLOCK_SKEW_MAX),
                    );
                }
            }
            Relation::SweepWindowWithinHold => {
                if s.sweep_window >= s.hold {
                    return broken(d("sweep_window", s.sweep_window), "<", d("hold", s.hold));
                }
            }
            Relation::ReconcilerLockOutlivesSweep => {
                let lock = s.reconciler_lock_ttl();
                let need = s.longest_sweep().saturating_add(s.sweep_interval);
                if lock <= need {
                    return broken(
                        format!("reconciler lock TTL ({lock:?})"),
                        ">",
                        format!(
                            "longest sweep ({:?}) + sweep_interval ({:?}) = {need:?}",
                            s.longest_sweep(),
                            s.sweep_interval
                        ),
                    );
                }
            }
            Relation::SweepConcurrencyPositive => {
                return at_least_one("sweep_concurrency", s.sweep_concurrency as u64);
            }
            Relation::QueryFailuresPositive => {
                return at_least_one(
                    "query_failures_before_extension",
                    u64::from(s.query_failures_before_extension),
                );
            }
            Relation::ReceivesPositive => {
                return at_least_one("receives_max", u64::from(s.receives_max));
            }
            Relation::UndoReserveFitsRequest => {
                let need = UNDO_RESERVE.saturating_mul(4);
                if s.request_deadline < need {
                    return broken(
                        d("request_deadline", s.request_deadline),
                        ">=",
                        format!("4 * UNDO_RESERVE ({UNDO_RESERVE:?}) = {need:?}"),
                    );
                }
            }
            Relation::EmailBackoffOrdered => {
                if s.email_retry_backoff.is_zero() {
                    return broken(
                        d("email_retry_backoff", s.email_retry_backoff),
                        ">=",
                        "1ms".into(),
                    );
                }
                if s.email_retry_backoff_max < s.email_retry_backoff {
                    return broken(
                        d("email_retry_backoff_max", s.email_retry_backoff_max),
                        ">=",
                        d("email_retry_backoff", s.email_retry_backoff),
                    );
                }
            }
            Relation::EmailSenderPositive => {
                at_least_one("email_attempts_max", u64::from(s.email_attempts_max))?;
                return at_least_one("email_send_rate", u64::from(s.email_send_rate));
            }
        }
        Ok(())
    }
}

impl std::fmt::Display for Relation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Settings that break a [`Relation`]: which one, and both sides with their
/// values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("settings break {relation}: {left} must be {op} {right}")]
pub struct BrokenRelation {
    /// The relation.
    pub relation: Relation,
    /// Its left side, named, with its value.
    pub left: String,
    /// The comparison the relation requires.
    pub op: &'static str,
    /// Its right side, named, with its value.
    pub right: String,
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
        assert_eq!(
            (
                s.email_retry_backoff,
                s.email_retry_backoff_max,
                s.email_attempts_max,
                s.email_send_rate
            ),
            (Duration::from_secs(20), Duration::from_secs(300), 8, 14)
        );
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
        assert_eq!(
            (s.email_retry_backoff, s.email_retry_backoff_max),
            (Duration::from_millis(667), Duration::from_secs(10))
        );
        assert_eq!(s.email_attempts_max, 8, "a count");
        assert_eq!(s.email_send_rate, 420, "14 a sale second");
        assert_eq!(Settings::default().scaled(100.0).email_send_rate, 1);
        let partial: Settings = serde_json::from_str(r#"{"hold": 1000}"#).unwrap();
        assert_eq!(partial.hold, Duration::from_secs(1));
        assert_eq!(partial.sweep_interval, SWEEP_INTERVAL);
    }

    /// The scales the rehearsal profiles use (`scenarios/profiles/*.toml`:
    /// default 1/30, ci 0.01) and a few more.
    const SCALES: [f64; 5] = [1.0, 1.0 / 30.0, 0.01, 0.001, 0.5];

    #[test]
    fn the_articles_settings_keep_every_relation_at_every_rehearsal_scale() {
        Settings::default().check().unwrap();
        for scale in SCALES {
            let s = Settings::default().scaled(scale);
            assert_eq!(s.check(), Ok(()), "scale {scale}");
        }
    }

    #[test]
    fn scaling_keeps_the_gateways_real_time_numbers() {
        for scale in [1.0 / 30.0, 0.01] {
            let s = Settings::default().scaled(scale);
            // the lock guards a real grant call: a scaled lock (1.5 s, 450 ms)
            // lapsed under a 30 s grant
            assert_eq!(s.token_lock, TOKEN_LOCK, "scale {scale}");
            assert_eq!(s.token_grant_deadline, TOKEN_GRANT_DEADLINE);
            assert_eq!(s.token_grant_backoff, TOKEN_GRANT_BACKOFF);
            assert_eq!(s.token_refresh_early, TOKEN_REFRESH_EARLY);
            assert!(s.token_lock >= s.token_grant_deadline + TOKEN_LOCK_MARGIN);
            // floors of real-time margins, not the scaled 2 s / 600 ms
            assert_eq!(
                s.pending_stale_after,
                REQUEST_DEADLINE + CLOCK_SKEW_MAX,
                "scale {scale}"
            );
        }
        let ci = Settings::default().scaled(0.01);
        assert_eq!(ci.booking_copy_slack, Duration::from_millis(1200));
        assert_eq!(
            ci.visibility_timeout, SCALED_VISIBILITY_MIN,
            "floored, not 600 ms"
        );
        assert_eq!(
            Settings::default().scaled(1.0 / 30.0).visibility_timeout,
            Duration::from_secs(2)
        );
        assert_eq!(
            Settings::default().scaled(0.5).visibility_timeout,
            Duration::from_secs(30)
        );
        assert_eq!(ci.hold, Duration::from_secs(6));
        let tiny = Settings::default().scaled(0.001);
        assert_eq!(tiny.booking_copy_slack, CLOCK_SKEW_MAX, "floored");
    }

    #[test]
    fn a_scale_of_zero_or_less_is_refused_by_the_check() {
        for scale in [0.0, -1.0, f64::NAN] {
            let s = Settings::default().scaled(scale);
            assert_eq!(s.hold, Duration::ZERO, "scale {scale}");
            assert!(s.check().is_err(), "scale {scale}");
        }
    }

    /// Each relation, broken by changing one setting of the article's.
    fn breaking(r: Relation) -> Settings {
        let mut s = Settings::default();
        match r {
            Relation::TokenLockOutlivesGrant => {
                s.token_lock = TOKEN_GRANT_DEADLINE + TOKEN_LOCK_MARGIN - Duration::from_millis(1);
            }
            Relation::TokenRefreshCoversRequest => {
                s.token_refresh_early = REQUEST_DEADLINE - Duration::from_millis(1);
            }
            Relation::TokenRefreshWithinTokenLife => {
                s.token_refresh_early = GATEWAY_TOKEN_LIFETIME / 2 + Duration::from_millis(1);
            }
            Relation::PendingStaleOutlivesRequest => {
                s.pending_stale_after = REQUEST_DEADLINE;
            }
            Relation::BookingCopyOutlivesHold => s.booking_copy_slack = Duration::ZERO,
            Relation::SweepWindowWithinHold => s.sweep_window = HOLD,
            Relation::ReconcilerLockOutlivesSweep => s.sweep_interval = Duration::ZERO,
            Relation::SweepConcurrencyPositive => s.sweep_concurrency = 0,
            Relation::QueryFailuresPositive => s.query_failures_before_extension = 0,
            Relation::ReceivesPositive => s.receives_max = 0,
            Relation::UndoReserveFitsRequest => {
                s.request_deadline = UNDO_RESERVE * 4 - Duration::from_millis(1);
            }
            Relation::EmailBackoffOrdered => {
                s.email_retry_backoff_max = EMAIL_RETRY_BACKOFF - Duration::from_millis(1);
            }
            Relation::EmailSenderPositive => s.email_send_rate = 0,
        }
        s
    }

    #[test]
    fn each_relation_is_named_when_broken_and_only_it() {
        for r in Relation::ALL {
            let s = breaking(r);
            for other in Relation::ALL {
                assert_eq!(
                    other.check(&s).is_ok(),
                    other != r,
                    "{other} with {r} broken"
                );
            }
            let err = s.check().unwrap_err();
            assert_eq!(err.relation, r);
            let message = err.to_string();
            assert!(message.contains(r.name()), "{message}");
        }
        // the message names both sides and their values
        let err = breaking(Relation::TokenLockOutlivesGrant)
            .check()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "settings break token_lock_outlives_grant: token_lock (39.999s) must be >= \
             token_grant_deadline (30s) + TOKEN_LOCK_MARGIN (10s) = 40s"
        );
        let err = breaking(Relation::SweepWindowWithinHold)
            .check()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "settings break sweep_window_within_hold: sweep_window (600s) must be < hold (600s)"
        );
        // the boundaries themselves are fine
        let mut s = Settings {
            token_lock: TOKEN_GRANT_DEADLINE + TOKEN_LOCK_MARGIN,
            token_refresh_early: REQUEST_DEADLINE,
            pending_stale_after: REQUEST_DEADLINE + CLOCK_SKEW_MAX,
            booking_copy_slack: CLOCK_SKEW_MAX,
            ..Settings::default()
        };
        s.check().unwrap();
        s.token_refresh_early = GATEWAY_TOKEN_LIFETIME / 2;
        s.request_deadline = UNDO_RESERVE * 4;
        s.email_retry_backoff_max = s.email_retry_backoff;
        s.email_attempts_max = 1;
        s.email_send_rate = 1;
        s.check().unwrap();
        // and the other ways to break the email relations
        s.email_attempts_max = 0;
        assert_eq!(
            s.check().unwrap_err().relation,
            Relation::EmailSenderPositive
        );
        s.email_attempts_max = 1;
        s.email_retry_backoff = Duration::ZERO;
        assert_eq!(
            s.check().unwrap_err().relation,
            Relation::EmailBackoffOrdered
        );
    }

    #[test]
    fn todays_scaled_token_lock_would_break_the_grant_relation() {
        // what `scaled` did before: the lock shrank with sale time
        let s = Settings {
            token_lock: Duration::from_millis(1500),
            ..Settings::default().scaled(1.0 / 30.0)
        };
        let err = s.check().unwrap_err();
        assert_eq!(err.relation, Relation::TokenLockOutlivesGrant);
        assert!(err.to_string().contains("1.5s"), "{err}");
    }

    #[test]
    fn the_reconciler_lock_is_the_interval_twice_the_budget_and_a_query() {
        let s = Settings::default();
        assert_eq!(
            s.reconciler_lock_ttl(),
            Duration::from_secs(20 * 2 + 45 + 8)
        );
        assert_eq!(s.longest_sweep(), Duration::from_secs(45 + 8));
    }
}
