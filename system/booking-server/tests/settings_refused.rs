//! `booking serve` refuses to start with settings that break a relation of
//! `Settings::check`, naming it and both values; the API's undo reserve is the
//! one that relation is checked with.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

#[test]
fn the_server_refuses_to_start_with_a_token_lock_shorter_than_the_grant() {
    let (status, stderr) = common::serve_refused("[settings]\ntoken_lock = 1500\n");
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("token_lock_outlives_grant")
            && stderr.contains("token_lock (1.5s)")
            && stderr.contains("token_grant_deadline (30s)"),
        "{stderr}"
    );
}

#[test]
fn the_undo_reserve_the_relation_checks_is_the_apis() {
    assert_eq!(
        booking_api::bookings::UNDO_RESERVE,
        booking::settings::UNDO_RESERVE
    );
}
