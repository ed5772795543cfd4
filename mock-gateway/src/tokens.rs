//! Token grant, refresh and checks, with the per-app-key grant allowance.
//!
//! The real gateway grants about two tokens per app key per hour; a fleet that
//! grants on every restart locks itself out. The mock enforces the same limit so
//! the booking system's shared-token rules are tested against it.

use std::collections::VecDeque;

use chrono::{DateTime, Duration, Utc};
use dashmap::DashMap;
use rustc_hash::FxBuildHasher;
use serde::Serialize;

use crate::codes::Code;

/// A granted or refreshed token pair.
#[derive(Debug, Clone, Serialize)]
pub struct Issued {
    /// The bearer token for API calls.
    pub id_token: String,
    /// The token to refresh with.
    pub refresh_token: String,
    /// Seconds until `id_token` expires.
    pub expires_in: u64,
}

#[derive(Debug, Clone)]
struct Entry {
    app_key: String,
    expires_at: DateTime<Utc>,
}

/// Grants in the rolling window: prunes times older than `window` and says whether
/// one more fits under `limit`, recording it if so. Pure: the caller owns the clock.
pub fn take_grant(
    history: &mut VecDeque<DateTime<Utc>>,
    now: DateTime<Utc>,
    window: Duration,
    limit: u32,
) -> bool {
    while history.front().is_some_and(|t| *t <= now - window) {
        history.pop_front();
    }
    if history.len() >= limit as usize {
        return false;
    }
    history.push_back(now);
    true
}

/// Token state: grants per app key, live id and refresh tokens.
#[derive(Debug, Default)]
pub struct Tokens {
    grants: DashMap<String, VecDeque<DateTime<Utc>>, FxBuildHasher>,
    id_tokens: DashMap<String, Entry, FxBuildHasher>,
    refresh_tokens: DashMap<String, Entry, FxBuildHasher>,
}

/// The limits a [`Tokens`] enforces.
#[derive(Debug, Clone, Copy)]
pub struct TokenLimits {
    /// Grants per app key per window.
    pub grant_limit: u32,
    /// The rolling window.
    pub grant_window: Duration,
    /// id_token lifetime.
    pub id_ttl: Duration,
    /// refresh_token lifetime.
    pub refresh_ttl: Duration,
}

impl Tokens {
    /// Grants a new pair if the app key has allowance left.
    pub fn grant(
        &self,
        app_key: &str,
        now: DateTime<Utc>,
        limits: TokenLimits,
        fresh: impl FnMut() -> String,
    ) -> Result<Issued, Code> {
        {
            let mut history = self.grants.entry(app_key.to_owned()).or_default();
            if !take_grant(&mut history, now, limits.grant_window, limits.grant_limit) {
                return Err(Code::GrantRateLimited);
            }
        }
        Ok(self.issue(app_key, now, limits, fresh, None))
    }

    /// Issues a new id_token for a live refresh token of the same app key.
    /// Refreshing does not spend the grant allowance.
    pub fn refresh(
        &self,
        app_key: &str,
        refresh_token: &str,
        now: DateTime<Utc>,
        limits: TokenLimits,
        fresh: impl FnMut() -> String,
    ) -> Result<Issued, Code> {
        let live = self
            .refresh_tokens
            .get(refresh_token)
            .is_some_and(|e| e.app_key == app_key && e.expires_at > now);
        if !live {
            return Err(Code::InvalidToken);
        }
        Ok(self.issue(app_key, now, limits, fresh, Some(refresh_token.to_owned())))
    }

    fn issue(
        &self,
        app_key: &str,
        now: DateTime<Utc>,
        limits: TokenLimits,
        mut fresh: impl FnMut() -> String,
        keep_refresh: Option<String>,
    ) -> Issued {
        let id_token = fresh();
        self.id_tokens.insert(
            id_token.clone(),
            Entry {
                app_key: app_key.to_owned(),
                expires_at: now + limits.id_ttl,
            },
        );
        let refresh_token = match keep_refresh {
            Some(r) => r,
            None => {
                let r = fresh();
                self.refresh_tokens.insert(
                    r.clone(),
                    Entry {
                        app_key: app_key.to_owned(),
                        expires_at: now + limits.refresh_ttl,
                    },
                );
                r
            }
        };
        Issued {
            id_token,
            refresh_token,
            expires_in: limits.id_ttl.num_seconds().max(0) as u64,
        }
    }

    /// Checks an `Authorization` header value (raw token, or `Bearer <token>`)
    /// against the `X-APP-Key` it came with.
    pub fn check(
        &self,
        authorization: &str,
        app_key: &str,
        now: DateTime<Utc>,
    ) -> Result<(), Code> {
        let token = authorization.trim();
        let token = token
            .strip_prefix("Bearer ")
            .or_else(|| token.strip_prefix("bearer "))
            .unwrap_or(token)
            .trim();
        match self.id_tokens.get(token) {
            Some(e) if e.expires_at <= now => Err(Code::InvalidToken),
            Some(e) if e.app_key != app_key => Err(Code::InvalidAppKey),
            Some(_) => Ok(()),
            None => Err(Code::InvalidToken),
        }
    }

    /// Grants spent in the current window by each app key.
    pub fn grants_in_window(&self, now: DateTime<Utc>, window: Duration) -> Vec<(String, usize)> {
        self.grants
            .iter()
            .map(|e| {
                (
                    e.key().clone(),
                    e.value().iter().filter(|t| **t > now - window).count(),
                )
            })
            .collect()
    }

    /// Forgets everything.
    pub fn clear(&self) {
        self.grants.clear();
        self.id_tokens.clear();
        self.refresh_tokens.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn limits() -> TokenLimits {
        TokenLimits {
            grant_limit: 2,
            grant_window: Duration::hours(1),
            id_ttl: Duration::hours(1),
            refresh_ttl: Duration::days(28),
        }
    }

    fn counter() -> impl FnMut() -> String {
        let mut n = 0;
        move || {
            n += 1;
            format!("tok{n}")
        }
    }

    #[test]
    fn the_window_rolls() {
        let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let mut h = VecDeque::new();
        assert!(take_grant(&mut h, t0, Duration::hours(1), 2));
        assert!(take_grant(
            &mut h,
            t0 + Duration::minutes(30),
            Duration::hours(1),
            2
        ));
        assert!(!take_grant(
            &mut h,
            t0 + Duration::minutes(59),
            Duration::hours(1),
            2
        ));
        // the first grant leaves the window exactly one hour after it was made
        assert!(take_grant(
            &mut h,
            t0 + Duration::hours(1),
            Duration::hours(1),
            2
        ));
        assert!(!take_grant(
            &mut h,
            t0 + Duration::minutes(61),
            Duration::hours(1),
            2
        ));
        assert_eq!(h.len(), 2);
    }

    #[test]
    fn third_grant_in_an_hour_is_refused_per_app_key() {
        let t = Tokens::default();
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let mut f = counter();
        assert!(t.grant("a", now, limits(), &mut f).is_ok());
        assert!(t.grant("a", now, limits(), &mut f).is_ok());
        assert_eq!(
            t.grant("a", now, limits(), &mut f).unwrap_err(),
            Code::GrantRateLimited
        );
        assert!(
            t.grant("b", now, limits(), &mut f).is_ok(),
            "another app key has its own"
        );
    }

    #[test]
    fn tokens_expire_and_are_bound_to_their_app_key() {
        let t = Tokens::default();
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let issued = t.grant("a", now, limits(), counter()).unwrap();
        assert_eq!(issued.expires_in, 3600);
        assert!(t.check(&issued.id_token, "a", now).is_ok());
        assert!(
            t.check(&format!("Bearer {}", issued.id_token), "a", now)
                .is_ok()
        );
        assert_eq!(
            t.check(&issued.id_token, "b", now).unwrap_err(),
            Code::InvalidAppKey
        );
        assert_eq!(t.check("nope", "a", now).unwrap_err(), Code::InvalidToken);
        let later = now + Duration::seconds(3600);
        assert_eq!(
            t.check(&issued.id_token, "a", later).unwrap_err(),
            Code::InvalidToken
        );
        // refresh gives a new id_token, keeps the refresh token, spends no grant
        let mut f = || "fresh".to_string();
        let r = t
            .refresh("a", &issued.refresh_token, later, limits(), &mut f)
            .unwrap();
        assert_eq!(r.id_token, "fresh");
        assert_eq!(r.refresh_token, issued.refresh_token);
        assert!(t.check("fresh", "a", later).is_ok());
        assert_eq!(
            t.refresh("b", &issued.refresh_token, later, limits(), &mut f)
                .unwrap_err(),
            Code::InvalidToken
        );
        assert_eq!(
            t.refresh("a", "unknown", later, limits(), &mut f)
                .unwrap_err(),
            Code::InvalidToken
        );
    }
}
