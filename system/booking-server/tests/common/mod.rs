//! Helpers several of this crate's test files share (each file is its own
//! crate and uses what it needs). The in-process server harness itself is
//! the library's `booking_server::Spawned`.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use booking::settings::Settings;

/// How long a refusal by the debug binary may take (a busy machine).
pub const REFUSAL_MAX: Duration = Duration::from_secs(60);

/// Sale settings fast enough for a test: sweeps every 200 ms, a 1 s
/// visibility timeout, a 100 ms status throttle, with bookings held for
/// `hold`.
pub fn fast_settings(hold: Duration) -> Settings {
    Settings {
        hold,
        sweep_interval: Duration::from_millis(200),
        sweep_window: Duration::from_millis(1_200),
        sweep_budget: Duration::from_secs(1),
        visibility_timeout: Duration::from_secs(1),
        status_throttle: Duration::from_millis(100),
        booking_copy_slack: Duration::from_secs(2),
        // outlives a whole request (Relation::PendingStaleOutlivesRequest)
        pending_stale_after: booking::settings::REQUEST_DEADLINE
            + booking::settings::CLOCK_SKEW_MAX,
        ..Settings::default()
    }
}

/// The sum of every sample of `metric` (a name with its opening brace, or a
/// full series) in OpenMetrics text.
pub fn sum_of(text: &str, metric: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(metric))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// `booking serve` with `config` (the text of its config file, nothing from
/// the environment): its exit status and stderr, once it has exited (killed
/// and failed if it is still up after [`REFUSAL_MAX`]).
pub fn serve_refused(config: &str) -> (ExitStatus, String) {
    let path = std::env::temp_dir().join(format!(
        "booking-refused-{}-{:x}.toml",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::write(&path, config).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_booking"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&path)
        .env("RUST_LOG", "error")
        .env_remove("SELLOUT_CONFIG")
        .env_remove("SELLOUT_ADMIN_TOKEN")
        .env_remove("SELLOUT_ADMIN_TOKEN_FILE")
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
            panic!("the server started with {config:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::fs::remove_file(&path).unwrap();
    let stderr = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
    (status, stderr)
}

/// The mock gateway on loopback, as `config` says but with its webhook
/// subscription going to `public`'s `/payment/webhook`; with the SNS topic
/// it publishes on ([`use_mock_gateway`] takes both).
pub async fn mock_gateway(
    public: &str,
    config: mock_gateway::Config,
) -> (mock_gateway::Running, String) {
    let config = mock_gateway::Config {
        webhook_urls: vec![format!("{public}/payment/webhook")],
        ..config
    };
    let topic = config.topic_arn.clone();
    let mock = mock_gateway::start_local(config, mock_gateway::ScriptSpec::default())
        .await
        .unwrap();
    (mock, topic)
}

/// Points `config` at `mock` (started by [`mock_gateway`], publishing on
/// `topic`): its API, its ledger as the gateway's ground truth, and its
/// webhooks trusted from loopback.
pub fn use_mock_gateway(
    config: &mut booking_server::ServerConfig,
    mock: &mock_gateway::Running,
    topic: String,
) {
    config.gateway.base_url = mock.url.clone();
    config.gateway.mock_ledger = true;
    config.webhook.loopback_sns_port = Some(mock.addr.port());
    config.webhook.topic_arns = Some(vec![topic]);
}

/// Polls `done` every 100 ms until it holds; fails naming `what` once
/// `limit` has passed.
pub async fn wait_until<F, Fut>(what: &str, limit: Duration, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !done().await {
        assert!(start.elapsed() < limit, "{what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The body of `GET url`, as text (whatever the status).
pub async fn get_text(http: &reqwest::Client, url: String) -> String {
    http.get(url).send().await.unwrap().text().await.unwrap()
}

/// Every admin route that changes the sale or reads it, as (method, path)
/// (the fault routes, served with `[faults]` only, apart).
pub const SALE_ROUTES: [(&str, &str); 9] = [
    ("POST", "/ops/reset"),
    ("POST", "/ops/load-candidates"),
    ("POST", "/ops/open"),
    ("POST", "/ops/close"),
    ("GET", "/ops/status"),
    ("GET", "/ops/counters"),
    ("GET", "/ops/audit"),
    ("GET", "/ops/emails/pending"),
    ("POST", "/ops/emails/resend"),
];

/// The embedded stack (everything in process).
pub fn embedded_stack() -> booking_server::config::StackConfig {
    booking_server::config::StackConfig {
        kind: booking_server::StackKind::Embedded,
        ..booking_server::config::StackConfig::default()
    }
}

/// Mail over plain SMTP to the receiver on 127.0.0.1:`port`, read back from
/// its `maildir`.
pub fn smtp_mail(port: u16, maildir: std::path::PathBuf) -> booking_server::config::MailConfig {
    booking_server::config::MailConfig {
        kind: booking_server::config::MailKind::Smtp,
        smtp: booking_smtp::SmtpConfig {
            host: "127.0.0.1".into(),
            port,
            tls: booking_smtp::SmtpTls::None,
            ..booking_smtp::SmtpConfig::default()
        },
        readback_maildir: Some(maildir),
        ..booking_server::config::MailConfig::default()
    }
}

/// A level of the sale: `name`, `cap` seats at `price`.
pub fn level(name: &str, cap: u32, price: &str) -> booking_server::config::LevelConfig {
    booking_server::config::LevelConfig {
        level: booking::Level::parse(name).unwrap(),
        cap,
        price: price.into(),
    }
}

/// Sends `request` (with `body` as JSON if given) and returns its JSON
/// answer, which must be a success (`what` names the call otherwise).
pub async fn ok_json(
    request: reqwest::RequestBuilder,
    body: Option<serde_json::Value>,
    what: &str,
) -> serde_json::Value {
    let request = match body {
        Some(body) => request.json(&body),
        None => request,
    };
    let response = request.send().await.unwrap();
    let status = response.status();
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    assert!(status.is_success(), "{what}: {status} {body}");
    body
}

/// The AWS stack on the local emulators (`sdk`), its resources named with
/// `prefix`, its ledger and coordination on the Redis at `redis_url` with
/// `pool_size` connections.
pub fn aws_stack(
    redis_url: String,
    pool_size: usize,
    sdk: booking_aws::AwsSettings,
    prefix: String,
) -> booking_server::config::StackConfig {
    booking_server::config::StackConfig {
        kind: booking_server::StackKind::Aws,
        redis_url,
        redis_pool_size: pool_size,
        aws: booking_server::config::AwsStackConfig {
            prefix,
            sdk,
            allow_unsupported_settings: true,
            ..booking_server::config::AwsStackConfig::default()
        },
        ..booking_server::config::StackConfig::default()
    }
}

/// An instance of `config` on loopback with the mock gateway (as
/// `mock_config` says) in front of it: the mock's webhooks go to the
/// instance, the instance calls the mock and trusts its webhooks
/// ([`mock_gateway`], [`use_mock_gateway`]).
pub async fn start_with_mock(
    mock_config: mock_gateway::Config,
    mut config: booking_server::ServerConfig,
) -> (booking_server::Spawned, mock_gateway::Running) {
    let listeners = booking_server::Listeners::loopback().await.unwrap();
    let public = listeners.public_url().unwrap();
    let (mock, topic) = mock_gateway(&public, mock_config).await;
    use_mock_gateway(&mut config, &mock, topic);
    let spawned = booking_server::Spawned::start_on(listeners, config, None)
        .await
        .unwrap();
    (spawned, mock)
}
