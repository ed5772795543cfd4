//! THE property test: random operation sequences run through the reference
//! [`Model`], the embedded ledger and the Redis ledger give the same answer to
//! every operation and the same counters after every step; at the end every
//! candidate's hold and payment agree and the model's invariant holds.
//!
//! Candidates, tokens and payment IDs come from small pools so guards both
//! match and miss; some candidates are not on the list; levels have small
//! caps, and one level name is unknown; the sale opens and closes; time only
//! moves forward, sometimes not at all (ties in `stale_pending`).
//!
//! A failure prints the shrunk case; `PROPTEST_CASES` runs more.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/redis_server.rs"]
mod redis_server;

use std::sync::atomic::{AtomicU32, Ordering};

use booking::Bug;
use booking::ledger::{Admission, Counters, Hold, HoldState, Ledger, LedgerError, Model, Step};
use booking::{CandidateHash, Level, PaymentId, RequestToken, SaleId};
use booking_embedded::ledger::EmbeddedLedger;
use booking_redis::RedisLedger;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use redis_server::RedisServer;

/// Cases per run (the default; `PROPTEST_CASES` overrides).
const CASES: u32 = 64;
/// Operations per case, at most.
const OPS_MAX: usize = 60;
/// Operations per case, at least (before shrinking).
const OPS_MIN: usize = 10;
/// Candidates in a case; the first `ELIGIBLE` are loaded before the sale opens.
const CANDIDATES: usize = 6;
const ELIGIBLE: usize = 4;
const TOKENS: usize = 3;
const PAYMENTS: usize = 3;
/// Level names; a case uses the first 2 or 3, and `UNKNOWN_LEVEL` never.
const LEVELS: [&str; 3] = ["a", "b", "c"];
const UNKNOWN_LEVEL: &str = "zz";

/// A guard's argument: the one the candidate's live hold (or paid mark) has,
/// so the guard matches, or one from the pool, which may or may not match.
/// Resolved against the model just before the step, so all three backends get
/// the same argument.
#[derive(Debug, Clone, Copy)]
enum Pick {
    Live,
    Pool(usize),
}

/// A guarded step's candidate: any, or (so steps meet holds often) the k-th
/// candidate holding a seat, resolved against the model like [`Pick`].
#[derive(Debug, Clone, Copy)]
enum Who {
    Any(usize),
    Holder(usize),
}

#[derive(Debug, Clone)]
enum Op {
    Admit {
        c: usize,
        level: usize,
        t: usize,
    },
    Attach {
        c: Who,
        t: Pick,
        p: usize,
        deadline_ms: u64,
    },
    Undo {
        c: Who,
        t: Pick,
    },
    Release {
        c: Who,
        p: Pick,
    },
    MarkPaid {
        c: Who,
        p: Pick,
    },
    Extend {
        c: Who,
        p: Pick,
        deadline_ms: u64,
    },
    SetOpen(bool),
    Load(Vec<usize>),
    Stale {
        back_ms: u64,
        limit: usize,
    },
    StaleHeld {
        deadline_ms: u64,
        limit: usize,
    },
    Hold {
        c: usize,
    },
    Paid {
        c: usize,
    },
    Reset,
}

/// One step: time moves forward by `dt_ms`, then `op` runs at the new time.
#[derive(Debug, Clone)]
struct TimedOp {
    dt_ms: u64,
    op: Op,
}

#[derive(Debug, Clone)]
struct Case {
    caps: Vec<u32>,
    ops: Vec<TimedOp>,
}

fn op() -> impl Strategy<Value = Op> {
    // mostly candidates on the list, so steps meet holds; sometimes the others
    let c = prop_oneof![4 => 0..ELIGIBLE, 1 => ELIGIBLE..CANDIDATES];
    let t = 0..TOKENS;
    let p = 0..PAYMENTS;
    // guarded steps mostly meet a hold they fit, with its own token or
    // payment, so they succeed about as often as they miss
    let who = prop_oneof![
        1 => c.clone().prop_map(Who::Any),
        3 => (0..CANDIDATES).prop_map(Who::Holder),
    ];
    let live_t = prop_oneof![2 => Just(Pick::Live), 1 => (0..TOKENS).prop_map(Pick::Pool)];
    let live_p = prop_oneof![2 => Just(Pick::Live), 1 => (0..PAYMENTS).prop_map(Pick::Pool)];
    // mostly the first two levels (every case has them); sometimes the third
    // (unknown in a two-level case) or one no case has
    let level = prop_oneof![6 => 0..2usize, 1 => 2..=LEVELS.len()];
    // weights out of 72: a closed sale (a close or a reset, 2/72) reopens in
    // about 9 steps (8/72), so roughly a fifth of the steps meet it closed
    prop_oneof![
        20 => (c.clone(), level, t).prop_map(|(c, level, t)| Op::Admit { c, level, t }),
        10 => (who.clone(), live_t.clone(), p, 0..200u64)
            .prop_map(|(c, t, p, deadline_ms)| Op::Attach { c, t, p, deadline_ms }),
        4 => (who.clone(), live_t).prop_map(|(c, t)| Op::Undo { c, t }),
        4 => (who.clone(), live_p.clone()).prop_map(|(c, p)| Op::Release { c, p }),
        6 => (who.clone(), live_p.clone()).prop_map(|(c, p)| Op::MarkPaid { c, p }),
        4 => (who, live_p, 0..200u64)
            .prop_map(|(c, p, deadline_ms)| Op::Extend { c, p, deadline_ms }),
        8 => Just(Op::SetOpen(true)),
        1 => Just(Op::SetOpen(false)),
        3 => proptest::collection::vec(0..CANDIDATES, 0..=CANDIDATES).prop_map(Op::Load),
        5 => (0..6u64, 0..4usize).prop_map(|(back_ms, limit)| Op::Stale { back_ms, limit }),
        5 => (0..220u64, 0..4usize)
            .prop_map(|(deadline_ms, limit)| Op::StaleHeld { deadline_ms, limit }),
        3 => c.clone().prop_map(|c| Op::Hold { c }),
        3 => c.prop_map(|c| Op::Paid { c }),
        1 => Just(Op::Reset),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    let cap = prop_oneof![1 => Just(0u32), 6 => 1..=3u32];
    let timed_op = (0..3u64, op()).prop_map(|(dt_ms, op)| TimedOp { dt_ms, op });
    (
        proptest::collection::vec(cap, 2..=LEVELS.len()),
        proptest::collection::vec(timed_op, OPS_MIN..=OPS_MAX),
    )
        .prop_map(|(caps, ops)| Case { caps, ops })
}

/// Every answer an operation can give, so three backends compare as values.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Admission(Admission),
    Step(Step),
    Done,
    New(u64),
    Stale(Vec<(CandidateHash, Hold)>),
    Hold(Option<Hold>),
    Paid(Option<PaymentId>),
}

struct Pools {
    candidates: Vec<CandidateHash>,
    tokens: Vec<RequestToken>,
    payments: Vec<PaymentId>,
    levels: Vec<(Level, u32)>,
}

impl Pools {
    fn new(caps: &[u32]) -> Pools {
        Pools {
            candidates: (0..CANDIDATES)
                .map(|i| CandidateHash::of(&format!("candidate-{i}")))
                .collect(),
            tokens: (0..TOKENS)
                .map(|i| RequestToken::parse(&format!("t{i}")).unwrap())
                .collect(),
            payments: (0..PAYMENTS)
                .map(|i| PaymentId::parse(&format!("P{i}")).unwrap())
                .collect(),
            levels: caps
                .iter()
                .zip(LEVELS)
                .map(|(cap, name)| (Level::parse(name).unwrap(), *cap))
                .collect(),
        }
    }

    fn level(&self, i: usize) -> Level {
        Level::parse(LEVELS.get(i).copied().unwrap_or(UNKNOWN_LEVEL)).unwrap()
    }

    /// `Who::Holder(k)`: the k-th candidate whose hold `fits` the step (a
    /// pending hold to attach to, a held one to release, pay or extend), or
    /// failing that the k-th candidate.
    fn who(&self, m: &Model, who: Who, fits: fn(&HoldState) -> bool) -> usize {
        match who {
            Who::Any(c) => c,
            Who::Holder(k) => {
                let holders: Vec<usize> = (0..CANDIDATES)
                    .filter(|c| {
                        m.holds
                            .get(&self.candidates[*c])
                            .is_some_and(|h| fits(&h.state))
                    })
                    .collect();
                holders.get(k % holders.len().max(1)).copied().unwrap_or(k)
            }
        }
    }

    fn token(&self, m: &Model, c: usize, pick: Pick) -> RequestToken {
        match pick {
            Pick::Live => m
                .holds
                .get(&self.candidates[c])
                .map(|h| h.token.clone())
                .unwrap_or_else(|| self.tokens[0].clone()),
            Pick::Pool(i) => self.tokens[i].clone(),
        }
    }

    fn payment(&self, m: &Model, c: usize, pick: Pick) -> PaymentId {
        let c = &self.candidates[c];
        match pick {
            Pick::Live => match m.holds.get(c).map(|h| &h.state) {
                Some(HoldState::Held { payment_id, .. }) => payment_id.clone(),
                _ => m
                    .paid
                    .get(c)
                    .map(|(_, p)| p.clone())
                    .unwrap_or_else(|| self.payments[0].clone()),
            },
            Pick::Pool(i) => self.payments[i].clone(),
        }
    }
}

fn pending(state: &HoldState) -> bool {
    matches!(state, HoldState::Pending { .. })
}
fn held(state: &HoldState) -> bool {
    matches!(state, HoldState::Held { .. })
}
fn any(_: &HoldState) -> bool {
    true
}

/// An operation with every argument resolved.
#[derive(Debug, Clone)]
enum Call {
    Admit(CandidateHash, Level, RequestToken, u64),
    Attach(CandidateHash, RequestToken, PaymentId, u64),
    Undo(CandidateHash, RequestToken),
    Release(CandidateHash, PaymentId),
    MarkPaid(CandidateHash, PaymentId),
    Extend(CandidateHash, PaymentId, u64),
    SetOpen(bool),
    Load(Vec<CandidateHash>),
    Stale(u64, usize),
    StaleHeld(u64, usize),
    Hold(CandidateHash),
    Paid(CandidateHash),
    Reset(Vec<(Level, u32)>),
}

impl Pools {
    /// Resolves `op` at `now_ms` against the model's state before the step.
    fn call(&self, m: &Model, op: &Op, now_ms: u64) -> Call {
        let cand = |i: usize| self.candidates[i].clone();
        match *op {
            Op::Admit { c, level, t } => {
                Call::Admit(cand(c), self.level(level), self.tokens[t].clone(), now_ms)
            }
            Op::Attach {
                c,
                t,
                p,
                deadline_ms,
            } => {
                let c = self.who(m, c, pending);
                Call::Attach(
                    cand(c),
                    self.token(m, c, t),
                    self.payments[p].clone(),
                    deadline_ms,
                )
            }
            Op::Undo { c, t } => {
                let c = self.who(m, c, any);
                Call::Undo(cand(c), self.token(m, c, t))
            }
            Op::Release { c, p } => {
                let c = self.who(m, c, held);
                Call::Release(cand(c), self.payment(m, c, p))
            }
            Op::MarkPaid { c, p } => {
                let c = self.who(m, c, held);
                Call::MarkPaid(cand(c), self.payment(m, c, p))
            }
            Op::Extend { c, p, deadline_ms } => {
                let c = self.who(m, c, held);
                Call::Extend(cand(c), self.payment(m, c, p), deadline_ms)
            }
            Op::SetOpen(open) => Call::SetOpen(open),
            Op::Load(ref cs) => Call::Load(cs.iter().map(|i| cand(*i)).collect()),
            Op::Stale { back_ms, limit } => Call::Stale(now_ms.saturating_sub(back_ms), limit),
            Op::StaleHeld { deadline_ms, limit } => Call::StaleHeld(deadline_ms, limit),
            Op::Hold { c } => Call::Hold(cand(c)),
            Op::Paid { c } => Call::Paid(cand(c)),
            Op::Reset => Call::Reset(self.levels.clone()),
        }
    }
}

fn sale() -> SaleId {
    SaleId::parse("equivalence").unwrap()
}

/// Runs `call` on the model directly: the reference answer.
fn on_model(m: &mut Model, call: &Call) -> Answer {
    match call {
        Call::Admit(c, level, t, now_ms) => Answer::Admission(m.admit(c, level, t, *now_ms)),
        Call::Attach(c, t, p, deadline_ms) => Answer::Step(m.attach_payment(c, t, p, *deadline_ms)),
        Call::Undo(c, t) => Answer::Step(
            m.undo_admission(c, t)
                .expect("a consistent model never underflows"),
        ),
        Call::Release(c, p) => Answer::Step(
            m.release(c, p)
                .expect("a consistent model never underflows"),
        ),
        Call::MarkPaid(c, p) => Answer::Step(m.mark_paid(c, p)),
        Call::Extend(c, p, deadline_ms) => Answer::Step(m.extend(c, p, *deadline_ms)),
        Call::SetOpen(open) => {
            m.open = *open;
            Answer::Done
        }
        Call::Load(cs) => Answer::New(m.load_candidates(cs)),
        Call::Stale(before_ms, limit) => Answer::Stale(m.stale_pending(*before_ms, *limit)),
        Call::StaleHeld(before_ms, limit) => Answer::Stale(m.stale_held(*before_ms, *limit)),
        Call::Hold(c) => Answer::Hold(m.holds.get(c).cloned()),
        Call::Paid(c) => Answer::Paid(m.paid.get(c).map(|(_, p)| p.clone())),
        Call::Reset(levels) => {
            *m = Model::new(levels);
            Answer::Done
        }
    }
}

/// Runs `call` through a ledger.
async fn on_ledger(l: &dyn Ledger, call: &Call) -> Answer {
    let s = sale();
    match call {
        Call::Admit(c, level, t, now_ms) => {
            Answer::Admission(l.admit(&s, c, level, t, *now_ms).await.unwrap())
        }
        Call::Attach(c, t, p, deadline_ms) => {
            Answer::Step(l.attach_payment(&s, c, t, p, *deadline_ms).await.unwrap())
        }
        Call::Undo(c, t) => Answer::Step(l.undo_admission(&s, c, t).await.unwrap()),
        Call::Release(c, p) => Answer::Step(l.release(&s, c, p).await.unwrap()),
        Call::MarkPaid(c, p) => Answer::Step(l.mark_paid(&s, c, p).await.unwrap()),
        Call::Extend(c, p, deadline_ms) => {
            Answer::Step(l.extend(&s, c, p, *deadline_ms).await.unwrap())
        }
        Call::SetOpen(open) => {
            l.set_open(&s, *open).await.unwrap();
            Answer::Done
        }
        Call::Load(cs) => Answer::New(l.load_candidates(&s, cs).await.unwrap()),
        Call::StaleHeld(before_ms, limit) => {
            Answer::Stale(l.stale_held(&s, *before_ms, *limit).await.unwrap())
        }
        Call::Stale(before_ms, limit) => {
            Answer::Stale(l.stale_pending(&s, *before_ms, *limit).await.unwrap())
        }
        Call::Hold(c) => Answer::Hold(l.hold(&s, c).await.unwrap()),
        Call::Paid(c) => Answer::Paid(l.paid(&s, c).await.unwrap()),
        Call::Reset(levels) => {
            l.reset(&s, levels).await.unwrap();
            Answer::Done
        }
    }
}

async fn run_case(url: &str, prefix: &str, case: &Case) -> Result<(), TestCaseError> {
    let pools = Pools::new(&case.caps);
    let redis = RedisLedger::connect(url, 4, prefix).await.unwrap();
    let embedded = EmbeddedLedger::new();
    let ledgers: [(&str, &dyn Ledger); 2] = [("embedded", &embedded), ("redis", &redis)];

    // the sale as an operator sets it up: reset, load the list, open
    let mut model = Model::new(&pools.levels);
    let eligible = &pools.candidates[..ELIGIBLE];
    model.load_candidates(eligible);
    model.open = true;
    for (_, l) in ledgers {
        l.reset(&sale(), &pools.levels).await.unwrap();
        l.load_candidates(&sale(), eligible).await.unwrap();
        l.set_open(&sale(), true).await.unwrap();
    }

    let mut now_ms = 1_000;
    for (i, TimedOp { dt_ms, op }) in case.ops.iter().enumerate() {
        now_ms += dt_ms;
        let call = pools.call(&model, op, now_ms);
        let want = on_model(&mut model, &call);
        prop_assert!(
            model.check().is_ok(),
            "step {i} {call:?}: {:?}",
            model.check()
        );
        let counters: Counters = model.counters();
        for (name, l) in ledgers {
            let got = on_ledger(l, &call).await;
            prop_assert_eq!(&got, &want, "step {} {:?}: {}", i, call, name);
            let got = l.counters(&sale()).await.unwrap();
            prop_assert_eq!(
                &got,
                &counters,
                "counters after step {} {:?}: {}",
                i,
                call,
                name
            );
        }
    }

    for c in &pools.candidates {
        let hold = model.holds.get(c).cloned();
        let paid = model.paid.get(c).map(|(_, p)| p.clone());
        for (name, l) in ledgers {
            prop_assert_eq!(
                &l.hold(&sale(), c).await.unwrap(),
                &hold,
                "hold of {}: {}",
                c,
                name
            );
            prop_assert_eq!(
                &l.paid(&sale(), c).await.unwrap(),
                &paid,
                "paid of {}: {}",
                c,
                name
            );
        }
    }
    prop_assert_eq!(
        &redis
            .stale_pending(&sale(), u64::MAX, usize::MAX)
            .await
            .unwrap(),
        &model.stale_pending(u64::MAX, usize::MAX),
        "every pending hold"
    );
    Ok(())
}

#[test]
fn redis_and_embedded_ledgers_answer_as_the_model() {
    let server = RedisServer::start();
    let url = server.url();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(CASES);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let run = AtomicU32::new(0);
    let result = runner.run(&case(), |case| {
        // a fresh key prefix per case (shrinking runs count as cases too)
        let n = run.fetch_add(1, Ordering::Relaxed);
        rt.block_on(run_case(&url, &format!("eq-{n}"), &case))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// An undo that would take a counter below zero is the same corrupt-ledger
/// error from the model, the embedded ledger and Redis, and changes nothing
/// in any of them. The state (a live hold counted in a level at zero) is one
/// no correct sequence reaches: the model's count is set directly, Redis's
/// counter is overwritten, and the embedded ledger gets there through the
/// zoo's `unguarded_undo`, whose repeated undo decrements again.
#[test]
fn an_undo_below_zero_is_the_same_corrupt_ledger_error_everywhere() {
    let server = RedisServer::start();
    let url = server.url();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let pools = Pools::new(&[2]);
        let (c0, c1) = (&pools.candidates[0], &pools.candidates[1]);
        let (t0, t1) = (&pools.tokens[0], &pools.tokens[1]);
        let p1 = &pools.payments[1];
        let a = pools.level(0);
        let redis = RedisLedger::connect(&url, 4, "eq-underflow").await.unwrap();
        let embedded = EmbeddedLedger::with_bugs(&booking::Bugs::of([Bug::UnguardedUndo]));
        let ledgers: [(&str, &dyn Ledger); 2] = [("embedded", &embedded), ("redis", &redis)];

        // two admissions in level a, the second one held with P1; the first undone
        let mut model = Model::new(&pools.levels);
        model.load_candidates(&pools.candidates);
        model.open = true;
        model.admit(c0, &a, t0, 1);
        model.admit(c1, &a, t1, 1);
        model.attach_payment(c1, t1, p1, 100);
        assert_eq!(model.undo_admission(c0, t0), Ok(Step::Done));
        for (name, l) in ledgers {
            l.reset(&sale(), &pools.levels).await.unwrap();
            l.load_candidates(&sale(), &pools.candidates).await.unwrap();
            l.set_open(&sale(), true).await.unwrap();
            l.admit(&sale(), c0, &a, t0, 1).await.unwrap();
            l.admit(&sale(), c1, &a, t1, 1).await.unwrap();
            l.attach_payment(&sale(), c1, t1, p1, 100).await.unwrap();
            assert_eq!(
                l.undo_admission(&sale(), c0, t0).await,
                Ok(Step::Done),
                "{name}"
            );
        }
        // corrupt: level a's count loses the seat c1 still holds
        model.levels.insert(a.clone(), (2, 0));
        assert_eq!(
            embedded.undo_admission(&sale(), c0, t0).await,
            Ok(Step::NoMatch),
            "the zoo's repeated undo decrements again"
        );
        let mut conn = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = redis::cmd("HSET")
            .arg("eq-underflow:{sale:equivalence}:counts")
            .arg(a.as_str())
            .arg(0)
            .query_async(&mut conn)
            .await
            .unwrap();
        let corrupt = model.counters();
        assert_eq!(corrupt.levels[0].count, 0);
        for (name, l) in ledgers {
            assert_eq!(l.counters(&sale()).await.unwrap(), corrupt, "{name}");
        }

        let want = Err(LedgerError::CounterUnderflow {
            level: a.clone(),
            candidate: c1.clone(),
        });
        assert_eq!(model.undo_admission(c1, t1), want);
        assert_eq!(model.release(c1, p1), want);
        for (name, l) in ledgers {
            assert_eq!(
                l.undo_admission(&sale(), c1, t1).await,
                want,
                "undo: {name}"
            );
            assert_eq!(l.release(&sale(), c1, p1).await, want, "release: {name}");
            // nothing changed: the count stays at zero, the hold stays
            assert_eq!(l.counters(&sale()).await.unwrap(), corrupt, "{name}");
            assert_eq!(
                l.hold(&sale(), c1).await.unwrap().as_ref(),
                model.holds.get(c1),
                "{name}"
            );
            // a guard that misses is still a miss, not an error
            assert_eq!(
                l.release(&sale(), c1, &pools.payments[2]).await,
                Ok(Step::NoMatch),
                "{name}"
            );
        }
        assert!(model.holds.contains_key(c1));
    });
}
