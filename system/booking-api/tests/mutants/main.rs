//! The tests written to kill booking-api's mutants (issue 19), one binary:
//! every mutant relinks every test binary of the package, and so does every
//! CI build.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod candidate_auth;
mod request_path;
