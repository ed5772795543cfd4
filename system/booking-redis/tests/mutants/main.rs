//! The tests written to kill booking-redis's mutants outside the ledger
//! (issue 19), one binary: every mutant relinks every test binary of the
//! package, and so does every CI build.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/redis_server.rs"]
mod redis_server;

mod keys_codec;
mod persistence;
mod pool;
