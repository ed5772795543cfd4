//! The history's checkers: pure functions of a finished history and the
//! sale's [`FinalState`], each a [`Verdict`] (Jepsen's counter, unique-ids,
//! total-queue checkers, and no paid booking released).

use std::collections::{BTreeMap, BTreeSet};

use booking::{CandidateHash, Level, PaymentId};
use booking_audit::Verdict;
use serde::{Deserialize, Serialize};

use super::{Op, OpKind, OpValue};

/// One level after the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LevelFinal {
    /// Level.
    pub level: Level,
    /// Its seats.
    pub cap: u32,
    /// The ledger's count.
    pub count: u32,
}

/// A PAID booking after the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaidBooking {
    /// Who.
    pub candidate: CandidateHash,
    /// Level.
    pub level: Level,
    /// Payment.
    pub payment: PaymentId,
}

/// An email the mail backend delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmailSent {
    /// Whose booking.
    pub candidate: CandidateHash,
    /// Its payment.
    pub payment: PaymentId,
    /// Sent by the email sweep for a send of unknown outcome (may repeat it).
    #[serde(default)]
    pub recovered: bool,
}

/// What the backends held after the run, as plain data.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalState {
    /// Every level's cap and final count.
    pub levels: Vec<LevelFinal>,
    /// Every PAID booking.
    pub paid: Vec<PaidBooking>,
    /// Every email delivered.
    pub emails: Vec<EmailSent>,
}

/// A checker's verdict: violations counted, held to 0, the detail opening
/// with what was checked.
fn result(name: &str, checked: String, violations: Vec<String>) -> Verdict {
    Verdict::none_of(name, &checked, &violations)
}

fn short(c: &CandidateHash) -> &str {
    &c.as_str()[..12]
}

/// Counter bounds: each level's final count lies between the admissions that
/// certainly happened minus the releases that may have, and the admissions
/// that may have happened minus the releases that certainly did; and never
/// above the cap.
pub fn counter_bounds(history: &[Op], state: &FinalState) -> Verdict {
    // level -> (ok admits, possible admits, ok releases, possible releases)
    let mut tally: BTreeMap<&Level, [u64; 4]> = BTreeMap::new();
    for op in history {
        match &op.kind {
            OpKind::Admit { level, .. } => {
                let t = tally.entry(level).or_default();
                let admitted = |v: &OpValue| matches!(v, OpValue::Admitted { .. });
                if op.value().is_some_and(admitted) {
                    t[0] += 1;
                }
                if op.maybe(admitted) {
                    t[1] += 1;
                }
            }
            OpKind::Release { level, .. } => {
                let t = tally.entry(level).or_default();
                if op.did(&OpValue::Released) {
                    t[2] += 1;
                }
                if op.maybe(|v| *v == OpValue::Released) {
                    t[3] += 1;
                }
            }
            _ => {}
        }
    }
    let mut violations = Vec::new();
    let mut levels: BTreeSet<&Level> = tally.keys().copied().collect();
    for l in &state.levels {
        levels.remove(&l.level);
        let [ok, possible, released, maybe_released] =
            tally.get(&l.level).copied().unwrap_or_default();
        let lo = ok.saturating_sub(maybe_released);
        let hi = possible.saturating_sub(released);
        let count = u64::from(l.count);
        if count < lo || count > hi {
            violations.push(format!(
                "{}: count {count} outside [{lo}, {hi}] ({ok} admitted, {} unknown, \
                 {released} released, {} unknown)",
                l.level,
                possible - ok,
                maybe_released - released
            ));
        }
        if l.count > l.cap {
            violations.push(format!("{}: count {} over cap {}", l.level, l.count, l.cap));
        }
    }
    for level in levels {
        violations.push(format!("{level}: in the history, not in the final state"));
    }
    result(
        "counter_bounds",
        format!("{} levels", state.levels.len()),
        violations,
    )
}

/// Unique IDs: no candidate and no payment in two PAID bookings, no level with
/// more PAID bookings than seats, and no candidate admitted twice (both
/// certainly) without a release of theirs that may have happened in between.
pub fn unique_ids(history: &[Op], state: &FinalState) -> Verdict {
    let mut violations = Vec::new();
    let mut by_candidate: BTreeMap<&CandidateHash, u32> = BTreeMap::new();
    let mut by_payment: BTreeMap<&PaymentId, u32> = BTreeMap::new();
    let mut by_level: BTreeMap<&Level, u32> = BTreeMap::new();
    for p in &state.paid {
        *by_candidate.entry(&p.candidate).or_default() += 1;
        *by_payment.entry(&p.payment).or_default() += 1;
        *by_level.entry(&p.level).or_default() += 1;
    }
    for (c, n) in &by_candidate {
        if *n > 1 {
            violations.push(format!("candidate {} has {n} PAID bookings", short(c)));
        }
    }
    for (p, n) in &by_payment {
        if *n > 1 {
            violations.push(format!("payment {p} pays for {n} bookings"));
        }
    }
    for l in &state.levels {
        let paid = by_level.get(&l.level).copied().unwrap_or(0);
        if paid > l.cap {
            violations.push(format!(
                "{}: {paid} PAID bookings for {} seats",
                l.level, l.cap
            ));
        }
    }
    // per candidate, in invocation order: a second certain admission needs a
    // release that may have happened after the first was invoked
    let mut admits: BTreeMap<&CandidateHash, Vec<&Op>> = BTreeMap::new();
    let mut releases: BTreeMap<&CandidateHash, Vec<&Op>> = BTreeMap::new();
    for op in history {
        match &op.kind {
            OpKind::Admit { candidate, .. }
                if op
                    .value()
                    .is_some_and(|v| matches!(v, OpValue::Admitted { .. })) =>
            {
                admits.entry(candidate).or_default().push(op);
            }
            OpKind::Release { candidate, .. } if op.maybe(|v| *v == OpValue::Released) => {
                releases.entry(candidate).or_default().push(op);
            }
            _ => {}
        }
    }
    for (candidate, ops) in &admits {
        let mut ops = ops.clone();
        ops.sort_by_key(|o| (o.invoked_ms, o.id));
        for pair in ops.windows(2) {
            let (first, second) = (pair[0], pair[1]);
            // a release between them: it may have taken effect after one of
            // them and before the other, in either order (a slow call
            // invoked first may take effect last)
            let between = |a: &Op, b: &Op, r: &Op| {
                r.completed_ms.unwrap_or(u64::MAX) >= a.invoked_ms
                    && r.invoked_ms <= b.completed_ms.unwrap_or(u64::MAX)
            };
            let released = releases.get(candidate).is_some_and(|rs| {
                rs.iter()
                    .any(|r| between(first, second, r) || between(second, first, r))
            });
            if !released {
                violations.push(format!(
                    "candidate {} admitted twice (ops {} and {}) with no release in between",
                    short(candidate),
                    first.id,
                    second.id
                ));
            }
        }
    }
    result(
        "unique_ids",
        format!(
            "{} PAID bookings, {} candidates admitted",
            state.paid.len(),
            admits.len()
        ),
        violations,
    )
}

/// Total queue: every PAID booking's email delivered at least once, and
/// again only by the email sweep (one repeat per send it recovered, each
/// after a send whose outcome nobody knew: the repeats the design allows),
/// none for a booking that is not PAID; every confirmation acknowledged to a client is
/// PAID (none lost); every email acknowledged as sent was delivered. Unknown
/// confirmations and emails may have happened or not.
pub fn total_queue(history: &[Op], state: &FinalState) -> Verdict {
    let mut violations = Vec::new();
    let paid: BTreeSet<(&CandidateHash, &PaymentId)> = state
        .paid
        .iter()
        .map(|p| (&p.candidate, &p.payment))
        .collect();
    let mut delivered: BTreeMap<(&CandidateHash, &PaymentId), u32> = BTreeMap::new();
    let mut recovered: BTreeMap<(&CandidateHash, &PaymentId), u32> = BTreeMap::new();
    for e in &state.emails {
        *delivered.entry((&e.candidate, &e.payment)).or_default() += 1;
        if e.recovered {
            *recovered.entry((&e.candidate, &e.payment)).or_default() += 1;
        }
    }
    for (c, p) in &paid {
        let n = delivered.get(&(*c, *p)).copied().unwrap_or(0);
        let r = recovered.get(&(*c, *p)).copied().unwrap_or(0);
        // every repeat is a send by the email sweep, which sends only what
        // is still owed: the send before it had an outcome nobody knew
        if n == 0 {
            violations.push(format!("PAID {} ({p}): no email", short(c)));
        } else if n > 1 + r {
            violations.push(format!(
                "PAID {} ({p}): {n} emails, {r} of them recovered by the email sweep",
                short(c)
            ));
        }
    }
    for ((c, p), n) in &delivered {
        if !paid.contains(&(*c, *p)) {
            violations.push(format!(
                "{n} email(s) for {} ({p}), which is not PAID",
                short(c)
            ));
        }
    }
    for op in history {
        match &op.kind {
            OpKind::Confirm { candidate, payment }
                if op.did(&OpValue::Paid) && !paid.contains(&(candidate, payment)) =>
            {
                violations.push(format!(
                    "confirmation op {} of {} ({payment}) acknowledged, booking not PAID",
                    op.id,
                    short(candidate)
                ));
            }
            OpKind::Email { candidate, payment }
                if op.did(&OpValue::Sent) && !delivered.contains_key(&(candidate, payment)) =>
            {
                violations.push(format!(
                    "email op {} of {} ({payment}) acknowledged, never delivered",
                    op.id,
                    short(candidate)
                ));
            }
            _ => {}
        }
    }
    result(
        "total_queue",
        format!(
            "{} PAID bookings, {} emails delivered",
            paid.len(),
            state.emails.len()
        ),
        violations,
    )
}

/// No paid booking released: no release that certainly gave a seat back
/// concerned a payment that is PAID at the end, or one whose confirmation
/// completed ok before the release was invoked. A release of unknown outcome
/// is given the benefit of the doubt (the ledger refuses to release a paid
/// candidate, so it may have been refused).
pub fn no_paid_released(history: &[Op], state: &FinalState) -> Verdict {
    let mut violations = Vec::new();
    let paid: BTreeSet<(&CandidateHash, &PaymentId)> = state
        .paid
        .iter()
        .map(|p| (&p.candidate, &p.payment))
        .collect();
    // when each (candidate, payment) was first acknowledged as paid
    let mut confirmed: BTreeMap<(&CandidateHash, &PaymentId), u64> = BTreeMap::new();
    for op in history {
        if let (OpKind::Confirm { candidate, payment }, true, Some(done)) =
            (&op.kind, op.did(&OpValue::Paid), op.completed_ms)
        {
            let at = confirmed.entry((candidate, payment)).or_insert(done);
            *at = (*at).min(done);
        }
    }
    let mut releases = 0u64;
    for op in history {
        let OpKind::Release {
            candidate,
            payment: Some(payment),
            ..
        } = &op.kind
        else {
            continue;
        };
        if !op.did(&OpValue::Released) {
            continue;
        }
        releases += 1;
        if paid.contains(&(candidate, payment)) {
            violations.push(format!(
                "release op {} gave back the seat of {} ({payment}), which is PAID",
                op.id,
                short(candidate)
            ));
        } else if let Some(at) = confirmed.get(&(candidate, payment)) {
            if *at < op.invoked_ms {
                violations.push(format!(
                    "release op {} at {} ms gave back the seat of {} ({payment}), \
                     confirmed PAID at {at} ms",
                    op.id,
                    op.invoked_ms,
                    short(candidate)
                ));
            }
        }
    }
    result(
        "no_paid_released",
        format!("{releases} releases, {} PAID bookings", paid.len()),
        violations,
    )
}

/// Every checker, in the table's order.
pub fn check_all(history: &[Op], state: &FinalState) -> Vec<Verdict> {
    vec![
        counter_bounds(history, state),
        unique_ids(history, state),
        total_queue(history, state),
        no_paid_released(history, state),
    ]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::history::*;
    use booking::ManualClock;

    fn c(n: u32) -> CandidateHash {
        CandidateHash::of(&format!("candidate-{n}"))
    }
    fn gold() -> Level {
        Level::parse("gold").unwrap()
    }
    fn pay(n: u32) -> PaymentId {
        PaymentId::parse(&format!("P{n}")).unwrap()
    }

    /// Builds histories by hand, with explicit times.
    #[derive(Default)]
    struct Builder {
        ops: Vec<Op>,
    }

    impl Builder {
        fn op(&mut self, kind: OpKind, at: (u64, Option<u64>), outcome: Outcome) -> &mut Self {
            let id = self.ops.len() as u64;
            self.ops.push(Op {
                id,
                process: id,
                kind,
                invoked_ms: at.0,
                completed_ms: at.1,
                outcome,
            });
            self
        }
        fn admit(&mut self, who: u32, at: u64, outcome: Outcome) -> &mut Self {
            self.op(
                OpKind::Admit {
                    candidate: c(who),
                    level: gold(),
                },
                (at, Some(at + 5)),
                outcome,
            )
        }
        fn release(&mut self, who: u32, at: u64, outcome: Outcome) -> &mut Self {
            self.op(
                OpKind::Release {
                    candidate: c(who),
                    level: gold(),
                    payment: Some(pay(who)),
                },
                (at, Some(at + 5)),
                outcome,
            )
        }
        fn confirm(&mut self, who: u32, at: u64, outcome: Outcome) -> &mut Self {
            self.op(
                OpKind::Confirm {
                    candidate: c(who),
                    payment: pay(who),
                },
                (at, Some(at + 5)),
                outcome,
            )
        }
    }

    fn ok(value: OpValue) -> Outcome {
        Outcome::Ok { value }
    }
    fn admitted() -> Outcome {
        ok(OpValue::Admitted {
            payment: Some(pay(0)),
        })
    }
    fn failed() -> Outcome {
        Outcome::Fail {
            reason: "503".into(),
        }
    }

    fn state(count: u32, cap: u32) -> FinalState {
        FinalState {
            levels: vec![LevelFinal {
                level: gold(),
                cap,
                count,
            }],
            ..FinalState::default()
        }
    }

    fn paid(who: &[u32]) -> Vec<PaidBooking> {
        who.iter()
            .map(|&n| PaidBooking {
                candidate: c(n),
                level: gold(),
                payment: pay(n),
            })
            .collect()
    }

    fn emails(who: &[u32]) -> Vec<EmailSent> {
        who.iter()
            .map(|&n| EmailSent {
                candidate: c(n),
                payment: pay(n),
                recovered: false,
            })
            .collect()
    }

    #[test]
    fn the_recorder_times_operations_and_leaves_the_unfinished_unknown() {
        let clock = ManualClock::new(10_000);
        let h = History::new(Arc::new(clock.clone()));
        clock.advance_ms(5);
        let a = h.invoke(
            1,
            OpKind::Admit {
                candidate: c(1),
                level: gold(),
            },
        );
        let b = h.invoke(
            2,
            OpKind::Email {
                candidate: c(2),
                payment: pay(2),
            },
        );
        let pending = h.invoke(
            3,
            OpKind::Confirm {
                candidate: c(3),
                payment: pay(3),
            },
        );
        clock.advance_ms(7);
        a.ok(OpValue::Admitted { payment: None });
        b.fail("smtp down");
        drop(pending);
        let ops = h.ops();
        assert_eq!(ops.len(), 3);
        assert_eq!((ops[0].id, ops[0].process), (0, 1));
        assert_eq!((ops[0].invoked_ms, ops[0].completed_ms), (5, Some(12)));
        assert_eq!(ops[0].outcome, ok(OpValue::Admitted { payment: None }));
        assert_eq!(
            ops[1].outcome,
            Outcome::Fail {
                reason: "smtp down".into()
            }
        );
        assert_eq!(
            (ops[2].completed_ms, &ops[2].outcome),
            (None, &Outcome::Unknown)
        );
        let h2 = h.clone();
        h2.invoke(
            4,
            OpKind::Admit {
                candidate: c(4),
                level: gold(),
            },
        )
        .unknown();
        assert_eq!(
            h.ops()[3].completed_ms,
            Some(12),
            "clones share one history"
        );
        let json = serde_json::to_value(&h.ops()[0]).unwrap();
        assert_eq!(json["kind"]["op"], "admit");
        assert_eq!(json["outcome"]["outcome"], "ok");
        assert_eq!(json["outcome"]["value"], "admitted");
    }

    #[test]
    fn counter_bounds_pass_within_and_fail_outside() {
        // 3 certain admissions, 1 unknown, 1 failed, 1 refused; 1 certain
        // release, 1 unknown release: count may be [3-2, 4-1] = [1, 3]
        let mut b = Builder::default();
        b.admit(1, 0, admitted())
            .admit(2, 0, admitted())
            .admit(3, 0, admitted())
            .admit(4, 0, Outcome::Unknown)
            .admit(5, 0, failed())
            .admit(
                6,
                0,
                ok(OpValue::Refused {
                    reason: "level_full".into(),
                }),
            )
            .release(1, 10, ok(OpValue::Released))
            .release(2, 10, Outcome::Unknown)
            .release(
                3,
                10,
                ok(OpValue::Refused {
                    reason: "no_match".into(),
                }),
            );
        for count in 1..=3 {
            let r = counter_bounds(&b.ops, &state(count, 10));
            assert!(r.passed, "{count}: {}", r.detail);
            assert_eq!(r.figure, 0.0);
        }
        let below = counter_bounds(&b.ops, &state(0, 10));
        assert!(!below.passed);
        assert!(
            below.detail.contains("count 0 outside [1, 3]"),
            "{}",
            below.detail
        );
        let above = counter_bounds(&b.ops, &state(4, 10));
        assert!(
            !above.passed,
            "the unknown admission and release cannot reach 4"
        );
        assert_eq!(above.figure, 1.0);
        let over_cap = counter_bounds(&b.ops, &state(3, 2));
        assert!(!over_cap.passed && over_cap.detail.contains("over cap"));
        let mut other = b.ops.clone();
        other.push(Op {
            kind: OpKind::Admit {
                candidate: c(9),
                level: Level::parse("silver").unwrap(),
            },
            ..other[0].clone()
        });
        assert!(
            !counter_bounds(&other, &state(2, 10)).passed,
            "an unseen level"
        );
    }

    #[test]
    fn unknown_outcomes_widen_counter_bounds_on_both_sides() {
        // only unknowns: anything from 0 to the unknown admissions passes
        let mut b = Builder::default();
        b.admit(1, 0, Outcome::Unknown)
            .admit(2, 0, Outcome::Unknown);
        for n in 0..=2 {
            assert!(counter_bounds(&b.ops, &state(n, 10)).passed);
        }
        assert!(!counter_bounds(&b.ops, &state(3, 10)).passed);
        // an unknown release lowers the floor, a certain one the ceiling
        let mut b = Builder::default();
        b.admit(1, 0, admitted()).release(1, 10, Outcome::Unknown);
        assert!(counter_bounds(&b.ops, &state(0, 10)).passed);
        assert!(counter_bounds(&b.ops, &state(1, 10)).passed);
        let mut b = Builder::default();
        b.admit(1, 0, admitted())
            .release(1, 10, ok(OpValue::Released));
        assert!(counter_bounds(&b.ops, &state(0, 10)).passed);
        assert!(!counter_bounds(&b.ops, &state(1, 10)).passed);
    }

    #[test]
    fn unique_ids_catch_double_bookings() {
        let mut s = state(2, 2);
        s.paid = paid(&[1, 2]);
        let mut b = Builder::default();
        b.admit(1, 0, admitted()).admit(2, 0, admitted());
        assert!(unique_ids(&b.ops, &s).passed);

        let mut twice = s.clone();
        twice.paid.push(PaidBooking {
            payment: pay(9),
            ..twice.paid[0].clone()
        });
        let r = unique_ids(&b.ops, &twice);
        assert!(
            !r.passed && r.detail.contains("2 PAID bookings"),
            "{}",
            r.detail
        );
        assert!(
            r.detail.contains("3 PAID bookings for 2 seats"),
            "{}",
            r.detail
        );

        let mut shared_payment = s.clone();
        shared_payment.paid[1].payment = pay(1);
        let r = unique_ids(&b.ops, &shared_payment);
        assert!(!r.passed && r.detail.contains("pays for 2"), "{}", r.detail);

        // admitted twice with nothing in between
        let mut again = Builder::default();
        again.admit(1, 0, admitted()).admit(1, 100, admitted());
        let r = unique_ids(&again.ops, &s);
        assert!(
            !r.passed && r.detail.contains("admitted twice"),
            "{}",
            r.detail
        );
        // a release that may have happened in between makes it fine
        for outcome in [ok(OpValue::Released), Outcome::Unknown] {
            let mut b = Builder::default();
            b.admit(1, 0, admitted())
                .release(1, 50, outcome)
                .admit(1, 100, admitted());
            assert!(unique_ids(&b.ops, &s).passed);
        }
        // a release that failed, or came after the second admission, does not
        let mut b = Builder::default();
        b.admit(1, 0, admitted())
            .release(1, 50, failed())
            .admit(1, 100, admitted())
            .release(1, 200, ok(OpValue::Released));
        assert!(!unique_ids(&b.ops, &s).passed);
        // found by `chaos matrix` (ledger-trouble, seed 1): a slow admission
        // invoked first took effect last, after the fast one's undo
        let mut b = Builder::default();
        let admit = |who: u32| OpKind::Admit {
            candidate: c(who),
            level: gold(),
        };
        b.op(admit(1), (186, Some(208)), admitted())
            .op(admit(1), (188, Some(188)), admitted())
            .release(1, 193, Outcome::Unknown);
        assert!(
            unique_ids(&b.ops, &s).passed,
            "{}",
            unique_ids(&b.ops, &s).detail
        );
        // the same two admissions with the release before both: a double booking
        let mut b = Builder::default();
        b.release(1, 100, Outcome::Unknown)
            .op(admit(1), (186, Some(208)), admitted())
            .op(admit(1), (188, Some(188)), admitted());
        assert!(!unique_ids(&b.ops, &s).passed);
        // an unknown second admission is no double booking
        let mut b = Builder::default();
        b.admit(1, 0, admitted()).admit(1, 100, Outcome::Unknown);
        assert!(unique_ids(&b.ops, &s).passed);
    }

    #[test]
    fn total_queue_wants_exactly_one_email_per_paid_booking() {
        let mut s = state(2, 2);
        s.paid = paid(&[1, 2]);
        s.emails = emails(&[2, 1]);
        let mut b = Builder::default();
        b.confirm(1, 0, ok(OpValue::Paid))
            .confirm(2, 0, Outcome::Unknown)
            .confirm(3, 0, Outcome::Unknown)
            .confirm(4, 0, failed());
        let r = total_queue(&b.ops, &s);
        assert!(r.passed, "{}", r.detail);

        let mut lost = s.clone();
        lost.emails = emails(&[1]);
        let r = total_queue(&b.ops, &lost);
        assert!(!r.passed && r.detail.contains("no email"), "{}", r.detail);
        let mut duplicated = s.clone();
        duplicated.emails = emails(&[1, 2, 2]);
        let r = total_queue(&b.ops, &duplicated);
        assert!(!r.passed && r.detail.contains("2 emails"), "{}", r.detail);
        // repeats only by the email sweep: one per recovered send
        let recovered = |n: u32| EmailSent {
            candidate: c(n),
            payment: pay(n),
            recovered: true,
        };
        let mut swept = s.clone();
        swept.emails = emails(&[1, 2]);
        swept.emails.extend([recovered(2), recovered(2)]);
        let r = total_queue(&b.ops, &swept);
        assert!(r.passed, "{}", r.detail);
        swept.emails.extend(emails(&[2]));
        let r = total_queue(&b.ops, &swept);
        assert!(
            !r.passed && r.detail.contains("4 emails, 2 of them recovered"),
            "{}",
            r.detail
        );
        let mut stray = s.clone();
        stray.emails = emails(&[1, 2, 5]);
        let r = total_queue(&b.ops, &stray);
        assert!(!r.passed && r.detail.contains("not PAID"), "{}", r.detail);

        // a confirmation acknowledged but not PAID at the end: lost
        let mut lost_paid = s.clone();
        lost_paid.paid = paid(&[2]);
        lost_paid.emails = emails(&[2]);
        let r = total_queue(&b.ops, &lost_paid);
        assert!(!r.passed && r.detail.contains("acknowledged, booking not PAID"));
        assert_eq!(r.figure, 1.0);

        // an email acknowledged as sent but never delivered
        let mut e = Builder::default();
        e.op(
            OpKind::Email {
                candidate: c(3),
                payment: pay(3),
            },
            (0, Some(5)),
            ok(OpValue::Sent),
        );
        assert!(!total_queue(&e.ops, &s).passed);
        let mut unknown = Builder::default();
        unknown.op(
            OpKind::Email {
                candidate: c(3),
                payment: pay(3),
            },
            (0, None),
            Outcome::Unknown,
        );
        assert!(total_queue(&unknown.ops, &s).passed);
    }

    #[test]
    fn no_paid_booking_is_ever_released() {
        let mut s = state(1, 2);
        s.paid = paid(&[1]);
        let mut b = Builder::default();
        b.admit(1, 0, admitted())
            .admit(2, 0, admitted())
            .confirm(1, 10, ok(OpValue::Paid))
            .release(
                1,
                20,
                ok(OpValue::Refused {
                    reason: "paid".into(),
                }),
            )
            .release(1, 30, Outcome::Unknown)
            .release(2, 30, ok(OpValue::Released));
        let r = no_paid_released(&b.ops, &s);
        assert!(r.passed, "{}", r.detail);

        let mut released_paid = Builder::default();
        released_paid.release(1, 30, ok(OpValue::Released));
        let r = no_paid_released(&released_paid.ops, &s);
        assert!(
            !r.passed && r.detail.contains("which is PAID"),
            "{}",
            r.detail
        );

        // confirmed paid, then released, and gone from the final state
        let mut gone = Builder::default();
        gone.confirm(2, 0, ok(OpValue::Paid))
            .release(2, 30, ok(OpValue::Released));
        let r = no_paid_released(&gone.ops, &s);
        assert!(
            !r.passed && r.detail.contains("confirmed PAID at 5 ms"),
            "{}",
            r.detail
        );
        // a release that began before the confirmation completed is not caught
        // by order (it may have come first), and the booking is not PAID
        let mut racing = Builder::default();
        racing
            .release(2, 0, ok(OpValue::Released))
            .confirm(2, 2, ok(OpValue::Paid));
        assert!(no_paid_released(&racing.ops, &s).passed);
        // an unknown confirmation does not make a release a violation
        let mut maybe = Builder::default();
        maybe
            .confirm(2, 0, Outcome::Unknown)
            .release(2, 30, ok(OpValue::Released));
        assert!(no_paid_released(&maybe.ops, &s).passed);
    }

    #[test]
    fn details_are_bounded_and_check_all_runs_each() {
        let mut s = state(0, 100);
        s.paid = paid(&(1..=30).collect::<Vec<_>>());
        let r = total_queue(&[], &s);
        assert_eq!(r.figure, 30.0);
        assert!(r.detail.contains("and 20 more"), "{}", r.detail);
        let names: Vec<String> = check_all(&[], &FinalState::default())
            .into_iter()
            .map(|r| {
                assert!(r.passed);
                r.name
            })
            .collect();
        assert_eq!(
            names,
            [
                "counter_bounds",
                "unique_ids",
                "total_queue",
                "no_paid_released"
            ]
        );
    }
}
