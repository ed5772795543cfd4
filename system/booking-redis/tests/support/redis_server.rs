//! A `redis-server` of the test's own, on a free loopback port, killed on
//! drop. Shared by booking-redis's integration tests and `admission_rate`
//! example, booking-api's test harness and `bookings_rate` example, and
//! booking-server's end-to-end test (`#[path]`-included, so it needs nothing
//! but std).
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
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
