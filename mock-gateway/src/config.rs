//! Gateway settings, with bKash's and SNS's real numbers as defaults.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Tokens the real gateway grants per app key in a rolling window.
pub const GRANT_LIMIT_DEFAULT: u32 = 2;
/// The rolling window the grant limit counts in: one hour.
pub const GRANT_WINDOW_SECS_DEFAULT: u64 = 3600;
/// bKash's `expires_in` for an `id_token`: one hour.
pub const ID_TOKEN_TTL_SECS_DEFAULT: u64 = 3600;
/// How long a `refresh_token` stays usable: 28 days, as bKash documents.
pub const REFRESH_TOKEN_TTL_SECS_DEFAULT: u64 = 28 * 24 * 3600;
/// How long a scripted `timeout` hangs unless the rule says otherwise: longer than
/// every caller deadline in the booking system (8 s requests, 30 s grants).
pub const HANG_MS_DEFAULT: u64 = 60_000;

/// One merchant account the gateway accepts.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Merchant {
    /// Grant header `username`.
    pub username: String,
    /// Grant header `password`.
    pub password: String,
    /// Body `app_key` and header `X-APP-Key`.
    pub app_key: String,
    /// Body `app_secret`.
    pub app_secret: String,
}

impl Default for Merchant {
    fn default() -> Merchant {
        Merchant {
            username: "sellout".into(),
            password: "sellout-password".into(),
            app_key: "sellout-app-key".into(),
            app_secret: "sellout-app-secret".into(),
        }
    }
}

/// SNS's HTTP/S delivery policy: the default is 3 retries, 20 s apart.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct DeliveryPolicy {
    /// Retries after the first attempt (SNS default 3).
    pub retries: u32,
    /// Delay before the first retry, in milliseconds (SNS default 20 s).
    pub min_delay_ms: u64,
    /// Largest delay between retries (SNS default 20 s); linear backoff in between.
    pub max_delay_ms: u64,
    /// How long one attempt may take before it counts as failed (SNS: 15 s).
    pub attempt_timeout_ms: u64,
    /// Attempts at delivering a `SubscriptionConfirmation` to an endpoint.
    pub confirm_attempts: u32,
}

impl Default for DeliveryPolicy {
    fn default() -> DeliveryPolicy {
        DeliveryPolicy {
            retries: 3,
            min_delay_ms: 20_000,
            max_delay_ms: 20_000,
            attempt_timeout_ms: 15_000,
            confirm_attempts: 10,
        }
    }
}

impl DeliveryPolicy {
    /// The delay before retry number `retry` (1-based): linear from min to max.
    pub fn delay_before_retry(&self, retry: u32) -> Duration {
        let steps = self.retries.max(1).saturating_sub(1).max(1) as u64;
        let step = (self.max_delay_ms.saturating_sub(self.min_delay_ms)) / steps;
        let ms = self.min_delay_ms + step * u64::from(retry.saturating_sub(1));
        Duration::from_millis(ms.min(self.max_delay_ms.max(self.min_delay_ms)))
    }
}

/// Everything the gateway is started with.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// The URL payers and subscribers reach the gateway at, e.g. `http://127.0.0.1:9090`.
    pub public_url: String,
    /// Merchants allowed to grant tokens.
    pub merchants: Vec<Merchant>,
    /// Grants per app key per window.
    pub grant_limit: u32,
    /// The grant window, seconds.
    pub grant_window_secs: u64,
    /// `expires_in` of an id_token, seconds.
    pub id_token_ttl_secs: u64,
    /// Lifetime of a refresh token, seconds.
    pub refresh_token_ttl_secs: u64,
    /// Seed for IDs, tokens and scripted choices: the same seed, the same run.
    pub seed: u64,
    /// Webhook subscriber endpoints (SNS HTTP subscriptions).
    pub webhook_urls: Vec<String>,
    /// The SNS topic the notifications claim to come from.
    pub topic_arn: String,
    /// SNS `SignatureVersion` used for signing: 1 (SHA1withRSA) or 2 (SHA256withRSA).
    pub signature_version: u8,
    /// Webhook retry policy.
    pub delivery: DeliveryPolicy,
    /// Default hang of a scripted `timeout`, milliseconds.
    pub hang_ms: u64,
    /// MSISDN recorded for a payer who does not give one.
    pub default_msisdn: String,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            public_url: "http://127.0.0.1:9090".into(),
            merchants: vec![Merchant::default()],
            grant_limit: GRANT_LIMIT_DEFAULT,
            grant_window_secs: GRANT_WINDOW_SECS_DEFAULT,
            id_token_ttl_secs: ID_TOKEN_TTL_SECS_DEFAULT,
            refresh_token_ttl_secs: REFRESH_TOKEN_TTL_SECS_DEFAULT,
            seed: 1,
            webhook_urls: Vec::new(),
            topic_arn: "arn:aws:sns:ap-southeast-1:000000000000:bkash-ipn".into(),
            signature_version: 1,
            delivery: DeliveryPolicy::default(),
            hang_ms: HANG_MS_DEFAULT,
            default_msisdn: "01770618575".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_delivery_policy_is_snss_three_retries_twenty_seconds_apart() {
        let p = DeliveryPolicy::default();
        assert_eq!(p.retries, 3);
        for r in 1..=3 {
            assert_eq!(p.delay_before_retry(r), Duration::from_secs(20));
        }
        let linear = DeliveryPolicy {
            retries: 3,
            min_delay_ms: 1000,
            max_delay_ms: 3000,
            ..p
        };
        assert_eq!(linear.delay_before_retry(1), Duration::from_millis(1000));
        assert_eq!(linear.delay_before_retry(2), Duration::from_millis(2000));
        assert_eq!(linear.delay_before_retry(3), Duration::from_millis(3000));
    }
}
