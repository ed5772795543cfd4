//! What every long-running binary of the workspace (`booking`,
//! `mock-gateway`, `aws-local`) does the same way in its `main`, in one
//! place:
//!
//! - its logs: [`init_logging`] with a [`LogFormat`] from `--log-format`
//!   (`text`, the default, or `json`: one JSON object per line, for a log
//!   collector), on stderr, filtered by `RUST_LOG` or the binary's default;
//! - the signal it stops on: [`stop_signal`], SIGTERM (what an orchestrator
//!   sends: Kubernetes, ECS, systemd) or Ctrl-C (SIGINT), whichever first.

use std::fmt;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (`tracing-subscriber`'s default format).
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields`
    /// (with `message`), and the current span's fields.
    Json,
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

/// The `--log-format` flag, to `#[command(flatten)]` into a binary's
/// arguments.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::Args)]
pub struct LogArgs {
    /// Log lines as `text` (human-readable) or `json` (one object per line).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
}

/// Installs the global `tracing` subscriber: `format` lines on stderr, the
/// filter from `RUST_LOG`, else `default_filter` (e.g. `"info"`). ANSI
/// colours only in text and only on a terminal. Errs if a subscriber is
/// installed already.
pub fn init_logging(
    format: LogFormat,
    default_filter: &str,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    }
}

/// Completes when the process is asked to stop: SIGTERM or Ctrl-C (SIGINT),
/// whichever comes first. If the SIGTERM handler cannot be installed (it
/// always can on Unix), Ctrl-C alone; if neither can, it never completes
/// (the process is then stopped the hard way), and says so in the log.
pub async fn stop_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "no Ctrl-C handler");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!(signal = "SIGTERM", "stop requested"),
                    () = ctrl_c => tracing::info!(signal = "SIGINT", "stop requested"),
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "no SIGTERM handler: Ctrl-C only");
                ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        log: LogArgs,
    }

    #[test]
    fn the_flag_defaults_to_text_and_takes_json_and_refuses_the_rest() {
        let cli = Cli::try_parse_from(["x"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cli.log.log_format, LogFormat::Text);
        let cli =
            Cli::try_parse_from(["x", "--log-format", "json"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cli.log.log_format, LogFormat::Json);
        let err = Cli::try_parse_from(["x", "--log-format", "xml"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("xml") && err.contains("json"), "{err}");
    }
}
