//! What one toxic does to one direction of one connection: a queue of items
//! with the instants they may leave, and the toxic's per-connection state.
//! Pure: the caller passes `now`, and no I/O happens here.

use std::collections::VecDeque;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use crate::chain::ToxicEntry;
use crate::toxic::ToxicKind;

/// How a direction ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The source closed: the destination's write side is shut down (FIN);
    /// the other direction goes on.
    Eof,
    /// A toxic (or an error) closed the connection: both sides, FIN.
    Close,
    /// `reset_peer`: both sides get an RST.
    Reset,
}

/// What flows through a direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Item {
    /// Bytes, stamped when read (latency counts from the stamp).
    Data {
        /// The bytes.
        bytes: Vec<u8>,
        /// When they were read, or when a latency toxic released them.
        stamp: Instant,
    },
    /// The end of the direction; nothing follows it.
    End(End),
}

impl Item {
    fn len(&self) -> usize {
        match self {
            Item::Data { bytes, .. } => bytes.len(),
            Item::End(_) => 0,
        }
    }
}

/// The bandwidth toxic sends a chunk larger than this many 100 ms of its
/// rate in 100 ms pieces (as toxiproxy does).
const BANDWIDTH_PIECE_MS: u64 = 100;

/// Delays longer than this are this long: far enough to never happen in a
/// rehearsal, near enough that `Instant` arithmetic cannot overflow.
const DELAY_MAX: Duration = Duration::from_secs(365 * 24 * 3600);

fn later(now: Instant, delay: Duration) -> Instant {
    now + delay.min(DELAY_MAX)
}

/// One toxic on one direction of one connection.
#[derive(Debug)]
pub(crate) struct Stage {
    /// The toxic's identity on its proxy (stable across updates).
    pub id: u64,
    /// Its revision: a new one on every update.
    pub revision: u64,
    kind: ToxicKind,
    /// Whether the toxicity draw made it act on this connection.
    acts: bool,
    queue: VecDeque<(Instant, Item)>,
    queued_bytes: usize,
    /// Bandwidth and slicer: when the next piece may leave.
    cursor: Option<Instant>,
    /// Timeout: when it closes; reset_peer: when it resets.
    deadline: Option<Instant>,
    /// limit_data: bytes passed so far.
    sent: u64,
    /// An end has passed (or been made) here: everything after is dropped.
    finished: bool,
}

fn draw(toxicity: f32) -> bool {
    // toxiproxy: rand.Float32() < toxicity, so 1 always acts and 0 never does
    rand::thread_rng().r#gen::<f32>() < toxicity
}

impl Stage {
    /// The toxic `entry` meeting a connection at `now`.
    pub fn new(entry: &ToxicEntry, now: Instant) -> Stage {
        let mut stage = Stage {
            id: entry.id,
            revision: entry.revision,
            kind: entry.toxic.kind.clone(),
            acts: draw(entry.toxic.toxicity),
            queue: VecDeque::new(),
            queued_bytes: 0,
            cursor: None,
            deadline: None,
            sent: 0,
            finished: false,
        };
        stage.arm(now);
        stage
    }

    /// The toxic was updated: new attributes, a new toxicity draw (as
    /// toxiproxy restarts the toxic), the timeout counted again from `now`.
    /// Queued data and a pending reset stay.
    pub fn update(&mut self, entry: &ToxicEntry, now: Instant) {
        self.revision = entry.revision;
        self.kind = entry.toxic.kind.clone();
        self.acts = draw(entry.toxic.toxicity);
        self.arm(now);
    }

    fn arm(&mut self, now: Instant) {
        if let ToxicKind::Timeout { timeout } = self.kind {
            self.deadline = (self.acts && timeout > 0 && !self.finished)
                .then(|| later(now, Duration::from_millis(timeout)));
        }
    }

    fn back_due(&self, now: Instant) -> Instant {
        self.queue.back().map_or(now, |(due, _)| (*due).max(now))
    }

    fn enqueue(&mut self, due: Instant, item: Item) {
        if matches!(item, Item::End(_)) {
            self.finished = true;
        }
        self.queued_bytes += item.len();
        self.queue.push_back((due, item));
    }

    /// Takes `item` in at `now`.
    pub fn accept(&mut self, item: Item, now: Instant) {
        if self.finished {
            return; // after an end: dropped
        }
        let fifo = self.back_due(now);
        if !self.acts {
            self.enqueue(fifo, item);
            return;
        }
        match (self.kind.clone(), item) {
            (_, Item::End(end)) if !matches!(self.kind, ToxicKind::ResetPeer { .. }) => {
                let due = match self.kind {
                    ToxicKind::SlowClose { delay } => later(fifo, Duration::from_millis(delay)),
                    _ => fifo,
                };
                self.enqueue(due, Item::End(end));
            }
            (ToxicKind::Latency { latency, jitter }, Item::Data { bytes, stamp }) => {
                let due = later(stamp, latency_sample(latency, jitter)).max(fifo);
                self.enqueue(due, Item::Data { bytes, stamp: due });
            }
            (ToxicKind::Bandwidth { rate }, Item::Data { bytes, stamp }) if rate > 0 => {
                let piece = rate.saturating_mul(BANDWIDTH_PIECE_MS);
                let piece = usize::try_from(piece).unwrap_or(usize::MAX).max(1);
                for part in bytes.chunks(piece) {
                    let cost =
                        Duration::from_nanos((part.len() as u64).saturating_mul(1_000_000) / rate);
                    let start = self.cursor.map_or(now, |c| c.max(now));
                    let due = later(start, cost);
                    self.cursor = Some(due);
                    let data = Item::Data {
                        bytes: part.to_vec(),
                        stamp,
                    };
                    self.enqueue(due.max(fifo), data);
                }
            }
            (
                ToxicKind::Slicer {
                    average_size,
                    size_variation,
                    delay,
                },
                Item::Data { bytes, stamp },
            ) => {
                let mut due = self.cursor.map_or(fifo, |c| c.max(fifo));
                for part in slice(&bytes, average_size, size_variation) {
                    let data = Item::Data {
                        bytes: part.to_vec(),
                        stamp,
                    };
                    self.enqueue(due, data);
                    due = later(due, Duration::from_micros(delay));
                }
                self.cursor = Some(due);
            }
            (ToxicKind::LimitData { bytes: limit }, Item::Data { bytes, stamp }) => {
                let remaining = limit.saturating_sub(self.sent);
                let take = usize::try_from(remaining)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                if take > 0 {
                    self.sent += take as u64;
                    let data = Item::Data {
                        bytes: bytes[..take].to_vec(),
                        stamp,
                    };
                    self.enqueue(fifo, data);
                }
                if self.sent >= limit {
                    self.enqueue(fifo, Item::End(End::Close));
                }
            }
            (ToxicKind::Timeout { .. }, Item::Data { .. }) => {} // dropped
            (ToxicKind::ResetPeer { timeout }, _) => {
                // the first item is dropped and starts the countdown; the
                // rest are dropped too
                if self.deadline.is_none() {
                    self.deadline = Some(later(now, Duration::from_millis(timeout)));
                }
            }
            (_, data) => self.enqueue(fifo, data), // bandwidth 0, slow_close data
        }
    }

    /// Makes the ends whose time has come: timeout's close, reset_peer's RST.
    pub fn fire(&mut self, now: Instant) {
        let Some(deadline) = self.deadline else {
            return;
        };
        if self.finished || deadline > now {
            return;
        }
        self.deadline = None;
        let end = match self.kind {
            ToxicKind::ResetPeer { .. } => End::Reset,
            _ => End::Close,
        };
        let due = self.back_due(now);
        self.enqueue(due, Item::End(end));
    }

    /// The next item that may leave at `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<Item> {
        if self.queue.front().is_some_and(|(due, _)| *due <= now) {
            let (_, item) = self.queue.pop_front()?;
            self.queued_bytes -= item.len();
            Some(item)
        } else {
            None
        }
    }

    /// When this stage next has something to do.
    pub fn next_wake(&self) -> Option<Instant> {
        let front = self.queue.front().map(|(due, _)| *due);
        let deadline = self.deadline.filter(|_| !self.finished);
        match (front, deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Bytes waiting here.
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// The toxic is removed: everything queued leaves at once, followed by
    /// the end its removal makes, if any: a timeout that was acting closes
    /// the connection (its stream lost data: toxiproxy's cleanup), a
    /// reset_peer that dropped data resets it now.
    pub fn drain_for_removal(mut self) -> Vec<Item> {
        let mut items: Vec<Item> = self.queue.drain(..).map(|(_, item)| item).collect();
        if !self.finished {
            match self.kind {
                ToxicKind::Timeout { .. } if self.acts => items.push(Item::End(End::Close)),
                ToxicKind::ResetPeer { .. } if self.deadline.is_some() => {
                    items.push(Item::End(End::Reset));
                }
                _ => {}
            }
        }
        items
    }
}

/// `latency` ± `jitter` ms: uniform in `[latency - jitter, latency + jitter)`,
/// at least 0 (toxiproxy's `rand.Int63n(jitter*2) - jitter`).
fn latency_sample(latency: u64, jitter: u64) -> Duration {
    if jitter == 0 {
        return Duration::from_millis(latency);
    }
    let offset = rand::thread_rng().gen_range(0..jitter.saturating_mul(2));
    Duration::from_millis(latency.saturating_add(offset).saturating_sub(jitter))
}

/// Cuts `bytes` into pieces of `average` ± `variation` bytes (at least 1);
/// a chunk no longer than `average + variation` stays whole.
fn slice(bytes: &[u8], average: u64, variation: u64) -> Vec<&[u8]> {
    let whole = usize::try_from(average.saturating_add(variation)).unwrap_or(usize::MAX);
    let mut rng = rand::thread_rng();
    let mut pieces = Vec::new();
    let mut rest = bytes;
    while rest.len() > whole.max(1) {
        let size = if variation == 0 {
            average
        } else {
            (average + rng.gen_range(0..variation.saturating_mul(2))).saturating_sub(variation)
        };
        let size = usize::try_from(size)
            .unwrap_or(usize::MAX)
            .clamp(1, rest.len());
        let (piece, tail) = rest.split_at(size);
        pieces.push(piece);
        rest = tail;
    }
    if !rest.is_empty() {
        pieces.push(rest);
    }
    pieces
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::toxic::{Stream, Toxic};

    fn entry(kind: ToxicKind, toxicity: f32) -> ToxicEntry {
        ToxicEntry {
            id: 1,
            revision: 1,
            toxic: Toxic::new(Stream::Downstream, kind).with_toxicity(toxicity),
        }
    }

    fn data(n: usize, stamp: Instant) -> Item {
        Item::Data {
            bytes: vec![7; n],
            stamp,
        }
    }

    fn drain(stage: &mut Stage, now: Instant) -> Vec<Item> {
        stage.fire(now);
        std::iter::from_fn(|| stage.pop_due(now)).collect()
    }

    #[test]
    fn slices_are_bounded_and_cover_the_chunk() {
        let bytes: Vec<u8> = (0..=255).collect();
        for (avg, var) in [(10, 0), (10, 3), (1, 0), (0, 0), (5, 9)] {
            let pieces = slice(&bytes, avg, var);
            assert_eq!(pieces.concat(), bytes);
            assert!(
                pieces
                    .iter()
                    .all(|p| !p.is_empty() && p.len() as u64 <= (avg + var).max(1))
            );
        }
        assert_eq!(slice(&bytes, 1000, 0).len(), 1);
    }

    #[test]
    fn latency_holds_each_chunk_from_its_stamp_and_keeps_order() {
        let t0 = Instant::now();
        let mut stage = Stage::new(
            &entry(
                ToxicKind::Latency {
                    latency: 100,
                    jitter: 0,
                },
                1.0,
            ),
            t0,
        );
        stage.accept(data(3, t0), t0);
        stage.accept(data(4, t0 + Duration::from_millis(10)), t0);
        assert!(drain(&mut stage, t0 + Duration::from_millis(99)).is_empty());
        assert_eq!(drain(&mut stage, t0 + Duration::from_millis(100)).len(), 1);
        assert_eq!(stage.queued_bytes(), 4);
        assert_eq!(drain(&mut stage, t0 + Duration::from_millis(110)).len(), 1);
    }

    #[test]
    fn toxicity_zero_passes_everything_at_once() {
        let t0 = Instant::now();
        let mut stage = Stage::new(&entry(ToxicKind::Timeout { timeout: 0 }, 0.0), t0);
        stage.accept(data(5, t0), t0);
        assert_eq!(drain(&mut stage, t0), vec![data(5, t0)]);
        assert!(stage.drain_for_removal().is_empty());
    }

    #[test]
    fn limit_data_truncates_then_closes() {
        let t0 = Instant::now();
        let mut stage = Stage::new(&entry(ToxicKind::LimitData { bytes: 6 }, 1.0), t0);
        stage.accept(data(4, t0), t0);
        stage.accept(data(4, t0), t0);
        stage.accept(data(4, t0), t0);
        assert_eq!(
            drain(&mut stage, t0),
            vec![data(4, t0), data(2, t0), Item::End(End::Close)]
        );
    }

    #[test]
    fn timeout_closes_at_its_deadline_and_drops_data() {
        let t0 = Instant::now();
        let mut stage = Stage::new(&entry(ToxicKind::Timeout { timeout: 50 }, 1.0), t0);
        stage.accept(data(4, t0), t0);
        assert_eq!(stage.next_wake(), Some(t0 + Duration::from_millis(50)));
        assert!(drain(&mut stage, t0 + Duration::from_millis(49)).is_empty());
        assert_eq!(
            drain(&mut stage, t0 + Duration::from_millis(50)),
            vec![Item::End(End::Close)]
        );
    }

    #[test]
    fn reset_peer_drops_the_first_item_and_resets_after_its_timeout() {
        let t0 = Instant::now();
        let mut stage = Stage::new(&entry(ToxicKind::ResetPeer { timeout: 20 }, 1.0), t0);
        assert_eq!(stage.next_wake(), None);
        stage.accept(data(4, t0), t0);
        stage.accept(data(4, t0), t0);
        assert!(drain(&mut stage, t0 + Duration::from_millis(19)).is_empty());
        assert_eq!(
            drain(&mut stage, t0 + Duration::from_millis(20)),
            vec![Item::End(End::Reset)]
        );
    }

    #[test]
    fn bandwidth_spaces_chunks_by_their_size() {
        let t0 = Instant::now();
        // 10 KB/s: 1000 bytes take 100 ms
        let mut stage = Stage::new(&entry(ToxicKind::Bandwidth { rate: 10 }, 1.0), t0);
        stage.accept(data(1000, t0), t0);
        stage.accept(data(1000, t0), t0);
        assert!(drain(&mut stage, t0 + Duration::from_millis(99)).is_empty());
        assert_eq!(drain(&mut stage, t0 + Duration::from_millis(100)).len(), 1);
        assert!(drain(&mut stage, t0 + Duration::from_millis(199)).is_empty());
        assert_eq!(drain(&mut stage, t0 + Duration::from_millis(200)).len(), 1);
    }

    #[test]
    fn slow_close_delays_only_the_end() {
        let t0 = Instant::now();
        let mut stage = Stage::new(&entry(ToxicKind::SlowClose { delay: 30 }, 1.0), t0);
        stage.accept(data(2, t0), t0);
        stage.accept(Item::End(End::Eof), t0);
        assert_eq!(drain(&mut stage, t0), vec![data(2, t0)]);
        assert_eq!(
            drain(&mut stage, t0 + Duration::from_millis(30)),
            vec![Item::End(End::Eof)]
        );
    }
}
