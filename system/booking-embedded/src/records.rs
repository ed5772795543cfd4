//! The embedded record store: one DynamoDB-like table in process memory.
//!
//! What it keeps of DynamoDB's semantics, because the design depends on it:
//! - conditional writes, each one atomic step under one lock, that return the
//!   record they were checked against when the condition fails;
//! - consistent reads see every completed write; eventually consistent reads
//!   (`get(.., false)`, the payment GSI, the due-holds index) see the table as
//!   it was `replication_lag_ms` ago (default 0: no lag);
//! - TTL deletions happen late, when the owner calls [`EmbeddedRecords::sweep_ttl`],
//!   and carry the TTL service's identity on the stream; application deletes
//!   carry none;
//! - a change stream in write order, read from a position, and no record for a
//!   write that changes nothing;
//! - on-demand throughput as two token buckets (reads/s, writes/s; default
//!   unlimited) that answer `Throttled` and count it.
//!
//! Time comes from the injected [`Clock`], so a test moves it by hand.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use booking::clock::{Clock, SystemClock};
use booking::records::{
    BookingRecord, ChangeStream, Condition, ConfirmPath, RecordError, RecordStatus, RecordStore,
    StreamKind, StreamRecord, Throttles, UserIdentity, sort_by_deadline, sort_by_paid,
    ttl_for_deadline,
};
use booking::{Bug, Bugs, CandidateHash, PaymentId, SaleId};
use parking_lot::Mutex;
use tokio::sync::Notify;

/// Records `delete_sale` deletes under one hold of the lock.
pub const DELETE_SALE_BATCH: usize = 1_000;

/// Stream records kept by default (DynamoDB keeps 24 hours' worth).
pub const STREAM_RETAINED_MAX: usize = 1 << 20;

/// How the embedded table behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordsConfig {
    /// How far eventually consistent reads lag behind the table, in ms.
    pub replication_lag_ms: u64,
    /// Writes per second before `Throttled` (`None`: unlimited). The bucket
    /// holds one second's worth.
    pub writes_per_s: Option<u32>,
    /// Reads per second before `Throttled` (`None`: unlimited).
    pub reads_per_s: Option<u32>,
    /// Stream records kept; a reader further behind gets an error.
    pub stream_retained_max: usize,
    /// The bug zoo's switches (`paid_keeps_ttl` lives here: the HELD→PAID
    /// update forgets to remove the TTL attribute).
    pub bugs: Bugs,
    /// How late the TTL service deletes an expired item, ms after its TTL
    /// (DynamoDB's deletions are best-effort and late; the reconciler, not
    /// the TTL, is the timer). 0: at the first sweep after expiry.
    pub ttl_delay_ms: u64,
}

impl Default for RecordsConfig {
    fn default() -> RecordsConfig {
        RecordsConfig {
            replication_lag_ms: 0,
            writes_per_s: None,
            reads_per_s: None,
            stream_retained_max: STREAM_RETAINED_MAX,
            bugs: Bugs::none(),
            ttl_delay_ms: 0,
        }
    }
}

/// A token bucket in thousandths of a request, refilled from the clock.
#[derive(Debug)]
struct Bucket {
    per_s: Option<u32>,
    milli_tokens: u64,
    last_ms: u64,
}

impl Bucket {
    fn new(per_s: Option<u32>, now_ms: u64) -> Bucket {
        Bucket {
            per_s,
            milli_tokens: per_s.map_or(0, |r| u64::from(r) * 1_000),
            last_ms: now_ms,
        }
    }

    /// Takes one request's worth, or says no.
    fn take(&mut self, now_ms: u64) -> bool {
        let Some(per_s) = self.per_s else {
            return true;
        };
        let capacity = u64::from(per_s) * 1_000;
        // per_s requests a second = per_s thousandths of a request a millisecond
        let refill = now_ms.saturating_sub(self.last_ms) * u64::from(per_s);
        self.milli_tokens = (self.milli_tokens + refill).min(capacity);
        self.last_ms = self.last_ms.max(now_ms);
        if self.milli_tokens >= 1_000 {
            self.milli_tokens -= 1_000;
            true
        } else {
            false
        }
    }
}

/// One key's versions, oldest first, the current one last; before the first,
/// the item did not exist. Versions older than the replication lag are pruned.
#[derive(Debug)]
struct Item {
    versions: VecDeque<(u64, Option<BookingRecord>)>,
}

impl Item {
    fn current(&self) -> Option<&BookingRecord> {
        self.versions.back().and_then(|(_, r)| r.as_ref())
    }

    /// The version a replica `cutoff_ms` behind sees.
    fn as_of(&self, cutoff_ms: u64) -> Option<&BookingRecord> {
        self.versions
            .iter()
            .rev()
            .find(|(at, _)| *at <= cutoff_ms)
            .and_then(|(_, r)| r.as_ref())
    }

    fn has_payment(&self, payment: &PaymentId) -> bool {
        self.versions
            .iter()
            .any(|(_, r)| r.as_ref().is_some_and(|r| r.payment_id == *payment))
    }
}

#[derive(Debug)]
struct Table {
    items: BTreeMap<CandidateHash, Item>,
    /// Payment → candidates with a retained version carrying it (the GSI).
    by_payment: HashMap<PaymentId, BTreeSet<CandidateHash>>,
    stream: VecDeque<StreamRecord>,
    last_sequence: u64,
    /// Every sequence up to this one has been dropped from the stream.
    trimmed_through: u64,
    writes: Bucket,
    reads: Bucket,
    throttles: Throttles,
}

impl Table {
    fn current(&self, candidate: &CandidateHash) -> Option<BookingRecord> {
        self.items.get(candidate).and_then(Item::current).cloned()
    }

    /// Drops the versions of one item that no replica can see any more.
    fn prune(&mut self, candidate: &CandidateHash, cutoff_ms: u64) {
        let Some(item) = self.items.get_mut(candidate) else {
            return;
        };
        let mut dropped = Vec::new();
        while item.versions.len() >= 2 && item.versions[1].0 <= cutoff_ms {
            if let Some((_, Some(r))) = item.versions.pop_front() {
                dropped.push(r.payment_id);
            }
        }
        let gone = item.versions.len() == 1
            && item.versions[0].1.is_none()
            && item.versions[0].0 <= cutoff_ms;
        for payment in dropped {
            if gone || !item.has_payment(&payment) {
                unindex(&mut self.by_payment, &payment, candidate);
            }
        }
        if gone {
            self.items.remove(candidate);
        }
    }

    fn prune_all(&mut self, cutoff_ms: u64) {
        let keys: Vec<CandidateHash> = self
            .items
            .iter()
            .filter(|(_, item)| item.versions.len() >= 2 || item.current().is_none())
            .map(|(c, _)| c.clone())
            .collect();
        for c in keys {
            self.prune(&c, cutoff_ms);
        }
    }

    /// Makes `new` the current version (`None`: delete) and emits the stream
    /// record. A write that changes nothing emits nothing, as in DynamoDB.
    fn write(
        &mut self,
        now_ms: u64,
        lag_ms: u64,
        candidate: &CandidateHash,
        new: Option<BookingRecord>,
        user_identity: Option<UserIdentity>,
        retained_max: usize,
    ) {
        let old = self.current(candidate);
        if old == new {
            return;
        }
        if let Some(r) = &new {
            self.by_payment
                .entry(r.payment_id.clone())
                .or_default()
                .insert(candidate.clone());
        }
        self.items
            .entry(candidate.clone())
            .or_insert_with(|| Item {
                versions: VecDeque::new(),
            })
            .versions
            .push_back((now_ms, new.clone()));
        self.prune(candidate, now_ms.saturating_sub(lag_ms));
        let kind = match (&old, &new) {
            (None, _) => StreamKind::Insert,
            (Some(_), Some(_)) => StreamKind::Modify,
            (Some(_), None) => StreamKind::Remove,
        };
        self.last_sequence += 1;
        self.stream.push_back(StreamRecord {
            kind,
            old,
            new,
            user_identity,
            sequence: self.last_sequence,
            at_ms: now_ms,
        });
        while self.stream.len() > retained_max.max(1) {
            if let Some(dropped) = self.stream.pop_front() {
                self.trimmed_through = dropped.sequence;
            }
        }
    }
}

fn unindex(
    index: &mut HashMap<PaymentId, BTreeSet<CandidateHash>>,
    payment: &PaymentId,
    candidate: &CandidateHash,
) {
    if let Some(set) = index.get_mut(payment) {
        set.remove(candidate);
        if set.is_empty() {
            index.remove(payment);
        }
    }
}

/// The record store in process memory.
#[derive(Debug)]
pub struct EmbeddedRecords {
    clock: Arc<dyn Clock>,
    config: RecordsConfig,
    table: Mutex<Table>,
    stream_written: Notify,
}

impl Default for EmbeddedRecords {
    fn default() -> EmbeddedRecords {
        EmbeddedRecords::new(Arc::new(SystemClock), RecordsConfig::default())
    }
}

/// A read or a write, for the throughput buckets.
#[derive(Debug, Clone, Copy)]
enum Capacity {
    Read,
    Write,
}

impl EmbeddedRecords {
    /// An empty table reading the time from `clock`.
    pub fn new(clock: Arc<dyn Clock>, config: RecordsConfig) -> EmbeddedRecords {
        let now_ms = clock.now_ms();
        EmbeddedRecords {
            table: Mutex::new(Table {
                items: BTreeMap::new(),
                by_payment: HashMap::new(),
                stream: VecDeque::new(),
                last_sequence: 0,
                trimmed_through: 0,
                writes: Bucket::new(config.writes_per_s, now_ms),
                reads: Bucket::new(config.reads_per_s, now_ms),
                throttles: Throttles::default(),
            }),
            clock,
            config,
            stream_written: Notify::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &RecordsConfig {
        &self.config
    }

    /// The TTL service, run late: deletes up to `limit` records whose TTL
    /// (`expires_at_s`) passed at least `ttl_delay_ms` ago, earliest first, with the TTL service's
    /// identity on their REMOVE stream records. Costs no throughput. Returns the
    /// deleted records. DynamoDB does this on its own, hours late at worst; here
    /// the owner decides when, so a test can be as late as it likes.
    pub fn sweep_ttl(&self, limit: usize) -> Vec<BookingRecord> {
        let now_ms = self.clock.now_ms();
        let mut table = self.table.lock();
        let mut expired: Vec<(u64, BookingRecord)> = table
            .items
            .values()
            .filter_map(Item::current)
            .filter_map(|r| {
                r.expires_at_s
                    .filter(|e| {
                        e.saturating_mul(1_000)
                            .saturating_add(self.config.ttl_delay_ms)
                            <= now_ms
                    })
                    .map(|e| (e, r.clone()))
            })
            .collect();
        expired.sort_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| a.1.candidate.cmp(&b.1.candidate))
        });
        expired.truncate(limit);
        let deleted: Vec<BookingRecord> = expired.into_iter().map(|(_, r)| r).collect();
        for r in &deleted {
            table.write(
                now_ms,
                self.config.replication_lag_ms,
                &r.candidate,
                None,
                Some(UserIdentity::ttl_service()),
                self.config.stream_retained_max,
            );
        }
        drop(table);
        if !deleted.is_empty() {
            self.stream_written.notify_waiters();
        }
        deleted
    }

    /// The records an index query returns, as the index would: those
    /// `keep` takes, as reads see them now, in `order`, at most `limit`.
    fn select(
        &self,
        keep: impl Fn(&BookingRecord) -> bool,
        order: fn(&mut [BookingRecord]),
        limit: usize,
    ) -> Result<Vec<BookingRecord>, RecordError> {
        let now_ms = self.clock.now_ms();
        let mut table = self.table.lock();
        self.charge(&mut table, Capacity::Read, now_ms)?;
        let cutoff = self.cutoff(now_ms);
        table.prune_all(cutoff);
        let mut found: Vec<BookingRecord> = table
            .items
            .values()
            .filter_map(|item| item.as_of(cutoff))
            .filter(|r| keep(r))
            .cloned()
            .collect();
        order(&mut found);
        found.truncate(limit);
        Ok(found)
    }

    /// The sequence of the last stream record (0: none yet).
    pub fn last_sequence(&self) -> u64 {
        self.table.lock().last_sequence
    }

    /// Takes capacity, or counts a throttle.
    fn charge(
        &self,
        table: &mut Table,
        capacity: Capacity,
        now_ms: u64,
    ) -> Result<(), RecordError> {
        let granted = match capacity {
            Capacity::Read => table.reads.take(now_ms),
            Capacity::Write => table.writes.take(now_ms),
        };
        if granted {
            return Ok(());
        }
        match capacity {
            Capacity::Read => table.throttles.reads += 1,
            Capacity::Write => table.throttles.writes += 1,
        }
        Err(RecordError::Throttled)
    }

    fn cutoff(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.config.replication_lag_ms)
    }

    /// One write of a whole new version under the lock, and the stream wake-up.
    fn commit(
        &self,
        table: &mut Table,
        now_ms: u64,
        candidate: &CandidateHash,
        new: Option<BookingRecord>,
    ) {
        let before = table.last_sequence;
        table.write(
            now_ms,
            self.config.replication_lag_ms,
            candidate,
            new,
            None,
            self.config.stream_retained_max,
        );
        if table.last_sequence != before {
            self.stream_written.notify_waiters();
        }
    }

    /// A conditional update: `guard` must hold for the current record, which
    /// `change` turns into the new one; the result must keep the invariants.
    fn update(
        &self,
        candidate: &CandidateHash,
        guard: impl Fn(&BookingRecord) -> bool,
        change: impl FnOnce(BookingRecord) -> BookingRecord,
    ) -> Result<BookingRecord, RecordError> {
        self.update_with(candidate, guard, change, true)
    }

    /// [`Self::update`] without the record's own check: only for a bug of
    /// the zoo, which must be able to write what the check refuses.
    fn update_unchecked(
        &self,
        candidate: &CandidateHash,
        guard: impl Fn(&BookingRecord) -> bool,
        change: impl FnOnce(BookingRecord) -> BookingRecord,
    ) -> Result<BookingRecord, RecordError> {
        self.update_with(candidate, guard, change, false)
    }

    fn update_with(
        &self,
        candidate: &CandidateHash,
        guard: impl Fn(&BookingRecord) -> bool,
        change: impl FnOnce(BookingRecord) -> BookingRecord,
        checked: bool,
    ) -> Result<BookingRecord, RecordError> {
        let now_ms = self.clock.now_ms();
        let mut table = self.table.lock();
        self.charge(&mut table, Capacity::Write, now_ms)?;
        let current = table.current(candidate);
        let Some(matching) = current.clone().filter(|r| guard(r)) else {
            return Err(RecordError::condition_failed(current));
        };
        let new = change(matching);
        if checked {
            new.check().map_err(RecordError::Invalid)?;
        }
        self.commit(&mut table, now_ms, candidate, Some(new.clone()));
        Ok(new)
    }
}

fn held_with(payment_id: &PaymentId) -> impl Fn(&BookingRecord) -> bool + '_ {
    move |r| r.status == RecordStatus::Held && r.payment_id == *payment_id
}

#[async_trait]
impl RecordStore for EmbeddedRecords {
    async fn put(&self, record: BookingRecord, condition: Condition) -> Result<(), RecordError> {
        // asserted before the write: a PAID record with a TTL never lands
        record.check().map_err(RecordError::Invalid)?;
        let now_ms = self.clock.now_ms();
        let mut table = self.table.lock();
        self.charge(&mut table, Capacity::Write, now_ms)?;
        let current = table.current(&record.candidate);
        if !condition.holds(current.as_ref()) {
            return Err(RecordError::condition_failed(current));
        }
        let candidate = record.candidate.clone();
        self.commit(&mut table, now_ms, &candidate, Some(record));
        Ok(())
    }

    async fn mark_paid(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
        path: ConfirmPath,
        now_ms: u64,
    ) -> Result<BookingRecord, RecordError> {
        if self.config.bugs.on(Bug::PaidKeepsTtl) {
            // the zoo's bug: the update expression without `REMOVE expiresAt`
            return self.update_unchecked(candidate, held_with(payment_id), |r| {
                let ttl = r.expires_at_s;
                BookingRecord {
                    expires_at_s: ttl,
                    ..r.into_paid(path, now_ms)
                }
            });
        }
        self.update(candidate, held_with(payment_id), |r| {
            r.into_paid(path, now_ms)
        })
    }

    async fn mark_emailed(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<BookingRecord, RecordError> {
        self.update(
            candidate,
            |r| r.status == RecordStatus::Paid && r.payment_id == *payment_id && !r.email_sent,
            |r| BookingRecord {
                email_sent: true,
                ..r
            },
        )
    }

    async fn extend(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
        deadline_ms: u64,
    ) -> Result<BookingRecord, RecordError> {
        self.update(candidate, held_with(payment_id), |r| BookingRecord {
            deadline_ms,
            expires_at_s: Some(ttl_for_deadline(deadline_ms)),
            extensions: r.extensions.saturating_add(1),
            query_failures: 0,
            ..r
        })
    }

    async fn note_query_failure(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<BookingRecord, RecordError> {
        self.update(candidate, held_with(payment_id), |r| BookingRecord {
            query_failures: r.query_failures.saturating_add(1),
            ..r
        })
    }

    async fn clear_query_failures(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<BookingRecord, RecordError> {
        self.update(candidate, held_with(payment_id), |r| BookingRecord {
            query_failures: 0,
            ..r
        })
    }

    async fn delete(
        &self,
        candidate: &CandidateHash,
        condition: Condition,
    ) -> Result<BookingRecord, RecordError> {
        if condition == Condition::NotExists {
            return Err(RecordError::Invalid(
                "delete needs a condition on the existing record".into(),
            ));
        }
        let now_ms = self.clock.now_ms();
        let mut table = self.table.lock();
        self.charge(&mut table, Capacity::Write, now_ms)?;
        let current = table.current(candidate);
        match current {
            Some(deleted) if condition.holds(Some(&deleted)) => {
                self.commit(&mut table, now_ms, candidate, None);
                Ok(deleted)
            }
            current => Err(RecordError::condition_failed(current)),
        }
    }

    async fn get(
        &self,
        candidate: &CandidateHash,
        consistent: bool,
    ) -> Result<Option<BookingRecord>, RecordError> {
        let now_ms = self.clock.now_ms();
        let mut table = self.table.lock();
        self.charge(&mut table, Capacity::Read, now_ms)?;
        if consistent {
            return Ok(table.current(candidate));
        }
        let cutoff = self.cutoff(now_ms);
        Ok(table
            .items
            .get(candidate)
            .and_then(|item| item.as_of(cutoff))
            .cloned())
    }

    async fn by_payment(
        &self,
        payment_id: &PaymentId,
    ) -> Result<Option<BookingRecord>, RecordError> {
        let now_ms = self.clock.now_ms();
        let mut table = self.table.lock();
        self.charge(&mut table, Capacity::Read, now_ms)?;
        let cutoff = self.cutoff(now_ms);
        let Some(candidates) = table.by_payment.get(payment_id) else {
            return Ok(None);
        };
        Ok(candidates
            .iter()
            .filter_map(|c| table.items.get(c).and_then(|item| item.as_of(cutoff)))
            .find(|r| r.payment_id == *payment_id)
            .cloned())
    }

    async fn held_due(
        &self,
        deadline_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<BookingRecord>, RecordError> {
        // most overdue first; ties by candidate, so the order is reproducible
        self.select(
            |r| r.is_held_due(deadline_before_ms),
            sort_by_deadline,
            limit,
        )
    }

    async fn owed_emails(
        &self,
        paid_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<BookingRecord>, RecordError> {
        self.select(|r| r.owes_email(paid_before_ms), sort_by_paid, limit)
    }

    async fn scan_all(&self) -> Result<Vec<BookingRecord>, RecordError> {
        let now_ms = self.clock.now_ms();
        let mut table = self.table.lock();
        self.charge(&mut table, Capacity::Read, now_ms)?;
        table.prune_all(self.cutoff(now_ms));
        Ok(table
            .items
            .values()
            .filter_map(Item::current)
            .cloned()
            .collect())
    }

    async fn throttles(&self) -> Result<Throttles, RecordError> {
        Ok(self.table.lock().throttles)
    }

    /// Deletes the sale's records [`DELETE_SALE_BATCH`] at a time, each
    /// batch under the lock at once (costs no throughput, as the TTL sweep),
    /// each deletion an application REMOVE on the stream.
    async fn delete_sale(&self, sale: &SaleId) -> Result<u64, RecordError> {
        let mut removed = 0u64;
        loop {
            let now_ms = self.clock.now_ms();
            let deleted = {
                let mut table = self.table.lock();
                let batch: Vec<CandidateHash> = table
                    .items
                    .iter()
                    .filter(|(_, item)| item.current().is_some_and(|r| r.sale == *sale))
                    .map(|(c, _)| c.clone())
                    .take(DELETE_SALE_BATCH)
                    .collect();
                for c in &batch {
                    self.commit(&mut table, now_ms, c, None);
                }
                batch.len()
            };
            removed += deleted as u64;
            if deleted < DELETE_SALE_BATCH {
                return Ok(removed);
            }
            tracing::info!(%sale, removed, "deleting the sale's records");
            tokio::task::yield_now().await;
        }
    }
}

#[async_trait]
impl ChangeStream for EmbeddedRecords {
    async fn read(
        &self,
        after_sequence: u64,
        limit: usize,
        wait: Duration,
    ) -> Result<Vec<StreamRecord>, RecordError> {
        if limit == 0 {
            return Err(RecordError::Invalid("a stream read of 0 records".into()));
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // registered before looking, so a write in between still wakes us
            let written = self.stream_written.notified();
            tokio::pin!(written);
            written.as_mut().enable();
            {
                let table = self.table.lock();
                if after_sequence < table.trimmed_through {
                    return Err(RecordError::Invalid(format!(
                        "stream trimmed through {}, read after {after_sequence}: records lost",
                        table.trimmed_through
                    )));
                }
                let skip = table
                    .stream
                    .front()
                    .map_or(0, |first| after_sequence.saturating_sub(first.sequence - 1));
                let batch: Vec<StreamRecord> = table
                    .stream
                    .iter()
                    .skip(usize::try_from(skip).unwrap_or(usize::MAX))
                    .take(limit)
                    .cloned()
                    .collect();
                if !batch.is_empty() {
                    return Ok(batch);
                }
            }
            if tokio::time::timeout_at(deadline, written).await.is_err() {
                return Ok(Vec::new());
            }
        }
    }
}
