//! The booking system's Redis backend.
//!
//! [`RedisLedger`] is the seat ledger: the one atomic decision. Every change
//! (reset, load, open/close, admit, attach, undo, release, mark paid, extend)
//! is one Lua script that checks and acts in one step, with the semantics of
//! [`booking::Model`] exactly (a property test runs the model, the embedded
//! ledger and this one side by side).
//!
//! - [`keys`]: key names and the key prefix.
//! - `scripts` and `src/lua/*.lua`: the scripts, loaded once, run by SHA.
//! - `codec`: the compact encodings the scripts write, read back.
//! - [`ledger`]: the adapter: script calls, answers, error mapping.
//! - [`pool`]: the connection pool.
//! - [`cluster`]: Redis Cluster mode (`redis+cluster://host:port,…`): the
//!   URL and the connection the pool hands out on a cluster.
//! - [`persistence`]: whether the server keeps what it acknowledges
//!   (`appendonly`, `appendfsync`), checked before a production sale.
//!
//! # Key layout
//!
//! Every key of one sale carries the same hash tag, `{sale:<sale-id>}`, so a
//! Redis Cluster keeps a sale on one node and a script can touch all its
//! keys. The prefix separates deployments and test runs on one server.
//!
//! | key | type | content |
//! | --- | --- | --- |
//! | `<prefix>:{sale:<id>}:open` | string | `1` open, `0` or absent closed |
//! | `<prefix>:{sale:<id>}:levels` | hash | level → cap |
//! | `<prefix>:{sale:<id>}:counts` | hash | level → seats counted (pending + held + paid); `peak\|<level>` → the highest count an admission reached |
//! | `<prefix>:{sale:<id>}:eligible` | set | candidate hashes on the list |
//! | `<prefix>:{sale:<id>}:holds` | hash | candidate → `p\|<level>\|<token>\|<admitted_ms>` or `h\|<level>\|<token>\|<payment_id>\|<deadline_ms>` |
//! | `<prefix>:{sale:<id>}:paid` | hash | candidate → `<level>\|<payment_id>` |
//! | `<prefix>:{sale:<id>}:pending` | sorted set | candidates with a pending hold, scored by `admitted_ms` |
//!
//! The id types refuse `|`, `{` and `}`, so neither the encodings nor the hash
//! tag can be broken by an id.
//!
//! # Invariants
//!
//! - A level's count equals its holds plus its paid candidates, never exceeds
//!   its cap and never goes below zero; a paid candidate is in `paid` and not
//!   in `holds`, and no undo touches them.
//! - `pending` lists exactly the pending holds. Equal scores are ordered by
//!   member, so `stale_pending` is oldest first with ties by candidate, as the
//!   model. Scores are doubles: times are exact up to 2^53 ms (year 287,396).
//! - Scripts read and check before their first write (Redis does not roll a
//!   failed script back), and refuse a record they cannot read with a
//!   `CORRUPT` error, which the adapter reports as
//!   [`booking::LedgerError::Corrupt`]. An undo that would take a counter
//!   below zero (or find no counter for its hold's level) is refused with
//!   `UNDERFLOW <level>` before any write, reported as
//!   [`booking::LedgerError::CounterUnderflow`] and logged at error level,
//!   as the model does. Connection failures, timeouts and server trouble are
//!   [`booking::LedgerError::Unavailable`].

/// One Lua script of a Redis adapter, as one source: the calling crate's
/// `src/lua/prelude.lua` (key names, encodings, shared checks) then
/// `src/lua/<file>` (paths are the calling file's, `src/scripts.rs`).
/// Loaded once and run by SHA (`EVALSHA`); a server that lost it gets it
/// again on the `NOSCRIPT` answer.
#[macro_export]
macro_rules! lua_script {
    ($file:literal) => {
        ::redis::Script::new(concat!(
            include_str!("lua/prelude.lua"),
            "\n",
            include_str!(concat!("lua/", $file))
        ))
    };
}

pub mod cluster;
mod codec;
pub mod coordination;
pub mod keys;
pub mod ledger;
pub mod persistence;
pub mod pool;
mod scripts;

pub use coordination::{CoordinationConnectError, RedisCoordination};
pub use keys::KeyPrefix;
pub use ledger::{ConnectError, RedisLedger};
