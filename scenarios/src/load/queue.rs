//! A due-time queue: work handed from one goose scenario to another, to be
//! done no earlier than a given instant, without holding any user while it
//! waits.
//!
//! [`DueQueue::push`] sends work due now straight into a channel; later work
//! waits in a heap until [`DueQueue::dispatch`] (one task per queue) moves it
//! into the channel when it falls due. Users wait in [`DueQueue::take`]: the
//! channel's receiver sits behind a fair async lock, so exactly one waiting
//! user is woken per item (no thundering herd).

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

/// How long the dispatcher sleeps when nothing waits (it wakes on a push).
const IDLE_SLEEP: std::time::Duration = std::time::Duration::from_secs(3_600);

/// An item with the instant it is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due<T> {
    /// No earlier than this.
    pub due: Instant,
    /// The work.
    pub item: T,
}

#[derive(Debug)]
struct Waiting<T> {
    due: Instant,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Waiting<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}
impl<T> Eq for Waiting<T> {}
impl<T> PartialOrd for Waiting<T> {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Waiting<T> {
    /// Reversed: the heap's top is the earliest due, first pushed first.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (other.due, other.seq).cmp(&(self.due, self.seq))
    }
}

/// Work to be done no earlier than its due time.
#[derive(Debug)]
pub struct DueQueue<T> {
    waiting: Mutex<BinaryHeap<Waiting<T>>>,
    seq: AtomicU64,
    wake: Notify,
    tx: mpsc::UnboundedSender<Due<T>>,
    rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<Due<T>>>,
}

impl<T: Send> Default for DueQueue<T> {
    fn default() -> Self {
        DueQueue::new()
    }
}

impl<T: Send> DueQueue<T> {
    /// An empty queue.
    pub fn new() -> DueQueue<T> {
        let (tx, rx) = mpsc::unbounded_channel();
        DueQueue {
            waiting: Mutex::new(BinaryHeap::new()),
            seq: AtomicU64::new(0),
            wake: Notify::new(),
            tx,
            rx: tokio::sync::Mutex::new(rx),
        }
    }

    /// Queues `item`, due at `due`.
    pub fn push(&self, due: Instant, item: T) {
        if due <= Instant::now() {
            // the receiver lives as long as the queue: sending cannot fail
            let _ = self.tx.send(Due { due, item });
            return;
        }
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        self.waiting.lock().push(Waiting { due, seq, item });
        self.wake.notify_one();
    }

    /// Moves items into the channel as they fall due, until `stop` resolves.
    pub async fn dispatch(&self, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        loop {
            let next = {
                let now = Instant::now();
                let mut waiting = self.waiting.lock();
                while waiting.peek().is_some_and(|w| w.due <= now) {
                    if let Some(w) = waiting.pop() {
                        let _ = self.tx.send(Due {
                            due: w.due,
                            item: w.item,
                        });
                    }
                }
                waiting.peek().map(|w| w.due)
            };
            let until = next.unwrap_or_else(|| Instant::now() + IDLE_SLEEP);
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep_until(until) => {}
                _ = self.wake.notified() => {}
            }
        }
    }

    /// The next due item, waiting for one. Cancel-safe: an item is never
    /// lost when the future is dropped.
    pub async fn take(&self) -> Option<Due<T>> {
        let mut rx = self.rx.lock().await;
        rx.recv().await
    }

    /// Everything still queued (due or not), emptying the queue: the work
    /// that was never done.
    pub fn drain(&self) -> Vec<T> {
        let mut left: Vec<T> = self.waiting.lock().drain().map(|w| w.item).collect();
        if let Ok(mut rx) = self.rx.try_lock() {
            while let Ok(d) = rx.try_recv() {
                left.push(d.item);
            }
        }
        left
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn work_due_now_is_taken_at_once_and_later_work_at_its_time_in_due_order() {
        let q = Arc::new(DueQueue::new());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let d = q.clone();
        let dispatcher = tokio::spawn(async move {
            d.dispatch(async {
                let _ = stop_rx.await;
            })
            .await
        });
        let t0 = Instant::now();
        q.push(t0 + Duration::from_secs(3), "late");
        q.push(t0 + Duration::from_secs(1), "soon");
        q.push(t0, "now");
        let first = q.take().await.unwrap();
        assert_eq!(first.item, "now");
        assert_eq!(Instant::now(), t0, "no wait");
        let second = q.take().await.unwrap();
        assert_eq!(second.item, "soon");
        assert!(Instant::now() >= t0 + Duration::from_secs(1));
        assert!(Instant::now() < t0 + Duration::from_secs(2));
        let third = q.take().await.unwrap();
        assert_eq!(
            (third.item, third.due),
            ("late", t0 + Duration::from_secs(3))
        );
        assert!(Instant::now() >= t0 + Duration::from_secs(3));
        let _ = stop_tx.send(());
        dispatcher.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_push_wakes_a_sleeping_dispatcher() {
        let q = Arc::new(DueQueue::new());
        let d = q.clone();
        let dispatcher = tokio::spawn(async move { d.dispatch(std::future::pending()).await });
        tokio::time::sleep(Duration::from_secs(10)).await;
        let t0 = Instant::now();
        q.push(t0 + Duration::from_millis(500), 7u32);
        let got = q.take().await.unwrap();
        assert_eq!(got.item, 7);
        let waited = Instant::now() - t0;
        assert!(waited >= Duration::from_millis(500) && waited < Duration::from_secs(1));
        dispatcher.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn drain_returns_what_was_never_taken() {
        let q: DueQueue<u32> = DueQueue::new();
        let t0 = Instant::now();
        q.push(t0, 1);
        q.push(t0 + Duration::from_secs(60), 2);
        let mut left = q.drain();
        left.sort();
        assert_eq!(left, vec![1, 2]);
        assert!(q.drain().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_take_loses_nothing() {
        let q: DueQueue<u32> = DueQueue::new();
        let timed_out = tokio::time::timeout(Duration::from_millis(10), q.take()).await;
        assert!(timed_out.is_err());
        q.push(Instant::now(), 5);
        assert_eq!(q.take().await.unwrap().item, 5);
    }
}
