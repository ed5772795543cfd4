//! `booking`: flags → tracing (`--log-format`) → config → build → serve
//! until SIGTERM or Ctrl-C, then drain and exit 0 ([`booking_server::run`]);
//! or an ops step against a running instance. See [`booking_server::cli`].

use std::sync::Arc;

use anyhow::Context;
use booking_server::cli::{Cli, Command};
use clap::Parser;

/// mimalloc: a booking allocates many small, short-lived strings and maps
/// (JSON bodies, headers, the gateway call); glibc malloc cost about 15 % of
/// the request path in `bookings_rate` profiles.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<std::process::ExitCode> {
    let cli = Cli::parse();
    service_main::init_logging(cli.log.log_format, "info")
        .map_err(|e| anyhow::anyhow!("installing the log subscriber: {e}"))?;
    if let Command::Provision {
        serve,
        allow_unsupported,
    } = &cli.command
    {
        booking_server::cli::run_provision(serve, *allow_unsupported).await?;
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let Command::Serve { args, drain } = &cli.command else {
        let ok = booking_server::cli::run_ops(&cli).await?;
        return Ok(if ok {
            std::process::ExitCode::SUCCESS
        } else {
            std::process::ExitCode::FAILURE
        });
    };
    let config = args.load()?;
    let drain = drain
        .drain(config.effective_settings().request_deadline)
        .map_err(anyhow::Error::msg)?;
    let listeners = booking_server::Listeners::bind(&config)
        .await
        .with_context(|| {
            format!(
                "binding {} (listen) and {} (admin_listen)",
                config.listen, config.admin_listen
            )
        })?;
    let public_url = config.public_url_or(listeners.public.local_addr()?);
    // a kill point of `[faults]` takes this process down (SIGKILL)
    let server = booking_server::build_with_killer(
        &config,
        &public_url,
        booking_server::kill::sigkill_self(),
    )
    .await
    .context("building the stack")?;
    booking_server::run::serve_with(
        Arc::new(server),
        listeners,
        service_main::stop_signal(),
        drain,
    )
    .await?;
    Ok(std::process::ExitCode::SUCCESS)
}
