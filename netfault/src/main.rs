//! `netfault`: the fault proxy with toxiproxy's HTTP API, for a manual
//! rehearsal driven by a toxiproxy client. Stops on Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Parser;
use netfault::{Netfault, ProxySpec};

/// A TCP fault proxy with toxiproxy's HTTP API.
#[derive(Debug, Parser)]
#[command(name = "netfault", version)]
struct Args {
    /// Where the HTTP API listens (toxiproxy's default port).
    #[arg(long, default_value = "127.0.0.1:8474", env = "NETFAULT_LISTEN")]
    listen: SocketAddr,
    /// Proxies to create at start: a JSON array as toxiproxy's `-config`
    /// and `/populate` take (`[{"name","listen","upstream","enabled"}]`).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Allow the API and the proxies to listen on non-loopback addresses.
    /// Anyone who can reach the API can then point proxies at any host.
    #[arg(long)]
    allow_remote: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    if !args.allow_remote && !args.listen.ip().is_loopback() {
        bail!(
            "--listen {} is not a loopback address: pass --allow-remote to listen there",
            args.listen
        );
    }
    let netfault = Netfault::with_remote_listen(args.allow_remote);
    if let Some(path) = &args.config {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let specs: Vec<ProxySpec> = serde_json::from_str(&text)
            .with_context(|| format!("parsing {} (a JSON array of proxies)", path.display()))?;
        let (made, error) = netfault.populate(specs).await;
        if let Some(e) = error {
            bail!("populating from {}: {e}", path.display());
        }
        tracing::info!(proxies = made.len(), config = %path.display(), "populated proxies from file");
    }
    let (addr, server) = netfault::serve(netfault.clone(), args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    // the one line on stdout: scripts (and the tests) read the address here
    println!("netfault API listening on http://{addr}");
    tokio::select! {
        signal = tokio::signal::ctrl_c() => {
            signal.context("waiting for Ctrl-C")?;
            tracing::info!("Ctrl-C: stopping");
        }
        ended = server => {
            ended.context("the API server task failed")?;
            bail!("the API server stopped");
        }
    }
    for proxy in netfault.list() {
        let _ = netfault.delete(&proxy.name).await;
    }
    Ok(())
}
