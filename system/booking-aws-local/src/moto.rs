//! moto's server (SQS, S3, and a DynamoDB without TTL expiry) from the
//! project's venv, on a free loopback port: one per test process, started
//! on first use, stopped when the process ends.
//!
//! `scripts/setup` installs it (`scripts/requirements-aws.txt`). A watchdog
//! shell beside it kills it when the process that started it is gone, so a
//! test binary that exits leaves no server behind.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long moto may take to answer.
pub const START_MAX: Duration = Duration::from_secs(60);
/// Ports tried before giving up.
pub const START_ATTEMPTS_MAX: u32 = 3;

/// A running moto server.
#[derive(Debug)]
pub struct Moto {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    child: Child,
}

/// The `moto_server` to run: `$SELLOUT_MOTO_SERVER`, else the repository's
/// `.venv/bin/moto_server`.
pub fn moto_server_path() -> PathBuf {
    if let Some(p) = std::env::var_os("SELLOUT_MOTO_SERVER") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/moto_server")
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn answers(url: &str) -> bool {
    let Some(hostport) = url.strip_prefix("http://") else {
        return false;
    };
    let Ok(mut s) = std::net::TcpStream::connect(hostport) else {
        return false;
    };
    use std::io::{Read, Write};
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /moto-api/ HTTP/1.0\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") && &head[9..12] == b"200"
}

impl Moto {
    /// Starts one (a watchdog kills it once this process is gone).
    pub fn start() -> Result<Moto, String> {
        let bin = moto_server_path();
        if !bin.exists() {
            return Err(format!(
                "{} not found: run scripts/setup (it installs moto[server] into .venv)",
                bin.display()
            ));
        }
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS_MAX {
            let port = free_port().map_err(|e| e.to_string())?;
            let script = format!(
                "\"$0\" -H 127.0.0.1 -p {port} & m=$!; trap 'kill $m 2>/dev/null' EXIT TERM; \
                 while kill -0 {parent} 2>/dev/null && kill -0 $m 2>/dev/null; do sleep 0.5; done",
                parent = std::process::id()
            );
            let child = Command::new("sh")
                .arg("-c")
                .arg(script)
                .arg(&bin)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("starting {}: {e}", bin.display()))?;
            let mut moto = Moto {
                url: format!("http://127.0.0.1:{port}"),
                child,
            };
            let started = Instant::now();
            while started.elapsed() < START_MAX {
                if answers(&moto.url) {
                    return Ok(moto);
                }
                if let Ok(Some(status)) = moto.child.try_wait() {
                    last = format!("exited with {status} (port {port} taken?)");
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if last.is_empty() {
                last = format!("no answer within {START_MAX:?}");
            }
            moto.stop();
        }
        Err(format!("moto did not start: {last}"))
    }

    /// The process-wide one, started on first use.
    pub fn shared() -> Result<&'static Moto, String> {
        static SHARED: OnceLock<Result<Moto, String>> = OnceLock::new();
        SHARED
            .get_or_init(Moto::start)
            .as_ref()
            .map_err(Clone::clone)
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

    fn stop(&mut self) {
        // the watchdog's TERM trap takes moto with it
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.stop();
    }
}
