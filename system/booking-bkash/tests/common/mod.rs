//! Shared by the integration tests: a mock gateway on a free port and booking
//! "instances" talking to it through one embedded coordination store.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use booking::clock::Clock;
use booking::gateway::CreatePayment;
use booking_bkash::{
    BkashClient, BkashConfig, BkashGateway, Credentials, TokenConfig, TokenManager,
};
use booking_embedded::coordination::EmbeddedCoordination;
use mock_gateway::{Config, Running, ScriptSpec};
use serde_json::Value;

/// The key prefix every test instance uses.
pub const PREFIX: &str = "test";
/// A callback URL nobody listens on: redirects are inspected, not followed.
pub const NOWHERE: &str = "http://127.0.0.1:9/cb";
/// A request's deadline (the article's 8 s).
pub const REQUEST: Duration = Duration::from_secs(8);

/// The mock's default merchant.
pub fn credentials() -> Credentials {
    Credentials {
        username: "sellout".into(),
        password: "sellout-password".into(),
        app_key: "sellout-app-key".into(),
        app_secret: "sellout-app-secret".into(),
    }
}

/// A mock gateway with its default config (2 grants an hour) running `script`.
pub async fn mock(script: &str) -> Running {
    let spec = ScriptSpec::from_toml(script).expect("test script parses");
    mock_gateway::start_local(Config::default(), spec)
        .await
        .expect("mock gateway starts")
}

/// One booking instance: its own HTTP client and token manager, sharing `store`.
pub fn instance(
    running: &Running,
    store: &Arc<EmbeddedCoordination>,
    clock: Arc<dyn Clock>,
    tokens: TokenConfig,
    query_reserve: Duration,
) -> BkashGateway {
    let mut config = BkashConfig::new(running.url.clone(), credentials());
    config.query_reserve = query_reserve;
    let client = BkashClient::new(config).expect("client builds");
    let manager = TokenManager::new(
        Arc::new(client.clone()),
        store.clone(),
        clock,
        tokens,
        PREFIX,
    );
    BkashGateway::new(client, manager)
}

/// A payment request for `invoice`.
pub fn payment(invoice: &str) -> CreatePayment {
    CreatePayment {
        invoice: invoice.into(),
        amount: "500".into(),
        payer_reference: "01770618575".into(),
        callback_url: NOWHERE.into(),
    }
}

/// The mock's counters.
pub fn metrics(running: &Running) -> Value {
    running.app.gateway.metrics.json()
}

/// Calls of one operation the mock has seen.
pub fn calls(running: &Running, op: &str) -> u64 {
    metrics(running)["calls"][op].as_u64().unwrap_or(0)
}

/// Tokens the mock has granted.
pub fn grants(running: &Running) -> u64 {
    metrics(running)["grants"].as_u64().unwrap_or(0)
}
