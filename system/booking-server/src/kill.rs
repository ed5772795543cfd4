//! What `booking serve` does at an armed kill point (`[faults]`, a `kill`
//! with a `point`): log one error line, then SIGKILL its own process, so
//! the rehearsal sees what a machine lost at that step of the request path
//! leaves behind (no destructor, no flush, no answer to the client). The
//! fleet's conductor starts the instance again when the fault's window
//! closes.
//!
//! Only the process entry arms it ([`crate::build_with_killer`]); the
//! in-process fleet builds without a killer, and there a kill point is only
//! logged.

use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How long the process may outlive its own SIGKILL before it aborts
/// instead (it never should: the signal is delivered as `kill` returns).
pub const SIGKILL_GRACE: Duration = Duration::from_secs(5);

/// The killer of `booking serve`: given the fault's name, logs it and sends
/// SIGKILL to this process; aborts if the signal cannot be sent.
pub fn sigkill_self() -> faults::Killer {
    Arc::new(|fault: &str| {
        tracing::error!(
            fault,
            pid = std::process::id(),
            "kill point reached: SIGKILL to this process"
        );
        if let Err(e) = kill(Pid::this(), Signal::SIGKILL) {
            tracing::error!(fault, error = %e, "SIGKILL refused: aborting");
            std::process::abort();
        }
        // a blocking wait on purpose: nothing of this process may go on
        std::thread::sleep(SIGKILL_GRACE);
        std::process::abort();
    })
}
