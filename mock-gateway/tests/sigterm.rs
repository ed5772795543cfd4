#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The `mock-gateway` binary behaves like a service: ready on `/readyz`,
//! JSON log lines with `--log-format json`, and on SIGTERM it stops
//! cleanly and exits 0.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the gateway may take to exit after SIGTERM.
const EXIT_BOUND: Duration = Duration::from_secs(10);

/// Kills the child on every path out of the test.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn sigterm_stops_the_gateway_cleanly_with_exit_0_and_json_logs() {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_mock-gateway"))
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--log-format",
            "json",
        ])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Killed(child);
    let mut stdout = BufReader::new(child.0.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.starts_with("mock-gateway listening on"), "{line:?}");

    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::io::Write::write_all(
        &mut conn,
        b"GET /readyz HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    let pid = child.0.id().to_string();
    let sent = Instant::now();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            sent.elapsed() < EXIT_BOUND,
            "still running {EXIT_BOUND:?} after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "{status:?}");

    let mut stderr = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["message"] == "mock-gateway stopped" && l["level"] == "INFO"),
        "{stderr}"
    );
}
