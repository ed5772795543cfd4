//! The invariants of a finished sale, as pure functions of what the
//! backends and the gateway hold at quiescence ([`Snapshot`]).

use std::collections::{BTreeMap, BTreeSet};

use booking::notify::{Alert, Confirmation};
use booking::records::{BookingRecord, RecordStatus};
use booking::{CandidateHash, Level, PaymentId};

use crate::history::CheckResult;

/// One level at the end: its cap and the ledger's count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelEnd {
    /// The level.
    pub level: Level,
    /// Its seats.
    pub cap: u32,
    /// The ledger's count.
    pub count: u32,
}

/// What the sale left behind.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Every level.
    pub levels: Vec<LevelEnd>,
    /// Every booking record.
    pub records: Vec<BookingRecord>,
    /// The ledger's paid mark of every candidate who has one.
    pub ledger_paid: BTreeMap<CandidateHash, PaymentId>,
    /// Candidates the ledger still holds a seat for (pending or held).
    pub ledger_holds: BTreeSet<CandidateHash>,
    /// Every payment the gateway completed, with its candidate.
    pub completed: Vec<(CandidateHash, PaymentId)>,
    /// Every email delivered.
    pub emails: Vec<Confirmation>,
    /// Every alert raised.
    pub alerts: Vec<Alert>,
}

/// Violations listed in a detail at most.
const SHOWN: usize = 8;

pub(crate) fn verdict(name: &str, checked: String, violations: Vec<String>) -> CheckResult {
    let detail = if violations.is_empty() {
        checked
    } else {
        let more = violations.len().saturating_sub(SHOWN);
        let shown = violations
            .iter()
            .take(SHOWN)
            .cloned()
            .collect::<Vec<_>>()
            .join("; ");
        if more > 0 {
            format!("{checked}; {shown}; and {more} more")
        } else {
            format!("{checked}; {shown}")
        }
    };
    CheckResult {
        name: name.to_owned(),
        passed: violations.is_empty(),
        figure: violations.len() as f64,
        detail,
    }
}

fn short(c: &CandidateHash) -> &str {
    &c.as_str()[..12]
}

/// Every invariant of a sale at quiescence:
///
/// | check | passes when |
/// |---|---|
/// | `within_caps` | no level counts above its cap |
/// | `count_is_paid` | each level counts exactly its PAID records |
/// | `one_booking_per_candidate` | no candidate paid twice at the gateway |
/// | `ledger_matches_records` | the ledger's paid marks are exactly the PAID records, and it holds no seat |
/// | `completed_is_paid` | every completed payment is a PAID booking |
/// | `one_email_per_paid` | every PAID booking has exactly one email, and no other booking has any |
/// | `no_paid_after_release` | no `paid_after_release` alert (money moved for a released seat) |
/// | `no_held_left` | no HELD record is left |
pub fn invariants(s: &Snapshot) -> Vec<CheckResult> {
    let paid: Vec<&BookingRecord> = s
        .records
        .iter()
        .filter(|r| r.status == RecordStatus::Paid)
        .collect();
    let mut out = Vec::new();

    let over: Vec<String> = s
        .levels
        .iter()
        .filter(|l| l.count > l.cap)
        .map(|l| format!("{}: {} counted, {} seats", l.level, l.count, l.cap))
        .collect();
    out.push(verdict(
        "within_caps",
        format!("{} levels", s.levels.len()),
        over,
    ));

    let mut paid_by_level: BTreeMap<&Level, u32> = BTreeMap::new();
    for r in &paid {
        *paid_by_level.entry(&r.level).or_default() += 1;
    }
    let drift: Vec<String> = s
        .levels
        .iter()
        .filter_map(|l| {
            let p = paid_by_level.get(&l.level).copied().unwrap_or(0);
            (p != l.count).then(|| format!("{}: counted {}, PAID {p}", l.level, l.count))
        })
        .collect();
    out.push(verdict(
        "count_is_paid",
        format!("{} PAID bookings", paid.len()),
        drift,
    ));

    let mut completed_by: BTreeMap<&CandidateHash, Vec<&PaymentId>> = BTreeMap::new();
    for (c, p) in &s.completed {
        completed_by.entry(c).or_default().push(p);
    }
    let twice: Vec<String> = completed_by
        .iter()
        .filter(|(_, ps)| ps.len() > 1)
        .map(|(c, ps)| format!("{} paid {} times", short(c), ps.len()))
        .collect();
    out.push(verdict(
        "one_booking_per_candidate",
        format!("{} payers", completed_by.len()),
        twice,
    ));

    let records_paid: BTreeMap<&CandidateHash, &PaymentId> =
        paid.iter().map(|r| (&r.candidate, &r.payment_id)).collect();
    let mut mismatch = Vec::new();
    for (c, p) in &s.ledger_paid {
        if records_paid.get(c) != Some(&p) {
            mismatch.push(format!(
                "{} paid {p} in the ledger, record {:?}",
                short(c),
                records_paid.get(c)
            ));
        }
    }
    for (c, p) in &records_paid {
        if !s.ledger_paid.contains_key(*c) {
            mismatch.push(format!("{} PAID {p} with no paid mark", short(c)));
        }
    }
    for c in &s.ledger_holds {
        mismatch.push(format!("{} still holds a seat", short(c)));
    }
    out.push(verdict(
        "ledger_matches_records",
        format!("{} paid marks", s.ledger_paid.len()),
        mismatch,
    ));

    let paid_set: BTreeSet<(&CandidateHash, &PaymentId)> =
        paid.iter().map(|r| (&r.candidate, &r.payment_id)).collect();
    let lost: Vec<String> = s
        .completed
        .iter()
        .filter(|(c, p)| !paid_set.contains(&(c, p)))
        .map(|(c, p)| format!("{p} of {} completed, not PAID", short(c)))
        .collect();
    out.push(verdict(
        "completed_is_paid",
        format!("{} completed payments", s.completed.len()),
        lost,
    ));

    let mut emails: BTreeMap<&PaymentId, u32> = BTreeMap::new();
    for e in &s.emails {
        *emails.entry(&e.payment_id).or_default() += 1;
    }
    let paid_payments: BTreeSet<&PaymentId> = paid.iter().map(|r| &r.payment_id).collect();
    let mut wrong = Vec::new();
    for p in &paid_payments {
        let n = emails.get(*p).copied().unwrap_or(0);
        if n != 1 {
            wrong.push(format!("{p}: {n} emails"));
        }
    }
    for (p, n) in &emails {
        if !paid_payments.contains(*p) {
            wrong.push(format!("{p}: {n} emails, not PAID"));
        }
    }
    out.push(verdict(
        "one_email_per_paid",
        format!("{} emails", s.emails.len()),
        wrong,
    ));

    let after_release: Vec<String> = s
        .alerts
        .iter()
        .filter(|a| a.kind == "paid_after_release")
        .map(|a| a.detail.clone())
        .collect();
    out.push(verdict(
        "no_paid_after_release",
        format!("{} alerts", s.alerts.len()),
        after_release,
    ));

    let held: Vec<String> = s
        .records
        .iter()
        .filter(|r| r.status == RecordStatus::Held)
        .map(|r| format!("{} HELD {}", short(&r.candidate), r.payment_id))
        .collect();
    out.push(verdict(
        "no_held_left",
        format!("{} records", s.records.len()),
        held,
    ));
    out
}

/// The status page's checks over every document the writers landed, in the
/// order they landed (the audit's own, on the simulated sink):
///
/// | name | holds when |
/// |---|---|
/// | `status_never_showed_full_level_open` | no document showed a level open with every seat taken |
/// | `status_writes_in_read_order` | no document was built from an older read of the counters than the one it overwrote: an older read landing last is how a full level is shown open |
pub fn status_checks(landed: &[(u64, booking::status::StatusDocument)]) -> Vec<CheckResult> {
    let (shown_open, unordered) = booking::status::landed_problems(landed);
    let checked = format!("{} documents", landed.len());
    vec![
        verdict(
            "status_never_showed_full_level_open",
            checked.clone(),
            shown_open,
        ),
        verdict("status_writes_in_read_order", checked, unordered),
    ]
}

/// How long after a payment completed a confirm path may still find no
/// record to mark (the worker has not written it yet): past this, the
/// record must be there.
pub const CONFIRM_LAG_MAX_MS: u64 = 120_000;

/// `confirm_paths_mark_paid`: a completed payment whose confirmation (the
/// callback, the webhook and its retries) reached the system
/// [`CONFIRM_LAG_MAX_MS`] or more after the money moved, and was refused
/// every time, is a booking the confirm paths can never mark paid (only the
/// reconciler's rescue after the deadline saves it). `completed` maps each
/// completed payment to when it completed, ms from the run's start.
pub fn confirm_paths_mark_paid(
    completed: &BTreeMap<PaymentId, u64>,
    ops: &[crate::history::Op],
) -> CheckResult {
    use crate::history::{OpKind, OpValue, Outcome};
    let mut paid: BTreeSet<&PaymentId> = BTreeSet::new();
    let mut refused_late: BTreeMap<&PaymentId, u64> = BTreeMap::new();
    for op in ops {
        let OpKind::Confirm { payment, .. } = &op.kind else {
            continue;
        };
        match &op.outcome {
            Outcome::Ok {
                value: OpValue::Paid,
            } => {
                paid.insert(payment);
            }
            Outcome::Ok {
                value: OpValue::Refused { .. },
            } => {
                if let Some(done) = completed.get(payment) {
                    let lag = op.invoked_ms.saturating_sub(*done);
                    if lag >= CONFIRM_LAG_MAX_MS {
                        let e = refused_late.entry(payment).or_default();
                        *e = (*e).max(lag);
                    }
                }
            }
            _ => {}
        }
    }
    let never: Vec<String> = refused_late
        .iter()
        .filter(|(p, _)| !paid.contains(*p))
        .map(|(p, lag)| format!("{p}: refused {} s after it completed", lag / 1_000))
        .collect();
    verdict(
        "confirm_paths_mark_paid",
        format!("{} completed payments", completed.len()),
        never,
    )
}

/// How much later than the hold deadline an execute may be stamped and
/// still count as sent before it (the rehearsal audit's slack).
pub const EXECUTE_STAMP_SLACK_MS: u64 = 250;

/// `paid_bookings_completed_at_gateway`: every PAID booking's payment
/// completed at the gateway (money moved before the seat was sold).
pub fn paid_bookings_completed_at_gateway(
    records: &[BookingRecord],
    payments: &BTreeMap<PaymentId, crate::sim::ports::SimPayment>,
) -> CheckResult {
    let paid: Vec<&BookingRecord> = records
        .iter()
        .filter(|r| r.status == RecordStatus::Paid)
        .collect();
    let unpaid: Vec<String> = paid
        .iter()
        .filter(|r| {
            !matches!(
                payments.get(&r.payment_id).map(|p| &p.state),
                Some(booking::gateway::GatewayPaymentState::Completed { .. })
            )
        })
        .map(|r| {
            format!(
                "{} PAID {}, gateway says {:?}",
                short(&r.candidate),
                r.payment_id,
                payments.get(&r.payment_id).map(|p| &p.state)
            )
        })
        .collect();
    verdict(
        "paid_bookings_completed_at_gateway",
        format!("{} PAID bookings", paid.len()),
        unpaid,
    )
}

/// `no_payment_executed_after_deadline`: no payment completed after its
/// hold deadline (plus [`EXECUTE_STAMP_SLACK_MS`]). The deadline is the
/// booking record's (extensions included); a payment whose record is gone
/// is held to its creation plus one hold.
pub fn no_payment_executed_after_deadline(
    records: &[BookingRecord],
    payments: &BTreeMap<PaymentId, crate::sim::ports::SimPayment>,
    hold_ms: u64,
) -> CheckResult {
    let deadlines: BTreeMap<&PaymentId, u64> = records
        .iter()
        .map(|r| (&r.payment_id, r.deadline_ms))
        .collect();
    let mut executed = 0usize;
    let mut late = Vec::new();
    for (id, p) in payments {
        let Some(done) = p.completed_ms else {
            continue;
        };
        executed += 1;
        let deadline = deadlines
            .get(id)
            .copied()
            .unwrap_or_else(|| p.created_ms.saturating_add(hold_ms));
        if done > deadline.saturating_add(EXECUTE_STAMP_SLACK_MS) {
            late.push(format!(
                "{id}: executed {} ms after its deadline",
                done - deadline
            ));
        }
    }
    verdict(
        "no_payment_executed_after_deadline",
        format!("{executed} executed payments"),
        late,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use booking::SaleId;
    use booking::records::ConfirmPath;

    fn c(n: u32) -> CandidateHash {
        CandidateHash::of(&format!("c{n}"))
    }

    fn p(n: u32) -> PaymentId {
        PaymentId::parse(&format!("P{n}")).unwrap()
    }

    fn level() -> Level {
        Level::parse("gold").unwrap()
    }

    fn paid(n: u32) -> BookingRecord {
        BookingRecord::held(c(n), SaleId::parse("s").unwrap(), level(), p(n), 1, 600_000)
            .into_paid(ConfirmPath::Callback, 2)
    }

    fn email(n: u32) -> Confirmation {
        Confirmation {
            sale: SaleId::parse("s").unwrap(),
            candidate: c(n),
            level: level(),
            payment_id: p(n),
            trx_id: None,
        }
    }

    fn good() -> Snapshot {
        Snapshot {
            levels: vec![LevelEnd {
                level: level(),
                cap: 2,
                count: 2,
            }],
            records: vec![paid(1), paid(2)],
            ledger_paid: [(c(1), p(1)), (c(2), p(2))].into_iter().collect(),
            ledger_holds: BTreeSet::new(),
            completed: vec![(c(1), p(1)), (c(2), p(2))],
            emails: vec![email(1), email(2)],
            alerts: vec![],
        }
    }

    fn failed(s: &Snapshot) -> Vec<String> {
        invariants(s)
            .into_iter()
            .filter(|r| !r.passed)
            .map(|r| r.name)
            .collect()
    }

    #[test]
    fn a_clean_sale_passes_and_each_breach_fails_its_check() {
        assert!(failed(&good()).is_empty(), "{:?}", invariants(&good()));

        let mut s = good();
        s.levels[0].count = 3;
        assert_eq!(failed(&s), ["within_caps", "count_is_paid"]);

        let mut s = good();
        s.records.pop();
        s.ledger_paid.remove(&c(2));
        s.emails.pop();
        s.levels[0].count = 1;
        assert_eq!(failed(&s), ["completed_is_paid"]);

        let mut s = good();
        s.emails.push(email(1));
        assert_eq!(failed(&s), ["one_email_per_paid"]);

        let mut s = good();
        s.completed.push((c(1), p(9)));
        assert_eq!(
            failed(&s),
            ["one_booking_per_candidate", "completed_is_paid"]
        );

        let mut s = good();
        s.ledger_holds.insert(c(3));
        s.records.push(BookingRecord::held(
            c(3),
            SaleId::parse("s").unwrap(),
            level(),
            p(3),
            1,
            2,
        ));
        assert_eq!(failed(&s), ["ledger_matches_records", "no_held_left"]);

        let mut s = good();
        s.alerts.push(Alert {
            kind: "paid_after_release".into(),
            detail: "x".into(),
            candidate: None,
            payment_id: None,
        });
        assert_eq!(failed(&s), ["no_paid_after_release"]);
    }

    #[test]
    fn status_documents_landing_out_of_read_order_fail() {
        use booking::ledger::{Counters, LevelCount};
        use booking::status::StatusDocument;
        let doc = |taken: u32, at: u64| {
            StatusDocument::from_counters(
                &SaleId::parse("s").unwrap(),
                &Counters {
                    open: true,
                    levels: vec![LevelCount {
                        level: level(),
                        cap: 2,
                        count: taken,
                    }],
                },
                at,
            )
        };
        let names = |docs: &[StatusDocument]| -> Vec<String> {
            let landed: Vec<(u64, StatusDocument)> = docs
                .iter()
                .map(|d| (d.generated_at_ms, d.clone()))
                .collect();
            status_checks(&landed)
                .into_iter()
                .filter(|c| !c.passed)
                .map(|c| c.name)
                .collect()
        };
        assert!(names(&[doc(1, 10), doc(2, 20)]).is_empty());
        // the older read (a seat left) lands after the newer one (full)
        assert_eq!(
            names(&[doc(2, 20), doc(1, 10)]),
            ["status_writes_in_read_order"]
        );
        let mut forged = doc(2, 30);
        forged.levels[0].state = booking::status::LevelState::Open;
        assert_eq!(names(&[forged]), ["status_never_showed_full_level_open"]);
    }

    fn payment(
        state: booking::gateway::GatewayPaymentState,
        completed_ms: Option<u64>,
    ) -> crate::sim::ports::SimPayment {
        crate::sim::ports::SimPayment {
            invoice: "inv".into(),
            signature: "sig".into(),
            state,
            created_ms: 1,
            expires_ms: 1_200_000,
            completed_ms,
        }
    }

    #[test]
    fn a_paid_booking_whose_payment_did_not_complete_fails() {
        use booking::gateway::GatewayPaymentState as S;
        let done = || S::Completed { trx_id: "T".into() };
        let payments: BTreeMap<PaymentId, _> = [
            (p(1), payment(done(), Some(5))),
            (p(2), payment(S::Cancelled, None)),
        ]
        .into_iter()
        .collect();
        assert!(paid_bookings_completed_at_gateway(&[paid(1)], &payments).passed);
        let r = paid_bookings_completed_at_gateway(&[paid(1), paid(2)], &payments);
        assert!(!r.passed && r.detail.contains("P2"), "{}", r.detail);
        let r = paid_bookings_completed_at_gateway(&[paid(3)], &payments);
        assert!(!r.passed, "a PAID booking the gateway never saw");
    }

    #[test]
    fn an_execute_after_the_records_deadline_fails() {
        use booking::gateway::GatewayPaymentState as S;
        let done = || S::Completed { trx_id: "T".into() };
        // paid(1)'s record: deadline 600_000
        let at = |ms: u64| -> BTreeMap<PaymentId, _> {
            [(p(1), payment(done(), Some(ms)))].into_iter().collect()
        };
        let records = [paid(1)];
        assert!(no_payment_executed_after_deadline(&records, &at(599_000), 600_000).passed);
        assert!(
            no_payment_executed_after_deadline(
                &records,
                &at(600_000 + EXECUTE_STAMP_SLACK_MS),
                600_000
            )
            .passed
        );
        let r = no_payment_executed_after_deadline(&records, &at(601_000), 600_000);
        assert!(!r.passed && r.detail.contains("P1"), "{}", r.detail);
        // no record: created (1) plus a hold
        let r = no_payment_executed_after_deadline(&[], &at(700_000), 600_000);
        assert!(!r.passed);
        let r = no_payment_executed_after_deadline(&[], &at(500_000), 600_000);
        assert!(r.passed);
    }

    #[test]
    fn a_completed_payment_refused_late_by_every_path_fails() {
        use crate::history::{Op, OpKind, OpValue, Outcome};
        let confirm = |id: u64, at: u64, value: OpValue| Op {
            id,
            process: 1,
            kind: OpKind::Confirm {
                candidate: c(1),
                payment: p(1),
            },
            invoked_ms: at,
            completed_ms: Some(at),
            outcome: Outcome::Ok { value },
        };
        let refused = || OpValue::Refused {
            reason: "not_held".into(),
        };
        let completed: BTreeMap<PaymentId, u64> = [(p(1), 1_000)].into_iter().collect();
        // refused early (the worker had not written yet), then paid: fine
        let ok = [
            confirm(1, 1_500, refused()),
            confirm(2, 31_000, OpValue::Paid),
        ];
        assert!(confirm_paths_mark_paid(&completed, &ok).passed);
        // refused early only: the worker may not have written; not judged
        assert!(confirm_paths_mark_paid(&completed, &[confirm(1, 1_500, refused())]).passed);
        // refused two minutes on, never paid by a path
        let late = [
            confirm(1, 1_500, refused()),
            confirm(2, 1_000 + CONFIRM_LAG_MAX_MS, refused()),
        ];
        let r = confirm_paths_mark_paid(&completed, &late);
        assert!(!r.passed && r.detail.contains("P1"), "{}", r.detail);
    }
}
