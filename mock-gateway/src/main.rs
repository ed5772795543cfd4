//! `mock-gateway`: serve the mock bKash gateway until SIGTERM or Ctrl-C,
//! then stop (the webhook deliveries under way end) and exit 0.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use mock_gateway::{Config, ScriptSpec, SystemClock, config::Merchant};

/// mimalloc: the gateway allocates many small short-lived strings per request.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A scriptable mock of bKash Tokenized Checkout v1.2.0-beta with SNS-signed webhooks.
#[derive(Debug, Parser)]
#[command(name = "mock-gateway", version)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9090", env = "MOCK_GATEWAY_LISTEN")]
    listen: String,
    /// Base URL payers and subscribers reach the gateway at (default: http://<listen>).
    #[arg(long)]
    public_url: Option<String>,
    /// Script file (TOML) of fault rules; replaceable later through /__mock/rules.
    #[arg(long)]
    script: Option<PathBuf>,
    /// Seed for IDs and scripted choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Webhook subscriber endpoint (repeatable).
    #[arg(long = "webhook-url")]
    webhook_urls: Vec<String>,
    /// SNS topic ARN the notifications come from.
    #[arg(
        long,
        default_value = "arn:aws:sns:ap-southeast-1:000000000000:bkash-ipn"
    )]
    topic_arn: String,
    /// SNS SignatureVersion to sign with: 1 (SHA1withRSA) or 2 (SHA256withRSA).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    signature_version: u8,
    /// Token grants allowed per app key per window.
    #[arg(long, default_value_t = mock_gateway::config::GRANT_LIMIT_DEFAULT)]
    grant_limit: u32,
    /// The grant window, seconds.
    #[arg(long, default_value_t = mock_gateway::config::GRANT_WINDOW_SECS_DEFAULT)]
    grant_window_secs: u64,
    /// id_token lifetime (expires_in), seconds.
    #[arg(long, default_value_t = mock_gateway::config::ID_TOKEN_TTL_SECS_DEFAULT)]
    id_token_ttl_secs: u64,
    /// Merchant username (grant header).
    #[arg(long, default_value = "sellout")]
    username: String,
    /// Merchant password (grant header).
    #[arg(long, default_value = "sellout-password")]
    password: String,
    /// Merchant app key.
    #[arg(long, default_value = "sellout-app-key")]
    app_key: String,
    /// Merchant app secret.
    #[arg(long, default_value = "sellout-app-secret")]
    app_secret: String,
    /// Delay before each webhook retry, milliseconds (SNS default 20 s).
    #[arg(long, default_value_t = 20_000)]
    webhook_retry_delay_ms: u64,
    /// Webhook retries after the first attempt (SNS default 3).
    #[arg(long, default_value_t = 3)]
    webhook_retries: u32,
    /// Worker threads (0 = one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// The log lines' format.
    #[command(flatten)]
    log: service_main::LogArgs,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    service_main::init_logging(args.log.log_format, "info")
        .map_err(|e| anyhow::anyhow!("installing the log subscriber: {e}"))?;
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if args.threads > 0 {
        rt.worker_threads(args.threads);
    }
    rt.enable_all()
        .build()
        .context("tokio runtime")?
        .block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let script = match &args.script {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            ScriptSpec::from_toml(&text).with_context(|| format!("script {}", path.display()))?
        }
        None => ScriptSpec::default(),
    };
    let mut config = Config {
        public_url: args
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", args.listen)),
        merchants: vec![Merchant {
            username: args.username,
            password: args.password,
            app_key: args.app_key,
            app_secret: args.app_secret,
        }],
        grant_limit: args.grant_limit,
        grant_window_secs: args.grant_window_secs,
        id_token_ttl_secs: args.id_token_ttl_secs,
        seed: args.seed,
        webhook_urls: args.webhook_urls,
        topic_arn: args.topic_arn,
        signature_version: args.signature_version,
        ..Config::default()
    };
    config.delivery.min_delay_ms = args.webhook_retry_delay_ms;
    config.delivery.max_delay_ms = args.webhook_retry_delay_ms;
    config.delivery.retries = args.webhook_retries;
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let running =
        mock_gateway::start(listener, config, script, None, Arc::new(SystemClock)).await?;
    println!("mock-gateway listening on {}", running.url);
    service_main::stop_signal().await;
    running.stop().await;
    tracing::info!("mock-gateway stopped");
    Ok(())
}
