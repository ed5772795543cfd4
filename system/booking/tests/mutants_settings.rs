//! The article's numbers the existing tests did not pin, and the sale
//! timers a rehearsal's scale must shrink.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use booking::Settings;
use booking::settings::{DEDUPLICATION_WINDOW, TOKEN_REFRESH_EARLY};

#[test]
fn the_deduplication_window_and_the_early_refresh_are_five_minutes() {
    assert_eq!(DEDUPLICATION_WINDOW, Duration::from_secs(300));
    assert_eq!(TOKEN_REFRESH_EARLY, Duration::from_secs(300));
    let s = Settings::default();
    assert_eq!(s.deduplication_window, Duration::from_secs(300));
    assert_eq!(s.token_refresh_early, Duration::from_secs(300));
}

#[test]
fn scaling_shrinks_the_sweep_budget_the_deduplication_window_and_the_throttle() {
    let s = Settings::default().scaled(0.1);
    assert_eq!(s.sweep_budget, Duration::from_millis(4_500));
    assert_eq!(s.deduplication_window, Duration::from_secs(30));
    assert_eq!(s.status_throttle, Duration::from_millis(200));
    assert_eq!(s.sweep_window, Duration::from_secs(36));
    assert_eq!(s.hold, Duration::from_secs(60));
    // and a scale of one changes none of them
    assert_eq!(Settings::default().scaled(1.0), Settings::default());
}
