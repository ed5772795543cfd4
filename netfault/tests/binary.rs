//! The `netfault` binary: loopback only unless told, proxies from a
//! toxiproxy config file, the API on the address it prints, Ctrl-C stops it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Stdio;

use common::{WAIT, connect, echo_server, round_trip};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

fn netfault() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_netfault"));
    command
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

#[tokio::test]
async fn a_non_loopback_listen_is_refused_without_allow_remote() {
    let output = tokio::time::timeout(WAIT, netfault().args(["--listen", "0.0.0.0:0"]).output())
        .await
        .unwrap()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--allow-remote"), "{stderr}");
}

#[tokio::test]
async fn serves_the_config_proxies_and_stops_on_ctrl_c() {
    let echo = echo_server().await;
    let proxy_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!("netfault-binary-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("proxies.json");
    let listen = format!("127.0.0.1:{proxy_port}");
    let spec =
        serde_json::json!([{"name": "echo", "listen": listen, "upstream": echo.addr.to_string()}]);
    std::fs::write(&config, spec.to_string()).unwrap();

    let mut child = netfault()
        .args(["--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(WAIT, stdout.next_line())
        .await
        .expect("ready in time")
        .unwrap()
        .expect("a ready line");
    let api = ready
        .strip_prefix("netfault API listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {ready:?}"))
        .to_owned();

    let proxies: serde_json::Value = reqwest::get(format!("{api}/proxies"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(proxies["echo"]["listen"], listen.as_str());
    round_trip(&mut connect(listen.parse().unwrap()).await, b"hello").await;

    let pid = child.id().unwrap().to_string();
    let sent = Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .await
        .unwrap();
    assert!(sent.success());
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("stops on Ctrl-C")
        .unwrap();
    assert!(status.success(), "{status}");
    let refused = tokio::net::TcpStream::connect(listen.as_str()).await;
    assert!(refused.is_err(), "the proxy outlived the binary");
    std::fs::remove_dir_all(&dir).unwrap();
}
