//! The bug zoo's switches: bugs the article's team found in testing, each
//! one switched back on by name, so the harness can prove it would catch it.
//!
//! Every switch is off by default, travels in [`crate::Settings::bugs`], and
//! is refused by a production configuration (the server's config validation
//! says so). A component reads only the switches that concern it, at the one
//! place the bug lived; nothing else changes.
//!
//! | switch | the bug, switched back on |
//! |---|---|
//! | `small_redis_pool` | the Redis pool sized for normal traffic, not the burst |
//! | `rebook_counted_as_duplicate` | the worker takes a cancel-then-rebook for a duplicate and gives a seat back |
//! | `unguarded_undo` | an undo that runs twice decrements twice (the embedded ledger) |
//! | `paid_keeps_ttl` | the HELD→PAID update leaves the TTL on, so the TTL service deletes a paid booking later |
//! | `trust_redirect_cancel` | the redirect's `status=cancel` frees the seat |
//! | `unlatched_status_writer` | status writers race without the latch, so a full level can be shown open |
//! | `stale_held_not_replaced` | a stale HELD record with another payment is kept, so the new booking can never be marked paid |
//! | `trust_redirect_success` | the redirect's `status=success` marks the booking PAID without an execute |
//! | `release_on_unanswered_query` | the reconciler releases past the deadline when the gateway does not answer |
//! | `token_grant_per_instance` | every instance grants its own gateway token |
//! | `execute_after_deadline` | the callback executes even after the hold deadline |
//! | `email_before_paid` | the confirmation email goes out before the HELD→PAID update |
//! | `email_latch_before_send` | the email is marked sent before the send: a failed send loses it |
//! | `no_stale_pending_cleanup` | the reconciler never undoes a stale pending admission, so a seat whose instance died between the admit and the queued booking stays counted forever |
//! | `ignore_lost_redis_connection` | the Redis pool keeps handing out a connection whose command failed (I/O error, dropped link), so an instance never reconnects after Redis restarts |
//! | `redis_without_persistence` | the ledger's Redis keeps no append-only file: a restart forgets every counted seat (the process fleet starts its `redis-server` so) |

use std::collections::BTreeSet;

/// The pool size of `small_redis_pool`: enough for normal traffic, far too
/// few for a flash sale's burst (the article's fix was 300).
pub const SMALL_REDIS_POOL: usize = 8;

use serde::{Deserialize, Serialize};

/// One bug of the zoo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bug {
    /// The Redis pool sized for normal traffic (load test).
    SmallRedisPool,
    /// The worker treats a cancel-then-rebook as a duplicate and decrements a
    /// counter (counter drift).
    RebookCountedAsDuplicate,
    /// An undo that runs twice pushes a counter down twice.
    UnguardedUndo,
    /// A PAID record keeps the hold's TTL and is deleted later (lost paid
    /// booking).
    PaidKeepsTtl,
    /// The redirect's `status=cancel` is trusted and frees a seat.
    TrustRedirectCancel,
    /// Two concurrent status writers leave a full level shown as open.
    UnlatchedStatusWriter,
    /// A stale HELD record with a different payment ID is not replaced, so
    /// the new booking can never be marked paid.
    StaleHeldNotReplaced,
    /// The redirect's `status=success` is trusted: PAID without an execute.
    TrustRedirectSuccess,
    /// The reconciler releases a hold past its deadline when its query fails.
    ReleaseOnUnansweredQuery,
    /// Every instance grants its own token.
    TokenGrantPerInstance,
    /// The callback executes after the hold deadline.
    ExecuteAfterDeadline,
    /// The email goes out before the PAID update.
    EmailBeforePaid,
    /// The email is marked sent before it is sent (the old order): a mailer
    /// that fails after the mark, or a sender that dies there, loses the
    /// email for good (nothing owes it any more).
    EmailLatchBeforeSend,
    /// The reconciler's stale-pending sweep is off: an admission whose
    /// instance died before its booking was queued (counted, no payment, no
    /// record) keeps its seat forever.
    NoStalePendingCleanup,
    /// The Redis pool reuses a connection whose command failed with an I/O
    /// error or a dropped link instead of replacing it: after a Redis restart
    /// or a reset link the instance keeps failing on dead connections.
    IgnoreLostRedisConnection,
    /// The ledger's Redis keeps nothing on disk (no append-only file): when
    /// it restarts, every counted seat and hold is forgotten. Switched on,
    /// the process fleet starts its `redis-server` without persistence.
    RedisWithoutPersistence,
}

impl Bug {
    /// Every bug, in the table's order.
    pub const ALL: [Bug; 16] = [
        Bug::SmallRedisPool,
        Bug::RebookCountedAsDuplicate,
        Bug::UnguardedUndo,
        Bug::PaidKeepsTtl,
        Bug::TrustRedirectCancel,
        Bug::UnlatchedStatusWriter,
        Bug::StaleHeldNotReplaced,
        Bug::TrustRedirectSuccess,
        Bug::ReleaseOnUnansweredQuery,
        Bug::TokenGrantPerInstance,
        Bug::ExecuteAfterDeadline,
        Bug::EmailBeforePaid,
        Bug::EmailLatchBeforeSend,
        Bug::NoStalePendingCleanup,
        Bug::IgnoreLostRedisConnection,
        Bug::RedisWithoutPersistence,
    ];

    /// Its switch's name (`snake_case`, as in configuration files).
    pub fn name(self) -> &'static str {
        match self {
            Bug::SmallRedisPool => "small_redis_pool",
            Bug::RebookCountedAsDuplicate => "rebook_counted_as_duplicate",
            Bug::UnguardedUndo => "unguarded_undo",
            Bug::PaidKeepsTtl => "paid_keeps_ttl",
            Bug::TrustRedirectCancel => "trust_redirect_cancel",
            Bug::UnlatchedStatusWriter => "unlatched_status_writer",
            Bug::StaleHeldNotReplaced => "stale_held_not_replaced",
            Bug::TrustRedirectSuccess => "trust_redirect_success",
            Bug::ReleaseOnUnansweredQuery => "release_on_unanswered_query",
            Bug::TokenGrantPerInstance => "token_grant_per_instance",
            Bug::ExecuteAfterDeadline => "execute_after_deadline",
            Bug::EmailBeforePaid => "email_before_paid",
            Bug::EmailLatchBeforeSend => "email_latch_before_send",
            Bug::NoStalePendingCleanup => "no_stale_pending_cleanup",
            Bug::IgnoreLostRedisConnection => "ignore_lost_redis_connection",
            Bug::RedisWithoutPersistence => "redis_without_persistence",
        }
    }

    /// The bug by its switch's name.
    pub fn parse(name: &str) -> Option<Bug> {
        Bug::ALL.into_iter().find(|b| b.name() == name)
    }
}

impl std::fmt::Display for Bug {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The bugs switched on: none by default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Bugs(BTreeSet<Bug>);

impl Bugs {
    /// No bug: what production runs.
    pub fn none() -> Bugs {
        Bugs::default()
    }

    /// These bugs on.
    pub fn of(bugs: impl IntoIterator<Item = Bug>) -> Bugs {
        Bugs(bugs.into_iter().collect())
    }

    /// Whether `bug` is switched on.
    pub fn on(&self, bug: Bug) -> bool {
        self.0.contains(&bug)
    }

    /// Whether every switch is off.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The switches that are on, in order.
    pub fn iter(&self) -> impl Iterator<Item = Bug> + '_ {
        self.0.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_round_trip_and_are_the_serde_names() {
        for bug in Bug::ALL {
            assert_eq!(Bug::parse(bug.name()), Some(bug));
            assert_eq!(
                serde_json::to_string(&bug).unwrap(),
                format!("\"{}\"", bug.name())
            );
        }
        assert_eq!(Bug::parse("no_such_bug"), None);
        let names: BTreeSet<&str> = Bug::ALL.iter().map(|b| b.name()).collect();
        assert_eq!(names.len(), Bug::ALL.len(), "names are distinct");
    }

    #[test]
    fn switches_are_off_unless_named() {
        assert!(Bugs::none().is_empty());
        assert!(!Bugs::none().on(Bug::PaidKeepsTtl));
        let b: Bugs = serde_json::from_str(r#"["paid_keeps_ttl", "unguarded_undo"]"#).unwrap();
        assert!(b.on(Bug::PaidKeepsTtl) && b.on(Bug::UnguardedUndo));
        assert!(!b.on(Bug::EmailBeforePaid));
        assert_eq!(b, Bugs::of([Bug::UnguardedUndo, Bug::PaidKeepsTtl]));
        assert!(serde_json::from_str::<Bugs>(r#"["made_up"]"#).is_err());
    }

    #[test]
    fn the_process_fleet_switches_have_their_names() {
        // the process-fleet rehearsal rows name them so
        let b: Bugs =
            serde_json::from_str(r#"["no_stale_pending_cleanup", "ignore_lost_redis_connection"]"#)
                .unwrap();
        assert_eq!(
            b,
            Bugs::of([Bug::NoStalePendingCleanup, Bug::IgnoreLostRedisConnection])
        );
        assert_eq!(
            Bug::parse("ignore_lost_redis_connection"),
            Some(Bug::IgnoreLostRedisConnection)
        );
        assert_eq!(
            Bug::parse("no_stale_pending_cleanup"),
            Some(Bug::NoStalePendingCleanup)
        );
    }
}
