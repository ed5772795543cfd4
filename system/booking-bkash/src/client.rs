//! The HTTP side: one bKash Tokenized Checkout endpoint, credentials, and how
//! transport failures map onto [`GatewayError`].
//!
//! - Every call runs under a tokio deadline; running out is
//!   [`GatewayError::Timeout`].
//! - A connection that could not be made is [`GatewayError::Unavailable`]:
//!   nothing reached the gateway.
//! - A request that was sent but whose answer was lost (reset, broken body) or
//!   that API Gateway answered 504 is [`GatewayError::Timeout`]: it may have
//!   taken effect.
//! - Other HTTP errors and unreadable bodies are [`GatewayError::Unavailable`];
//!   HTTP 401/403 mean the token was refused.
//! - An answer's body is read up to [`ANSWER_BYTES_MAX`]; a longer one is
//!   unreadable ([`GatewayError::Unavailable`], so an execute is followed by
//!   its query, as after any answer that could not be read).

use std::time::Duration;

use async_trait::async_trait;
use booking::gateway::GatewayError;
use serde_json::Value;
use tokio::time::Instant;

use crate::tokens::TokenIssuer;
use crate::wire::{self, IssuedToken};

/// API paths under the base URL.
pub mod paths {
    /// Token grant.
    pub const GRANT: &str = "/tokenized/checkout/token/grant";
    /// Token refresh.
    pub const REFRESH: &str = "/tokenized/checkout/token/refresh";
    /// Create payment.
    pub const CREATE: &str = "/tokenized/checkout/create";
    /// Execute payment.
    pub const EXECUTE: &str = "/tokenized/checkout/execute";
    /// Query payment.
    pub const STATUS: &str = "/tokenized/checkout/payment/status";
}

/// The merchant's credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Grant header `username`.
    pub username: String,
    /// Grant header `password`.
    pub password: String,
    /// `app_key` / `X-APP-Key`.
    pub app_key: String,
    /// `app_secret`.
    pub app_secret: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("app_key", &self.app_key)
            .finish_non_exhaustive()
    }
}

/// Where and how to reach the gateway.
#[derive(Debug, Clone)]
pub struct BkashConfig {
    /// The base URL, with or without the version prefix, e.g.
    /// `https://tokenized.sandbox.bka.sh/v1.2.0-beta` or `http://127.0.0.1:9090`.
    pub base_url: String,
    /// Credentials.
    pub credentials: Credentials,
    /// Of an execute call's time, this much (at most half) is kept for the one
    /// query after a timeout.
    pub query_reserve: Duration,
}

/// The largest gateway answer read: bKash's answers are JSON objects of a
/// few hundred bytes (a payment status with every field is under 2 KiB).
pub const ANSWER_BYTES_MAX: usize = 64 * 1024;

/// The default [`BkashConfig::query_reserve`]: 2 s of a request's 8 s.
pub const QUERY_RESERVE: Duration = Duration::from_secs(2);

impl BkashConfig {
    /// A config with the default query reserve.
    pub fn new(base_url: impl Into<String>, credentials: Credentials) -> BkashConfig {
        BkashConfig {
            base_url: base_url.into(),
            credentials,
            query_reserve: QUERY_RESERVE,
        }
    }
}

/// The HTTP client could not be built.
#[derive(Debug, thiserror::Error)]
#[error("bkash http client: {0}")]
pub struct BuildError(#[from] reqwest::Error);

/// A bKash endpoint with credentials. Cheap to clone (shares the connection
/// pool). Grants and refreshes tokens for [`crate::TokenManager`].
#[derive(Debug, Clone)]
pub struct BkashClient {
    http: reqwest::Client,
    base: String,
    config: BkashConfig,
}

impl BkashClient {
    /// A client for `config`.
    pub fn new(config: BkashConfig) -> Result<BkashClient, BuildError> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(256)
            .build()?;
        Ok(BkashClient {
            http,
            base: config.base_url.trim_end_matches('/').to_owned(),
            config,
        })
    }

    /// The config.
    pub fn config(&self) -> &BkashConfig {
        &self.config
    }

    /// POSTs `body` to `path` with `headers`, reading the JSON answer, all
    /// before `deadline`.
    async fn post(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: &Value,
        deadline: Instant,
    ) -> Result<Value, GatewayError> {
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .header(reqwest::header::ACCEPT, "application/json")
            .json(body);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let call = async {
            let resp = req.send().await.map_err(transport)?;
            let status = resp.status();
            if status == reqwest::StatusCode::GATEWAY_TIMEOUT {
                return Err(GatewayError::Timeout);
            }
            if status == reqwest::StatusCode::UNAUTHORIZED
                || status == reqwest::StatusCode::FORBIDDEN
            {
                return Err(GatewayError::Refused {
                    code: wire::INVALID_TOKEN.to_owned(),
                    message: format!("HTTP {}", status.as_u16()),
                });
            }
            let bytes = match crate::capped::read_capped(resp, ANSWER_BYTES_MAX).await {
                Ok(b) => b,
                Err(crate::capped::CappedError::Read(e)) => return Err(transport(e)),
                Err(e @ crate::capped::CappedError::TooLarge { .. }) => {
                    return Err(GatewayError::Unavailable(e.to_string()));
                }
            };
            if !status.is_success() {
                return Err(GatewayError::Unavailable(format!(
                    "HTTP {}",
                    status.as_u16()
                )));
            }
            serde_json::from_slice::<Value>(&bytes)
                .map_err(|e| GatewayError::Unavailable(format!("unreadable answer: {e}")))
        };
        tokio::time::timeout_at(deadline, call)
            .await
            .unwrap_or(Err(GatewayError::Timeout))
    }

    fn merchant_headers(&self) -> [(&str, &str); 2] {
        let c = &self.config.credentials;
        [("username", &c.username), ("password", &c.password)]
    }

    /// An API call with a token.
    pub(crate) async fn api(
        &self,
        path: &str,
        id_token: &str,
        body: &Value,
        deadline: Instant,
    ) -> Result<Value, GatewayError> {
        let headers = [
            ("authorization", id_token),
            ("x-app-key", self.config.credentials.app_key.as_str()),
        ];
        self.post(path, &headers, body, deadline).await
    }
}

/// A transport failure: before the request left (unavailable) or after
/// (the answer was lost: it may have taken effect).
fn transport(e: reqwest::Error) -> GatewayError {
    if e.is_connect() {
        GatewayError::Unavailable(format!("connect: {e}"))
    } else {
        tracing::debug!(error = %e, "gateway answer lost");
        GatewayError::Timeout
    }
}

#[async_trait]
impl TokenIssuer for BkashClient {
    async fn grant(&self, within: Duration) -> Result<IssuedToken, GatewayError> {
        let c = &self.config.credentials;
        let body = serde_json::json!({ "app_key": c.app_key, "app_secret": c.app_secret });
        let v = self
            .post(
                paths::GRANT,
                &self.merchant_headers(),
                &body,
                Instant::now() + within,
            )
            .await?;
        wire::parse_token(&v)
    }

    async fn refresh(
        &self,
        refresh_token: &str,
        within: Duration,
    ) -> Result<IssuedToken, GatewayError> {
        let c = &self.config.credentials;
        let body = serde_json::json!({
            "app_key": c.app_key,
            "app_secret": c.app_secret,
            "refresh_token": refresh_token,
        });
        let v = self
            .post(
                paths::REFRESH,
                &self.merchant_headers(),
                &body,
                Instant::now() + within,
            )
            .await?;
        wire::parse_token(&v)
    }
}
