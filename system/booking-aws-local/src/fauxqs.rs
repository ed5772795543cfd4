//! fauxqs (npm: an SQS, SNS and S3 emulator in Node.js) as the local SQS:
//! its FIFO queues keep one list per message group, its in-flight messages
//! a map by receipt, its deduplication IDs a bounded cache, so a send, a
//! receive, a delete or a count costs the same whatever the backlog: about
//! 0.5 ms of its CPU each on this project's 2-core machine, batch calls
//! included, against 2.7 ms for moto with an empty queue and tens of ms
//! with a few hundred messages queued (moto walks the whole queue on each).
//!
//! What it does as SQS does, and the adapter relies on: FIFO order per
//! group with a group held back while one of its messages is in flight,
//! deduplication IDs remembered five minutes, the visibility timeout and
//! `ChangeMessageVisibility` (refused for a message not in flight), the
//! redrive to the dead-letter queue after `maxReceiveCount` receives,
//! `SentTimestamp`/`ApproximateReceiveCount`/`MessageGroupId` on received
//! messages, the batch calls, long polling. Where it differs: it delivers at
//! most one message of a group per receive, deduplicates per queue rather
//! than per group, and listens on every interface (its own choice; nothing
//! is sent anywhere but loopback).
//!
//! `scripts/setup` installs it into `<repo>/.node` (`npm install`, pinned);
//! version 1.9.2 is the last that runs on Node 20, the machine's Node.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::server::{Launch, LocalServer};

/// The version `scripts/setup` installs.
pub const FAUXQS_VERSION: &str = "1.9.2";

/// A running fauxqs.
#[derive(Debug)]
pub struct Fauxqs {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    server: LocalServer,
}

/// fauxqs's command-line entry: `$SELLOUT_FAUXQS`, else the one
/// `scripts/setup` installs under the repository's `.node`.
pub fn fauxqs_cli_path() -> PathBuf {
    if let Some(p) = std::env::var_os("SELLOUT_FAUXQS") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.node/node_modules/fauxqs/dist/cli.js")
}

/// `node`: `$SELLOUT_NODE`, else the first on `PATH`.
pub fn node_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SELLOUT_NODE") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("node"))
        .find(|p| p.is_file())
}

/// Whether fauxqs and a `node` to run it are installed.
pub fn installed() -> bool {
    fauxqs_cli_path().is_file() && node_path().is_some()
}

impl Fauxqs {
    /// Starts one (a watchdog kills it once this process is gone).
    pub fn start() -> Result<Fauxqs, String> {
        let node = node_path().ok_or("node not found on PATH (set SELLOUT_NODE)")?;
        let cli = fauxqs_cli_path();
        if !cli.is_file() {
            return Err(format!(
                "{} not found: run scripts/setup (it installs fauxqs {FAUXQS_VERSION} into .node)",
                cli.display()
            ));
        }
        let server = LocalServer::start(&Launch {
            kind: "fauxqs",
            program: &node,
            args: vec![OsString::from(cli)],
            port_args: |_| Vec::new(),
            env: |port| {
                vec![
                    ("FAUXQS_PORT".into(), port.to_string()),
                    ("FAUXQS_LOGGER".into(), "false".into()),
                ]
            },
            health_path: "/health",
        })?;
        Ok(Fauxqs {
            url: server.url.clone(),
            server,
        })
    }

    /// The process-wide one, started on first use.
    pub fn shared() -> Result<&'static Fauxqs, String> {
        static SHARED: OnceLock<Result<Fauxqs, String>> = OnceLock::new();
        SHARED
            .get_or_init(Fauxqs::start)
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.server.pid
    }

    /// Stops its process (also the process-wide shared one, which is never
    /// dropped): [`crate::server::LocalServer::stop`].
    pub fn stop(&self) {
        self.server.stop();
    }
}
