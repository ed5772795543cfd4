//! One proxy: its settings, its toxics, and while enabled its listener with
//! the accept loop that owns every connection it accepted.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};

use crate::addr::{DEFAULT_LISTEN, parse_listen};
use crate::chain::{Chains, ToxicEntry};
use crate::connection;
use crate::stats::Counters;
use crate::toxic::{self, Stream, Toxic};
use crate::{NetfaultError, ProxyInfo};

/// Connections one proxy holds open at most; past it, new clients are
/// closed at once (a runaway client must not exhaust the process's files).
const CONNECTIONS_MAX: usize = 4096;

/// The listen backlog.
const BACKLOG: u32 = 1024;

/// After a failed accept (out of file descriptors, say), wait this long
/// before trying again rather than spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// What a proxy is asked to be: toxiproxy's proxy JSON (`name`, `listen`,
/// `upstream`, `enabled`), as `POST /proxies`, `/populate` and `--config`
/// take it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxySpec {
    /// Unique; required.
    #[serde(default)]
    pub name: String,
    /// `ip:port` (port 0: any free port); loopback unless remote listening
    /// is allowed. Default `127.0.0.1:0`.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// `host:port` the proxy connects each client to; required.
    #[serde(default)]
    pub upstream: String,
    /// Whether it listens at once (default true).
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn default_listen() -> String {
    DEFAULT_LISTEN.to_owned()
}

fn yes() -> bool {
    true
}

impl ProxySpec {
    /// An enabled proxy named `name` to `upstream`, on a free loopback port.
    pub fn new(name: impl Into<String>, upstream: impl Into<String>) -> ProxySpec {
        ProxySpec {
            name: name.into(),
            listen: default_listen(),
            upstream: upstream.into(),
            enabled: true,
        }
    }

    /// Checks the required fields; `at` names the proxy in a list (as
    /// toxiproxy's `/populate` errors do).
    pub(crate) fn check(&self, at: Option<usize>, allow_remote: bool) -> Result<(), NetfaultError> {
        let place = at.map_or_else(String::new, |i| format!(" at proxy {}", i + 1));
        if self.name.is_empty() {
            return Err(NetfaultError::MissingField(format!("name{place}")));
        }
        if self.upstream.is_empty() {
            return Err(NetfaultError::MissingField(format!("upstream{place}")));
        }
        parse_listen(&self.listen, allow_remote).map(|_| ())
    }
}

/// A change to a proxy: toxiproxy's `POST /proxies/{name}` body; what is
/// left out stays.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyPatch {
    /// A new listen address (the proxy restarts on it).
    #[serde(default)]
    pub listen: Option<String>,
    /// A new upstream (the proxy restarts; open connections drop).
    #[serde(default)]
    pub upstream: Option<String>,
    /// Enable or disable.
    #[serde(default)]
    pub enabled: Option<bool>,
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // the data behind these locks stays consistent at every step, so a
    // panic elsewhere leaves nothing half-done to fear
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub listen: String,
    pub upstream: String,
    pub enabled: bool,
    pub deleted: bool,
}

#[derive(Debug)]
struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// One proxy.
#[derive(Debug)]
pub(crate) struct Proxy {
    pub name: String,
    settings: Mutex<Settings>,
    running: Mutex<Option<Running>>,
    /// Held across enable, disable, update and delete, one at a time.
    pub lifecycle: tokio::sync::Mutex<()>,
    /// In the order they were added.
    toxics: Mutex<Vec<Arc<ToxicEntry>>>,
    next_id: AtomicU64,
    chain: watch::Sender<Arc<Chains>>,
    chain_rx: watch::Receiver<Arc<Chains>>,
    pub counters: Arc<Counters>,
}

impl Proxy {
    pub fn new(spec: &ProxySpec) -> Proxy {
        let (chain, chain_rx) = watch::channel(Arc::new(Chains::default()));
        Proxy {
            name: spec.name.clone(),
            settings: Mutex::new(Settings {
                listen: spec.listen.clone(),
                upstream: spec.upstream.clone(),
                enabled: false,
                deleted: false,
            }),
            running: Mutex::new(None),
            lifecycle: tokio::sync::Mutex::new(()),
            toxics: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
            chain,
            chain_rx,
            counters: Arc::new(Counters::default()),
        }
    }

    pub fn settings(&self) -> Settings {
        lock(&self.settings).clone()
    }

    pub fn info(&self) -> ProxyInfo {
        let s = self.settings();
        ProxyInfo {
            name: self.name.clone(),
            listen: s.listen,
            upstream: s.upstream,
            enabled: s.enabled,
            toxics: self.toxics(),
        }
    }

    /// Whether listen and upstream are those of `spec` (toxiproxy's
    /// `Differs`, negated).
    pub fn same_target(&self, listen: &str, upstream: &str) -> bool {
        let s = self.settings();
        let same_listen = match (parse_listen(&s.listen, true), parse_listen(listen, true)) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        same_listen && s.upstream == upstream
    }

    pub fn retarget(&self, listen: String, upstream: String) {
        let mut s = lock(&self.settings);
        s.listen = listen;
        s.upstream = upstream;
    }

    pub fn mark_deleted(&self) {
        lock(&self.settings).deleted = true;
    }

    /// Binds the listen address and starts accepting; nothing if running.
    pub fn start(&self, allow_remote: bool) -> Result<(), NetfaultError> {
        let mut running = lock(&self.running);
        if running.is_some() {
            return Ok(());
        }
        let Settings {
            listen, upstream, ..
        } = self.settings();
        let addr = parse_listen(&listen, allow_remote)?;
        let listener = bind(addr).map_err(|source| NetfaultError::Bind {
            listen: listen.clone(),
            source,
        })?;
        let local = listener.local_addr()?;
        {
            let mut s = lock(&self.settings);
            s.listen = local.to_string();
            s.enabled = true;
        }
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(accept_loop(
            listener,
            stopped,
            self.name.clone(),
            upstream.clone(),
            self.chain_rx.clone(),
            self.counters.clone(),
        ));
        *running = Some(Running { stop, task });
        tracing::info!(proxy = %self.name, listen = %local, %upstream, "started proxy");
        Ok(())
    }

    /// Closes the listener and drops every open connection; returns once
    /// they are gone.
    pub async fn stop(&self) {
        let running = lock(&self.running).take();
        lock(&self.settings).enabled = false;
        if let Some(Running { stop, task }) = running {
            let _ = stop.send(());
            if let Err(e) = task.await {
                tracing::warn!(proxy = %self.name, error = %e, "accept loop failed");
            }
            tracing::info!(proxy = %self.name, "terminated proxy");
        }
    }

    /// Its toxics, upstream ones first (toxiproxy's order).
    pub fn toxics(&self) -> Vec<Toxic> {
        let list = lock(&self.toxics);
        [Stream::Upstream, Stream::Downstream]
            .into_iter()
            .flat_map(|stream| {
                list.iter()
                    .filter(move |e| e.toxic.stream == stream)
                    .map(|e| e.toxic.clone())
            })
            .collect()
    }

    pub fn toxic(&self, name: &str) -> Result<Toxic, NetfaultError> {
        lock(&self.toxics)
            .iter()
            .find(|e| e.toxic.name == name)
            .map(|e| e.toxic.clone())
            .ok_or(NetfaultError::ToxicNotFound)
    }

    fn publish(&self, list: &[Arc<ToxicEntry>]) {
        self.chain.send_replace(Arc::new(Chains::of(list)));
    }

    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn add_toxic(&self, toxic: Toxic) -> Result<Toxic, NetfaultError> {
        let toxic = toxic.validated()?;
        let mut list = lock(&self.toxics);
        if list.iter().any(|e| e.toxic.name == toxic.name) {
            return Err(NetfaultError::ToxicExists);
        }
        let id = self.next_id();
        list.push(Arc::new(ToxicEntry {
            id,
            revision: id,
            toxic: toxic.clone(),
        }));
        self.publish(&list);
        Ok(toxic)
    }

    pub fn update_toxic(
        &self,
        name: &str,
        changes: &serde_json::Value,
    ) -> Result<Toxic, NetfaultError> {
        let mut list = lock(&self.toxics);
        let index = list
            .iter()
            .position(|e| e.toxic.name == name)
            .ok_or(NetfaultError::ToxicNotFound)?;
        let next = toxic::updated(&list[index].toxic, changes)?;
        list[index] = Arc::new(ToxicEntry {
            id: list[index].id,
            revision: self.next_id(),
            toxic: next.clone(),
        });
        self.publish(&list);
        Ok(next)
    }

    pub fn remove_toxic(&self, name: &str) -> Result<(), NetfaultError> {
        let mut list = lock(&self.toxics);
        let index = list
            .iter()
            .position(|e| e.toxic.name == name)
            .ok_or(NetfaultError::ToxicNotFound)?;
        list.remove(index);
        self.publish(&list);
        Ok(())
    }

    pub fn clear_toxics(&self) {
        let mut list = lock(&self.toxics);
        list.clear();
        self.publish(&list);
    }
}

fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // the same port again at once after a disable, despite TIME_WAIT
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Accepts clients until stopped; then closes the listener and drops every
/// connection it accepted.
async fn accept_loop(
    listener: TcpListener,
    mut stop: oneshot::Receiver<()>,
    name: String,
    upstream: String,
    chain: watch::Receiver<Arc<Chains>>,
    counters: Arc<Counters>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((client, peer)) => {
                    if connections.len() >= CONNECTIONS_MAX {
                        tracing::warn!(proxy = %name, %peer, "too many connections: closing the new one");
                        continue;
                    }
                    connections.spawn(connection::serve(
                        client,
                        peer,
                        upstream.clone(),
                        chain.clone(),
                        counters.clone(),
                    ));
                }
                Err(e) => {
                    tracing::warn!(proxy = %name, error = %e, "error while accepting client");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    while connections.try_join_next().is_some() {}
    counters.dropped_on_disable(connections.len() as u64);
    connections.shutdown().await;
}
