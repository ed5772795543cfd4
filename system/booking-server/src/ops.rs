//! The launch-rehearsal pipeline as library functions over a built
//! [`Server`]: [`reset`], [`load_candidates`], [`open`], [`close`],
//! [`status`] and [`audit`]. The same steps on the day as in rehearsal; the
//! `/ops/` routes ([`crate::admin`]) and the `booking` CLI call these.
//!
//! # What `reset` does not clear
//!
//! The ledger is reset (levels, caps, no candidates, closed). The embedded
//! record store, queue, outbox, alert log and status history have no clear
//! operation in their ports (nor do DynamoDB, SQS and SES), so `reset` leaves
//! them and reports what is left ([`ResetReport`]). The audit only looks at
//! this sale's records and at status writes since the last reset; a clean
//! slate for a rehearsal is a restart of the embedded server.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

use booking::StatusDocument;
use booking::ledger::LevelCount;
use booking::queue::QueueDepth;
use booking::records::{BookingRecord, RecordStatus, Throttles};
use booking::status::{Publish, StatusError};
use booking::{CandidateHash, Counters, HoldState, LedgerError, Level, QueueError, RecordError};
use serde::{Deserialize, Serialize};

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
    server
        .reset_at_ms
        .store(stack.clock.now_ms(), Ordering::SeqCst);
    publish(server).await?;
    let counters = stack.ledger.counters(&stack.sale).await?;
    let records_left = sale_records(server).await?.len();
    let queue_left = stack.queue.depth().await?;
    let dead_letters_left = stack.queue.dead_letters().await?.len();
    let note = if records_left + dead_letters_left > 0
        || queue_left.visible + queue_left.in_flight > 0
    {
        "records, queue and outbox have no clear operation: restart the embedded server for a clean slate"
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
        document: current_document(server),
        records: per_level(&records),
        queue: stack.queue.depth().await?,
        dead_letters: stack.queue.dead_letters().await?.len(),
        throttles: stack.records.throttles().await?,
        emails: server.embedded.mailer.sent().len(),
        alerts: server.embedded.alerts.raised().len(),
    })
}

fn current_document(server: &Server) -> Option<StatusDocument> {
    server
        .embedded
        .sink
        .current()
        .and_then(|b| StatusDocument::from_json(&b).ok())
}

async fn sale_records(server: &Server) -> Result<Vec<BookingRecord>, OpsError> {
    let sale = &server.stack.sale;
    Ok(server
        .stack
        .records
        .scan_all()
        .await?
        .into_iter()
        .filter(|r| &r.sale == sale)
        .collect())
}

fn per_level(records: &[BookingRecord]) -> BTreeMap<Level, RecordCounts> {
    let mut m: BTreeMap<Level, RecordCounts> = BTreeMap::new();
    for r in records {
        let e = m.entry(r.level.clone()).or_default();
        match r.status {
            RecordStatus::Held => e.held += 1,
            RecordStatus::Paid => e.paid += 1,
        }
    }
    m
}

/// One audited invariant: `passed` iff `figure <= threshold`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invariant {
    /// What is checked.
    pub name: String,
    /// Whether it held.
    pub passed: bool,
    /// The measured figure (a count of violations unless said otherwise).
    pub figure: u64,
    /// The largest acceptable figure.
    pub threshold: u64,
    /// The first violations, for a human.
    pub detail: String,
}

impl Invariant {
    fn at_most(name: &str, figure: u64, threshold: u64, details: &[String]) -> Invariant {
        Invariant {
            name: name.to_owned(),
            passed: figure <= threshold,
            figure,
            threshold,
            detail: details
                .iter()
                .take(DETAILS_MAX)
                .cloned()
                .collect::<Vec<_>>()
                .join("; "),
        }
    }
}

/// Violations quoted per invariant at most.
pub const DETAILS_MAX: usize = 10;

/// What the audit found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuditReport {
    /// The sale.
    pub sale: String,
    /// Whether every invariant held.
    pub passed: bool,
    /// Each invariant.
    pub invariants: Vec<Invariant>,
}

impl AuditReport {
    /// The invariant called `name`.
    pub fn get(&self, name: &str) -> Option<&Invariant> {
        self.invariants.iter().find(|i| i.name == name)
    }
}

/// Proves, after a run has gone quiet, that the invariants held:
///
/// - `admissions_within_cap`: no level counted more seats than its cap
///   (figure: seats over cap);
/// - `queue_drained`: no admission waits in the queue or is in flight (the
///   run is quiet, so the next comparison is meaningful);
/// - `ledger_matches_records`: per level, the ledger's count equals HELD +
///   PAID records (figure: sum of the differences);
/// - `one_booking_per_candidate`: every record agrees with the ledger's hold
///   or paid mark of its candidate (same level and payment), and no
///   candidate was emailed for two payments (the store keys records by
///   candidate, so a second live booking shows as a disagreement);
/// - `no_throttling`: the record store reported no throttled request;
/// - `dead_letter_queue_empty`;
/// - `one_email_per_paid`: every PAID record has exactly one confirmation,
///   and no confirmation is for a booking that is not PAID;
/// - `status_matches_counters`: the current document says what the counters
///   say (open flag, cap and taken per level);
/// - `status_never_showed_full_level_open`: no document written since the
///   last reset showed a full level (or a closed sale) as open;
/// - `status_writes_in_read_order`: no document written since the last reset
///   was built from an older read than one written before it (an older
///   read landing last can show a level that has filled as open);
/// - on the AWS stack with a back office: `paid_in_back_office`, every PAID
///   record (and nothing else) in PostgreSQL as the table has it;
/// - with `gateway_ledger` (the mock's `/__mock/ledger`):
///   `gateway_completed_have_paid_booking`,
///   `paid_bookings_completed_at_gateway` and
///   `no_payment_executed_after_deadline` ([`executed_after_deadline`]).
pub async fn audit(
    server: &Server,
    gateway_ledger: Option<&serde_json::Value>,
) -> Result<AuditReport, OpsError> {
    let stack = &server.stack;
    let sale = &stack.sale;
    let counters = stack.ledger.counters(sale).await?;
    let records = sale_records(server).await?;
    let mut invariants = Vec::new();

    // admissions never above cap
    let over: Vec<String> = counters
        .levels
        .iter()
        .filter(|l| l.count > l.cap)
        .map(|l| format!("{}: {} of {}", l.level, l.count, l.cap))
        .collect();
    let over_by: u64 = counters
        .levels
        .iter()
        .map(|l| u64::from(l.count.saturating_sub(l.cap)))
        .sum();
    invariants.push(Invariant::at_most(
        "admissions_within_cap",
        over_by,
        0,
        &over,
    ));

    // quiescence
    let depth = stack.queue.depth().await?;
    invariants.push(Invariant::at_most(
        "queue_drained",
        depth.visible + depth.in_flight,
        0,
        &[format!(
            "{} visible, {} in flight",
            depth.visible, depth.in_flight
        )],
    ));

    // ledger == records
    let by_level = per_level(&records);
    let mut diff = 0u64;
    let mut diffs = Vec::new();
    let mut levels: BTreeSet<&Level> = counters.levels.iter().map(|l| &l.level).collect();
    levels.extend(by_level.keys());
    for level in levels {
        let counted = counters
            .levels
            .iter()
            .find(|l| &l.level == level)
            .map_or(0, |l| u64::from(l.count));
        let r = by_level.get(level).copied().unwrap_or_default();
        let stored = r.held + r.paid;
        if counted != stored {
            diff += counted.abs_diff(stored);
            diffs.push(format!(
                "{level}: ledger {counted}, records {} held + {} paid",
                r.held, r.paid
            ));
        }
    }
    invariants.push(Invariant::at_most(
        "ledger_matches_records",
        diff,
        0,
        &diffs,
    ));

    // one booking per candidate
    let mut doubles = Vec::new();
    for r in &records {
        let ledger_payment = match stack.ledger.paid(sale, &r.candidate).await? {
            Some(p) => Some(p),
            None => match stack.ledger.hold(sale, &r.candidate).await? {
                Some(h) if h.level == r.level => match h.state {
                    HoldState::Held { payment_id, .. } => Some(payment_id),
                    HoldState::Pending { .. } => None,
                },
                _ => None,
            },
        };
        if ledger_payment.as_ref() != Some(&r.payment_id) {
            doubles.push(format!(
                "{}: record {} {:?}, ledger {:?}",
                r.candidate, r.payment_id, r.status, ledger_payment
            ));
        }
    }
    let mut emailed: BTreeMap<&CandidateHash, BTreeSet<&booking::PaymentId>> = BTreeMap::new();
    let sent = server.embedded.mailer.sent();
    for c in sent.iter().filter(|c| &c.sale == sale) {
        emailed
            .entry(&c.candidate)
            .or_default()
            .insert(&c.payment_id);
    }
    for (candidate, payments) in &emailed {
        if payments.len() > 1 {
            doubles.push(format!(
                "{candidate}: emailed for {} payments",
                payments.len()
            ));
        }
    }
    invariants.push(Invariant::at_most(
        "one_booking_per_candidate",
        doubles.len() as u64,
        0,
        &doubles,
    ));

    // throttling
    let throttles = stack.records.throttles().await?;
    invariants.push(Invariant::at_most(
        "no_throttling",
        throttles.total(),
        0,
        &[format!(
            "{} reads, {} writes throttled",
            throttles.reads, throttles.writes
        )],
    ));

    // dead letters
    let dead = stack.queue.dead_letters().await?;
    let dead_groups: Vec<String> = dead
        .iter()
        .map(|m| format!("group {} dedup {}", m.group_id, m.deduplication_id))
        .collect();
    invariants.push(Invariant::at_most(
        "dead_letter_queue_empty",
        dead.len() as u64,
        0,
        &dead_groups,
    ));

    // one email per PAID
    let mut email_problems = Vec::new();
    let paid: Vec<&BookingRecord> = records
        .iter()
        .filter(|r| r.status == RecordStatus::Paid)
        .collect();
    let mut per_payment: BTreeMap<&booking::PaymentId, usize> = BTreeMap::new();
    for c in sent.iter().filter(|c| &c.sale == sale) {
        *per_payment.entry(&c.payment_id).or_default() += 1;
    }
    for r in &paid {
        let n = per_payment.get(&r.payment_id).copied().unwrap_or(0);
        if n != 1 {
            email_problems.push(format!("{} ({}): {n} emails", r.payment_id, r.candidate));
        }
    }
    let paid_payments: BTreeSet<&booking::PaymentId> = paid.iter().map(|r| &r.payment_id).collect();
    for (p, n) in &per_payment {
        if !paid_payments.contains(p) {
            email_problems.push(format!("{p}: {n} emails, no PAID record"));
        }
    }
    invariants.push(Invariant::at_most(
        "one_email_per_paid",
        email_problems.len() as u64,
        0,
        &email_problems,
    ));

    // the status document
    let mut status_problems = Vec::new();
    match current_document(server) {
        None => status_problems.push("no status document".to_owned()),
        Some(doc) => {
            if &doc.sale != sale {
                status_problems.push(format!("document of sale {}", doc.sale));
            }
            if doc.open != counters.open {
                status_problems.push(format!(
                    "document open={}, ledger open={}",
                    doc.open, counters.open
                ));
            }
            for l in &counters.levels {
                match doc.level(&l.level) {
                    Some(d) if d.cap == l.cap && d.taken == l.count => {}
                    Some(d) => status_problems.push(format!(
                        "{}: document {}/{}, ledger {}/{}",
                        l.level, d.taken, d.cap, l.count, l.cap
                    )),
                    None => status_problems.push(format!("{}: not in the document", l.level)),
                }
            }
            if doc.levels.len() != counters.levels.len() {
                status_problems.push(format!(
                    "document has {} levels, ledger {}",
                    doc.levels.len(),
                    counters.levels.len()
                ));
            }
        }
    }
    invariants.push(Invariant::at_most(
        "status_matches_counters",
        status_problems.len() as u64,
        0,
        &status_problems,
    ));
    let since = server.reset_at_ms.load(Ordering::SeqCst);
    let mut unreadable = Vec::new();
    let mut landed = Vec::new();
    for w in server.embedded.sink.writes() {
        if w.at_ms < since {
            continue;
        }
        match StatusDocument::from_json(&w.document) {
            Ok(doc) if &doc.sale == sale => landed.push((w.at_ms, doc)),
            Ok(_) => {}
            Err(_) => unreadable.push(format!("unreadable document at {}", w.at_ms)),
        }
    }
    let (mut shown_open, unordered) = booking::status::landed_problems(&landed);
    shown_open.extend(unreadable);
    invariants.push(Invariant::at_most(
        "status_never_showed_full_level_open",
        shown_open.len() as u64,
        0,
        &shown_open,
    ));
    invariants.push(Invariant::at_most(
        "status_writes_in_read_order",
        unordered.len() as u64,
        0,
        &unordered,
    ));

    if server.config.stack.kind == crate::config::StackKind::Aws
        && server.config.stack.aws.postgres_url.is_some()
    {
        let problems = back_office_problems(server, &paid).await;
        invariants.push(Invariant::at_most(
            "paid_in_back_office",
            problems.len() as u64,
            0,
            &problems,
        ));
    }

    if let Some(ledger) = gateway_ledger {
        let completed = completed_payments(ledger);
        let paid_ids: BTreeSet<&str> = paid.iter().map(|r| r.payment_id.as_str()).collect();
        let missing: Vec<String> = completed
            .iter()
            .filter(|p| !paid_ids.contains(p.as_str()))
            .map(|p| format!("{p}: completed, no PAID booking"))
            .collect();
        invariants.push(Invariant::at_most(
            "gateway_completed_have_paid_booking",
            missing.len() as u64,
            0,
            &missing,
        ));
        let unpaid: Vec<String> = paid
            .iter()
            .filter(|r| !completed.contains(r.payment_id.as_str()))
            .map(|r| format!("{}: PAID, not completed at the gateway", r.payment_id))
            .collect();
        invariants.push(Invariant::at_most(
            "paid_bookings_completed_at_gateway",
            unpaid.len() as u64,
            0,
            &unpaid,
        ));
        let regrants: Vec<String> = token_grants(ledger)
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .map(|(app_key, n)| format!("app key {app_key}: {n} grants in the window"))
            .collect();
        invariants.push(Invariant::at_most(
            "one_token_grant",
            regrants.len() as u64,
            0,
            &regrants,
        ));
        let hold_ms = stack.settings.hold.as_millis() as u64;
        let late = executed_after_deadline(ledger, &records, hold_ms);
        invariants.push(Invariant::at_most(
            "no_payment_executed_after_deadline",
            late.len() as u64,
            0,
            &late,
        ));
    }

    Ok(AuditReport {
        sale: sale.to_string(),
        passed: invariants.iter().all(|i| i.passed),
        invariants,
    })
}

/// How long the audit gives the sync handler to catch up with the table
/// (the copy is eventually consistent: a stream poll behind).
pub const BACK_OFFICE_SETTLE: std::time::Duration = std::time::Duration::from_secs(10);

/// How the back office differs from the PAID records (empty: it holds each,
/// as the table has it, and nothing else), once the stream has had
/// [`BACK_OFFICE_SETTLE`] to catch up.
async fn back_office_problems(server: &Server, paid: &[&BookingRecord]) -> Vec<String> {
    let office = match crate::build::back_office(&server.config).await {
        Ok(Some(o)) => o,
        Ok(None) => return vec!["no back office configured".into()],
        Err(e) => return vec![format!("back office unreachable: {e}")],
    };
    let started = std::time::Instant::now();
    loop {
        let problems = match office.paid(&server.stack.sale).await {
            Err(e) => vec![format!("back office unreadable: {e}")],
            Ok(rows) => back_office_diff(paid, &rows),
        };
        if problems.is_empty() || started.elapsed() >= BACK_OFFICE_SETTLE {
            return problems;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// The differences between PAID records and back-office rows (pure).
pub fn back_office_diff(
    paid: &[&BookingRecord],
    rows: &[booking_postgres::PaidRow],
) -> Vec<String> {
    let by_payment: BTreeMap<&str, &booking_postgres::PaidRow> =
        rows.iter().map(|r| (r.payment_id.as_str(), r)).collect();
    let mut problems = Vec::new();
    for r in paid {
        let path = r.paid_by.map(|p| match p {
            booking::ConfirmPath::Callback => "callback",
            booking::ConfirmPath::Webhook => "webhook",
            booking::ConfirmPath::Reconciler => "reconciler",
        });
        match by_payment.get(r.payment_id.as_str()) {
            None => problems.push(format!("{}: PAID, not in the back office", r.payment_id)),
            Some(row)
                if row.candidate != r.candidate.as_str()
                    || row.level != r.level.as_str()
                    || Some(row.paid_by.as_str()) != path
                    || row.email_sent != r.email_sent =>
            {
                problems.push(format!(
                    "{}: back office differs from the record",
                    r.payment_id
                ));
            }
            Some(_) => {}
        }
    }
    let paid_ids: BTreeSet<&str> = paid.iter().map(|r| r.payment_id.as_str()).collect();
    for row in rows {
        if !paid_ids.contains(row.payment_id.as_str()) {
            problems.push(format!(
                "{}: in the back office, no PAID record",
                row.payment_id
            ));
        }
    }
    problems
}

/// How much later than the hold deadline the gateway may stamp an execute
/// that the API sent before it: the call's own travel and queueing time.
pub const EXECUTE_STAMP_SLACK_MS: u64 = 250;

/// Payments the gateway's ledger says were executed (completed) after their
/// hold deadline, plus [`EXECUTE_STAMP_SLACK_MS`]. The deadline is the
/// booking record's (extensions included); a payment whose record is gone
/// (released) is held to its creation time plus one hold, which is never
/// earlier than its real deadline (the payment is created after the
/// admission).
pub fn executed_after_deadline(
    ledger: &serde_json::Value,
    records: &[BookingRecord],
    hold_ms: u64,
) -> Vec<String> {
    let by_payment: BTreeMap<&str, &BookingRecord> =
        records.iter().map(|r| (r.payment_id.as_str(), r)).collect();
    let ms = |v: Option<&serde_json::Value>| {
        v.and_then(|s| s.as_str())
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
            .and_then(|t| u64::try_from(t.timestamp_millis()).ok())
    };
    let Some(payments) = ledger.get("payments").and_then(|p| p.as_array()) else {
        return Vec::new();
    };
    let mut late = Vec::new();
    for p in payments {
        let (Some(id), Some(executed_ms)) = (
            p.get("paymentID").and_then(|s| s.as_str()),
            ms(p.get("executedAt")),
        ) else {
            continue;
        };
        let deadline_ms = match by_payment.get(id) {
            Some(r) => r.deadline_ms,
            None => match ms(p.get("createdAt")) {
                Some(created_ms) => created_ms.saturating_add(hold_ms),
                None => continue,
            },
        };
        if executed_ms > deadline_ms.saturating_add(EXECUTE_STAMP_SLACK_MS) {
            late.push(format!(
                "{id}: executed {} ms after its deadline",
                executed_ms - deadline_ms
            ));
        }
    }
    late
}

/// The IDs of the payments the gateway's ledger says completed
/// (`payments[].state == "Completed"`).
/// Token grants per app key in the gateway's rolling window, from its
/// ledger: the fleet shares one token, so a sale needs one grant (refreshes
/// spend none).
pub fn token_grants(ledger: &serde_json::Value) -> Vec<(String, u64)> {
    ledger
        .get("grants_in_window")
        .and_then(|g| g.as_object())
        .map(|g| {
            g.iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default()
}

pub fn completed_payments(ledger: &serde_json::Value) -> BTreeSet<String> {
    ledger
        .get("payments")
        .and_then(|p| p.as_array())
        .map(|payments| {
            payments
                .iter()
                .filter(|p| p.get("state").and_then(|s| s.as_str()) == Some("Completed"))
                .filter_map(|p| p.get("paymentID").and_then(|s| s.as_str()))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn list_entries_are_hashes_or_raw_ids() {
        let h = CandidateHash::of("alice");
        assert_eq!(candidate_of(h.as_str()), Some(h.clone()));
        assert_eq!(candidate_of(&h.as_str().to_uppercase()), Some(h.clone()));
        assert_eq!(candidate_of("  alice \n"), Some(h));
        assert_eq!(candidate_of(""), None);
        assert_eq!(candidate_of("# comment"), None);
    }

    #[test]
    fn the_back_office_must_hold_every_paid_record_and_nothing_else() {
        let r = BookingRecord::held(
            CandidateHash::of("a"),
            booking::SaleId::parse("s").unwrap(),
            booking::Level::parse("l").unwrap(),
            booking::PaymentId::parse("P1").unwrap(),
            1,
            2,
        )
        .into_paid(booking::ConfirmPath::Webhook, 3);
        let row = booking_postgres::PaidRow {
            payment_id: "P1".into(),
            sale: "s".into(),
            candidate: r.candidate.to_string(),
            level: "l".into(),
            paid_ms: 3,
            paid_by: "webhook".into(),
            email_sent: false,
        };
        assert!(back_office_diff(&[&r], std::slice::from_ref(&row)).is_empty());
        assert_eq!(back_office_diff(&[&r], &[]).len(), 1);
        let stray = booking_postgres::PaidRow {
            payment_id: "P9".into(),
            ..row.clone()
        };
        assert_eq!(back_office_diff(&[&r], &[row.clone(), stray]).len(), 1);
        let emailed = BookingRecord {
            email_sent: true,
            ..r.clone()
        };
        assert_eq!(
            back_office_diff(&[&emailed], &[row]).len(),
            1,
            "the email flag too"
        );
    }

    #[test]
    fn token_grants_are_read_from_the_mock_ledger() {
        let v = serde_json::json!({"grants_in_window": {"app": 2, "other": 1}});
        assert_eq!(
            token_grants(&v),
            vec![("app".to_owned(), 2), ("other".to_owned(), 1)]
        );
        assert!(token_grants(&serde_json::json!({})).is_empty());
    }

    #[test]
    fn completed_payments_are_read_from_the_mock_ledger() {
        let v = serde_json::json!({"payments": [
            {"paymentID": "a", "state": "Completed"},
            {"paymentID": "b", "state": "Initiated"},
        ]});
        assert_eq!(
            completed_payments(&v).into_iter().collect::<Vec<_>>(),
            vec!["a".to_owned()]
        );
        assert!(completed_payments(&serde_json::json!({})).is_empty());
    }

    #[test]
    fn executes_after_the_deadline_are_found_with_or_without_a_record() {
        let sale = booking::SaleId::parse("s").unwrap();
        let record = |p: &str, deadline_ms: u64| BookingRecord {
            candidate: CandidateHash::of(p),
            sale: sale.clone(),
            level: booking::Level::parse("a").unwrap(),
            payment_id: booking::PaymentId::parse(p).unwrap(),
            status: RecordStatus::Paid,
            deadline_ms,
            expires_at_s: None,
            created_ms: 0,
            paid_ms: None,
            paid_by: None,
            extensions: 0,
            query_failures: 0,
            email_sent: true,
        };
        // 2026-01-01T00:00:10Z = 1767225610000 ms
        let t10 = 1_767_225_610_000u64;
        let v = serde_json::json!({"payments": [
            // on time: executed at the deadline's slack edge
            {"paymentID": "ok", "createdAt": "2026-01-01T00:00:00Z", "executedAt": "2026-01-01T00:00:10.250Z"},
            // late against its record
            {"paymentID": "late", "createdAt": "2026-01-01T00:00:00Z", "executedAt": "2026-01-01T00:00:10.251Z"},
            // no record (released): held to created + hold = 00:00:05
            {"paymentID": "gone", "createdAt": "2026-01-01T00:00:00Z", "executedAt": "2026-01-01T00:00:06Z"},
            // never executed
            {"paymentID": "open", "createdAt": "2026-01-01T00:00:00Z", "executedAt": null},
        ]});
        let records = [record("ok", t10), record("late", t10)];
        let late = executed_after_deadline(&v, &records, 5_000);
        assert_eq!(late.len(), 2, "{late:?}");
        assert!(late[0].starts_with("late: executed 251 ms"), "{late:?}");
        assert!(late[1].starts_with("gone: executed 1000 ms"), "{late:?}");
        // a longer hold makes the released one on time
        assert_eq!(executed_after_deadline(&v, &records, 6_000).len(), 1);
    }
}
