//! The worker: SQS FIFO → the record store.
//!
//! Each message carries one HELD booking (an [`AdmittedBooking`], or a whole
//! [`BookingRecord`] as JSON). The worker writes it with a conditional put
//! (only if no record exists). When the condition fails it never guesses: it
//! reads the record consistently and acts on `classify_conflict`'s verdict
//! ([`next_step`]): PAID → skip; HELD with the same payment → duplicate; HELD
//! with an older admission's payment → replace it conditioned on that old
//! payment; HELD with a newer admission's payment → this is a redelivered old
//! message, delete it; no record any more → released in between (delete) or
//! put again; read failed or same-millisecond ambiguity → leave it
//! unacknowledged. A message left five times ends in the dead-letter queue,
//! whose single message raises an alert ([`Worker::check_dead_letters`]).
//!
//! The worker never touches a seat counter. It *reads* the ledger before
//! every write: a message whose record is absent could be a booking already
//! released, and writing it would resurrect it. A redelivery can follow a
//! release of the record its first delivery wrote; even a first delivery can,
//! because the reconciler releases a held hold that has no record once its
//! deadline and the booking copy's slack have passed (its message was
//! dead-lettered, or never sent: the proptest in `tests/lifecycle.rs` found a
//! worker that was merely that late). So the worker asks the ledger whether
//! this payment's hold is still live ([`hold_is_live`]) and writes only if it
//! is. Between that read and the write a release could still slip in; the
//! record it would leave has no ledger hold, and the reconciler's next sweep
//! releases it again (a no-op) and deletes it.
//!
//! A poller handles its batch (up to ten messages) one FIFO group at a time
//! per group, the groups at once ([`by_group`]), and every message of the
//! batch became invisible for the
//! visibility timeout when the batch was received. A slow batch (a loaded
//! store, a rehearsal's scaled 0.6 s timeout) would outlive it: the rest of
//! the batch reappears, another poller receives it (which invalidates this
//! poller's receipts: its deletes are refused), and five receives later the
//! messages are dead letters. So the worker keeps the messages it still
//! holds hidden, as SQS consumers do (a heartbeat of ChangeMessageVisibility,
//! [`Worker::process_batch`]): once [`VISIBILITY_HEARTBEAT_AT`] of the
//! visibility timeout has passed since the batch was received (or last
//! extended), it extends the visibility of every message of the batch not
//! yet handled, the ones in hand included, by one visibility timeout. A batch
//! handled within that time costs no extra call. An extension that fails is
//! logged and the handling goes on (the message may be delivered again: the
//! at-least-once path the worker already handles). An extension whose
//! receipt is refused means another receive holds the message now: the
//! worker does not handle it ([`Outcome::Lost`]), as it never deletes with a
//! receipt that is no longer the message's latest.
//!
//! A batch's calls to the queue are batched too: the messages done with are
//! deleted together ([`Queue::delete_batch`]: one `DeleteMessageBatch` on
//! SQS) when the batch is done, or at the next heartbeat if that comes
//! first (so a handled message is never left to outlive its visibility),
//! and a heartbeat extends all the messages it keeps at once
//! ([`Queue::change_visibility_batch`]). A message done with stays in
//! flight until then, which only holds back its group a little longer; a
//! delete that fails leaves it to be delivered again, the at-least-once
//! path the worker handles. And the pollers may take turns at the queue
//! ([`WorkerConfig::receives_in_flight`]): with one long poll waiting at a
//! time, the next receive starts as soon as one comes back with messages,
//! and takes everything that arrived meanwhile, so receives carry more
//! messages each as the rate rises instead of every poller taking one.
//!
//! On shutdown ([`Worker::run`]'s signal) the worker hands back what it
//! holds and has not started: no new receive starts; a receive in progress
//! is let finish (its long poll bounds it: a receive cancelled half-way
//! would leave its messages hidden for a whole visibility timeout) and its
//! messages go back at once; in a batch being handled, the messages already
//! in hand finish and the rest go back ([`Outcome::HandedBack`]). Going back
//! is a visibility change to zero, in one batch call once every poller has
//! stopped receiving (earlier, a sibling's long poll still in progress would
//! receive the message again, each receive counting towards the dead-letter
//! queue's limit), so another instance's worker receives them straight away
//! instead of after the timeout.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use booking::bugs::{Bug, Bugs};
use booking::ledger::{Hold, HoldState, Ledger};
use booking::notify::{Alert, Alerts};
use booking::queue::{Queue, RECEIVE_BATCH_MAX, RECEIVE_WAIT_MAX, ReceiptHandle, Received};
use booking::records::{
    BookingRecord, Condition, RecordError, RecordStatus, RecordStore, WorkerVerdict,
    classify_conflict,
};
use booking::settings::VISIBILITY_TIMEOUT;
use booking::{AdmittedBooking, PaymentId, QueueError, RequestToken};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

use crate::{Shutdown, stopped, stopping};

/// A parsed message body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// The HELD record to write.
    pub record: BookingRecord,
    /// The admission token, if the message carried one.
    pub token: Option<RequestToken>,
}

/// Parses a body: an [`AdmittedBooking`] or a HELD [`BookingRecord`]. Anything
/// else is poison (it goes to the dead-letter queue).
pub fn parse_body(body: &str) -> Result<Parsed, String> {
    let parsed = match serde_json::from_str::<AdmittedBooking>(body) {
        Ok(m) => Parsed {
            record: m.held_record(),
            token: m.token,
        },
        Err(admission_err) => match serde_json::from_str::<BookingRecord>(body) {
            Ok(record) => Parsed {
                record,
                token: None,
            },
            Err(record_err) => {
                return Err(format!(
                    "neither an admission ({admission_err}) nor a record ({record_err})"
                ));
            }
        },
    };
    if parsed.record.status != RecordStatus::Held {
        return Err("the worker only writes HELD records".into());
    }
    parsed.record.check()?;
    Ok(parsed)
}

/// Whether the ledger still holds this booking's seat (or has it paid), so
/// writing its record cannot resurrect a released booking (pure).
pub fn hold_is_live(
    record: &BookingRecord,
    token: Option<&RequestToken>,
    hold: Option<&Hold>,
    paid: Option<&PaymentId>,
) -> bool {
    if paid == Some(&record.payment_id) {
        return true;
    }
    match hold {
        Some(Hold {
            state: HoldState::Held { payment_id, .. },
            ..
        }) => *payment_id == record.payment_id,
        // not attached yet: live if it is this admission's (or we cannot tell)
        Some(
            h @ Hold {
                state: HoldState::Pending { .. },
                ..
            },
        ) => token.is_none_or(|t| *t == h.token),
        None => false,
    }
}

/// How one message ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Written (no record was there).
    Stored,
    /// Replaced a stale record of an older, released admission.
    Replaced,
    /// The same booking was there already.
    Duplicate,
    /// The record is PAID (the callback got there first).
    PaidAlready,
    /// A redelivered old message; a newer booking is there. Not written.
    Stale,
    /// The booking was released; writing would resurrect it. Not written.
    Released,
    /// Two payments admitted in the same millisecond: left for a human (it
    /// ends in the dead-letter queue).
    Ambiguous,
    /// A read or write failed: left unacknowledged, delivered again later.
    LeftForRetry(String),
    /// Unreadable or invalid: sent on to the dead-letter queue.
    Poison(String),
    /// Not handled: extending its visibility was refused for its receipt (the
    /// visibility ran out and it may have been received again), so the
    /// message belongs to its latest receive, not to this one.
    Lost,
    /// Not handled: the worker was stopping, so the message was made
    /// visible again at once (visibility zero) for another worker.
    HandedBack,
}

impl Outcome {
    /// Whether the message is done with and deleted.
    pub fn deletes_message(&self) -> bool {
        matches!(
            self,
            Outcome::Stored
                | Outcome::Replaced
                | Outcome::Duplicate
                | Outcome::PaidAlready
                | Outcome::Stale
                | Outcome::Released
        )
    }
}

/// What to do after a conflict's verdict (pure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConflictStep {
    /// Done: this outcome.
    Finish(Outcome),
    /// Replace the record under this condition.
    Replace(Condition),
    /// Put again, only if no record exists.
    PutAgain,
}

/// The worker's step for a verdict.
pub fn next_step(verdict: &WorkerVerdict) -> ConflictStep {
    match verdict {
        WorkerVerdict::Skip => ConflictStep::Finish(Outcome::PaidAlready),
        WorkerVerdict::Duplicate => ConflictStep::Finish(Outcome::Duplicate),
        WorkerVerdict::Stale => ConflictStep::Finish(Outcome::Stale),
        WorkerVerdict::Released => ConflictStep::Finish(Outcome::Released),
        WorkerVerdict::Ambiguous => ConflictStep::Finish(Outcome::Ambiguous),
        WorkerVerdict::LeaveUnacked => {
            ConflictStep::Finish(Outcome::LeftForRetry("consistent read failed".into()))
        }
        WorkerVerdict::ReplaceStale { condition } => ConflictStep::Replace(condition.clone()),
        WorkerVerdict::PutAgain => ConflictStep::PutAgain,
    }
}

/// What a switched-on bug of the zoo makes of a verdict (pure); with no
/// bug on, the verdict itself and no seat given back.
///
/// - `stale_held_not_replaced`: a stale HELD record with another payment is
///   kept (`ReplaceStale` becomes `Duplicate`), so the new booking can never
///   be marked paid;
/// - `rebook_counted_as_duplicate`: the same, and the "duplicate" admission's
///   seat is given back (the `true`): a counter drifts.
pub fn bugged_verdict(verdict: WorkerVerdict, bugs: &Bugs) -> (WorkerVerdict, bool) {
    match verdict {
        WorkerVerdict::ReplaceStale { .. } if bugs.on(Bug::StaleHeldNotReplaced) => {
            (WorkerVerdict::Duplicate, false)
        }
        WorkerVerdict::ReplaceStale { .. } if bugs.on(Bug::RebookCountedAsDuplicate) => {
            (WorkerVerdict::Duplicate, true)
        }
        verdict => (verdict, false),
    }
}

/// How the worker polls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerConfig {
    /// Messages per receive (1..=10).
    pub batch: usize,
    /// Long-poll wait (at most 20 s).
    pub wait: Duration,
    /// Write/read rounds per message before leaving it for a retry.
    pub conflict_rounds: u32,
    /// Pause after a failed receive.
    pub receive_backoff: Duration,
    /// The bug zoo's switches (none in production).
    pub bugs: Bugs,
    /// Receive loops per instance ([`Worker::run`] once each). Safe at any
    /// number: the queue has one message of a group in flight at a time, so
    /// two loops never hold messages of one group at once, and each loop
    /// handles its batch in order.
    pub pollers: usize,
    /// The queue's visibility timeout (`Settings::visibility_timeout`, the
    /// article's 60 s; a rehearsal scales it): the worker extends the
    /// messages it still holds by this much once [`VISIBILITY_HEARTBEAT_AT`]
    /// of it has passed ([`Worker::process_batch`]). Zero: no extensions.
    pub visibility: Duration,
    /// Receives (long polls) under way at once across this worker's
    /// pollers; the others wait for a turn and handle their batches
    /// meanwhile. 0: every poller polls on its own (one receive each). On
    /// SQS every receive is a billed call and, on a local emulator, a
    /// thread woken by every send: [`AWS_RECEIVES_IN_FLIGHT`].
    pub receives_in_flight: usize,
}

/// [`WorkerConfig::receives_in_flight`] on SQS: two long polls at a time
/// per instance. A receive returns as soon as a message is there, so with
/// one waiting the next starts at once; two keep a receive's round trip
/// (tens of ms on SQS) from capping the rate at ten messages per round trip.
pub const AWS_RECEIVES_IN_FLIGHT: usize = 2;

impl WorkerConfig {
    /// How long after a batch's receive (or its last extension) the worker
    /// extends the visibility of the messages it still holds:
    /// [`VISIBILITY_HEARTBEAT_AT`] of [`WorkerConfig::visibility`]; `None`
    /// for a zero visibility (no extensions).
    pub fn heartbeat_after(&self) -> Option<Duration> {
        (!self.visibility.is_zero()).then(|| self.visibility.mul_f64(VISIBILITY_HEARTBEAT_AT))
    }
}

/// The fraction of the visibility timeout after which the worker extends
/// the visibility of the messages of a batch it still holds (one half: the
/// other half is the margin for the extension's own round trip, a poller
/// starved of CPU, and the receive's answer, whose visibility started a
/// little before the worker's clock reads the batch as received).
pub const VISIBILITY_HEARTBEAT_AT: f64 = 0.5;

/// Receive loops per instance: each message costs a few round trips to a
/// shared store (the ledger read, the conditional put, the delete), so one
/// loop handling its batch in order would carry only a few hundred
/// messages a second on Redis, under the rush's 2,000.
pub const WORKER_POLLERS: usize = 8;

/// How often a worker's pollers look at the dead-letter queue (the alarm on
/// its first message): a second late at most, and one call a second rather
/// than one per batch of every poller.
pub const DEAD_LETTER_CHECK_EVERY: Duration = Duration::from_secs(1);

impl Default for WorkerConfig {
    fn default() -> WorkerConfig {
        WorkerConfig {
            batch: RECEIVE_BATCH_MAX,
            wait: RECEIVE_WAIT_MAX,
            conflict_rounds: 3,
            receive_backoff: Duration::from_secs(1),
            bugs: Bugs::none(),
            pollers: WORKER_POLLERS,
            visibility: VISIBILITY_TIMEOUT,
            receives_in_flight: 0,
        }
    }
}

/// The worker's counters.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Messages received.
    pub received: AtomicU64,
    /// Records written.
    pub stored: AtomicU64,
    /// Stale records replaced.
    pub replaced: AtomicU64,
    /// Duplicate deliveries.
    pub duplicates: AtomicU64,
    /// Messages whose record was PAID.
    pub paid_already: AtomicU64,
    /// Redelivered old messages not written.
    pub stale: AtomicU64,
    /// Released bookings not resurrected.
    pub released: AtomicU64,
    /// Messages left unacknowledged (retry or ambiguity).
    pub left: AtomicU64,
    /// Poison messages.
    pub poison: AtomicU64,
    /// Messages deleted.
    pub deleted: AtomicU64,
    /// Deletes or visibility changes that failed.
    pub queue_errors: AtomicU64,
    /// Receives that failed.
    pub receive_failures: AtomicU64,
    /// Dead letters seen (and alerted).
    pub dead_letters: AtomicU64,
    /// Visibility extensions of held messages that the queue accepted (one
    /// per message per heartbeat).
    pub visibility_extended: AtomicU64,
    /// Messages not handled because their receipt was refused
    /// ([`Outcome::Lost`]).
    pub lost: AtomicU64,
    /// Messages handed back unhandled on shutdown ([`Outcome::HandedBack`]).
    pub handed_back: AtomicU64,
}

/// How much longer than a long poll a message received while stopping is
/// kept hidden ([`Worker::run`] hands it back before then).
pub const STOP_HIDE_SLACK: Duration = Duration::from_secs(1);

/// A snapshot of [`WorkerStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[allow(missing_docs)]
pub struct WorkerCounts {
    pub received: u64,
    pub stored: u64,
    pub replaced: u64,
    pub duplicates: u64,
    pub paid_already: u64,
    pub stale: u64,
    pub released: u64,
    pub left: u64,
    pub poison: u64,
    pub deleted: u64,
    pub queue_errors: u64,
    pub receive_failures: u64,
    pub dead_letters: u64,
    pub visibility_extended: u64,
    pub lost: u64,
    pub handed_back: u64,
}

impl WorkerStats {
    /// The counters now.
    pub fn snapshot(&self) -> WorkerCounts {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        WorkerCounts {
            received: g(&self.received),
            stored: g(&self.stored),
            replaced: g(&self.replaced),
            duplicates: g(&self.duplicates),
            paid_already: g(&self.paid_already),
            stale: g(&self.stale),
            released: g(&self.released),
            left: g(&self.left),
            poison: g(&self.poison),
            deleted: g(&self.deleted),
            queue_errors: g(&self.queue_errors),
            receive_failures: g(&self.receive_failures),
            dead_letters: g(&self.dead_letters),
            visibility_extended: g(&self.visibility_extended),
            lost: g(&self.lost),
            handed_back: g(&self.handed_back),
        }
    }

    fn count(&self, outcome: &Outcome) {
        let counter = match outcome {
            Outcome::Stored => &self.stored,
            Outcome::Replaced => &self.replaced,
            Outcome::Duplicate => &self.duplicates,
            Outcome::PaidAlready => &self.paid_already,
            Outcome::Stale => &self.stale,
            Outcome::Released => &self.released,
            Outcome::Ambiguous | Outcome::LeftForRetry(_) => &self.left,
            Outcome::Poison(_) => &self.poison,
            Outcome::Lost => &self.lost,
            Outcome::HandedBack => &self.handed_back,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

/// The hold a poller keeps on the batch in hand.
#[derive(Debug)]
struct Lease {
    /// Per message of the batch: done with (handled, or lost).
    done: Vec<AtomicBool>,
    /// Per message of the batch: an extension was refused for its receipt.
    lost: Vec<AtomicBool>,
    /// Messages done with and not yet deleted.
    to_delete: std::sync::Mutex<Vec<ReceiptHandle>>,
}

impl Lease {
    fn take_done(&self) -> std::sync::MutexGuard<'_, Vec<ReceiptHandle>> {
        self.to_delete
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The batch's message indices by FIFO group, each group in the batch's
/// order, the groups in the order of their first message (pure): a group's
/// messages must be handled one after another, as FIFO delivers them;
/// different groups need not be.
pub fn by_group(batch: &[Received]) -> Vec<Vec<usize>> {
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, r) in batch.iter().enumerate() {
        let group = r.message.group_id.as_str();
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, members)) => members.push(i),
            None => groups.push((group, vec![i])),
        }
    }
    groups.into_iter().map(|(_, members)| members).collect()
}

/// The worker.
#[derive(Debug)]
pub struct Worker {
    queue: Arc<dyn Queue>,
    records: Arc<dyn RecordStore>,
    ledger: Arc<dyn Ledger>,
    alerts: Arc<dyn Alerts>,
    config: WorkerConfig,
    stats: WorkerStats,
    /// Turns at the queue ([`WorkerConfig::receives_in_flight`]).
    receive_turns: Option<Semaphore>,
    /// When a poller last looked at the dead-letter queue.
    last_dead_letter_check: std::sync::Mutex<Option<tokio::time::Instant>>,
    /// On the stop, what [`Worker::run`]'s pollers will hand back once every
    /// one of them has finished receiving: handed back earlier, a message
    /// would be received again by a sibling's long poll still in progress,
    /// each receive counting towards the dead-letter queue's limit.
    stop_hand_back: std::sync::Mutex<Vec<ReceiptHandle>>,
}

impl Worker {
    /// A worker over these ports.
    pub fn new(
        queue: Arc<dyn Queue>,
        records: Arc<dyn RecordStore>,
        ledger: Arc<dyn Ledger>,
        alerts: Arc<dyn Alerts>,
        config: WorkerConfig,
    ) -> Worker {
        let receive_turns =
            (config.receives_in_flight > 0).then(|| Semaphore::new(config.receives_in_flight));
        Worker {
            queue,
            records,
            ledger,
            alerts,
            config,
            stats: WorkerStats::default(),
            receive_turns,
            last_dead_letter_check: std::sync::Mutex::new(None),
            stop_hand_back: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// The counters.
    pub fn stats(&self) -> WorkerCounts {
        self.stats.snapshot()
    }

    /// Handles one received message (without deleting it): the decision and
    /// its writes.
    pub async fn handle(&self, received: &Received) -> Outcome {
        let parsed = match parse_body(&received.message.body) {
            Ok(p) => p,
            Err(why) => return Outcome::Poison(why),
        };
        let record = parsed.record;
        // Every delivery, not only redeliveries: the reconciler releases a
        // held hold that has no record once its deadline and the copy's slack
        // have passed (an admission message dead-lettered, or never sent), so
        // a first delivery that late must not write the released booking back.
        {
            // two reads, one round trip's wait
            let (hold, paid) = tokio::join!(
                self.ledger.hold(&record.sale, &record.candidate),
                self.ledger.paid(&record.sale, &record.candidate)
            );
            match (hold, paid) {
                (Ok(hold), Ok(paid)) => {
                    if !hold_is_live(&record, parsed.token.as_ref(), hold.as_ref(), paid.as_ref()) {
                        return Outcome::Released;
                    }
                }
                (Err(e), _) | (_, Err(e)) => {
                    return Outcome::LeftForRetry(format!("ledger read failed: {e}"));
                }
            }
        }
        let mut result = self.records.put(record.clone(), Condition::NotExists).await;
        let mut replacing = false;
        for _ in 0..self.config.conflict_rounds.max(1) {
            let blocked = match result {
                Ok(()) if replacing => return Outcome::Replaced,
                Ok(()) => return Outcome::Stored,
                Err(RecordError::ConditionFailed { current }) => current.map(|b| *b),
                Err(RecordError::Invalid(why)) => return Outcome::Poison(why),
                Err(e) => return Outcome::LeftForRetry(format!("write failed: {e}")),
            };
            let read = self.records.get(&record.candidate, true).await;
            let verdict = classify_conflict(&record, blocked.as_ref(), &read);
            let (verdict, give_back) = bugged_verdict(verdict, &self.config.bugs);
            if give_back {
                // the zoo's bug: a seat given back for a live booking
                let _ = self
                    .ledger
                    .release(&record.sale, &record.candidate, &record.payment_id)
                    .await;
            }
            tracing::debug!(candidate = %record.candidate, payment = %record.payment_id, ?verdict, "put conflict");
            match next_step(&verdict) {
                ConflictStep::Finish(outcome) => return outcome,
                ConflictStep::Replace(condition) => {
                    replacing = true;
                    result = self.records.replace(record.clone(), condition).await;
                }
                ConflictStep::PutAgain => {
                    replacing = false;
                    result = self.records.put(record.clone(), Condition::NotExists).await;
                }
            }
        }
        match result {
            Ok(()) if replacing => Outcome::Replaced,
            Ok(()) => Outcome::Stored,
            Err(_) => Outcome::LeftForRetry("conflict did not settle".into()),
        }
    }

    /// Handles a message and deletes it, leaves it, or sends it on to the
    /// dead-letter queue (visibility 0, so its receives run out at once).
    pub async fn process(&self, received: &Received) -> Outcome {
        let outcome = self.settle(received).await;
        if outcome.deletes_message() {
            self.delete_done(std::slice::from_ref(&received.receipt))
                .await;
        }
        outcome
    }

    /// Deletes the messages done with, in one batch call; counted.
    async fn delete_done(&self, receipts: &[ReceiptHandle]) {
        if receipts.is_empty() {
            return;
        }
        for result in self.queue.delete_batch(receipts).await {
            match result {
                Ok(()) => bump(&self.stats.deleted),
                Err(e) => {
                    // delivered again later; handling is idempotent
                    bump(&self.stats.queue_errors);
                    tracing::warn!(error = %e, "message handled but not deleted");
                }
            }
        }
    }

    /// [`Worker::process`] without the delete: the message handled, counted,
    /// a poison message sent on to the dead-letter queue; the caller
    /// deletes it if [`Outcome::deletes_message`].
    async fn settle(&self, received: &Received) -> Outcome {
        bump(&self.stats.received);
        let outcome = self.handle(received).await;
        self.stats.count(&outcome);
        if outcome.deletes_message() {
            // the caller deletes it
        } else if let Outcome::Poison(why) = &outcome {
            tracing::error!(why = %why, receive_count = received.receive_count, "poison message");
            if let Err(e) = self
                .queue
                .change_visibility(&received.receipt, Duration::ZERO)
                .await
            {
                bump(&self.stats.queue_errors);
                tracing::warn!(error = %e, "could not return a poison message");
            }
        } else {
            tracing::warn!(
                ?outcome,
                receive_count = received.receive_count,
                "message left unacknowledged"
            );
        }
        outcome
    }

    /// One receive (waiting up to `wait`) and its messages, in order
    /// ([`Worker::process_batch`]).
    pub async fn poll_once(&self, wait: Duration) -> Result<Vec<Outcome>, booking::QueueError> {
        let batch = self
            .receive_turn(wait)
            .await
            .inspect_err(|_| bump(&self.stats.receive_failures))?;
        Ok(self.process_batch(&batch, Instant::now()).await)
    }

    /// One receive, in turn with the other pollers when
    /// [`WorkerConfig::receives_in_flight`] says so (the turn ends when the
    /// receive comes back, before its batch is handled).
    async fn receive_turn(&self, wait: Duration) -> Result<Vec<Received>, QueueError> {
        let _turn = match &self.receive_turns {
            Some(turns) => Some(
                turns
                    .acquire()
                    .await
                    .map_err(|_| QueueError::Unavailable("the worker is stopping".into()))?,
            ),
            None => None,
        };
        self.queue
            .receive(self.config.batch.clamp(1, RECEIVE_BATCH_MAX), wait)
            .await
    }

    /// Processes a batch received at `received_at`: the messages of one
    /// FIFO group in order, the groups at once ([`by_group`]), each with
    /// [`Worker::settle`]. A batch of ten messages of ten groups then costs
    /// the round trips of one message in wall time, not of ten: handled one
    /// after another, a poller carried a few hundred messages a second on
    /// Redis and the queue fell seconds behind the rush (the oldest message
    /// 1.6 s old in the article's rehearsal on Redis; 73 ms at once).
    ///
    /// The messages not yet done with are kept invisible: whenever
    /// [`WorkerConfig::heartbeat_after`] has passed since the receive or the
    /// last extension, the messages done with so far are deleted and the
    /// visibility of every other message not lost (the ones in hand
    /// included) is extended by [`WorkerConfig::visibility`], all in batch
    /// calls. The rest are deleted together when the batch is done. A batch
    /// done with sooner makes no extension; an extension under way when the
    /// batch is done is waited for.
    ///
    /// A message whose extension is refused for its receipt before it is
    /// handled is not handled ([`Outcome::Lost`]): its latest receive,
    /// elsewhere, handles it. An extension that fails otherwise is counted
    /// as a queue error and the message is handled anyway. The outcomes come
    /// back in the batch's order.
    pub async fn process_batch(&self, batch: &[Received], received_at: Instant) -> Vec<Outcome> {
        self.process_batch_until(batch, received_at, None).await.0
    }

    /// [`Worker::process_batch`], stopping at `shutdown`: once it says stop,
    /// the messages already in hand finish and every message not started
    /// yet is [`Outcome::HandedBack`]; their receipts come back for
    /// [`Worker::run`] to hand back once every poller has stopped receiving
    /// (none without a `shutdown`).
    async fn process_batch_until(
        &self,
        batch: &[Received],
        received_at: Instant,
        shutdown: Option<&Shutdown>,
    ) -> (Vec<Outcome>, Vec<ReceiptHandle>) {
        let stopping_now = || shutdown.is_some_and(stopping);
        let handed_back = std::sync::Mutex::new(Vec::new());
        let lease = Lease {
            done: (0..batch.len()).map(|_| AtomicBool::new(false)).collect(),
            lost: (0..batch.len()).map(|_| AtomicBool::new(false)).collect(),
            to_delete: std::sync::Mutex::new(Vec::with_capacity(batch.len())),
        };
        let finished = AtomicBool::new(false);
        let finish = Notify::new();
        let work = async {
            let groups = by_group(batch);
            let (lease, batch, handed_back, stopping_now) =
                (&lease, batch, &handed_back, &stopping_now);
            let handled = futures_util::future::join_all(groups.iter().map(|group| async move {
                let mut outcomes = Vec::with_capacity(group.len());
                for &i in group {
                    let outcome = if lease.lost[i].load(Ordering::Acquire) {
                        bump(&self.stats.received);
                        self.stats.count(&Outcome::Lost);
                        tracing::info!(
                            receive_count = batch[i].receive_count,
                            "receipt refused before handling: left to the message's latest receive"
                        );
                        Outcome::Lost
                    } else if stopping_now() {
                        bump(&self.stats.received);
                        handed_back
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .push(batch[i].receipt.clone());
                        Outcome::HandedBack
                    } else {
                        self.settle(&batch[i]).await
                    };
                    // done first: a heartbeat in between neither extends
                    // it nor misses its delete (the end of the batch takes it)
                    lease.done[i].store(true, Ordering::Release);
                    if outcome.deletes_message() {
                        lease.take_done().push(batch[i].receipt.clone());
                    }
                    outcomes.push((i, outcome));
                }
                outcomes
            }))
            .await;
            finished.store(true, Ordering::Release);
            // a permit is kept if the heartbeat is not waiting right now
            finish.notify_one();
            let mut outcomes: Vec<(usize, Outcome)> = handled.into_iter().flatten().collect();
            outcomes.sort_by_key(|(i, _)| *i);
            outcomes.into_iter().map(|(_, o)| o).collect::<Vec<_>>()
        };
        let heartbeat = async {
            let Some(every) = self.config.heartbeat_after() else {
                return;
            };
            let mut next_beat = received_at + every;
            while !finished.load(Ordering::Acquire) {
                tokio::select! {
                    biased;
                    () = finish.notified() => break,
                    () = tokio::time::sleep_until(next_beat) => {}
                }
                if finished.load(Ordering::Acquire) {
                    break;
                }
                next_beat = Instant::now() + every;
                self.extend(batch, &lease).await;
            }
        };
        let (outcomes, ()) = tokio::join!(work, heartbeat);
        let rest = std::mem::take(&mut *lease.take_done());
        self.delete_done(&rest).await;
        let back = handed_back
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (outcomes, back)
    }

    /// Keeps `receipts` hidden past the siblings' receives in progress (a
    /// long poll of `wait` at most, and [`STOP_HIDE_SLACK`]) until
    /// [`Worker::run`] hands them back. One that cannot be changed keeps its
    /// visibility: a sibling may receive it again, and its receipt here is
    /// then refused at the hand-back ([`Outcome::Lost`]).
    async fn hide_while_stopping(&self, receipts: &[ReceiptHandle], wait: Duration) {
        let hide = wait + STOP_HIDE_SLACK;
        for result in self.queue.change_visibility_batch(receipts, hide).await {
            if let Err(e) = result {
                tracing::debug!(error = %e, "a message received while stopping could not be kept hidden");
            }
        }
    }

    /// Makes `receipts` visible again at once (the worker is stopping and
    /// will not handle them). One that cannot be changed reappears after its
    /// visibility timeout instead.
    async fn hand_back(&self, receipts: &[ReceiptHandle]) {
        if receipts.is_empty() {
            return;
        }
        let results = self
            .queue
            .change_visibility_batch(receipts, Duration::ZERO)
            .await;
        let mut back = 0u64;
        for result in results {
            match result {
                Ok(()) => {
                    bump(&self.stats.handed_back);
                    back += 1;
                }
                // another receive holds it already: it is not ours to give
                Err(QueueError::InvalidReceipt) => bump(&self.stats.lost),
                Err(e) => {
                    bump(&self.stats.queue_errors);
                    tracing::warn!(error = %e, "message not handed back: it reappears after its visibility timeout");
                }
            }
        }
        tracing::info!(
            handed_back = back,
            of = receipts.len(),
            "stopping: messages not handled handed back to the queue"
        );
    }

    /// One heartbeat: deletes the messages done with so far, and extends
    /// the visibility of every other message of `batch` not lost, all at
    /// once, by one visibility timeout.
    async fn extend(&self, batch: &[Received], lease: &Lease) {
        let done = std::mem::take(&mut *lease.take_done());
        self.delete_done(&done).await;
        let held: Vec<usize> = (0..batch.len())
            .filter(|&j| {
                !lease.done[j].load(Ordering::Acquire) && !lease.lost[j].load(Ordering::Acquire)
            })
            .collect();
        let receipts: Vec<ReceiptHandle> = held.iter().map(|&j| batch[j].receipt.clone()).collect();
        let results = self
            .queue
            .change_visibility_batch(&receipts, self.config.visibility)
            .await;
        for (j, result) in held.into_iter().zip(results) {
            match result {
                Ok(()) => bump(&self.stats.visibility_extended),
                Err(QueueError::InvalidReceipt) => {
                    // its visibility ran out (or it was deleted just now,
                    // when it is a message in hand): not ours any more
                    lease.lost[j].store(true, Ordering::Release);
                    tracing::debug!("visibility not extended: receipt no longer valid");
                }
                Err(e) => {
                    bump(&self.stats.queue_errors);
                    tracing::warn!(error = %e, "visibility not extended; handling goes on");
                }
            }
        }
    }

    /// Whether a poller should look at the dead-letter queue now: at most
    /// once per [`DEAD_LETTER_CHECK_EVERY`] for all of this worker's
    /// pollers, not after every batch of each.
    fn dead_letter_check_due(&self) -> bool {
        let mut last = self
            .last_dead_letter_check
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match *last {
            Some(at) if at.elapsed() < DEAD_LETTER_CHECK_EVERY => false,
            _ => {
                *last = Some(tokio::time::Instant::now());
                true
            }
        }
    }

    /// Alerts once for each dead letter not alerted yet. Returns how many new.
    pub async fn check_dead_letters(&self) -> Result<u64, booking::QueueError> {
        let dead = self.queue.dead_letters().await?.len() as u64;
        // one step, so two pollers that see the same new letters alert once
        let seen = self.stats.dead_letters.fetch_max(dead, Ordering::Relaxed);
        if dead <= seen {
            return Ok(0);
        }
        let alert = Alert {
            kind: "dead_letter".into(),
            detail: format!(
                "{} new message(s) in the dead-letter queue ({dead} in all)",
                dead - seen
            ),
            candidate: None,
            payment_id: None,
        };
        if let Err(e) = self.alerts.raise(alert).await {
            tracing::error!(error = %e, "dead-letter alert could not be raised");
        }
        Ok(dead - seen)
    }

    /// Polls until `shutdown` says stop. On the stop no new receive starts
    /// (a poller waiting for its turn at the queue gives up the wait); a
    /// receive in progress is let finish, within its long poll's `wait`, and
    /// whatever it brought is handed back unhandled; in a batch being
    /// handled the messages in hand finish and the rest are handed back
    /// ([`Worker::process_batch_until`]). So a stop takes at most one long
    /// poll plus the messages in hand, and leaves nothing hidden.
    ///
    /// Runs [`WorkerConfig::pollers`] receive loops at once, each a task of
    /// its own: on a multi-threaded runtime they run in parallel, and each
    /// gets its own turn beside the request handlers. Joined in one task
    /// (`join_all`), the pollers shared a single turn: with the CPU busy
    /// serving thousands of requests a second the worker got one task's
    /// share of it, and on Redis the queue fell behind from the rush's first
    /// second (the oldest message 7-15 s old at 2,000 bookings/s). Dropping
    /// the returned future stops the pollers (their tasks are aborted); a
    /// poller's panic is the worker's.
    pub async fn run(self: Arc<Self>, shutdown: Shutdown) {
        let pollers = self.config.pollers;
        assert!(pollers >= 1, "a worker needs at least one poller");
        let mut running = tokio::task::JoinSet::new();
        for _ in 0..pollers {
            let (worker, shutdown) = (self.clone(), shutdown.clone());
            running.spawn(async move { worker.poll_loop(shutdown).await });
        }
        while let Some(done) = running.join_next().await {
            if let Err(e) = done {
                if e.is_panic() {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
        }
        // every poller has stopped receiving: what they did not handle goes
        // back now, at once, for another instance's worker
        let back = std::mem::take(
            &mut *self
                .stop_hand_back
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        self.hand_back(&back).await;
        tracing::info!("worker stopped");
    }

    /// One receive loop.
    async fn poll_loop(&self, mut shutdown: Shutdown) {
        let wait = self.config.wait.min(RECEIVE_WAIT_MAX);
        while !stopping(&shutdown) {
            // a turn at the queue is given up on the stop (nothing received
            // yet); a receive, once started, is not: cancelled half-way it
            // would leave what it took hidden for a visibility timeout
            let turn = match &self.receive_turns {
                Some(turns) => tokio::select! {
                    // the stop first, every time: an unbiased select picks
                    // at random among ready branches
                    biased;
                    _ = stopped(&mut shutdown) => break,
                    permit = turns.acquire() => match permit {
                        Ok(p) => Some(p),
                        Err(_) => break,
                    },
                },
                None => None,
            };
            let received = self
                .queue
                .receive(self.config.batch.clamp(1, RECEIVE_BATCH_MAX), wait)
                .await;
            drop(turn);
            match received {
                Ok(batch) => {
                    // a stop seen by now hands the whole batch back, once
                    // every poller has stopped receiving (`run`)
                    let (_, back) = self
                        .process_batch_until(&batch, Instant::now(), Some(&shutdown))
                        .await;
                    if !back.is_empty() {
                        // hidden until every sibling's receive has ended,
                        // however short the visibility timeout
                        self.hide_while_stopping(&back, wait).await;
                        self.stop_hand_back
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .extend(back);
                    }
                }
                Err(e) => {
                    bump(&self.stats.receive_failures);
                    tracing::warn!(error = %e, "receive failed");
                    tokio::select! {
                        biased;
                        _ = stopped(&mut shutdown) => break,
                        _ = tokio::time::sleep(self.config.receive_backoff) => {}
                    }
                }
            }
            if self.dead_letter_check_due() {
                if let Err(e) = self.check_dead_letters().await {
                    tracing::warn!(error = %e, "dead-letter check failed");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use booking::{CandidateHash, Level, SaleId};

    fn admission(payment: &str, request_ms: u64) -> AdmittedBooking {
        AdmittedBooking {
            signature: None,
            candidate: CandidateHash::of("c"),
            sale: SaleId::parse("s").unwrap(),
            level: Level::parse("a").unwrap(),
            payment_id: PaymentId::parse(payment).unwrap(),
            token: Some(RequestToken::parse("t1").unwrap()),
            request_ms,
            deadline_ms: request_ms + 600_000,
        }
    }

    #[test]
    fn bugs_change_only_the_replace_verdict_and_only_when_on() {
        let replace = WorkerVerdict::ReplaceStale {
            condition: Condition::NotExists,
        };
        assert_eq!(
            bugged_verdict(replace.clone(), &Bugs::none()),
            (replace.clone(), false)
        );
        let other_bug = Bugs::of([Bug::PaidKeepsTtl]);
        assert_eq!(
            bugged_verdict(replace.clone(), &other_bug),
            (replace.clone(), false)
        );
        assert_eq!(
            bugged_verdict(replace.clone(), &Bugs::of([Bug::StaleHeldNotReplaced])),
            (WorkerVerdict::Duplicate, false)
        );
        assert_eq!(
            bugged_verdict(replace, &Bugs::of([Bug::RebookCountedAsDuplicate])),
            (WorkerVerdict::Duplicate, true)
        );
        let all = Bugs::of(Bug::ALL);
        for v in [
            WorkerVerdict::Skip,
            WorkerVerdict::Duplicate,
            WorkerVerdict::Stale,
            WorkerVerdict::Released,
            WorkerVerdict::PutAgain,
        ] {
            assert_eq!(bugged_verdict(v.clone(), &all), (v, false));
        }
    }

    #[test]
    fn admission_messages_round_trip_with_the_designs_ids() {
        let a = admission("P1", 1_700_000_000_000);
        let m = a.to_message().unwrap();
        m.check().unwrap();
        assert_eq!(m.group_id, a.candidate.message_group());
        assert_eq!(m.deduplication_id, format!("{}-1700000000000", a.candidate));
        let parsed = parse_body(&m.body).unwrap();
        assert_eq!(parsed.record, a.held_record());
        assert_eq!(parsed.token, a.token);
        let record_body = serde_json::to_string(&a.held_record()).unwrap();
        assert_eq!(parse_body(&record_body).unwrap().record, a.held_record());
        let paid =
            serde_json::to_string(&a.held_record().into_paid(booking::ConfirmPath::Callback, 5))
                .unwrap();
        assert!(parse_body(&paid).is_err());
        assert!(parse_body("{}").is_err());
        assert!(parse_body("not json").is_err());
    }

    #[test]
    fn every_verdict_has_a_step() {
        use WorkerVerdict as V;
        assert_eq!(
            next_step(&V::Skip),
            ConflictStep::Finish(Outcome::PaidAlready)
        );
        assert_eq!(
            next_step(&V::Duplicate),
            ConflictStep::Finish(Outcome::Duplicate)
        );
        assert_eq!(next_step(&V::Stale), ConflictStep::Finish(Outcome::Stale));
        assert_eq!(
            next_step(&V::Released),
            ConflictStep::Finish(Outcome::Released)
        );
        assert_eq!(
            next_step(&V::Ambiguous),
            ConflictStep::Finish(Outcome::Ambiguous)
        );
        assert!(matches!(
            next_step(&V::LeaveUnacked),
            ConflictStep::Finish(Outcome::LeftForRetry(_))
        ));
        assert_eq!(next_step(&V::PutAgain), ConflictStep::PutAgain);
        let c = Condition::PaymentIs(PaymentId::parse("P").unwrap());
        assert_eq!(
            next_step(&V::ReplaceStale {
                condition: c.clone()
            }),
            ConflictStep::Replace(c)
        );
        for v in [V::Skip, V::Duplicate, V::Stale, V::Released] {
            let ConflictStep::Finish(o) = next_step(&v) else {
                panic!()
            };
            assert_eq!(o.deletes_message(), v.deletes_message());
        }
    }

    #[test]
    fn liveness_follows_the_ledger() {
        let a = admission("P1", 1_000);
        let r = a.held_record();
        let p1 = PaymentId::parse("P1").unwrap();
        let p2 = PaymentId::parse("P2").unwrap();
        let t1 = RequestToken::parse("t1").unwrap();
        let t2 = RequestToken::parse("t2").unwrap();
        let held = |p: &PaymentId| Hold {
            level: r.level.clone(),
            token: t1.clone(),
            state: HoldState::Held {
                payment_id: p.clone(),
                deadline_ms: 5,
            },
        };
        let pending = |t: &RequestToken| Hold {
            level: r.level.clone(),
            token: t.clone(),
            state: HoldState::Pending { admitted_ms: 1 },
        };
        assert!(hold_is_live(&r, None, Some(&held(&p1)), None));
        assert!(!hold_is_live(&r, None, Some(&held(&p2)), None));
        assert!(!hold_is_live(&r, None, None, None), "released");
        assert!(hold_is_live(&r, None, None, Some(&p1)), "paid");
        assert!(!hold_is_live(&r, None, None, Some(&p2)));
        assert!(hold_is_live(&r, Some(&t1), Some(&pending(&t1)), None));
        assert!(!hold_is_live(&r, Some(&t1), Some(&pending(&t2)), None));
        assert!(
            hold_is_live(&r, None, Some(&pending(&t2)), None),
            "cannot tell"
        );
    }
}
