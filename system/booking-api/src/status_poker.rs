//! Pokes this instance's status writer after a change of the counters,
//! without holding up the answer that caused it.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use booking::status::StatusWriter;

use crate::Stack;

/// Pokes of the status writer from one instance are at least this far apart
/// during a burst (the document's own throttle is 2 s; this only keeps the
/// poke loop from spinning on every admission).
pub const POKE_SPACING: Duration = Duration::from_millis(20);

/// Pokes the status writer after a change without holding up the answer.
/// Pokes that arrive while one runs collapse into one more run after it
/// (at least [`POKE_SPACING`] later), so a burst costs a few pokes a second
/// and the last change is always followed by a poke that reads it.
#[derive(Debug, Default)]
pub(crate) struct StatusPoker {
    writer: OnceLock<Arc<StatusWriter>>,
    running: AtomicBool,
    again: AtomicBool,
    failures: AtomicU64,
}

impl StatusPoker {
    fn writer(&self, stack: &Stack, instance: &str) -> Arc<StatusWriter> {
        self.writer
            .get_or_init(|| {
                Arc::new(
                    StatusWriter::new(
                        stack.sale.clone(),
                        &stack.prefix,
                        stack.ledger.clone(),
                        stack.coordination.clone(),
                        stack.status_sink.clone(),
                        stack.clock.clone(),
                    )
                    .with_throttle(stack.settings.status_throttle)
                    .with_writer_id(instance),
                )
            })
            .clone()
    }

    pub(crate) fn poke(self: &Arc<Self>, stack: &Stack, instance: &str) {
        self.again.store(true, Ordering::SeqCst);
        if self.running.swap(true, Ordering::SeqCst) {
            return; // the running loop sees `again`
        }
        let writer = self.writer(stack, instance);
        let poker = self.clone();
        tokio::spawn(async move {
            loop {
                while poker.again.swap(false, Ordering::SeqCst) {
                    if let Err(e) = writer.poke().await {
                        poker.failures.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(error = %e, "status document not written");
                    }
                    if poker.again.load(Ordering::SeqCst) {
                        tokio::time::sleep(POKE_SPACING).await;
                    }
                }
                poker.running.store(false, Ordering::SeqCst);
                // a poke between the last swap and the store found `running`
                // set and left: take the loop back if nobody else did
                if !poker.again.load(Ordering::SeqCst) || poker.running.swap(true, Ordering::SeqCst)
                {
                    break;
                }
            }
        });
    }
}
