//! The token manager as its callers, the coordination store and an operator
//! reading its logs see it, at the edges the other token tests leave alone:
//! where and for how long the refresh token is kept, the timings an
//! instance's settings give it, a stored value that is no longer usable, the
//! local copy an instance falls back to while the store is down (and drops
//! when the gateway refuses it), a refused refresh token that is not tried
//! again, and the warnings about the back-off lock.
//!
//! Tokio's clock is paused; token lifetimes and the store's TTLs read a
//! [`ManualClock`] the tests advance.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use booking::clock::ManualClock;
use booking::coordination::keys;
use booking::gateway::GatewayError;
use booking::settings::TOKEN_GRANT_BACKOFF;
use booking::{Coordination, CoordinationError, Settings};
use booking_bkash::tokens::{POLL_INTERVAL, refresh_token_key};
use booking_bkash::{CachedToken, IssuedToken, TokenConfig, TokenIssuer, TokenManager, TokenStats};
use booking_embedded::coordination::EmbeddedCoordination;
use parking_lot::Mutex;

const T0: u64 = 1_700_000_000_000;
const HOUR: Duration = Duration::from_secs(3600);
const PREFIX: &str = "t";
/// bKash's documented refresh-token life: 28 days.
const TWENTY_EIGHT_DAYS: Duration = Duration::from_secs(2_419_200);
const WITHIN: Duration = Duration::from_secs(1);

/// An issuer that counts its calls: grants answer `id<n>` with refresh token
/// `rt<n>` (or fail while `failing_grants` lasts), refreshes answer
/// `<rt>-r<n>` without a refresh token (or are refused).
#[derive(Debug, Default)]
struct Issuer {
    delay: Duration,
    grants: AtomicU64,
    refreshes: AtomicU64,
    failing_grants: AtomicU64,
    refuse_refresh: AtomicBool,
}

#[async_trait]
impl TokenIssuer for Issuer {
    async fn grant(&self, _within: Duration) -> Result<IssuedToken, GatewayError> {
        let n = self.grants.fetch_add(1, Ordering::SeqCst) + 1;
        tokio::time::sleep(self.delay).await;
        let failing = self
            .failing_grants
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |f| f.checked_sub(1))
            .is_ok();
        if failing {
            return Err(GatewayError::Timeout);
        }
        Ok(IssuedToken {
            id_token: format!("id{n}"),
            refresh_token: Some(format!("rt{n}")),
            expires_in: HOUR,
        })
    }

    async fn refresh(&self, rt: &str, _within: Duration) -> Result<IssuedToken, GatewayError> {
        let n = self.refreshes.fetch_add(1, Ordering::SeqCst) + 1;
        tokio::time::sleep(self.delay).await;
        if self.refuse_refresh.load(Ordering::SeqCst) {
            return Err(GatewayError::Refused {
                code: "2080".into(),
                message: "Invalid token".into(),
            });
        }
        Ok(IssuedToken {
            id_token: format!("{rt}-r{n}"),
            refresh_token: None,
            expires_in: HOUR,
        })
    }
}

/// One instance's view of the shared store, which can go down for it alone.
#[derive(Debug)]
struct Flaky {
    store: Arc<EmbeddedCoordination>,
    down: AtomicBool,
}

impl Flaky {
    fn check(&self) -> Result<(), CoordinationError> {
        if self.down.load(Ordering::SeqCst) {
            Err(CoordinationError::Unavailable("connection refused".into()))
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl Coordination for Flaky {
    async fn try_lock(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<bool, CoordinationError> {
        self.check()?;
        self.store.try_lock(key, owner, ttl).await
    }

    async fn unlock(&self, key: &str, owner: &str) -> Result<bool, CoordinationError> {
        self.check()?;
        self.store.unlock(key, owner).await
    }

    async fn extend_lock(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<bool, CoordinationError> {
        self.check()?;
        self.store.extend_lock(key, owner, ttl).await
    }

    async fn get(&self, key: &str) -> Result<Option<String>, CoordinationError> {
        self.check()?;
        self.store.get(key).await
    }

    async fn set(
        &self,
        key: &str,
        value: &str,
        ttl: Option<Duration>,
    ) -> Result<(), CoordinationError> {
        self.check()?;
        self.store.set(key, value, ttl).await
    }

    async fn delete(&self, key: &str) -> Result<bool, CoordinationError> {
        self.check()?;
        self.store.delete(key).await
    }

    async fn set_once(
        &self,
        key: &str,
        value: &str,
        ttl: Option<Duration>,
    ) -> Result<bool, CoordinationError> {
        self.check()?;
        self.store.set_once(key, value, ttl).await
    }
}

/// A fleet: one issuer, one store, one clock.
struct Fleet {
    issuer: Arc<Issuer>,
    store: Arc<EmbeddedCoordination>,
    clock: ManualClock,
}

impl Fleet {
    fn new(issuer: Issuer) -> Fleet {
        let clock = ManualClock::new(T0);
        Fleet {
            issuer: Arc::new(issuer),
            store: Arc::new(EmbeddedCoordination::new(Arc::new(clock.clone()))),
            clock,
        }
    }

    fn instance_with(&self, config: TokenConfig) -> TokenManager {
        TokenManager::new(
            self.issuer.clone(),
            self.store.clone(),
            Arc::new(self.clock.clone()),
            config,
            PREFIX,
        )
    }

    fn instance(&self) -> TokenManager {
        self.instance_with(TokenConfig::default())
    }

    /// An instance reaching the store through a connection that can fail.
    fn flaky_instance(&self) -> (TokenManager, Arc<Flaky>) {
        let flaky = Arc::new(Flaky {
            store: self.store.clone(),
            down: AtomicBool::new(false),
        });
        let manager = TokenManager::new(
            self.issuer.clone(),
            flaky.clone(),
            Arc::new(self.clock.clone()),
            TokenConfig::default(),
            PREFIX,
        );
        (manager, flaky)
    }

    fn grants(&self) -> u64 {
        self.issuer.grants.load(Ordering::SeqCst)
    }

    fn refreshes(&self) -> u64 {
        self.issuer.refreshes.load(Ordering::SeqCst)
    }
}

/// The warnings and other events emitted while it is the thread's default
/// subscriber, as `LEVEL message`.
#[derive(Debug, Clone, Default)]
struct Logs(Arc<Mutex<Vec<String>>>);

impl Logs {
    fn lines(&self) -> Vec<String> {
        self.0.lock().clone()
    }

    fn any(&self, needle: &str) -> bool {
        self.lines().iter().any(|l| l.contains(needle))
    }
}

impl tracing::Subscriber for Logs {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        struct Message<'a>(&'a mut String);
        impl tracing::field::Visit for Message<'_> {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    *self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = String::new();
        event.record(&mut Message(&mut message));
        self.0
            .lock()
            .push(format!("{} {message}", event.metadata().level()));
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

#[tokio::test(start_paused = true)]
async fn the_refresh_token_is_kept_beside_the_token_for_twenty_eight_days() {
    assert_eq!(refresh_token_key(PREFIX), "t:{gateway}:token:refresh");
    assert_eq!(TokenConfig::default().refresh_token_ttl, TWENTY_EIGHT_DAYS);
    assert_eq!(TokenConfig::default().poll_interval, POLL_INTERVAL);

    let fleet = Fleet::new(Issuer::default());
    let a = fleet.instance();
    assert_eq!(a.token(WITHIN).await.unwrap(), "id1");
    let key = "t:{gateway}:token:refresh";
    assert_eq!(fleet.store.get(key).await.unwrap().as_deref(), Some("rt1"));
    assert_eq!(fleet.store.ttl(key), Some(Some(TWENTY_EIGHT_DAYS)));

    // a week later the token's value is long gone, the refresh token is not
    fleet.clock.advance(7 * 24 * HOUR);
    assert_eq!(fleet.store.get(a.token_key()).await.unwrap(), None);
    assert_eq!(a.token(WITHIN).await.unwrap(), "rt1-r1");
    assert_eq!((fleet.grants(), fleet.refreshes()), (1, 1));
}

#[test]
fn the_token_timings_follow_the_instance_settings() {
    let settings = Settings {
        token_lock: Duration::from_secs(50),
        token_grant_deadline: Duration::from_secs(20),
        token_grant_backoff: Duration::from_secs(90),
        token_refresh_early: Duration::from_secs(420),
        ..Settings::default()
    };
    assert_eq!(
        TokenConfig::from_settings(&settings),
        TokenConfig {
            lock_ttl: Duration::from_secs(50),
            grant_deadline: Duration::from_secs(20),
            grant_backoff: Duration::from_secs(90),
            refresh_early: Duration::from_secs(420),
            poll_interval: POLL_INTERVAL,
            refresh_token_ttl: TWENTY_EIGHT_DAYS,
            per_instance: false,
        }
    );
}

#[tokio::test(start_paused = true)]
async fn the_settings_back_off_is_how_long_a_failed_grant_holds_the_lock() {
    let fleet = Fleet::new(Issuer {
        failing_grants: AtomicU64::new(1),
        ..Issuer::default()
    });
    let settings = Settings {
        token_grant_backoff: Duration::from_secs(90),
        ..Settings::default()
    };
    let a = fleet.instance_with(TokenConfig::from_settings(&settings));
    assert_eq!(a.token(WITHIN).await, Err(GatewayError::TokenUnavailable));
    assert_eq!(
        fleet.store.ttl(&keys::gateway_token_lock(PREFIX)),
        Some(Some(Duration::from_secs(90)))
    );
    fleet.clock.advance(TOKEN_GRANT_BACKOFF);
    assert_eq!(a.token(WITHIN).await, Err(GatewayError::TokenUnavailable));
    assert_eq!(
        fleet.grants(),
        1,
        "still backing off after the default 60 s"
    );
    fleet.clock.advance(Duration::from_secs(30));
    assert_eq!(a.token(WITHIN).await.unwrap(), "id2");
}

#[test]
fn a_token_is_never_used_past_its_expiry_whatever_its_refresh_time_says() {
    let odd = CachedToken {
        id_token: "a".into(),
        refresh_token: None,
        expires_at_ms: T0 + 1_000,
        refresh_at_ms: T0 + 2_000,
    };
    assert!(odd.usable(T0));
    assert!(odd.usable(T0 + 999));
    assert!(!odd.usable(T0 + 1_000));
    assert!(!odd.usable(T0 + 1_500));
}

#[tokio::test(start_paused = true)]
async fn a_stored_token_no_longer_usable_is_replaced_not_used() {
    let fleet = Fleet::new(Issuer::default());
    // left without a TTL by an older writer, expired by now
    let stale = CachedToken {
        id_token: "stale".into(),
        refresh_token: None,
        expires_at_ms: T0 - 1,
        refresh_at_ms: T0 - 1,
    };
    let key = keys::gateway_token(PREFIX);
    fleet
        .store
        .set(&key, &serde_json::to_string(&stale).unwrap(), None)
        .await
        .unwrap();
    let a = fleet.instance();
    assert_eq!(a.token(WITHIN).await.unwrap(), "id1");
    assert_eq!(fleet.grants(), 1);
    let stored: CachedToken =
        serde_json::from_str(&fleet.store.get(&key).await.unwrap().unwrap()).unwrap();
    assert_eq!(stored.id_token, "id1", "the stale value was overwritten");
}

#[tokio::test(start_paused = true)]
async fn an_instance_that_only_read_the_token_uses_its_copy_while_the_store_is_down() {
    let fleet = Fleet::new(Issuer::default());
    let a = fleet.instance();
    let (b, link) = fleet.flaky_instance();
    assert_eq!(a.token(WITHIN).await.unwrap(), "id1");
    assert_eq!(b.token(WITHIN).await.unwrap(), "id1");
    assert_eq!(b.stats(), TokenStats::default(), "b only read it");

    link.down.store(true, Ordering::SeqCst);
    assert_eq!(b.token(WITHIN).await.unwrap(), "id1");

    // the copy is used only while the token is: then b waits, and never
    // grants without the lock
    fleet.clock.advance(HOUR);
    assert_eq!(b.token(WITHIN).await, Err(GatewayError::TokenUnavailable));
    assert_eq!(fleet.grants(), 1);
    assert_eq!(b.stats(), TokenStats::default());
}

#[tokio::test(start_paused = true)]
async fn a_refused_token_is_dropped_from_the_local_copy_too_but_only_that_one() {
    let fleet = Fleet::new(Issuer::default());
    let a = fleet.instance();
    let (b, link) = fleet.flaky_instance();
    assert_eq!(a.token(WITHIN).await.unwrap(), "id1");
    assert_eq!(b.token(WITHIN).await.unwrap(), "id1");
    link.down.store(true, Ordering::SeqCst);

    b.invalidate("some-older-token").await;
    assert_eq!(
        b.token(WITHIN).await.unwrap(),
        "id1",
        "not the refused token: kept"
    );

    b.invalidate("id1").await;
    assert_eq!(b.token(WITHIN).await, Err(GatewayError::TokenUnavailable));
    assert_eq!(fleet.grants(), 1);
    // b could not reach the store: the fleet's token is untouched
    assert_eq!(a.token(WITHIN).await.unwrap(), "id1");
}

#[tokio::test(start_paused = true)]
async fn a_refused_refresh_token_is_not_tried_again_after_a_failed_grant() {
    let fleet = Fleet::new(Issuer {
        refuse_refresh: AtomicBool::new(true),
        ..Issuer::default()
    });
    let a = fleet.instance();
    assert_eq!(a.token(WITHIN).await.unwrap(), "id1");

    // expired: the refresh is refused, the grant that follows fails
    fleet.clock.advance(HOUR);
    fleet.issuer.failing_grants.store(1, Ordering::SeqCst);
    assert_eq!(a.token(WITHIN).await, Err(GatewayError::TokenUnavailable));
    assert_eq!(
        a.stats(),
        TokenStats {
            grants: 2,
            refreshes: 1,
            failures: 1
        }
    );
    assert_eq!(
        fleet.store.get(&refresh_token_key(PREFIX)).await.unwrap(),
        None,
        "dropped for the fleet"
    );

    // after the back-off: straight to a grant, the refused token forgotten
    fleet.clock.advance(TOKEN_GRANT_BACKOFF);
    assert_eq!(a.token(WITHIN).await.unwrap(), "id3");
    assert_eq!(fleet.refreshes(), 1);
    assert_eq!(
        a.stats(),
        TokenStats {
            grants: 3,
            refreshes: 1,
            failures: 1
        }
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_grant_that_holds_its_lock_warns_only_about_the_failure() {
    let logs = Logs::default();
    let _guard = tracing::subscriber::set_default(logs.clone());
    let fleet = Fleet::new(Issuer {
        failing_grants: AtomicU64::new(1),
        ..Issuer::default()
    });
    let a = fleet.instance();
    assert_eq!(a.token(WITHIN).await, Err(GatewayError::TokenUnavailable));
    assert!(
        logs.any("WARN gateway token refresh failed; holding the lock"),
        "{:?}",
        logs.lines()
    );
    assert!(
        !logs.any("could not hold the token lock"),
        "{:?}",
        logs.lines()
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_grant_that_outlived_its_lock_warns_that_it_could_not_back_off() {
    let logs = Logs::default();
    let _guard = tracing::subscriber::set_default(logs.clone());
    let fleet = Fleet::new(Issuer {
        failing_grants: AtomicU64::new(1),
        delay: Duration::from_secs(2),
        ..Issuer::default()
    });
    let a = fleet.instance_with(TokenConfig {
        lock_ttl: Duration::from_secs(1),
        ..TokenConfig::default()
    });
    let refresher = tokio::spawn({
        let a = a.clone();
        async move { a.token(Duration::from_secs(5)).await }
    });
    // the lock lapses on the store's clock while the grant still runs
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    fleet.clock.advance(Duration::from_secs(2));
    assert_eq!(
        refresher.await.unwrap(),
        Err(GatewayError::TokenUnavailable)
    );
    assert!(
        logs.any("WARN could not hold the token lock for the back-off"),
        "{:?}",
        logs.lines()
    );
    assert_eq!(a.stats().failures, 1);
}
