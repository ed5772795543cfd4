//! The tests written to kill booking-service's mutants (issue 19), one
//! binary: each module is one part of the service as its callers see it.
//! One binary, not one per file: every mutant relinks every test binary of
//! the package, and so does every CI build.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod admission;
mod callback;
mod confirm;
mod confirm_lost_seat;
mod expiry;
mod outbox;
mod reconciler;
mod reconciler_budget;
mod reconciler_failures;
mod service;
mod webhook;
mod worker;
