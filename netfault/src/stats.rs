//! What a proxy has done: counters its connections update, and the
//! snapshot [`ProxyStats`] that [`crate::Netfault::stats`] returns.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::toxic::Stream;

/// A snapshot of a proxy's counters, since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyStats {
    /// Client connections accepted.
    pub accepted: u64,
    /// Client connections open now.
    pub open: u64,
    /// Accepted connections closed because the upstream could not be
    /// reached (refused, unresolvable, or not within the connect timeout).
    pub upstream_failed: u64,
    /// Open connections dropped because the proxy was disabled or deleted.
    /// (Connections refused *while* it is disabled never reach the process:
    /// its listener is closed, so the kernel refuses them uncounted.)
    pub dropped_on_disable: u64,
    /// Connections ended with an RST by a `reset_peer` toxic.
    pub resets_sent: u64,
    /// Bytes written to the upstream (client → server).
    pub bytes_upstream: u64,
    /// Bytes written to clients (server → client).
    pub bytes_downstream: u64,
}

/// The live counters behind [`ProxyStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    accepted: AtomicU64,
    open: AtomicU64,
    upstream_failed: AtomicU64,
    dropped_on_disable: AtomicU64,
    resets_sent: AtomicU64,
    bytes_upstream: AtomicU64,
    bytes_downstream: AtomicU64,
}

/// Counts a connection open for as long as it lives.
#[derive(Debug)]
pub(crate) struct OpenGuard<'a>(&'a Counters);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Counters {
    /// A connection was accepted; it counts as open until the guard drops.
    pub fn accepted(&self) -> OpenGuard<'_> {
        self.accepted.fetch_add(1, Ordering::Relaxed);
        self.open.fetch_add(1, Ordering::Relaxed);
        OpenGuard(self)
    }

    pub fn upstream_failed(&self) {
        self.upstream_failed.fetch_add(1, Ordering::Relaxed);
    }

    pub fn dropped_on_disable(&self, n: u64) {
        self.dropped_on_disable.fetch_add(n, Ordering::Relaxed);
    }

    pub fn reset_sent(&self) {
        self.resets_sent.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` bytes were written toward `stream`.
    pub fn wrote(&self, stream: Stream, n: usize) {
        let counter = match stream {
            Stream::Upstream => &self.bytes_upstream,
            Stream::Downstream => &self.bytes_downstream,
        };
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> ProxyStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ProxyStats {
            accepted: get(&self.accepted),
            open: get(&self.open),
            upstream_failed: get(&self.upstream_failed),
            dropped_on_disable: get(&self.dropped_on_disable),
            resets_sent: get(&self.resets_sent),
            bytes_upstream: get(&self.bytes_upstream),
            bytes_downstream: get(&self.bytes_downstream),
        }
    }
}
