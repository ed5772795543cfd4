//! The event-source mapping, run locally: reads a [`ChangeStream`] from its
//! position, invokes one [`BatchHandler`] per batch, and follows
//! [`crate::policy`] after each invocation. One mapping per handler (two in
//! all: expiry and sync), each with its own position, as Lambda runs two
//! functions on one stream.
//!
//! The position lives in the mapping, as Lambda keeps it in the mapping:
//! a mapping that restarts reads from where its stream reader starts
//! (`TRIM_HORIZON` on DynamoDB Streams), and both handlers are idempotent,
//! so reading a record twice costs a no-op release or an unchanged upsert.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use booking::Clock;
use booking::records::{ChangeStream, StreamRecord};
use booking_service::Shutdown;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::policy::{DiscardReason, MappingConfig, Next, after_invoke, expired_prefix};

/// A stream handler, invoked with a batch in stream order.
#[async_trait]
pub trait BatchHandler: Send + Sync + std::fmt::Debug {
    /// The handler's name (for logs and the on-failure record).
    fn name(&self) -> &'static str;

    /// Handles `records` in order. Returns the sequence of the first record
    /// it could not handle (Lambda's `batchItemFailures`), `None` if it
    /// handled all of them.
    async fn handle_batch(&self, records: &[StreamRecord]) -> Option<u64>;
}

/// What the on-failure destination receives when the mapping gives records
/// up: enough for a human to replay them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchFailure {
    /// The handler that gave up.
    pub handler: String,
    /// Why.
    pub reason: DiscardReason,
    /// Attempts made on the last of them.
    pub attempts: u32,
    /// The records given up on, in order.
    pub records: Vec<StreamRecord>,
}

/// Where given-up records go (an SQS queue in AWS).
#[async_trait]
pub trait FailureDestination: Send + Sync + std::fmt::Debug {
    /// Sends one failure record.
    async fn send(&self, failure: &BatchFailure) -> Result<(), String>;
}

/// An on-failure destination in memory.
#[derive(Debug, Default)]
pub struct MemoryDestination {
    sent: Mutex<Vec<BatchFailure>>,
}

impl MemoryDestination {
    /// What was sent, in order.
    pub fn sent(&self) -> Vec<BatchFailure> {
        self.sent.lock().clone()
    }
}

#[async_trait]
impl FailureDestination for MemoryDestination {
    async fn send(&self, failure: &BatchFailure) -> Result<(), String> {
        self.sent.lock().push(failure.clone());
        Ok(())
    }
}

/// A snapshot of a mapping's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MappingCounts {
    /// Invocations.
    pub invocations: u64,
    /// Records handled.
    pub handled: u64,
    /// Invocations that reported a failure.
    pub failed_invocations: u64,
    /// Retries that were bisections.
    pub bisections: u64,
    /// Records given up on for their age.
    pub discarded_too_old: u64,
    /// Records given up on after the last attempt.
    pub discarded_after_retries: u64,
    /// Failure records the destination refused (retried).
    pub destination_failures: u64,
    /// Stream reads that failed.
    pub read_failures: u64,
    /// The position: the last sequence done with.
    pub position: u64,
}

#[derive(Debug, Default)]
struct Counters {
    invocations: AtomicU64,
    handled: AtomicU64,
    failed_invocations: AtomicU64,
    bisections: AtomicU64,
    discarded_too_old: AtomicU64,
    discarded_after_retries: AtomicU64,
    destination_failures: AtomicU64,
    read_failures: AtomicU64,
}

fn bump(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::Relaxed);
}

/// What one step of the mapping did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stepped {
    /// Nothing new on the stream.
    Idle,
    /// An invocation, and the step after it.
    Invoked(Next),
    /// Old records given up on before any invocation.
    Expired(usize),
    /// The stream could not be read, or a failure record not sent: wait.
    Stalled(String),
}

#[derive(Debug)]
struct Cursor {
    position: u64,
    limit: usize,
    attempts: u32,
}

/// One handler on one stream, the way Lambda runs it.
#[derive(Debug)]
pub struct EventSourceMapping {
    stream: Arc<dyn ChangeStream>,
    handler: Arc<dyn BatchHandler>,
    destination: Arc<dyn FailureDestination>,
    clock: Arc<dyn Clock>,
    config: MappingConfig,
    cursor: tokio::sync::Mutex<Cursor>,
    counters: Counters,
    position: AtomicU64,
}

impl EventSourceMapping {
    /// A mapping reading `stream` after `position` (0: from the start).
    pub fn new(
        stream: Arc<dyn ChangeStream>,
        handler: Arc<dyn BatchHandler>,
        destination: Arc<dyn FailureDestination>,
        clock: Arc<dyn Clock>,
        config: MappingConfig,
        position: u64,
    ) -> Result<EventSourceMapping, String> {
        config.check()?;
        Ok(EventSourceMapping {
            stream,
            handler,
            destination,
            clock,
            cursor: tokio::sync::Mutex::new(Cursor {
                position,
                limit: config.batch_size,
                attempts: 0,
            }),
            config,
            counters: Counters::default(),
            position: AtomicU64::new(position),
        })
    }

    /// The counters.
    pub fn stats(&self) -> MappingCounts {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let c = &self.counters;
        MappingCounts {
            invocations: g(&c.invocations),
            handled: g(&c.handled),
            failed_invocations: g(&c.failed_invocations),
            bisections: g(&c.bisections),
            discarded_too_old: g(&c.discarded_too_old),
            discarded_after_retries: g(&c.discarded_after_retries),
            destination_failures: g(&c.destination_failures),
            read_failures: g(&c.read_failures),
            position: g(&self.position),
        }
    }

    /// The handler's name.
    pub fn handler_name(&self) -> &'static str {
        self.handler.name()
    }

    async fn give_up(
        &self,
        records: &[StreamRecord],
        reason: DiscardReason,
        attempts: u32,
    ) -> Result<(), String> {
        let failure = BatchFailure {
            handler: self.handler.name().to_owned(),
            reason,
            attempts,
            records: records.to_vec(),
        };
        tracing::error!(
            handler = self.handler.name(),
            ?reason,
            records = records.len(),
            first = records.first().map(|r| r.sequence),
            "stream records given up on; sent to the on-failure destination"
        );
        self.destination.send(&failure).await.inspect_err(|_| {
            bump(&self.counters.destination_failures, 1);
        })
    }

    /// One read (waiting up to the poll wait) and, if it brought records, one
    /// invocation or one discard, then the policy's step. Sleeps nothing: the
    /// caller waits [`EventSourceMapping::pause`] after a retry or a stall.
    pub async fn step(&self) -> Stepped {
        let mut cursor = self.cursor.lock().await;
        let records = match self
            .stream
            .read(cursor.position, cursor.limit, self.config.poll_wait)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                bump(&self.counters.read_failures, 1);
                return Stepped::Stalled(e.to_string());
            }
        };
        if records.is_empty() {
            return Stepped::Idle;
        }
        let created: Vec<u64> = records.iter().map(|r| r.at_ms).collect();
        let old = expired_prefix(&created, self.clock.now_ms(), self.config.record_age_max);
        if old > 0 {
            if let Err(e) = self
                .give_up(&records[..old], DiscardReason::RecordTooOld, 0)
                .await
            {
                return Stepped::Stalled(e);
            }
            bump(&self.counters.discarded_too_old, old as u64);
            self.advance(&mut cursor, records[old - 1].sequence);
            return Stepped::Expired(old);
        }
        bump(&self.counters.invocations, 1);
        let failed_at = self.handler.handle_batch(&records).await;
        let sequences: Vec<u64> = records.iter().map(|r| r.sequence).collect();
        let next = after_invoke(
            &self.config,
            cursor.position,
            &sequences,
            failed_at,
            cursor.attempts,
        );
        match &next {
            Next::Advance { through } => {
                bump(&self.counters.handled, records.len() as u64);
                self.advance(&mut cursor, *through);
            }
            Next::Retry {
                through,
                limit,
                attempts,
                bisected,
            } => {
                bump(&self.counters.failed_invocations, 1);
                if *bisected {
                    bump(&self.counters.bisections, 1);
                }
                let done = sequences.iter().filter(|s| **s <= *through).count();
                bump(&self.counters.handled, done as u64);
                cursor.position = *through;
                self.position.store(*through, Ordering::Relaxed);
                cursor.limit = *limit;
                cursor.attempts = *attempts;
            }
            Next::Discard {
                through,
                first,
                last,
                reason,
            } => {
                bump(&self.counters.failed_invocations, 1);
                let done = sequences.iter().filter(|s| **s <= *through).count();
                bump(&self.counters.handled, done as u64);
                cursor.position = *through;
                self.position.store(*through, Ordering::Relaxed);
                let lost: Vec<StreamRecord> = records
                    .iter()
                    .filter(|r| r.sequence >= *first && r.sequence <= *last)
                    .cloned()
                    .collect();
                if let Err(e) = self.give_up(&lost, *reason, cursor.attempts + 1).await {
                    // the records stay: the next step invokes them again
                    return Stepped::Stalled(e);
                }
                bump(&self.counters.discarded_after_retries, lost.len() as u64);
                self.advance(&mut cursor, *last);
            }
        }
        Stepped::Invoked(next)
    }

    fn advance(&self, cursor: &mut Cursor, through: u64) {
        cursor.position = through;
        cursor.limit = self.config.batch_size;
        cursor.attempts = 0;
        self.position.store(through, Ordering::Relaxed);
    }

    /// How long to wait after `stepped` before the next step.
    pub fn pause(&self, stepped: &Stepped) -> std::time::Duration {
        match stepped {
            Stepped::Invoked(Next::Retry {
                attempts,
                bisected: false,
                ..
            }) => self.config.backoff(attempts.saturating_sub(1)),
            Stepped::Stalled(_) => self.config.backoff_max.min(self.config.backoff(3)),
            _ => std::time::Duration::ZERO,
        }
    }

    /// Steps until `shutdown` says stop.
    pub async fn run(&self, mut shutdown: Shutdown) {
        loop {
            if *shutdown.borrow() || shutdown.has_changed().is_err() {
                break;
            }
            let stepped = tokio::select! {
                _ = shutdown.wait_for(|s| *s) => break,
                s = self.step() => s,
            };
            if let Stepped::Stalled(why) = &stepped {
                tracing::warn!(handler = self.handler.name(), why = %why, "stream mapping stalled");
            }
            let pause = self.pause(&stepped);
            if !pause.is_zero() {
                tokio::select! {
                    _ = shutdown.wait_for(|s| *s) => break,
                    _ = tokio::time::sleep(pause) => {}
                }
            }
        }
        tracing::info!(handler = self.handler.name(), "stream mapping stopped");
    }
}
