//! `booking serve` refuses to start with settings that break a relation of
//! `Settings::check`, naming it and both values; the API's undo reserve is the
//! one that relation is checked with.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the refusal may take (a debug binary on a busy machine).
const REFUSAL_MAX: Duration = Duration::from_secs(60);

#[test]
fn the_server_refuses_to_start_with_a_token_lock_shorter_than_the_grant() {
    let path = std::env::temp_dir().join(format!(
        "booking-refused-{}-{:x}.toml",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::write(&path, "[settings]\ntoken_lock = 1500\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_booking"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&path)
        .env("RUST_LOG", "error")
        .env_remove("SELLOUT_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > REFUSAL_MAX {
            child.kill().unwrap();
            child.wait().unwrap();
            std::fs::remove_file(&path).unwrap();
            panic!("the server started with a 1.5 s token lock");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::fs::remove_file(&path).unwrap();
    let stderr = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
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
