//! One direction of one connection without its sockets: the stages of its
//! toxics in order, then the bytes waiting to be written. Pure: the caller
//! reads, writes and passes `now`.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::time::Instant;

use crate::chain::ToxicEntry;
use crate::stage::{End, Item, Stage};

/// A direction's toxics and its output.
#[derive(Debug, Default)]
pub(crate) struct Pipeline {
    stages: Vec<Stage>,
    out: VecDeque<Vec<u8>>,
    /// Bytes of `out` already written from its front chunk.
    out_written: usize,
    out_bytes: usize,
    /// How the direction ends, once an end reached the output.
    end: Option<End>,
}

impl Pipeline {
    /// A direction meeting `chain` at `now`.
    pub fn new(chain: &[Arc<ToxicEntry>], now: Instant) -> Pipeline {
        Pipeline {
            stages: chain.iter().map(|e| Stage::new(e, now)).collect(),
            ..Pipeline::default()
        }
    }

    /// Takes in what the source gave (data, or its end).
    pub fn push(&mut self, item: Item, now: Instant) {
        match self.stages.first_mut() {
            Some(stage) => stage.accept(item, now),
            None => self.deliver(item),
        }
        self.pump(now);
    }

    fn deliver(&mut self, item: Item) {
        if self.end.is_some() {
            return; // after the end: dropped
        }
        match item {
            Item::Data { bytes, .. } if !bytes.is_empty() => {
                self.out_bytes += bytes.len();
                self.out.push_back(bytes);
            }
            Item::Data { .. } => {}
            Item::End(end) => self.end = Some(end),
        }
    }

    /// Moves everything whose time has come one stage on, all the way to
    /// the output.
    pub fn pump(&mut self, now: Instant) {
        for i in 0..self.stages.len() {
            self.stages[i].fire(now);
            while let Some(item) = self.stages[i].pop_due(now) {
                match self.stages.get_mut(i + 1) {
                    Some(next) => next.accept(item, now),
                    None => self.deliver(item),
                }
            }
        }
    }

    /// Follows the proxy's toxics for this direction: removed toxics let
    /// their queue go on at once (and make the end their removal makes),
    /// updated ones take their new attributes, new ones join at the end.
    pub fn reconcile(&mut self, chain: &[Arc<ToxicEntry>], now: Instant) {
        let mut kept: Vec<Stage> = Vec::with_capacity(chain.len());
        // items from removed stages, oldest first, bound for the next kept
        // stage (behind everything already in it)
        let mut carried: Vec<Item> = Vec::new();
        for mut stage in std::mem::take(&mut self.stages) {
            match chain.iter().find(|e| e.id == stage.id) {
                None => {
                    let mut items = stage.drain_for_removal();
                    items.append(&mut carried);
                    carried = items;
                }
                Some(entry) => {
                    for item in carried.drain(..) {
                        stage.accept(item, now);
                    }
                    if entry.revision != stage.revision {
                        stage.update(entry, now);
                    }
                    kept.push(stage);
                }
            }
        }
        for item in carried {
            self.deliver(item);
        }
        for entry in chain {
            if !kept.iter().any(|s| s.id == entry.id) {
                kept.push(Stage::new(entry, now));
            }
        }
        self.stages = kept;
        self.pump(now);
    }

    /// When a stage next has something to do.
    pub fn next_wake(&self) -> Option<Instant> {
        self.stages.iter().filter_map(Stage::next_wake).min()
    }

    /// Bytes held: in the stages and waiting to be written.
    pub fn buffered(&self) -> usize {
        self.stages.iter().map(Stage::queued_bytes).sum::<usize>() + self.out_bytes
            - self.out_written
    }

    /// The bytes to write next, if any.
    pub fn front(&self) -> Option<&[u8]> {
        self.out.front().map(|chunk| &chunk[self.out_written..])
    }

    /// `n` bytes of [`Pipeline::front`] were written.
    pub fn written(&mut self, n: usize) {
        self.out_written += n;
        let front_len = self.out.front().map_or(0, Vec::len);
        if front_len > 0 && self.out_written >= front_len {
            self.out_bytes -= front_len;
            self.out_written = 0;
            self.out.pop_front();
        }
    }

    /// How the direction ends, once everything before the end is written.
    pub fn finished(&self) -> Option<End> {
        self.end.filter(|_| self.out.is_empty())
    }

    /// Whether an end reached the output (reading more is pointless).
    pub fn ending(&self) -> bool {
        self.end.is_some()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::toxic::{Stream, Toxic, ToxicKind};
    use std::time::Duration;

    fn entry(id: u64, kind: ToxicKind) -> Arc<ToxicEntry> {
        Arc::new(ToxicEntry {
            id,
            revision: 1,
            toxic: Toxic::new(Stream::Downstream, kind).named(format!("t{id}")),
        })
    }

    fn data(bytes: &[u8], stamp: Instant) -> Item {
        Item::Data {
            bytes: bytes.to_vec(),
            stamp,
        }
    }

    fn take_all(p: &mut Pipeline) -> Vec<u8> {
        let mut got = Vec::new();
        while let Some(front) = p.front() {
            got.extend_from_slice(front);
            let n = front.len();
            p.written(n);
        }
        got
    }

    #[test]
    fn no_toxics_pass_data_and_end_straight_through() {
        let t0 = Instant::now();
        let mut p = Pipeline::new(&[], t0);
        p.push(data(b"ab", t0), t0);
        p.push(data(b"cd", t0), t0);
        assert_eq!(p.buffered(), 4);
        assert_eq!(take_all(&mut p), b"abcd");
        assert_eq!(p.buffered(), 0);
        p.push(Item::End(End::Eof), t0);
        assert_eq!(p.finished(), Some(End::Eof));
    }

    #[test]
    fn removing_a_toxic_releases_its_queue_at_once_in_order() {
        let t0 = Instant::now();
        let latency = entry(
            1,
            ToxicKind::Latency {
                latency: 10_000,
                jitter: 0,
            },
        );
        let slicer = entry(
            2,
            ToxicKind::Slicer {
                average_size: 1,
                size_variation: 0,
                delay: 0,
            },
        );
        let mut p = Pipeline::new(&[latency.clone(), slicer.clone()], t0);
        p.push(data(b"hello", t0), t0);
        assert_eq!(p.front(), None);
        assert_eq!(p.next_wake(), Some(t0 + Duration::from_millis(10_000)));
        p.reconcile(&[slicer], t0 + Duration::from_millis(5));
        // went on through the slicer: five pieces of one byte
        assert_eq!(p.out.len(), 5);
        assert_eq!(take_all(&mut p), b"hello");
    }

    #[test]
    fn a_removed_blackhole_closes_the_connection() {
        let t0 = Instant::now();
        let mut p = Pipeline::new(&[entry(1, ToxicKind::Timeout { timeout: 0 })], t0);
        p.push(data(b"lost", t0), t0);
        assert_eq!(p.front(), None);
        assert_eq!(p.finished(), None);
        p.reconcile(&[], t0);
        assert_eq!(p.finished(), Some(End::Close));
    }

    #[test]
    fn an_added_toxic_applies_to_what_comes_next() {
        let t0 = Instant::now();
        let mut p = Pipeline::new(&[], t0);
        p.push(data(b"a", t0), t0);
        p.reconcile(&[entry(1, ToxicKind::Timeout { timeout: 0 })], t0);
        p.push(data(b"b", t0), t0);
        assert_eq!(take_all(&mut p), b"a");
    }

    #[test]
    fn an_update_changes_attributes_in_place() {
        let t0 = Instant::now();
        let limit = entry(1, ToxicKind::LimitData { bytes: 2 });
        let mut p = Pipeline::new(std::slice::from_ref(&limit), t0);
        let mut raised = (*limit).clone();
        raised.revision = 2;
        raised.toxic.kind = ToxicKind::LimitData { bytes: 5 };
        p.reconcile(&[Arc::new(raised)], t0);
        p.push(data(b"abcdefg", t0), t0);
        assert_eq!(take_all(&mut p), b"abcde");
        assert_eq!(p.finished(), Some(End::Close));
    }
}
