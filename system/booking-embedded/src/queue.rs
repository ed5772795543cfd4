//! The embedded queue: SQS FIFO semantics in process memory.
//!
//! - Strict order within a message group: while any message of a group is in
//!   flight at the group's head, nothing more of that group is delivered. One
//!   receive may take several consecutive messages of a group (as SQS does);
//!   groups interleave, the group whose head was sent first going first.
//! - Deduplication by (group, deduplication ID) for the window after the first
//!   send, even if that message was already deleted.
//! - A receive hides a message for the visibility timeout and counts the
//!   receive; a handle is valid only while its receive is in flight, so a
//!   worker that took too long cannot delete a message someone else now holds.
//! - A message received `receives_max` times whose visibility then expires
//!   moves to the dead-letter queue instead of being delivered again (SQS
//!   moves it on the next receive; moving it at expiry shows it to the audit
//!   sooner and delivers it the same number of times).
//! - Long polling wakes on send, delete and visibility changes, and when the
//!   next in-flight message's visibility runs out.
//!
//! Message times come from the injected [`Clock`]; waiting uses tokio time, so
//! a test can pause it.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use booking::clock::{Clock, SystemClock};
use booking::queue::{
    Message, Purged, Queue, QueueDepth, QueueError, RECEIVE_BATCH_MAX, RECEIVE_WAIT_MAX,
    ReceiptHandle, Received, SendOutcome, VISIBILITY_TIMEOUT_MAX,
};
use parking_lot::Mutex;
use tokio::sync::Notify;

/// How the queue behaves: the domain's [`booking::queue::QueueConfig`],
/// re-exported here for the embedded queue's existing users.
pub use booking::queue::QueueConfig;

#[derive(Debug)]
struct Entry {
    message: Message,
    sent_ms: u64,
    receive_count: u32,
    /// The receipt of the receive in flight and when the message reappears.
    in_flight: Option<(String, u64)>,
}

type DedupKey = (String, String);

#[derive(Debug, Default)]
struct State {
    next_seq: u64,
    next_receipt: u64,
    /// Every message not yet deleted, by send order.
    messages: BTreeMap<u64, Entry>,
    /// Each group's messages in order.
    groups: HashMap<String, VecDeque<u64>>,
    /// Groups whose head is visible, by head: exactly these can deliver.
    ready: BTreeSet<(u64, String)>,
    /// (visible again at, message).
    in_flight: BTreeSet<(u64, u64)>,
    receipts: HashMap<String, u64>,
    /// (group, deduplication ID) → first send.
    dedup: HashMap<DedupKey, u64>,
    dedup_order: VecDeque<(u64, DedupKey)>,
    dead: Vec<Message>,
}

impl State {
    /// Makes the group ready if its head is visible, forgets it if empty.
    fn refresh_group(&mut self, group: &str) {
        let head = self.groups.get(group).and_then(|q| q.front().copied());
        match head {
            None => {
                self.groups.remove(group);
            }
            Some(head) => {
                let visible = self
                    .messages
                    .get(&head)
                    .is_some_and(|e| e.in_flight.is_none());
                if visible {
                    self.ready.insert((head, group.to_owned()));
                }
            }
        }
    }

    /// Removes a message from the queue (not from `in_flight`/`receipts`).
    fn remove(&mut self, seq: u64) -> Option<Entry> {
        let entry = self.messages.remove(&seq)?;
        let group = entry.message.group_id.clone();
        if let Some(q) = self.groups.get_mut(&group) {
            if q.front() == Some(&seq) {
                self.ready.remove(&(seq, group.clone()));
            }
            q.retain(|s| *s != seq);
        }
        self.refresh_group(&group);
        Some(entry)
    }

    /// Applies the passage of time: forgets old deduplication IDs, returns
    /// messages whose visibility ran out, and moves those received too often
    /// to the dead-letter queue.
    fn settle(&mut self, now_ms: u64, config: &QueueConfig) {
        let window_ms = config.deduplication_window.as_millis() as u64;
        while let Some((first_ms, _)) = self.dedup_order.front() {
            if first_ms.saturating_add(window_ms) > now_ms {
                break;
            }
            if let Some((first_ms, key)) = self.dedup_order.pop_front() {
                if self.dedup.get(&key) == Some(&first_ms) {
                    self.dedup.remove(&key);
                }
            }
        }
        while let Some(&(visible_ms, seq)) = self.in_flight.first() {
            if visible_ms > now_ms {
                break;
            }
            self.in_flight.remove(&(visible_ms, seq));
            let Some(entry) = self.messages.get_mut(&seq) else {
                continue;
            };
            if let Some((receipt, _)) = entry.in_flight.take() {
                self.receipts.remove(&receipt);
            }
            let group = entry.message.group_id.clone();
            if entry.receive_count >= config.receives_max {
                if let Some(dead) = self.remove(seq) {
                    tracing::warn!(
                        group = %dead.message.group_id,
                        receive_count = dead.receive_count,
                        "message moved to the dead-letter queue"
                    );
                    self.dead.push(dead.message);
                }
            } else {
                self.refresh_group(&group);
            }
        }
    }

    /// Takes up to `max` messages: the ready groups by oldest head, each
    /// group's consecutive visible messages from its head.
    fn take(&mut self, now_ms: u64, max: usize, config: &QueueConfig) -> Vec<Received> {
        let visible_ms = now_ms.saturating_add(config.visibility_timeout.as_millis() as u64);
        let mut batch = Vec::new();
        while batch.len() < max {
            let Some((_, group)) = self.ready.pop_first() else {
                break;
            };
            let seqs: Vec<u64> = self
                .groups
                .get(&group)
                .map(|q| q.iter().copied().collect())
                .unwrap_or_default();
            for seq in seqs {
                if batch.len() >= max {
                    break;
                }
                let Some(entry) = self.messages.get_mut(&seq) else {
                    break;
                };
                if entry.in_flight.is_some() {
                    break;
                }
                self.next_receipt += 1;
                let receipt = format!("{seq}-{}", self.next_receipt);
                entry.receive_count += 1;
                entry.in_flight = Some((receipt.clone(), visible_ms));
                self.in_flight.insert((visible_ms, seq));
                self.receipts.insert(receipt.clone(), seq);
                batch.push(Received {
                    message: entry.message.clone(),
                    receipt: ReceiptHandle(receipt),
                    receive_count: entry.receive_count,
                    sent_ms: entry.sent_ms,
                });
            }
        }
        batch
    }

    /// The message a receipt names, if that receive is still in flight.
    fn in_flight_by_receipt(&self, receipt: &ReceiptHandle) -> Result<(u64, u64), QueueError> {
        let seq = *self
            .receipts
            .get(&receipt.0)
            .ok_or(QueueError::InvalidReceipt)?;
        match self.messages.get(&seq).and_then(|e| e.in_flight.as_ref()) {
            Some((r, visible_ms)) if *r == receipt.0 => Ok((seq, *visible_ms)),
            _ => Err(QueueError::InvalidReceipt),
        }
    }
}

/// The queue in process memory, with its dead-letter queue.
#[derive(Debug)]
pub struct EmbeddedQueue {
    clock: Arc<dyn Clock>,
    config: QueueConfig,
    state: Mutex<State>,
    /// Something may have become receivable.
    changed: Notify,
}

impl Default for EmbeddedQueue {
    fn default() -> EmbeddedQueue {
        EmbeddedQueue::new(Arc::new(SystemClock), QueueConfig::default())
    }
}

impl EmbeddedQueue {
    /// An empty queue reading the time from `clock`.
    pub fn new(clock: Arc<dyn Clock>, config: QueueConfig) -> EmbeddedQueue {
        EmbeddedQueue {
            clock,
            config,
            state: Mutex::new(State::default()),
            changed: Notify::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &QueueConfig {
        &self.config
    }

    /// Runs `f` on the state, after applying the passage of time.
    fn with_state<T>(&self, f: impl FnOnce(&mut State, u64) -> T) -> T {
        let now_ms = self.clock.now_ms();
        let mut state = self.state.lock();
        state.settle(now_ms, &self.config);
        f(&mut state, now_ms)
    }
}

#[async_trait]
impl Queue for EmbeddedQueue {
    async fn send(&self, message: Message) -> Result<SendOutcome, QueueError> {
        message.check()?;
        let outcome = self.with_state(|state, now_ms| {
            let key = (message.group_id.clone(), message.deduplication_id.clone());
            if state.dedup.contains_key(&key) {
                return SendOutcome::Deduplicated;
            }
            state.dedup.insert(key.clone(), now_ms);
            state.dedup_order.push_back((now_ms, key));
            state.next_seq += 1;
            let seq = state.next_seq;
            let group = message.group_id.clone();
            state.messages.insert(
                seq,
                Entry {
                    message,
                    sent_ms: now_ms,
                    receive_count: 0,
                    in_flight: None,
                },
            );
            state
                .groups
                .entry(group.clone())
                .or_default()
                .push_back(seq);
            state.refresh_group(&group);
            SendOutcome::Queued
        });
        if outcome == SendOutcome::Queued {
            self.changed.notify_waiters();
        }
        Ok(outcome)
    }

    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Received>, QueueError> {
        if max == 0 || max > RECEIVE_BATCH_MAX {
            return Err(QueueError::Invalid(format!(
                "receive of {max} messages, 1..={RECEIVE_BATCH_MAX}"
            )));
        }
        if wait > RECEIVE_WAIT_MAX {
            return Err(QueueError::Invalid(format!(
                "long poll of {wait:?}, at most {RECEIVE_WAIT_MAX:?}"
            )));
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // registered before looking, so a send in between still wakes us
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (batch, next_visible_in) = self.with_state(|state, now_ms| {
                let batch = state.take(now_ms, max, &self.config);
                let next = state.in_flight.first().map(|(visible_ms, _)| {
                    Duration::from_millis(visible_ms.saturating_sub(now_ms))
                });
                (batch, next)
            });
            if !batch.is_empty() {
                return Ok(batch);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(batch);
            }
            // wake at the deadline, or when the next hidden message reappears
            let until = next_visible_in.map_or(deadline, |d| {
                (now + d.max(Duration::from_millis(1))).min(deadline)
            });
            let _ = tokio::time::timeout_at(until, changed).await;
        }
    }

    async fn delete(&self, receipt: &ReceiptHandle) -> Result<(), QueueError> {
        self.with_state(|state, _| {
            let (seq, visible_ms) = state.in_flight_by_receipt(receipt)?;
            state.in_flight.remove(&(visible_ms, seq));
            state.receipts.remove(&receipt.0);
            state.remove(seq);
            Ok(())
        })?;
        // the group's next message may be deliverable now
        self.changed.notify_waiters();
        Ok(())
    }

    async fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        timeout: Duration,
    ) -> Result<(), QueueError> {
        if timeout > VISIBILITY_TIMEOUT_MAX {
            return Err(QueueError::Invalid(format!(
                "visibility timeout of {timeout:?}, at most {VISIBILITY_TIMEOUT_MAX:?}"
            )));
        }
        self.with_state(|state, now_ms| {
            let (seq, visible_ms) = state.in_flight_by_receipt(receipt)?;
            let new_visible_ms = now_ms.saturating_add(timeout.as_millis() as u64);
            state.in_flight.remove(&(visible_ms, seq));
            state.in_flight.insert((new_visible_ms, seq));
            if let Some((_, v)) = state
                .messages
                .get_mut(&seq)
                .and_then(|e| e.in_flight.as_mut())
            {
                *v = new_visible_ms;
            }
            // a zero timeout makes it visible (or dead) right away
            state.settle(now_ms, &self.config);
            Ok(())
        })?;
        self.changed.notify_waiters();
        Ok(())
    }

    async fn oldest_age(&self) -> Result<Option<Duration>, QueueError> {
        Ok(self.with_state(|state, now_ms| {
            state
                .messages
                .first_key_value()
                .map(|(_, e)| Duration::from_millis(now_ms.saturating_sub(e.sent_ms)))
        }))
    }

    async fn depth(&self) -> Result<QueueDepth, QueueError> {
        Ok(self.with_state(|state, _| {
            let in_flight = state.in_flight.len() as u64;
            QueueDepth {
                visible: state.messages.len() as u64 - in_flight,
                in_flight,
            }
        }))
    }

    async fn dead_letters(&self) -> Result<Vec<Message>, QueueError> {
        Ok(self.with_state(|state, _| state.dead.clone()))
    }

    /// Empties the queue, the dead-letter queue and the deduplication
    /// window; the message and receipt numbers go on, so no receipt a
    /// worker still holds names a later message.
    async fn purge(&self) -> Result<Option<Purged>, QueueError> {
        let purged = self.with_state(|state, _| {
            let in_flight = state.in_flight.len() as u64;
            let purged = Purged {
                visible: state.messages.len() as u64 - in_flight,
                in_flight,
                dead_letters: state.dead.len() as u64,
            };
            *state = State {
                next_seq: state.next_seq,
                next_receipt: state.next_receipt,
                ..State::default()
            };
            purged
        });
        self.changed.notify_waiters();
        Ok(Some(purged))
    }
}
