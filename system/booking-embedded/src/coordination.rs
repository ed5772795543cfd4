//! The embedded coordination store: Redis's SET NX PX, compare-and-delete
//! locks, TTL values and latches in process memory.
//!
//! - One keyspace, as in Redis: a lock is a value whose content is its owner
//!   token, so [`Coordination::get`] on a lock key reads the owner.
//! - A key with a TTL exists while `now < expires_at`, `now` read from the
//!   injected [`Clock`], so a test moves time by hand. TTLs are rounded up to
//!   whole milliseconds and are at least 1 ms (Redis refuses `PX 0`; here a
//!   zero TTL sets a key that lives for one millisecond).
//! - Expired keys are removed lazily on access and, in expiry order, on every
//!   call, so memory follows the live keys.
//! - Every method is one atomic step under one lock and never fails.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use booking::clock::{Clock, SystemClock};
use booking::coordination::{Coordination, CoordinationError};
use parking_lot::Mutex;

#[derive(Debug)]
struct Entry {
    value: String,
    /// ms since the epoch; `None` = for good.
    expires_at: Option<u64>,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<String, Entry>,
    /// (expires at, key) of every entry with a TTL.
    expiries: BTreeSet<(u64, String)>,
}

impl State {
    /// Removes every entry whose time has come.
    fn purge(&mut self, now: u64) {
        while let Some((at, key)) = self.expiries.first().cloned() {
            if at > now {
                break;
            }
            self.expiries.pop_first();
            let expired = self
                .entries
                .get(&key)
                .is_some_and(|e| e.expires_at == Some(at));
            if expired {
                self.entries.remove(&key);
            }
        }
    }

    fn live(&self, key: &str) -> Option<&Entry> {
        self.entries.get(key)
    }

    fn put(&mut self, key: &str, value: &str, expires_at: Option<u64>) {
        self.remove(key);
        if let Some(at) = expires_at {
            self.expiries.insert((at, key.to_owned()));
        }
        self.entries.insert(
            key.to_owned(),
            Entry {
                value: value.to_owned(),
                expires_at,
            },
        );
    }

    fn remove(&mut self, key: &str) -> bool {
        match self.entries.remove(key) {
            Some(old) => {
                if let Some(at) = old.expires_at {
                    self.expiries.remove(&(at, key.to_owned()));
                }
                true
            }
            None => false,
        }
    }
}

/// When a TTL set at `now` runs out: whole milliseconds rounded up, at least 1.
fn expiry(now: u64, ttl: Duration) -> u64 {
    let ms = ttl.as_nanos().div_ceil(1_000_000).max(1);
    now.saturating_add(u64::try_from(ms).unwrap_or(u64::MAX))
}

/// Locks, TTL values and latches in process memory, with Redis's semantics.
#[derive(Debug)]
pub struct EmbeddedCoordination {
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

impl Default for EmbeddedCoordination {
    fn default() -> EmbeddedCoordination {
        EmbeddedCoordination::new(Arc::new(SystemClock))
    }
}

impl EmbeddedCoordination {
    /// An empty store reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> EmbeddedCoordination {
        EmbeddedCoordination {
            clock,
            state: Mutex::new(State::default()),
        }
    }

    /// Runs `f` on the state with expired keys gone; `f` gets the time too.
    fn with<R>(&self, f: impl FnOnce(&mut State, u64) -> R) -> R {
        let now = self.clock.now_ms();
        let mut state = self.state.lock();
        state.purge(now);
        f(&mut state, now)
    }

    /// How many keys are live (for tests and the audit).
    pub fn len(&self) -> usize {
        self.with(|s, _| s.entries.len())
    }

    /// Whether no key is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The time left on `key`: `None` if absent, `Some(None)` if it has no TTL.
    pub fn ttl(&self, key: &str) -> Option<Option<Duration>> {
        self.with(|s, now| {
            s.live(key).map(|e| {
                e.expires_at
                    .map(|at| Duration::from_millis(at.saturating_sub(now)))
            })
        })
    }
}

#[async_trait]
impl Coordination for EmbeddedCoordination {
    async fn try_lock(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<bool, CoordinationError> {
        Ok(self.with(|s, now| {
            if s.live(key).is_some() {
                return false;
            }
            s.put(key, owner, Some(expiry(now, ttl)));
            true
        }))
    }

    async fn unlock(&self, key: &str, owner: &str) -> Result<bool, CoordinationError> {
        Ok(self.with(|s, _| {
            if s.live(key).is_some_and(|e| e.value == owner) {
                s.remove(key)
            } else {
                false
            }
        }))
    }

    async fn extend_lock(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<bool, CoordinationError> {
        Ok(self.with(|s, now| {
            if s.live(key).is_some_and(|e| e.value == owner) {
                s.put(key, owner, Some(expiry(now, ttl)));
                true
            } else {
                false
            }
        }))
    }

    async fn get(&self, key: &str) -> Result<Option<String>, CoordinationError> {
        Ok(self.with(|s, _| s.live(key).map(|e| e.value.clone())))
    }

    async fn set(
        &self,
        key: &str,
        value: &str,
        ttl: Option<Duration>,
    ) -> Result<(), CoordinationError> {
        self.with(|s, now| s.put(key, value, ttl.map(|t| expiry(now, t))));
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<bool, CoordinationError> {
        Ok(self.with(|s, _| s.remove(key)))
    }

    async fn set_once(
        &self,
        key: &str,
        value: &str,
        ttl: Option<Duration>,
    ) -> Result<bool, CoordinationError> {
        Ok(self.with(|s, now| {
            if s.live(key).is_some() {
                return false;
            }
            s.put(key, value, ttl.map(|t| expiry(now, t)));
            true
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use booking::clock::ManualClock;

    const T0: u64 = 1_700_000_000_000;

    fn store() -> (EmbeddedCoordination, ManualClock) {
        let clock = ManualClock::new(T0);
        (EmbeddedCoordination::new(Arc::new(clock.clone())), clock)
    }

    const SEC: Duration = Duration::from_secs(1);

    #[tokio::test]
    async fn a_lock_has_one_owner_until_it_expires() {
        let (c, clock) = store();
        assert!(c.try_lock("l", "a", 45 * SEC).await.unwrap());
        assert!(!c.try_lock("l", "b", 45 * SEC).await.unwrap());
        assert_eq!(c.get("l").await.unwrap().as_deref(), Some("a"));
        clock.advance(Duration::from_millis(44_999));
        assert!(!c.try_lock("l", "b", 45 * SEC).await.unwrap());
        clock.advance_ms(1);
        assert!(
            c.try_lock("l", "b", 45 * SEC).await.unwrap(),
            "expired at exactly its TTL"
        );
        assert_eq!(c.get("l").await.unwrap().as_deref(), Some("b"));
    }

    #[tokio::test]
    async fn only_the_owner_unlocks_or_extends() {
        let (c, clock) = store();
        assert!(c.try_lock("l", "a", 10 * SEC).await.unwrap());
        assert!(!c.unlock("l", "b").await.unwrap());
        assert!(!c.extend_lock("l", "b", 60 * SEC).await.unwrap());
        assert_eq!(c.ttl("l"), Some(Some(10 * SEC)));

        clock.advance(5 * SEC);
        assert!(c.extend_lock("l", "a", 60 * SEC).await.unwrap());
        assert_eq!(
            c.ttl("l"),
            Some(Some(60 * SEC)),
            "the remaining time is set"
        );
        clock.advance(59 * SEC);
        assert!(!c.try_lock("l", "b", SEC).await.unwrap());
        assert!(c.unlock("l", "a").await.unwrap());
        assert!(
            !c.unlock("l", "a").await.unwrap(),
            "a second unlock is a no-op"
        );
        assert!(c.try_lock("l", "b", SEC).await.unwrap());

        // an expired lock cannot be extended or unlocked by its former owner
        clock.advance(SEC);
        assert!(!c.extend_lock("l", "b", SEC).await.unwrap());
        assert!(!c.unlock("l", "b").await.unwrap());
        assert!(c.is_empty());
    }

    #[tokio::test]
    async fn values_live_for_their_ttl_or_for_good() {
        let (c, clock) = store();
        c.set("v", "1", Some(2 * SEC)).await.unwrap();
        c.set("forever", "x", None).await.unwrap();
        assert_eq!(c.ttl("forever"), Some(None));
        assert_eq!(c.get("v").await.unwrap().as_deref(), Some("1"));
        // overwriting replaces value and TTL
        clock.advance(SEC);
        c.set("v", "2", Some(2 * SEC)).await.unwrap();
        clock.advance(Duration::from_millis(1_999));
        assert_eq!(c.get("v").await.unwrap().as_deref(), Some("2"));
        clock.advance_ms(1);
        assert_eq!(c.get("v").await.unwrap(), None);
        // a set without TTL clears an earlier TTL
        c.set("w", "a", Some(SEC)).await.unwrap();
        c.set("w", "b", None).await.unwrap();
        clock.advance(10 * SEC);
        assert_eq!(c.get("w").await.unwrap().as_deref(), Some("b"));
        assert_eq!(c.get("forever").await.unwrap().as_deref(), Some("x"));
        assert!(c.delete("w").await.unwrap());
        assert!(!c.delete("w").await.unwrap());
        assert_eq!(c.len(), 1);
    }

    #[tokio::test]
    async fn set_once_is_a_latch_that_reopens_when_it_expires_or_is_deleted() {
        let (c, clock) = store();
        assert!(c.set_once("t", "1", Some(2 * SEC)).await.unwrap());
        assert!(!c.set_once("t", "2", Some(2 * SEC)).await.unwrap());
        assert_eq!(c.get("t").await.unwrap().as_deref(), Some("1"));
        clock.advance(2 * SEC);
        assert!(c.set_once("t", "3", None).await.unwrap());
        assert!(!c.set_once("t", "4", None).await.unwrap());
        assert!(c.delete("t").await.unwrap());
        assert!(c.set_once("t", "5", None).await.unwrap());
        // a latch and a lock share one keyspace, as in Redis
        assert!(!c.try_lock("t", "owner", SEC).await.unwrap());
    }

    #[tokio::test]
    async fn tiny_ttls_round_up_and_expired_keys_are_purged() {
        let (c, clock) = store();
        c.set("zero", "z", Some(Duration::ZERO)).await.unwrap();
        c.set("micro", "m", Some(Duration::from_micros(1)))
            .await
            .unwrap();
        assert_eq!(c.ttl("zero"), Some(Some(Duration::from_millis(1))));
        assert_eq!(c.ttl("micro"), Some(Some(Duration::from_millis(1))));
        for i in 0..100 {
            c.set(&format!("k{i}"), "v", Some(SEC)).await.unwrap();
        }
        assert_eq!(c.len(), 102);
        clock.advance(SEC);
        assert!(c.is_empty(), "every expired key is gone");
        assert!(c.state.lock().expiries.is_empty());
    }

    #[tokio::test]
    async fn concurrent_lockers_get_exactly_one_lock() {
        let c = Arc::new(EmbeddedCoordination::default());
        let mut tasks = Vec::new();
        for i in 0..32 {
            let c = c.clone();
            tasks.push(tokio::spawn(async move {
                c.try_lock("l", &format!("o{i}"), 45 * SEC).await.unwrap()
            }));
        }
        let mut won = 0;
        for t in tasks {
            won += usize::from(t.await.unwrap());
        }
        assert_eq!(won, 1);
    }
}
