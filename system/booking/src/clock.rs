//! Wall-clock time behind a trait, so a test or a simulator can move time by
//! hand.
//!
//! The domain takes times as arguments; adapters that keep time of their own
//! (replication lag, visibility timeouts, deduplication windows, throughput
//! buckets) read it from a [`Clock`] they are given. [`SystemClock`] is the only
//! thing in this crate that reads the real clock, and nothing here calls it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where an adapter reads the time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now, in ms since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        // a clock before 1970 reads as the epoch rather than panicking
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
}

/// A clock that moves only when told to. Clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock standing at `start_ms`.
    pub fn new(start_ms: u64) -> ManualClock {
        ManualClock(Arc::new(AtomicU64::new(start_ms)))
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_millis() as u64, Ordering::SeqCst);
    }

    /// Moves the clock forward by `ms` milliseconds.
    pub fn advance_ms(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clocks_move_only_when_told_and_clones_share_time() {
        let a = ManualClock::new(1_000);
        let b = a.clone();
        assert_eq!(a.now_ms(), 1_000);
        a.advance(Duration::from_secs(2));
        b.advance_ms(5);
        assert_eq!((a.now_ms(), b.now_ms()), (3_005, 3_005));
        assert!(SystemClock.now_ms() > 1_600_000_000_000, "after 2020");
    }
}
