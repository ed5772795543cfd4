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
//! Fewer calls where SQS allows them:
//! - sends are coalesced into `SendMessageBatch` calls ([`send_loop`]):
//!   every send joins the batch being gathered, and a batch leaves at once
//!   unless [`SEND_BATCHES_IN_FLIGHT`] batches are already under way, in
//!   which case it keeps gathering (up to ten messages, the batch size limit)
//!   until one comes back. No send waits for company: at a low rate each
//!   batch is one message (one call, as before), and the batches grow only
//!   when calls are slow or many, which is when a call saved matters. Each
//!   message keeps its own group and deduplication ID, and each sender gets
//!   its own entry's answer.
//! - [`Queue::delete_batch`] and [`Queue::change_visibility_batch`] are one
//!   `DeleteMessageBatch` / `ChangeMessageVisibilityBatch` per ten receipts.
//!
//! The counts (`GetQueueAttributes`) are read fresh on every call: a few a
//! second per instance for `/metrics` and the dead-letter alarm, whatever
//! the rate (a reading kept 250 ms gave the contract's checks a stale depth).
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
    Message, Purged, Queue, QueueDepth, QueueError, RECEIVE_BATCH_MAX, RECEIVE_WAIT_MAX,
    ReceiptHandle, Received, SendOutcome, VISIBILITY_TIMEOUT_MAX,
};
use booking_streams::{BatchFailure, FailureDestination};
use parking_lot::Mutex;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::errors::{Failure, queue_error};

/// Dead letters one reading returns at most (one receive's worth; a single
/// one is an alert already).
pub const DEAD_LETTERS_READ_MAX: i32 = 10;
/// The long poll of a dead-letter reading when the counts say there are
/// some (a short poll may miss them).
pub const DEAD_LETTERS_WAIT_S: i32 = 1;
/// Messages the adapter remembers holding, for the oldest age.
pub const HELD_MAX: usize = 10_000;
/// Send batches under way at once per queue; while they are all out, new
/// sends gather into the next batch ([`send_loop`]).
pub const SEND_BATCHES_IN_FLIGHT: usize = 8;
/// Entries of one `SendMessageBatch`, `DeleteMessageBatch` or
/// `ChangeMessageVisibilityBatch` at most (SQS's limit).
pub const BATCH_ENTRIES_MAX: usize = 10;
/// The bodies of one `SendMessageBatch` together at most (SQS's limit).
pub const BATCH_BYTES_MAX: usize = 256 * 1024;

/// Whether a message of `next_bytes` joins a batch of `entries` messages
/// and `bytes` bytes (pure): ten entries and 256 KiB at most.
pub fn joins_batch(entries: usize, bytes: usize, next_bytes: usize) -> bool {
    entries < BATCH_ENTRIES_MAX && bytes + next_bytes <= BATCH_BYTES_MAX
}

/// A send waiting for its batch.
#[derive(Debug)]
struct PendingSend {
    message: Message,
    answer: oneshot::Sender<Result<SendOutcome, QueueError>>,
}

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
    /// Sends on their way to [`send_loop`].
    sends: mpsc::UnboundedSender<PendingSend>,
}

/// Gathers sends into batches and sends each batch
/// ([`SEND_BATCHES_IN_FLIGHT`] at once at most), until every sender is
/// gone. A batch takes every send waiting when it leaves (within
/// [`joins_batch`]); what does not fit starts the next one.
async fn send_loop(
    client: aws_sdk_sqs::Client,
    queue_url: String,
    mut pending: mpsc::UnboundedReceiver<PendingSend>,
) {
    let in_flight = Arc::new(Semaphore::new(SEND_BATCHES_IN_FLIGHT));
    let mut carried: Option<PendingSend> = None;
    loop {
        let first = match carried.take() {
            Some(p) => p,
            None => match pending.recv().await {
                Some(p) => p,
                None => break,
            },
        };
        // while every batch is out, the sends pile up for this one
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            break;
        };
        let mut bytes = first.message.body.len();
        let mut batch = vec![first];
        while let Ok(next) = pending.try_recv() {
            if !joins_batch(batch.len(), bytes, next.message.body.len()) {
                carried = Some(next);
                break;
            }
            bytes += next.message.body.len();
            batch.push(next);
        }
        let client = client.clone();
        let url = queue_url.clone();
        tokio::spawn(async move {
            send_batch(&client, &url, batch).await;
            drop(permit);
        });
    }
}

/// One batch: `SendMessage` for a single message, `SendMessageBatch` for
/// more; every sender gets its own entry's answer (the call's error if the
/// whole call failed).
async fn send_batch(client: &aws_sdk_sqs::Client, queue_url: &str, batch: Vec<PendingSend>) {
    if let [_] = batch.as_slice() {
        let Some(PendingSend { message, answer }) = batch.into_iter().next() else {
            return;
        };
        let result = client
            .send_message()
            .queue_url(queue_url)
            .message_body(message.body)
            .message_group_id(message.group_id)
            .message_deduplication_id(message.deduplication_id)
            .send()
            .await
            .map(|_| SendOutcome::Queued)
            .map_err(|e| queue_error(&Failure::of(&e)));
        let _ = answer.send(result);
        return;
    }
    let mut request = client.send_message_batch().queue_url(queue_url);
    let mut answers = Vec::with_capacity(batch.len());
    for (i, PendingSend { message, answer }) in batch.into_iter().enumerate() {
        let entry = aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
            .id(i.to_string())
            .message_body(message.body)
            .message_group_id(message.group_id)
            .message_deduplication_id(message.deduplication_id)
            .build();
        match entry {
            Ok(entry) => {
                request = request.entries(entry);
                answers.push(Some(answer));
            }
            Err(e) => {
                let _ = answer.send(Err(QueueError::Invalid(e.to_string())));
                answers.push(None);
            }
        }
    }
    if answers.iter().all(Option::is_none) {
        return;
    }
    let out = match request.send().await {
        Ok(out) => out,
        Err(e) => {
            let error = queue_error(&Failure::of(&e));
            for answer in answers.into_iter().flatten() {
                let _ = answer.send(Err(error.clone()));
            }
            return;
        }
    };
    let slot = |id: &str| id.parse::<usize>().ok();
    for ok in out.successful() {
        if let Some(answer) = slot(ok.id())
            .and_then(|i| answers.get_mut(i))
            .and_then(Option::take)
        {
            let _ = answer.send(Ok(SendOutcome::Queued));
        }
    }
    for failed in out.failed() {
        if let Some(answer) = slot(failed.id())
            .and_then(|i| answers.get_mut(i))
            .and_then(Option::take)
        {
            let _ = answer.send(Err(queue_error(&Failure {
                code: Some(failed.code().to_owned()),
                message: failed.message().unwrap_or_default().to_owned(),
                unanswered: false,
            })));
        }
    }
    for answer in answers.into_iter().flatten() {
        let _ = answer.send(Err(QueueError::Unavailable(
            "SendMessageBatch answered nothing for the entry".into(),
        )));
    }
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
        let (sends, pending) = mpsc::unbounded_channel();
        // ends when the queue (the last sender) is dropped
        tokio::spawn(send_loop(client.clone(), queue_url.clone(), pending));
        Ok(SqsQueue {
            client,
            queue_url,
            dead_letter_url,
            visibility_timeout,
            clock,
            observed: Mutex::default(),
            sends,
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
    pub async fn delete_message_batch(
        &self,
        receipts: &[ReceiptHandle],
    ) -> Result<Vec<Result<(), QueueError>>, QueueError> {
        if receipts.is_empty() || receipts.len() > BATCH_ENTRIES_MAX {
            return Err(QueueError::Invalid(format!(
                "a batch delete of {} messages (1..={BATCH_ENTRIES_MAX})",
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
        let results = batch_results(receipts.len(), out.failed());
        let mut observed = self.observed.lock();
        for (r, result) in receipts.iter().zip(&results) {
            if result.is_ok() {
                observed.held.remove(&r.0);
            }
        }
        Ok(results)
    }

    /// Changes the visibility of up to ten received messages in one call
    /// (`ChangeMessageVisibilityBatch`); one result per receipt, in order.
    pub async fn change_message_visibility_batch(
        &self,
        receipts: &[ReceiptHandle],
        timeout: Duration,
    ) -> Result<Vec<Result<(), QueueError>>, QueueError> {
        if receipts.is_empty() || receipts.len() > BATCH_ENTRIES_MAX {
            return Err(QueueError::Invalid(format!(
                "a batch visibility change of {} messages (1..={BATCH_ENTRIES_MAX})",
                receipts.len()
            )));
        }
        if timeout > VISIBILITY_TIMEOUT_MAX {
            return Err(QueueError::Invalid(format!(
                "visibility of {timeout:?}, at most {VISIBILITY_TIMEOUT_MAX:?}"
            )));
        }
        let seconds = whole_seconds(timeout, VISIBILITY_TIMEOUT_MAX);
        let mut request = self
            .client
            .change_message_visibility_batch()
            .queue_url(&self.queue_url);
        for (i, r) in receipts.iter().enumerate() {
            let entry = aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry::builder()
                .id(i.to_string())
                .receipt_handle(&r.0)
                .visibility_timeout(seconds)
                .build()
                .map_err(|e| QueueError::Invalid(e.to_string()))?;
            request = request.entries(entry);
        }
        let out = request
            .send()
            .await
            .map_err(|e| queue_error(&Failure::of(&e)))?;
        let results = batch_results(receipts.len(), out.failed());
        let mut observed = self.observed.lock();
        for (r, result) in receipts.iter().zip(&results) {
            if result.is_ok() {
                // as `change_visibility`: given back or extended, a later
                // receive or delete says where it is
                observed.held.remove(&r.0);
            }
        }
        Ok(results)
    }
}

/// One result per entry of a batch call whose entries were numbered by
/// position: `Ok` unless the answer lists the entry as failed.
fn batch_results(
    n: usize,
    failed: &[aws_sdk_sqs::types::BatchResultErrorEntry],
) -> Vec<Result<(), QueueError>> {
    let mut results: Vec<Result<(), QueueError>> = vec![Ok(()); n];
    for f in failed {
        if let Some(slot) = f
            .id()
            .parse::<usize>()
            .ok()
            .and_then(|i| results.get_mut(i))
        {
            *slot = Err(queue_error(&Failure {
                code: Some(f.code().to_owned()),
                message: f.message().unwrap_or_default().to_owned(),
                unanswered: false,
            }));
        }
    }
    results
}

/// Runs `call` on each chunk of at most [`BATCH_ENTRIES_MAX`] receipts (one
/// alone by `single`, the batch call's price saved for nothing), one result
/// per receipt in order; a chunk whose whole call failed gives each of its
/// receipts that error.
async fn in_chunks<'a, B, BF, S, SF>(
    receipts: &'a [ReceiptHandle],
    batch: B,
    single: S,
) -> Vec<Result<(), QueueError>>
where
    B: Fn(&'a [ReceiptHandle]) -> BF,
    BF: std::future::Future<Output = Result<Vec<Result<(), QueueError>>, QueueError>>,
    S: Fn(&'a ReceiptHandle) -> SF,
    SF: std::future::Future<Output = Result<(), QueueError>>,
{
    let mut out = Vec::with_capacity(receipts.len());
    for chunk in receipts.chunks(BATCH_ENTRIES_MAX) {
        if let [one] = chunk {
            out.push(single(one).await);
            continue;
        }
        match batch(chunk).await {
            Ok(results) => out.extend(results),
            Err(e) => out.extend(chunk.iter().map(|_| Err(e.clone()))),
        }
    }
    out
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
        let (answer, answered) = oneshot::channel();
        self.sends
            .send(PendingSend { message, answer })
            .map_err(|_| QueueError::Unavailable("the queue's sender has stopped".into()))?;
        answered
            .await
            .map_err(|_| QueueError::Unavailable("the send was dropped unanswered".into()))?
    }

    async fn delete_batch(&self, receipts: &[ReceiptHandle]) -> Vec<Result<(), QueueError>> {
        in_chunks(
            receipts,
            |chunk| self.delete_message_batch(chunk),
            |one| self.delete(one),
        )
        .await
    }

    async fn change_visibility_batch(
        &self,
        receipts: &[ReceiptHandle],
        timeout: Duration,
    ) -> Vec<Result<(), QueueError>> {
        in_chunks(
            receipts,
            |chunk| self.change_message_visibility_batch(chunk, timeout),
            |one| self.change_visibility(one, timeout),
        )
        .await
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

    /// `PurgeQueue` on the admission queue and on its dead-letter queue,
    /// each only if its counts say it holds something: both are the
    /// deployment's own (named from its prefix, as its table and status
    /// document are), so they hold its sale's messages only. The counts are
    /// the approximate ones read before; SQS deletes within 60 s and takes
    /// one purge per queue a minute (a second one fails as
    /// `PurgeQueueInProgress`, reported as unavailable).
    async fn purge(&self) -> Result<Option<Purged>, QueueError> {
        let queue = self.counts(&self.queue_url).await?;
        let dead = self.counts(&self.dead_letter_url).await?;
        for (url, depth) in [(&self.queue_url, queue), (&self.dead_letter_url, dead)] {
            if depth.visible + depth.in_flight == 0 {
                continue;
            }
            self.client
                .purge_queue()
                .queue_url(url)
                .send()
                .await
                .map_err(|e| queue_error(&Failure::of(&e)))?;
            tracing::info!(queue = %url, visible = depth.visible, in_flight = depth.in_flight, "queue purged");
        }
        Ok(Some(Purged {
            visible: queue.visible,
            in_flight: queue.in_flight,
            dead_letters: dead.visible + dead.in_flight,
        }))
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
    fn a_batch_takes_ten_messages_and_256_kib_at_most() {
        assert!(joins_batch(0, 0, 1_000));
        assert!(joins_batch(9, 9_000, 1_000));
        assert!(!joins_batch(10, 10_000, 1), "ten entries");
        assert!(joins_batch(1, BATCH_BYTES_MAX - 10, 10));
        assert!(!joins_batch(1, BATCH_BYTES_MAX - 10, 11), "256 KiB");
    }

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
