//! An instance served in this process, on loopback listeners of its own:
//! what tools and other crates' tests run instead of a `booking serve`
//! child process. [`Spawned::start`] builds the server ([`crate::build`]),
//! serves it ([`crate::serve`]) on a task of its own and hands back its
//! URLs; [`Spawned::stop`] shuts it down and waits, within
//! [`STOP_WAIT`], for the listeners and background loops to finish.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::build::{BuildError, Server};
use crate::config::ServerConfig;
use crate::run::Listeners;

/// How long [`Spawned::stop`] waits for the instance to finish serving.
pub const STOP_WAIT: Duration = Duration::from_secs(30);

/// Why an instance could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The listeners could not be bound or their addresses read.
    #[error("listeners: {0}")]
    Io(#[from] std::io::Error),
    /// The server could not be built from the config.
    #[error("build: {0}")]
    Build(#[from] BuildError),
}

/// A running in-process instance: its server, its two base URLs, and the
/// means to stop it.
#[derive(Debug)]
pub struct Spawned {
    /// The server being served (its stack, for tests that read the ports).
    pub server: Arc<Server>,
    /// The public listener's base URL, `http://127.0.0.1:PORT`.
    pub public: String,
    /// The admin listener's base URL (the `/ops/` routes).
    pub admin: String,
    stop: oneshot::Sender<()>,
    served: JoinHandle<std::io::Result<()>>,
}

impl Spawned {
    /// Binds two loopback listeners, sets `config.listen` and
    /// `config.admin_listen` to them, and serves the server built from
    /// `config` under the public listener's URL.
    pub async fn start(config: ServerConfig) -> Result<Spawned, SpawnError> {
        let listeners = Listeners::loopback().await?;
        Spawned::start_on(listeners, config, None).await
    }

    /// [`Spawned::start`] on listeners the caller bound already (to know
    /// their URLs before building `config`, e.g. for a mock gateway's
    /// webhook). Sets `config.listen` and `config.admin_listen` from
    /// `listeners`; the server serves under `public_url` (`None`: the public
    /// listener's URL).
    pub async fn start_on(
        listeners: Listeners,
        mut config: ServerConfig,
        public_url: Option<&str>,
    ) -> Result<Spawned, SpawnError> {
        config.listen = listeners.public.local_addr()?;
        config.admin_listen = listeners.admin.local_addr()?;
        let serve_under = match public_url {
            Some(url) => url.to_owned(),
            None => listeners.public_url()?,
        };
        let server = crate::build::build(&config, &serve_under).await?;
        Ok(Spawned::serving(Arc::new(server), listeners)?)
    }

    /// Serves a server the caller built (e.g. a second instance of a fleet,
    /// [`crate::build_sharing`]) on `listeners`, whose addresses should be
    /// the ones its config names. Spawns onto the current Tokio runtime.
    pub fn serving(server: Arc<Server>, listeners: Listeners) -> std::io::Result<Spawned> {
        let public = listeners.public_url()?;
        let admin = listeners.admin_url()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(crate::run::serve(
            Arc::clone(&server),
            listeners,
            async move {
                let _ = stopped.await;
            },
        ));
        tracing::debug!(%public, %admin, "in-process instance serving");
        Ok(Spawned {
            server,
            public,
            admin,
            stop,
            served,
        })
    }

    /// Shuts the instance down and waits for it to finish serving: an error
    /// when serving failed, panicked, or did not finish within
    /// [`STOP_WAIT`].
    pub async fn stop(self) -> std::io::Result<()> {
        // The server may have stopped on its own already (then the
        // receiver is gone and `served` says why).
        let _ = self.stop.send(());
        match tokio::time::timeout(STOP_WAIT, self.served).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(std::io::Error::other(format!(
                "the serving task failed: {join}"
            ))),
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the instance did not stop within {STOP_WAIT:?}"),
            )),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn starts_serves_public_and_admin_apart_and_stops() {
        let spawned = Spawned::start(ServerConfig::default()).await.unwrap();
        assert_ne!(spawned.public, spawned.admin);
        let http = reqwest::Client::new();
        let get = |url: String| {
            let http = http.clone();
            async move { http.get(url).send().await.unwrap().status().as_u16() }
        };
        assert_eq!(get(format!("{}/healthz", spawned.public)).await, 200);
        assert_eq!(get(format!("{}/ops/status", spawned.public)).await, 404);
        assert_eq!(get(format!("{}/ops/status", spawned.admin)).await, 200);
        let public = spawned.public.clone();
        spawned.stop().await.unwrap();
        // Stopped: the public listener no longer answers.
        assert!(http.get(format!("{public}/healthz")).send().await.is_err());
    }
}
