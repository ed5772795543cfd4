//! The seat ledger: the one atomic decision. Redis owns it in production.
//!
//! Per sale: an open flag, per level a cap and a counter, per candidate an
//! eligibility mark, their current hold and their paid mark. Admission checks
//! and acts in one step; every undo is guarded by the request token or the
//! payment ID, so a second run is a no-op and a counter never goes below zero
//! (an undo that would is a corrupt ledger, [`LedgerError::CounterUnderflow`],
//! never clamped); a paid candidate is never touched by an undo.
//!
//! [`Model`] is the reference semantics as a pure state machine. The embedded
//! ledger is this model behind a lock; the Redis ledger's Lua scripts must give
//! the same answer to every operation, which a property test checks.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::ids::{CandidateHash, Level, PaymentId, RequestToken, SaleId};

/// Where a candidate's hold stands in the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum HoldState {
    /// Admitted; the payment is being created.
    Pending {
        /// When the admission was made, ms since the epoch.
        admitted_ms: u64,
    },
    /// The payment exists; the seat is held until the deadline.
    Held {
        /// The gateway payment.
        payment_id: PaymentId,
        /// The hold deadline, ms since the epoch.
        deadline_ms: u64,
    },
}

/// A candidate's current hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    /// The level the seat is counted in.
    pub level: Level,
    /// The admission request that made it.
    pub token: RequestToken,
    /// Pending or held.
    #[serde(flatten)]
    pub state: HoldState,
}

/// The answer to an admission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Admission {
    /// Counted; the hold is pending under the request token.
    Admitted {
        /// The level's count after this admission.
        count: u32,
    },
    /// The level is at its cap.
    LevelFull,
    /// The sale is not open.
    SaleClosed,
    /// The candidate is not on the list.
    NotEligible,
    /// The level does not exist in this sale.
    UnknownLevel,
    /// The candidate already holds a seat: here it is.
    AlreadyHolding {
        /// The live hold.
        hold: Hold,
    },
    /// The candidate has paid already.
    AlreadyPaid {
        /// Their payment.
        payment_id: PaymentId,
    },
}

/// The answer to a guarded step (attach, undo, release, mark paid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// The guard matched and the step was taken.
    Done,
    /// The guard did not match (already done, another request's hold, or
    /// nothing there): nothing changed.
    NoMatch,
    /// The candidate is paid: nothing changed, and no undo ever will.
    Paid,
}

/// One level's figures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LevelCount {
    /// Level.
    pub level: Level,
    /// Seats in it.
    pub cap: u32,
    /// Seats counted (pending + held + paid).
    pub count: u32,
    /// The most seats ever counted at once since the sale was set up (or
    /// reset): the count an admission reached, kept by the admission itself,
    /// so a level that was full for a moment between two samples is seen
    /// full. What `at_cap_when_demand_exceeded` reads (a level that turned
    /// candidates away must have reached its cap) and `never_above_cap`.
    #[serde(default)]
    pub peak: u32,
}

/// A sale's figures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Whether admissions are open.
    pub open: bool,
    /// Per level, in level order.
    pub levels: Vec<LevelCount>,
    /// Candidates marked paid (each counted in its level's `count`), read
    /// in the same step as the counts, so `count - paid` is the seats held
    /// or pending at that instant. What a live view needs without reading
    /// every record.
    #[serde(default)]
    pub paid: u64,
}

/// A ledger failure: the backend could not answer (not a refusal).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LedgerError {
    /// The backend is unreachable, timed out or failed.
    #[error("ledger unavailable: {0}")]
    Unavailable(String),
    /// The backend answered something the adapter cannot read.
    #[error("ledger answered something unexpected: {0}")]
    Corrupt(String),
    /// An undo (`undo_admission`, `release`) found the level its hold is
    /// counted in at zero, or without a counter: the ledger is corrupt (every
    /// hold is counted, so the count can never be below the holds). Nothing
    /// was changed: the hold stays, the counter stays. A programmer error,
    /// never clamped away; the adapters log it at error level, and the
    /// audit's `ledger_matches_records` sees the count below the records.
    #[error(
        "corrupt ledger: undoing the hold of {candidate} would take level {level}'s count below zero; nothing changed"
    )]
    CounterUnderflow {
        /// The level whose counter is already zero (or missing).
        level: Level,
        /// The candidate whose hold the undo would have dropped.
        candidate: CandidateHash,
    },
}

/// Tries of an undo whose call failed: its answer may have been lost after it
/// took effect, and the token guard makes a repeat harmless (the zoo's
/// `unguarded_undo` is what happens without the guard).
pub const UNDO_ATTEMPTS: u32 = 2;

/// `undo_admission`, tried up to [`UNDO_ATTEMPTS`] times while it fails:
/// the API's undo and the simulation's. The caller bounds it with its own
/// deadline.
pub async fn undo_admission_retried(
    ledger: &dyn Ledger,
    sale: &SaleId,
    candidate: &CandidateHash,
    token: &RequestToken,
) -> Result<Step, LedgerError> {
    let mut answer = ledger.undo_admission(sale, candidate, token).await;
    for _ in 1..UNDO_ATTEMPTS {
        if answer.is_ok() {
            break;
        }
        answer = ledger.undo_admission(sale, candidate, token).await;
    }
    answer
}

/// The seat ledger. Every method is one atomic step.
#[async_trait]
pub trait Ledger: Send + Sync + std::fmt::Debug {
    /// Forgets the sale and sets its levels and caps; the sale starts closed
    /// with no eligible candidates.
    async fn reset(&self, sale: &SaleId, levels: &[(Level, u32)]) -> Result<(), LedgerError>;
    /// Marks candidates eligible; returns how many were new.
    async fn load_candidates(
        &self,
        sale: &SaleId,
        candidates: &[CandidateHash],
    ) -> Result<u64, LedgerError>;
    /// Opens or closes admissions.
    async fn set_open(&self, sale: &SaleId, open: bool) -> Result<(), LedgerError>;
    /// Admits a candidate to a level: see [`Model::admit`].
    async fn admit(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        level: &Level,
        token: &RequestToken,
        now_ms: u64,
    ) -> Result<Admission, LedgerError>;
    /// Pending → held with the payment: see [`Model::attach_payment`].
    async fn attach_payment(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        token: &RequestToken,
        payment_id: &PaymentId,
        deadline_ms: u64,
    ) -> Result<Step, LedgerError>;
    /// Undoes an admission by its request token: see [`Model::undo_admission`].
    async fn undo_admission(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        token: &RequestToken,
    ) -> Result<Step, LedgerError>;
    /// The payment-guarded release: see [`Model::release`].
    async fn release(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<Step, LedgerError>;
    /// Marks the candidate paid: see [`Model::mark_paid`].
    async fn mark_paid(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<Step, LedgerError>;
    /// Moves a held hold's deadline: see [`Model::extend`].
    async fn extend(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
        deadline_ms: u64,
    ) -> Result<Step, LedgerError>;
    /// A candidate's hold, if any.
    async fn hold(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
    ) -> Result<Option<Hold>, LedgerError>;
    /// A candidate's payment, if paid.
    async fn paid(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
    ) -> Result<Option<PaymentId>, LedgerError>;
    /// Pending holds admitted at or before `admitted_before_ms`, oldest first, at most `limit`.
    async fn stale_pending(
        &self,
        sale: &SaleId,
        admitted_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<(CandidateHash, Hold)>, LedgerError>;
    /// Held holds whose deadline is at or before `deadline_before_ms`,
    /// earliest deadline first (ties by candidate), at most `limit`: the
    /// reconciler looks among them for holds with no booking record (an
    /// admission message that was dead-lettered), which nothing else would
    /// ever release.
    async fn stale_held(
        &self,
        sale: &SaleId,
        deadline_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<(CandidateHash, Hold)>, LedgerError>;
    /// The open flag and every level's cap and count.
    async fn counters(&self, sale: &SaleId) -> Result<Counters, LedgerError>;
}

/// The reference semantics of one sale's ledger, as a pure state machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Model {
    /// Admissions open.
    pub open: bool,
    /// Level → (cap, count).
    pub levels: BTreeMap<Level, (u32, u32)>,
    /// Eligible candidates.
    pub eligible: BTreeSet<CandidateHash>,
    /// Live holds.
    pub holds: BTreeMap<CandidateHash, Hold>,
    /// Paid candidates and their payment.
    pub paid: BTreeMap<CandidateHash, (Level, PaymentId)>,
    /// Level → the highest count an admission reached.
    pub peaks: BTreeMap<Level, u32>,
}

impl Model {
    /// A closed sale with these levels.
    pub fn new(levels: &[(Level, u32)]) -> Model {
        Model {
            levels: levels
                .iter()
                .map(|(l, cap)| (l.clone(), (*cap, 0)))
                .collect(),
            ..Model::default()
        }
    }

    /// Marks candidates eligible; returns how many were new.
    pub fn load_candidates(&mut self, candidates: &[CandidateHash]) -> u64 {
        candidates
            .iter()
            .filter(|c| self.eligible.insert((*c).clone()))
            .count() as u64
    }

    /// In this order: closed → [`Admission::SaleClosed`]; unknown level →
    /// `UnknownLevel`; not on the list → `NotEligible`; paid → `AlreadyPaid`;
    /// holding → `AlreadyHolding`; level at cap → `LevelFull`; else count it and
    /// record a pending hold under `token`.
    pub fn admit(
        &mut self,
        candidate: &CandidateHash,
        level: &Level,
        token: &RequestToken,
        now_ms: u64,
    ) -> Admission {
        if !self.open {
            return Admission::SaleClosed;
        }
        let Some((cap, count)) = self.levels.get(level).copied() else {
            return Admission::UnknownLevel;
        };
        if !self.eligible.contains(candidate) {
            return Admission::NotEligible;
        }
        if let Some((_, payment_id)) = self.paid.get(candidate) {
            return Admission::AlreadyPaid {
                payment_id: payment_id.clone(),
            };
        }
        if let Some(hold) = self.holds.get(candidate) {
            return Admission::AlreadyHolding { hold: hold.clone() };
        }
        if count >= cap {
            return Admission::LevelFull;
        }
        self.levels.insert(level.clone(), (cap, count + 1));
        let peak = self.peaks.entry(level.clone()).or_default();
        *peak = (*peak).max(count + 1);
        self.holds.insert(
            candidate.clone(),
            Hold {
                level: level.clone(),
                token: token.clone(),
                state: HoldState::Pending {
                    admitted_ms: now_ms,
                },
            },
        );
        Admission::Admitted { count: count + 1 }
    }

    /// A pending hold made by `token` becomes held with `payment_id` until
    /// `deadline_ms`. Attaching the same payment again with the same token is
    /// `Done` and changes nothing (a retried attach must not look like a lost
    /// hold, or the caller would undo a seat with a live payment). Anything else
    /// (no hold, another token, another payment) is `NoMatch`; a paid candidate
    /// is `Paid`.
    pub fn attach_payment(
        &mut self,
        candidate: &CandidateHash,
        token: &RequestToken,
        payment_id: &PaymentId,
        deadline_ms: u64,
    ) -> Step {
        if self.paid.contains_key(candidate) {
            return Step::Paid;
        }
        match self.holds.get_mut(candidate) {
            Some(Hold {
                token: t,
                state: HoldState::Held { payment_id: p, .. },
                ..
            }) if t == token && p == payment_id => Step::Done,
            Some(hold)
                if hold.token == *token && matches!(hold.state, HoldState::Pending { .. }) =>
            {
                hold.state = HoldState::Held {
                    payment_id: payment_id.clone(),
                    deadline_ms,
                };
                Step::Done
            }
            _ => Step::NoMatch,
        }
    }

    /// Removes the candidate's hold and gives its seat back. A counter that
    /// is already zero (or missing) while the hold is counted in it is
    /// [`LedgerError::CounterUnderflow`], checked before anything changes.
    fn drop_hold(&mut self, candidate: &CandidateHash) -> Result<(), LedgerError> {
        let Some(hold) = self.holds.get(candidate) else {
            return Ok(());
        };
        match self.levels.get_mut(&hold.level) {
            Some((_, count)) if *count > 0 => *count -= 1,
            _ => {
                return Err(LedgerError::CounterUnderflow {
                    level: hold.level.clone(),
                    candidate: candidate.clone(),
                });
            }
        }
        self.holds.remove(candidate);
        Ok(())
    }

    /// Removes the hold made by `token` (pending or held) and gives its seat
    /// back. Used when create or enqueue failed, and for stale pending holds.
    /// [`LedgerError::CounterUnderflow`] if the hold's level is already at
    /// zero (nothing changes).
    pub fn undo_admission(
        &mut self,
        candidate: &CandidateHash,
        token: &RequestToken,
    ) -> Result<Step, LedgerError> {
        if self.paid.contains_key(candidate) {
            return Ok(Step::Paid);
        }
        match self.holds.get(candidate) {
            Some(hold) if hold.token == *token => {
                self.drop_hold(candidate)?;
                Ok(Step::Done)
            }
            _ => Ok(Step::NoMatch),
        }
    }

    /// Removes a held hold whose payment is `payment_id` and gives its seat back:
    /// the reconciler's and the TTL safety net's undo.
    /// [`LedgerError::CounterUnderflow`] if the hold's level is already at
    /// zero (nothing changes).
    pub fn release(
        &mut self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<Step, LedgerError> {
        if self.paid.contains_key(candidate) {
            return Ok(Step::Paid);
        }
        match self.holds.get(candidate) {
            Some(Hold {
                state: HoldState::Held { payment_id: p, .. },
                ..
            }) if p == payment_id => {
                self.drop_hold(candidate)?;
                Ok(Step::Done)
            }
            _ => Ok(Step::NoMatch),
        }
    }

    /// A held hold whose payment is `payment_id` becomes paid: the seat stays
    /// counted for good. Marking the same payment again is `Paid`.
    pub fn mark_paid(&mut self, candidate: &CandidateHash, payment_id: &PaymentId) -> Step {
        if self.paid.contains_key(candidate) {
            return Step::Paid;
        }
        match self.holds.get(candidate) {
            Some(Hold {
                level,
                state: HoldState::Held { payment_id: p, .. },
                ..
            }) if p == payment_id => {
                let level = level.clone();
                self.holds.remove(candidate);
                self.paid
                    .insert(candidate.clone(), (level, payment_id.clone()));
                Step::Done
            }
            _ => Step::NoMatch,
        }
    }

    /// Moves the deadline of a held hold whose payment is `payment_id`.
    pub fn extend(
        &mut self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
        deadline_ms: u64,
    ) -> Step {
        if self.paid.contains_key(candidate) {
            return Step::Paid;
        }
        match self.holds.get_mut(candidate) {
            Some(Hold {
                state:
                    HoldState::Held {
                        payment_id: p,
                        deadline_ms: d,
                    },
                ..
            }) if p == payment_id => {
                *d = deadline_ms;
                Step::Done
            }
            _ => Step::NoMatch,
        }
    }

    /// Pending holds admitted at or before `admitted_before_ms`, oldest first
    /// (ties by candidate), at most `limit`.
    pub fn stale_pending(
        &self,
        admitted_before_ms: u64,
        limit: usize,
    ) -> Vec<(CandidateHash, Hold)> {
        let mut stale: Vec<(u64, CandidateHash, Hold)> = self
            .holds
            .iter()
            .filter_map(|(c, h)| match h.state {
                HoldState::Pending { admitted_ms } if admitted_ms <= admitted_before_ms => {
                    Some((admitted_ms, c.clone(), h.clone()))
                }
                _ => None,
            })
            .collect();
        stale.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        stale
            .into_iter()
            .take(limit)
            .map(|(_, c, h)| (c, h))
            .collect()
    }

    /// Held holds with a deadline at or before `deadline_before_ms`, earliest
    /// deadline first (ties by candidate), at most `limit`.
    pub fn stale_held(&self, deadline_before_ms: u64, limit: usize) -> Vec<(CandidateHash, Hold)> {
        let mut stale: Vec<(u64, CandidateHash, Hold)> = self
            .holds
            .iter()
            .filter_map(|(c, h)| match h.state {
                HoldState::Held { deadline_ms, .. } if deadline_ms <= deadline_before_ms => {
                    Some((deadline_ms, c.clone(), h.clone()))
                }
                _ => None,
            })
            .collect();
        stale.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        stale
            .into_iter()
            .take(limit)
            .map(|(_, c, h)| (c, h))
            .collect()
    }

    /// The figures.
    pub fn counters(&self) -> Counters {
        Counters {
            open: self.open,
            levels: self
                .levels
                .iter()
                .map(|(l, (cap, count))| LevelCount {
                    level: l.clone(),
                    cap: *cap,
                    count: *count,
                    peak: self.peaks.get(l).copied().unwrap_or(0),
                })
                .collect(),
            paid: self.paid.len() as u64,
        }
    }

    /// Checks the model's own invariant: each level's count equals its holds
    /// plus its paid candidates, and never exceeds the cap.
    pub fn check(&self) -> Result<(), String> {
        for (level, (cap, count)) in &self.levels {
            let holds = self.holds.values().filter(|h| &h.level == level).count() as u32;
            let paid = self.paid.values().filter(|(l, _)| l == level).count() as u32;
            if *count != holds + paid {
                return Err(format!(
                    "level {level}: count {count} != holds {holds} + paid {paid}"
                ));
            }
            if count > cap {
                return Err(format!("level {level}: count {count} above cap {cap}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(s: &str) -> Level {
        Level::parse(s).unwrap()
    }
    fn token(s: &str) -> RequestToken {
        RequestToken::parse(s).unwrap()
    }
    fn pay(s: &str) -> PaymentId {
        PaymentId::parse(s).unwrap()
    }

    fn sale(cap: u32, candidates: &[&str]) -> (Model, Vec<CandidateHash>) {
        let mut m = Model::new(&[(level("a"), cap)]);
        let cs: Vec<_> = candidates.iter().map(|c| CandidateHash::of(c)).collect();
        m.load_candidates(&cs);
        m.open = true;
        (m, cs)
    }

    #[test]
    fn admission_checks_in_order_and_stops_at_the_cap() {
        let (mut m, cs) = sale(1, &["x", "y"]);
        m.open = false;
        assert_eq!(
            m.admit(&cs[0], &level("a"), &token("t1"), 1),
            Admission::SaleClosed
        );
        m.open = true;
        assert_eq!(
            m.admit(&cs[0], &level("zz"), &token("t1"), 1),
            Admission::UnknownLevel
        );
        assert_eq!(
            m.admit(&CandidateHash::of("stranger"), &level("a"), &token("t1"), 1),
            Admission::NotEligible
        );
        assert_eq!(
            m.admit(&cs[0], &level("a"), &token("t1"), 1),
            Admission::Admitted { count: 1 }
        );
        assert!(matches!(
            m.admit(&cs[0], &level("a"), &token("t2"), 2),
            Admission::AlreadyHolding { .. }
        ));
        assert_eq!(
            m.admit(&cs[1], &level("a"), &token("t3"), 3),
            Admission::LevelFull
        );
        m.check().unwrap();
    }

    #[test]
    fn undo_twice_never_goes_below_zero() {
        let (mut m, cs) = sale(2, &["x"]);
        m.admit(&cs[0], &level("a"), &token("t1"), 1);
        assert_eq!(m.undo_admission(&cs[0], &token("other")), Ok(Step::NoMatch));
        assert_eq!(m.undo_admission(&cs[0], &token("t1")), Ok(Step::Done));
        assert_eq!(m.undo_admission(&cs[0], &token("t1")), Ok(Step::NoMatch));
        assert_eq!(m.counters().levels[0].count, 0);
        m.check().unwrap();
    }

    #[test]
    fn an_undo_below_zero_is_a_corrupt_ledger_and_changes_nothing() {
        let (mut m, cs) = sale(2, &["x", "y"]);
        m.admit(&cs[0], &level("a"), &token("t1"), 1);
        m.admit(&cs[1], &level("a"), &token("t2"), 1);
        m.attach_payment(&cs[1], &token("t2"), &pay("P2"), 100);
        // corrupt: the level's count lost its two seats
        m.levels.insert(level("a"), (2, 0));
        let before = m.clone();
        let underflow = |c: &CandidateHash| LedgerError::CounterUnderflow {
            level: level("a"),
            candidate: c.clone(),
        };
        assert_eq!(
            m.undo_admission(&cs[0], &token("t1")),
            Err(underflow(&cs[0]))
        );
        assert_eq!(m.release(&cs[1], &pay("P2")), Err(underflow(&cs[1])));
        assert_eq!(m, before, "nothing changed: the holds and the count stay");
        // guards still come first: a miss is a miss, not an error
        assert_eq!(m.undo_admission(&cs[0], &token("t9")), Ok(Step::NoMatch));
        assert_eq!(m.release(&cs[1], &pay("P9")), Ok(Step::NoMatch));
        // a hold counted in a level the sale does not have is corrupt too
        m.levels.clear();
        assert_eq!(
            m.undo_admission(&cs[0], &token("t1")),
            Err(underflow(&cs[0]))
        );
        assert!(m.holds.contains_key(&cs[0]));
        let message = underflow(&cs[0]).to_string();
        assert!(
            message.contains("corrupt ledger") && message.contains("level a"),
            "{message}"
        );
    }

    #[test]
    fn releases_are_payment_guarded_and_paid_is_final() {
        let (mut m, cs) = sale(2, &["x"]);
        m.admit(&cs[0], &level("a"), &token("t1"), 1);
        assert_eq!(
            m.release(&cs[0], &pay("P1")),
            Ok(Step::NoMatch),
            "pending holds are not released by payment"
        );
        assert_eq!(
            m.attach_payment(&cs[0], &token("t2"), &pay("P1"), 100),
            Step::NoMatch
        );
        assert_eq!(
            m.attach_payment(&cs[0], &token("t1"), &pay("P1"), 100),
            Step::Done
        );
        assert_eq!(
            m.attach_payment(&cs[0], &token("t1"), &pay("P1"), 999),
            Step::Done,
            "a retried attach is done"
        );
        assert_eq!(
            m.attach_payment(&cs[0], &token("t1"), &pay("P2"), 100),
            Step::NoMatch
        );
        assert!(
            matches!(
                m.holds[&cs[0]].state,
                HoldState::Held {
                    deadline_ms: 100,
                    ..
                }
            ),
            "the retry changed nothing"
        );
        assert_eq!(m.release(&cs[0], &pay("P0")), Ok(Step::NoMatch));
        assert_eq!(m.extend(&cs[0], &pay("P1"), 200), Step::Done);
        assert_eq!(m.mark_paid(&cs[0], &pay("P1")), Step::Done);
        assert_eq!(m.mark_paid(&cs[0], &pay("P1")), Step::Paid);
        assert_eq!(m.release(&cs[0], &pay("P1")), Ok(Step::Paid));
        assert_eq!(m.undo_admission(&cs[0], &token("t1")), Ok(Step::Paid));
        assert_eq!(m.counters().levels[0].count, 1, "a paid seat stays counted");
        assert!(matches!(
            m.admit(&cs[0], &level("a"), &token("t9"), 5),
            Admission::AlreadyPaid { .. }
        ));
        m.check().unwrap();
    }

    #[test]
    fn a_released_seat_can_be_booked_again() {
        let (mut m, cs) = sale(1, &["x", "y"]);
        m.admit(&cs[0], &level("a"), &token("t1"), 1);
        m.attach_payment(&cs[0], &token("t1"), &pay("P1"), 100);
        assert_eq!(
            m.admit(&cs[1], &level("a"), &token("t2"), 2),
            Admission::LevelFull
        );
        assert_eq!(m.release(&cs[0], &pay("P1")), Ok(Step::Done));
        assert_eq!(
            m.admit(&cs[1], &level("a"), &token("t2"), 3),
            Admission::Admitted { count: 1 }
        );
        assert_eq!(m.stale_pending(3, 10).len(), 1);
        assert_eq!(m.stale_pending(2, 10).len(), 0);
        m.check().unwrap();
    }

    #[test]
    fn the_peak_is_the_highest_count_an_admission_reached() {
        let (mut m, cs) = sale(2, &["x", "y", "z"]);
        let peak = |m: &Model| {
            let l = &m.counters().levels[0];
            (l.count, l.peak)
        };
        assert_eq!(peak(&m), (0, 0), "nothing admitted yet");
        m.admit(&cs[0], &level("a"), &token("t1"), 1);
        m.admit(&cs[1], &level("a"), &token("t2"), 1);
        assert_eq!(peak(&m), (2, 2));
        assert_eq!(m.undo_admission(&cs[0], &token("t1")), Ok(Step::Done));
        assert_eq!(peak(&m), (1, 2), "the seat given back; the peak stays");
        assert_eq!(
            m.admit(&cs[0], &level("a"), &token("t3"), 2),
            Admission::Admitted { count: 2 }
        );
        assert_eq!(
            m.admit(&cs[2], &level("a"), &token("t4"), 2),
            Admission::LevelFull
        );
        assert_eq!(peak(&m), (2, 2), "a refusal counts nothing");
    }
}
