//! `booking`: flags → config → tracing → build → serve until Ctrl-C; or an
//! ops step against a running instance. See [`booking_server::cli`].

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
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    if let Command::Provision {
        serve,
        allow_unsupported,
    } = &cli.command
    {
        booking_server::cli::run_provision(serve, *allow_unsupported).await?;
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let Command::Serve(args) = &cli.command else {
        let ok = booking_server::cli::run_ops(&cli).await?;
        return Ok(if ok {
            std::process::ExitCode::SUCCESS
        } else {
            std::process::ExitCode::FAILURE
        });
    };
    let config = args.load()?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let public_url = config.public_url_or(listener.local_addr()?);
    // a kill point of `[faults]` takes this process down (SIGKILL)
    let server = booking_server::build_with_killer(
        &config,
        &public_url,
        booking_server::kill::sigkill_self(),
    )
    .await
    .context("building the stack")?;
    booking_server::serve(Arc::new(server), listener, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(std::process::ExitCode::SUCCESS)
}
