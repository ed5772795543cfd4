//! moto's server (SQS, S3, and a DynamoDB without TTL expiry) from the
//! project's venv, on a free loopback port: the process-wide one
//! ([`Moto::shared`], started on first use, stopped when the process ends),
//! or one more of its own ([`Moto::start`]).
//!
//! `scripts/setup` installs it (`scripts/requirements-aws.txt`). It is a
//! Flask server in one Python process: every call of every service it
//! serves takes the same interpreter lock, and its SQS walks every message
//! of a queue on each send, receive, delete and count (a 600-message
//! backlog made a `GetQueueAttributes` cost 66 ms of its CPU). So the
//! rehearsals give it S3 only, and SQS gets a server of its own
//! ([`crate::LocalAws`]).

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::server::{Launch, LocalServer};

/// A running moto server.
#[derive(Debug)]
pub struct Moto {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    server: LocalServer,
}

/// The `moto_server` to run: `$SELLOUT_MOTO_SERVER`, else the repository's
/// `.venv/bin/moto_server`.
pub fn moto_server_path() -> PathBuf {
    if let Some(p) = std::env::var_os("SELLOUT_MOTO_SERVER") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/moto_server")
}

impl Moto {
    /// Starts one (a watchdog kills it once this process is gone).
    pub fn start() -> Result<Moto, String> {
        let bin = moto_server_path();
        let server = LocalServer::start(&Launch {
            kind: "moto",
            program: &bin,
            args: Vec::new(),
            port_args: |port| {
                vec![
                    "-H".into(),
                    "127.0.0.1".into(),
                    "-p".into(),
                    port.to_string(),
                ]
            },
            env: |_| Vec::new(),
            health_path: "/moto-api/",
        })
        .map_err(|e| format!("{e} (scripts/setup installs moto[server] into .venv)"))?;
        Ok(Moto {
            url: server.url.clone(),
            server,
        })
    }

    /// The process-wide one, started on first use.
    pub fn shared() -> Result<&'static Moto, String> {
        static SHARED: OnceLock<Result<Moto, String>> = OnceLock::new();
        SHARED
            .get_or_init(Moto::start)
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

    /// Forgets every queue, bucket and table (`/moto-api/reset`).
    pub async fn reset(&self) -> Result<(), String> {
        let r = reqwest::Client::new()
            .post(format!("{}/moto-api/reset", self.url))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if r.status().is_success() {
            Ok(())
        } else {
            Err(format!("moto reset answered {}", r.status()))
        }
    }
}
