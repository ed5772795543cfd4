//! The booking system's background services, each a pure decision function
//! plus a thin, bounded, stoppable async loop over the ports of `booking`:
//!
//! - [`stack`]: the ports and settings one instance shares ([`stack::Stack`]).
//! - [`admission`]: the request path of `POST /bookings` below HTTP (admit →
//!   create → attach → booking copy → enqueue, undone before any failure
//!   answer), which the API and the simulator both call.
//! - [`confirm`]: the one conditional HELD→PAID step every confirm path ends
//!   in, the fast payer's PAID record from the booking copy, and the
//!   confirmation email behind them, through the [`outbox`].
//! - [`outbox`]: the confirmation email owed by a PAID record: the winner's
//!   send, the email sweep with its back-off and budget, the alert after it.
//! - [`callback`]: confirm path 1 below HTTP, the payer's redirect
//!   (signature, deadline, execute under the lock), which the API and the
//!   simulator both call.
//! - [`webhook`]: confirm path 2 below HTTP, a verified notification's IPN
//!   (find by invoice, query, compare, mark paid).
//! - [`worker`]: SQS FIFO → the record store (conditional put, conflicts
//!   classified with a consistent read). Never touches a seat counter.
//! - [`reconciler`]: the only release path; one leader per sale under a lock.
//! - [`expiry`]: the TTL safety net on the change stream.
//!
//! Loops stop when their shutdown signal (a `tokio::sync::watch` of `bool`)
//! turns `true`, or when its sender is dropped. Counters are plain atomics,
//! read with each service's `stats()`.

pub mod admission;
pub mod callback;
pub mod confirm;
pub mod expiry;
pub mod outbox;
pub mod reconciler;
pub mod stack;
pub mod webhook;
pub mod worker;

/// The shutdown signal every loop takes: stop when it reads `true` or when the
/// sender is gone.
pub type Shutdown = tokio::sync::watch::Receiver<bool>;

/// Whether the signal says stop (`true`, or the sender dropped).
pub(crate) fn stopping(shutdown: &Shutdown) -> bool {
    *shutdown.borrow() || shutdown.has_changed().is_err()
}

/// Waits until the signal says stop.
pub(crate) async fn stopped(shutdown: &mut Shutdown) {
    // `wait_for` errs when the sender is dropped: that is a stop too
    let _ = shutdown.wait_for(|stop| *stop).await;
}
