//! The launch-rehearsal pipeline as library functions over a built
//! [`Server`]: [`reset`], [`load_candidates`], [`open`], [`close`],
//! [`status`] and [`audit`]. The same steps on the day as in rehearsal; the
//! `/ops/` routes ([`crate::admin`]) and the `booking` CLI call these.
//!
//! # What `reset` clears
//!
//! Everything of the sale, on every stack, so a second rehearsal against
//! the same running deployment starts from an empty, consistent sale:
//!
//! - the ledger: levels and caps from the configuration, no holds, no paid
//!   seats, no candidates, closed;
//! - the records of the sale (`RecordStore::delete_sale`: in batches, each
//!   an application delete whose REMOVE stream record carries no TTL
//!   identity, so the expiry handler, which acts on TTL removals only,
//!   releases no seat into the just-reset ledger; the streams and their
//!   positions stay valid);
//! - the queue and the dead-letter queue (`Queue::purge`: the embedded
//!   queue is the process's, the Redis queue lives under the sale's hash
//!   tag, the SQS queues are the deployment's own, named from its prefix,
//!   as its table and status document are; SQS deletes within 60 s);
//! - the owed emails' retry states (`email-retry:<payment>` in
//!   coordination, of the sale's owed emails);
//! - the output log's mail, alerts and status writes
//!   (`OutputLog::clear_sale`; the audit reads status writes since the
//!   reset anyway, but judges every email of the sale).
//!
//! Then it stamps the reset's time in coordination, where every instance's
//! audit reads it (status writes and the gateway's payments since then),
//! and publishes the status document.
//!
//! A store that holds the sale's state and cannot be cleared makes `reset`
//! refuse ([`OpsError::ResetRefused`]) before the ledger or the records
//! change: a queue without a purge that is not empty (let it drain), or a
//! mail log that is not the stack's own (SMTP maildir or SES read-back)
//! holding the sale's mail. Left on purpose: locks, the token, stream
//! checkpoints, the back office's rows (PostgreSQL, judged by sale and
//! PAID record) and booking copies (they expire a hold after their
//! admission).
//!
//! Reset is for a closed, quiet sale (the load stopped): it closes the sale
//! first, but a request or a worker already under way may still write. A
//! message a worker holds while the queue is purged is gone; the worker's
//! delete then fails as an invalid receipt, and a record it writes after
//! the records were deleted is left (the report's `records_left`, and the
//! next audit, show it): reset again.

use std::collections::BTreeMap;

use booking::StatusDocument;
use booking::ledger::LevelCount;
use booking::queue::{Purged, QueueDepth};
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
    /// `reset` found state of the sale it cannot clear (a queue without a
    /// purge, a mail log it cannot empty): what remains, and what to do.
    #[error("reset refused: {0}")]
    ResetRefused(String),
    /// `reset` of a sale that is open: it would wipe bookings being made.
    #[error(
        "reset refused: sale {0} is open (admissions are being taken); close it first \
         (booking close), then reset"
    )]
    SaleOpen(String),
    /// The back office could not be cleared.
    #[error("back office: {0}")]
    BackOffice(String),
}

/// What `reset` did: what it removed, and what is left (nothing, unless
/// something was written meanwhile: reset a closed, quiet sale).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResetReport {
    /// The sale.
    pub sale: String,
    /// Levels and caps set.
    pub levels: Vec<LevelCount>,
    /// Records of this sale deleted (HELD and PAID).
    #[serde(default)]
    pub records_removed: u64,
    /// Queued messages removed (waiting and in flight).
    #[serde(default)]
    pub messages_removed: u64,
    /// Of those, in flight at a worker when purged.
    #[serde(default)]
    pub in_flight_removed: u64,
    /// Dead letters removed.
    #[serde(default)]
    pub dead_letters_removed: u64,
    /// Owed emails' retry states removed (coordination `email-retry:*`).
    #[serde(default)]
    pub email_retries_removed: u64,
    /// Back-office rows of the sale deleted (with a back office).
    #[serde(default)]
    pub back_office_removed: u64,
    /// Confirmation emails forgotten by the output log.
    #[serde(default)]
    pub mail_removed: u64,
    /// Alerts forgotten by the output log.
    #[serde(default)]
    pub alerts_removed: u64,
    /// Status writes forgotten by the output log's history.
    #[serde(default)]
    pub status_writes_removed: u64,
    /// Records of this sale in the store after the reset.
    pub records_left: usize,
    /// Messages in the queue after the reset (SQS deletes a purged queue's
    /// messages within 60 s, and its counts are approximate).
    pub queue_left: QueueDepth,
    /// Dead letters after the reset.
    pub dead_letters_left: usize,
    /// "clean", or what is left and why.
    pub note: String,
}

/// `reset` logs its progress through the owed emails every this many.
const RESET_PROGRESS_EVERY: usize = 1_000;

/// Resets the sale to a consistent, empty one on every stack: closes it,
/// then clears what cannot be cleared only with a refusal first (the
/// output log's mail, the queue), then the ledger (levels and caps from the
/// configuration, closed, no candidates), the owed emails' retry states,
/// the records (as application deletes: the expiry handler releases no
/// seat for them); stamps the reset's time and publishes the status
/// document. Refuses ([`OpsError::ResetRefused`]) where a store holds the
/// sale's state and cannot be cleared. See the module docs.
pub async fn reset(server: &Server) -> Result<ResetReport, OpsError> {
    let stack = &server.stack;
    // the stores as they are, without an armed instance's injected faults
    let bare = server.bare_stack();
    let sale = &stack.sale;
    if bare.ledger.counters(sale).await?.open {
        return Err(OpsError::SaleOpen(sale.to_string()));
    }
    tracing::info!(%sale, "reset: closing the sale");
    bare.ledger.set_open(sale, false).await?;

    // what may refuse goes first, before the ledger and the records change
    let outputs = match server.outputs.clear_sale(sale).await? {
        Some(cleared) => cleared,
        None => {
            let mail = server
                .outputs
                .sent_mail()
                .await?
                .iter()
                .filter(|c| c.sale == *sale)
                .count();
            if mail > 0 {
                return Err(OpsError::ResetRefused(format!(
                    "the output log holds {mail} confirmation emails of sale {sale} and cannot be \
                     cleared (a mail server's own store): the next audit would find them \
                     without a PAID record. Empty it by hand or use a new sale id; nothing \
                     was cleared (the sale is closed)"
                )));
            }
            booking::notify::OutputsCleared::default()
        }
    };
    tracing::info!(%sale, mail = outputs.mail, alerts = outputs.alerts, status_writes = outputs.status_writes, "reset: outputs cleared");
    let purged = match bare.queue.purge().await? {
        Some(purged) => purged,
        None => {
            let depth = bare.queue.depth().await?;
            let dead = bare.queue.dead_letters().await?.len();
            if depth.visible + depth.in_flight > 0 || dead > 0 {
                return Err(OpsError::ResetRefused(format!(
                    "the queue cannot be purged and still holds {} waiting, {} in flight and \
                     {dead} dead-lettered messages: let the workers drain it (dead letters \
                     by hand) and reset again; the output log was cleared, nothing else \
                     (the sale is closed)",
                    depth.visible, depth.in_flight
                )));
            }
            Purged::default()
        }
    };
    tracing::info!(%sale, visible = purged.visible, in_flight = purged.in_flight, dead_letters = purged.dead_letters, "reset: queue purged");

    stack.ledger.reset(sale, &server.caps()).await?;
    // the owed emails of the sale are the only ones with a retry state
    // (the outbox deletes it after the send that worked)
    let mut email_retries_removed = 0u64;
    let owed = bare.records.owed_emails(u64::MAX, usize::MAX).await?;
    for (i, r) in owed.iter().filter(|r| r.sale == *sale).enumerate() {
        let key = booking::coordination::keys::email_retry(&stack.prefix, sale, &r.payment_id);
        email_retries_removed += u64::from(bare.coordination.delete(&key).await?);
        if (i + 1) % RESET_PROGRESS_EVERY == 0 {
            tracing::info!(%sale, looked_at = i + 1, email_retries_removed, "reset: owed emails' retry states");
        }
    }
    let records_removed = bare.records.delete_sale(sale).await?;
    tracing::info!(%sale, records_removed, email_retries_removed, "reset: records deleted");
    // the back office copies the PAID records: its rows of the sale go with
    // them (a candidate pays once per sale there: UNIQUE (sale, candidate))
    let back_office_removed = match crate::build::back_office(&server.config)
        .await
        .map_err(|e| OpsError::BackOffice(e.to_string()))?
    {
        Some(office) => office
            .delete_sale(sale)
            .await
            .map_err(|e| OpsError::BackOffice(e.to_string()))?,
        None => 0,
    };
    tracing::info!(%sale, back_office_removed, "reset: back office cleared");
    stack
        .coordination
        .set(&server.reset_key(), &stack.clock.now_ms().to_string(), None)
        .await?;
    publish(server).await?;

    let counters = stack.ledger.counters(sale).await?;
    let records_left = sale_records(server).await?.len();
    let queue_left = bare.queue.depth().await?;
    let dead_letters_left = bare.queue.dead_letters().await?.len();
    let note =
        if records_left + dead_letters_left > 0 || queue_left.visible + queue_left.in_flight > 0 {
            "written meanwhile, or (SQS) still being purged: reset a closed, quiet sale, and again \
         if this stays"
        } else {
            "clean"
        };
    let report = ResetReport {
        sale: sale.to_string(),
        levels: counters.levels,
        records_removed,
        messages_removed: purged.visible + purged.in_flight,
        in_flight_removed: purged.in_flight,
        dead_letters_removed: purged.dead_letters,
        email_retries_removed,
        back_office_removed,
        mail_removed: outputs.mail,
        alerts_removed: outputs.alerts,
        status_writes_removed: outputs.status_writes,
        records_left,
        queue_left,
        dead_letters_left,
        note: note.to_owned(),
    };
    tracing::info!(%sale, ?report, "reset done");
    Ok(report)
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
