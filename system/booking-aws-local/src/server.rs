//! One local emulator process on a free loopback port: started with a
//! watchdog shell beside it that kills it once the process that started it
//! is gone (so a test binary that exits leaves no server behind), ready
//! when a GET of its health path answers 200, stopped on drop: SIGTERM to
//! the shell, whose trap stops the server and waits for it, so no process
//! is left behind, not even an unreaped one (a container's PID 1 may never
//! reap orphans).
//!
//! [`crate::moto`] and [`crate::fauxqs`] are the two kinds.

use std::ffi::OsString;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to answer.
pub const START_MAX: Duration = Duration::from_secs(60);
/// Ports tried before giving up.
pub const START_ATTEMPTS_MAX: u32 = 3;
/// How long a server may take to stop on SIGTERM before both it and its
/// watchdog are killed.
pub const STOP_MAX: Duration = Duration::from_secs(10);

/// A running emulator process.
#[derive(Debug)]
pub struct LocalServer {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// What it is (`moto`, `fauxqs`), for messages.
    pub kind: &'static str,
    /// Its process id (for CPU accounting by whoever runs a benchmark).
    pub pid: u32,
    /// The watchdog shell (the server is its child).
    child: std::sync::Mutex<Child>,
}

/// How to start one kind of server.
#[derive(Debug, Clone)]
pub struct Launch<'a> {
    /// What it is.
    pub kind: &'static str,
    /// The program.
    pub program: &'a Path,
    /// Its arguments before the port's (e.g. a script).
    pub args: Vec<OsString>,
    /// The arguments that give it its port, for a port.
    pub port_args: fn(u16) -> Vec<String>,
    /// Environment variables for it, for a port.
    pub env: fn(u16) -> Vec<(String, String)>,
    /// The path a GET of which answers 200 once it serves.
    pub health_path: &'static str,
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Whether a GET of `path` at `url` answers 200.
pub fn answers(url: &str, path: &str) -> bool {
    let Some(hostport) = url.strip_prefix("http://") else {
        return false;
    };
    let Ok(mut s) = std::net::TcpStream::connect(hostport) else {
        return false;
    };
    use std::io::{Read, Write};
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET {path} HTTP/1.0\r\nHost: {hostport}\r\n\r\n");
    if s.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") && &head[9..12] == b"200"
}

/// The shell line that runs the server (its program as `$0`, its other
/// arguments as `$@`) and a watchdog that kills it once `parent` is gone.
fn watchdog_script(parent: u32) -> String {
    format!(
        "\"$0\" \"$@\" & m=$!; trap 'kill $m 2>/dev/null; wait $m; exit 0' EXIT TERM; \
         while kill -0 {parent} 2>/dev/null && kill -0 $m 2>/dev/null; do sleep 0.5; done"
    )
}

impl LocalServer {
    /// Starts one as `launch` says, on a free port (a watchdog kills it once
    /// this process is gone).
    pub fn start(launch: &Launch<'_>) -> Result<LocalServer, String> {
        if !launch.program.exists() {
            return Err(format!(
                "{} not found: run scripts/setup",
                launch.program.display()
            ));
        }
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS_MAX {
            let port = free_port().map_err(|e| e.to_string())?;
            let mut command = Command::new("sh");
            command
                .arg("-c")
                .arg(watchdog_script(std::process::id()))
                .arg(launch.program)
                .args(&launch.args)
                .args((launch.port_args)(port))
                .envs((launch.env)(port))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let child = command
                .spawn()
                .map_err(|e| format!("starting {}: {e}", launch.program.display()))?;
            let server = LocalServer {
                url: format!("http://127.0.0.1:{port}"),
                kind: launch.kind,
                pid: 0,
                child: std::sync::Mutex::new(child),
            };
            let mut server = server;
            let started = Instant::now();
            while started.elapsed() < START_MAX {
                if answers(&server.url, launch.health_path) {
                    let shell = server.shell().id();
                    server.pid = server_pid(shell).unwrap_or(0);
                    return Ok(server);
                }
                if let Ok(Some(status)) = server.shell().try_wait() {
                    last = format!("exited with {status} (port {port} taken?)");
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if last.is_empty() {
                last = format!("no answer within {START_MAX:?}");
            }
            server.stop();
        }
        Err(format!("{} did not start: {last}", launch.kind))
    }

    fn shell(&self) -> std::sync::MutexGuard<'_, Child> {
        self.child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stops the server and its watchdog, and waits for both (SIGTERM, then
    /// SIGKILL after [`STOP_MAX`]); nothing once stopped. Also for a
    /// process-wide shared server, which is never dropped.
    pub fn stop(&self) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        let mut child = self.shell();
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        // the watchdog's TERM trap stops the server and waits for it
        let shell = i32::try_from(child.id()).ok().map(Pid::from_raw);
        if let Some(shell) = shell {
            let _ = kill(shell, Signal::SIGTERM);
        }
        let until = Instant::now() + STOP_MAX;
        while Instant::now() < until {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        tracing::warn!(
            kind = self.kind,
            pid = self.pid,
            "did not stop on SIGTERM within {STOP_MAX:?}: SIGKILL"
        );
        if let Ok(server) = i32::try_from(self.pid)
            && server > 0
        {
            let _ = kill(Pid::from_raw(server), Signal::SIGKILL);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The server's pid: the watchdog shell's child (Linux `/proc`).
fn server_pid(shell: u32) -> Option<u32> {
    let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_runs_the_program_with_its_arguments() {
        let s = watchdog_script(42);
        assert!(s.starts_with("\"$0\" \"$@\" &"));
        assert!(s.contains("kill -0 42"));
    }

    #[test]
    fn nothing_listening_does_not_answer() {
        let port = free_port().unwrap_or(1);
        assert!(!answers(&format!("http://127.0.0.1:{port}"), "/"));
        assert!(!answers("https://example.invalid", "/"));
    }
}
