//! A fleet of real `booking serve --stack redis` OS processes
//! (`scenarios rehearse --fleet processes`): a private `redis-server` (a
//! free loopback port, `--appendonly yes`, its own temporary directory), the
//! mock gateway in this process, and N booking instances on free loopback
//! ports, each started from a config file of its own (the same sale, Redis
//! URL, key prefix and settings; a random `admin_token`, so the `/ops/`
//! routes need credentials). Each instance's stdout and stderr go to
//! `instance-<i>.log` in the run folder, the Redis server's to `redis.log`.
//!
//! The rehearsal drives them exactly as it drives a remote target: the ops
//! steps (reset, load-candidates, open, close, status, audit) over HTTP, with
//! the token, to one instance (the first one no kill names, so the reset's
//! stamp survives the kills), the load spread over all of them. Kills
//! ([`crate::kills`]) SIGKILL an instance and start it again on the same
//! port with the same config.
//!
//! Every process started here is stopped when the rehearsal ends: by
//! [`ProcessFleet::stop`] (SIGKILL and wait), and on failure, panic or
//! Ctrl-C by dropping the [`ProcessFleet`] (each child is `kill_on_drop`,
//! and the drop sends SIGKILL to those it can reach).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use booking::SaleId;
use booking_server::config::{ServerConfig, StackKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use booking_server::config::FaultsConfig;

use crate::conductor::{Conductor, FleetControl, InstanceHandle, Links, TERM_MAX, instance_label};
use crate::fleet::{Fleet, FleetError, rehearsal_config};
use crate::kills::{BoxFuture, KillDriver, Restartable};
use crate::profile::{FleetKind, Profile, Webhooks};
use crate::rehearse::{self, Extras, Outcome, Progress, RehearseError, RunPlace};

/// How long a booking instance may take to answer `GET /healthz` after it
/// was started (a debug build on a busy machine is slow to start).
pub const START_MAX: Duration = Duration::from_secs(60);
/// How often a starting instance is asked.
pub const ANSWER_POLL: Duration = Duration::from_millis(25);
/// How long the private `redis-server` may take to answer `PING`.
pub const REDIS_START_MAX: Duration = Duration::from_secs(10);
/// Ports tried for `redis-server` (another process may take a free port
/// between finding it and the server binding it).
pub const REDIS_ATTEMPTS: u32 = 3;
/// Lines of an instance's log quoted when it fails.
pub const LOG_TAIL_LINES: usize = 20;
/// The `booking` binary's name.
pub const BOOKING_BIN: &str = "booking";

/// Why the process fleet could not start or be driven.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The booking binary is missing.
    #[error(
        "the booking binary {0} does not exist: build it with `cargo build -p booking-server --bin booking` (with --release for target/release), or give --booking-bin PATH"
    )]
    NoBinary(PathBuf),
    /// `redis-server` is not installed.
    #[error("redis-server is not on PATH: run scripts/setup (it installs redis-server)")]
    NoRedis,
    /// The private `redis-server` did not come up.
    #[error("redis-server: {0}")]
    Redis(String),
    /// A file or a process could not be made.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    /// An instance's configuration could not be written.
    #[error("instance config: {0}")]
    Config(String),
    /// An instance did not start or answer.
    #[error("instance {index} ({url}): {why}; log {log}:\n{tail}")]
    Instance {
        /// Which instance.
        index: usize,
        /// Its base URL.
        url: String,
        /// What went wrong.
        why: String,
        /// Its log file.
        log: String,
        /// The last lines of its log.
        tail: String,
    },
    /// The fleet view (mock gateway, ops client) could not be made.
    #[error(transparent)]
    Fleet(#[from] FleetError),
    /// The profile cannot describe a process fleet.
    #[error("invalid process fleet: {0}")]
    Invalid(String),
}

/// The `booking` binary next to the running executable (`target/<profile>/`;
/// from a test, the executable is in `target/<profile>/deps/`).
pub fn default_booking_bin() -> Result<PathBuf, ProcessError> {
    let exe = std::env::current_exe()
        .map_err(|e| ProcessError::Io("finding the running executable".into(), e))?;
    let dir = exe
        .parent()
        .ok_or_else(|| ProcessError::Invalid(format!("{} has no folder", exe.display())))?;
    let dir = if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().unwrap_or(dir)
    } else {
        dir
    };
    Ok(dir.join(format!("{BOOKING_BIN}{}", std::env::consts::EXE_SUFFIX)))
}

/// The booking binary `profile` names, or [`default_booking_bin`]; an error
/// saying how to build it if it is missing.
pub fn booking_bin(profile: &Profile) -> Result<PathBuf, ProcessError> {
    let bin = match &profile.booking_bin {
        Some(b) => b.clone(),
        None => default_booking_bin()?,
    };
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(ProcessError::NoBinary(bin))
    }
}

/// A free loopback port (the listener is dropped: the process that takes it
/// binds it again).
fn free_port() -> Result<u16, ProcessError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| ProcessError::Io("finding a free port".into(), e))
}

fn log_file(path: &Path, header: &str) -> Result<(Stdio, Stdio), ProcessError> {
    let io = |e| ProcessError::Io(format!("opening {}", path.display()), e);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io)?;
    writeln!(
        f,
        "--- sellout: {header} at {} ---",
        chrono::Utc::now().to_rfc3339()
    )
    .map_err(io)?;
    let err = f.try_clone().map_err(io)?;
    Ok((Stdio::from(f), Stdio::from(err)))
}

/// The last [`LOG_TAIL_LINES`] lines of a log.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

/// Whether something answers `PING` with `PONG` on `port`.
async fn redis_pings(port: u16) -> bool {
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        s.write_all(b"PING\r\n").await.ok()?;
        let mut answer = [0u8; 7];
        s.read_exact(&mut answer).await.ok()?;
        Some(&answer == b"+PONG\r\n")
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(500), attempt).await,
        Ok(Some(true))
    )
}

/// The private `redis-server`.
#[derive(Debug)]
struct RedisProcess {
    child: Option<Child>,
    port: u16,
    data_dir: PathBuf,
    log: PathBuf,
    aof: bool,
    starts: u32,
}

impl RedisProcess {
    /// Starts a server on a free port (`aof`: with an append-only file,
    /// fsync every second; else no persistence at all).
    async fn start(data_dir: &Path, log: &Path, aof: bool) -> Result<RedisProcess, ProcessError> {
        std::fs::create_dir_all(data_dir)
            .map_err(|e| ProcessError::Io(format!("creating {}", data_dir.display()), e))?;
        let mut last = String::new();
        for _ in 0..REDIS_ATTEMPTS {
            let mut redis = RedisProcess {
                child: None,
                port: free_port()?,
                data_dir: data_dir.to_owned(),
                log: log.to_owned(),
                aof,
                starts: 0,
            };
            match redis.spawn().await {
                Ok(()) => return Ok(redis),
                Err(ProcessError::Redis(why)) => last = why,
                Err(e) => return Err(e),
            }
        }
        Err(ProcessError::Redis(format!(
            "did not start in {REDIS_ATTEMPTS} attempts: {last}; see {}",
            log.display()
        )))
    }

    /// Starts the server on its port and data directory and waits for
    /// `PONG` (it replays its append-only file first, if it keeps one).
    async fn spawn(&mut self) -> Result<(), ProcessError> {
        self.starts += 1;
        let port = self.port;
        let (out, err) = log_file(
            &self.log,
            &format!("redis-server on port {port}, start #{}", self.starts),
        )?;
        let persistence: &[&str] = if self.aof {
            &["--appendonly", "yes", "--appendfsync", "everysec"]
        } else {
            &["--appendonly", "no"]
        };
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(persistence)
            .args(["--save", ""])
            .arg("--dir")
            .arg(&self.data_dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ProcessError::NoRedis);
            }
            Err(e) => return Err(ProcessError::Io("starting redis-server".into(), e)),
        };
        self.child = Some(child);
        let started = Instant::now();
        loop {
            if redis_pings(port).await {
                tracing::info!(
                    port,
                    aof = self.aof,
                    start = self.starts,
                    "private redis-server answers"
                );
                return Ok(());
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return Err(ProcessError::Redis(format!(
                    "exited with {status} (port {port} taken?)"
                )));
            }
            if started.elapsed() > REDIS_START_MAX {
                self.kill().await;
                return Err(ProcessError::Redis(format!(
                    "no PONG on port {port} within {REDIS_START_MAX:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL, and waits for it to be gone.
    async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }
}

/// One booking instance.
#[derive(Debug)]
struct Proc {
    index: usize,
    url: String,
    config: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    starts: u32,
}

/// The drain notice of the fleet's instances (`booking serve
/// --drain-notice-ms`): the load's balancer marks an instance down at its
/// first `503 draining` (or refused connection), so the notice a load
/// balancer polling `/readyz` needs (`booking_server::run::DRAIN_NOTICE`)
/// would only delay the restart a schedule asked for.
pub const FLEET_DRAIN_NOTICE: Duration = Duration::from_millis(250);

impl Proc {
    fn failed(&self, why: impl Into<String>) -> ProcessError {
        ProcessError::Instance {
            index: self.index,
            url: self.url.clone(),
            why: why.into(),
            log: self.log.display().to_string(),
            tail: tail(&self.log),
        }
    }

    fn spawn(&mut self, bin: &Path) -> Result<(), ProcessError> {
        self.starts += 1;
        let (out, err) = log_file(
            &self.log,
            &format!("instance {} start #{}", self.index, self.starts),
        )?;
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .arg("--config")
            .arg(&self.config)
            .arg("--drain-notice-ms")
            .arg(FLEET_DRAIN_NOTICE.as_millis().to_string())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .env("NO_COLOR", "1")
            .kill_on_drop(true);
        // the config file says everything: no SELLOUT_* of the caller's
        // environment overrides it
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("SELLOUT_") {
                cmd.env_remove(key);
            }
        }
        let child = cmd
            .spawn()
            .map_err(|e| self.failed(format!("starting {}: {e}", bin.display())))?;
        self.child = Some(child);
        Ok(())
    }

    async fn kill(&mut self) -> Result<(), ProcessError> {
        if let Some(mut child) = self.child.take() {
            child
                .kill()
                .await
                .map_err(|e| self.failed(format!("SIGKILL: {e}")))?;
        }
        Ok(())
    }

    /// `Err` if the process has exited.
    fn still_running(&mut self) -> Result<(), ProcessError> {
        let exited = match self.child.as_mut() {
            None => Some("not running".to_owned()),
            Some(c) => match c.try_wait() {
                Ok(Some(status)) => Some(format!("exited with {status}")),
                Ok(None) => None,
                Err(e) => Some(format!("cannot be waited for: {e}")),
            },
        };
        match exited {
            Some(why) => Err(self.failed(why)),
            None => Ok(()),
        }
    }
}

/// The instances, shared with the kill driver.
#[derive(Debug)]
struct Instances {
    bin: PathBuf,
    procs: Vec<tokio::sync::Mutex<Proc>>,
    urls: Vec<String>,
    /// The admin listeners' base URLs, by index.
    admin_urls: Vec<String>,
    http: reqwest::Client,
}

impl Instances {
    async fn answers(&self, i: usize) -> bool {
        self.http
            .get(format!("{}/healthz", self.urls[i]))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    }

    /// Waits until instance `i` answers `GET /healthz`, at most
    /// [`START_MAX`]; fails at once if it exits.
    async fn wait_answering(&self, i: usize) -> Result<Duration, ProcessError> {
        let started = Instant::now();
        loop {
            if self.answers(i).await {
                return Ok(started.elapsed());
            }
            let mut p = self.procs[i].lock().await;
            p.still_running()?;
            if started.elapsed() > START_MAX {
                return Err(p.failed(format!("did not answer within {START_MAX:?}")));
            }
            drop(p);
            tokio::time::sleep(ANSWER_POLL).await;
        }
    }

    async fn kill_all(&self) {
        for p in &self.procs {
            let mut p = p.lock().await;
            if let Err(e) = p.kill().await {
                tracing::warn!(error = %e, "stopping an instance");
            }
        }
    }
}

impl Restartable for Instances {
    fn kill(&self, i: usize) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let mut p = self.procs[i].lock().await;
            p.kill().await.map_err(|e| e.to_string())
        })
    }

    fn restart(&self, i: usize) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let mut p = self.procs[i].lock().await;
            p.spawn(&self.bin).map_err(|e| e.to_string())
        })
    }

    fn wait_answering(&self, i: usize) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            Instances::wait_answering(self, i)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
    }

    fn instances(&self) -> usize {
        self.procs.len()
    }
}

/// Sends `sig` to the process `pid`.
fn signal(pid: Option<u32>, sig: nix::sys::signal::Signal) -> Result<(), String> {
    let pid = pid.ok_or_else(|| format!("{sig}: the process is not running"))?;
    let pid = i32::try_from(pid).map_err(|_| format!("{sig}: pid {pid} out of range"))?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).map_err(|e| format!("{sig}: {e}"))
}

/// SIGSTOP to pause, SIGCONT to resume.
fn stop_or_continue(stop: bool) -> nix::sys::signal::Signal {
    if stop {
        nix::sys::signal::Signal::SIGSTOP
    } else {
        nix::sys::signal::Signal::SIGCONT
    }
}

/// The fleet's processes as the fault conductor acts on them.
#[derive(Debug)]
struct Control {
    instances: Arc<Instances>,
    redis: Arc<tokio::sync::Mutex<RedisProcess>>,
}

impl Control {
    /// Instance `i`'s process id, if it runs.
    async fn pid(&self, i: usize) -> Option<u32> {
        self.instances.procs[i]
            .lock()
            .await
            .child
            .as_ref()
            .and_then(Child::id)
    }
}

impl FleetControl for Control {
    fn instances(&self) -> usize {
        self.instances.procs.len()
    }

    fn kill(&self, i: usize) -> BoxFuture<'_, Result<(), String>> {
        Restartable::kill(&*self.instances, i)
    }

    fn terminate(&self, i: usize) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let pid = self.pid(i).await;
            signal(pid, nix::sys::signal::Signal::SIGTERM)?;
            if !self.wait_exit(i, TERM_MAX).await? {
                tracing::warn!(
                    instance = i,
                    "did not exit on SIGTERM within {TERM_MAX:?}: SIGKILL"
                );
            }
            Restartable::kill(&*self.instances, i).await
        })
    }

    fn pause(&self, i: usize, stop: bool) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let pid = self.pid(i).await;
            signal(pid, stop_or_continue(stop))
        })
    }

    fn wait_exit(&self, i: usize, max: Duration) -> BoxFuture<'_, Result<bool, String>> {
        Box::pin(async move {
            let until = Instant::now() + max;
            loop {
                {
                    let mut p = self.instances.procs[i].lock().await;
                    match p.child.as_mut().map(|c| c.try_wait()) {
                        None => return Ok(true),
                        Some(Ok(Some(status))) => {
                            tracing::info!(instance = i, %status, "instance exited");
                            p.child = None;
                            return Ok(true);
                        }
                        Some(Ok(None)) => {}
                        Some(Err(e)) => return Err(format!("waiting for instance {i}: {e}")),
                    }
                }
                if Instant::now() >= until {
                    return Ok(false);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    }

    fn start(&self, i: usize) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            Restartable::restart(&*self.instances, i).await?;
            Restartable::wait_answering(&*self.instances, i).await
        })
    }

    fn pause_redis(&self, stop: bool) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { signal(self.redis.lock().await.pid(), stop_or_continue(stop)) })
    }

    fn kill_redis(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            self.redis.lock().await.kill().await;
            Ok(())
        })
    }

    fn start_redis(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            self.redis
                .lock()
                .await
                .spawn()
                .await
                .map_err(|e| e.to_string())
        })
    }
}

/// The processes of a rehearsal: the private `redis-server` and the booking
/// instances. Dropping it kills them all.
#[derive(Debug)]
pub struct ProcessFleet {
    instances: Arc<Instances>,
    redis: Option<Arc<tokio::sync::Mutex<RedisProcess>>>,
    /// The proxies of the links a fault schedule faults.
    links: Option<Links>,
    /// The schedule, its name and the instances' admin token, for the
    /// conductor.
    faults: Option<(String, faults::Schedule)>,
    admin_token: String,
    mock_url: String,
    /// Configs and Redis data; removed at the end.
    work: PathBuf,
    logs: Vec<String>,
    ops: usize,
}

/// The instance the ops steps go to: the first no kill names (its `reset`
/// stamp then survives the run), else the first.
pub fn ops_instance(profile: &Profile) -> usize {
    (0..profile.instances)
        .find(|i| !profile.kills.iter().any(|k| k.instance == *i))
        .unwrap_or(0)
}

/// The configuration instance `url` runs with (`listen` on `port`).
fn instance_config(
    profile: &Profile,
    base: &ServerConfig,
    port: u16,
    admin_port: u16,
    url: &str,
) -> Result<ServerConfig, ProcessError> {
    let mut c = base.clone();
    c.listen = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    c.admin_listen = std::net::SocketAddr::from(([127, 0, 0, 1], admin_port));
    c.public_url = url.to_owned();
    c.validate()
        .map_err(|e| ProcessError::Config(format!("{e} (profile {})", profile.name)))?;
    Ok(c)
}

impl ProcessFleet {
    /// Starts `profile`'s process fleet, logging into `log_dir` (the run
    /// folder), and the [`Fleet`] the rehearsal drives it through. On any
    /// failure everything started so far is stopped.
    pub async fn start(
        profile: &Profile,
        log_dir: &Path,
    ) -> Result<(ProcessFleet, Fleet), ProcessError> {
        if profile.fleet != FleetKind::Processes || profile.stack.kind == StackKind::Embedded {
            return Err(ProcessError::Invalid(
                "the profile must say fleet = \"processes\" and stack.kind = \"redis\" or \"aws\""
                    .into(),
            ));
        }
        if profile.instances == 0 {
            return Err(ProcessError::Invalid("no instances".into()));
        }
        let bin = booking_bin(profile)?;
        let sale =
            SaleId::parse(&profile.sale).map_err(|e| ProcessError::Invalid(e.to_string()))?;
        let work =
            std::env::temp_dir().join(format!("sellout-fleet-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&work)
            .map_err(|e| ProcessError::Io(format!("creating {}", work.display()), e))?;
        std::fs::create_dir_all(log_dir)
            .map_err(|e| ProcessError::Io(format!("creating {}", log_dir.display()), e))?;
        let mut fleet = ProcessFleet {
            instances: Arc::new(Instances {
                bin: bin.clone(),
                procs: Vec::new(),
                urls: Vec::new(),
                admin_urls: Vec::new(),
                http: reqwest::Client::builder()
                    .timeout(Duration::from_secs(2))
                    .no_proxy()
                    .build()
                    .map_err(|e| ProcessError::Invalid(format!("http client: {e}")))?,
            }),
            redis: None,
            links: None,
            faults: profile
                .fault_schedule()
                .map_err(|e| ProcessError::Invalid(e.to_string()))?,
            admin_token: String::new(),
            mock_url: String::new(),
            work,
            logs: vec!["redis.log".to_owned()],
            ops: ops_instance(profile),
        };
        // on an error from here on, dropping `fleet` stops what was started
        let redis = RedisProcess::start(
            &fleet.work.join("redis"),
            &log_dir.join("redis.log"),
            profile.redis_aof
                && !profile
                    .bugs
                    .contains(&booking::Bug::RedisWithoutPersistence),
        )
        .await?;
        let redis_port = redis.port;
        fleet.redis = Some(Arc::new(tokio::sync::Mutex::new(redis)));

        let ports = (0..profile.instances)
            .map(|_| free_port())
            .collect::<Result<Vec<u16>, _>>()?;
        let urls: Vec<String> = ports
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}"))
            .collect();
        let admin_ports = (0..profile.instances)
            .map(|_| free_port())
            .collect::<Result<Vec<u16>, _>>()?;
        let admin_urls: Vec<String> = admin_ports
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}"))
            .collect();
        let ops_url = urls[fleet.ops].clone();

        let mock_config = mock_gateway::Config {
            seed: profile.seed,
            // one webhook endpoint, as a load balancer would be: the ops
            // instance's (no kill names it when another is left)
            webhook_urls: if profile.webhooks == Webhooks::Always {
                vec![format!("{ops_url}/payment/webhook")]
            } else {
                Vec::new()
            },
            signature_version: 2,
            ..mock_gateway::Config::default()
        };
        let topic = mock_config.topic_arn.clone();
        let mock = crate::fleet::start_mock(mock_config, profile.webhooks)
            .await
            .map_err(FleetError::from)?;

        let admin_token = format!(
            "{:016x}{:016x}",
            rand::random::<u64>(),
            rand::random::<u64>()
        );
        let mut base = rehearsal_config(
            profile,
            &sale,
            profile.stack.kind,
            format!("redis://127.0.0.1:{redis_port}"),
            &mock,
            topic,
        );
        if profile.stack.kind == StackKind::Aws {
            // fresh resources per run, as the in-process fleet makes them;
            // the instances reach AWS (or the local servers) through the
            // standard configuration they inherit (AWS_ENDPOINT_URL_*, …)
            base.stack.aws.prefix = base.key_prefix.clone();
            booking_server::provision(&base, false)
                .await
                .map_err(|e| ProcessError::Invalid(format!("provisioning: {e}")))?;
        }
        // the mail server (`--mail smtp|ses`), its Maildir and log in the
        // run folder; the fleet view below owns it (on an error before,
        // dropping it stops it)
        let mail = crate::mail::MailServer::start(profile, log_dir)
            .await
            .map_err(FleetError::from)?;
        if let Some(m) = &mail {
            m.configure(&mut base.mail);
        }
        base.admin_token = Some(admin_token.clone());
        fleet.admin_token = admin_token.clone();
        fleet.mock_url = mock.url.clone();
        {
            // the links the schedule faults (or every link, with the
            // toxiproxy API asked for) go through proxies
            fleet.links = Links::start(
                fleet.faults.as_ref().map(|(_, s)| s),
                Some(std::net::SocketAddr::from(([127, 0, 0, 1], redis_port))),
                mock.addr,
                profile.links_api,
            )
            .await
            .map_err(ProcessError::Invalid)?;
            if let Some(links) = &fleet.links {
                if let Some(url) = &links.redis_url {
                    base.stack.redis_url = url.clone();
                }
                if let Some(url) = &links.gateway_url {
                    base.gateway.base_url = url.clone();
                }
            }
        }

        let mut procs = Vec::with_capacity(profile.instances);
        for (index, (port, url)) in ports.iter().zip(&urls).enumerate() {
            let mut config = instance_config(profile, &base, *port, admin_ports[index], url)?;
            if let Some((_, schedule)) = &fleet.faults {
                config.faults = Some(FaultsConfig {
                    instance: instance_label(index),
                    seed: profile.seed,
                    schedule: schedule.clone(),
                });
            }
            let text = toml::to_string(&config).map_err(|e| ProcessError::Config(e.to_string()))?;
            // what the instance will read is what was meant
            let back = ServerConfig::from_toml(&text)
                .map_err(|e| ProcessError::Config(format!("reading it back: {e}")))?;
            if back != config {
                return Err(ProcessError::Config(
                    "the written config does not read back the same".into(),
                ));
            }
            let path = fleet.work.join(format!("instance-{index}.toml"));
            std::fs::write(&path, text)
                .map_err(|e| ProcessError::Io(format!("writing {}", path.display()), e))?;
            let log = format!("instance-{index}.log");
            fleet.logs.push(log.clone());
            procs.push(tokio::sync::Mutex::new(Proc {
                index,
                url: url.clone(),
                config: path,
                log: log_dir.join(log),
                child: None,
                starts: 0,
            }));
        }
        fleet.instances = Arc::new(Instances {
            bin,
            procs,
            urls: urls.clone(),
            admin_urls: admin_urls.clone(),
            http: fleet.instances.http.clone(),
        });
        for p in &fleet.instances.procs {
            p.lock().await.spawn(&fleet.instances.bin)?;
        }
        for (i, url) in urls.iter().enumerate() {
            let took = fleet.instances.wait_answering(i).await?;
            tracing::info!(instance = i, %url, took_ms = took.as_millis() as u64, "booking instance answers");
        }

        // the rehearsal sees a remote target with a token, the mock in
        // process (its ledger and webhooks), every instance to load
        let mut view = profile.clone();
        view.target = Some(ops_url.clone());
        view.target_admin = Some(admin_urls[fleet.ops].clone());
        view.target_gateway = Some(mock.url.clone());
        view.target_admin_token = Some(admin_token);
        let mut driven = Fleet::start(&view).await?;
        let mut order = vec![ops_url];
        order.extend(
            urls.iter()
                .enumerate()
                .filter(|(i, _)| *i != fleet.ops)
                .map(|(_, u)| u.clone()),
        );
        driven.booking_urls = order;
        let mut admin_order = vec![admin_urls[fleet.ops].clone()];
        admin_order.extend(
            admin_urls
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != fleet.ops)
                .map(|(_, u)| u.clone()),
        );
        driven.admin_urls = admin_order;
        driven.mock = Some(mock);
        driven.mail = mail;
        driven.stack_name = "redis-processes".to_owned();
        Ok((fleet, driven))
    }

    /// The instances' base URLs, by index.
    pub fn urls(&self) -> &[String] {
        &self.instances.urls
    }

    /// The instances' admin listeners' base URLs, by index.
    pub fn admin_urls(&self) -> &[String] {
        &self.instances.admin_urls
    }

    /// The instances' ports, by index.
    pub fn ports(&self) -> Vec<u16> {
        self.instances
            .urls
            .iter()
            .filter_map(|u| u.rsplit(':').next()?.parse().ok())
            .collect()
    }

    /// The private `redis-server`'s port.
    pub async fn redis_port(&self) -> Option<u16> {
        match &self.redis {
            Some(r) => Some(r.lock().await.port),
            None => None,
        }
    }

    /// The fault conductor of the profile's schedule, if it has one.
    pub fn conductor(&self) -> Result<Option<Conductor>, ProcessError> {
        let (Some((name, schedule)), Some(redis)) = (&self.faults, &self.redis) else {
            return Ok(None);
        };
        let control: Arc<dyn FleetControl> = Arc::new(Control {
            instances: self.instances.clone(),
            redis: redis.clone(),
        });
        let handles = self
            .instances
            .urls
            .iter()
            .enumerate()
            .zip(&self.instances.admin_urls)
            .map(|((i, url), admin_url)| InstanceHandle {
                label: instance_label(i),
                url: url.clone(),
                admin_url: admin_url.clone(),
            })
            .collect();
        Conductor::new(
            name.clone(),
            schedule.clone(),
            Some(control),
            self.links.clone(),
            Some(self.mock_url.clone()),
            handles,
            Some(self.admin_token.clone()),
        )
        .map(Some)
        .map_err(ProcessError::Invalid)
    }

    /// The instance the ops steps go to.
    pub fn ops_index(&self) -> usize {
        self.ops
    }

    /// The log files in the run folder, by name.
    pub fn log_files(&self) -> &[String] {
        &self.logs
    }

    /// The instances as the kill driver sees them.
    pub fn restartable(&self) -> Arc<dyn Restartable> {
        self.instances.clone()
    }

    /// Stops every process (SIGKILL, then waits for each) and removes the
    /// configs and Redis data.
    pub async fn stop(mut self) {
        self.instances.kill_all().await;
        if let Some(r) = self.redis.take() {
            r.lock().await.kill().await;
        }
        let _ = std::fs::remove_dir_all(&self.work);
        tracing::info!("process fleet stopped");
    }
}

impl Drop for ProcessFleet {
    /// Failure, panic or Ctrl-C: SIGKILL to every process it can reach now
    /// (the rest are `kill_on_drop`).
    fn drop(&mut self) {
        for p in &self.instances.procs {
            if let Ok(mut p) = p.try_lock()
                && let Some(c) = p.child.as_mut()
            {
                let _ = c.start_kill();
                let _ = c.try_wait();
            }
        }
        if let Some(r) = self.redis.as_ref()
            && let Ok(mut r) = r.try_lock()
            && let Some(c) = r.child.as_mut()
        {
            let _ = c.start_kill();
            let _ = c.try_wait();
        }
        let _ = std::fs::remove_dir_all(&self.work);
    }
}

/// Rehearses on a started process fleet (with `profile`'s kills), then
/// stops the fleet and the processes, also when the rehearsal failed.
pub async fn run(
    processes: ProcessFleet,
    fleet: Fleet,
    profile: &Profile,
    progress: Progress,
    place: RunPlace,
) -> Result<Outcome, RehearseError> {
    let extras = KillDriver::new(profile.kills.clone(), processes.restartable())
        .map_err(ProcessError::Invalid)
        .and_then(|driver| {
            Ok(Extras {
                kills: Some(driver),
                conductor: processes.conductor()?,
                files: [processes.log_files(), &fleet.files()].concat(),
                shard: None,
            })
        });
    // on any error, the fleet and the processes are stopped all the same
    let outcome = match extras {
        Ok(extras) => rehearse::run_with(&fleet, profile, progress, place, Some(extras)).await,
        Err(e) => Err(e.into()),
    };
    fleet.stop().await;
    processes.stop().await;
    outcome
}

/// `scenarios rehearse --fleet processes`: starts the process fleet,
/// rehearses (with the kills), stops everything.
pub async fn rehearse(profile: &Profile, progress: Progress) -> Result<Outcome, RehearseError> {
    let place = RunPlace::new(profile)?;
    if progress == Progress::Lines {
        eprintln!(
            "starting {} `booking serve --stack redis` process(es) on a private redis-server; logs in {}",
            profile.instances,
            place.dir.display()
        );
    }
    let (processes, fleet) = ProcessFleet::start(profile, &place.dir).await?;
    run(processes, fleet, profile, progress, place).await
}
