//! The launch-rehearsal pipeline as library functions over a built
//! [`Server`]: [`reset`], [`load_candidates`], [`open`], [`close`],
//! [`status`] and [`audit`]. The same steps on the day as in rehearsal; the
//! `/ops/` routes ([`crate::admin`]) and the `booking` CLI call these.
//!
//! # What `reset` does not clear
//!
//! The ledger is reset (levels, caps, no candidates, closed) and the reset's
//! time is stamped in coordination, where every instance's audit reads it.
//! The record store, queue, outbox, alert log and status history have no
//! clear operation in their ports (nor do DynamoDB, SQS and SES), so `reset`
//! leaves them and reports what is left ([`ResetReport`]). The audit only
//! looks at this sale's records and at status writes since the last reset;
//! a clean slate for a rehearsal is a new key prefix (Redis) or a restart
//! of the embedded server.

use std::collections::BTreeMap;

use booking::StatusDocument;
use booking::ledger::LevelCount;
use booking::queue::QueueDepth;
use booking::records::{BookingRecord, RecordStatus, Throttles};
use booking::status::{Publish, StatusError};
use booking::{
    CandidateHash, CoordinationError, Counters, LedgerError, Level, NotifyError, QueueError,
    RecordError,
};
pub use booking_audit::{GatewayTruth, Verdict};
use booking_service::outbox::{self, OwedSweep};
use serde::{Deserialize, Serialize};

use crate::audit_snapshot::{self, current_document, sale_records};
use crate::build::Server;

/// Candidates marked eligible per ledger call.
pub const LOAD_BATCH: usize = 1_000;

/// Why an ops step failed.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// The ledger could not answer.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The record store could not answer.
    #[error(transparent)]
    Records(#[from] RecordError),
    /// The queue could not answer.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// The status document could not be published.
    #[error(transparent)]
    Status(#[from] StatusError),
    /// The outputs (mail, alerts, status writes) could not be read back.
    #[error(transparent)]
    Outputs(#[from] NotifyError),
    /// Coordination (the reset's time) could not answer.
    #[error(transparent)]
    Coordination(#[from] CoordinationError),
}

/// What `reset` did, and what it could not clear.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResetReport {
    /// The sale.
    pub sale: String,
    /// Levels and caps set.
    pub levels: Vec<LevelCount>,
    /// Records of this sale still in the store (no clear in the port).
    pub records_left: usize,
    /// Messages still in the queue.
    pub queue_left: QueueDepth,
    /// Dead letters still in the dead-letter queue.
    pub dead_letters_left: usize,
    /// Why those are left.
    pub note: String,
}

/// Resets the sale: levels and caps from the configuration, closed, no
/// candidates; publishes the status document. See the module docs for what
/// is not cleared.
pub async fn reset(server: &Server) -> Result<ResetReport, OpsError> {
    let stack = &server.stack;
    stack.ledger.reset(&stack.sale, &server.caps()).await?;
    stack
        .coordination
        .set(&server.reset_key(), &stack.clock.now_ms().to_string(), None)
        .await?;
    publish(server).await?;
    let counters = stack.ledger.counters(&stack.sale).await?;
    let records_left = sale_records(server).await?.len();
    let queue_left = stack.queue.depth().await?;
    let dead_letters_left = stack.queue.dead_letters().await?.len();
    let note = if records_left + dead_letters_left > 0
        || queue_left.visible + queue_left.in_flight > 0
    {
        "records, queue and outbox have no clear operation: use a new key prefix (redis) or restart the embedded server for a clean slate"
    } else {
        "clean"
    };
    Ok(ResetReport {
        sale: stack.sale.to_string(),
        levels: counters.levels,
        records_left,
        queue_left,
        dead_letters_left,
        note: note.to_owned(),
    })
}

/// What `load-candidates` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadReport {
    /// Candidates read (blank lines and `#` comments skipped).
    pub read: u64,
    /// Of those, newly eligible.
    pub added: u64,
    /// Ledger calls made.
    pub batches: u64,
}

impl std::ops::AddAssign for LoadReport {
    /// Two requests' reports as one (a long list goes in several).
    fn add_assign(&mut self, other: LoadReport) {
        self.read += other.read;
        self.added += other.added;
        self.batches += other.batches;
    }
}

/// The largest `/ops/load-candidates` body the server takes. A longer list
/// goes in several requests ([`load_request_bodies`]): the article's 40,000
/// hashes are 2.6 MB as text, 4 million are 260 MB.
pub const LOAD_BODY_BYTES_MAX: usize = 2 * 1024 * 1024;

/// A candidate list as `/ops/load-candidates` bodies, in order: text, one
/// entry per line, each body at most [`LOAD_BODY_BYTES_MAX`] bytes. An entry
/// that alone is longer than that (no candidate is) is an error.
pub fn load_request_bodies<I, S>(list: I) -> Result<Vec<String>, String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut bodies = Vec::new();
    let mut body = String::new();
    for entry in list {
        let entry = entry.as_ref();
        if entry.contains('\n') {
            return Err(format!("a candidate entry holds a line break: {entry:?}"));
        }
        if entry.len() + 1 > LOAD_BODY_BYTES_MAX {
            return Err(format!(
                "a candidate entry of {} bytes is longer than a whole request may be",
                entry.len()
            ));
        }
        if body.len() + entry.len() + 1 > LOAD_BODY_BYTES_MAX {
            bodies.push(std::mem::take(&mut body));
        }
        body.push_str(entry);
        body.push('\n');
    }
    if !body.is_empty() {
        bodies.push(body);
    }
    Ok(bodies)
}

/// Owed emails listed by `emails pending` at most.
pub const EMAILS_LISTED_MAX: usize = 1_000;

/// A confirmation email still owed: a PAID booking whose email was never
/// marked sent (its sender died, its mailer failed, or its mark failed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwedEmail {
    /// Who paid.
    pub candidate: String,
    /// The payment.
    pub payment_id: String,
    /// The seat's level.
    pub level: String,
    /// When it was paid, ms since the epoch.
    pub paid_ms: Option<u64>,
    /// How long ago, ms (by this instance's clock).
    pub owed_for_ms: u64,
    /// Tries that failed so far (the outbox's retry state).
    #[serde(default)]
    pub tries_failed: u32,
    /// When the email sweep tries it next, ms since the epoch (after a
    /// failed try).
    #[serde(default)]
    pub next_try_ms: Option<u64>,
    /// Its tries are spent: the sweeps leave it (alerted as
    /// `email_undeliverable`); `emails resend` sends it.
    #[serde(default)]
    pub given_up: bool,
}

/// What `emails pending` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmailsPending {
    /// The owed emails, oldest paid first, at most [`EMAILS_LISTED_MAX`].
    pub owed: Vec<OwedEmail>,
    /// More are owed than listed.
    pub truncated: bool,
}

/// `emails pending`: every PAID booking of the sale whose email is owed,
/// oldest paid first.
pub async fn emails_pending(server: &Server) -> Result<EmailsPending, OpsError> {
    let stack = &server.stack;
    let now = stack.clock.now_ms();
    let mut owed = stack
        .records
        .owed_emails(now.saturating_add(1), EMAILS_LISTED_MAX + 1)
        .await?;
    owed.retain(|r| r.sale == stack.sale);
    let truncated = owed.len() > EMAILS_LISTED_MAX;
    owed.truncate(EMAILS_LISTED_MAX);
    let mut listed = Vec::with_capacity(owed.len());
    for r in owed {
        let retry = outbox::load(stack.confirm_ports(), &stack.sale, &r.payment_id).await;
        let given_up = matches!(
            outbox::due(retry, now, &stack.settings),
            outbox::Due::GivenUp { .. }
        );
        listed.push(OwedEmail {
            candidate: r.candidate.to_string(),
            payment_id: r.payment_id.to_string(),
            level: r.level.to_string(),
            paid_ms: r.paid_ms,
            owed_for_ms: r.paid_ms.map_or(0, |p| now.saturating_sub(p)),
            tries_failed: retry.map_or(0, |r| r.attempts),
            next_try_ms: retry.filter(|_| !given_up).map(|r| r.next_ms),
            given_up,
        });
    }
    Ok(EmailsPending {
        owed: listed,
        truncated,
    })
}

/// `emails resend`: the email sweep, now and forced, over every owed email
/// paid before [`outbox::owed_paid_before`] (a winner still sending is left
/// alone, as the reconciler's sweep leaves it), at most
/// [`EMAILS_LISTED_MAX`], its back-off running or its tries spent
/// (`SweepMode::Forced`), paced at the named rate for at most a sweep's
/// budget (the rest answered as `deferred`); each sent as recovered (its Message-ID lets a
/// receiver drop a repeat).
pub async fn emails_resend(server: &Server) -> Result<OwedSweep, OpsError> {
    let stack = &server.stack;
    let before = outbox::owed_paid_before(stack.clock.now_ms(), &stack.settings);
    let clock = stack.clock.clone();
    Ok(outbox::send_owed_emails(
        stack.confirm_ports(),
        &stack.sale,
        before,
        EMAILS_LISTED_MAX,
        outbox::SweepMode::Forced,
        tokio::time::Instant::now() + stack.settings.sweep_budget,
        &move || clock.now_ms(),
    )
    .await?)
}

/// A list entry as a candidate: 64 hex digits are taken as the hash already
/// computed, anything else as a raw identifier to hash. Blank and `#` lines
/// are `None`.
pub fn candidate_of(entry: &str) -> Option<CandidateHash> {
    let entry = entry.trim();
    if entry.is_empty() || entry.starts_with('#') {
        return None;
    }
    Some(CandidateHash::parse(entry).unwrap_or_else(|_| CandidateHash::of(entry)))
}

/// Marks candidates eligible, [`LOAD_BATCH`] per ledger call.
pub async fn load_candidates<I, S>(server: &Server, list: I) -> Result<LoadReport, OpsError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let stack = &server.stack;
    let mut report = LoadReport::default();
    let mut batch = Vec::with_capacity(LOAD_BATCH);
    for entry in list {
        if let Some(c) = candidate_of(entry.as_ref()) {
            report.read += 1;
            batch.push(c);
        }
        if batch.len() == LOAD_BATCH {
            report.added += stack.ledger.load_candidates(&stack.sale, &batch).await?;
            report.batches += 1;
            batch.clear();
        }
    }
    if !batch.is_empty() {
        report.added += stack.ledger.load_candidates(&stack.sale, &batch).await?;
        report.batches += 1;
    }
    Ok(report)
}

/// Opens admissions and publishes the document.
pub async fn open(server: &Server) -> Result<StatusReport, OpsError> {
    set_open(server, true).await
}

/// Closes admissions and publishes the document.
pub async fn close(server: &Server) -> Result<StatusReport, OpsError> {
    set_open(server, false).await
}

async fn set_open(server: &Server, open: bool) -> Result<StatusReport, OpsError> {
    let stack = &server.stack;
    stack.ledger.set_open(&stack.sale, open).await?;
    // the transitions (closed latch set or cleared) first, then a write
    server.status.poke().await?;
    status(server).await
}

async fn publish(server: &Server) -> Result<Publish, OpsError> {
    Ok(server.status.publish().await?)
}

/// Record counts of one level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordCounts {
    /// HELD records.
    pub held: u64,
    /// PAID records.
    pub paid: u64,
    /// PAID records whose confirmation email is still owed (the email
    /// sweep sends it).
    #[serde(default)]
    pub emails_owed: u64,
}

/// The sale now.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusReport {
    /// The ledger's counters.
    pub counters: Counters,
    /// The document as just published.
    pub document: Option<StatusDocument>,
    /// Records per level.
    pub records: BTreeMap<Level, RecordCounts>,
    /// The queue.
    pub queue: QueueDepth,
    /// Dead letters.
    pub dead_letters: usize,
    /// Throttled record-store requests.
    pub throttles: Throttles,
    /// Confirmation emails sent.
    pub emails: usize,
    /// Alerts raised.
    pub alerts: usize,
}

/// Publishes the status document and reports the counters beside it.
pub async fn status(server: &Server) -> Result<StatusReport, OpsError> {
    let stack = &server.stack;
    publish(server).await?;
    let counters = stack.ledger.counters(&stack.sale).await?;
    let records = sale_records(server).await?;
    Ok(StatusReport {
        counters,
        document: current_document(server).await?,
        records: per_level(&records),
        queue: stack.queue.depth().await?,
        dead_letters: stack.queue.dead_letters().await?.len(),
        throttles: stack.records.throttles().await?,
        emails: server.outputs.sent_mail().await?.len(),
        alerts: server.outputs.alerts_raised().await?.len(),
    })
}

fn per_level(records: &[BookingRecord]) -> BTreeMap<Level, RecordCounts> {
    let mut m: BTreeMap<Level, RecordCounts> = BTreeMap::new();
    for r in records {
        let e = m.entry(r.level.clone()).or_default();
        match r.status {
            RecordStatus::Held => e.held += 1,
            RecordStatus::Paid => {
                e.paid += 1;
                e.emails_owed += u64::from(!r.email_sent);
            }
        }
    }
    m
}

/// What the audit found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuditReport {
    /// The sale.
    pub sale: String,
    /// Whether every invariant held.
    pub passed: bool,
    /// Each invariant.
    pub invariants: Vec<Verdict>,
}

impl AuditReport {
    /// The invariant called `name`.
    pub fn get(&self, name: &str) -> Option<&Verdict> {
        self.invariants.iter().find(|i| i.name == name)
    }
}

/// Proves, after a run has gone quiet, that the invariants held: gathers
/// the sale from the ports ([`audit_snapshot::gather`]), with `gateway`'s
/// truth when given (the mock's `/__mock/ledger`), and judges it with
/// [`booking_audit::audit`], whose module `invariants` lists every
/// invariant. A deployment's audit is not *settled* (holds may be live) and
/// reads no alerts, so it runs `admissions_within_cap`, `queue_drained`,
/// `ledger_matches_records`, `one_booking_per_candidate`, `no_throttling`,
/// `dead_letter_queue_empty`, `one_email_per_paid`,
/// `status_matches_counters`, `status_never_showed_full_level_open`,
/// `status_writes_in_read_order`, on the AWS stack with a back office
/// `paid_in_back_office`, and with the gateway's truth
/// `gateway_completed_have_paid_booking`,
/// `paid_bookings_completed_at_gateway`, `one_token_grant` and
/// `no_payment_executed_after_deadline`.
pub async fn audit(
    server: &Server,
    gateway: Option<&GatewayTruth>,
) -> Result<AuditReport, OpsError> {
    let snapshot = audit_snapshot::gather(server, gateway).await?;
    let invariants = booking_audit::audit(&snapshot);
    Ok(AuditReport {
        sale: snapshot.sale.to_string(),
        passed: invariants.iter().all(|i| i.passed),
        invariants,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_long_list_goes_in_bodies_under_the_limit_in_order() {
        let list: Vec<String> = (0..70_000)
            .map(|i| CandidateHash::of(&format!("c{i}")).as_str().to_owned())
            .collect();
        let bodies = load_request_bodies(&list).unwrap();
        assert_eq!(bodies.len(), 3, "70,000 × 65 bytes in 2 MiB bodies");
        assert!(bodies.iter().all(|b| b.len() <= LOAD_BODY_BYTES_MAX));
        let back: Vec<&str> = bodies.iter().flat_map(|b| b.lines()).collect();
        assert_eq!(back, list.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(
            load_request_bodies(Vec::<String>::new())
                .unwrap()
                .is_empty()
        );
        assert!(load_request_bodies(["a\nb"]).is_err(), "a line break");
        let long = "x".repeat(LOAD_BODY_BYTES_MAX);
        assert!(
            load_request_bodies([long.as_str()]).is_err(),
            "longer than a body"
        );
        let fits = "x".repeat(LOAD_BODY_BYTES_MAX - 1);
        assert_eq!(load_request_bodies([fits.as_str(), "y"]).unwrap().len(), 2);
    }

    #[test]
    fn load_reports_add_up() {
        let mut a = LoadReport {
            read: 3,
            added: 2,
            batches: 1,
        };
        a += LoadReport {
            read: 5,
            added: 4,
            batches: 2,
        };
        assert_eq!(
            a,
            LoadReport {
                read: 8,
                added: 6,
                batches: 3
            }
        );
    }

    #[test]
    fn list_entries_are_hashes_or_raw_ids() {
        let h = CandidateHash::of("alice");
        assert_eq!(candidate_of(h.as_str()), Some(h.clone()));
        assert_eq!(candidate_of(&h.as_str().to_uppercase()), Some(h.clone()));
        assert_eq!(candidate_of("  alice \n"), Some(h));
        assert_eq!(candidate_of(""), None);
        assert_eq!(candidate_of("# comment"), None);
    }
}
