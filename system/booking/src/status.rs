//! The live status document (`status.json`, S3 in production): availability
//! per level, read by a small static page.
//!
//! # The rules
//!
//! - **Built only from the counters.** [`StatusDocument::from_counters`] is
//!   the only way to make one: every writer rebuilds the *whole* document from
//!   the ledger (Redis) and overwrites it. Nobody reads the file, changes a
//!   field and writes it back (the article's first version, where an old
//!   write reopened a level that had just filled).
//! - **A full level can never look open.** A level's state is derived from the
//!   counts in the same document: `full` iff `taken >= cap`, and `closed` for
//!   every level while the sale is closed. The page checks the counts too
//!   ([`StatusDocument::shows_full_level_open`]), so even a document from
//!   elsewhere cannot show a full level as open.
//! - **A burst is one write.** [`StatusWriter::poke`] first tries the 2 s
//!   `SET NX` throttle ([`keys::status_throttle`]); a writer that loses it
//!   skips, unless it wins a transition latch.
//! - **Transitions publish exactly once.** A level becoming full sets its
//!   latch ([`keys::level_full_latch`]) and the sale closing sets
//!   [`keys::closed_latch`], each with `SET NX`, so of all the writers that see
//!   a transition exactly one publishes it, even inside the throttle window. A
//!   release that frees a seat in a latched level clears its latch (and
//!   reopening the sale clears the closed latch): the freed seat reopens the
//!   level on the page at once, and the next fill publishes again. Which
//!   latches to set or clear is the pure [`transitions`].
//! - **Writers run in a fixed order.** "An older document can only be
//!   overwritten by a newer read" holds only if reads and writes are ordered:
//!   with writer A reading, B reading later and writing, and A writing last,
//!   A's older document would win. So every publication reads the counters
//!   and overwrites the document while holding the writer lock
//!   ([`writer_lock_key`], an owner-token lock): writes happen in the order of
//!   their reads, and the last write carries the newest read. A writer that
//!   finds the lock taken marks the document dirty ([`dirty_key`]) and leaves;
//!   the holder, after unlocking, sees the mark and writes again (see
//!   [`StatusWriter::publish`]). The ordering holds as long as one write
//!   (counters read + sink put) takes less than the lock's TTL
//!   ([`WRITER_LOCK_TTL`]); past it a slow writer could still land an older
//!   document, which is then still self-consistent (the page rule above) and
//!   is replaced by the next publication.
//!
//! Latches only decide *when* to write, never *what*: the content always
//! comes from a fresh read of the counters, so a latch that is briefly out of
//! step with the counters (two writers setting and clearing it around a
//! release) costs at most one extra or one early write.
//!
//! The document carries `generated_at_ms` (the writer's clock) but no
//! version number: the [`Coordination`] port has no atomic increment, and a
//! counter bumped under the writer lock would repeat itself whenever a lock
//! outlived its TTL, so it would not really be monotonic.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::bugs::{Bug, Bugs};
use crate::clock::Clock;
use crate::coordination::{Coordination, CoordinationError, keys};
use crate::ids::{Level, SaleId};
use crate::ledger::{Counters, Ledger, LedgerError};
use crate::notify::{NotifyError, StatusSink};
use crate::settings::STATUS_THROTTLE;

/// How long one publication (counters read + document put) may hold the
/// writer lock. Generous: ordering is only guaranteed while a write finishes
/// within it.
pub const WRITER_LOCK_TTL: Duration = Duration::from_secs(10);

/// A holder writes again at most this many times in one call when other
/// writers keep marking the document dirty; past it the mark stays for the
/// next publication.
pub const WRITE_ROUNDS_MAX: u32 = 16;

/// What a level shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LevelState {
    /// Seats left and the sale open.
    Open,
    /// `taken >= cap`.
    Full,
    /// The sale is closed.
    Closed,
}

impl LevelState {
    /// What the counts say a level is: closed with the sale, full once
    /// `taken >= cap`, else open. The one rule behind the document
    /// ([`StatusDocument::from_counters`]), its check
    /// ([`StatusDocument::shows_full_level_open`]) and the status page.
    pub fn from_counts(sale_open: bool, taken: u32, cap: u32) -> LevelState {
        if !sale_open {
            LevelState::Closed
        } else if taken >= cap {
            LevelState::Full
        } else {
            LevelState::Open
        }
    }
}

/// One level on the page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LevelStatus {
    /// Level.
    pub level: Level,
    /// Seats in it.
    pub cap: u32,
    /// Seats counted (pending + held + paid).
    pub taken: u32,
    /// `cap - taken`, never below zero.
    pub left: u32,
    /// Open, full or closed.
    pub state: LevelState,
}

/// The whole document. Serialized in field order: `sale`, `open`, `levels`
/// (each `level`, `cap`, `taken`, `left`, `state`), `generated_at_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusDocument {
    /// The sale.
    pub sale: SaleId,
    /// Whether admissions are open.
    pub open: bool,
    /// Per level, in the counters' (level) order.
    pub levels: Vec<LevelStatus>,
    /// When the counters were read, ms since the epoch (the writer's clock).
    pub generated_at_ms: u64,
}

impl StatusDocument {
    /// The document for these counters, read at `now_ms`.
    pub fn from_counters(sale: &SaleId, counters: &Counters, now_ms: u64) -> StatusDocument {
        StatusDocument {
            sale: sale.clone(),
            open: counters.open,
            levels: counters
                .levels
                .iter()
                .map(|l| LevelStatus {
                    level: l.level.clone(),
                    cap: l.cap,
                    taken: l.count,
                    left: l.cap.saturating_sub(l.count),
                    state: LevelState::from_counts(counters.open, l.count, l.cap),
                })
                .collect(),
            generated_at_ms: now_ms,
        }
    }

    /// The JSON bytes that are stored.
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }

    /// Reads stored JSON bytes back.
    pub fn from_json(bytes: &[u8]) -> Result<StatusDocument, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// The page's own check: levels that say open although their counts say
    /// full (or the sale is closed). Never any for a document built by
    /// [`StatusDocument::from_counters`]; the page treats such a level as full.
    pub fn shows_full_level_open(&self) -> Vec<&LevelStatus> {
        self.levels
            .iter()
            .filter(|l| {
                l.state == LevelState::Open
                    && LevelState::from_counts(self.open, l.taken, l.cap) != LevelState::Open
            })
            .collect()
    }

    /// The level's entry, if the sale has it.
    pub fn level(&self, level: &Level) -> Option<&LevelStatus> {
        self.levels.iter().find(|l| &l.level == level)
    }
}

/// The writes (in the order they landed) whose document was built from an
/// older read than the write before them (`generated_at_ms` went back):
/// what the writer lock prevents. Returns `(index, generated_at_ms, the
/// previous write's)` for each.
pub fn writes_out_of_read_order(
    generated_at_ms: impl IntoIterator<Item = u64>,
) -> Vec<(usize, u64, u64)> {
    let mut out = Vec::new();
    let mut newest: Option<u64> = None;
    for (i, g) in generated_at_ms.into_iter().enumerate() {
        if let Some(n) = newest {
            if g < n {
                out.push((i, g, n));
            }
        }
        newest = Some(newest.map_or(g, |n| n.max(g)));
    }
    out
}

/// What the audit finds in documents as they landed, `(landed_at_ms,
/// document)` in landing order: the levels shown open although full
/// ([`StatusDocument::shows_full_level_open`]), and the writes built from an
/// older read than the one before them ([`writes_out_of_read_order`]), each
/// as a line for a report.
pub fn landed_problems(landed: &[(u64, StatusDocument)]) -> (Vec<String>, Vec<String>) {
    let shown_open = landed
        .iter()
        .flat_map(|(at_ms, d)| {
            d.shows_full_level_open()
                .into_iter()
                .map(move |l| format!("at {at_ms}: {} open with {}/{}", l.level, l.taken, l.cap))
        })
        .collect();
    let unordered = writes_out_of_read_order(landed.iter().map(|(_, d)| d.generated_at_ms))
        .into_iter()
        .map(|(i, g, newest)| format!("write {i}: read at {g}, after a write read at {newest}"))
        .collect();
    (shown_open, unordered)
}

/// Which status latches are set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Latches {
    /// The closed latch.
    pub closed: bool,
    /// Levels whose full latch is set.
    pub full: BTreeSet<Level>,
}

/// A latch change that must be published (at once, throttle or not).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "transition", content = "level", rename_all = "snake_case")]
pub enum Transition {
    /// The level reached its cap: set its full latch.
    LevelFull(Level),
    /// A seat was freed in a latched level: clear its full latch.
    LevelReopened(Level),
    /// The sale closed: set the closed latch.
    SaleClosed,
    /// The sale opened (again): clear the closed latch.
    SaleOpened,
}

impl Transition {
    /// The latch this transition sets or clears.
    pub fn latch_key(&self, prefix: &str, sale: &SaleId) -> String {
        match self {
            Transition::LevelFull(level) | Transition::LevelReopened(level) => {
                keys::level_full_latch(prefix, sale, level)
            }
            Transition::SaleClosed | Transition::SaleOpened => keys::closed_latch(prefix, sale),
        }
    }

    /// Whether the transition sets its latch (else it clears it).
    pub fn sets_latch(&self) -> bool {
        matches!(self, Transition::LevelFull(_) | Transition::SaleClosed)
    }
}

/// The latch changes the counters call for, levels in counters order, then
/// the sale: a level at or over its cap without its full latch → set it; a
/// level with free seats whose full latch is set → clear it (a release
/// reopens the level); the sale closed without the closed latch → set it;
/// the sale open with the closed latch → clear it. Latches of levels the
/// counters do not list are left alone.
pub fn transitions(counters: &Counters, latches: &Latches) -> Vec<Transition> {
    let mut out = Vec::new();
    for l in &counters.levels {
        let full = l.count >= l.cap;
        let latched = latches.full.contains(&l.level);
        if full && !latched {
            out.push(Transition::LevelFull(l.level.clone()));
        } else if !full && latched {
            out.push(Transition::LevelReopened(l.level.clone()));
        }
    }
    if !counters.open && !latches.closed {
        out.push(Transition::SaleClosed);
    } else if counters.open && latches.closed {
        out.push(Transition::SaleOpened);
    }
    out
}

/// The writer lock that orders publications (same hash tag as the sale).
pub fn writer_lock_key(prefix: &str, sale: &SaleId) -> String {
    format!("{}:writer-lock", keys::status_throttle(prefix, sale))
}

/// The "write again" mark left by a writer that found the lock taken.
pub fn dirty_key(prefix: &str, sale: &SaleId) -> String {
    format!("{}:dirty", keys::status_throttle(prefix, sale))
}

/// The status document could not be published.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatusError {
    /// The counters could not be read.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The throttle, a latch or the writer lock could not be reached.
    #[error(transparent)]
    Coordination(#[from] CoordinationError),
    /// The sink refused the document.
    #[error(transparent)]
    Sink(#[from] NotifyError),
    /// The document could not be encoded.
    #[error("status document not encodable: {0}")]
    Encode(String),
}

/// How a publication went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publish {
    /// Nothing to publish: throttled and no transition won.
    Skipped,
    /// This writer overwrote the document this many times (more than once
    /// when others marked it dirty meanwhile).
    Wrote {
        /// Overwrites.
        writes: u32,
    },
    /// Another writer held the lock; it was marked dirty, so that writer
    /// writes again after its current write.
    HandedOver,
}

/// What one [`StatusWriter::poke`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Poked {
    /// Whether this writer took the throttle.
    pub won_throttle: bool,
    /// The transitions whose latch this writer set or cleared (each is won
    /// by exactly one writer).
    pub transitions: Vec<Transition>,
    /// The publication.
    pub publish: Publish,
}

/// Rebuilds and overwrites the status document of one sale.
pub struct StatusWriter {
    sale: SaleId,
    prefix: String,
    ledger: Arc<dyn Ledger>,
    coordination: Arc<dyn Coordination>,
    sink: Arc<dyn StatusSink>,
    clock: Arc<dyn Clock>,
    throttle: Duration,
    lock_ttl: Duration,
    writer_id: String,
    calls: AtomicU64,
    unordered: bool,
}

impl std::fmt::Debug for StatusWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusWriter")
            .field("sale", &self.sale)
            .field("prefix", &self.prefix)
            .field("throttle", &self.throttle)
            .field("writer_id", &self.writer_id)
            .finish_non_exhaustive()
    }
}

impl StatusWriter {
    /// A writer of `sale`'s document with keys under `prefix`, the 2 s
    /// throttle and writer id `"status-writer"`.
    pub fn new(
        sale: SaleId,
        prefix: &str,
        ledger: Arc<dyn Ledger>,
        coordination: Arc<dyn Coordination>,
        sink: Arc<dyn StatusSink>,
        clock: Arc<dyn Clock>,
    ) -> StatusWriter {
        StatusWriter {
            sale,
            prefix: prefix.to_owned(),
            ledger,
            coordination,
            sink,
            clock,
            throttle: STATUS_THROTTLE,
            lock_ttl: WRITER_LOCK_TTL,
            writer_id: "status-writer".to_owned(),
            calls: AtomicU64::new(0),
            unordered: false,
        }
    }

    /// The bug zoo's switches: `unlatched_status_writer` publishes without
    /// the writer lock and the dirty mark, so two writers can land their
    /// documents in the other order than their reads, and an older read
    /// (a level with seats left) overwrites a newer one (the level full).
    pub fn with_bugs(mut self, bugs: &Bugs) -> StatusWriter {
        self.unordered = bugs.on(Bug::UnlatchedStatusWriter);
        self
    }

    /// The throttle window (a rehearsal scales it: `Settings::status_throttle`).
    pub fn with_throttle(mut self, throttle: Duration) -> StatusWriter {
        self.throttle = throttle;
        self
    }

    /// The writer lock's TTL (default [`WRITER_LOCK_TTL`]).
    pub fn with_lock_ttl(mut self, ttl: Duration) -> StatusWriter {
        self.lock_ttl = ttl;
        self
    }

    /// The instance's id, the first part of its lock owner tokens (each call
    /// adds a sequence number, so tokens are unique per call). Give every
    /// instance a different one.
    pub fn with_writer_id(mut self, id: &str) -> StatusWriter {
        self.writer_id = id.to_owned();
        self
    }

    fn token(&self) -> String {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        format!("{}:{n}", self.writer_id)
    }

    /// Something changed (an admission, an undo, a release, open/close):
    /// publish if due. Takes the throttle (`SET NX PX`); whether or not it
    /// got it, reads the counters and the latches and applies the
    /// [`transitions`] they call for, each with `SET NX` / `DEL` so that one
    /// writer wins each. Publishes (see [`StatusWriter::publish`]) if it took
    /// the throttle or won a transition; otherwise skips: a burst collapses to
    /// one write per window, and transitions publish exactly once.
    pub async fn poke(&self) -> Result<Poked, StatusError> {
        let token = self.token();
        let throttle_key = keys::status_throttle(&self.prefix, &self.sale);
        let won_throttle = self
            .coordination
            .set_once(&throttle_key, &token, Some(self.throttle))
            .await?;
        let counters = self.ledger.counters(&self.sale).await?;
        let latches = self.latches(&counters).await?;
        // The latches were read after the counters, so a latch another
        // writer set from a newer read can sit beside our older counts; a
        // level we saw one short of its cap would then look "freed" and its
        // latch be cleared (and set again: the fill published twice). So a
        // transition is decided only on counters read after the latches:
        // counts only fall through a release, so those counters are at
        // least as new as whatever read set a latch, and a clear means a
        // seat really came back.
        let mut due = transitions(&counters, &latches);
        if !due.is_empty() {
            let fresh = self.ledger.counters(&self.sale).await?;
            due = transitions(&fresh, &latches);
        }
        let mut won = Vec::new();
        for t in due {
            let key = t.latch_key(&self.prefix, &self.sale);
            let changed = if t.sets_latch() {
                self.coordination.set_once(&key, &token, None).await?
            } else {
                self.coordination.delete(&key).await?
            };
            if changed {
                won.push(t);
            }
        }
        let publish = if won_throttle || !won.is_empty() {
            self.publish().await?
        } else {
            Publish::Skipped
        };
        Ok(Poked {
            won_throttle,
            transitions: won,
            publish,
        })
    }

    /// Publishes now, throttle or not (ops `open`/`close`/`status`, and every
    /// due [`StatusWriter::poke`]). Marks the document dirty, then, while it
    /// gets the writer lock: clears the mark, reads the counters, overwrites
    /// the whole document, unlocks, and goes round again if someone marked it
    /// dirty meanwhile (at most [`WRITE_ROUNDS_MAX`] writes). If the lock is
    /// taken it leaves the mark for the holder ([`Publish::HandedOver`]), who
    /// checks it after unlocking, so a change is always followed by a write
    /// whose read comes after it.
    pub async fn publish(&self) -> Result<Publish, StatusError> {
        if self.unordered {
            return self.publish_unordered().await;
        }
        let lock = writer_lock_key(&self.prefix, &self.sale);
        let dirty = dirty_key(&self.prefix, &self.sale);
        self.coordination.set(&dirty, "1", None).await?;
        let mut writes = 0;
        while writes < WRITE_ROUNDS_MAX {
            let owner = self.token();
            if !self
                .coordination
                .try_lock(&lock, &owner, self.lock_ttl)
                .await?
            {
                break;
            }
            let written = self.write_locked(&dirty).await;
            let unlocked = self.coordination.unlock(&lock, &owner).await;
            written?;
            unlocked?;
            writes += 1;
            if self.coordination.get(&dirty).await?.is_none() {
                break;
            }
        }
        Ok(if writes == 0 {
            Publish::HandedOver
        } else {
            Publish::Wrote { writes }
        })
    }

    /// One write under the lock: the mark is cleared before the read, so a
    /// mark set after this read survives for the next round.
    async fn write_locked(&self, dirty: &str) -> Result<(), StatusError> {
        self.coordination.delete(dirty).await?;
        let counters = self.ledger.counters(&self.sale).await?;
        let document = StatusDocument::from_counters(&self.sale, &counters, self.clock.now_ms());
        let bytes = document
            .to_json()
            .map_err(|e| StatusError::Encode(e.to_string()))?;
        self.sink.put(&bytes).await?;
        Ok(())
    }

    /// The zoo's bug: read, then a round trip, then write, with nothing
    /// ordering this writer against the others.
    async fn publish_unordered(&self) -> Result<Publish, StatusError> {
        let counters = self.ledger.counters(&self.sale).await?;
        let document = StatusDocument::from_counters(&self.sale, &counters, self.clock.now_ms());
        let _ = self
            .coordination
            .get(&dirty_key(&self.prefix, &self.sale))
            .await?;
        let bytes = document
            .to_json()
            .map_err(|e| StatusError::Encode(e.to_string()))?;
        self.sink.put(&bytes).await?;
        Ok(Publish::Wrote { writes: 1 })
    }

    /// The latches of the counters' levels and of the sale.
    async fn latches(&self, counters: &Counters) -> Result<Latches, StatusError> {
        let mut latches = Latches {
            closed: self
                .coordination
                .get(&keys::closed_latch(&self.prefix, &self.sale))
                .await?
                .is_some(),
            full: BTreeSet::new(),
        };
        for l in &counters.levels {
            let key = keys::level_full_latch(&self.prefix, &self.sale, &l.level);
            if self.coordination.get(&key).await?.is_some() {
                latches.full.insert(l.level.clone());
            }
        }
        Ok(latches)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::LevelCount;

    fn level(s: &str) -> Level {
        Level::parse(s).unwrap()
    }

    fn sale() -> SaleId {
        SaleId::parse("launch").unwrap()
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

    fn latches(closed: bool, full: &[&str]) -> Latches {
        Latches {
            closed,
            full: full.iter().map(|l| level(l)).collect(),
        }
    }

    #[test]
    fn writes_out_of_read_order_are_those_older_than_any_before() {
        assert!(writes_out_of_read_order([]).is_empty());
        assert!(writes_out_of_read_order([1, 1, 2, 5, 5, 9]).is_empty());
        assert_eq!(
            writes_out_of_read_order([1, 5, 3, 4, 6]),
            vec![(2, 3, 5), (3, 4, 5)]
        );
    }

    #[test]
    fn a_level_is_full_exactly_when_taken_reaches_cap() {
        let doc = StatusDocument::from_counters(
            &sale(),
            &counters(true, &[("a", 3, 2), ("b", 3, 3), ("c", 0, 0), ("d", 2, 5)]),
            7,
        );
        let states: Vec<_> = doc.levels.iter().map(|l| (l.left, l.state)).collect();
        assert_eq!(
            states,
            [
                (1, LevelState::Open),
                (0, LevelState::Full),
                (0, LevelState::Full),
                (0, LevelState::Full)
            ]
        );
        assert!(doc.open);
        assert_eq!(doc.generated_at_ms, 7);
        assert!(doc.shows_full_level_open().is_empty());
        assert_eq!(doc.level(&level("a")).unwrap().taken, 2);
    }

    #[test]
    fn every_level_is_closed_while_the_sale_is_closed() {
        let doc = StatusDocument::from_counters(
            &sale(),
            &counters(false, &[("a", 3, 0), ("b", 1, 1)]),
            0,
        );
        assert!(!doc.open);
        assert!(doc.levels.iter().all(|l| l.state == LevelState::Closed));
        assert_eq!(doc.levels[0].left, 3, "counts still shown");
        assert!(doc.shows_full_level_open().is_empty());
    }

    #[test]
    fn the_json_has_a_stable_field_order_and_reads_back() {
        let doc = StatusDocument::from_counters(&sale(), &counters(true, &[("gold", 2, 2)]), 42);
        let json = String::from_utf8(doc.to_json().unwrap()).unwrap();
        assert_eq!(
            json,
            r#"{"sale":"launch","open":true,"levels":[{"level":"gold","cap":2,"taken":2,"left":0,"state":"full"}],"generated_at_ms":42}"#
        );
        assert_eq!(StatusDocument::from_json(json.as_bytes()).unwrap(), doc);
        let open = StatusDocument::from_counters(&sale(), &counters(true, &[("gold", 2, 1)]), 1);
        assert!(
            String::from_utf8(open.to_json().unwrap())
                .unwrap()
                .contains(r#""state":"open""#)
        );
        let closed = StatusDocument::from_counters(&sale(), &counters(false, &[("gold", 2, 1)]), 1);
        assert!(
            String::from_utf8(closed.to_json().unwrap())
                .unwrap()
                .contains(r#""state":"closed""#)
        );
    }

    #[test]
    fn the_page_check_catches_a_forged_open_level() {
        let mut doc = StatusDocument::from_counters(&sale(), &counters(true, &[("a", 2, 2)]), 0);
        doc.levels[0].state = LevelState::Open;
        assert_eq!(doc.shows_full_level_open().len(), 1);
        let mut closed =
            StatusDocument::from_counters(&sale(), &counters(false, &[("a", 2, 0)]), 0);
        closed.levels[0].state = LevelState::Open;
        assert_eq!(closed.shows_full_level_open().len(), 1);
    }

    #[test]
    fn a_level_becoming_full_sets_its_latch_once() {
        let c = counters(true, &[("a", 2, 2), ("b", 2, 1)]);
        assert_eq!(
            transitions(&c, &latches(false, &[])),
            [Transition::LevelFull(level("a"))]
        );
        assert!(transitions(&c, &latches(false, &["a"])).is_empty());
    }

    #[test]
    fn a_release_in_a_latched_level_clears_the_latch() {
        let c = counters(true, &[("a", 2, 1)]);
        assert_eq!(
            transitions(&c, &latches(false, &["a"])),
            [Transition::LevelReopened(level("a"))]
        );
        assert!(transitions(&c, &latches(false, &[])).is_empty());
    }

    #[test]
    fn closing_sets_the_closed_latch_once_and_reopening_clears_it() {
        let closed = counters(false, &[("a", 2, 2)]);
        assert_eq!(
            transitions(&closed, &latches(false, &["a"])),
            [Transition::SaleClosed]
        );
        assert!(transitions(&closed, &latches(true, &["a"])).is_empty());
        let open = counters(true, &[("a", 2, 0)]);
        assert_eq!(
            transitions(&open, &latches(true, &["a"])),
            [
                Transition::LevelReopened(level("a")),
                Transition::SaleOpened
            ]
        );
        // latches of levels the sale no longer has are left alone
        assert!(transitions(&open, &latches(false, &["gone"])).is_empty());
    }

    #[test]
    fn transitions_name_their_latches() {
        let (p, s) = ("p", sale());
        assert_eq!(
            Transition::LevelFull(level("a")).latch_key(p, &s),
            keys::level_full_latch(p, &s, &level("a"))
        );
        assert_eq!(
            Transition::LevelReopened(level("a")).latch_key(p, &s),
            keys::level_full_latch(p, &s, &level("a"))
        );
        assert_eq!(
            Transition::SaleClosed.latch_key(p, &s),
            keys::closed_latch(p, &s)
        );
        assert_eq!(
            Transition::SaleOpened.latch_key(p, &s),
            keys::closed_latch(p, &s)
        );
        assert!(Transition::LevelFull(level("a")).sets_latch());
        assert!(Transition::SaleClosed.sets_latch());
        assert!(!Transition::LevelReopened(level("a")).sets_latch());
        assert!(!Transition::SaleOpened.sets_latch());
    }

    #[test]
    fn writer_keys_share_the_sales_hash_tag() {
        for k in [writer_lock_key("p", &sale()), dirty_key("p", &sale())] {
            assert!(k.starts_with("p:{sale:launch}:status:"), "{k}");
        }
        assert_ne!(writer_lock_key("p", &sale()), dirty_key("p", &sale()));
    }
}
