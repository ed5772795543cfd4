//! The `booking` command line: `serve` runs an instance; every other
//! subcommand is an ops step sent to a running instance's `/ops/` routes.
//!
//! ```text
//! booking serve [--config FILE] [flags] [--drain-notice-ms MS] [--drain-grace-ms MS]
//! booking provision [--config FILE] [flags] [--allow-unsupported]   # AWS resources or Redis persistence check + back-office schema
//! booking [--server-config FILE | --server URL] [--token T] [--confirm SALE] reset
//! booking [--server-config FILE | --server URL] load-candidates FILE   # one id or hash per line, or a JSON list; - for stdin
//! booking [--server-config FILE | --server URL] open | close | status
//! booking [--server-config FILE | --server URL] audit                # exit status 1 if an invariant failed
//! ```
//!
//! The ops subcommands talk to the instance's admin listener: `--server`,
//! else `http://<admin_listen>` of the server's own configuration
//! (`--server-config`, or `SELLOUT_CONFIG` as `serve` reads it), else
//! [`ADMIN_LISTEN_DEFAULT`](crate::admin_settings::ADMIN_LISTEN_DEFAULT);
//! the token is `--token` (`SELLOUT_ADMIN_TOKEN`), else the
//! configuration's current one. On a production sale `reset`,
//! `load-candidates` and `close` need `--confirm SALE`.
//!
//! Every subcommand takes `--log-format text|json` (`service_main`).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};

use crate::config::ServeArgs;
use crate::ops;

/// The `booking` binary.
#[derive(Debug, clap::Parser)]
#[command(
    name = "booking",
    about = "The sellout booking server and its ops steps"
)]
pub struct Cli {
    /// A running instance's admin listener (for the ops subcommands);
    /// default: the `admin_listen` of `--server-config`, else
    /// http://127.0.0.1:8081.
    #[arg(long, global = true, env = "SELLOUT_SERVER")]
    pub server: Option<String>,
    /// The server's configuration file: the ops subcommands take the admin
    /// listener's address and token from it.
    #[arg(long, global = true, env = "SELLOUT_CONFIG")]
    pub server_config: Option<PathBuf>,
    /// Confirm a production `reset`, `load-candidates` or `close` by naming
    /// the sale (sent as the `X-Confirm-Sale` header).
    #[arg(long, global = true, value_name = "SALE")]
    pub confirm: Option<String>,
    /// Bearer token for the /ops/ routes.
    #[arg(
        long,
        global = true,
        env = "SELLOUT_ADMIN_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// The log lines' format.
    #[command(flatten)]
    pub log: service_main::LogArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Run an instance: the API, the /ops/ routes and the background loops,
    /// until SIGTERM or Ctrl-C; then drain ([`crate::run`]) and exit 0.
    Serve {
        /// The configuration.
        #[command(flatten)]
        args: Box<ServeArgs>,
        /// How it drains on the way out.
        #[command(flatten)]
        drain: DrainArgs,
    },
    /// Make (or bring to the design) every AWS table, index, queue and bucket
    /// of the configuration, and migrate the back office; idempotent. Run
    /// locally, with the same configuration as `serve`.
    Provision {
        /// The configuration, as for `serve`.
        #[command(flatten)]
        serve: Box<ServeArgs>,
        /// Pass over settings the server lacks (point-in-time recovery on a
        /// local emulator). Never on a real account.
        #[arg(long)]
        allow_unsupported: bool,
    },
    /// Reset the sale: levels and caps from the server's config, closed, no candidates.
    Reset,
    /// Mark candidates eligible: a file of raw ids or SHA-256 hashes, one per
    /// line (or a JSON list); `-` reads stdin.
    LoadCandidates {
        /// The list.
        file: PathBuf,
    },
    /// Open admissions.
    Open,
    /// Close admissions.
    Close,
    /// Counters, records, queue and the status document.
    Status,
    /// Check every invariant; exit status 1 if one failed.
    /// With `gateway.mock_ledger` in the server's configuration, also the
    /// gateway's ground-truth checks (the server reads its configured
    /// gateway; no URL is sent).
    Audit,
    /// Confirmation emails still owed: list them, or send them now.
    Emails {
        /// What to do.
        #[command(subcommand)]
        action: EmailsAction,
    },
}

/// `booking serve`'s drain on SIGTERM ([`crate::run::Drain`]).
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct DrainArgs {
    /// After SIGTERM, how long the listener stays open refusing new sales
    /// (503 + Retry-After) with /readyz 503, before it closes, ms.
    #[arg(long, env = "SELLOUT_DRAIN_NOTICE_MS", default_value_t = crate::run::DRAIN_NOTICE.as_millis() as u64)]
    pub drain_notice_ms: u64,
    /// Then, how long the requests in flight get before they are cut off, ms.
    #[arg(long, env = "SELLOUT_DRAIN_GRACE_MS", default_value_t = crate::run::DRAIN_GRACE.as_millis() as u64)]
    pub drain_grace_ms: u64,
}

impl DrainArgs {
    /// The drain these flags ask for, refused when its grace is shorter than
    /// `request_deadline`: a request admitted just before the listener closed
    /// may run the whole deadline (its gateway call, its undo), and cut off
    /// it leaves a pending admission for the reconciler instead of an answer.
    pub fn drain(
        &self,
        request_deadline: std::time::Duration,
    ) -> Result<crate::run::Drain, String> {
        let drain = crate::run::Drain {
            notice: std::time::Duration::from_millis(self.drain_notice_ms),
            grace: std::time::Duration::from_millis(self.drain_grace_ms),
        };
        if drain.grace < request_deadline {
            return Err(format!(
                "--drain-grace-ms {} is shorter than the request deadline ({} ms): requests in flight would be cut off",
                self.drain_grace_ms,
                request_deadline.as_millis()
            ));
        }
        Ok(drain)
    }
}

/// `booking emails …`.
#[derive(Debug, Clone, Copy, clap::Subcommand)]
pub enum EmailsAction {
    /// PAID bookings whose email was never marked sent, oldest first.
    Pending,
    /// Send every owed email paid more than a sweep interval ago, now
    /// (marked recovered; its Message-ID lets a receiver drop a repeat);
    /// exit status 1 if one is still owed.
    Resend,
}

/// Runs `provision`, printing its report as JSON.
pub async fn run_provision(serve: &ServeArgs, allow_unsupported: bool) -> anyhow::Result<()> {
    let config = serve.load()?;
    let done = crate::build::provision(&config, allow_unsupported)
        .await
        .context("provisioning")?;
    let _ = writeln!(
        std::io::stdout(),
        "{}",
        serde_json::to_string_pretty(&done)?
    );
    Ok(())
}

/// Where the ops subcommands go: the admin listener's base URL and the
/// token, from the flags, else the server's configuration (module docs).
pub fn admin_target(cli: &Cli) -> anyhow::Result<(String, Option<String>)> {
    let from_config = match &cli.server_config {
        Some(path) => {
            let config = crate::config::ServerConfig::from_file(path)?;
            Some(
                config
                    .admin()
                    .client()
                    .with_context(|| format!("the admin settings of {}", path.display()))?,
            )
        }
        None => None,
    };
    let base = match (&cli.server, &from_config) {
        (Some(s), _) => s.trim_end_matches('/').to_owned(),
        (None, Some((url, _))) => url.clone(),
        (None, None) => format!("http://{}", crate::admin_settings::ADMIN_LISTEN_DEFAULT),
    };
    let token = cli
        .token
        .clone()
        .or_else(|| from_config.and_then(|(_, t)| t));
    Ok((base, token))
}

/// What every ops request carries: the token and the confirmation.
#[derive(Debug, Clone, Copy)]
struct Creds<'a> {
    token: Option<&'a str>,
    confirm: Option<&'a str>,
}

/// Sends one ops request (with the token and confirmation, if any): its
/// status and JSON answer.
async fn call(
    request: reqwest::RequestBuilder,
    creds: Creds<'_>,
    base: &str,
) -> anyhow::Result<(reqwest::StatusCode, serde_json::Value)> {
    let request = match creds.token {
        Some(t) => request.bearer_auth(t),
        None => request,
    };
    let request = match creds.confirm {
        Some(sale) => request.header(crate::admin_settings::CONFIRM_HEADER, sale),
        None => request,
    };
    let resp = request
        .send()
        .await
        .with_context(|| format!("calling {base}"))?;
    let status = resp.status();
    Ok((status, resp.json().await.context("reading the answer")?))
}

/// Prints a JSON answer (a closed pipe, `booking status | head`, is not an
/// error worth a panic).
fn print_json(value: &serde_json::Value) -> anyhow::Result<()> {
    let _ = writeln!(
        std::io::stdout(),
        "{}",
        serde_json::to_string_pretty(value)?
    );
    Ok(())
}

/// `load-candidates`: the list in requests of at most
/// [`ops::LOAD_BODY_BYTES_MAX`] bytes, in order; prints the reports summed.
/// A request refused stops the load there (what the earlier ones added
/// stays eligible; loading the same list again adds only the rest).
async fn load_candidates(
    http: &reqwest::Client,
    base: &str,
    creds: Creds<'_>,
    file: &std::path::Path,
) -> anyhow::Result<bool> {
    let text = if file.as_os_str() == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s).context("reading stdin")?;
        s
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    let list = crate::admin::parse_candidate_list(text.as_bytes()).map_err(anyhow::Error::msg)?;
    let bodies = ops::load_request_bodies(&list).map_err(anyhow::Error::msg)?;
    let mut total = ops::LoadReport::default();
    for (i, body) in bodies.into_iter().enumerate() {
        let request = http
            .post(format!("{base}/ops/load-candidates"))
            .header(reqwest::header::CONTENT_TYPE, "text/plain")
            .body(body);
        let (status, answer) = call(request, creds, base).await?;
        if !status.is_success() {
            print_json(&answer)?;
            bail!(
                "{base} answered {status} to request {} (the {i} before it were loaded: {total:?})",
                i + 1
            );
        }
        total += serde_json::from_value(answer).context("reading the load report")?;
    }
    print_json(&serde_json::to_value(&total)?)?;
    Ok(true)
}

/// Runs an ops subcommand against the admin listener ([`admin_target`]),
/// printing the JSON answer. Returns whether the step succeeded (for
/// `audit`: every invariant held).
pub async fn run_ops(cli: &Cli) -> anyhow::Result<bool> {
    let (base, token) = admin_target(cli)?;
    let base = base.as_str();
    let creds = Creds {
        token: token.as_deref(),
        confirm: cli.confirm.as_deref(),
    };
    let http = reqwest::Client::new();
    let request = match &cli.command {
        Command::Serve { .. } | Command::Provision { .. } => bail!("not an ops step"),
        Command::Reset => http.post(format!("{base}/ops/reset")),
        Command::Open => http.post(format!("{base}/ops/open")),
        Command::Close => http.post(format!("{base}/ops/close")),
        Command::Status => http.get(format!("{base}/ops/status")),
        Command::Emails {
            action: EmailsAction::Pending,
        } => http.get(format!("{base}/ops/emails/pending")),
        Command::Emails {
            action: EmailsAction::Resend,
        } => http.post(format!("{base}/ops/emails/resend")),
        Command::LoadCandidates { file } => {
            return load_candidates(&http, base, creds, file).await;
        }
        Command::Audit => http.get(format!("{base}/ops/audit")),
    };
    let (status, body) = call(request, creds, base).await?;
    print_json(&body)?;
    if !status.is_success() {
        bail!("{base} answered {status}");
    }
    if let Command::Emails {
        action: EmailsAction::Resend,
    } = cli.command
    {
        return Ok(body.get("failed").and_then(serde_json::Value::as_u64) == Some(0));
    }
    if let Command::Audit = cli.command {
        return Ok(body.get("passed").and_then(serde_json::Value::as_bool) == Some(true));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_drain_grace_shorter_than_the_request_deadline_is_refused() {
        let args = |grace| DrainArgs {
            drain_notice_ms: 100,
            drain_grace_ms: grace,
        };
        let deadline = Duration::from_secs(8);
        let d = args(20_000).drain(deadline).unwrap();
        assert_eq!(
            (d.notice, d.grace),
            (Duration::from_millis(100), Duration::from_secs(20))
        );
        assert!(args(8_000).drain(deadline).is_ok(), "equal is enough");
        let e = args(7_999).drain(deadline).unwrap_err();
        assert!(
            e.contains("--drain-grace-ms 7999") && e.contains("8000 ms"),
            "{e}"
        );
        // the defaults hold with the article's deadline
        assert!(
            crate::run::DRAIN_GRACE >= booking::Settings::default().request_deadline,
            "DRAIN_GRACE must cover the request deadline"
        );
    }
}
