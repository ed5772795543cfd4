//! Toxiproxy's Python client from PyPI (`toxiproxy-python`, installed into
//! the venv by `scripts/setup`), unchanged, against netfault's API: it
//! creates a proxy to a local echo server and a latency toxic, lists, and
//! deletes; after each step the test checks what the proxy itself does.
//! Skips (saying so) only when the venv is absent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::{connect, echo_server, round_trip};
use netfault::{Netfault, Stream, ToxicKind};
use serde_json::{Value, json};

/// One run of the script: a few local HTTP calls and Python's start.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(60);

fn venv_python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python")
}

async fn run_script(python: &Path, args: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/toxiproxy_client.py");
    let child = tokio::process::Command::new(python)
        .arg(&script)
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("NO_PROXY", "127.0.0.1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let output = tokio::time::timeout(SCRIPT_TIMEOUT, child.wait_with_output())
        .await
        .expect("the script finishes in time")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{args:?} failed ({}); if toxiproxy is not importable, run scripts/setup:\n{stderr}",
        output.status
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?} printed no JSON ({e}): {}\n{stderr}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toxiproxys_python_client_drives_the_proxy() {
    let python = venv_python();
    if !python.exists() {
        eprintln!(
            "SKIPPED: {} is absent (run scripts/setup to install the toxiproxy client)",
            python.display()
        );
        return;
    }
    let echo = echo_server().await;
    let nf = Netfault::new();
    let (api, server) = netfault::serve(nf.clone(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let api_port = api.port().to_string();
    let upstream = echo.addr.to_string();

    let created = run_script(&python, &["create", &api_port, &upstream]).await;
    assert_eq!(created["duplicate_refused"], true, "{created}");
    assert!(created["version"].as_str().unwrap().starts_with("2."));
    let listen: SocketAddr = created["listen"].as_str().unwrap().parse().unwrap();
    let toxics = nf.toxics("redis").unwrap();
    assert_eq!(toxics.len(), 1);
    assert_eq!(toxics[0].name, "latency_downstream");
    assert_eq!(toxics[0].stream, Stream::Downstream);
    assert_eq!(
        toxics[0].kind,
        ToxicKind::Latency {
            latency: 300,
            jitter: 0
        }
    );
    // what the client set up is what the proxy does
    let rtt = round_trip(&mut connect(listen).await, b"PING\r\n").await;
    assert!(rtt >= Duration::from_millis(295), "round trip {rtt:?}");

    let seen = run_script(&python, &["list_and_delete", &api_port]).await;
    assert_eq!(
        seen,
        json!({
            "proxies": ["redis"],
            "enabled": true,
            "toxics": {"latency_downstream": {
                "type": "latency", "stream": "downstream", "toxicity": 1.0,
                "attributes": {"latency": 300, "jitter": 0}}},
            "not_found_raised": true,
            "invalid_toxic_raised": true,
            "toxics_after_removal": [],
            "destroyed": true,
            "proxies_after_delete": []
        })
    );
    assert!(nf.list().is_empty());
    let refused = tokio::net::TcpStream::connect(listen).await;
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::ConnectionRefused);
    server.abort();
}
