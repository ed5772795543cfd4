//! [`QueueTime`]: whose clock the scripts read, the server's or an injected
//! one.
//!
//! SQS counts visibility timeouts, deduplication windows and send times on
//! its own clock, when it handles a call. A time the client reads when it
//! issues the call is stale by however long the call then waits: for a
//! pooled connection, in the socket behind a paused or busy server, behind
//! other commands. A receive that ran with such a time hid its messages
//! until a deadline already (partly) past, so another poller received them
//! again within their visibility timeout measured in real time; after a
//! stalled server, a receive issued during the stall returned messages that
//! were visible to the next caller a few ms later. So on the real clock the
//! scripts read the server's `TIME` when they run.
//!
//! A test's manual clock and a simulator's virtual time are not the server's
//! time: with those the scripts take the injected clock's reading, passed
//! with each call, as before.

use std::sync::Arc;

use booking::clock::{Clock, SystemClock};

/// What a script receives as `ARGV[1]` to read the server's `TIME` instead
/// of a client's time (`src/lua/prelude.lua`).
pub const SERVER_TIME_ARG: &str = "server";

/// Where the queue's scripts read the time.
#[derive(Clone)]
pub enum QueueTime {
    /// The server's clock (`TIME`), when each script runs: the time of the
    /// real deployment, as SQS keeps it.
    Server,
    /// An injected clock, read when a call is issued and passed with it: a
    /// test's manual clock, a simulator's virtual time, a deliberately
    /// skewed clock.
    Client(Arc<dyn Clock>),
}

impl QueueTime {
    /// The time for a queue given `clock`: the system clock
    /// ([`SystemClock`]) means the server's, whose clock is the real one and
    /// reads it when the script runs; any other clock (wrappers of the system
    /// clock included) is read as given.
    pub fn of(clock: Arc<dyn Clock>) -> QueueTime {
        if is_system_clock(clock.as_ref()) {
            QueueTime::Server
        } else {
            QueueTime::Client(clock)
        }
    }

    /// `ARGV[1]` of a script call issued now: the client's time in ms, or
    /// [`SERVER_TIME_ARG`].
    pub(crate) fn arg(&self) -> String {
        match self {
            QueueTime::Server => SERVER_TIME_ARG.to_owned(),
            QueueTime::Client(clock) => clock.now_ms().to_string(),
        }
    }
}

impl std::fmt::Debug for QueueTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QueueTime::Server => f.write_str("Server"),
            QueueTime::Client(clock) => f.debug_tuple("Client").field(clock).finish(),
        }
    }
}

/// Whether `clock` is [`SystemClock`]. A `dyn Clock` cannot be downcast (the
/// trait has no `Any`), and its `Debug` is the one thing it says about
/// itself: a unit struct's derived `Debug` is its name, so the comparison is
/// with [`SystemClock`]'s own, not a copy of it.
fn is_system_clock(clock: &dyn Clock) -> bool {
    format!("{clock:?}") == format!("{SystemClock:?}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use booking::clock::ManualClock;

    /// A wrapper of the system clock, as a fault injector's skewed clock.
    #[derive(Debug)]
    struct Wrapped(SystemClock);

    impl Clock for Wrapped {
        fn now_ms(&self) -> u64 {
            self.0.now_ms() + 5_000
        }
    }

    #[test]
    fn the_system_clock_means_the_servers_time_and_any_other_clock_is_read_as_given() {
        assert!(matches!(
            QueueTime::of(Arc::new(SystemClock)),
            QueueTime::Server
        ));
        assert_eq!(QueueTime::of(Arc::new(SystemClock)).arg(), SERVER_TIME_ARG);

        let manual = ManualClock::new(1_700_000_000_000);
        let time = QueueTime::of(Arc::new(manual.clone()));
        assert!(matches!(time, QueueTime::Client(_)));
        assert_eq!(time.arg(), "1700000000000");
        manual.advance_ms(7);
        assert_eq!(time.arg(), "1700000000007", "read at each call");

        let wrapped = QueueTime::of(Arc::new(Wrapped(SystemClock)));
        assert!(matches!(wrapped, QueueTime::Client(_)), "{wrapped:?}");
    }
}
