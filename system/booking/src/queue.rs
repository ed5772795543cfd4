//! The queue between the API and the worker: SQS FIFO in production.
//!
//! Messages of one group are delivered in order, one batch at a time: while a
//! group has a message in flight, nothing more of that group is delivered.
//! Groups interleave. A message is deduplicated by (group, deduplication ID)
//! within the deduplication window (`DeduplicationScope=messageGroup`). A
//! received message is invisible for the visibility timeout; after
//! `receives_max` receives it moves to the dead-letter queue instead of being
//! delivered again.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::ids::{CandidateHash, deduplication_id};
use crate::settings::{DEDUPLICATION_WINDOW, RECEIVES_MAX, VISIBILITY_TIMEOUT};

/// Messages one receive returns at most (SQS's limit).
pub const RECEIVE_BATCH_MAX: usize = 10;
/// The longest long poll (SQS's limit).
pub const RECEIVE_WAIT_MAX: Duration = Duration::from_secs(20);
/// The longest visibility timeout (SQS's limit).
pub const VISIBILITY_TIMEOUT_MAX: Duration = Duration::from_secs(12 * 60 * 60);
/// The largest message body (SQS's limit).
pub const BODY_BYTES_MAX: usize = 256 * 1024;
/// The longest group or deduplication ID (SQS's limit).
pub const ID_LEN_MAX: usize = 128;

/// How a queue behaves: the visibility timeout, the dead-letter threshold
/// and the deduplication window (SQS sets them on the queue; the embedded and
/// Redis queues take them from here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    /// How long a received message stays hidden.
    pub visibility_timeout: Duration,
    /// Receives before the dead-letter queue.
    pub receives_max: u32,
    /// How long a (group, deduplication ID) is remembered.
    pub deduplication_window: Duration,
}

impl Default for QueueConfig {
    fn default() -> QueueConfig {
        QueueConfig {
            visibility_timeout: VISIBILITY_TIMEOUT,
            receives_max: RECEIVES_MAX,
            deduplication_window: DEDUPLICATION_WINDOW,
        }
    }
}

impl QueueConfig {
    /// The queue an instance with these settings uses.
    pub fn from_settings(settings: &crate::Settings) -> QueueConfig {
        QueueConfig {
            visibility_timeout: settings.visibility_timeout,
            receives_max: settings.receives_max,
            deduplication_window: settings.deduplication_window,
        }
    }
}

/// A message to send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// The payload, JSON.
    pub body: String,
    /// The FIFO message group.
    pub group_id: String,
    /// Sends with the same (group, deduplication ID) within the window are one
    /// message.
    pub deduplication_id: String,
}

impl Message {
    /// An admission's message: group = the candidate hash's first 4 hex
    /// digits, deduplication ID = candidate hash + request timestamp.
    pub fn admission(candidate: &CandidateHash, request_ms: u64, body: String) -> Message {
        Message {
            body,
            group_id: candidate.message_group().to_owned(),
            deduplication_id: deduplication_id(candidate, request_ms),
        }
    }

    /// SQS's limits: a body of at most [`BODY_BYTES_MAX`], group and
    /// deduplication IDs of 1..=[`ID_LEN_MAX`] printable ASCII characters.
    pub fn check(&self) -> Result<(), QueueError> {
        if self.body.len() > BODY_BYTES_MAX {
            return Err(QueueError::Invalid(format!(
                "body of {} bytes, at most {BODY_BYTES_MAX}",
                self.body.len()
            )));
        }
        for (what, id) in [
            ("group id", &self.group_id),
            ("deduplication id", &self.deduplication_id),
        ] {
            if id.is_empty() || id.len() > ID_LEN_MAX || !id.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(QueueError::Invalid(format!(
                    "{what} must be 1..={ID_LEN_MAX} printable ASCII characters"
                )));
            }
        }
        Ok(())
    }
}

/// The handle of one receive of a message: deleting or hiding the message
/// takes the handle of its latest receive.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ReceiptHandle(pub String);

/// A received message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Received {
    /// The message as sent.
    pub message: Message,
    /// For delete and change_visibility.
    pub receipt: ReceiptHandle,
    /// How many times it has been received, this time included.
    pub receive_count: u32,
    /// When it was sent, ms since the epoch.
    pub sent_ms: u64,
}

/// What a send did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SendOutcome {
    /// A new message.
    Queued,
    /// The same (group, deduplication ID) was sent within the window: accepted,
    /// and not delivered again.
    Deduplicated,
}

/// Messages in the queue (the dead-letter queue not included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueDepth {
    /// Waiting to be received (`ApproximateNumberOfMessages`).
    pub visible: u64,
    /// Received and not yet deleted (`ApproximateNumberOfMessagesNotVisible`).
    pub in_flight: u64,
}

/// What [`Queue::purge`] removed (SQS's counts are approximate).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Purged {
    /// Messages waiting to be received.
    pub visible: u64,
    /// Messages received and not yet deleted (a worker may still hold one:
    /// its delete then fails as an invalid receipt).
    pub in_flight: u64,
    /// Messages of the dead-letter queue.
    pub dead_letters: u64,
}

impl Purged {
    /// Every message removed, dead letters included.
    pub fn total(&self) -> u64 {
        self.visible + self.in_flight + self.dead_letters
    }
}

/// Why a queue call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// The queue is unreachable, timed out or failed.
    #[error("queue unavailable: {0}")]
    Unavailable(String),
    /// Over the queue's throughput: retry later.
    #[error("queue throttled")]
    Throttled,
    /// The receipt is not the latest receive of a message in flight: the
    /// message was deleted, its visibility expired, or it was received again.
    #[error("invalid receipt handle")]
    InvalidReceipt,
    /// The call broke one of the queue's limits: a programmer error.
    #[error("invalid queue operation: {0}")]
    Invalid(String),
}

/// An SQS-FIFO-like queue with a dead-letter queue behind it.
#[async_trait]
pub trait Queue: Send + Sync + std::fmt::Debug {
    /// Sends a message, unless the same (group, deduplication ID) was sent
    /// within the deduplication window.
    async fn send(&self, message: Message) -> Result<SendOutcome, QueueError>;

    /// Up to `max` (1..=[`RECEIVE_BATCH_MAX`]) messages, each made invisible
    /// for the visibility timeout. Long polling: returns as soon as something
    /// is available, or empty after `wait` (at most [`RECEIVE_WAIT_MAX`]).
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Received>, QueueError>;

    /// Deletes a received message: it is done with.
    async fn delete(&self, receipt: &ReceiptHandle) -> Result<(), QueueError>;

    /// Makes a received message visible again after `timeout` from now (zero:
    /// now), at most [`VISIBILITY_TIMEOUT_MAX`].
    async fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        timeout: Duration,
    ) -> Result<(), QueueError>;

    /// Deletes several received messages: one result per receipt, in order,
    /// each as [`Queue::delete`] would answer it. SQS does up to ten in one
    /// call (`DeleteMessageBatch`); the default deletes one after another.
    async fn delete_batch(&self, receipts: &[ReceiptHandle]) -> Vec<Result<(), QueueError>> {
        let mut out = Vec::with_capacity(receipts.len());
        for r in receipts {
            out.push(self.delete(r).await);
        }
        out
    }

    /// [`Queue::change_visibility`] of several received messages to the
    /// same `timeout`: one result per receipt, in order. SQS does up to ten
    /// in one call (`ChangeMessageVisibilityBatch`); the default changes one
    /// after another.
    async fn change_visibility_batch(
        &self,
        receipts: &[ReceiptHandle],
        timeout: Duration,
    ) -> Vec<Result<(), QueueError>> {
        let mut out = Vec::with_capacity(receipts.len());
        for r in receipts {
            out.push(self.change_visibility(r, timeout).await);
        }
        out
    }

    /// The age of the oldest message not yet deleted
    /// (`ApproximateAgeOfOldestMessage`); `None` when the queue is empty.
    async fn oldest_age(&self) -> Result<Option<Duration>, QueueError>;

    /// How many messages wait and how many are in flight.
    async fn depth(&self) -> Result<QueueDepth, QueueError>;

    /// The dead-letter queue's messages, oldest first. One is an alert.
    async fn dead_letters(&self) -> Result<Vec<Message>, QueueError>;

    /// Removes every message, waiting or in flight, and every dead letter:
    /// the ops reset, of a queue that holds one sale's messages (the
    /// embedded queue of a process, the Redis queue under the sale's hash
    /// tag, the SQS queues of one deployment). A message a worker holds is
    /// gone: its delete or visibility change answers
    /// [`QueueError::InvalidReceipt`]. Deduplication IDs may be forgotten.
    ///
    /// `Ok(None)`: this queue cannot be purged (the default); the caller
    /// reads what is left ([`Queue::depth`], [`Queue::dead_letters`]) and
    /// refuses to call the sale clean while anything is.
    async fn purge(&self) -> Result<Option<Purged>, QueueError> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_messages_use_the_group_and_deduplication_id_of_the_design() {
        let c = CandidateHash::of("candidate-1");
        let m = Message::admission(&c, 1_700_000_000_000, "{}".into());
        assert_eq!(m.group_id, &c.as_str()[..4]);
        assert_eq!(m.deduplication_id, format!("{c}-1700000000000"));
        m.check().unwrap();
    }

    #[test]
    fn messages_outside_sqs_limits_are_refused() {
        let c = CandidateHash::of("candidate-1");
        let ok = Message::admission(&c, 1, "{}".into());
        let big = Message {
            body: "x".repeat(BODY_BYTES_MAX + 1),
            ..ok.clone()
        };
        assert!(matches!(big.check(), Err(QueueError::Invalid(_))));
        for group in [String::new(), "a b".into(), "g".repeat(ID_LEN_MAX + 1)] {
            let m = Message {
                group_id: group,
                ..ok.clone()
            };
            assert!(m.check().is_err());
        }
        let m = Message {
            deduplication_id: String::new(),
            ..ok
        };
        assert!(m.check().is_err());
    }
}
