//! The token lock outlives the grant call under a rehearsal's scaled
//! settings: two instances sharing one coordination store spend exactly one
//! grant however slow the grant is within its own deadline. (`scaled` used to
//! shrink the lock with sale time, 45 s to 1.5 s or 450 ms, while the grant
//! kept its 30 s deadline: the second instance found the lock free and
//! granted again.)
//!
//! Tokio's clock is paused; the coordination store's TTLs read a clock on
//! tokio time, so a lock expires when the grant's sleep says it should.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use booking::Settings;
use booking::clock::Clock;
use booking::gateway::GatewayError;
use booking::settings::{REQUEST_DEADLINE, TOKEN_GRANT_DEADLINE};
use booking_bkash::tokens::POLL_INTERVAL;
use booking_bkash::{IssuedToken, TokenConfig, TokenIssuer, TokenManager};
use booking_embedded::coordination::EmbeddedCoordination;
use tokio::time::Instant;

/// The rehearsal profiles, whose `time_scale` the fleet scales settings by.
const PROFILES: [(&str, &str); 2] = [
    (
        "default",
        include_str!("../../../scenarios/profiles/default.toml"),
    ),
    ("ci", include_str!("../../../scenarios/profiles/ci.toml")),
];

/// A profile's `time_scale = <number>` line.
fn time_scale(toml: &str) -> f64 {
    toml.lines()
        .find_map(|line| {
            let value = line.strip_prefix("time_scale")?.trim_start();
            let value = value.strip_prefix('=')?;
            value.split('#').next()?.trim().parse().ok()
        })
        .expect("the profile has a time_scale")
}

/// The settings a rehearsal instance runs with (`Profile::settings`: the
/// article's, scaled).
fn rehearsal_settings(toml: &str) -> Settings {
    let scale = time_scale(toml);
    assert!(scale > 0.0 && scale < 1.0, "a rehearsal scale: {scale}");
    Settings::default().scaled(scale)
}

/// Wall time on tokio's (paused) clock.
#[derive(Debug)]
struct TokioClock {
    start: Instant,
}

impl Clock for TokioClock {
    fn now_ms(&self) -> u64 {
        1_700_000_000_000 + self.start.elapsed().as_millis() as u64
    }
}

/// An issuer whose grants take `delay` and are counted.
#[derive(Debug)]
struct SlowGrants {
    delay: Duration,
    grants: AtomicU64,
}

#[async_trait]
impl TokenIssuer for SlowGrants {
    async fn grant(&self, _within: Duration) -> Result<IssuedToken, GatewayError> {
        let n = self.grants.fetch_add(1, Ordering::SeqCst) + 1;
        tokio::time::sleep(self.delay).await;
        Ok(IssuedToken {
            id_token: format!("id{n}"),
            refresh_token: Some(format!("rt{n}")),
            expires_in: Duration::from_secs(3600),
        })
    }

    async fn refresh(&self, _rt: &str, _within: Duration) -> Result<IssuedToken, GatewayError> {
        panic!("no refresh token exists yet: nothing to refresh")
    }
}

/// Two instances of one fleet: one coordination store, one issuer.
fn two_instances(
    settings: &Settings,
    delay: Duration,
) -> (Arc<SlowGrants>, TokenManager, TokenManager) {
    let clock = Arc::new(TokioClock {
        start: Instant::now(),
    });
    let store = Arc::new(EmbeddedCoordination::new(clock.clone()));
    let issuer = Arc::new(SlowGrants {
        delay,
        grants: AtomicU64::new(0),
    });
    let config = TokenConfig::from_settings(settings);
    let manager = || {
        TokenManager::new(
            issuer.clone(),
            store.clone(),
            clock.clone(),
            config.clone(),
            "rehearsal",
        )
    };
    (issuer.clone(), manager(), manager())
}

#[tokio::test(start_paused = true)]
async fn a_slow_grant_under_rehearsal_settings_is_spent_once_across_two_instances() {
    for (name, toml) in PROFILES {
        let settings = rehearsal_settings(toml);
        settings.check().unwrap();
        // slower than the old scaled lock (1.5 s, 450 ms), well inside the
        // grant's 30 s deadline
        let delay = Duration::from_secs(6);
        let (issuer, a, b) = two_instances(&settings, delay);

        let first = tokio::spawn(async move { a.token(REQUEST_DEADLINE).await });
        // the second instance comes after the old scaled lock would have lapsed
        tokio::time::sleep(Duration::from_secs(2)).await;
        let second = b.token(REQUEST_DEADLINE).await;

        assert_eq!(first.await.unwrap().unwrap(), "id1", "{name}");
        assert_eq!(second.unwrap(), "id1", "{name}: the second instance waited");
        assert_eq!(
            issuer.grants.load(Ordering::SeqCst),
            1,
            "{name}: exactly one grant across the two instances"
        );
        assert_eq!(b.stats().grants, 0, "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_grant_using_nearly_its_whole_deadline_is_still_spent_once() {
    for (name, toml) in PROFILES {
        let settings = rehearsal_settings(toml);
        let delay = TOKEN_GRANT_DEADLINE - Duration::from_secs(1);
        let (issuer, a, b) = two_instances(&settings, delay);
        let t0 = Instant::now();

        // the first caller gives up at its request deadline; its grant goes on
        assert_eq!(
            a.token(REQUEST_DEADLINE).await,
            Err(GatewayError::TokenUnavailable),
            "{name}"
        );
        // the other instance keeps asking while the grant runs, and waits each time
        let mut asked = 0;
        while t0.elapsed() + REQUEST_DEADLINE < delay {
            asked += 1;
            assert_eq!(
                b.token(REQUEST_DEADLINE).await,
                Err(GatewayError::TokenUnavailable),
                "{name}: no token yet, and no second grant"
            );
            assert_eq!(issuer.grants.load(Ordering::SeqCst), 1, "{name}");
        }
        assert_eq!(asked, 2, "{name}: at 8 s and 16 s after the grant started");
        assert_eq!(b.token(REQUEST_DEADLINE).await.unwrap(), "id1", "{name}");
        let waited = t0.elapsed();
        assert!(
            waited >= delay && waited <= delay + POLL_INTERVAL,
            "{name}: the token came with the grant, after {waited:?}"
        );
        assert_eq!(a.token(Duration::ZERO).await.unwrap(), "id1", "{name}");
        assert_eq!(issuer.grants.load(Ordering::SeqCst), 1, "{name}");
    }
}
