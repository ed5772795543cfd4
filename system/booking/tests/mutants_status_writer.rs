//! The status writer against tiny in-test backends: what lands in the sink,
//! which latches and locks it takes, and how a publication hands over.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;

use booking::coordination::keys;
use booking::ledger::LevelCount;
use booking::status::{
    Poked, Publish, StatusWriter, Transition, WRITE_ROUNDS_MAX, WRITER_LOCK_TTL, dirty_key,
    writer_lock_key,
};
use booking::{
    Admission, Bug, Bugs, CandidateHash, Coordination, CoordinationError, Counters, Hold, Ledger,
    LedgerError, Level, ManualClock, NotifyError, PaymentId, RequestToken, SaleId, StatusDocument,
    StatusSink, Step,
};

const PREFIX: &str = "t";

fn sale() -> SaleId {
    SaleId::parse("launch").unwrap()
}

fn level(s: &str) -> Level {
    Level::parse(s).unwrap()
}

fn counters(open: bool, levels: &[(&str, u32, u32)]) -> Counters {
    Counters {
        open,
        levels: levels
            .iter()
            .map(|(l, cap, count)| LevelCount {
                level: level(l),
                cap: *cap,
                count: *count,
                peak: *count,
            })
            .collect(),
        paid: 0,
    }
}

/// A ledger that only answers `counters`: the queued answers one by one,
/// the last one for good.
#[derive(Debug, Default)]
struct TinyLedger {
    answers: Mutex<VecDeque<Counters>>,
    reads: AtomicU32,
}

impl TinyLedger {
    fn answering(answers: &[Counters]) -> Arc<TinyLedger> {
        let l = TinyLedger::default();
        l.answers.lock().extend(answers.iter().cloned());
        Arc::new(l)
    }
    fn then(&self, answers: &[Counters]) {
        let mut q = self.answers.lock();
        q.clear();
        q.extend(answers.iter().cloned());
    }
}

fn unused<T>() -> Result<T, LedgerError> {
    Err(LedgerError::Unavailable("not in this fake".into()))
}

#[async_trait]
impl Ledger for TinyLedger {
    async fn reset(&self, _: &SaleId, _: &[(Level, u32)]) -> Result<(), LedgerError> {
        unused()
    }
    async fn load_candidates(&self, _: &SaleId, _: &[CandidateHash]) -> Result<u64, LedgerError> {
        unused()
    }
    async fn set_open(&self, _: &SaleId, _: bool) -> Result<(), LedgerError> {
        unused()
    }
    async fn admit(
        &self,
        _: &SaleId,
        _: &CandidateHash,
        _: &Level,
        _: &RequestToken,
        _: u64,
    ) -> Result<Admission, LedgerError> {
        unused()
    }
    async fn attach_payment(
        &self,
        _: &SaleId,
        _: &CandidateHash,
        _: &RequestToken,
        _: &PaymentId,
        _: u64,
    ) -> Result<Step, LedgerError> {
        unused()
    }
    async fn undo_admission(
        &self,
        _: &SaleId,
        _: &CandidateHash,
        _: &RequestToken,
    ) -> Result<Step, LedgerError> {
        unused()
    }
    async fn release(
        &self,
        _: &SaleId,
        _: &CandidateHash,
        _: &PaymentId,
    ) -> Result<Step, LedgerError> {
        unused()
    }
    async fn mark_paid(
        &self,
        _: &SaleId,
        _: &CandidateHash,
        _: &PaymentId,
    ) -> Result<Step, LedgerError> {
        unused()
    }
    async fn extend(
        &self,
        _: &SaleId,
        _: &CandidateHash,
        _: &PaymentId,
        _: u64,
    ) -> Result<Step, LedgerError> {
        unused()
    }
    async fn hold(&self, _: &SaleId, _: &CandidateHash) -> Result<Option<Hold>, LedgerError> {
        unused()
    }
    async fn paid(&self, _: &SaleId, _: &CandidateHash) -> Result<Option<PaymentId>, LedgerError> {
        unused()
    }
    async fn stale_pending(
        &self,
        _: &SaleId,
        _: u64,
        _: usize,
    ) -> Result<Vec<(CandidateHash, Hold)>, LedgerError> {
        unused()
    }
    async fn stale_held(
        &self,
        _: &SaleId,
        _: u64,
        _: usize,
    ) -> Result<Vec<(CandidateHash, Hold)>, LedgerError> {
        unused()
    }
    async fn counters(&self, _: &SaleId) -> Result<Counters, LedgerError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let mut q = self.answers.lock();
        if q.len() > 1 {
            Ok(q.pop_front().unwrap())
        } else {
            Ok(q.front().cloned().expect("an answer"))
        }
    }
}

/// Keys and values, no expiry; every call logged with its TTL. On its
/// first `redirty` unlocks it sets the dirty mark again, as another writer
/// marking the document meanwhile would.
#[derive(Debug, Default)]
struct TinyCoordination {
    values: Mutex<BTreeMap<String, String>>,
    log: Mutex<Vec<String>>,
    redirty: AtomicU32,
}

impl TinyCoordination {
    fn value(&self, key: &str) -> Option<String> {
        self.values.lock().get(key).cloned()
    }
    fn log(&self) -> Vec<String> {
        self.log.lock().clone()
    }
    fn note(&self, entry: String) {
        self.log.lock().push(entry);
    }
}

#[async_trait]
impl Coordination for TinyCoordination {
    async fn try_lock(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<bool, CoordinationError> {
        self.note(format!("try_lock {key} {owner} {ttl:?}"));
        let mut v = self.values.lock();
        if v.contains_key(key) {
            return Ok(false);
        }
        v.insert(key.to_owned(), owner.to_owned());
        Ok(true)
    }
    async fn unlock(&self, key: &str, owner: &str) -> Result<bool, CoordinationError> {
        self.note(format!("unlock {key} {owner}"));
        let mut v = self.values.lock();
        if self
            .redirty
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            v.insert(dirty_key(PREFIX, &sale()), "1".into());
        }
        if v.get(key).map(String::as_str) == Some(owner) {
            v.remove(key);
            return Ok(true);
        }
        Ok(false)
    }
    async fn extend_lock(&self, _: &str, _: &str, _: Duration) -> Result<bool, CoordinationError> {
        Err(CoordinationError::Unavailable("not in this fake".into()))
    }
    async fn get(&self, key: &str) -> Result<Option<String>, CoordinationError> {
        Ok(self.value(key))
    }
    async fn set(
        &self,
        key: &str,
        value: &str,
        ttl: Option<Duration>,
    ) -> Result<(), CoordinationError> {
        self.note(format!("set {key} {value} {ttl:?}"));
        self.values.lock().insert(key.to_owned(), value.to_owned());
        Ok(())
    }
    async fn delete(&self, key: &str) -> Result<bool, CoordinationError> {
        self.note(format!("delete {key}"));
        Ok(self.values.lock().remove(key).is_some())
    }
    async fn set_once(
        &self,
        key: &str,
        value: &str,
        ttl: Option<Duration>,
    ) -> Result<bool, CoordinationError> {
        self.note(format!("set_once {key} {value} {ttl:?}"));
        let mut v = self.values.lock();
        if v.contains_key(key) {
            return Ok(false);
        }
        v.insert(key.to_owned(), value.to_owned());
        Ok(true)
    }
}

#[derive(Debug, Default)]
struct TinySink {
    puts: Mutex<Vec<Vec<u8>>>,
}

impl TinySink {
    fn documents(&self) -> Vec<StatusDocument> {
        self.puts
            .lock()
            .iter()
            .map(|b| StatusDocument::from_json(b).unwrap())
            .collect()
    }
}

#[async_trait]
impl StatusSink for TinySink {
    async fn put(&self, document: &[u8]) -> Result<(), NotifyError> {
        self.puts.lock().push(document.to_vec());
        Ok(())
    }
    async fn get(&self) -> Result<Option<Vec<u8>>, NotifyError> {
        Ok(self.puts.lock().last().cloned())
    }
}

struct Rig {
    ledger: Arc<TinyLedger>,
    coordination: Arc<TinyCoordination>,
    sink: Arc<TinySink>,
    clock: ManualClock,
}

impl Rig {
    fn new(answers: &[Counters]) -> Rig {
        Rig {
            ledger: TinyLedger::answering(answers),
            coordination: Arc::new(TinyCoordination::default()),
            sink: Arc::new(TinySink::default()),
            clock: ManualClock::new(5_000),
        }
    }
    fn writer(&self) -> StatusWriter {
        StatusWriter::new(
            sale(),
            PREFIX,
            self.ledger.clone(),
            self.coordination.clone(),
            self.sink.clone(),
            Arc::new(self.clock.clone()),
        )
    }
}

#[tokio::test]
async fn a_first_poke_takes_the_throttle_and_writes_the_counters_document() {
    let c = counters(true, &[("gold", 2, 1)]);
    let rig = Rig::new(std::slice::from_ref(&c));
    let poked = rig.writer().poke().await.unwrap();
    assert_eq!(
        poked,
        Poked {
            won_throttle: true,
            transitions: vec![],
            publish: Publish::Wrote { writes: 1 },
        }
    );
    assert_eq!(
        rig.sink.documents(),
        vec![StatusDocument::from_counters(&sale(), &c, 5_000)]
    );
    let throttle = keys::status_throttle(PREFIX, &sale());
    assert!(rig.coordination.value(&throttle).is_some());
    assert_eq!(
        rig.coordination.value(&dirty_key(PREFIX, &sale())),
        None,
        "the dirty mark is cleared by the write"
    );
    assert_eq!(
        rig.coordination.value(&writer_lock_key(PREFIX, &sale())),
        None,
        "the writer lock is given back"
    );
}

#[tokio::test]
async fn a_poke_inside_the_throttle_without_a_transition_skips() {
    let rig = Rig::new(&[counters(true, &[("gold", 2, 1)])]);
    let writer = rig.writer();
    writer.poke().await.unwrap();
    rig.clock.advance_ms(100);
    let poked = writer.poke().await.unwrap();
    assert_eq!(
        poked,
        Poked {
            won_throttle: false,
            transitions: vec![],
            publish: Publish::Skipped,
        }
    );
    assert_eq!(rig.sink.documents().len(), 1, "one write for the burst");
}

#[tokio::test]
async fn a_level_filling_inside_the_throttle_is_published_once_and_a_release_reopens_it() {
    let rig = Rig::new(&[counters(true, &[("gold", 2, 1)])]);
    let writer = rig.writer();
    writer.poke().await.unwrap();

    let full = counters(true, &[("gold", 2, 2)]);
    rig.ledger.then(std::slice::from_ref(&full));
    rig.clock.advance_ms(100);
    let poked = writer.poke().await.unwrap();
    assert!(!poked.won_throttle);
    assert_eq!(
        poked.transitions,
        vec![Transition::LevelFull(level("gold"))]
    );
    assert_eq!(poked.publish, Publish::Wrote { writes: 1 });
    let latch = keys::level_full_latch(PREFIX, &sale(), &level("gold"));
    assert!(rig.coordination.value(&latch).is_some());
    assert_eq!(
        rig.sink.documents().last().unwrap(),
        &StatusDocument::from_counters(&sale(), &full, 5_100)
    );

    // the latch is read back: the same fill is not published again
    let poked = writer.poke().await.unwrap();
    assert_eq!(poked.transitions, vec![]);
    assert_eq!(poked.publish, Publish::Skipped);
    assert_eq!(rig.sink.documents().len(), 2);

    // a seat freed: the latch is cleared and the level shown open at once
    rig.ledger.then(&[counters(true, &[("gold", 2, 1)])]);
    let poked = writer.poke().await.unwrap();
    assert_eq!(
        poked.transitions,
        vec![Transition::LevelReopened(level("gold"))]
    );
    assert_eq!(poked.publish, Publish::Wrote { writes: 1 });
    assert_eq!(rig.coordination.value(&latch), None);
    assert_eq!(rig.sink.documents().len(), 3);
}

#[tokio::test]
async fn a_transition_is_decided_on_counters_read_after_the_latches() {
    // the first read sees the level full, the read after the latches sees a
    // seat given back: nothing to latch, nothing to publish
    let rig = Rig::new(&[counters(true, &[("gold", 2, 1)])]);
    let writer = rig.writer();
    writer.poke().await.unwrap();
    let reads_before = rig.ledger.reads.load(Ordering::SeqCst);
    rig.ledger.then(&[
        counters(true, &[("gold", 2, 2)]),
        counters(true, &[("gold", 2, 1)]),
    ]);
    let poked = writer.poke().await.unwrap();
    assert_eq!(poked.transitions, vec![]);
    assert_eq!(poked.publish, Publish::Skipped);
    assert_eq!(rig.ledger.reads.load(Ordering::SeqCst), reads_before + 2);
    let latch = keys::level_full_latch(PREFIX, &sale(), &level("gold"));
    assert_eq!(rig.coordination.value(&latch), None);
}

#[tokio::test]
async fn a_publication_that_finds_the_lock_taken_hands_over_through_the_dirty_mark() {
    let rig = Rig::new(&[counters(true, &[("gold", 2, 1)])]);
    let lock = writer_lock_key(PREFIX, &sale());
    rig.coordination
        .values
        .lock()
        .insert(lock.clone(), "other:0".into());
    let published = rig.writer().publish().await.unwrap();
    assert_eq!(published, Publish::HandedOver);
    assert!(rig.sink.documents().is_empty(), "the holder writes, not us");
    assert_eq!(
        rig.coordination.value(&dirty_key(PREFIX, &sale())),
        Some("1".into())
    );
    assert_eq!(rig.coordination.value(&lock), Some("other:0".into()));
}

#[tokio::test]
async fn the_holder_writes_again_while_others_mark_the_document_dirty() {
    let rig = Rig::new(&[counters(true, &[("gold", 2, 1)])]);
    rig.coordination.redirty.store(2, Ordering::SeqCst);
    let published = rig.writer().publish().await.unwrap();
    assert_eq!(published, Publish::Wrote { writes: 3 });
    assert_eq!(rig.sink.documents().len(), 3);
    assert_eq!(rig.coordination.value(&dirty_key(PREFIX, &sale())), None);
}

#[tokio::test]
async fn a_holder_writes_at_most_the_round_limit_and_leaves_the_mark() {
    let rig = Rig::new(&[counters(true, &[("gold", 2, 1)])]);
    rig.coordination.redirty.store(1_000, Ordering::SeqCst);
    let published = rig.writer().publish().await.unwrap();
    assert_eq!(
        published,
        Publish::Wrote {
            writes: WRITE_ROUNDS_MAX
        }
    );
    assert_eq!(rig.sink.documents().len(), WRITE_ROUNDS_MAX as usize);
    assert_eq!(
        rig.coordination.value(&dirty_key(PREFIX, &sale())),
        Some("1".into()),
        "the mark stays for the next publication"
    );
}

#[tokio::test]
async fn the_unlatched_writer_bug_writes_without_the_lock() {
    let c = counters(true, &[("gold", 2, 2)]);
    let rig = Rig::new(std::slice::from_ref(&c));
    let lock = writer_lock_key(PREFIX, &sale());
    rig.coordination
        .values
        .lock()
        .insert(lock.clone(), "other:0".into());
    let writer = rig
        .writer()
        .with_bugs(&Bugs::of([Bug::UnlatchedStatusWriter]));
    assert_eq!(
        writer.publish().await.unwrap(),
        Publish::Wrote { writes: 1 }
    );
    assert_eq!(
        rig.sink.documents(),
        vec![StatusDocument::from_counters(&sale(), &c, 5_000)]
    );
    assert!(
        !rig.coordination
            .log()
            .iter()
            .any(|e| e.starts_with("try_lock")),
        "{:?}",
        rig.coordination.log()
    );
    // without the bug the same writer hands over
    let plain = rig.writer().with_bugs(&Bugs::none());
    assert_eq!(plain.publish().await.unwrap(), Publish::HandedOver);
}

#[tokio::test]
async fn the_writer_uses_its_throttle_lock_ttl_and_unique_owner_tokens() {
    let rig = Rig::new(&[counters(true, &[("gold", 2, 1)])]);
    let writer = rig
        .writer()
        .with_throttle(Duration::from_millis(250))
        .with_lock_ttl(Duration::from_millis(777))
        .with_writer_id("inst-7");
    writer.poke().await.unwrap();
    let throttle = keys::status_throttle(PREFIX, &sale());
    let lock = writer_lock_key(PREFIX, &sale());
    let log = rig.coordination.log();
    assert!(
        log.contains(&format!("set_once {throttle} inst-7:0 Some(250ms)")),
        "{log:#?}"
    );
    assert!(
        log.contains(&format!("try_lock {lock} inst-7:1 777ms")),
        "{log:#?}"
    );
    assert!(log.contains(&format!("unlock {lock} inst-7:1")), "{log:#?}");
    let debug = format!("{writer:?}");
    assert!(
        debug.contains("StatusWriter") && debug.contains("inst-7") && debug.contains("launch"),
        "{debug}"
    );
}

#[tokio::test]
async fn a_default_writer_uses_the_articles_throttle_and_lock_ttl() {
    let rig = Rig::new(&[counters(true, &[("gold", 2, 1)])]);
    rig.writer().poke().await.unwrap();
    let log = rig.coordination.log();
    let throttle = keys::status_throttle(PREFIX, &sale());
    let lock = writer_lock_key(PREFIX, &sale());
    assert!(
        log.contains(&format!("set_once {throttle} status-writer:0 Some(2s)")),
        "{log:#?}"
    );
    assert!(
        log.contains(&format!(
            "try_lock {lock} status-writer:1 {WRITER_LOCK_TTL:?}"
        )),
        "{log:#?}"
    );
}
