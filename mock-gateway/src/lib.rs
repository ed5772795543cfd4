//! A scriptable mock payment gateway, wire-compatible with bKash Tokenized
//! Checkout v1.2.0-beta, whose webhooks are AWS SNS HTTP notifications signed
//! with its own key.
//!
//! Map of the crate:
//! - [`codes`]: bKash status codes and messages.
//! - [`wire`]: bKash's time format, string amounts, request-body parsing.
//! - [`tokens`]: grant, refresh, token checks, the per-app-key grant allowance.
//! - [`payments`]: a payment's state machine (pure) and what happened to it.
//! - [`gateway`]: the state and every operation, free of HTTP.
//! - [`script`]: rules that inject faults, chosen deterministically from a seed.
//! - [`webhooks`]: SNS subscription confirmation, signed IPN notifications, retries.
//! - [`api`], [`checkout`], [`control`]: the HTTP routes (bKash API, payer page,
//!   `/__mock/` control API and SNS endpoints).
//! - [`payer`]: a client library that acts as payers for the load scenarios.
//! - [`metrics`]: counters for `/metrics` and `/__mock/stats`.
//!
//! The gateway keeps its state in memory: it is one process that a rehearsal
//! starts and stops, and its ledger is the ground truth the audit reads.

pub mod api;
pub mod checkout;
pub mod clock;
pub mod codes;
pub mod config;
pub mod control;
pub mod gateway;
pub mod ids;
pub mod metrics;
pub mod payer;
pub mod payments;
pub mod script;
pub mod tokens;
pub mod webhooks;
pub mod wire;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use tokio::net::TcpListener;

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::Config;
pub use gateway::Gateway;
pub use script::ScriptSpec;
pub use webhooks::Webhooks;

/// Everything the routes share.
#[derive(Debug)]
pub struct App {
    /// The bKash side.
    pub gateway: Gateway,
    /// The SNS side.
    pub webhooks: Arc<Webhooks>,
    /// Client for server-side redirect replays.
    pub http: reqwest::Client,
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The webhook side could not start.
    #[error(transparent)]
    Webhooks(#[from] webhooks::WebhookError),
    /// The script is invalid.
    #[error(transparent)]
    Script(#[from] script::ScriptError),
    /// Binding or serving failed.
    #[error("listen: {0}")]
    Io(#[from] std::io::Error),
    /// HTTP client.
    #[error("http client: {0}")]
    Http(#[from] reqwest::Error),
}

impl App {
    /// A gateway with `config` and `script`, reading time from `clock`.
    pub fn new(
        config: Config,
        script: ScriptSpec,
        signer: Option<sns::Signer>,
        clock: Arc<dyn Clock>,
    ) -> Result<App, StartError> {
        let gateway = Gateway::new(config.clone(), clock.clone());
        gateway.set_script(script)?;
        let webhooks = Arc::new(Webhooks::new(
            &config,
            signer,
            gateway.metrics.clone(),
            clock,
        )?);
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(App {
            gateway,
            webhooks,
            http,
        })
    }
}

/// Every route of the gateway.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .merge(api::routes())
        .merge(checkout::routes())
        .merge(control::routes())
        .with_state(app)
}

/// A gateway serving on a socket.
#[derive(Debug)]
pub struct Running {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its state.
    pub app: Arc<App>,
    /// The base URL clients use.
    pub url: String,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops serving and waits for the server task.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.task).await;
    }
}

/// Binds `listener`, sets the public URL to its address if `config.public_url`
/// is empty, starts serving in a task and sends the webhook confirmations.
pub async fn start(
    listener: TcpListener,
    mut config: Config,
    script: ScriptSpec,
    signer: Option<sns::Signer>,
    clock: Arc<dyn Clock>,
) -> Result<Running, StartError> {
    let addr = listener.local_addr()?;
    if config.public_url.is_empty() {
        config.public_url = format!("http://{addr}");
    }
    let url = config.public_url.trim_end_matches('/').to_owned();
    let app = Arc::new(App::new(config, script, signer, clock)?);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let router = router(app.clone());
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(async {
                let _ = rx.await;
            })
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "gateway server stopped");
        }
    });
    app.webhooks.request_confirmations();
    tracing::info!(%addr, "mock gateway listening");
    Ok(Running {
        addr,
        app,
        url,
        shutdown: Some(tx),
        task,
    })
}

/// Starts a gateway on a free loopback port with `config` (its `public_url`
/// replaced by the bound address): what tests and rehearsals use.
pub async fn start_local(mut config: Config, script: ScriptSpec) -> Result<Running, StartError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    config.public_url = String::new();
    start(listener, config, script, None, Arc::new(SystemClock)).await
}
