//! The stream handlers as AWS Lambda functions (issue 6): the expiry safety
//! net and the back-office sync, each the same [`BatchHandler`] the local
//! event-source mapping (`booking-streams`) invokes, behind
//! `lambda_runtime`.
//!
//! A function reads the server's configuration (the TOML `booking serve
//! --config` takes) from the file named by [`CONFIG_ENV`], builds its ports
//! once at cold start, and answers each DynamoDB-stream invocation with the
//! partial-batch response (`{"batchItemFailures": [{"itemIdentifier": …}]}`,
//! for `FunctionResponseTypes: [ReportBatchItemFailures]`): the first record
//! the handler could not handle and everything after it are retried, the
//! ones before are not. An event that is not a DynamoDB-stream batch of
//! booking records is an error (Lambda retries it, then sends it to the
//! on-failure destination), never a panic.
//!
//! Binaries: `booking-expiry-lambda`, `booking-sync-lambda`
//! (`deploy/package-lambda` zips each as `bootstrap`). Run locally with
//! `--event FILE`, either answers one invocation with the event in `FILE`
//! (`events/` holds samples) and prints the partial-batch response.

use std::sync::Arc;

use booking_server::config::ServerConfig;
use booking_streams::event::{BatchResponse, StreamEvent};
use booking_streams::mapping::BatchHandler;
use serde_json::Value;

/// The environment variable naming the configuration file.
pub const CONFIG_ENV: &str = "BOOKING_CONFIG";

/// Why an invocation could not be handled at all.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    /// The payload is not a DynamoDB-stream event.
    #[error("not a DynamoDB stream event: {0}")]
    NotAStreamEvent(String),
    /// A record's image is not a booking.
    #[error("malformed record: {0}")]
    MalformedRecord(String),
}

/// One invocation: parses `payload`, runs `handler` on its records in order,
/// and answers which record to retry from (none: all handled).
pub async fn invoke(
    handler: &dyn BatchHandler,
    payload: Value,
) -> Result<BatchResponse, InvokeError> {
    let event: StreamEvent =
        serde_json::from_value(payload).map_err(|e| InvokeError::NotAStreamEvent(e.to_string()))?;
    let records = event.records().map_err(InvokeError::MalformedRecord)?;
    let failed_at = handler.handle_batch(&records).await;
    if let Some(seq) = failed_at {
        tracing::warn!(
            handler = handler.name(),
            seq,
            "batch failed at a record; Lambda retries from it"
        );
    }
    Ok(event.failure(failed_at))
}

/// The configuration a function runs with: the file [`CONFIG_ENV`] names.
pub fn config_from_env() -> anyhow::Result<ServerConfig> {
    let path = std::env::var(CONFIG_ENV)
        .map_err(|_| anyhow::anyhow!("{CONFIG_ENV} must name the booking configuration file"))?;
    let config = ServerConfig::from_file(std::path::Path::new(&path))?;
    config.validate()?;
    Ok(config)
}

/// Redis connections of a function instance: it handles one batch at a
/// time, in order (a fleet-sized pool per Lambda instance would exhaust
/// Redis when the stream fans out).
pub const FUNCTION_REDIS_POOL: usize = 2;

/// The expiry safety net over `config`'s ledger and record store.
pub async fn expiry_handler(config: &ServerConfig) -> anyhow::Result<Arc<dyn BatchHandler>> {
    let mut config = config.clone();
    config.stack.redis_pool_size = FUNCTION_REDIS_POOL;
    let server = booking_server::build(&config, &config.public_url).await?;
    let stack = &server.stack;
    Ok(Arc::new(booking_service::expiry::ExpiryHandler::new(
        stack.stream.clone(),
        stack.ledger.clone(),
        0,
    )))
}

/// The back-office sync over `config`'s PostgreSQL (migrated at cold start).
pub async fn sync_handler(config: &ServerConfig) -> anyhow::Result<Arc<dyn BatchHandler>> {
    let office = booking_server::build::back_office(config)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no back office configured (stack.postgres_url)"))?;
    Ok(Arc::new(booking_postgres::SyncHandler::new(office)))
}

/// Serves `handler` to the Lambda Runtime API until the runtime stops.
pub async fn serve(handler: Arc<dyn BatchHandler>) -> Result<(), lambda_runtime::Error> {
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<Value>| {
            let handler = handler.clone();
            async move {
                let answer = invoke(handler.as_ref(), event.payload).await?;
                Ok::<Value, lambda_runtime::Error>(serde_json::to_value(answer)?)
            }
        },
    ))
    .await
}

/// A binary's `main`: logs, configuration, the handler `make` builds, then
/// the runtime loop.
pub async fn main_with<F, Fut>(make: F) -> Result<(), lambda_runtime::Error>
where
    F: FnOnce(ServerConfig) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Arc<dyn BatchHandler>>>,
{
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(false)
        .without_time()
        // stdout is the answer of a local `--event` run; Lambda keeps both
        .with_writer(std::io::stderr)
        .init();
    let event = local_event(std::env::args().skip(1))?;
    let config = config_from_env()?;
    let handler = make(config).await?;
    tracing::info!(handler = handler.name(), "cold start done");
    match event {
        None => serve(handler).await,
        Some(path) => match invoke_file(handler.as_ref(), &path).await {
            Ok(answer) => {
                println!("{}", serde_json::to_string(&answer)?);
                Ok(())
            }
            Err(e) => {
                // what Lambda would log as the invocation's error, readable
                eprintln!("error: {e}");
                std::process::exit(1)
            }
        },
    }
}

/// The flag that runs one invocation locally instead of the runtime loop:
/// `--event FILE` (a JSON stream event, as `events/` holds).
pub const EVENT_FLAG: &str = "--event";

/// The event file of a local invocation, if the arguments name one; any
/// other argument is an error (a function takes none in Lambda).
pub fn local_event(
    mut args: impl Iterator<Item = String>,
) -> Result<Option<std::path::PathBuf>, lambda_runtime::Error> {
    match (args.next(), args.next(), args.next()) {
        (None, _, _) => Ok(None),
        (Some(flag), Some(path), None) if flag == EVENT_FLAG => Ok(Some(path.into())),
        _ => Err(format!(
            "usage: run by Lambda with no arguments, or locally as `{EVENT_FLAG} FILE` (one invocation with the JSON event in FILE)"
        )
        .into()),
    }
}

/// One local invocation with the event in `path`: what Lambda would get back.
pub async fn invoke_file(
    handler: &dyn BatchHandler,
    path: &std::path::Path,
) -> Result<BatchResponse, lambda_runtime::Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("reading the event {}: {e}", path.display()))?;
    let payload: Value = serde_json::from_str(&text)
        .map_err(|e| format!("the event {} is not JSON: {e}", path.display()))?;
    Ok(invoke(handler, payload).await?)
}
