//! The embedded seat ledger: the reference [`Model`] of each sale behind one
//! lock.
//!
//! Every trait call takes the lock once, so each call is one atomic step, as
//! each Lua script is in Redis. A sale that was never reset behaves like an
//! empty, closed one: `counters` says closed with no levels, `admit` answers
//! `SaleClosed`, every guarded step `NoMatch`. Only `reset`, `load_candidates`
//! and `set_open` create a sale (as they create keys in Redis); reads and
//! refused steps leave the map alone.

use std::collections::HashMap;

use async_trait::async_trait;
use booking::ledger::{Admission, Counters, Hold, Ledger, LedgerError, Model, Step};
use booking::{Bug, Bugs, CandidateHash, Level, PaymentId, RequestToken, SaleId};
use parking_lot::Mutex;

/// The seat ledger in process memory: one [`Model`] per sale.
#[derive(Debug, Default)]
pub struct EmbeddedLedger {
    sales: Mutex<HashMap<SaleId, Model>>,
    /// The bug zoo's `unguarded_undo`: the level each undone token's seat
    /// came from, so an undo that runs again gives the seat back again.
    unguarded: Option<Mutex<HashMap<(SaleId, RequestToken), Level>>>,
}

impl EmbeddedLedger {
    /// An empty ledger: no sales.
    pub fn new() -> EmbeddedLedger {
        EmbeddedLedger::default()
    }

    /// An empty ledger with the zoo's switches that concern it
    /// (`unguarded_undo`: an undo by a token that already ran decrements the
    /// level again, as the article's unguarded undo did).
    pub fn with_bugs(bugs: &Bugs) -> EmbeddedLedger {
        EmbeddedLedger {
            unguarded: bugs
                .on(Bug::UnguardedUndo)
                .then(|| Mutex::new(HashMap::new())),
            ..EmbeddedLedger::default()
        }
    }

    /// Runs `f` on the sale's model under the lock, creating the sale if it is
    /// unknown.
    fn write<T>(&self, sale: &SaleId, f: impl FnOnce(&mut Model) -> T) -> T {
        let mut sales = self.sales.lock();
        f(sales.entry(sale.clone()).or_default())
    }

    /// Runs `f` on the sale's model under the lock; an unknown sale is an
    /// empty, closed one and stays unknown (nothing `f` can do to an empty
    /// model changes it: every step on it is refused).
    fn step<T>(&self, sale: &SaleId, f: impl FnOnce(&mut Model) -> T) -> T {
        let mut sales = self.sales.lock();
        match sales.get_mut(sale) {
            Some(model) => f(model),
            None => f(&mut Model::default()),
        }
    }

    /// Runs `f` on the sale's model under the lock, without changing it.
    fn read<T>(&self, sale: &SaleId, f: impl FnOnce(&Model) -> T) -> T {
        let sales = self.sales.lock();
        match sales.get(sale) {
            Some(model) => f(model),
            None => f(&Model::default()),
        }
    }
}

/// An undo's answer, with a corrupt ledger logged at error level: a counter
/// that would go below zero is a programmer error, never clamped.
fn logged(answer: Result<Step, LedgerError>) -> Result<Step, LedgerError> {
    if let Err(e @ LedgerError::CounterUnderflow { .. }) = &answer {
        tracing::error!(error = %e, "corrupt ledger: an undo would take a counter below zero");
    }
    answer
}

#[async_trait]
impl Ledger for EmbeddedLedger {
    async fn reset(&self, sale: &SaleId, levels: &[(Level, u32)]) -> Result<(), LedgerError> {
        self.sales.lock().insert(sale.clone(), Model::new(levels));
        Ok(())
    }

    async fn load_candidates(
        &self,
        sale: &SaleId,
        candidates: &[CandidateHash],
    ) -> Result<u64, LedgerError> {
        Ok(self.write(sale, |m| m.load_candidates(candidates)))
    }

    async fn set_open(&self, sale: &SaleId, open: bool) -> Result<(), LedgerError> {
        self.write(sale, |m| m.open = open);
        Ok(())
    }

    async fn admit(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        level: &Level,
        token: &RequestToken,
        now_ms: u64,
    ) -> Result<Admission, LedgerError> {
        Ok(self.step(sale, |m| m.admit(candidate, level, token, now_ms)))
    }

    async fn attach_payment(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        token: &RequestToken,
        payment_id: &PaymentId,
        deadline_ms: u64,
    ) -> Result<Step, LedgerError> {
        Ok(self.step(sale, |m| {
            m.attach_payment(candidate, token, payment_id, deadline_ms)
        }))
    }

    async fn undo_admission(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        token: &RequestToken,
    ) -> Result<Step, LedgerError> {
        let Some(undone) = &self.unguarded else {
            return logged(self.step(sale, |m| m.undo_admission(candidate, token)));
        };
        // the zoo's bug: remember the seat's level, and give it back again
        // on a repeat, guard or no guard (down to zero: below it, the corrupt
        // ledger error, as without the bug)
        logged(self.step(sale, |m| {
            let level = m
                .holds
                .get(candidate)
                .filter(|h| h.token == *token)
                .map(|h| h.level.clone());
            let step = m.undo_admission(candidate, token)?;
            let key = (sale.clone(), token.clone());
            match (step, level) {
                (Step::Done, Some(level)) => {
                    undone.lock().insert(key, level);
                }
                (Step::NoMatch, _) => {
                    if let Some(level) = undone.lock().get(&key) {
                        match m.levels.get_mut(level) {
                            Some((_, count)) if *count > 0 => *count -= 1,
                            _ => {
                                return Err(LedgerError::CounterUnderflow {
                                    level: level.clone(),
                                    candidate: candidate.clone(),
                                });
                            }
                        }
                    }
                }
                _ => {}
            }
            Ok(step)
        }))
    }

    async fn release(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<Step, LedgerError> {
        logged(self.step(sale, |m| m.release(candidate, payment_id)))
    }

    async fn mark_paid(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<Step, LedgerError> {
        Ok(self.step(sale, |m| m.mark_paid(candidate, payment_id)))
    }

    async fn extend(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
        deadline_ms: u64,
    ) -> Result<Step, LedgerError> {
        Ok(self.step(sale, |m| m.extend(candidate, payment_id, deadline_ms)))
    }

    async fn hold(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
    ) -> Result<Option<Hold>, LedgerError> {
        Ok(self.read(sale, |m| m.holds.get(candidate).cloned()))
    }

    async fn paid(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
    ) -> Result<Option<PaymentId>, LedgerError> {
        Ok(self.read(sale, |m| m.paid.get(candidate).map(|(_, p)| p.clone())))
    }

    async fn stale_pending(
        &self,
        sale: &SaleId,
        admitted_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<(CandidateHash, Hold)>, LedgerError> {
        Ok(self.read(sale, |m| m.stale_pending(admitted_before_ms, limit)))
    }

    async fn stale_held(
        &self,
        sale: &SaleId,
        deadline_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<(CandidateHash, Hold)>, LedgerError> {
        Ok(self.read(sale, |m| m.stale_held(deadline_before_ms, limit)))
    }

    async fn counters(&self, sale: &SaleId) -> Result<Counters, LedgerError> {
        Ok(self.read(sale, Model::counters))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    // The cases shared with Redis (admission order, undo, release, resale,
    // stale pending) run against this ledger in booking-redis/tests/ledger.rs;
    // these are the ones only the embedded ledger has.
    use std::sync::Arc;

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
    fn sale_id() -> SaleId {
        SaleId::parse("launch").unwrap()
    }

    /// An open sale with one level "a" of `cap` seats and these candidates.
    async fn sale(cap: u32, candidates: &[&str]) -> (EmbeddedLedger, Vec<CandidateHash>) {
        let l = EmbeddedLedger::new();
        let cs: Vec<_> = candidates.iter().map(|c| CandidateHash::of(c)).collect();
        l.reset(&sale_id(), &[(level("a"), cap)]).await.unwrap();
        assert_eq!(
            l.load_candidates(&sale_id(), &cs).await.unwrap(),
            cs.len() as u64
        );
        l.set_open(&sale_id(), true).await.unwrap();
        (l, cs)
    }

    async fn count(l: &EmbeddedLedger) -> u32 {
        l.counters(&sale_id()).await.unwrap().levels[0].count
    }

    #[tokio::test]
    async fn an_undo_that_runs_twice_decrements_twice_only_with_the_zoo_switch() {
        for (bugged, after_repeat) in [(false, 1), (true, 0)] {
            let (plain, cs) = sale(5, &["x", "y"]).await;
            let l = if bugged {
                let l = EmbeddedLedger::with_bugs(&Bugs::of([Bug::UnguardedUndo]));
                l.reset(&sale_id(), &[(level("a"), 5)]).await.unwrap();
                l.load_candidates(&sale_id(), &cs).await.unwrap();
                l.set_open(&sale_id(), true).await.unwrap();
                l
            } else {
                plain
            };
            for (c, t) in [(&cs[0], "t1"), (&cs[1], "t2")] {
                assert!(matches!(
                    l.admit(&sale_id(), c, &level("a"), &token(t), 1)
                        .await
                        .unwrap(),
                    Admission::Admitted { .. }
                ));
            }
            assert_eq!(count(&l).await, 2);
            let (s, t1) = (sale_id(), token("t1"));
            let undo = || l.undo_admission(&s, &cs[0], &t1);
            assert_eq!(undo().await.unwrap(), Step::Done);
            assert_eq!(count(&l).await, 1);
            // the repeat is refused either way; only the bug still decrements
            assert_eq!(undo().await.unwrap(), Step::NoMatch);
            assert_eq!(count(&l).await, after_repeat, "bugged: {bugged}");
            if bugged {
                // a third run would go below zero: the corrupt ledger error
                assert_eq!(
                    undo().await,
                    Err(LedgerError::CounterUnderflow {
                        level: level("a"),
                        candidate: cs[0].clone(),
                    })
                );
                assert_eq!(count(&l).await, 0, "not below zero, not clamped silently");
            }
        }
    }

    #[tokio::test]
    async fn an_undo_below_zero_is_a_corrupt_ledger_error_and_changes_nothing() {
        let (l, cs) = sale(2, &["x", "y"]).await;
        let s = sale_id();
        l.admit(&s, &cs[0], &level("a"), &token("t1"), 1)
            .await
            .unwrap();
        l.admit(&s, &cs[1], &level("a"), &token("t2"), 1)
            .await
            .unwrap();
        l.attach_payment(&s, &cs[1], &token("t2"), &pay("P2"), 100)
            .await
            .unwrap();
        // corrupt the sale: its count lost both seats
        l.sales
            .lock()
            .get_mut(&s)
            .unwrap()
            .levels
            .insert(level("a"), (2, 0));
        let underflow = |c: &CandidateHash| {
            Err(LedgerError::CounterUnderflow {
                level: level("a"),
                candidate: c.clone(),
            })
        };
        assert_eq!(
            l.undo_admission(&s, &cs[0], &token("t1")).await,
            underflow(&cs[0])
        );
        assert_eq!(l.release(&s, &cs[1], &pay("P2")).await, underflow(&cs[1]));
        assert_eq!(count(&l).await, 0);
        assert!(
            l.hold(&s, &cs[0]).await.unwrap().is_some(),
            "the hold stays"
        );
        assert!(
            l.hold(&s, &cs[1]).await.unwrap().is_some(),
            "the hold stays"
        );
    }

    #[tokio::test]
    async fn an_unknown_sale_is_closed_and_refuses_every_step() {
        let l = EmbeddedLedger::new();
        let (s, c) = (sale_id(), CandidateHash::of("x"));
        assert_eq!(
            l.counters(&s).await.unwrap(),
            Counters {
                open: false,
                levels: vec![],
                paid: 0,
            }
        );
        assert_eq!(
            l.admit(&s, &c, &level("a"), &token("t"), 1).await.unwrap(),
            Admission::SaleClosed
        );
        assert_eq!(
            l.attach_payment(&s, &c, &token("t"), &pay("P"), 9)
                .await
                .unwrap(),
            Step::NoMatch
        );
        assert_eq!(
            l.undo_admission(&s, &c, &token("t")).await.unwrap(),
            Step::NoMatch
        );
        assert_eq!(l.release(&s, &c, &pay("P")).await.unwrap(), Step::NoMatch);
        assert_eq!(l.mark_paid(&s, &c, &pay("P")).await.unwrap(), Step::NoMatch);
        assert_eq!(l.extend(&s, &c, &pay("P"), 9).await.unwrap(), Step::NoMatch);
        assert_eq!(l.hold(&s, &c).await.unwrap(), None);
        assert_eq!(l.paid(&s, &c).await.unwrap(), None);
        assert!(l.stale_pending(&s, u64::MAX, 10).await.unwrap().is_empty());
        assert!(l.sales.lock().is_empty(), "refused steps create nothing");
    }

    #[tokio::test]
    async fn sales_are_separate_and_reset_forgets() {
        let (l, cs) = sale(1, &["x"]).await;
        let other = SaleId::parse("other").unwrap();
        assert_eq!(
            l.admit(&other, &cs[0], &level("a"), &token("t"), 1)
                .await
                .unwrap(),
            Admission::SaleClosed
        );
        l.admit(&sale_id(), &cs[0], &level("a"), &token("t"), 1)
            .await
            .unwrap();
        l.reset(&sale_id(), &[(level("a"), 1), (level("b"), 2)])
            .await
            .unwrap();
        let counters = l.counters(&sale_id()).await.unwrap();
        assert!(!counters.open);
        assert_eq!(
            counters
                .levels
                .iter()
                .map(|c| (c.level.as_str(), c.cap, c.count))
                .collect::<Vec<_>>(),
            vec![("a", 1, 0), ("b", 2, 0)]
        );
        assert_eq!(l.hold(&sale_id(), &cs[0]).await.unwrap(), None);
        l.set_open(&sale_id(), true).await.unwrap();
        assert_eq!(
            l.admit(&sale_id(), &cs[0], &level("a"), &token("t"), 1)
                .await
                .unwrap(),
            Admission::NotEligible,
            "reset forgets the list"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_admissions_stop_exactly_at_the_cap() {
        let names: Vec<String> = (0..200).map(|i| format!("c{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let (l, cs) = sale(50, &refs).await;
        let l = Arc::new(l);
        let tasks: Vec<_> = cs
            .into_iter()
            .map(|c| {
                let l = l.clone();
                tokio::spawn(async move {
                    l.admit(&sale_id(), &c, &level("a"), &token("t"), 1)
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut admitted = 0;
        for t in tasks {
            match t.await.unwrap() {
                Admission::Admitted { .. } => admitted += 1,
                Admission::LevelFull => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(admitted, 50);
        assert_eq!(count(&l).await, 50);
    }
}
