//! The gateway token, shared by the whole fleet through [`Coordination`]
//! (Redis in production). The grant endpoint allows about two calls an hour per
//! app key; a fleet where every instance granted its own token would spend the
//! allowance on one restart and lock itself out of payments.
//!
//! - **Cached, refreshed early.** The token is stored at
//!   [`keys::gateway_token`] as JSON `{id_token, refresh_token, expires_at_ms,
//!   refresh_at_ms}` with a TTL ending `refresh_early` before it expires (at
//!   most half its lifetime early), so no request uses a token at the moment it
//!   expires. The refresh token is also kept on its own key with a long TTL, so
//!   the next refresher can refresh after the token's value is gone.
//! - **One refresher at a time.** An instance that finds no valid token takes
//!   [`keys::gateway_token_lock`] (SET NX, `lock_ttl`, a fresh random owner
//!   drawn from the manager's [`Entropy`]).
//!   Only the holder calls the gateway: refresh if a refresh token is known
//!   (refreshing spends no grant), grant otherwise or if the refresh is refused.
//!   Everyone else polls for the new token every `poll_interval` while their
//!   own deadline lasts, then gets [`GatewayError::TokenUnavailable`].
//! - **The grant outlives the request.** The holder's call runs in a spawned
//!   task on its own `grant_deadline`; the request that triggered it waits at
//!   most until its own deadline and then gives up waiting, not the grant: the
//!   task still stores the token.
//! - **Back off after a failure.** A failed grant or refresh keeps the lock for
//!   `grant_backoff` instead of releasing it, so the fleet does not retry in a
//!   loop. A success stores the token, then releases the lock.
//! - If the coordination store cannot be read, an instance falls back to the
//!   last token it saw, while that is still usable; it never grants without
//!   the lock.
//!
//! Deadlines and polling use tokio time; token lifetimes use the injected
//! [`Clock`], the same one the coordination store's TTLs read.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use booking::clock::Clock;
use booking::coordination::{Coordination, keys};
use booking::gateway::GatewayError;
use booking::settings::{
    TOKEN_GRANT_BACKOFF, TOKEN_GRANT_DEADLINE, TOKEN_LOCK, TOKEN_REFRESH_EARLY,
};
use booking::{Entropy, OsEntropy, Settings};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::wire::IssuedToken;

/// How often a waiting instance looks for the new token.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How long a refresh token is kept for the next refresher: bKash documents
/// 28 days. A refresh token the gateway no longer accepts is dropped and a
/// grant follows.
pub const REFRESH_TOKEN_TTL: Duration = Duration::from_secs(28 * 24 * 3600);

/// Where tokens come from: the gateway's grant and refresh calls.
#[async_trait]
pub trait TokenIssuer: Send + Sync + std::fmt::Debug {
    /// A new token pair; spends one of the app key's grants.
    async fn grant(&self, within: Duration) -> Result<IssuedToken, GatewayError>;
    /// A new id_token for a refresh token; spends no grant.
    async fn refresh(
        &self,
        refresh_token: &str,
        within: Duration,
    ) -> Result<IssuedToken, GatewayError>;
}

/// The token manager's timings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenConfig {
    /// TTL of the refresh lock (the article's 45 s).
    pub lock_ttl: Duration,
    /// The grant call's own deadline (30 s), independent of any request.
    pub grant_deadline: Duration,
    /// How long a failed grant keeps the lock (60 s).
    pub grant_backoff: Duration,
    /// How long before expiry the token stops being used (5 min).
    pub refresh_early: Duration,
    /// How often a waiting instance looks for the new token.
    pub poll_interval: Duration,
    /// How long the refresh token is kept.
    pub refresh_token_ttl: Duration,
    /// The bug zoo's `token_grant_per_instance`: the instance keeps its token
    /// under keys of its own, so every instance grants (off in production).
    pub per_instance: bool,
}

impl Default for TokenConfig {
    fn default() -> TokenConfig {
        TokenConfig {
            lock_ttl: TOKEN_LOCK,
            grant_deadline: TOKEN_GRANT_DEADLINE,
            grant_backoff: TOKEN_GRANT_BACKOFF,
            refresh_early: TOKEN_REFRESH_EARLY,
            poll_interval: POLL_INTERVAL,
            refresh_token_ttl: REFRESH_TOKEN_TTL,
            per_instance: false,
        }
    }
}

impl TokenConfig {
    /// The timings of an instance with `settings`.
    pub fn from_settings(settings: &Settings) -> TokenConfig {
        TokenConfig {
            lock_ttl: settings.token_lock,
            grant_deadline: settings.token_grant_deadline,
            grant_backoff: settings.token_grant_backoff,
            refresh_early: settings.token_refresh_early,
            per_instance: settings.bugs.on(booking::Bug::TokenGrantPerInstance),
            ..TokenConfig::default()
        }
    }
}

/// The shared token as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedToken {
    /// The bearer token.
    pub id_token: String,
    /// The refresh token, if known.
    #[serde(default)]
    pub refresh_token: Option<String>,
    /// When `id_token` expires, ms since the epoch.
    pub expires_at_ms: u64,
    /// From when it is no longer used, ms since the epoch (the stored value's
    /// TTL ends here too).
    #[serde(default)]
    pub refresh_at_ms: u64,
}

impl CachedToken {
    /// A token issued at `now_ms`, used until `refresh_early` before it
    /// expires (at most half its lifetime early, so a short-lived token is
    /// still cached).
    pub fn issued(issued: IssuedToken, now_ms: u64, refresh_early: Duration) -> CachedToken {
        let life = u64::try_from(issued.expires_in.as_millis()).unwrap_or(u64::MAX);
        let early = u64::try_from(refresh_early.as_millis())
            .unwrap_or(u64::MAX)
            .min(life / 2);
        let expires_at_ms = now_ms.saturating_add(life);
        CachedToken {
            id_token: issued.id_token,
            refresh_token: issued.refresh_token,
            expires_at_ms,
            refresh_at_ms: expires_at_ms - early,
        }
    }

    /// Whether the token may be used at `now_ms`.
    pub fn usable(&self, now_ms: u64) -> bool {
        now_ms < self.refresh_at_ms && now_ms < self.expires_at_ms
    }

    /// How long the stored value lives from `now_ms`.
    pub fn cache_ttl(&self, now_ms: u64) -> Duration {
        Duration::from_millis(self.refresh_at_ms.saturating_sub(now_ms))
    }
}

/// What one instance's token manager did (calls to the gateway it made).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TokenStats {
    /// Grant calls.
    pub grants: u64,
    /// Refresh calls.
    pub refreshes: u64,
    /// Refresher runs that failed (and backed off).
    pub failures: u64,
}

#[derive(Debug, Default)]
struct Counters {
    grants: AtomicU64,
    refreshes: AtomicU64,
    failures: AtomicU64,
}

#[derive(Debug)]
struct Inner {
    issuer: Arc<dyn TokenIssuer>,
    coordination: Arc<dyn Coordination>,
    clock: Arc<dyn Clock>,
    config: TokenConfig,
    token_key: String,
    lock_key: String,
    refresh_key: String,
    instance: String,
    entropy: Arc<dyn Entropy>,
    attempts: AtomicU64,
    /// The last token this instance stored or read.
    local: Mutex<Option<CachedToken>>,
    /// Wakes this instance's waiters when its own refresher ends.
    done: Notify,
    counters: Counters,
}

/// One instance's handle on the fleet's shared gateway token. Cheap to clone.
#[derive(Debug, Clone)]
pub struct TokenManager {
    inner: Arc<Inner>,
}

impl TokenManager {
    /// A manager that gets tokens from `issuer`, shares them through
    /// `coordination` under `prefix`, and reads token lifetimes from `clock`;
    /// its instance id and lock owner tokens come from the operating system's
    /// randomness.
    pub fn new(
        issuer: Arc<dyn TokenIssuer>,
        coordination: Arc<dyn Coordination>,
        clock: Arc<dyn Clock>,
        config: TokenConfig,
        prefix: &str,
    ) -> TokenManager {
        TokenManager::with_entropy(
            issuer,
            coordination,
            clock,
            config,
            prefix,
            Arc::new(OsEntropy),
        )
    }

    /// [`TokenManager::new`] drawing its instance id and lock owner tokens
    /// from `entropy`: a seeded one makes a simulator's run the same from
    /// the same seed.
    pub fn with_entropy(
        issuer: Arc<dyn TokenIssuer>,
        coordination: Arc<dyn Coordination>,
        clock: Arc<dyn Clock>,
        config: TokenConfig,
        prefix: &str,
        entropy: Arc<dyn Entropy>,
    ) -> TokenManager {
        let instance = format!("{:016x}", entropy.next_u128() as u64);
        // the zoo's bug: keys of its own, so nothing is shared
        let own = |key: String| {
            if config.per_instance {
                format!("{key}:{instance}")
            } else {
                key
            }
        };
        let (token_key, refresh_key, lock_key) = (
            own(keys::gateway_token(prefix)),
            own(refresh_token_key(prefix)),
            own(keys::gateway_token_lock(prefix)),
        );
        TokenManager {
            inner: Arc::new(Inner {
                issuer,
                coordination,
                clock,
                config,
                refresh_key,
                lock_key,
                token_key,
                instance,
                entropy,
                attempts: AtomicU64::new(0),
                local: Mutex::new(None),
                done: Notify::new(),
                counters: Counters::default(),
            }),
        }
    }

    /// A usable token within `within`.
    pub async fn token(&self, within: Duration) -> Result<String, GatewayError> {
        self.token_until(Instant::now() + within).await
    }

    /// A usable token before `deadline`: the cached one, or the one the
    /// fleet's single refresher gets. [`GatewayError::TokenUnavailable`] if
    /// none appears in time; a refresh this call started goes on regardless.
    pub async fn token_until(&self, deadline: Instant) -> Result<String, GatewayError> {
        let inner = &self.inner;
        loop {
            let notified = inner.done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(t) = inner.read().await {
                return Ok(t.id_token);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(GatewayError::TokenUnavailable);
            }
            if let Some(result) = self.try_refresh(deadline).await {
                return result;
            }
            let wake = (now + inner.config.poll_interval).min(deadline);
            tokio::select! {
                () = tokio::time::sleep_until(wake) => {}
                () = &mut notified => {}
            }
        }
    }

    /// Becomes the refresher if the lock is free: `None` if someone else holds
    /// it, else the outcome as far as this caller's deadline lets it see.
    async fn try_refresh(&self, deadline: Instant) -> Option<Result<String, GatewayError>> {
        let inner = &self.inner;
        let owner = inner.next_owner();
        match inner
            .coordination
            .try_lock(&inner.lock_key, &owner, inner.config.lock_ttl)
            .await
        {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                tracing::debug!(error = %e, "token lock unavailable");
                return None;
            }
        }
        // a refresher may have stored a token and unlocked since our read
        if let Some(t) = inner.read().await {
            let _ = inner.coordination.unlock(&inner.lock_key, &owner).await;
            return Some(Ok(t.id_token));
        }
        let task = tokio::spawn(refresh_or_grant(inner.clone(), owner));
        Some(match tokio::time::timeout_at(deadline, task).await {
            Ok(Ok(Ok(t))) => Ok(t.id_token),
            Ok(Ok(Err(_)) | Err(_)) => Err(GatewayError::TokenUnavailable),
            // our deadline passed: the refresher goes on without us
            Err(_) => Err(GatewayError::TokenUnavailable),
        })
    }

    /// Drops the shared token if it is still `id_token` (the gateway refused
    /// it), so the next caller refreshes.
    pub async fn invalidate(&self, id_token: &str) {
        let inner = &self.inner;
        {
            let mut local = inner.local.lock();
            if local.as_ref().is_some_and(|t| t.id_token == id_token) {
                *local = None;
            }
        }
        if let Ok(Some(raw)) = inner.coordination.get(&inner.token_key).await {
            let same = serde_json::from_str::<CachedToken>(&raw)
                .map(|t| t.id_token == id_token)
                .unwrap_or(true);
            if same {
                tracing::warn!("gateway refused the shared token; dropping it");
                let _ = inner.coordination.delete(&inner.token_key).await;
            }
        }
    }

    /// The gateway calls this instance made.
    pub fn stats(&self) -> TokenStats {
        let c = &self.inner.counters;
        TokenStats {
            grants: c.grants.load(Ordering::Relaxed),
            refreshes: c.refreshes.load(Ordering::Relaxed),
            failures: c.failures.load(Ordering::Relaxed),
        }
    }

    /// The key the shared token is stored at.
    pub fn token_key(&self) -> &str {
        &self.inner.token_key
    }
}

/// The key the refresh token is kept at, beside the token.
pub fn refresh_token_key(prefix: &str) -> String {
    format!("{}:refresh", keys::gateway_token(prefix))
}

impl Inner {
    fn next_owner(&self) -> String {
        let n = self.attempts.fetch_add(1, Ordering::Relaxed);
        format!(
            "{}-{n}-{:08x}",
            self.instance,
            self.entropy.next_u128() as u32
        )
    }

    /// The shared token if usable; the local copy only if the store cannot
    /// be read.
    async fn read(&self) -> Option<CachedToken> {
        let now = self.clock.now_ms();
        match self.coordination.get(&self.token_key).await {
            Ok(Some(raw)) => match serde_json::from_str::<CachedToken>(&raw) {
                Ok(t) if t.usable(now) => {
                    let mut local = self.local.lock();
                    if local.as_ref() != Some(&t) {
                        *local = Some(t.clone());
                    }
                    Some(t)
                }
                Ok(_) => None,
                Err(e) => {
                    tracing::warn!(error = %e, "unreadable shared token");
                    None
                }
            },
            Ok(None) => None,
            Err(e) => {
                tracing::debug!(error = %e, "token store unavailable; using the local copy");
                self.local.lock().clone().filter(|t| t.usable(now))
            }
        }
    }

    /// The refresh token to use, if any is known.
    async fn known_refresh_token(&self) -> Option<String> {
        if let Ok(Some(rt)) = self.coordination.get(&self.refresh_key).await {
            return Some(rt);
        }
        self.local
            .lock()
            .as_ref()
            .and_then(|t| t.refresh_token.clone())
    }

    fn forget_refresh_token(&self) {
        let mut local = self.local.lock();
        if let Some(t) = local.as_mut() {
            t.refresh_token = None;
        }
    }

    /// Refresh if a refresh token is known and accepted; grant otherwise.
    async fn obtain(&self, deadline: Instant) -> Result<IssuedToken, GatewayError> {
        if let Some(rt) = self.known_refresh_token().await {
            self.counters.refreshes.fetch_add(1, Ordering::Relaxed);
            let left = deadline.saturating_duration_since(Instant::now());
            match self.issuer.refresh(&rt, left).await {
                Ok(mut t) => {
                    t.refresh_token.get_or_insert(rt);
                    tracing::info!("gateway token refreshed");
                    return Ok(t);
                }
                Err(e @ GatewayError::Refused { .. }) => {
                    tracing::warn!(error = %e, "refresh token refused; granting");
                    self.forget_refresh_token();
                    let _ = self.coordination.delete(&self.refresh_key).await;
                }
                Err(e) => return Err(e),
            }
        }
        self.counters.grants.fetch_add(1, Ordering::Relaxed);
        let left = deadline.saturating_duration_since(Instant::now());
        let t = self.issuer.grant(left).await?;
        tracing::info!("gateway token granted");
        Ok(t)
    }

    /// Stores a new token for the fleet (and locally).
    async fn store(&self, t: &CachedToken) {
        let now = self.clock.now_ms();
        match serde_json::to_string(t) {
            Ok(json) => {
                let stored = self
                    .coordination
                    .set(&self.token_key, &json, Some(t.cache_ttl(now)))
                    .await;
                if let Err(e) = stored {
                    tracing::warn!(error = %e, "could not share the new gateway token");
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not encode the gateway token"),
        }
        if let Some(rt) = &t.refresh_token {
            let ttl = Some(self.config.refresh_token_ttl);
            if let Err(e) = self.coordination.set(&self.refresh_key, rt, ttl).await {
                tracing::warn!(error = %e, "could not share the refresh token");
            }
        }
        *self.local.lock() = Some(t.clone());
    }
}

/// The refresher: runs on its own deadline, whoever waits for it. Stores the
/// token and unlocks, or keeps the lock for the back-off.
async fn refresh_or_grant(inner: Arc<Inner>, owner: String) -> Result<CachedToken, GatewayError> {
    let deadline = Instant::now() + inner.config.grant_deadline;
    let result = tokio::time::timeout_at(deadline, inner.obtain(deadline))
        .await
        .unwrap_or(Err(GatewayError::Timeout));
    let outcome = match result {
        Ok(issued) => {
            let t = CachedToken::issued(issued, inner.clock.now_ms(), inner.config.refresh_early);
            inner.store(&t).await;
            if let Err(e) = inner.coordination.unlock(&inner.lock_key, &owner).await {
                tracing::warn!(error = %e, "could not release the token lock");
            }
            Ok(t)
        }
        Err(e) => {
            inner.counters.failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, backoff = ?inner.config.grant_backoff, "gateway token refresh failed; holding the lock");
            let held = inner
                .coordination
                .extend_lock(&inner.lock_key, &owner, inner.config.grant_backoff)
                .await;
            if !matches!(held, Ok(true)) {
                tracing::warn!(?held, "could not hold the token lock for the back-off");
            }
            Err(e)
        }
    };
    inner.done.notify_waiters();
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use booking::clock::ManualClock;
    use booking_embedded::coordination::EmbeddedCoordination;

    const T0: u64 = 1_700_000_000_000;
    const HOUR: Duration = Duration::from_secs(3600);

    /// An issuer that counts calls, takes `delay` (tokio time) and answers
    /// from a list of outcomes (then succeeds).
    #[derive(Debug, Default)]
    struct Fake {
        delay: Duration,
        grants: AtomicU64,
        refreshes: AtomicU64,
        fail_grants: Mutex<Vec<GatewayError>>,
        refuse_refresh: bool,
    }

    #[async_trait]
    impl TokenIssuer for Fake {
        async fn grant(&self, _within: Duration) -> Result<IssuedToken, GatewayError> {
            let n = self.grants.fetch_add(1, Ordering::SeqCst) + 1;
            tokio::time::sleep(self.delay).await;
            if let Some(e) = self.fail_grants.lock().pop() {
                return Err(e);
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
            if self.refuse_refresh {
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

    struct Fleet {
        issuer: Arc<Fake>,
        store: Arc<EmbeddedCoordination>,
        clock: ManualClock,
    }

    impl Fleet {
        fn new(fake: Fake) -> Fleet {
            let clock = ManualClock::new(T0);
            Fleet {
                issuer: Arc::new(fake),
                store: Arc::new(EmbeddedCoordination::new(Arc::new(clock.clone()))),
                clock,
            }
        }

        fn instance(&self) -> TokenManager {
            TokenManager::new(
                self.issuer.clone(),
                self.store.clone(),
                Arc::new(self.clock.clone()),
                TokenConfig::default(),
                "t",
            )
        }

        fn grants(&self) -> u64 {
            self.issuer.grants.load(Ordering::SeqCst)
        }
    }

    #[test]
    fn a_token_is_used_until_a_few_minutes_before_it_expires() {
        let issued = |secs| IssuedToken {
            id_token: "a".into(),
            refresh_token: None,
            expires_in: Duration::from_secs(secs),
        };
        let t = CachedToken::issued(issued(3600), T0, TOKEN_REFRESH_EARLY);
        assert_eq!(t.expires_at_ms, T0 + 3_600_000);
        assert_eq!(t.refresh_at_ms, T0 + 3_300_000);
        assert!(t.usable(T0 + 3_299_999));
        assert!(!t.usable(T0 + 3_300_000));
        assert_eq!(t.cache_ttl(T0), Duration::from_secs(3300));
        // a token shorter-lived than twice the early window is used for half its life
        let short = CachedToken::issued(issued(60), T0, TOKEN_REFRESH_EARLY);
        assert_eq!(short.refresh_at_ms, T0 + 30_000);
        // an old stored value without refresh_at_ms is never used
        let old: CachedToken =
            serde_json::from_str(r#"{"id_token":"a","expires_at_ms":99999999999999}"#).unwrap();
        assert!(!old.usable(T0));
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_callers_of_many_instances_share_one_grant() {
        let fleet = Fleet::new(Fake {
            delay: Duration::from_millis(300),
            ..Fake::default()
        });
        let mut tasks = Vec::new();
        for _ in 0..10 {
            let m = fleet.instance();
            for _ in 0..3 {
                let m = m.clone();
                tasks.push(tokio::spawn(async move {
                    m.token(Duration::from_secs(8)).await
                }));
            }
        }
        for t in tasks {
            assert_eq!(t.await.unwrap().unwrap(), "id1");
        }
        assert_eq!(fleet.grants(), 1);
        // the lock was released after the grant
        assert_eq!(
            fleet.store.get("t:{gateway}:token-lock").await.unwrap(),
            None
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_zoo_switch_makes_every_instance_grant_its_own() {
        let fleet = Fleet::new(Fake::default());
        let settings = Settings {
            bugs: booking::Bugs::of([booking::Bug::TokenGrantPerInstance]),
            ..Settings::default()
        };
        let config = TokenConfig::from_settings(&settings);
        assert!(config.per_instance);
        assert!(!TokenConfig::from_settings(&Settings::default()).per_instance);
        for _ in 0..3 {
            let m = TokenManager::new(
                fleet.issuer.clone(),
                fleet.store.clone(),
                Arc::new(fleet.clock.clone()),
                config.clone(),
                "t",
            );
            m.token(Duration::from_secs(8)).await.unwrap();
            m.token(Duration::from_secs(8)).await.unwrap();
        }
        // one grant per instance, none shared
        assert_eq!(fleet.grants(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_seeded_entropy_names_the_instance_and_its_lock_owners() {
        let fleet = Fleet::new(Fake::default());
        let config = TokenConfig {
            per_instance: true,
            ..TokenConfig::default()
        };
        let seeded = |seed| {
            TokenManager::with_entropy(
                fleet.issuer.clone(),
                fleet.store.clone(),
                Arc::new(fleet.clock.clone()),
                config.clone(),
                "t",
                Arc::new(booking::SeededEntropy::new(seed)),
            )
        };
        let (a, b, c) = (seeded(7), seeded(7), seeded(8));
        // the zoo's per-instance keys carry the instance id: the same seed
        // names the same instance, another seed another one
        assert_eq!(a.token_key(), b.token_key());
        assert_ne!(a.token_key(), c.token_key());
        // so do its lock owners (instance, attempt, random part)
        assert_eq!(a.inner.next_owner(), b.inner.next_owner());
        assert_ne!(a.inner.next_owner(), c.inner.next_owner());
        a.token(Duration::from_secs(1)).await.unwrap();
        assert_eq!(fleet.grants(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_that_gives_up_does_not_cancel_the_grant() {
        let fleet = Fleet::new(Fake {
            delay: Duration::from_secs(2),
            ..Fake::default()
        });
        let a = fleet.instance();
        let started = Instant::now();
        assert_eq!(
            a.token(Duration::from_millis(300)).await,
            Err(GatewayError::TokenUnavailable)
        );
        assert_eq!(started.elapsed(), Duration::from_millis(300));
        tokio::time::sleep(Duration::from_secs(2)).await;
        let b = fleet.instance();
        assert_eq!(b.token(Duration::ZERO).await.unwrap(), "id1");
        assert_eq!(fleet.grants(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_grant_past_its_own_deadline_fails_and_backs_off() {
        let fleet = Fleet::new(Fake {
            delay: Duration::from_secs(40),
            ..Fake::default()
        });
        let a = fleet.instance();
        assert_eq!(
            a.token(Duration::from_secs(35)).await,
            Err(GatewayError::TokenUnavailable)
        );
        assert_eq!(a.stats().failures, 1, "the refresher gave up at 30 s");
        assert_eq!(
            fleet.store.ttl("t:{gateway}:token-lock"),
            Some(Some(TOKEN_GRANT_BACKOFF))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_grant_keeps_the_lock_for_the_back_off() {
        let fleet = Fleet::new(Fake {
            fail_grants: Mutex::new(vec![GatewayError::Timeout]),
            ..Fake::default()
        });
        let a = fleet.instance();
        let b = fleet.instance();
        let within = Duration::from_millis(200);
        assert_eq!(a.token(within).await, Err(GatewayError::TokenUnavailable));
        assert_eq!(b.token(within).await, Err(GatewayError::TokenUnavailable));
        fleet
            .clock
            .advance(TOKEN_GRANT_BACKOFF - Duration::from_millis(1));
        assert_eq!(a.token(within).await, Err(GatewayError::TokenUnavailable));
        assert_eq!(fleet.grants(), 1, "no retry within the back-off");
        fleet.clock.advance_ms(1);
        assert_eq!(b.token(within).await.unwrap(), "id2");
        assert_eq!(fleet.grants(), 2);
        assert_eq!(a.token(within).await.unwrap(), "id2");
    }

    #[tokio::test(start_paused = true)]
    async fn an_expiring_token_is_refreshed_not_granted() {
        let fleet = Fleet::new(Fake::default());
        let a = fleet.instance();
        assert_eq!(a.token(Duration::from_secs(1)).await.unwrap(), "id1");
        fleet.clock.advance(HOUR - TOKEN_REFRESH_EARLY);
        // another instance, which never saw the token, refreshes it
        let b = fleet.instance();
        assert_eq!(b.token(Duration::from_secs(1)).await.unwrap(), "rt1-r1");
        assert_eq!(a.token(Duration::from_secs(1)).await.unwrap(), "rt1-r1");
        assert_eq!(fleet.grants(), 1);
        assert_eq!(b.stats().refreshes, 1);
        // the refresh answer had no refresh token: the old one is kept
        fleet.clock.advance(HOUR);
        assert_eq!(a.token(Duration::from_secs(1)).await.unwrap(), "rt1-r2");
        assert_eq!(fleet.grants(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_refresh_falls_back_to_a_grant() {
        let fleet = Fleet::new(Fake {
            refuse_refresh: true,
            ..Fake::default()
        });
        let a = fleet.instance();
        assert_eq!(a.token(Duration::from_secs(1)).await.unwrap(), "id1");
        fleet.clock.advance(HOUR);
        assert_eq!(a.token(Duration::from_secs(1)).await.unwrap(), "id2");
        assert_eq!(
            a.stats(),
            TokenStats {
                grants: 2,
                refreshes: 1,
                failures: 0
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_invalidated_token_is_replaced_by_a_refresh() {
        let fleet = Fleet::new(Fake::default());
        let a = fleet.instance();
        let first = a.token(Duration::from_secs(1)).await.unwrap();
        a.invalidate("someone-else").await;
        assert_eq!(
            a.token(Duration::ZERO).await.unwrap(),
            first,
            "not ours to drop"
        );
        a.invalidate(&first).await;
        assert_eq!(a.token(Duration::from_secs(1)).await.unwrap(), "rt1-r1");
        assert_eq!(fleet.grants(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_budget_caller_takes_no_lock() {
        let fleet = Fleet::new(Fake::default());
        let a = fleet.instance();
        assert_eq!(
            a.token(Duration::ZERO).await,
            Err(GatewayError::TokenUnavailable)
        );
        assert_eq!(fleet.grants(), 0);
        assert!(fleet.store.is_empty());
    }
}
