//! Redis Cluster mode: the URL that asks for it, and the connection every
//! Redis adapter's pool hands out on either kind of deployment.
//!
//! A URL `redis+cluster://host:port,host:port,…` (or `rediss+cluster://`)
//! names a cluster by some of its nodes (the seeds; one is enough, the
//! client learns the rest with `CLUSTER SLOTS`). Every other URL is one
//! server, as before. Credentials before the host list apply to every seed
//! (`redis+cluster://user:secret@h1:7000,h2:7000`); a cluster has only
//! database 0, so a path other than `/` or `/0` is refused.
//!
//! On a cluster each pooled connection is a
//! [`redis::cluster_async::ClusterConnection`]: one multiplexed link per
//! primary, each command sent to the node that owns its key's slot. Every key
//! of one sale carries the sale's hash tag (`{sale:<id>}`, see
//! [`crate::keys::sale_key`]), so a sale's keys share one slot and each
//! script (which names every key it touches in `KEYS`) and each pipeline runs
//! on one node; different sales spread over the shards. The gateway token's
//! keys carry their own tag (`{gateway}`), and each is used alone.
//!
//! What differs from one server:
//! - The client follows `MOVED`/`ASK` redirects (a resharding, a failover)
//!   and reconnects, retrying a call at most [`CLUSTER_RETRIES`] times within
//!   the call's response bound ([`crate::ledger::RESPONSE_MAX`]). A retry
//!   after a dropped answer may run a script twice; every script checks
//!   before it writes, so the repeat answers as a caller's own retry would
//!   (`holding`, `no_match`, a failed condition, a deduplicated send).
//! - It repairs its own links, so the bug zoo's
//!   `ignore_lost_redis_connection` (a pool that keeps failed connections)
//!   has nothing to break there; the zoo runs it on one server.
//! - `SCRIPT LOAD` goes to every primary, so a script is loaded everywhere
//!   at connect; a node that lost it gets it again on `NOSCRIPT`.

use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::io::tcp::TcpSettings;
use redis::{
    AsyncConnectionConfig, Client, Cmd, ErrorKind, IntoConnectionInfo, Pipeline, RedisError,
    RedisFuture, Value,
};

/// Retries of one call on a cluster (a redirect, a reconnect), all within the
/// call's response bound.
pub const CLUSTER_RETRIES: u32 = 2;
/// The shortest and the longest pause before a cluster retries a call that
/// asked it to wait (`TRYAGAIN`, `CLUSTERDOWN`): short, as the whole call
/// has [`crate::ledger::RESPONSE_MAX`].
pub const CLUSTER_RETRY_WAIT_MS: (u64, u64) = (10, 200);

/// Every socket's TCP settings: no Nagle delay. The pool's calls share a
/// socket ([`crate::pool`]), so a write usually finds earlier ones not yet
/// acknowledged, and Nagle's algorithm (the `redis` crate leaves it on)
/// would hold it back until their acknowledgement: a round trip (and a
/// delayed ACK) added to calls behind a link with latency.
fn tcp() -> TcpSettings {
    TcpSettings::default().set_nodelay(true)
}

/// The URL schemes that ask for cluster mode, and the scheme each seed gets.
const CLUSTER_SCHEMES: [(&str, &str); 2] =
    [("redis+cluster", "redis"), ("rediss+cluster", "rediss")];

/// Where a Redis URL points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One server (`redis://…`, or any URL the `redis` crate opens).
    Server(String),
    /// A cluster, by its seed nodes, each a `redis://` (or `rediss://`) URL.
    Cluster(Vec<String>),
}

/// Why a cluster URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterUrlError {
    /// No `host:port` in the list, or an empty one between commas.
    #[error("cluster URL {0:?} names no node (redis+cluster://host:port,host:port)")]
    NoNode(String),
    /// A database other than 0: a cluster has one.
    #[error("cluster URL {0:?} names a database: a Redis Cluster has only database 0")]
    Database(String),
}

impl Target {
    /// Reads `url`: a `redis+cluster://` or `rediss+cluster://` URL is a
    /// cluster; anything else is one server (checked when it is opened).
    pub fn parse(url: &str) -> Result<Target, ClusterUrlError> {
        let Some((rest, seed_scheme)) = CLUSTER_SCHEMES.iter().find_map(|(scheme, seed)| {
            url.strip_prefix(scheme)
                .and_then(|r| r.strip_prefix("://"))
                .map(|r| (r, *seed))
        }) else {
            return Ok(Target::Server(url.to_owned()));
        };
        // hosts end at the path or the query; credentials end at the last '@'
        let (authority, tail) = rest
            .find(['/', '?'])
            .map_or((rest, ""), |i| rest.split_at(i));
        let (path, query) = tail.split_once('?').map_or((tail, ""), |(p, q)| (p, q));
        if !matches!(path, "" | "/" | "/0") {
            return Err(ClusterUrlError::Database(url.to_owned()));
        }
        let (userinfo, hosts) = authority
            .rsplit_once('@')
            .map_or(("", authority), |(u, h)| (u, h));
        let credentials = if userinfo.is_empty() {
            String::new()
        } else {
            format!("{userinfo}@")
        };
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("/0?{query}")
        };
        let seeds: Vec<String> = hosts
            .split(',')
            .map(|host| {
                if host.is_empty() {
                    Err(ClusterUrlError::NoNode(url.to_owned()))
                } else {
                    Ok(format!("{seed_scheme}://{credentials}{host}{query}"))
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Target::Cluster(seeds))
    }
}

/// Whether `url` asks for cluster mode.
pub fn is_cluster_url(url: &str) -> bool {
    matches!(Target::parse(url), Ok(Target::Cluster(_)) | Err(_))
}

/// Opens connections of the kind the URL asks for.
#[derive(Clone)]
pub enum Opener {
    /// One server: a multiplexed connection per pooled connection.
    Server {
        /// The server.
        client: Client,
        /// The timeouts.
        config: AsyncConnectionConfig,
    },
    /// A cluster: a cluster connection (one link per primary) per pooled
    /// connection.
    Cluster {
        /// The cluster, by its seeds, with the timeouts and retries.
        client: ClusterClient,
        /// The seeds, for logs.
        seeds: Vec<String>,
    },
}

impl Opener {
    /// An opener for `url` (one server or a cluster) with these timeouts: a
    /// connect may take `connect_max`, one call `response_max` (on a
    /// cluster, redirects and retries included).
    pub fn new(
        url: &str,
        connect_max: Duration,
        response_max: Duration,
    ) -> Result<Opener, RedisError> {
        match Target::parse(url).map_err(|e| {
            RedisError::from((
                ErrorKind::InvalidClientConfig,
                "invalid cluster URL",
                e.to_string(),
            ))
        })? {
            Target::Server(url) => Ok(Opener::Server {
                client: Client::open(url.as_str().into_connection_info()?.set_tcp_settings(tcp()))?,
                config: AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(connect_max))
                    .set_response_timeout(Some(response_max)),
            }),
            Target::Cluster(seeds) => {
                let (wait_min, wait_max) = CLUSTER_RETRY_WAIT_MS;
                let client = ClusterClient::builder(seeds.iter().map(String::as_str))
                    .connection_timeout(connect_max)
                    .response_timeout(response_max)
                    .retries(CLUSTER_RETRIES)
                    .min_retry_wait(wait_min)
                    .max_retry_wait(wait_max)
                    .tcp_settings(tcp())
                    .build()?;
                Ok(Opener::Cluster { client, seeds })
            }
        }
    }

    /// Opens one connection.
    pub async fn open(&self) -> Result<Link, RedisError> {
        match self {
            Opener::Server { client, config } => Ok(Link::Server(
                client
                    .get_multiplexed_async_connection_with_config(config)
                    .await?,
            )),
            Opener::Cluster { client, .. } => {
                Ok(Link::Cluster(client.get_async_connection().await?))
            }
        }
    }

    /// Where it connects, for logs: `host:port`, or the seeds.
    pub fn describe(&self) -> String {
        match self {
            Opener::Server { client, .. } => client.get_connection_info().addr().to_string(),
            Opener::Cluster { seeds, .. } => {
                let hosts: Vec<&str> = seeds
                    .iter()
                    .map(|s| {
                        let s = s.split_once("://").map_or(s.as_str(), |(_, r)| r);
                        let s = s.rsplit_once('@').map_or(s, |(_, h)| h);
                        s.split(['/', '?']).next().unwrap_or(s)
                    })
                    .collect();
                format!("cluster {}", hosts.join(","))
            }
        }
    }

    /// Whether it opens cluster connections.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Opener::Cluster { .. })
    }
}

impl std::fmt::Debug for Opener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// One open connection: to one server, or to a cluster.
#[derive(Clone)]
pub enum Link {
    /// A multiplexed connection to one server.
    Server(MultiplexedConnection),
    /// A cluster connection, routing each command by its key's slot.
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Link::Server(_) => "Link::Server",
            Link::Cluster(_) => "Link::Cluster",
        })
    }
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::Server(c) => c.req_packed_command(cmd),
            Link::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Server(c) => c.req_packed_commands(cmd, offset, count),
            Link::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Server(c) => c.get_db(),
            Link::Cluster(c) => c.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(url: &str) -> Vec<String> {
        match Target::parse(url) {
            Ok(Target::Cluster(seeds)) => seeds,
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn a_cluster_url_names_its_seeds_each_a_redis_url() {
        assert_eq!(
            cluster("redis+cluster://127.0.0.1:7101,127.0.0.1:7102"),
            ["redis://127.0.0.1:7101", "redis://127.0.0.1:7102"]
        );
        assert_eq!(cluster("redis+cluster://h:1/"), ["redis://h:1"]);
        assert_eq!(cluster("redis+cluster://h:1/0"), ["redis://h:1"]);
        assert_eq!(
            cluster("rediss+cluster://user:pw@a:1,b:2?protocol=resp3"),
            [
                "rediss://user:pw@a:1/0?protocol=resp3",
                "rediss://user:pw@b:2/0?protocol=resp3"
            ]
        );
        assert!(is_cluster_url("redis+cluster://h:1"));
    }

    #[test]
    fn every_other_url_is_one_server() {
        for url in [
            "redis://127.0.0.1:6379",
            "redis://h/2",
            "unix:///tmp/r.sock",
            "nonsense",
        ] {
            assert_eq!(Target::parse(url), Ok(Target::Server(url.to_owned())));
            assert!(!is_cluster_url(url));
        }
    }

    #[test]
    fn a_cluster_url_without_a_node_or_with_a_database_is_refused() {
        for url in [
            "redis+cluster://",
            "redis+cluster://a:1,,b:2",
            "redis+cluster://a:1,",
        ] {
            assert_eq!(
                Target::parse(url),
                Err(ClusterUrlError::NoNode(url.to_owned())),
                "{url}"
            );
        }
        assert_eq!(
            Target::parse("redis+cluster://a:1/3"),
            Err(ClusterUrlError::Database(
                "redis+cluster://a:1/3".to_owned()
            ))
        );
        assert!(
            Opener::new(
                "redis+cluster://a:1/3",
                Duration::from_secs(1),
                Duration::from_secs(1)
            )
            .is_err()
        );
    }

    #[test]
    fn the_opener_follows_the_url() {
        let d = Duration::from_secs(1);
        let one = Opener::new("redis://127.0.0.1:6379", d, d).unwrap_or_else(|e| panic!("{e}"));
        assert!(!one.is_cluster());
        assert_eq!(one.describe(), "127.0.0.1:6379");
        let many = Opener::new("redis+cluster://u:p@127.0.0.1:7101,127.0.0.1:7102", d, d)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(many.is_cluster());
        assert_eq!(many.describe(), "cluster 127.0.0.1:7101,127.0.0.1:7102");
    }
}
