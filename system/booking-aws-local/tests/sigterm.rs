#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The `aws-local` binary stops like a service: on SIGTERM it stops its
//! child servers (the local SQS and moto), waits for them, and exits 0,
//! leaving no process behind.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long aws-local may take to start its servers.
const START_MAX: Duration = Duration::from_secs(90);
/// How long it may take to exit after SIGTERM.
const EXIT_MAX: Duration = Duration::from_secs(20);

/// Kills the child on every path out of the test.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether process `pid` still exists (a zombie counts: nobody waited for it).
fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The numbers after each `(pid ` in the banner line.
fn pids(banner: &str) -> Vec<u32> {
    banner
        .split("(pid ")
        .skip(1)
        .map(|rest| {
            rest.split(')')
                .next()
                .unwrap()
                .trim()
                .parse()
                .unwrap_or_else(|e| panic!("{e}: {banner}"))
        })
        .collect()
}

#[test]
fn sigterm_stops_the_child_servers_and_exits_0() {
    let child = Command::new(env!("CARGO_BIN_EXE_aws-local"))
        .args(["--log-format", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut child = Killed(child);
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let banner = rx
        .recv_timeout(START_MAX)
        .expect("aws-local printed its banner");
    assert!(banner.starts_with("# DynamoDB"), "{banner}");
    // aws-local itself, the local SQS, moto
    let pids = pids(&banner);
    assert_eq!(pids.len(), 3, "{banner}");
    let servers = &pids[1..];
    assert!(servers.iter().all(|p| alive(*p)), "{banner}");
    // the rest of the environment, then nothing until the stop
    let env: Vec<String> = (0..7)
        .map(|_| rx.recv_timeout(START_MAX).unwrap())
        .collect();
    assert!(env.iter().all(|l| l.starts_with("export ")), "{env:?}");

    let sent = Instant::now();
    let pid = child.0.id().to_string();
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
            sent.elapsed() < EXIT_MAX,
            "still running {EXIT_MAX:?} after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "{status:?}");
    for p in servers {
        assert!(!alive(*p), "child server {p} outlived aws-local: {banner}");
    }
}
