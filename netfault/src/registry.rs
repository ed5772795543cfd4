//! [`Netfault`]: the proxies by name, and every operation on them that the
//! HTTP API offers, free of HTTP.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::NetfaultError;
use crate::addr::parse_listen;
use crate::proxy::{Proxy, ProxyPatch, ProxySpec, lock};
use crate::stats::ProxyStats;
use crate::toxic::Toxic;

/// A proxy as toxiproxy's API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProxyInfo {
    /// Its name.
    pub name: String,
    /// Where it listens: the real address (port 0 resolved) once it has
    /// listened.
    pub listen: String,
    /// Where it connects clients to.
    pub upstream: String,
    /// Whether it listens.
    pub enabled: bool,
    /// Its toxics, upstream ones first.
    #[serde(default)]
    pub toxics: Vec<Toxic>,
}

/// The registry of proxies. Cheap to clone: clones share the proxies.
#[derive(Debug, Clone)]
pub struct Netfault {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    proxies: Mutex<BTreeMap<String, Arc<Proxy>>>,
    allow_remote: bool,
}

impl Default for Netfault {
    fn default() -> Netfault {
        Netfault::new()
    }
}

impl Netfault {
    /// No proxies; proxies may listen on loopback addresses only.
    pub fn new() -> Netfault {
        Netfault::with_remote_listen(false)
    }

    /// No proxies; with `allow` true proxies may listen on any address
    /// (the binary's `--allow-remote`), else on loopback only.
    pub fn with_remote_listen(allow: bool) -> Netfault {
        Netfault {
            inner: Arc::new(Inner {
                proxies: Mutex::new(BTreeMap::new()),
                allow_remote: allow,
            }),
        }
    }

    fn find(&self, name: &str) -> Result<Arc<Proxy>, NetfaultError> {
        lock(&self.inner.proxies)
            .get(name)
            .cloned()
            .ok_or(NetfaultError::ProxyNotFound)
    }

    /// Creates a proxy and, if `spec.enabled`, binds its listen address
    /// (port 0: a free port; the answer's `listen` has the real one).
    /// 409 if the name is taken; nothing changes on any error.
    pub async fn create(&self, spec: ProxySpec) -> Result<ProxyInfo, NetfaultError> {
        self.create_now(&spec, None)
    }

    fn create_now(&self, spec: &ProxySpec, at: Option<usize>) -> Result<ProxyInfo, NetfaultError> {
        spec.check(at, self.inner.allow_remote)?;
        let mut proxies = lock(&self.inner.proxies);
        if proxies.contains_key(&spec.name) {
            return Err(NetfaultError::ProxyExists);
        }
        let proxy = Arc::new(Proxy::new(spec));
        if spec.enabled {
            proxy.start(self.inner.allow_remote)?;
        }
        proxies.insert(spec.name.clone(), proxy.clone());
        Ok(proxy.info())
    }

    /// The proxy named `name`.
    pub fn get(&self, name: &str) -> Option<ProxyInfo> {
        self.find(name).ok().map(|p| p.info())
    }

    /// Every proxy, by name.
    pub fn list(&self) -> Vec<ProxyInfo> {
        let proxies: Vec<Arc<Proxy>> = lock(&self.inner.proxies).values().cloned().collect();
        proxies.iter().map(|p| p.info()).collect()
    }

    /// Changes a proxy as toxiproxy's update does: a new listen or upstream
    /// restarts it (dropping its connections); then it is enabled or
    /// disabled as asked.
    pub async fn update(&self, name: &str, patch: ProxyPatch) -> Result<ProxyInfo, NetfaultError> {
        let allow_remote = self.inner.allow_remote;
        let proxy = self.find(name)?;
        let _one_at_a_time = proxy.lifecycle.lock().await;
        let current = proxy.settings();
        if current.deleted {
            return Err(NetfaultError::ProxyNotFound);
        }
        let listen = patch.listen.unwrap_or_else(|| current.listen.clone());
        let upstream = patch.upstream.unwrap_or_else(|| current.upstream.clone());
        let enabled = patch.enabled.unwrap_or(current.enabled);
        if upstream.is_empty() {
            return Err(NetfaultError::MissingField("upstream".to_owned()));
        }
        parse_listen(&listen, allow_remote)?;
        if !proxy.same_target(&listen, &upstream) {
            proxy.stop().await;
            proxy.retarget(listen, upstream);
        }
        match (enabled, proxy.settings().enabled) {
            (true, false) => proxy.start(allow_remote)?,
            (false, true) => proxy.stop().await,
            _ => {}
        }
        Ok(proxy.info())
    }

    /// Disabled: the listener is closed (connections are refused) and every
    /// open connection is dropped before this returns. Enabled again: the
    /// same address and port.
    pub async fn set_enabled(&self, name: &str, enabled: bool) -> Result<ProxyInfo, NetfaultError> {
        let patch = ProxyPatch {
            enabled: Some(enabled),
            ..ProxyPatch::default()
        };
        self.update(name, patch).await
    }

    /// Stops the proxy (its connections dropped) and forgets it.
    pub async fn delete(&self, name: &str) -> Result<(), NetfaultError> {
        let proxy = self.find(name)?;
        self.retire(&proxy).await
    }

    async fn retire(&self, proxy: &Arc<Proxy>) -> Result<(), NetfaultError> {
        let _one_at_a_time = proxy.lifecycle.lock().await;
        if proxy.settings().deleted {
            return Err(NetfaultError::ProxyNotFound);
        }
        proxy.mark_deleted();
        proxy.stop().await;
        let mut proxies = lock(&self.inner.proxies);
        if proxies
            .get(&proxy.name)
            .is_some_and(|p| Arc::ptr_eq(p, proxy))
        {
            proxies.remove(&proxy.name);
        }
        Ok(())
    }

    /// toxiproxy's `/populate`: every spec is checked first (a bad one
    /// changes nothing); then each proxy is created, kept if one of that
    /// name has the same listen and upstream, or replaced if it differs.
    /// Returns the proxies made or kept, and the error that stopped it.
    pub async fn populate(&self, specs: Vec<ProxySpec>) -> (Vec<ProxyInfo>, Option<NetfaultError>) {
        for (i, spec) in specs.iter().enumerate() {
            if let Err(e) = spec.check(Some(i), self.inner.allow_remote) {
                return (Vec::new(), Some(e));
            }
        }
        let mut done = Vec::with_capacity(specs.len());
        for spec in &specs {
            if let Ok(existing) = self.find(&spec.name) {
                if existing.same_target(&spec.listen, &spec.upstream) {
                    done.push(existing.info());
                    continue;
                }
                // gone already (deleted meanwhile) is as good as retired
                let _ = self.retire(&existing).await;
            }
            match self.create_now(spec, None) {
                Ok(info) => done.push(info),
                Err(e) => return (done, Some(e)),
            }
        }
        (done, None)
    }

    /// Adds a toxic; it applies to new and already open connections.
    pub fn add_toxic(&self, proxy: &str, toxic: Toxic) -> Result<Toxic, NetfaultError> {
        self.find(proxy)?.add_toxic(toxic)
    }

    /// Updates a toxic's attributes (and toxicity). `attributes` is the
    /// attributes object (`{"latency": 500}`) or a toxiproxy update body
    /// (`{"attributes": {..}, "toxicity": 0.5}`); what it leaves out stays.
    pub fn update_toxic(
        &self,
        proxy: &str,
        name: &str,
        attributes: serde_json::Value,
    ) -> Result<Toxic, NetfaultError> {
        self.find(proxy)?.update_toxic(name, &attributes)
    }

    /// Removes a toxic; open connections stop feeling it at once.
    pub fn remove_toxic(&self, proxy: &str, name: &str) -> Result<(), NetfaultError> {
        self.find(proxy)?.remove_toxic(name)
    }

    /// A proxy's toxics, upstream ones first.
    pub fn toxics(&self, proxy: &str) -> Result<Vec<Toxic>, NetfaultError> {
        Ok(self.find(proxy)?.toxics())
    }

    /// One toxic of a proxy.
    pub fn toxic(&self, proxy: &str, name: &str) -> Result<Toxic, NetfaultError> {
        self.find(proxy)?.toxic(name)
    }

    /// toxiproxy's `POST /reset`: every proxy enabled, every toxic removed.
    /// A proxy that cannot listen again is logged and left disabled.
    pub async fn reset(&self) {
        if let Err(e) = self.reset_checked().await {
            tracing::warn!(error = %e, "reset: a proxy could not be enabled");
        }
    }

    /// [`Netfault::reset`], answering the first proxy that failed to listen.
    pub(crate) async fn reset_checked(&self) -> Result<(), NetfaultError> {
        let proxies: Vec<Arc<Proxy>> = lock(&self.inner.proxies).values().cloned().collect();
        let mut first_error = None;
        for proxy in proxies {
            let _one_at_a_time = proxy.lifecycle.lock().await;
            if proxy.settings().deleted {
                continue;
            }
            if let Err(e) = proxy.start(self.inner.allow_remote) {
                first_error.get_or_insert(e);
            }
            proxy.clear_toxics();
        }
        first_error.map_or(Ok(()), Err)
    }

    /// What the proxy named `name` has done so far.
    pub fn stats(&self, name: &str) -> Option<ProxyStats> {
        self.find(name).ok().map(|p| p.counters.snapshot())
    }

    /// The toxiproxy-shaped HTTP API over this registry.
    pub fn router(&self) -> axum::Router {
        crate::api::router(self.clone())
    }
}
