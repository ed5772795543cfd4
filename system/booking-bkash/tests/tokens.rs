//! The fleet-shared gateway token against the mock gateway's grant allowance
//! (2 grants an hour, its default) over real sockets: one grant for a fleet
//! started together, a grant that outlives its callers, the back-off after a
//! failed grant, the early refresh, a token the gateway forgot.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use booking::Coordination;
use booking::clock::{ManualClock, SystemClock};
use booking::gateway::{GatewayError, PaymentGateway};
use booking::settings::{TOKEN_GRANT_BACKOFF, TOKEN_REFRESH_EARLY};
use booking_bkash::{BkashGateway, CachedToken, TokenConfig};
use booking_embedded::coordination::EmbeddedCoordination;
use common::{REQUEST, calls, grants, instance, mock, payment};
use mock_gateway::Running;

const T0: u64 = 1_700_000_000_000;
/// A caller in a hurry.
const SHORT: Duration = Duration::from_millis(300);

fn fleet(
    running: &Running,
    store: &Arc<EmbeddedCoordination>,
    clock: Arc<dyn booking::Clock>,
    n: usize,
) -> Vec<BkashGateway> {
    (0..n)
        .map(|_| {
            instance(
                running,
                store,
                clock.clone(),
                TokenConfig::default(),
                Duration::from_secs(2),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_fleet_of_twenty_started_together_spends_exactly_one_grant() {
    let running = mock("").await;
    let store = Arc::new(EmbeddedCoordination::default());
    let instances = fleet(&running, &store, Arc::new(SystemClock), 20);
    let start = Arc::new(tokio::sync::Barrier::new(instances.len()));
    let mut tasks = Vec::new();
    for (i, g) in instances.iter().cloned().enumerate() {
        let start = start.clone();
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            g.create(&payment(&format!("INV-F{i}")), REQUEST).await
        }));
    }
    for t in tasks {
        t.await
            .unwrap()
            .expect("every instance creates its payment");
    }
    assert_eq!(grants(&running), 1);
    assert_eq!(
        calls(&running, "grant"),
        1,
        "nobody even tried a second grant"
    );
    assert_eq!(
        instances
            .iter()
            .map(|g| g.tokens().stats().grants)
            .sum::<u64>(),
        1
    );
    assert_eq!(running.app.gateway.payments().len(), 20);
}

#[tokio::test]
async fn a_grant_that_outlives_its_callers_lands_and_no_second_grant_follows() {
    let running = mock(
        r#"
        [[rule]]
        op = "grant"
        action = { timeout = { complete = true, hang_ms = 2000 } }
        "#,
    )
    .await;
    let store = Arc::new(EmbeddedCoordination::default());
    let instances = fleet(&running, &store, Arc::new(SystemClock), 5);

    let started = Instant::now();
    let mut tasks = Vec::new();
    for g in &instances {
        let g = g.clone();
        tasks.push(tokio::spawn(async move { g.tokens().token(SHORT).await }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), Err(GatewayError::TokenUnavailable));
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "callers keep their own deadline"
    );

    // the grant goes on without its callers; the next caller waits for it
    let late = &instances[4];
    let created = late
        .create(&payment("INV-LATE"), Duration::from_secs(5))
        .await;
    assert!(created.is_ok(), "{created:?}");
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert_eq!(grants(&running), 1);
    assert_eq!(calls(&running, "grant"), 1);
    let stored = store.get(late.tokens().token_key()).await.unwrap();
    assert!(stored.is_some(), "the token is shared");
}

#[tokio::test]
async fn a_failed_grant_holds_the_lock_for_the_back_off() {
    let running = mock(
        r#"
        [[rule]]
        op = "grant"
        action = { fail = { code = "2003" } }
        times = 1
        "#,
    )
    .await;
    let clock = ManualClock::new(T0);
    let store = Arc::new(EmbeddedCoordination::new(Arc::new(clock.clone())));
    let instances = fleet(&running, &store, Arc::new(clock.clone()), 3);

    assert_eq!(
        instances[0].tokens().token(SHORT).await,
        Err(GatewayError::TokenUnavailable)
    );
    assert_eq!(calls(&running, "grant"), 1);
    let lock = booking::coordination::keys::gateway_token_lock(common::PREFIX);
    assert_eq!(
        store.ttl(&lock),
        Some(Some(TOKEN_GRANT_BACKOFF)),
        "held, not released"
    );

    // within the back-off nobody tries again
    clock.advance(TOKEN_GRANT_BACKOFF - Duration::from_secs(1));
    for g in &instances {
        assert_eq!(
            g.tokens().token(SHORT).await,
            Err(GatewayError::TokenUnavailable)
        );
    }
    assert_eq!(calls(&running, "grant"), 1);

    // after it, one instance grants and everyone shares the token
    clock.advance(Duration::from_secs(1));
    let first = instances[1].tokens().token(REQUEST).await.unwrap();
    for g in &instances {
        assert_eq!(g.tokens().token(SHORT).await.unwrap(), first);
    }
    assert_eq!(calls(&running, "grant"), 2);
    assert_eq!(grants(&running), 1);
    assert_eq!(store.ttl(&lock), None, "a successful grant unlocks");
}

#[tokio::test]
async fn the_token_is_refreshed_early_by_refresh_not_by_grant() {
    let running = mock("").await;
    let clock = ManualClock::new(T0);
    let store = Arc::new(EmbeddedCoordination::new(Arc::new(clock.clone())));
    let instances = fleet(&running, &store, Arc::new(clock.clone()), 2);
    let (a, b) = (&instances[0], &instances[1]);

    let first = a.tokens().token(REQUEST).await.unwrap();
    let raw = store.get(a.tokens().token_key()).await.unwrap().unwrap();
    let cached: CachedToken = serde_json::from_str(&raw).unwrap();
    assert_eq!(cached.id_token, first);
    assert!(cached.refresh_token.is_some());
    assert_eq!(
        cached.expires_at_ms,
        T0 + 3_600_000,
        "the mock's one-hour token"
    );
    let cache_for = Duration::from_secs(3600) - TOKEN_REFRESH_EARLY;
    assert_eq!(store.ttl(a.tokens().token_key()), Some(Some(cache_for)));

    // just before the early window: the same token, no gateway call
    clock.advance(cache_for - Duration::from_millis(1));
    assert_eq!(b.tokens().token(REQUEST).await.unwrap(), first);
    assert_eq!(
        (calls(&running, "grant"), calls(&running, "refresh")),
        (1, 0)
    );

    // in the early window: refreshed (by an instance that never refreshed before)
    clock.advance(Duration::from_millis(1));
    let second = b.tokens().token(REQUEST).await.unwrap();
    assert_ne!(second, first);
    assert_eq!(a.tokens().token(REQUEST).await.unwrap(), second);
    assert_eq!(
        (calls(&running, "grant"), calls(&running, "refresh")),
        (1, 1)
    );
    assert_eq!(grants(&running), 1);
    assert_eq!(b.tokens().stats().refreshes, 1);

    // the refreshed token works at the gateway
    a.create(&payment("INV-REFRESHED"), REQUEST).await.unwrap();
}

#[tokio::test]
async fn a_token_the_gateway_forgot_is_dropped_and_replaced() {
    let running = mock("").await;
    let store = Arc::new(EmbeddedCoordination::default());
    let instances = fleet(&running, &store, Arc::new(SystemClock), 2);
    let (a, b) = (&instances[0], &instances[1]);
    a.create(&payment("INV-1"), REQUEST).await.unwrap();

    // the gateway forgets every token (and grant): the shared token is refused
    running.app.gateway.reset();
    assert_eq!(
        a.create(&payment("INV-2"), REQUEST).await,
        Err(GatewayError::TokenUnavailable)
    );
    assert_eq!(
        store.get(a.tokens().token_key()).await.unwrap(),
        None,
        "dropped for the fleet"
    );

    // the next caller tries the refresh token (refused: forgotten too), then grants
    b.create(&payment("INV-3"), REQUEST).await.unwrap();
    assert_eq!(b.tokens().stats().refreshes, 1);
    assert_eq!(b.tokens().stats().grants, 1);
    assert_eq!(
        running.app.gateway.payments().len(),
        1,
        "INV-3 only, after the reset"
    );
}
