//! The confirmation email's outbox: what is owed, who sends it, how often it
//! is tried, and when a human is told.
//!
//! **What is owed** is kept by the record store: the conditional HELD→PAID
//! write ([`crate::confirm::mark_paid`]) makes a record PAID with its email
//! not marked sent, so winning the update *is* writing the outbox entry, in
//! the same write. `RecordStore::mark_emailed` takes it out; nothing else
//! does.
//!
//! **Who sends it:** the winner of the update, at once
//! ([`send_confirmation`]); then, for whatever is still owed a sweep interval
//! after the payment (its winner died between the update and the send, its
//! mailer failed, its mark failed), the email sweep ([`send_owed_emails`]),
//! run by one instance at a time (the reconciler's leader), in batches of at
//! most `due_limit`, paced at `Settings::email_send_rate` a second, and
//! marked `recovered`.
//!
//! **How often it is tried** is this module's own state: one coordination
//! key per owed email that failed at least once (`keys::email_retry`: tries
//! so far and when the next is due), written after each failed try and
//! deleted after the send that worked, so a retry's back-off survives a
//! restart and a change of leader. The decisions are pure ([`due`],
//! [`after_failure`], [`backoff`]): the wait after the n-th failure is
//! `email_retry_backoff · 2ⁿ⁻¹`, at most `email_retry_backoff_max`.
//!
//! **When a human is told:** the try that spends `email_attempts_max` raises
//! `email_undeliverable` (once); the sweeps then leave the email owed
//! ([`Due::GivenUp`]), `booking emails pending` lists it with its tries, and
//! `booking emails resend` ([`SweepMode::Forced`]) sends it regardless.
//!
//! A repeat is possible only where a send's outcome was unknown (sent, then
//! the sender died or its mark failed): the next send is a sweep's, marked
//! `recovered`, and the audit allows one repeat per recovered send. Every
//! send of one booking carries the same Message-ID
//! (`Confirmation::message_id`), so a receiver can drop the repeat.

use std::time::Duration;

use booking::coordination::keys;
use booking::notify::{ALERT_EMAIL_FAILED, ALERT_EMAIL_UNDELIVERABLE, Confirmation, NotifyError};
use booking::records::{BookingRecord, RecordError};
use booking::{Bug, PaymentId, SaleId, Settings};

use crate::confirm::{ConfirmPorts, alert};

/// How long a retry state is kept after its last write: far beyond any
/// back-off, so a given-up email stays given up (an expired state only means
/// the sweeps try it again from the start).
pub const RETRY_STATE_TTL: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// The tries of one owed email so far (only written once one failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Retry {
    /// Tries that failed.
    pub attempts: u32,
    /// When the next try is due, ms since the epoch.
    pub next_ms: u64,
}

impl Retry {
    /// Its value in coordination: `attempts:next_ms`.
    pub fn encode(&self) -> String {
        format!("{}:{}", self.attempts, self.next_ms)
    }

    /// Reads [`Retry::encode`]'s value; `None` for anything else.
    pub fn decode(value: &str) -> Option<Retry> {
        let (a, n) = value.split_once(':')?;
        Some(Retry {
            attempts: a.parse().ok()?,
            next_ms: n.parse().ok()?,
        })
    }
}

/// What a sweep does with one owed email (pure: [`due`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Send it now.
    Now,
    /// Its last try failed; the next is due at `at_ms`.
    Waiting {
        /// When, ms since the epoch.
        at_ms: u64,
    },
    /// Its tries are spent (a human was alerted): only a forced resend sends it.
    GivenUp {
        /// Tries made.
        attempts: u32,
    },
}

/// Whether the email sweep sends an owed email with `retry` at `now_ms`.
pub fn due(retry: Option<Retry>, now_ms: u64, settings: &Settings) -> Due {
    match retry {
        None => Due::Now,
        Some(r) if r.attempts >= settings.email_attempts_max => Due::GivenUp {
            attempts: r.attempts,
        },
        Some(r) if now_ms < r.next_ms => Due::Waiting { at_ms: r.next_ms },
        Some(_) => Due::Now,
    }
}

/// The wait after the `failures`-th failed try (≥ 1):
/// `email_retry_backoff · 2^(failures − 1)`, at most `email_retry_backoff_max`.
pub fn backoff(failures: u32, settings: &Settings) -> Duration {
    let doublings = failures.saturating_sub(1).min(31);
    settings
        .email_retry_backoff
        .saturating_mul(1 << doublings)
        .min(settings.email_retry_backoff_max)
}

/// The state after a failed try at `now_ms`, and whether this try spent the
/// budget (the one that raises the alert).
pub fn after_failure(retry: Option<Retry>, now_ms: u64, settings: &Settings) -> (Retry, bool) {
    let attempts = retry.map_or(0, |r| r.attempts).saturating_add(1);
    let wait = backoff(attempts, settings).as_millis() as u64;
    (
        Retry {
            attempts,
            next_ms: now_ms.saturating_add(wait),
        },
        attempts == settings.email_attempts_max,
    )
}

/// The retry state of `payment`'s email, if one of its tries failed. A
/// coordination store that cannot answer reads as none (the email is tried:
/// a try too many beats an email held back).
pub async fn load(ports: ConfirmPorts<'_>, sale: &SaleId, payment: &PaymentId) -> Option<Retry> {
    let key = keys::email_retry(ports.prefix, sale, payment);
    match ports.coordination.get(&key).await {
        Ok(value) => value.as_deref().and_then(Retry::decode),
        Err(e) => {
            tracing::warn!(%payment, error = %e, "email retry state unreadable: trying the email");
            None
        }
    }
}

/// What happened to the confirmation email.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EmailOutcome {
    /// Sent and marked sent.
    Sent,
    /// Sent; the mark found it marked by another sender already (the email
    /// sweep): a repeat the audit allows for a recovered send.
    AlreadySent,
    /// Sent; marking it failed: still owed, the email sweep sends it again.
    LatchFailed(RecordError),
    /// The mailer failed: nothing sent, the email stays owed and the email
    /// sweep retries it after its back-off.
    SendFailed(NotifyError),
}

/// The winner's email: the send, then the record's mark (`mark_emailed`),
/// so an email is never lost: a sender that dies before the mark leaves the
/// record PAID with its email owed, and the email sweep
/// ([`send_owed_emails`]) sends it. Only the winner of a HELD→PAID step
/// may call it.
pub async fn send_confirmation(
    ports: ConfirmPorts<'_>,
    record: &BookingRecord,
    trx_id: Option<String>,
    now_ms: u64,
) -> EmailOutcome {
    send_and_mark(ports, record, trx_id, false, None, now_ms).await
}

/// One try: send, then mark; a failed send is written down ([`after_failure`])
/// and alerted, the try that spends the budget as `email_undeliverable`.
/// `recovered`: a sweep's send; `retry`: the state before this try (`None`
/// when no try failed yet).
async fn send_and_mark(
    ports: ConfirmPorts<'_>,
    record: &BookingRecord,
    trx_id: Option<String>,
    recovered: bool,
    retry: Option<Retry>,
    now_ms: u64,
) -> EmailOutcome {
    let confirmation = Confirmation::of(record, trx_id, recovered);
    if ports.settings.bugs.on(Bug::EmailLatchBeforeSend) {
        // the zoo's trap: the old order, the mark before the send; a send
        // that fails now loses the email (nothing owes it any more)
        let marked = mark_sent(ports, record).await;
        if let Err(e) = ports.mailer.send(&confirmation).await {
            tracing::error!(candidate = %record.candidate, error = %e,
                "email marked sent, then its send failed: lost");
            return EmailOutcome::SendFailed(e);
        }
        return marked;
    }
    if let Err(e) = ports.mailer.send(&confirmation).await {
        note_failure(ports, record, retry, now_ms, &e).await;
        return EmailOutcome::SendFailed(e);
    }
    let outcome = mark_sent(ports, record).await;
    if retry.is_some() && matches!(outcome, EmailOutcome::Sent | EmailOutcome::AlreadySent) {
        let key = keys::email_retry(ports.prefix, &record.sale, &record.payment_id);
        if let Err(e) = ports.coordination.delete(&key).await {
            // harmless: the email is owed no more, the state only expires
            tracing::warn!(payment = %record.payment_id, error = %e, "email retry state not deleted");
        }
    }
    outcome
}

/// Writes down a failed try and alerts: every failure as `email_failed`
/// (the sweep retries it), the one that spends the budget as
/// `email_undeliverable` (the sweeps stop; a human resends).
async fn note_failure(
    ports: ConfirmPorts<'_>,
    record: &BookingRecord,
    retry: Option<Retry>,
    now_ms: u64,
    error: &NotifyError,
) {
    let (next, spent) = after_failure(retry, now_ms, ports.settings);
    let key = keys::email_retry(ports.prefix, &record.sale, &record.payment_id);
    if let Err(e) = ports
        .coordination
        .set(&key, &next.encode(), Some(RETRY_STATE_TTL))
        .await
    {
        // the sweep then tries it at its next pass: sooner, never lost
        tracing::warn!(payment = %record.payment_id, error = %e, "email retry state not written");
    }
    let (kind, detail) = if spent {
        (
            ALERT_EMAIL_UNDELIVERABLE,
            format!(
                "confirmation email failed {} times, the last with {error}: it stays owed; \
                 `booking emails resend` sends it",
                next.attempts
            ),
        )
    } else {
        (
            ALERT_EMAIL_FAILED,
            format!(
                "confirmation email failed (try {} of {}; owed: the email sweep retries it in {:?}): {error}",
                next.attempts,
                ports.settings.email_attempts_max,
                backoff(next.attempts, ports.settings)
            ),
        )
    };
    alert(
        ports.alerts,
        kind,
        detail,
        &record.candidate,
        &record.payment_id,
    )
    .await;
}

/// Marks a sent email sent: the record owes it no more.
pub(crate) async fn mark_sent(ports: ConfirmPorts<'_>, record: &BookingRecord) -> EmailOutcome {
    match ports
        .records
        .mark_emailed(&record.candidate, &record.payment_id)
        .await
    {
        Ok(_) => EmailOutcome::Sent,
        Err(RecordError::ConditionFailed { .. }) => EmailOutcome::AlreadySent,
        Err(e) => {
            tracing::error!(candidate = %record.candidate, error = %e,
                "email sent, marking it failed: the email sweep sends it again");
            EmailOutcome::LatchFailed(e)
        }
    }
}

/// What one email sweep did (also `booking emails resend`'s answer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OwedSweep {
    /// Owed emails found.
    pub owed: u64,
    /// Sent and marked.
    pub sent: u64,
    /// Not sent (the mailer failed) or not marked: still owed.
    pub failed: u64,
    /// Left for later: their back-off after a failed try is still running.
    #[serde(default)]
    pub waiting: u64,
    /// Left owed: their tries are spent (alerted; a forced resend sends them).
    #[serde(default)]
    pub given_up: u64,
    /// Left for the next sweep: sending them at the named rate would have
    /// run past the sweep's end.
    #[serde(default)]
    pub deferred: u64,
}

/// Which owed emails a sweep sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepMode {
    /// The email sweep's: those [`due`] now.
    Scheduled,
    /// `booking emails resend`: every one, back-off and spent budget or not.
    Forced,
}

/// The paid-before bound of an email sweep run at `now_ms`: a sweep
/// interval back, so a winner still sending is left alone (the reconciler's
/// sweep and `booking emails resend` alike).
pub fn owed_paid_before(now_ms: u64, settings: &Settings) -> u64 {
    now_ms.saturating_sub(settings.sweep_interval.as_millis() as u64)
}

/// The email sweep: every PAID record of `sale` whose email is still owed
/// although it was paid before `paid_before_ms` (its winner died, or its
/// mailer failed, or its mark failed), at most `limit`, gets its email,
/// marked `recovered` (the winner may have sent it before dying: an outcome
/// nobody can know), then its mark: those [`due`] now ([`SweepMode::Scheduled`])
/// or all of them ([`SweepMode::Forced`]). Sends are paced at
/// `email_send_rate` a second, and none starts after `until` (the rest is
/// `deferred` to the next sweep). Run by one instance at a time (the
/// reconciler's leader), with `paid_before_ms` a grace behind now, so a
/// winner still sending is left alone. `clock_ms` reads now for each send.
pub async fn send_owed_emails(
    ports: ConfirmPorts<'_>,
    sale: &SaleId,
    paid_before_ms: u64,
    limit: usize,
    mode: SweepMode,
    until: tokio::time::Instant,
    clock_ms: &(dyn Fn() -> u64 + Send + Sync),
) -> Result<OwedSweep, RecordError> {
    let mut owed = ports.records.owed_emails(paid_before_ms, limit).await?;
    owed.retain(|r| r.sale == *sale);
    let mut sweep = OwedSweep {
        owed: owed.len() as u64,
        ..OwedSweep::default()
    };
    let pace = Duration::from_secs(1) / ports.settings.email_send_rate.max(1);
    let mut next_send = tokio::time::Instant::now();
    for (i, record) in owed.iter().enumerate() {
        if next_send > until {
            sweep.deferred = (owed.len() - i) as u64;
            tracing::warn!(
                deferred = sweep.deferred,
                "email sweep out of time at its rate: the rest waits"
            );
            break;
        }
        // the store refuses to mark a record that breaks its invariants (a
        // PAID record with a TTL): sending would repeat every sweep, so a
        // human looks instead
        if let Err(why) = record.check() {
            alert(
                ports.alerts,
                "email_owed_on_broken_record",
                format!("email owed on a record the store cannot mark: {why}"),
                &record.candidate,
                &record.payment_id,
            )
            .await;
            sweep.failed += 1;
            continue;
        }
        let retry = load(ports, sale, &record.payment_id).await;
        let now_ms = clock_ms();
        if mode == SweepMode::Scheduled {
            match due(retry, now_ms, ports.settings) {
                Due::Now => {}
                Due::Waiting { .. } => {
                    sweep.waiting += 1;
                    continue;
                }
                Due::GivenUp { .. } => {
                    sweep.given_up += 1;
                    continue;
                }
            }
        }
        tokio::time::sleep_until(next_send).await;
        next_send = tokio::time::Instant::now() + pace;
        tracing::warn!(candidate = %record.candidate, payment = %record.payment_id,
            tries_before = retry.map_or(0, |r| r.attempts), "PAID with its email owed: sending it");
        match send_and_mark(ports, record, None, true, retry, clock_ms()).await {
            EmailOutcome::Sent | EmailOutcome::AlreadySent => sweep.sent += 1,
            EmailOutcome::LatchFailed(_) | EmailOutcome::SendFailed(_) => sweep.failed += 1,
        }
    }
    Ok(sweep)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn settings() -> Settings {
        Settings::default()
    }

    #[test]
    fn the_back_off_doubles_from_the_first_wait_up_to_the_maximum() {
        let s = settings();
        let secs: Vec<u64> = (1..=8).map(|n| backoff(n, &s).as_secs()).collect();
        assert_eq!(secs, [20, 40, 80, 160, 300, 300, 300, 300]);
        assert_eq!(backoff(u32::MAX, &s), s.email_retry_backoff_max);
    }

    #[test]
    fn each_failure_counts_a_try_and_only_the_one_that_spends_the_budget_alerts() {
        let s = settings();
        let mut retry = None;
        let mut now = 1_000_000;
        let mut spent_at = Vec::new();
        for n in 1..=10u32 {
            let (next, spent) = after_failure(retry, now, &s);
            assert_eq!(next.attempts, n);
            assert_eq!(next.next_ms, now + backoff(n, &s).as_millis() as u64);
            if spent {
                spent_at.push(n);
            }
            retry = Some(next);
            now = next.next_ms;
        }
        assert_eq!(spent_at, [s.email_attempts_max]);
    }

    #[test]
    fn an_email_is_due_at_once_then_after_its_back_off_until_its_tries_are_spent() {
        let s = settings();
        assert_eq!(due(None, 5, &s), Due::Now);
        let waiting = Retry {
            attempts: 2,
            next_ms: 100,
        };
        assert_eq!(due(Some(waiting), 99, &s), Due::Waiting { at_ms: 100 });
        assert_eq!(due(Some(waiting), 100, &s), Due::Now);
        let spent = Retry {
            attempts: s.email_attempts_max,
            next_ms: 0,
        };
        assert_eq!(
            due(Some(spent), u64::MAX, &s),
            Due::GivenUp {
                attempts: s.email_attempts_max
            }
        );
        let one_left = Retry {
            attempts: s.email_attempts_max - 1,
            next_ms: 0,
        };
        assert_eq!(due(Some(one_left), 1, &s), Due::Now);
    }

    #[test]
    fn the_state_reads_back_what_was_written_and_nothing_else() {
        let r = Retry {
            attempts: 3,
            next_ms: 1_733_000_000_123,
        };
        assert_eq!(Retry::decode(&r.encode()), Some(r));
        for bad in ["", "3", "3:", ":5", "x:5", "3:y", "-1:5"] {
            assert_eq!(Retry::decode(bad), None, "{bad:?}");
        }
    }
}
