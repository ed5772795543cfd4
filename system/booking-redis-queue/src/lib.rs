//! The admission queue on Redis, with SQS FIFO's semantics, shared by every
//! process of a fleet: [`RedisQueue`], a [`booking::Queue`].
//!
//! - `scripts` and `src/lua/*.lua`: one Lua script per operation (send,
//!   receive, delete, change_visibility, and the reads: stats, dead letters),
//!   each the prelude (key order, the stored encoding, `settle`) plus its
//!   body; loaded once, run by SHA.
//! - `wire`: the stored encoding and the scripts' answers, read back.
//! - [`time`]: whose clock the scripts read ([`QueueTime`]).
//! - [`queue`]: the adapter: limits, script calls, long polling.
//!
//! # Semantics
//!
//! The embedded queue's (`booking_embedded::queue`), which the contract suite
//! (`booking_contract::queue`) holds both to, across processes:
//!
//! - Strict order within a message group: while a message of a group is in
//!   flight at the group's head, nothing more of that group is delivered. One
//!   receive may take several consecutive messages of a group (as SQS does);
//!   groups interleave, the group whose head was sent first going first.
//! - Deduplication by (group, deduplication ID) for the window after the
//!   first send, even if that message was already deleted; a duplicate does
//!   not extend the window.
//! - A receive hides a message for the visibility timeout and counts the
//!   receive; a receipt is valid only while its receive is in flight (a
//!   later receive, an expiry or a delete ends it), so a worker that took too
//!   long cannot delete a message another process now holds.
//! - A message received `receives_max` times whose visibility then expires
//!   (or is set to zero) moves to the dead-letter queue instead of being
//!   delivered again.
//! - `depth`, `oldest_age` (the oldest message not deleted, in flight or not)
//!   and `dead_letters` (oldest first) are exact: each is one script.
//!
//! Every script first applies the passage of time (`settle`: forget
//! deduplication IDs past the window, bring back or dead-letter the
//! messages whose visibility ran out), then acts; a script is atomic, so two
//! processes never see half an operation. The time ([`QueueTime`]) is the
//! server's when the queue is given the system clock, as SQS's is: the
//! script reads `TIME` as it runs, so a visibility timeout, a window or a
//! send time counts from when the server handled the call, whatever the
//! call waited before (a pool, a stalled or busy server: a time read by the
//! client when it issued the call would be stale by that wait, and a receive
//! issued during a stall would hide its messages until a deadline already
//! past), and every process of a fleet counts on one clock. Any other
//! [`booking::Clock`] (a test's manual clock, a simulator's virtual time) is
//! read when a call is issued and passed as `ARGV[1]`, so a test moves time
//! by hand. The configuration
//! ([`booking::queue::QueueConfig`]) is passed with every call too: every
//! process of a fleet runs with the same settings.
//!
//! # Key layout
//!
//! Every key carries the sale's hash tag (`booking_redis::keys::sale_key`),
//! so on a Redis Cluster the queue lives on one slot with the sale's ledger,
//! and every script declares all ten keys in `KEYS` (the set is fixed: no key
//! per message or per group). A `seq` is the message's number as 16
//! zero-padded digits, so lexical order is send order.
//!
//! | key | type | content |
//! | --- | --- | --- |
//! | `<prefix>:{sale:<id>}:q:ids` | hash | `seq` → last message number, `receipt` → last receive number |
//! | `<prefix>:{sale:<id>}:q:msgs` | hash | seq → `<sent_ms> <group> <message json>` |
//! | `<prefix>:{sale:<id>}:q:order` | sorted set | every message not deleted, by number (the oldest age) |
//! | `<prefix>:{sale:<id>}:q:groups` | sorted set | `<group> <seq>`, all score 0: each group in order, by `ZRANGEBYLEX` |
//! | `<prefix>:{sale:<id>}:q:ready` | sorted set | groups whose head is visible, scored by the head's number |
//! | `<prefix>:{sale:<id>}:q:vis` | sorted set | messages in flight, scored by when they are visible again (ms) |
//! | `<prefix>:{sale:<id>}:q:held` | hash | seq → receipt of the receive in flight (`<seq>-<receive number>`) |
//! | `<prefix>:{sale:<id>}:q:recv` | hash | seq → receives so far |
//! | `<prefix>:{sale:<id>}:q:dedup` | sorted set | `<group> <deduplication id>`, scored by the first send (ms) |
//! | `<prefix>:{sale:<id>}:q:dead` | list | the dead-letter queue: message JSON, oldest first |
//!
//! Group and deduplication IDs are printable ASCII without spaces
//! ([`booking::queue::Message::check`] runs before every send), so a space
//! separates fields and `<group> ` and `<group>!` bound a group's range.
//!
//! `q:dedup` holds every (group, ID) of the last window: at 2,000 sends/s
//! and the 5-minute window about 600,000 members, some tens of MB, trimmed
//! by every script. Messages are kept until deleted or dead-lettered (no
//! retention period); `q:dead` is kept until someone clears it: the ops
//! reset's `purge` (`lua/purge.lua`) deletes every key but `q:ids`, whose
//! numbers go on so no receipt still held names a later message.
//!
//! A receive pops the oldest ready group (`ZPOPMIN q:ready`), takes its
//! consecutive visible messages from the head, and leaves the group out of
//! `q:ready` while its head is in flight; a delete, an expiry or a visibility
//! change puts it back when its (new) head is visible. Every step is
//! `O(log n)` in the queue's length; `settle` handles at most 10,000 expired
//! messages per call (the rest on the next call), so no script runs long
//! after an outage.
//!
//! # Why sorted sets and not Redis Streams with consumer groups
//!
//! A consumer group gives a pending-entries list with delivery counts,
//! `XACK` and `XAUTOCLAIM` by idle time. None of what the worker relies on
//! beyond that:
//!
//! - **Per-group FIFO with one in flight**: `XREADGROUP … >` hands out the
//!   next entries whatever their message group; an entry of a group whose
//!   head is in flight would have to be read, parked outside the stream and
//!   delivered later: the same per-group order and ready set as here, plus
//!   the stream.
//! - **Deduplication**: `XADD` has none (an explicit ID only has to grow);
//!   the (group, ID) window needs its own set either way.
//! - **Visibility**: reclaiming goes by idle time on the server's clock
//!   (not the injected one), for the caller's chosen minimum, not a deadline
//!   per message that `change_visibility` can move; a message never comes
//!   back by itself, someone has to claim it.
//! - **Receipts**: `XACK` takes the entry ID from anyone, so a worker whose
//!   visibility ran out would still acknowledge a message another process
//!   now holds; the per-receive receipt needs its own map anyway.
//! - **Dead-letter queue**: none; moving after the fifth receive is a claim,
//!   a count check, an `XADD` elsewhere and an `XACK`, by hand.
//!
//! So a stream would add a structure and keep all the bookkeeping; the
//! sorted sets and hashes here are that bookkeeping alone, each operation
//! one script.
//!
//! # Long polling: polls with a back-off, woken locally
//!
//! Lua cannot block, so an empty receive waits and looks again: after
//! [`queue::POLL_FIRST`] (2 ms), doubling to [`queue::POLL_MAX`] (20 ms),
//! until its wait runs out. A send, delete or visibility change through the
//! same [`RedisQueue`] wakes that instance's polls at once (as the embedded
//! queue does), so within a process there is no lag; from another process a
//! message waits at most 20 ms plus a round trip before an idle poller sees
//! it, and under load (the worker's 500 ms bound at 2,000 sends/s) receives
//! find messages without waiting at all. An idle poller runs five looks in
//! its first 50 ms, then one every 20 ms: 50 short scripts a second.
//!
//! `examples/queue_rate.rs` measures it (release build, loopback, a shared
//! 2-core machine): about 15,000 sends/s from 32 tasks, 9,500
//! receive+delete/s from 4 worker-like receivers, and at a steady 2,000
//! sends/s through one instance received through another, a send→receive
//! lag of p50 0.8 ms, p99 11 ms, max 20 ms.
//!
//! Why not `BLPOP` on a wake list pushed by send and delete: a blocking
//! command holds a pooled connection for the whole wait, beyond the pool's
//! response timeout (`booking_redis::ledger::RESPONSE_MAX`, 1 s), so each
//! poller would need a dedicated connection; one push wakes one waiter, not
//! every process whose group may now be ready; and nothing pushes when time
//! passes (a visibility that runs out), so a timed look is needed anyway.

pub mod queue;
mod scripts;
pub mod time;
mod wire;

pub use queue::{ConnectError, RedisQueue};
pub use time::QueueTime;
