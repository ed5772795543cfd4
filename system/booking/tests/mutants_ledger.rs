//! The ledger's reference model, as the adapters' property tests read it:
//! payment guards on paid and extend, the stale-held query, the invariant.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use booking::{CandidateHash, Hold, HoldState, Level, Model, PaymentId, RequestToken, Step};

fn level(s: &str) -> Level {
    Level::parse(s).unwrap()
}
fn token(s: &str) -> RequestToken {
    RequestToken::parse(s).unwrap()
}
fn pay(s: &str) -> PaymentId {
    PaymentId::parse(s).unwrap()
}

/// An open sale of one level "a" with these candidates eligible.
fn sale(cap: u32, candidates: &[&str]) -> (Model, Vec<CandidateHash>) {
    let mut m = Model::new(&[(level("a"), cap)]);
    let cs: Vec<_> = candidates.iter().map(|c| CandidateHash::of(c)).collect();
    m.load_candidates(&cs);
    m.open = true;
    (m, cs)
}

/// `c` admitted with token `t` and held with payment `p` until `deadline_ms`.
fn hold(m: &mut Model, c: &CandidateHash, t: &str, p: &str, deadline_ms: u64) {
    m.admit(c, &level("a"), &token(t), 1);
    assert_eq!(
        m.attach_payment(c, &token(t), &pay(p), deadline_ms),
        Step::Done
    );
}

fn deadline(m: &Model, c: &CandidateHash) -> u64 {
    match m.holds[c].state {
        HoldState::Held { deadline_ms, .. } => deadline_ms,
        HoldState::Pending { .. } => panic!("pending"),
    }
}

#[test]
fn marking_another_payment_paid_changes_nothing() {
    let (mut m, cs) = sale(2, &["x"]);
    hold(&mut m, &cs[0], "t1", "P1", 100);
    let before = m.clone();
    assert_eq!(m.mark_paid(&cs[0], &pay("P2")), Step::NoMatch);
    assert_eq!(m, before);
    assert!(m.paid.is_empty());
    assert_eq!(m.mark_paid(&cs[0], &pay("P1")), Step::Done);
    assert_eq!(m.paid[&cs[0]], (level("a"), pay("P1")));
}

#[test]
fn a_pending_hold_cannot_be_marked_paid() {
    let (mut m, cs) = sale(2, &["x"]);
    m.admit(&cs[0], &level("a"), &token("t1"), 1);
    assert_eq!(m.mark_paid(&cs[0], &pay("P1")), Step::NoMatch);
    assert!(m.paid.is_empty());
}

#[test]
fn extending_another_payment_leaves_the_deadline() {
    let (mut m, cs) = sale(2, &["x"]);
    hold(&mut m, &cs[0], "t1", "P1", 100);
    assert_eq!(m.extend(&cs[0], &pay("P2"), 999), Step::NoMatch);
    assert_eq!(deadline(&m, &cs[0]), 100);
    assert_eq!(m.extend(&cs[0], &pay("P1"), 700), Step::Done);
    assert_eq!(deadline(&m, &cs[0]), 700);
    assert_eq!(m.mark_paid(&cs[0], &pay("P1")), Step::Done);
    assert_eq!(m.extend(&cs[0], &pay("P1"), 900), Step::Paid);
}

#[test]
fn stale_held_lists_holds_due_at_or_before_the_cut_earliest_first() {
    let (mut m, cs) = sale(5, &["w", "x", "y", "z", "p"]);
    hold(&mut m, &cs[0], "t0", "P0", 300);
    hold(&mut m, &cs[1], "t1", "P1", 100);
    hold(&mut m, &cs[2], "t2", "P2", 300);
    hold(&mut m, &cs[3], "t3", "P3", 301);
    // a pending hold is never a stale held one
    m.admit(&cs[4], &level("a"), &token("t4"), 0);

    let due = m.stale_held(300, 10);
    let deadlines: Vec<u64> = due
        .iter()
        .map(|(_, h)| match h.state {
            HoldState::Held { deadline_ms, .. } => deadline_ms,
            HoldState::Pending { .. } => panic!("pending listed"),
        })
        .collect();
    assert_eq!(deadlines, vec![100, 300, 300], "the cut itself is included");
    assert_eq!(due[0].0, cs[1]);
    assert!(due[1].0 < due[2].0, "ties by candidate");
    let both: Vec<&CandidateHash> = due[1..].iter().map(|(c, _)| c).collect();
    assert!(both.contains(&&cs[0]) && both.contains(&&cs[2]));
    assert_eq!(
        due[0].1,
        Hold {
            level: level("a"),
            token: token("t1"),
            state: HoldState::Held {
                payment_id: pay("P1"),
                deadline_ms: 100
            }
        }
    );

    assert!(m.stale_held(99, 10).is_empty());
    assert_eq!(m.stale_held(100, 10).len(), 1);
    assert_eq!(m.stale_held(1_000, 10).len(), 4);
    assert_eq!(
        m.stale_held(1_000, 2),
        due[..2].to_vec(),
        "at most the limit"
    );
}

#[test]
fn the_invariant_catches_a_count_that_is_not_the_holds_and_paid() {
    let (mut m, cs) = sale(3, &["x", "y"]);
    m.check().unwrap();
    hold(&mut m, &cs[0], "t1", "P1", 100);
    m.admit(&cs[1], &level("a"), &token("t2"), 1);
    m.mark_paid(&cs[0], &pay("P1"));
    m.check().unwrap();

    let mut drifted = m.clone();
    drifted.levels.insert(level("a"), (3, 3));
    let err = drifted.check().unwrap_err();
    assert!(err.contains("count 3 != holds 1 + paid 1"), "{err}");

    let mut lost = m.clone();
    lost.levels.insert(level("a"), (3, 1));
    assert!(lost.check().is_err());
}

#[test]
fn the_invariant_catches_a_count_above_the_cap() {
    let (mut m, cs) = sale(2, &["x", "y"]);
    hold(&mut m, &cs[0], "t1", "P1", 100);
    hold(&mut m, &cs[1], "t2", "P2", 100);
    m.check().unwrap();
    m.levels.insert(level("a"), (1, 2));
    let err = m.check().unwrap_err();
    assert!(err.contains("above cap"), "{err}");
}
