//! What the event-source mapping does after each invocation, pure: Lambda's
//! rules for a stream, with every bound named.
//!
//! - A handler reports the first record it could not handle (Lambda's
//!   `ReportBatchItemFailures`): everything before it is done, and the
//!   position moves to just before it.
//! - Bisect on error: a failed remainder of more than one record is retried
//!   as its first half. Splitting counts no attempt (as in Lambda), so a
//!   poison record is cornered in about log₂(batch) invocations.
//! - A batch that cannot be split further (one record, or bisect off) is
//!   retried [`RETRY_ATTEMPTS_MAX`] times, then given up on: sent to the
//!   on-failure destination, and the position moves past it.
//! - Records older than [`RECORD_AGE_MAX`] are given up on before any
//!   invocation (they are the oldest, so they are a prefix of the batch).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Records per invocation at most (Lambda's default for DynamoDB streams).
pub const BATCH_SIZE: usize = 100;
/// Invocations of an unsplittable failing batch before it is given up on.
/// Lambda's default is unbounded (until the record leaves the stream); a
/// bound keeps one poison record from stalling a shard for a day.
pub const RETRY_ATTEMPTS_MAX: u32 = 10;
/// Records older than this are given up on unread. DynamoDB keeps 24 hours;
/// a release or a back-office copy an hour late goes to a human instead (the
/// reconciler recovers an unreleased hold without its record anyway).
pub const RECORD_AGE_MAX: Duration = Duration::from_secs(60 * 60);
/// Wait for new records per read (Lambda polls a shard four times a second).
pub const POLL_WAIT: Duration = Duration::from_millis(250);
/// Back-off after the first failure; doubled per attempt up to [`BACKOFF_MAX`].
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// The longest back-off between attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// How one mapping behaves (Lambda's event-source mapping settings).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MappingConfig {
    /// See [`BATCH_SIZE`].
    pub batch_size: usize,
    /// See [`RETRY_ATTEMPTS_MAX`].
    pub retry_attempts_max: u32,
    /// See [`RECORD_AGE_MAX`].
    #[serde(with = "millis")]
    pub record_age_max: Duration,
    /// `BisectBatchOnFunctionError`.
    pub bisect_on_error: bool,
    /// See [`POLL_WAIT`].
    #[serde(with = "millis")]
    pub poll_wait: Duration,
    /// See [`BACKOFF_MIN`].
    #[serde(with = "millis")]
    pub backoff_min: Duration,
    /// See [`BACKOFF_MAX`].
    #[serde(with = "millis")]
    pub backoff_max: Duration,
}

impl Default for MappingConfig {
    fn default() -> MappingConfig {
        MappingConfig {
            batch_size: BATCH_SIZE,
            retry_attempts_max: RETRY_ATTEMPTS_MAX,
            record_age_max: RECORD_AGE_MAX,
            bisect_on_error: true,
            poll_wait: POLL_WAIT,
            backoff_min: BACKOFF_MIN,
            backoff_max: BACKOFF_MAX,
        }
    }
}

impl MappingConfig {
    /// Refuses settings that cannot run.
    pub fn check(&self) -> Result<(), String> {
        if self.batch_size == 0 || self.batch_size > 10_000 {
            return Err(format!("batch_size {} not in 1..=10000", self.batch_size));
        }
        if self.record_age_max.is_zero() {
            return Err("record_age_max must be above zero".into());
        }
        if self.backoff_min > self.backoff_max {
            return Err("backoff_min above backoff_max".into());
        }
        Ok(())
    }

    /// The pause before attempt `attempts` + 1.
    pub fn backoff(&self, attempts: u32) -> Duration {
        let factor = 1u32 << attempts.min(16);
        self.backoff_min
            .saturating_mul(factor)
            .min(self.backoff_max)
    }
}

/// Why records were given up on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiscardReason {
    /// Older than the max record age when read.
    RecordTooOld,
    /// The handler failed them on every allowed attempt.
    RetriesExhausted,
}

/// The step after one invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// The whole batch is done: the position moves to `through`; read on
    /// with a full batch.
    Advance {
        /// The last sequence handled.
        through: u64,
    },
    /// Move the position to `through` (everything before the failed record),
    /// wait, and invoke again with at most `limit` records.
    Retry {
        /// The last sequence handled (the old position if none was).
        through: u64,
        /// Records in the next invocation.
        limit: usize,
        /// Failed attempts at this position so far.
        attempts: u32,
        /// Whether this retry is a bisection.
        bisected: bool,
    },
    /// Give up on the records `first..=last` of the batch: send them to the
    /// on-failure destination, then move the position to `last`.
    Discard {
        /// Handled before the failure (the old position if none was).
        through: u64,
        /// The first record given up on.
        first: u64,
        /// The last record given up on.
        last: u64,
        /// Why.
        reason: DiscardReason,
    },
}

/// How many leading records (by creation time, ms) are older than
/// `record_age_max` at `now_ms`.
pub fn expired_prefix(created_ms: &[u64], now_ms: u64, record_age_max: Duration) -> usize {
    let age_max_ms = record_age_max.as_millis() as u64;
    created_ms
        .iter()
        .take_while(|at| now_ms.saturating_sub(**at) > age_max_ms)
        .count()
}

/// The step after invoking the handler on `batch` (its sequences, in
/// order, never empty) read after `position`, the handler having reported
/// `failed_at`, with `attempts` failures at this position before.
///
/// A reported sequence that is not in the batch is taken as a failure of the
/// whole batch (a handler that names a record it was not given cannot be
/// trusted about the others).
pub fn after_invoke(
    config: &MappingConfig,
    position: u64,
    batch: &[u64],
    failed_at: Option<u64>,
    attempts: u32,
) -> Next {
    let Some(&last) = batch.last() else {
        return Next::Advance { through: position };
    };
    let Some(failed) = failed_at else {
        return Next::Advance { through: last };
    };
    let index = batch.iter().position(|s| *s == failed).unwrap_or(0);
    let through = if index == 0 {
        position
    } else {
        batch[index - 1]
    };
    // progress resets the count: attempts are per position
    let attempts = if index == 0 { attempts } else { 0 };
    let remaining = batch.len() - index;
    if config.bisect_on_error && remaining > 1 {
        return Next::Retry {
            through,
            limit: remaining.div_ceil(2),
            attempts,
            bisected: true,
        };
    }
    let attempts = attempts + 1;
    if attempts > config.retry_attempts_max {
        return Next::Discard {
            through,
            first: batch[index],
            last,
            reason: DiscardReason::RetriesExhausted,
        };
    }
    Next::Retry {
        through,
        limit: remaining,
        attempts,
        bisected: false,
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

    fn config() -> MappingConfig {
        MappingConfig {
            retry_attempts_max: 2,
            ..MappingConfig::default()
        }
    }

    #[test]
    fn a_clean_batch_advances_to_its_last_record() {
        assert_eq!(
            after_invoke(&config(), 4, &[5, 6, 7], None, 0),
            Next::Advance { through: 7 }
        );
    }

    #[test]
    fn a_partial_failure_keeps_what_was_done_and_bisects_the_rest() {
        // 5 and 6 done, 7 failed with 7..=10 left: retry 7 and 8 only
        assert_eq!(
            after_invoke(&config(), 4, &[5, 6, 7, 8, 9, 10], Some(7), 0),
            Next::Retry {
                through: 6,
                limit: 2,
                attempts: 0,
                bisected: true
            }
        );
        // the first failed: nothing done, the position stays
        assert_eq!(
            after_invoke(&config(), 4, &[5, 6, 7], Some(5), 0),
            Next::Retry {
                through: 4,
                limit: 2,
                attempts: 0,
                bisected: true
            }
        );
    }

    #[test]
    fn a_single_failing_record_is_retried_then_given_up_on() {
        let c = config();
        let first = after_invoke(&c, 4, &[5], Some(5), 0);
        assert_eq!(
            first,
            Next::Retry {
                through: 4,
                limit: 1,
                attempts: 1,
                bisected: false
            }
        );
        assert!(matches!(
            after_invoke(&c, 4, &[5], Some(5), 1),
            Next::Retry { attempts: 2, .. }
        ));
        assert_eq!(
            after_invoke(&c, 4, &[5], Some(5), 2),
            Next::Discard {
                through: 4,
                first: 5,
                last: 5,
                reason: DiscardReason::RetriesExhausted
            }
        );
    }

    #[test]
    fn progress_resets_the_attempts() {
        assert!(matches!(
            after_invoke(&config(), 4, &[5, 6], Some(6), 2),
            Next::Retry {
                through: 5,
                attempts: 1,
                ..
            }
        ));
    }

    #[test]
    fn without_bisect_the_whole_remainder_is_retried_and_given_up_on() {
        let c = MappingConfig {
            bisect_on_error: false,
            ..config()
        };
        assert_eq!(
            after_invoke(&c, 0, &[1, 2, 3, 4], Some(2), 0),
            Next::Retry {
                through: 1,
                limit: 3,
                attempts: 1,
                bisected: false
            }
        );
        assert_eq!(
            after_invoke(&c, 1, &[2, 3, 4], Some(2), 2),
            Next::Discard {
                through: 1,
                first: 2,
                last: 4,
                reason: DiscardReason::RetriesExhausted
            }
        );
    }

    #[test]
    fn a_failure_outside_the_batch_fails_all_of_it() {
        assert!(matches!(
            after_invoke(&config(), 4, &[5, 6], Some(99), 0),
            Next::Retry {
                through: 4,
                limit: 1,
                ..
            }
        ));
    }

    #[test]
    fn old_records_are_a_prefix() {
        let hour = Duration::from_secs(3600);
        let now = 10 * 3_600_000;
        let created = [now - 2 * 3_600_000, now - 3_600_001, now - 3_600_000, now];
        assert_eq!(expired_prefix(&created, now, hour), 2);
        assert_eq!(expired_prefix(&[], now, hour), 0);
    }

    #[test]
    fn backoff_doubles_to_its_bound_and_bad_settings_are_refused() {
        let c = MappingConfig::default();
        assert_eq!(c.backoff(0), BACKOFF_MIN);
        assert_eq!(c.backoff(1), BACKOFF_MIN * 2);
        assert_eq!(c.backoff(40), BACKOFF_MAX);
        c.check().unwrap_or_else(|e| panic!("{e}"));
        for bad in [
            MappingConfig {
                batch_size: 0,
                ..MappingConfig::default()
            },
            MappingConfig {
                record_age_max: Duration::ZERO,
                ..MappingConfig::default()
            },
            MappingConfig {
                backoff_min: Duration::from_secs(11),
                ..MappingConfig::default()
            },
        ] {
            assert!(bad.check().is_err());
        }
    }
}
