//! Every invariant of a sale, one function each over a [`SaleSnapshot`],
//! and [`audit`], which runs each that applies.
//!
//! An invariant applies when the snapshot carries what it reads (a `None`
//! part was not read); those marked *settled* apply only to a sale that is
//! over with every hold decided ([`SaleSnapshot::settled`]: the
//! virtual-time sale at quiescence), those marked *live* only to one that
//! may still hold seats (a deployment's audit: `booking audit`,
//! `/ops/audit`, the rehearsal). Each passes at a figure of 0.
//!
//! | name | reads | passes when | figure |
//! |---|---|---|---|
//! | `admissions_within_cap` (the sim: `within_caps`) | levels | no level counts more seats than its cap | seats over cap, summed |
//! | `count_is_paid` | levels, records; *settled* | each level counts exactly its PAID records | levels off |
//! | `queue_drained` | queue | no admission waits in the queue or is in flight (the audit is meaningful) | messages |
//! | `ledger_matches_records` | levels, records; ledger marks when *settled* | *live*: per level, the ledger's count equals its HELD + PAID records; *settled*: the ledger's paid marks are exactly the PAID records (same candidate, same payment) and no seat is held any more | *live*: the differences summed; *settled*: violations |
//! | `one_booking_per_candidate` | records, ledger marks, emails, gateway | no candidate has two bookings: *live*, every record agrees with its candidate's ledger mark (its paid mark, or its held hold at the record's level, is the record's payment: the store keys records by candidate, so a second live booking shows as a disagreement); no candidate was emailed for two payments; no candidate completed two payments at the gateway (where the gateway names the payer) | violations |
//! | `no_throttling` | throttles | the record store reported no throttled request | throttled requests |
//! | `dead_letter_queue_empty` | dead letters | no admission was given up on | dead letters |
//! | `one_email_per_paid` | records, emails | every PAID booking has at least one confirmation, and repeats only by the email sweep: one per send it recovered (the send before had an outcome nobody knew: the server took it and its answer was lost, or the mark failed); no payment that is not PAID has any | violations |
//! | `status_matches_counters` | the current status document | it says what the counters say: sale, open flag, cap and taken per level | violations |
//! | `status_never_showed_full_level_open` | landed documents | no document landed showing a full level (or a closed sale) open, and none was unreadable | violations |
//! | `status_writes_in_read_order` | landed documents | no document was built from an older read of the counters than one that landed before it (an older read landing last can show a level that has filled as open) | violations |
//! | `paid_in_back_office` | back office | every PAID record, and nothing else, is in PostgreSQL as the table has it | violations |
//! | `gateway_completed_have_paid_booking` (the sim: `completed_is_paid`) | gateway, records | every payment the gateway completed is a PAID booking (of the same candidate, where the gateway names the payer): no paid booking is lost | violations |
//! | `paid_bookings_completed_at_gateway` | gateway, records | every PAID booking's payment completed at the gateway: nothing is PAID without the money | violations |
//! | `one_token_grant` | gateway's grants | no app key was granted a token twice in the gateway's window: the fleet shares one | app keys |
//! | `no_payment_executed_after_deadline` | gateway, records, hold | no payment was executed after its hold's deadline (the record's, extensions included; a released one's: creation + one hold) plus [`EXECUTE_STAMP_SLACK_MS`] | violations |
//! | `no_paid_after_release` | alerts | no `paid_after_release` alert: no money moved for a released seat | alerts |
//! | `no_held_left` | records; *settled* | no HELD record is left | records |
//!
//! The virtual-time sale reports some under the names it always has
//! ([`SIM_NAMES`]).
//!
//! # Checked elsewhere
//!
//! Some verdicts need what a snapshot of the end state cannot hold; they
//! live with what they read, and return [`Verdict`]s too:
//!
//! | names | what they read | where |
//! |---|---|---|
//! | `rush_rate`, `booking_p99_ms`, `queue_age_max_ms`, `server_error_pct`, `at_cap_when_demand_exceeded`, `never_above_cap_during_run`, `sale_settled`, `approved_payers_told_paid` | the rehearsal's measurements (load, peaks, the settle phase, payers) | `scenarios/src/thresholds.rs` |
//! | `counter_bounds`, `unique_ids`, `total_queue`, `no_paid_released` | the sim's history of operations | `chaos/src/history.rs` |
//! | `confirm_paths_mark_paid`, `handled_bookings_have_their_record` | the sim's history and its confirm paths | `chaos/src/sim/checks.rs` |

use std::collections::{BTreeMap, BTreeSet};

use booking::records::{BookingRecord, RecordStatus};
use booking::{CandidateHash, HoldState, Level, PaymentId};

use crate::gateway::GatewayTruth;
use crate::snapshot::{BackOfficeRow, SaleSnapshot};
use crate::verdict::{COUNT, Verdict, quote};

/// `admissions_within_cap`.
pub const ADMISSIONS_WITHIN_CAP: &str = "admissions_within_cap";
/// `count_is_paid`.
pub const COUNT_IS_PAID: &str = "count_is_paid";
/// `queue_drained`.
pub const QUEUE_DRAINED: &str = "queue_drained";
/// `ledger_matches_records`.
pub const LEDGER_MATCHES_RECORDS: &str = "ledger_matches_records";
/// `one_booking_per_candidate`.
pub const ONE_BOOKING_PER_CANDIDATE: &str = "one_booking_per_candidate";
/// `no_throttling`.
pub const NO_THROTTLING: &str = "no_throttling";
/// `dead_letter_queue_empty`.
pub const DEAD_LETTER_QUEUE_EMPTY: &str = "dead_letter_queue_empty";
/// `one_email_per_paid`.
pub const ONE_EMAIL_PER_PAID: &str = "one_email_per_paid";
/// `status_matches_counters`.
pub const STATUS_MATCHES_COUNTERS: &str = "status_matches_counters";
/// `status_never_showed_full_level_open`.
pub const STATUS_NEVER_SHOWED_FULL_LEVEL_OPEN: &str = "status_never_showed_full_level_open";
/// `status_writes_in_read_order`.
pub const STATUS_WRITES_IN_READ_ORDER: &str = "status_writes_in_read_order";
/// `paid_in_back_office`.
pub const PAID_IN_BACK_OFFICE: &str = "paid_in_back_office";
/// `gateway_completed_have_paid_booking`.
pub const GATEWAY_COMPLETED_HAVE_PAID_BOOKING: &str = "gateway_completed_have_paid_booking";
/// `paid_bookings_completed_at_gateway`.
pub const PAID_BOOKINGS_COMPLETED_AT_GATEWAY: &str = "paid_bookings_completed_at_gateway";
/// `one_token_grant`.
pub const ONE_TOKEN_GRANT: &str = "one_token_grant";
/// `no_payment_executed_after_deadline`.
pub const NO_PAYMENT_EXECUTED_AFTER_DEADLINE: &str = "no_payment_executed_after_deadline";
/// `no_paid_after_release`.
pub const NO_PAID_AFTER_RELEASE: &str = "no_paid_after_release";
/// `no_held_left`.
pub const NO_HELD_LEFT: &str = "no_held_left";

/// The names the virtual-time sale reports two invariants under, kept from
/// before they were one audit: `(the audit's name, the sim's name)`.
pub const SIM_NAMES: [(&str, &str); 2] = [
    (ADMISSIONS_WITHIN_CAP, "within_caps"),
    (GATEWAY_COMPLETED_HAVE_PAID_BOOKING, "completed_is_paid"),
];

/// How much later than the hold deadline the gateway may stamp an execute
/// that the API sent before it: the call's own travel and queueing time.
pub const EXECUTE_STAMP_SLACK_MS: u64 = 250;

/// Every invariant that applies to `s` (see the module's table), in the
/// table's order.
pub fn audit(s: &SaleSnapshot) -> Vec<Verdict> {
    let all: [fn(&SaleSnapshot) -> Option<Verdict>; 18] = [
        |s| Some(admissions_within_cap(s)),
        |s| s.settled.then(|| count_is_paid(s)),
        |s| s.queue.is_some().then(|| queue_drained(s)),
        |s| Some(ledger_matches_records(s)),
        |s| Some(one_booking_per_candidate(s)),
        |s| s.throttles.is_some().then(|| no_throttling(s)),
        |s| s.dead_letters.is_some().then(|| dead_letter_queue_empty(s)),
        |s| Some(one_email_per_paid(s)),
        |s| s.status.is_some().then(|| status_matches_counters(s)),
        |s| {
            s.landed
                .is_some()
                .then(|| status_never_showed_full_level_open(s))
        },
        |s| s.landed.is_some().then(|| status_writes_in_read_order(s)),
        |s| s.back_office.is_some().then(|| paid_in_back_office(s)),
        |s| {
            s.gateway
                .is_some()
                .then(|| gateway_completed_have_paid_booking(s))
        },
        |s| {
            s.gateway
                .is_some()
                .then(|| paid_bookings_completed_at_gateway(s))
        },
        |s| {
            s.gateway
                .as_ref()
                .is_some_and(|g| g.grants_in_window.is_some())
                .then(|| one_token_grant(s))
        },
        |s| {
            s.gateway
                .is_some()
                .then(|| no_payment_executed_after_deadline(s))
        },
        |s| s.alerts.is_some().then(|| no_paid_after_release(s)),
        |s| s.settled.then(|| no_held_left(s)),
    ];
    all.iter().filter_map(|check| check(s)).collect()
}

fn short(c: &CandidateHash) -> &str {
    c.as_str().get(..12).unwrap_or(c.as_str())
}

fn paid_records(s: &SaleSnapshot) -> Vec<&BookingRecord> {
    s.paid().collect()
}

/// `admissions_within_cap`: no level counts more seats than its cap.
pub fn admissions_within_cap(s: &SaleSnapshot) -> Verdict {
    let over: Vec<String> = s
        .levels
        .iter()
        .filter(|l| l.count > l.cap)
        .map(|l| format!("{}: {} of {}", l.level, l.count, l.cap))
        .collect();
    let over_by: u64 = s
        .levels
        .iter()
        .map(|l| u64::from(l.count.saturating_sub(l.cap)))
        .sum();
    Verdict::at_most(
        ADMISSIONS_WITHIN_CAP,
        over_by as f64,
        0.0,
        COUNT,
        with_checked(&format!("{} levels", s.levels.len()), &over),
    )
}

/// `count_is_paid` (settled): each level counts exactly its PAID records.
pub fn count_is_paid(s: &SaleSnapshot) -> Verdict {
    let paid = paid_records(s);
    let mut by_level: BTreeMap<&Level, u32> = BTreeMap::new();
    for r in &paid {
        *by_level.entry(&r.level).or_default() += 1;
    }
    let drift: Vec<String> = s
        .levels
        .iter()
        .filter_map(|l| {
            let p = by_level.get(&l.level).copied().unwrap_or(0);
            (p != l.count).then(|| format!("{}: counted {}, PAID {p}", l.level, l.count))
        })
        .collect();
    Verdict::none_of(
        COUNT_IS_PAID,
        &format!("{} PAID bookings", paid.len()),
        &drift,
    )
}

/// `queue_drained`: nothing waits in the queue or is in flight.
pub fn queue_drained(s: &SaleSnapshot) -> Verdict {
    let depth = s.queue.unwrap_or_default();
    Verdict::at_most(
        QUEUE_DRAINED,
        (depth.visible + depth.in_flight) as f64,
        0.0,
        COUNT,
        format!("{} visible, {} in flight", depth.visible, depth.in_flight),
    )
}

/// `ledger_matches_records`: live, per level the count equals HELD + PAID
/// records (figure: the differences summed); settled, the paid marks are
/// exactly the PAID records and no seat is held (figure: violations).
pub fn ledger_matches_records(s: &SaleSnapshot) -> Verdict {
    if s.settled {
        return ledger_marks_match_paid_records(s);
    }
    let mut per_level: BTreeMap<&Level, (u64, u64)> = BTreeMap::new();
    for r in &s.records {
        let e = per_level.entry(&r.level).or_default();
        match r.status {
            RecordStatus::Held => e.0 += 1,
            RecordStatus::Paid => e.1 += 1,
        }
    }
    let mut levels: BTreeSet<&Level> = s.levels.iter().map(|l| &l.level).collect();
    levels.extend(per_level.keys());
    let mut diff = 0u64;
    let mut diffs = Vec::new();
    for level in levels {
        let counted = s
            .levels
            .iter()
            .find(|l| &l.level == level)
            .map_or(0, |l| u64::from(l.count));
        let (held, paid) = per_level.get(level).copied().unwrap_or_default();
        if counted != held + paid {
            diff += counted.abs_diff(held + paid);
            diffs.push(format!(
                "{level}: ledger {counted}, records {held} held + {paid} paid"
            ));
        }
    }
    Verdict::at_most(
        LEDGER_MATCHES_RECORDS,
        diff as f64,
        0.0,
        COUNT,
        with_checked(&format!("{} records", s.records.len()), &diffs),
    )
}

fn ledger_marks_match_paid_records(s: &SaleSnapshot) -> Verdict {
    let empty = BTreeMap::new();
    let marks = s.ledger_marks.as_ref().unwrap_or(&empty);
    let records_paid: BTreeMap<&CandidateHash, &PaymentId> =
        s.paid().map(|r| (&r.candidate, &r.payment_id)).collect();
    let mut mismatch = Vec::new();
    for (c, p) in marks
        .iter()
        .filter_map(|(c, m)| Some((c, m.paid.as_ref()?)))
    {
        if records_paid.get(c) != Some(&p) {
            mismatch.push(format!(
                "{} paid {p} in the ledger, record {:?}",
                short(c),
                records_paid.get(c)
            ));
        }
    }
    for (c, p) in &records_paid {
        if marks.get(*c).and_then(|m| m.paid.as_ref()).is_none() {
            mismatch.push(format!("{} PAID {p} with no paid mark", short(c)));
        }
    }
    for (c, _) in marks.iter().filter(|(_, m)| m.hold.is_some()) {
        mismatch.push(format!("{} still holds a seat", short(c)));
    }
    let paid_marks = marks.values().filter(|m| m.paid.is_some()).count();
    Verdict::none_of(
        LEDGER_MATCHES_RECORDS,
        &format!("{paid_marks} paid marks"),
        &mismatch,
    )
}

/// `one_booking_per_candidate`: no candidate has two bookings (live, every
/// record agrees with its candidate's ledger mark; nobody emailed for two
/// payments; nobody completed two payments at the gateway).
pub fn one_booking_per_candidate(s: &SaleSnapshot) -> Verdict {
    let mut doubles = Vec::new();
    if let (false, Some(marks)) = (s.settled, &s.ledger_marks) {
        for r in &s.records {
            let mark = marks.get(&r.candidate);
            let ledger_payment = match mark.and_then(|m| m.paid.as_ref()) {
                Some(p) => Some(p),
                None => match mark.and_then(|m| m.hold.as_ref()) {
                    Some(h) if h.level == r.level => match &h.state {
                        HoldState::Held { payment_id, .. } => Some(payment_id),
                        HoldState::Pending { .. } => None,
                    },
                    _ => None,
                },
            };
            if ledger_payment != Some(&r.payment_id) {
                doubles.push(format!(
                    "{}: record {} {:?}, ledger {:?}",
                    r.candidate, r.payment_id, r.status, ledger_payment
                ));
            }
        }
    }
    let mut emailed: BTreeMap<&CandidateHash, BTreeSet<&PaymentId>> = BTreeMap::new();
    for c in s.emails.iter().filter(|c| c.sale == s.sale) {
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
    let mut completed_by: BTreeMap<&CandidateHash, BTreeSet<&str>> = BTreeMap::new();
    if let Some(g) = &s.gateway {
        for p in g.completed() {
            if let Some(c) = &p.candidate {
                completed_by
                    .entry(c)
                    .or_default()
                    .insert(p.payment_id.as_str());
            }
        }
    }
    for (c, ps) in &completed_by {
        if ps.len() > 1 {
            doubles.push(format!("{} paid {} times", short(c), ps.len()));
        }
    }
    Verdict::none_of(
        ONE_BOOKING_PER_CANDIDATE,
        &format!("{} records", s.records.len()),
        &doubles,
    )
}

/// `no_throttling`: the record store throttled nothing.
pub fn no_throttling(s: &SaleSnapshot) -> Verdict {
    let t = s.throttles.unwrap_or_default();
    Verdict::at_most(
        NO_THROTTLING,
        t.total() as f64,
        0.0,
        COUNT,
        format!("{} reads, {} writes throttled", t.reads, t.writes),
    )
}

/// `dead_letter_queue_empty`.
pub fn dead_letter_queue_empty(s: &SaleSnapshot) -> Verdict {
    let dead: Vec<String> = s
        .dead_letters
        .iter()
        .flatten()
        .map(|(group, dedup)| format!("group {group} dedup {dedup}"))
        .collect();
    Verdict::none_of(
        DEAD_LETTER_QUEUE_EMPTY,
        &format!("{} dead letters", dead.len()),
        &dead,
    )
}

/// `one_email_per_paid`: one confirmation per PAID booking, none for
/// anything else.
pub fn one_email_per_paid(s: &SaleSnapshot) -> Verdict {
    let paid = paid_records(s);
    let emails: Vec<_> = s.emails.iter().filter(|c| c.sale == s.sale).collect();
    // per payment: emails, and how many of them the sweep recovered
    let mut per_payment: BTreeMap<&PaymentId, (usize, usize)> = BTreeMap::new();
    for c in &emails {
        let e = per_payment.entry(&c.payment_id).or_default();
        e.0 += 1;
        e.1 += usize::from(c.recovered);
    }
    let mut problems = Vec::new();
    let mut repeats = 0;
    for r in &paid {
        let (n, recovered) = per_payment.get(&r.payment_id).copied().unwrap_or((0, 0));
        // every repeat is a send by the email sweep, which sends only what
        // is still owed: the send before it had an outcome nobody knew (a
        // server that took the message and lost its answer, or a mark that
        // failed). One repeat per recovered send, and no other
        if n == 0 || n > 1 + recovered {
            problems.push(format!(
                "{} ({}): {n} emails ({recovered} recovered)",
                r.payment_id,
                short(&r.candidate)
            ));
        } else {
            repeats += n - 1;
        }
    }
    let paid_payments: BTreeSet<&PaymentId> = paid.iter().map(|r| &r.payment_id).collect();
    for (p, (n, _)) in &per_payment {
        if !paid_payments.contains(p) {
            problems.push(format!("{p}: {n} emails, no PAID record"));
        }
    }
    let recovered = emails.iter().filter(|c| c.recovered).count();
    Verdict::none_of(
        ONE_EMAIL_PER_PAID,
        &format!(
            "{} emails ({recovered} recovered by the email sweep, {repeats} repeats of an unknown outcome)",
            emails.len()
        ),
        &problems,
    )
}

/// `status_matches_counters`: the document now says what the counters say.
pub fn status_matches_counters(s: &SaleSnapshot) -> Verdict {
    let mut problems = Vec::new();
    match s.status.as_ref().and_then(|c| c.document.as_ref()) {
        None => problems.push("no status document".to_owned()),
        Some(doc) => {
            if doc.sale != s.sale {
                problems.push(format!("document of sale {}", doc.sale));
            }
            if doc.open != s.open {
                problems.push(format!(
                    "document open={}, ledger open={}",
                    doc.open, s.open
                ));
            }
            for l in &s.levels {
                match doc.level(&l.level) {
                    Some(d) if d.cap == l.cap && d.taken == l.count => {}
                    Some(d) => problems.push(format!(
                        "{}: document {}/{}, ledger {}/{}",
                        l.level, d.taken, d.cap, l.count, l.cap
                    )),
                    None => problems.push(format!("{}: not in the document", l.level)),
                }
            }
            if doc.levels.len() != s.levels.len() {
                problems.push(format!(
                    "document has {} levels, ledger {}",
                    doc.levels.len(),
                    s.levels.len()
                ));
            }
        }
    }
    Verdict::none_of(
        STATUS_MATCHES_COUNTERS,
        &format!("{} levels", s.levels.len()),
        &problems,
    )
}

fn landed_problems(s: &SaleSnapshot) -> (usize, Vec<String>, Vec<String>) {
    let landed = s.landed.clone().unwrap_or_default();
    let (mut shown_open, unordered) = booking::status::landed_problems(&landed.documents);
    shown_open.extend(
        landed
            .unreadable_at_ms
            .iter()
            .map(|at| format!("unreadable document at {at}")),
    );
    (
        landed.documents.len() + landed.unreadable_at_ms.len(),
        shown_open,
        unordered,
    )
}

/// `status_never_showed_full_level_open`: no landed document showed a full
/// level (or a closed sale) open, and none was unreadable.
pub fn status_never_showed_full_level_open(s: &SaleSnapshot) -> Verdict {
    let (n, shown_open, _) = landed_problems(s);
    Verdict::none_of(
        STATUS_NEVER_SHOWED_FULL_LEVEL_OPEN,
        &format!("{n} documents"),
        &shown_open,
    )
}

/// `status_writes_in_read_order`: no document landed after one built from a
/// newer read.
pub fn status_writes_in_read_order(s: &SaleSnapshot) -> Verdict {
    let (n, _, unordered) = landed_problems(s);
    Verdict::none_of(
        STATUS_WRITES_IN_READ_ORDER,
        &format!("{n} documents"),
        &unordered,
    )
}

/// `paid_in_back_office`: the back office holds every PAID record as the
/// table has it, and nothing else.
pub fn paid_in_back_office(s: &SaleSnapshot) -> Verdict {
    let problems = match &s.back_office {
        None => vec!["no back office read".to_owned()],
        Some(Err(e)) => vec![e.clone()],
        Some(Ok(rows)) => back_office_diff(&paid_records(s), rows),
    };
    Verdict::none_of(
        PAID_IN_BACK_OFFICE,
        &format!("{} PAID records", s.paid().count()),
        &problems,
    )
}

/// How the back office differs from the PAID records (empty: it holds
/// each, as the table has it, and nothing else).
pub fn back_office_diff(paid: &[&BookingRecord], rows: &[BackOfficeRow]) -> Vec<String> {
    let by_payment: BTreeMap<&str, &BackOfficeRow> =
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

/// `gateway_completed_have_paid_booking`: every completed payment is a
/// PAID booking (of its payer, where the gateway names them).
pub fn gateway_completed_have_paid_booking(s: &SaleSnapshot) -> Verdict {
    let paid: BTreeMap<&str, &BookingRecord> =
        s.paid().map(|r| (r.payment_id.as_str(), r)).collect();
    let truth = s.gateway.clone().unwrap_or_default();
    let mut lost = Vec::new();
    for p in truth.completed() {
        match (paid.get(p.payment_id.as_str()), &p.candidate) {
            (None, Some(c)) => lost.push(format!(
                "{} of {} completed, not PAID",
                p.payment_id,
                short(c)
            )),
            (None, None) => lost.push(format!("{}: completed, no PAID booking", p.payment_id)),
            (Some(r), Some(c)) if &r.candidate != c => lost.push(format!(
                "{} of {} completed, PAID for {}",
                p.payment_id,
                short(c),
                short(&r.candidate)
            )),
            (Some(_), _) => {}
        }
    }
    Verdict::none_of(
        GATEWAY_COMPLETED_HAVE_PAID_BOOKING,
        &format!("{} completed payments", truth.completed().count()),
        &lost,
    )
}

/// `paid_bookings_completed_at_gateway`: every PAID booking's payment
/// completed at the gateway.
pub fn paid_bookings_completed_at_gateway(s: &SaleSnapshot) -> Verdict {
    let completed: BTreeSet<&str> = s
        .gateway
        .iter()
        .flat_map(GatewayTruth::completed)
        .map(|p| p.payment_id.as_str())
        .collect();
    let unpaid: Vec<String> = s
        .paid()
        .filter(|r| !completed.contains(r.payment_id.as_str()))
        .map(|r| format!("{}: PAID, not completed at the gateway", r.payment_id))
        .collect();
    Verdict::none_of(
        PAID_BOOKINGS_COMPLETED_AT_GATEWAY,
        &format!("{} PAID bookings", s.paid().count()),
        &unpaid,
    )
}

/// `one_token_grant`: no app key granted twice in the gateway's window
/// (the fleet shares one token; refreshes spend no grant).
pub fn one_token_grant(s: &SaleSnapshot) -> Verdict {
    let grants = s
        .gateway
        .as_ref()
        .and_then(|g| g.grants_in_window.clone())
        .unwrap_or_default();
    let regrants: Vec<String> = grants
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(app_key, n)| format!("app key {app_key}: {n} grants in the window"))
        .collect();
    Verdict::none_of(
        ONE_TOKEN_GRANT,
        &format!("{} app keys", grants.len()),
        &regrants,
    )
}

/// `no_payment_executed_after_deadline`: see [`executed_after_deadline`].
pub fn no_payment_executed_after_deadline(s: &SaleSnapshot) -> Verdict {
    let truth = s.gateway.clone().unwrap_or_default();
    let late = executed_after_deadline(&truth, &s.records, s.hold_ms);
    let executed = truth
        .payments
        .iter()
        .filter(|p| p.executed_ms.is_some())
        .count();
    Verdict::none_of(
        NO_PAYMENT_EXECUTED_AFTER_DEADLINE,
        &format!("{executed} executed payments"),
        &late,
    )
}

/// Payments executed after their hold deadline plus
/// [`EXECUTE_STAMP_SLACK_MS`]. The deadline is the booking record's
/// (extensions included); a payment whose record is gone (released) is held
/// to its creation time plus one hold, which is never earlier than its real
/// deadline (the payment is created after the admission). A payment with no
/// execute time, or neither a record nor a creation time, is not judged.
pub fn executed_after_deadline(
    truth: &GatewayTruth,
    records: &[BookingRecord],
    hold_ms: u64,
) -> Vec<String> {
    let by_payment: BTreeMap<&str, &BookingRecord> =
        records.iter().map(|r| (r.payment_id.as_str(), r)).collect();
    let mut late = Vec::new();
    for p in &truth.payments {
        let Some(executed_ms) = p.executed_ms else {
            continue;
        };
        let deadline_ms = match (by_payment.get(p.payment_id.as_str()), p.created_ms) {
            (Some(r), _) => r.deadline_ms,
            (None, Some(created_ms)) => created_ms.saturating_add(hold_ms),
            (None, None) => continue,
        };
        if executed_ms > deadline_ms.saturating_add(EXECUTE_STAMP_SLACK_MS) {
            late.push(format!(
                "{}: executed {} ms after its deadline",
                p.payment_id,
                executed_ms - deadline_ms
            ));
        }
    }
    late
}

/// `no_paid_after_release`: no `paid_after_release` alert.
pub fn no_paid_after_release(s: &SaleSnapshot) -> Verdict {
    let alerts = s.alerts.as_deref().unwrap_or_default();
    let after_release: Vec<String> = alerts
        .iter()
        .filter(|a| a.kind == "paid_after_release")
        .map(|a| a.detail.clone())
        .collect();
    Verdict::none_of(
        NO_PAID_AFTER_RELEASE,
        &format!("{} alerts", alerts.len()),
        &after_release,
    )
}

/// `no_held_left` (settled): no HELD record is left.
pub fn no_held_left(s: &SaleSnapshot) -> Verdict {
    let held: Vec<String> = s
        .records
        .iter()
        .filter(|r| r.status == RecordStatus::Held)
        .map(|r| format!("{} HELD {}", short(&r.candidate), r.payment_id))
        .collect();
    Verdict::none_of(NO_HELD_LEFT, &format!("{} records", s.records.len()), &held)
}

/// `checked` and the first violations quoted.
fn with_checked(checked: &str, violations: &[String]) -> String {
    if violations.is_empty() {
        checked.to_owned()
    } else {
        format!("{checked}; {}", quote(violations))
    }
}
