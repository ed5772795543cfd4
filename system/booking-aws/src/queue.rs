//! The admission queue on SQS FIFO: [`SqsQueue`], and the mappings'
//! on-failure queue: [`SqsDestination`].
//!
//! What SQS does itself, set by `provision`: order within a message group,
//! deduplication per group (`DeduplicationScope=messageGroup`), the
//! per-group throughput limit (`FifoThroughputLimit=perMessageGroupId`), the
//! visibility timeout, and the redrive to the dead-letter queue after
//! `maxReceiveCount` receives. The adapter sends, long-polls, deletes and
//! reads counts; every receive asks for the visibility timeout of the
//! instance's settings, so a rehearsal's scaled timeout holds.
//!
//! Two things SQS does not say, and what the adapter answers instead:
//! - whether a send was deduplicated: SQS accepts a duplicate as if it were
//!   new, so [`SendOutcome::Queued`] is all a send reports (the message is
//!   still delivered once);
//! - the age of the oldest message: a CloudWatch metric
//!   (`ApproximateAgeOfOldestMessage`), not a queue attribute. The adapter
//!   reports what its own receives saw: the longest wait (receive time −
//!   `SentTimestamp`) since the last reading, or the age of a message it
//!   still holds, whichever is older; `None` when the queue is empty.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use booking::Clock;
use booking::queue::{
    Message, Queue, QueueDepth, QueueError, RECEIVE_BATCH_MAX, RECEIVE_WAIT_MAX, ReceiptHandle,
    Received, SendOutcome, VISIBILITY_TIMEOUT_MAX,
};
use booking_streams::{BatchFailure, FailureDestination};
use parking_lot::Mutex;

use crate::errors::{Failure, queue_error};

/// Dead letters one reading returns at most (one receive's worth; a single
/// one is an alert already).
pub const DEAD_LETTERS_READ_MAX: i32 = 10;
/// The long poll of a dead-letter reading when the counts say there are
/// some (a short poll may miss them).
pub const DEAD_LETTERS_WAIT_S: i32 = 1;
/// Messages the adapter remembers holding, for the oldest age.
pub const HELD_MAX: usize = 10_000;

/// Whole seconds, rounded up, within SQS's bounds.
pub fn whole_seconds(d: Duration, max: Duration) -> i32 {
    let s = d.min(max).as_millis().div_ceil(1_000);
    i32::try_from(s).unwrap_or(i32::MAX)
}

#[derive(Debug, Default)]
struct Observed {
    /// The longest wait a receive saw since the last reading, ms.
    longest_wait_ms: u64,
    /// Receipt → sent time of the messages received and not yet deleted.
    held: HashMap<String, u64>,
}

/// The admission queue on SQS FIFO.
#[derive(Debug)]
pub struct SqsQueue {
    client: aws_sdk_sqs::Client,
    queue_url: String,
    dead_letter_url: String,
    visibility_timeout: Duration,
    clock: Arc<dyn Clock>,
    observed: Mutex<Observed>,
}

async fn url_of(client: &aws_sdk_sqs::Client, name: &str) -> Result<String, QueueError> {
    let out = client
        .get_queue_url()
        .queue_name(name)
        .send()
        .await
        .map_err(|e| {
            let f = Failure::of(&e);
            QueueError::Unavailable(format!(
                "queue {name} (run `booking provision`): {}",
                f.message
            ))
        })?;
    out.queue_url()
        .map(str::to_owned)
        .ok_or_else(|| QueueError::Unavailable(format!("no URL for queue {name}")))
}

impl SqsQueue {
    /// The queue `queue` (a `.fifo` name) with its dead-letter queue
    /// `dead_letter_queue`, received with `visibility_timeout`.
    pub async fn connect(
        client: aws_sdk_sqs::Client,
        queue: &str,
        dead_letter_queue: &str,
        visibility_timeout: Duration,
        clock: Arc<dyn Clock>,
    ) -> Result<SqsQueue, QueueError> {
        let queue_url = url_of(&client, queue).await?;
        let dead_letter_url = url_of(&client, dead_letter_queue).await?;
        Ok(SqsQueue {
            client,
            queue_url,
            dead_letter_url,
            visibility_timeout,
            clock,
            observed: Mutex::default(),
        })
    }

    /// The queue's URL.
    pub fn url(&self) -> &str {
        &self.queue_url
    }

    /// The dead-letter queue's URL.
    pub fn dead_letter_url(&self) -> &str {
        &self.dead_letter_url
    }

    async fn counts(&self, url: &str) -> Result<QueueDepth, QueueError> {
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
            .send()
            .await
            .map_err(|e| queue_error(&Failure::of(&e)))?;
        let get = |name: QueueAttributeName| {
            out.attributes()
                .and_then(|a| a.get(&name))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        Ok(QueueDepth {
            visible: get(QueueAttributeName::ApproximateNumberOfMessages)
                + get(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
            in_flight: get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        })
    }

    /// Deletes up to ten received messages in one call (`DeleteMessageBatch`);
    /// one result per receipt, in order.
    pub async fn delete_batch(
        &self,
        receipts: &[ReceiptHandle],
    ) -> Result<Vec<Result<(), QueueError>>, QueueError> {
        if receipts.is_empty() || receipts.len() > RECEIVE_BATCH_MAX {
            return Err(QueueError::Invalid(format!(
                "a batch delete of {} messages (1..={RECEIVE_BATCH_MAX})",
                receipts.len()
            )));
        }
        let mut request = self
            .client
            .delete_message_batch()
            .queue_url(&self.queue_url);
        for (i, r) in receipts.iter().enumerate() {
            let entry = aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .receipt_handle(&r.0)
                .build()
                .map_err(|e| QueueError::Invalid(e.to_string()))?;
            request = request.entries(entry);
        }
        let out = request
            .send()
            .await
            .map_err(|e| queue_error(&Failure::of(&e)))?;
        let mut results: Vec<Result<(), QueueError>> = vec![Ok(()); receipts.len()];
        for failed in out.failed() {
            if let Some(slot) = failed
                .id()
                .parse::<usize>()
                .ok()
                .and_then(|i| results.get_mut(i))
            {
                *slot = Err(queue_error(&Failure {
                    code: Some(failed.code().to_owned()),
                    message: failed.message().unwrap_or_default().to_owned(),
                    unanswered: false,
                }));
            }
        }
        let mut observed = self.observed.lock();
        for (r, result) in receipts.iter().zip(&results) {
            if result.is_ok() {
                observed.held.remove(&r.0);
            }
        }
        Ok(results)
    }
}

fn attribute(m: &aws_sdk_sqs::types::Message, name: MessageSystemAttributeName) -> Option<&str> {
    m.attributes()
        .and_then(|a| a.get(&name))
        .map(String::as_str)
}

fn received(m: &aws_sdk_sqs::types::Message) -> Result<Received, QueueError> {
    let missing = |what: &str| QueueError::Unavailable(format!("received message without {what}"));
    Ok(Received {
        message: Message {
            body: m.body().unwrap_or_default().to_owned(),
            group_id: attribute(m, MessageSystemAttributeName::MessageGroupId)
                .ok_or_else(|| missing("MessageGroupId"))?
                .to_owned(),
            deduplication_id: attribute(m, MessageSystemAttributeName::MessageDeduplicationId)
                .unwrap_or_default()
                .to_owned(),
        },
        receipt: ReceiptHandle(
            m.receipt_handle()
                .ok_or_else(|| missing("a receipt handle"))?
                .to_owned(),
        ),
        receive_count: attribute(m, MessageSystemAttributeName::ApproximateReceiveCount)
            .and_then(|v| v.parse().ok())
            .unwrap_or(1),
        sent_ms: attribute(m, MessageSystemAttributeName::SentTimestamp)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    })
}

#[async_trait]
impl Queue for SqsQueue {
    async fn send(&self, message: Message) -> Result<SendOutcome, QueueError> {
        message.check()?;
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(message.body)
            .message_group_id(message.group_id)
            .message_deduplication_id(message.deduplication_id)
            .send()
            .await
            .map_err(|e| queue_error(&Failure::of(&e)))?;
        Ok(SendOutcome::Queued)
    }

    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Received>, QueueError> {
        if max == 0 || max > RECEIVE_BATCH_MAX {
            return Err(QueueError::Invalid(format!(
                "receive of {max} messages (1..={RECEIVE_BATCH_MAX})"
            )));
        }
        if wait > RECEIVE_WAIT_MAX {
            return Err(QueueError::Invalid(format!(
                "a long poll of {wait:?}, at most {RECEIVE_WAIT_MAX:?}"
            )));
        }
        let out = self
            .client
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(max as i32)
            .wait_time_seconds(whole_seconds(wait, RECEIVE_WAIT_MAX))
            .visibility_timeout(
                whole_seconds(self.visibility_timeout, VISIBILITY_TIMEOUT_MAX).max(1),
            )
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .map_err(|e| queue_error(&Failure::of(&e)))?;
        let batch: Vec<Received> = out
            .messages()
            .iter()
            .map(received)
            .collect::<Result<_, _>>()?;
        let now_ms = self.clock.now_ms();
        let mut observed = self.observed.lock();
        for r in &batch {
            observed.longest_wait_ms = observed
                .longest_wait_ms
                .max(now_ms.saturating_sub(r.sent_ms));
            if observed.held.len() < HELD_MAX {
                observed.held.insert(r.receipt.0.clone(), r.sent_ms);
            }
        }
        Ok(batch)
    }

    async fn delete(&self, receipt: &ReceiptHandle) -> Result<(), QueueError> {
        self.client
            .delete_message()
            .queue_url(&self.queue_url)
            .receipt_handle(&receipt.0)
            .send()
            .await
            .map_err(|e| queue_error(&Failure::of(&e)))?;
        self.observed.lock().held.remove(&receipt.0);
        Ok(())
    }

    async fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        timeout: Duration,
    ) -> Result<(), QueueError> {
        if timeout > VISIBILITY_TIMEOUT_MAX {
            return Err(QueueError::Invalid(format!(
                "visibility of {timeout:?}, at most {VISIBILITY_TIMEOUT_MAX:?}"
            )));
        }
        self.client
            .change_message_visibility()
            .queue_url(&self.queue_url)
            .receipt_handle(&receipt.0)
            .visibility_timeout(whole_seconds(timeout, VISIBILITY_TIMEOUT_MAX))
            .send()
            .await
            .map_err(|e| queue_error(&Failure::of(&e)))?;
        // given back: another receive will hold it
        self.observed.lock().held.remove(&receipt.0);
        Ok(())
    }

    async fn oldest_age(&self) -> Result<Option<Duration>, QueueError> {
        let depth = self.depth().await?;
        let now_ms = self.clock.now_ms();
        let mut observed = self.observed.lock();
        let waited = std::mem::take(&mut observed.longest_wait_ms);
        if depth.visible + depth.in_flight == 0 {
            observed.held.clear();
            return Ok(None);
        }
        let holding = observed
            .held
            .values()
            .map(|sent| now_ms.saturating_sub(*sent))
            .max()
            .unwrap_or(0);
        Ok(Some(Duration::from_millis(waited.max(holding))))
    }

    async fn depth(&self) -> Result<QueueDepth, QueueError> {
        self.counts(&self.queue_url).await
    }

    async fn dead_letters(&self) -> Result<Vec<Message>, QueueError> {
        let counts = self.counts(&self.dead_letter_url).await?;
        if counts.visible + counts.in_flight == 0 {
            return Ok(Vec::new());
        }
        // visibility 0: looked at, not taken
        let out = self
            .client
            .receive_message()
            .queue_url(&self.dead_letter_url)
            .max_number_of_messages(DEAD_LETTERS_READ_MAX)
            .wait_time_seconds(DEAD_LETTERS_WAIT_S)
            .visibility_timeout(0)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .map_err(|e| queue_error(&Failure::of(&e)))?;
        out.messages()
            .iter()
            .map(|m| received(m).map(|r| r.message))
            .collect()
    }
}

/// The mappings' on-failure destination on a standard SQS queue (what a
/// Lambda event-source mapping's `DestinationConfig.OnFailure` names).
#[derive(Debug, Clone)]
pub struct SqsDestination {
    client: aws_sdk_sqs::Client,
    queue_url: String,
}

impl SqsDestination {
    /// The destination on queue `name`.
    pub async fn connect(
        client: aws_sdk_sqs::Client,
        name: &str,
    ) -> Result<SqsDestination, QueueError> {
        let queue_url = url_of(&client, name).await?;
        Ok(SqsDestination { client, queue_url })
    }

    /// The queue's URL.
    pub fn url(&self) -> &str {
        &self.queue_url
    }
}

/// A failure record's body: the whole record, or, above SQS's size limit,
/// the records' sequences and kinds without their images.
pub fn failure_body(failure: &BatchFailure) -> Result<String, String> {
    let whole = serde_json::to_string(failure).map_err(|e| e.to_string())?;
    if whole.len() <= booking::queue::BODY_BYTES_MAX {
        return Ok(whole);
    }
    let summary = serde_json::json!({
        "handler": failure.handler,
        "reason": failure.reason,
        "attempts": failure.attempts,
        "truncated": true,
        "records": failure.records.iter().map(|r| serde_json::json!({
            "sequence": r.sequence, "kind": r.kind, "at_ms": r.at_ms,
            "candidate": r.old.as_ref().or(r.new.as_ref()).map(|b| b.candidate.to_string()),
        })).collect::<Vec<_>>(),
    });
    Ok(summary.to_string())
}

#[async_trait]
impl FailureDestination for SqsDestination {
    async fn send(&self, failure: &BatchFailure) -> Result<(), String> {
        let body = failure_body(failure)?;
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body)
            .send()
            .await
            .map_err(|e| Failure::of(&e).message)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_round_up_to_whole_seconds_within_bounds() {
        assert_eq!(whole_seconds(Duration::ZERO, RECEIVE_WAIT_MAX), 0);
        assert_eq!(whole_seconds(Duration::from_millis(1), RECEIVE_WAIT_MAX), 1);
        assert_eq!(
            whole_seconds(Duration::from_millis(600), RECEIVE_WAIT_MAX),
            1
        );
        assert_eq!(
            whole_seconds(Duration::from_secs(60), VISIBILITY_TIMEOUT_MAX),
            60
        );
        assert_eq!(whole_seconds(Duration::from_secs(99), RECEIVE_WAIT_MAX), 20);
    }
}
