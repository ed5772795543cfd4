//! A `redis-server` of the test's own, on a free loopback port, killed on
//! drop. Shared by booking-redis's integration tests and `admission_rate`
//! example, booking-api's test harness and `bookings_rate` example, and
//! booking-server's end-to-end test (`#[path]`-included, so it needs nothing
//! but std).
//!
//! [`RedisCluster`]: a three-shard Redis Cluster for the tests that run the
//! adapters on one: the one `SELLOUT_REDIS_CLUSTER` names (`scripts/test`
//! points it at the cluster `scripts/setup` started), else a private one on
//! free loopback ports, shared by the tests of one binary that run at once
//! and stopped when the last of them drops it. [`RedisTarget`] is either
//! kind, for a fixture that runs on both.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a fresh server may take to answer `PING`.
const START_MAX: Duration = Duration::from_secs(10);
/// Ports tried before giving up (another process may take the free port
/// between finding it and the server binding it).
const START_ATTEMPTS_MAX: u32 = 5;

/// A running `redis-server`, killed (and reaped) on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    port: u16,
    /// Extra arguments, after the defaults (a later one wins).
    args: Vec<String>,
    /// The working directory of a server started with extra arguments
    /// (where an append-only file or snapshot goes), removed on drop.
    dir: Option<PathBuf>,
}

impl RedisServer {
    /// Starts one without persistence (`--save "" --appendonly no`). Panics
    /// with the way to fix it if `redis-server` is missing: these tests never
    /// skip.
    pub fn start() -> RedisServer {
        RedisServer::launch(Vec::new(), None)
    }

    /// Starts one with `args` after the defaults, which they override (e.g.
    /// `["--appendonly", "yes"]`), in a directory of its own under the
    /// system's temporary directory, so an append-only file or snapshot
    /// goes there (and [`RedisServer::restart`] reloads it).
    pub fn start_with(args: &[&str]) -> RedisServer {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir =
            std::env::temp_dir().join(format!("redis-server-test-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory for redis-server");
        RedisServer::launch(args.iter().map(|a| (*a).to_owned()).collect(), Some(dir))
    }

    fn launch(args: Vec<String>, dir: Option<PathBuf>) -> RedisServer {
        let mut last_failure = String::new();
        for _ in 0..START_ATTEMPTS_MAX {
            let port = free_port();
            let mut server = RedisServer {
                child: spawn(port, &args, dir.as_ref()),
                port,
                args: args.clone(),
                dir: dir.clone(),
            };
            match server.wait_ready() {
                Ok(()) => return server,
                Err(e) => last_failure = e,
            }
        }
        if let Some(dir) = &dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        panic!("redis-server did not start in {START_ATTEMPTS_MAX} attempts: {last_failure}");
    }

    /// Kills it (SIGKILL) and starts it again on the same port with the same
    /// arguments: one from [`RedisServer::start`] comes back empty (no data,
    /// no scripts); one from [`RedisServer::start_with`] reloads what its
    /// persistence kept in its directory.
    pub fn restart(&mut self) {
        self.kill();
        self.child = spawn(self.port, &self.args, self.dir.as_ref());
        self.wait_ready()
            .expect("redis-server restarts on its port");
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills it now (to test what an unreachable server does).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let started = Instant::now();
        while started.elapsed() < START_MAX {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                return Err(format!("exited with {status} (port {} taken?)", self.port));
            }
            if ping(self.port) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        Err(format!("no PONG within {START_MAX:?}"))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn spawn(port: u16, extra: &[String], dir: Option<&PathBuf>) -> Child {
    let mut command = Command::new("redis-server");
    command
        .args(["--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no"])
        .args(["--bind", "127.0.0.1"]);
    if let Some(dir) = dir {
        command.arg("--dir").arg(dir);
    }
    match command
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("redis-server is not on PATH: run scripts/setup (it installs redis-server)")
        }
        Err(e) => panic!("could not start redis-server: {e}"),
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut answer = [0u8; 7];
    stream.read_exact(&mut answer).is_ok() && &answer == b"+PONG\r\n"
}

/// The environment variable naming a running cluster for the tests
/// (`redis+cluster://host:port,…`); unset, each test binary starts its own.
pub const CLUSTER_ENV: &str = "SELLOUT_REDIS_CLUSTER";
/// Shards of a private cluster.
pub const CLUSTER_SHARDS: usize = 3;
/// How long a private cluster may take to agree on its slots.
const CLUSTER_FORM_MAX: Duration = Duration::from_secs(20);

/// A three-shard Redis Cluster: a private one (three `redis-server
/// --cluster-enabled yes` of the test's own, no replicas, killed on drop), or
/// the running one [`CLUSTER_ENV`] names.
#[derive(Debug)]
pub struct RedisCluster {
    /// The primaries' `host:port`.
    addrs: Vec<String>,
    /// A private cluster's servers (empty for a named one).
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// The cluster [`CLUSTER_ENV`] names, or else a private one shared by
    /// every test of this binary that holds it at the time (stopped when the
    /// last drops it; a later test starts another).
    pub fn shared() -> Arc<RedisCluster> {
        static SHARED: Mutex<Weak<RedisCluster>> = Mutex::new(Weak::new());
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(cluster) = shared.upgrade() {
            return cluster;
        }
        let cluster = Arc::new(match std::env::var(CLUSTER_ENV) {
            Ok(url) if !url.is_empty() => RedisCluster::named(&url),
            _ => RedisCluster::start(),
        });
        *shared = Arc::downgrade(&cluster);
        cluster
    }

    /// The running cluster at `url` (`redis+cluster://host:port,…`), checked.
    pub fn named(url: &str) -> RedisCluster {
        let hosts = url
            .strip_prefix("redis+cluster://")
            .unwrap_or_else(|| panic!("{CLUSTER_ENV}={url:?} is not redis+cluster://host:port,…"));
        let seed = hosts.split(',').next().unwrap_or_default().to_owned();
        let info = command(&seed, &["CLUSTER", "INFO"])
            .unwrap_or_else(|e| panic!("{CLUSTER_ENV}={url:?}: {seed} does not answer: {e}"));
        assert!(
            info.text().contains("cluster_state:ok"),
            "{CLUSTER_ENV}={url:?}: the cluster is not ok: {info:?}"
        );
        RedisCluster {
            addrs: primaries_via(&seed),
            nodes: Vec::new(),
        }
    }

    /// Starts a private cluster: [`CLUSTER_SHARDS`] servers on free ports
    /// (their cluster bus on free ports too), the slots split evenly, no
    /// replicas, no persistence; returns once every node says
    /// `cluster_state:ok`. Panics with the way to fix it if `redis-server` is
    /// missing.
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..CLUSTER_SHARDS)
            .map(|_| RedisServer::cluster_node())
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let per = 16_384 / CLUSTER_SHARDS;
        for (i, addr) in addrs.iter().enumerate() {
            let first = i * per;
            let last = if i + 1 == CLUSTER_SHARDS {
                16_383
            } else {
                first + per - 1
            };
            command(
                addr,
                &[
                    "CLUSTER",
                    "ADDSLOTSRANGE",
                    &first.to_string(),
                    &last.to_string(),
                ],
            )
            .and_then(Reply::ok)
            .unwrap_or_else(|e| panic!("CLUSTER ADDSLOTSRANGE on {addr}: {e}"));
        }
        let first = nodes[0].port().to_string();
        // the bus is not on port + 10000 (which may not exist): say where
        let bus = nodes[0]
            .args
            .windows(2)
            .find(|w| w[0] == "--cluster-port")
            .map(|w| w[1].clone())
            .expect("a cluster node's bus port");
        for addr in &addrs[1..] {
            command(addr, &["CLUSTER", "MEET", "127.0.0.1", &first, &bus])
                .and_then(Reply::ok)
                .unwrap_or_else(|e| panic!("CLUSTER MEET on {addr}: {e}"));
        }
        let started = Instant::now();
        let known = format!("cluster_known_nodes:{CLUSTER_SHARDS}");
        loop {
            let ready = addrs.iter().all(|addr| {
                command(addr, &["CLUSTER", "INFO"]).is_ok_and(|info| {
                    let info = info.text();
                    info.contains("cluster_state:ok") && info.contains(&known)
                })
            });
            if ready {
                break;
            }
            assert!(
                started.elapsed() < CLUSTER_FORM_MAX,
                "the private cluster did not form within {CLUSTER_FORM_MAX:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        RedisCluster { addrs, nodes }
    }

    /// `redis+cluster://<every primary>`.
    pub fn url(&self) -> String {
        format!("redis+cluster://{}", self.addrs.join(","))
    }

    /// The primaries' `host:port`.
    pub fn primaries(&self) -> &[String] {
        &self.addrs
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`).
    pub fn slot(&self, key: &str) -> u16 {
        match command(&self.addrs[0], &["CLUSTER", "KEYSLOT", key]) {
            Ok(Reply::Int(n)) => u16::try_from(n).unwrap(),
            other => panic!("CLUSTER KEYSLOT {key}: {other:?}"),
        }
    }

    /// The primary (`host:port`) that serves `slot` now.
    pub fn owner(&self, slot: u16) -> String {
        let Ok(Reply::Array(ranges)) = command(&self.addrs[0], &["CLUSTER", "SLOTS"]) else {
            panic!("CLUSTER SLOTS did not answer a list");
        };
        for range in ranges {
            let Reply::Array(range) = range else { continue };
            match range.as_slice() {
                [Reply::Int(lo), Reply::Int(hi), Reply::Array(primary), ..]
                    if (*lo..=*hi).contains(&i64::from(slot)) =>
                {
                    if let [host, Reply::Int(port), ..] = primary.as_slice() {
                        return format!("{}:{port}", host.text());
                    }
                }
                _ => {}
            }
        }
        panic!("no primary serves slot {slot}")
    }

    /// Sale ids `<stem>-<n>`, one whose hash tag (`{sale:<id>}`) lands on
    /// each primary, in the order of [`RedisCluster::primaries`].
    pub fn sales_on_every_shard(&self, stem: &str) -> Vec<String> {
        let mut found: Vec<Option<String>> = vec![None; self.addrs.len()];
        for n in 0..1_000 {
            let sale = format!("{stem}-{n}");
            let owner = self.owner(self.slot(&format!("{{sale:{sale}}}")));
            let i = self.addrs.iter().position(|a| *a == owner).unwrap();
            if found[i].is_none() {
                found[i] = Some(sale);
            }
            if found.iter().all(Option::is_some) {
                return found.into_iter().flatten().collect();
            }
        }
        panic!("no sale ids spread over every shard in 1,000 tries")
    }

    /// Checks that every key under `prefix`, on whichever primary, carries
    /// one hash tag and lives on the primary that serves that tag's slot;
    /// returns how many keys each tag has.
    pub fn keys_by_tag(&self, prefix: &str) -> std::collections::BTreeMap<String, usize> {
        let mut by_tag = std::collections::BTreeMap::new();
        for addr in &self.addrs {
            for key in self.keys_on(addr, prefix) {
                let tag = key
                    .split_once('{')
                    .and_then(|(_, rest)| rest.split_once('}'))
                    .map(|(tag, _)| tag.to_owned())
                    .unwrap_or_else(|| panic!("{key} carries no hash tag"));
                let slot = self.slot(&format!("{{{tag}}}"));
                assert_eq!(self.slot(&key), slot, "{key}");
                assert_eq!(self.owner(slot), *addr, "{key} on {addr}");
                *by_tag.entry(tag).or_insert(0) += 1;
            }
        }
        by_tag
    }

    /// The keys on primary `addr` that start with `prefix` (`SCAN` on that
    /// node alone: a cluster scans node by node).
    pub fn keys_on(&self, addr: &str, prefix: &str) -> Vec<String> {
        let pattern = format!("{prefix}*");
        let mut cursor = "0".to_owned();
        let mut keys = Vec::new();
        loop {
            let reply = command(addr, &["SCAN", &cursor, "MATCH", &pattern, "COUNT", "1000"])
                .unwrap_or_else(|e| panic!("SCAN on {addr}: {e}"));
            let Reply::Array(parts) = reply else {
                panic!("SCAN on {addr}: {reply:?}")
            };
            let [next, Reply::Array(page)] = parts.as_slice() else {
                panic!("SCAN on {addr}: {parts:?}")
            };
            keys.extend(page.iter().map(Reply::text));
            cursor = next.text();
            if cursor == "0" {
                keys.sort();
                return keys;
            }
        }
    }
}

/// The primaries a cluster node knows (`CLUSTER SLOTS`), sorted.
fn primaries_via(seed: &str) -> Vec<String> {
    let Ok(Reply::Array(ranges)) = command(seed, &["CLUSTER", "SLOTS"]) else {
        panic!("CLUSTER SLOTS on {seed} did not answer a list");
    };
    let mut primaries: Vec<String> = ranges
        .iter()
        .filter_map(|range| match range {
            Reply::Array(r) => match r.get(2) {
                Some(Reply::Array(p)) => match p.as_slice() {
                    [host, Reply::Int(port), ..] => Some(format!("{}:{port}", host.text())),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        })
        .collect();
    primaries.sort();
    primaries.dedup();
    primaries
}

/// Where a fixture's Redis runs: a private server, or a cluster.
#[derive(Debug)]
pub enum RedisTarget {
    /// A `redis-server` of the fixture's own.
    Server(RedisServer),
    /// A cluster ([`RedisCluster::shared`]).
    Cluster(Arc<RedisCluster>),
}

impl RedisTarget {
    /// A private server.
    pub fn server() -> RedisTarget {
        RedisTarget::Server(RedisServer::start())
    }

    /// The shared cluster.
    pub fn cluster() -> RedisTarget {
        RedisTarget::Cluster(RedisCluster::shared())
    }

    /// Its URL (`redis://…` or `redis+cluster://…`).
    pub fn url(&self) -> String {
        match self {
            RedisTarget::Server(s) => s.url(),
            RedisTarget::Cluster(c) => c.url(),
        }
    }

    /// A key prefix no other test used on it, of this run or an earlier one
    /// (a named cluster outlives test runs): `<stem>-<pid>-<time>-<n>`.
    pub fn prefix(&self, stem: &str) -> String {
        unique_prefix(stem)
    }
}

/// `<stem>-<pid>-<ns since the epoch, hex>-<n>`: unique across processes and
/// runs.
pub fn unique_prefix(stem: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(
        "{stem}-{}-{:x}-{n}",
        std::process::id(),
        nanos & 0xffff_ffff_ffff
    )
}

impl RedisServer {
    /// A cluster-enabled server on a free port, its cluster bus on another
    /// free port, in a directory of its own (its `nodes.conf`), no slots yet.
    fn cluster_node() -> RedisServer {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let mut last_failure = String::new();
        for attempt in 0..START_ATTEMPTS_MAX {
            let dir = std::env::temp_dir().join(format!(
                "redis-cluster-test-{}-{nanos}-{attempt}-{}",
                std::process::id(),
                free_port()
            ));
            std::fs::create_dir_all(&dir).expect("a directory for a cluster node");
            let bus = free_port().to_string();
            let args: Vec<String> = ["--cluster-enabled", "yes", "--cluster-port", &bus]
                .iter()
                .map(|a| (*a).to_owned())
                .collect();
            let port = free_port();
            let mut server = RedisServer {
                child: spawn(port, &args, Some(&dir)),
                port,
                args,
                dir: Some(dir),
            };
            match server.wait_ready() {
                Ok(()) => return server,
                Err(e) => last_failure = e,
            }
        }
        panic!("a cluster node did not start in {START_ATTEMPTS_MAX} attempts: {last_failure}");
    }
}

/// One RESP reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+…` or a bulk string.
    Text(String),
    /// A nil bulk string or array.
    Nil,
    /// `:…`.
    Int(i64),
    /// `*…`.
    Array(Vec<Reply>),
}

impl Reply {
    /// The text of a string or number reply ("" for others).
    pub fn text(&self) -> String {
        match self {
            Reply::Text(s) => s.clone(),
            Reply::Int(n) => n.to_string(),
            _ => String::new(),
        }
    }

    fn ok(self) -> Result<(), String> {
        match self {
            Reply::Text(s) if s == "OK" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    }
}

/// Sends one command to `addr` (`host:port`) on a connection of its own and
/// reads the answer (an error reply is `Err`).
pub fn command(addr: &str, args: &[&str]) -> Result<Reply, String> {
    let stream = TcpStream::connect(addr).map_err(|e| format!("{addr}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut packed = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        packed.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    (&stream).write_all(&packed).map_err(|e| e.to_string())?;
    read_reply(&mut BufReader::new(&stream))
}

fn read_reply(r: &mut impl BufRead) -> Result<Reply, String> {
    let mut line = String::new();
    r.read_line(&mut line).map_err(|e| e.to_string())?;
    let line = line.trim_end_matches("\r\n");
    let (kind, rest) = line.split_at(line.len().min(1));
    let number = || {
        rest.parse::<i64>()
            .map_err(|_| format!("bad reply line {line:?}"))
    };
    match kind {
        "+" => Ok(Reply::Text(rest.to_owned())),
        "-" => Err(rest.to_owned()),
        ":" => Ok(Reply::Int(number()?)),
        "$" => {
            let Ok(n) = usize::try_from(number()?) else {
                return Ok(Reply::Nil);
            };
            let mut bytes = vec![0; n + 2];
            r.read_exact(&mut bytes).map_err(|e| e.to_string())?;
            bytes.truncate(n);
            Ok(Reply::Text(String::from_utf8_lossy(&bytes).into_owned()))
        }
        "*" => {
            let Ok(n) = usize::try_from(number()?) else {
                return Ok(Reply::Nil);
            };
            (0..n)
                .map(|_| read_reply(r))
                .collect::<Result<_, _>>()
                .map(Reply::Array)
        }
        _ => Err(format!("unexpected reply line {line:?}")),
    }
}
