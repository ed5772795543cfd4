//! The invariants of a finished sale: the audit's own
//! ([`booking_audit::invariants`], over the [`SaleSnapshot`] `sim.rs` reads
//! from the backends and the simulated gateway at quiescence), and the
//! sim-only checks that need its history ([`confirm_paths_mark_paid`]).

use std::collections::{BTreeMap, BTreeSet};

use booking::PaymentId;
use booking_audit::invariants::{
    ADMISSIONS_WITHIN_CAP, COUNT_IS_PAID, GATEWAY_COMPLETED_HAVE_PAID_BOOKING,
    LEDGER_MATCHES_RECORDS, NO_HELD_LEFT, NO_PAID_AFTER_RELEASE,
    NO_PAYMENT_EXECUTED_AFTER_DEADLINE, ONE_BOOKING_PER_CANDIDATE, ONE_EMAIL_PER_PAID,
    PAID_BOOKINGS_COMPLETED_AT_GATEWAY, SIM_NAMES, STATUS_NEVER_SHOWED_FULL_LEVEL_OPEN,
    STATUS_WRITES_IN_READ_ORDER,
};
use booking_audit::{SaleSnapshot, Verdict};

/// The audit's invariants the sale reports, in its report's order (under
/// the names of [`SIM_NAMES`]).
pub const SIM_INVARIANTS: [&str; 12] = [
    ADMISSIONS_WITHIN_CAP,
    COUNT_IS_PAID,
    ONE_BOOKING_PER_CANDIDATE,
    LEDGER_MATCHES_RECORDS,
    GATEWAY_COMPLETED_HAVE_PAID_BOOKING,
    ONE_EMAIL_PER_PAID,
    NO_PAID_AFTER_RELEASE,
    NO_HELD_LEFT,
    STATUS_NEVER_SHOWED_FULL_LEVEL_OPEN,
    STATUS_WRITES_IN_READ_ORDER,
    PAID_BOOKINGS_COMPLETED_AT_GATEWAY,
    NO_PAYMENT_EXECUTED_AFTER_DEADLINE,
];

/// A check of `checked` that passes with no violation.
pub(crate) fn verdict(name: &str, checked: String, violations: Vec<String>) -> Verdict {
    Verdict::none_of(name, &checked, &violations)
}

/// The audit's verdicts on a settled sale, those of [`SIM_INVARIANTS`] in
/// its order, under the sale's names:
///
/// | check | the audit's invariant |
/// |---|---|
/// | `within_caps` | `admissions_within_cap` |
/// | `count_is_paid` | `count_is_paid` |
/// | `one_booking_per_candidate` | `one_booking_per_candidate` |
/// | `ledger_matches_records` | `ledger_matches_records` (settled: paid marks and holds) |
/// | `completed_is_paid` | `gateway_completed_have_paid_booking` |
/// | `one_email_per_paid` | `one_email_per_paid` |
/// | `no_paid_after_release` | `no_paid_after_release` |
/// | `no_held_left` | `no_held_left` |
/// | `status_never_showed_full_level_open` | the same |
/// | `status_writes_in_read_order` | the same |
/// | `paid_bookings_completed_at_gateway` | the same |
/// | `no_payment_executed_after_deadline` | the same (the record's deadline, else creation plus a hold) |
pub fn invariants(s: &SaleSnapshot) -> Vec<Verdict> {
    let all = booking_audit::audit(s);
    SIM_INVARIANTS
        .iter()
        .filter_map(|name| all.iter().find(|v| v.name == *name))
        .map(
            |v| match SIM_NAMES.iter().find(|(audit, _)| *audit == v.name) {
                Some((_, sim)) => v.clone().named(sim),
                None => v.clone(),
            },
        )
        .collect()
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
) -> Verdict {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use booking::ledger::{Counters, LevelCount};
    use booking::notify::{Alert, Confirmation};
    use booking::records::{BookingRecord, ConfirmPath};
    use booking::status::StatusDocument;
    use booking::{CandidateHash, Level, SaleId};
    use booking_audit::{GatewayPayment, GatewayState, GatewayTruth, LandedStatus, LedgerMark};

    fn c(n: u32) -> CandidateHash {
        CandidateHash::of(&format!("c{n}"))
    }

    fn p(n: u32) -> PaymentId {
        PaymentId::parse(&format!("P{n}")).unwrap()
    }

    fn level() -> Level {
        Level::parse("gold").unwrap()
    }

    fn sale() -> SaleId {
        SaleId::parse("sim").unwrap()
    }

    fn held(n: u32) -> BookingRecord {
        BookingRecord::held(c(n), sale(), level(), p(n), 1, 600_000)
    }

    fn paid(n: u32) -> BookingRecord {
        held(n).into_paid(ConfirmPath::Callback, 2)
    }

    fn email(n: u32) -> Confirmation {
        Confirmation {
            sale: sale(),
            candidate: c(n),
            level: level(),
            payment_id: p(n),
            trx_id: None,
            recovered: false,
        }
    }

    fn completed(n: u32, who: u32) -> GatewayPayment {
        GatewayPayment {
            payment_id: p(n).to_string(),
            state: GatewayState::Completed,
            candidate: Some(c(who)),
            app_key: String::new(),
            amount_poisha: 0,
            merchant_invoice_number: String::new(),
            created_ms: None,
            executed_ms: Some(2),
        }
    }

    fn mark(n: u32) -> (CandidateHash, LedgerMark) {
        (
            c(n),
            LedgerMark {
                paid: Some(p(n)),
                hold: None,
            },
        )
    }

    fn good() -> SaleSnapshot {
        let mut s = SaleSnapshot::empty(sale());
        s.settled = true;
        s.open = true;
        s.levels = vec![LevelCount {
            level: level(),
            cap: 2,
            count: 2,
            peak: 2,
        }];
        s.records = vec![paid(1), paid(2)];
        s.ledger_marks = Some([mark(1), mark(2)].into_iter().collect());
        s.emails = vec![email(1), email(2)];
        s.alerts = Some(Vec::new());
        s.landed = Some(LandedStatus::default());
        s.gateway = Some(GatewayTruth {
            payments: vec![completed(1, 1), completed(2, 2)],
            grants_in_window: None,
        });
        s.hold_ms = 600_000;
        s
    }

    fn failed(s: &SaleSnapshot) -> Vec<String> {
        invariants(s)
            .into_iter()
            .filter(|r| !r.passed)
            .map(|r| r.name)
            .collect()
    }

    #[test]
    fn the_sale_reports_its_twelve_invariants_in_order_under_its_names() {
        let names: Vec<String> = invariants(&good()).into_iter().map(|v| v.name).collect();
        assert_eq!(
            names,
            [
                "within_caps",
                "count_is_paid",
                "one_booking_per_candidate",
                "ledger_matches_records",
                "completed_is_paid",
                "one_email_per_paid",
                "no_paid_after_release",
                "no_held_left",
                "status_never_showed_full_level_open",
                "status_writes_in_read_order",
                "paid_bookings_completed_at_gateway",
                "no_payment_executed_after_deadline",
            ]
        );
    }

    #[test]
    fn a_clean_sale_passes_and_each_breach_fails_its_check() {
        assert!(failed(&good()).is_empty(), "{:?}", invariants(&good()));

        let mut s = good();
        s.levels[0].count = 3;
        assert_eq!(failed(&s), ["within_caps", "count_is_paid"]);

        let mut s = good();
        s.records.pop();
        s.ledger_marks.as_mut().unwrap().remove(&c(2));
        s.emails.pop();
        s.levels[0].count = 1;
        assert_eq!(failed(&s), ["completed_is_paid"]);

        let mut s = good();
        s.emails.push(email(1));
        assert_eq!(failed(&s), ["one_email_per_paid"]);

        let mut s = good();
        s.gateway.as_mut().unwrap().payments.push(completed(9, 1));
        assert_eq!(
            failed(&s),
            ["one_booking_per_candidate", "completed_is_paid"]
        );

        let mut s = good();
        s.ledger_marks.as_mut().unwrap().insert(
            c(3),
            LedgerMark {
                paid: None,
                hold: Some(booking::Hold {
                    level: level(),
                    token: booking::RequestToken::parse("r-3").unwrap(),
                    state: booking::HoldState::Pending { admitted_ms: 1 },
                }),
            },
        );
        s.records.push(held(3));
        assert_eq!(failed(&s), ["ledger_matches_records", "no_held_left"]);

        let mut s = good();
        s.alerts = Some(vec![Alert {
            kind: "paid_after_release".into(),
            detail: "x".into(),
            candidate: None,
            payment_id: None,
        }]);
        assert_eq!(failed(&s), ["no_paid_after_release"]);
    }

    #[test]
    fn status_documents_landing_out_of_read_order_fail() {
        let doc = |taken: u32, at: u64| {
            StatusDocument::from_counters(
                &sale(),
                &Counters {
                    open: true,
                    levels: vec![LevelCount {
                        level: level(),
                        cap: 2,
                        count: taken,
                        peak: taken,
                    }],
                    paid: 0,
                },
                at,
            )
        };
        let names = |docs: &[StatusDocument]| -> Vec<String> {
            let mut s = good();
            s.landed = Some(LandedStatus {
                documents: docs
                    .iter()
                    .map(|d| (d.generated_at_ms, d.clone()))
                    .collect(),
                unreadable_at_ms: Vec::new(),
            });
            failed(&s)
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
