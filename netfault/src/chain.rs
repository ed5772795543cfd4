//! A proxy's toxics as its connections see them: one ordered list per
//! direction, published on a watch channel so that every open connection
//! applies an added, updated or removed toxic at once (as toxiproxy does).

use std::sync::Arc;

use crate::toxic::{Stream, Toxic};

/// A toxic with the identity its connections track it by.
#[derive(Debug, Clone)]
pub(crate) struct ToxicEntry {
    /// Stable for the toxic's life on its proxy.
    pub id: u64,
    /// New on every update.
    pub revision: u64,
    /// The toxic.
    pub toxic: Toxic,
}

/// The toxics of a proxy in the order they were added, split by direction.
#[derive(Debug, Default)]
pub(crate) struct Chains {
    upstream: Vec<Arc<ToxicEntry>>,
    downstream: Vec<Arc<ToxicEntry>>,
}

impl Chains {
    /// Splits `entries` (in the order they were added) by direction.
    pub fn of(entries: &[Arc<ToxicEntry>]) -> Chains {
        let pick = |stream: Stream| {
            entries
                .iter()
                .filter(|e| e.toxic.stream == stream)
                .cloned()
                .collect()
        };
        Chains {
            upstream: pick(Stream::Upstream),
            downstream: pick(Stream::Downstream),
        }
    }

    /// One direction's toxics, first added first.
    pub fn toward(&self, stream: Stream) -> &[Arc<ToxicEntry>] {
        match stream {
            Stream::Upstream => &self.upstream,
            Stream::Downstream => &self.downstream,
        }
    }
}
