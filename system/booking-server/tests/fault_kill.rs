//! A kill point, end to end with the real binary: `booking serve` on the
//! embedded stack against the mock gateway, armed with a `kill` at
//! `after_enqueue` for its own label and one at `after_admission` for
//! another instance's. Once the schedule is started, one booking takes the
//! process down by SIGKILL after the message was queued: the client gets
//! no answer, the gateway has the payment (so the request passed admission
//! and create: the other instance's kill did nothing), and the last log
//! line names the fault.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::BufRead;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use booking::{Clock, SystemClock};
use booking_server::config::{Environment, FaultsConfig, ServerConfig};
use serde_json::{Value, json};

const TOKEN: &str = "fault-kill-token-01234";
/// How long the debug binary may take to listen, or to die.
const PROCESS_MAX: Duration = Duration::from_secs(60);

const SCHEDULE: &str = r#"
[[fault]]
name = "other-dies-after-admission"
target = "instance"
instances = ["instance-2"]
start_ms = 0
duration_ms = 600_000
kind = { type = "kill", point = "after_admission" }

[[fault]]
name = "die-after-enqueue"
target = "instance"
instances = ["instance-1"]
start_ms = 0
duration_ms = 600_000
kind = { type = "kill", point = "after_enqueue" }
"#;

/// The child, killed if the test ends before it died.
struct Serving {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    config: std::path::PathBuf,
}

impl Drop for Serving {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.config);
    }
}

/// `text` without its terminal colour codes.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ params final-byte
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Starts `booking serve --config <file>` and waits for its address.
fn serve(config: &ServerConfig) -> (Serving, String, String) {
    let path = std::env::temp_dir().join(format!(
        "booking-fault-kill-{}-{:x}.toml",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::write(&path, toml::to_string(config).unwrap()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_booking"))
        .args(["serve", "--config"])
        .arg(&path)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .env_remove("SELLOUT_CONFIG")
        .env_remove("SELLOUT_ADMIN_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let (addr_tx, addr_rx) = mpsc::channel();
    let lines = log.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let line = plain(&line);
            if line.contains("booking server listening") {
                // `addr=` the public listener, `admin_addr=` the admin one
                let field = |name: &str| -> Option<String> {
                    let rest = line.split(&format!(" {name}=")).nth(1)?;
                    Some(
                        rest.chars()
                            .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
                            .collect(),
                    )
                };
                if let (Some(public), Some(admin)) = (field("addr"), field("admin_addr")) {
                    let _ = addr_tx.send((public, admin));
                }
            }
            lines.lock().unwrap().push(line);
        }
    });
    let serving = Serving {
        child,
        log,
        config: path,
    };
    let (addr, admin) = addr_rx
        .recv_timeout(PROCESS_MAX)
        .unwrap_or_else(|_| panic!("never listened: {:#?}", serving.log.lock().unwrap()));
    (serving, format!("http://{addr}"), format!("http://{admin}"))
}

async fn ops(http: &reqwest::Client, base: &str, path: &str, body: Value) -> Value {
    let resp = http
        .post(format!("{base}{path}"))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let v: Value = resp.json().await.unwrap_or(Value::Null);
    assert_eq!(code, 200, "{path}: {v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn booking_serve_dies_by_sigkill_at_its_armed_kill_point_and_nowhere_else() {
    let mock = mock_gateway::start_local(
        mock_gateway::Config::default(),
        mock_gateway::ScriptSpec::default(),
    )
    .await
    .unwrap();
    let mut config = ServerConfig {
        environment: Environment::Rehearsal,
        admin_token: Some(TOKEN.into()),
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_listen: "127.0.0.1:0".parse().unwrap(),
        faults: Some(FaultsConfig {
            instance: "instance-1".into(),
            seed: 7,
            schedule: faults::Schedule::from_toml(SCHEDULE).unwrap(),
        }),
        ..ServerConfig::default()
    };
    config.gateway.base_url = mock.url.clone();
    let (mut serving, base, admin) = serve(&config);
    let http = reqwest::Client::new();
    ops(&http, &admin, "/ops/reset", Value::Null).await;
    ops(&http, &admin, "/ops/load-candidates", json!(["alice"])).await;
    ops(&http, &admin, "/ops/open", Value::Null).await;
    let now = SystemClock.now_ms();
    let state = ops(
        &http,
        &admin,
        "/ops/faults/start",
        json!({"started_unix_ms": now}),
    )
    .await;
    assert_eq!(state["started_unix_ms"], now);
    assert_eq!(state["instance"], "instance-1");

    let answer = http
        .post(format!("{base}/bookings"))
        .json(&json!({"candidate": "alice", "level": "general"}))
        .timeout(PROCESS_MAX)
        .send()
        .await;
    let err = answer.expect_err("the process died before answering");
    assert!(!err.is_timeout(), "no answer at all, not a slow one: {err}");

    let started = Instant::now();
    let status = loop {
        if let Some(status) = serving.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < PROCESS_MAX,
            "still alive after the kill point"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // the reader thread has the whole log once the pipe closes
    let log = loop {
        let log = serving.log.lock().unwrap().clone();
        if log.iter().any(|l| l.contains("SIGKILL")) || started.elapsed() > PROCESS_MAX {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status.signal(), Some(9), "{status:?}: {log:#?}");
    let killed: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("SIGKILL to this process"))
        .collect();
    assert_eq!(killed.len(), 1, "{log:#?}");
    assert!(killed[0].contains("die-after-enqueue"), "{log:#?}");
    assert!(
        !log.iter().any(|l| l.contains("other-dies-after-admission")),
        "the other instance's kill point did nothing: {log:#?}"
    );

    // the payment was created: the request went past admission and create
    let ledger: Value = http
        .get(format!("{}/__mock/ledger", mock.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ledger["payments"].as_array().unwrap().len(), 1, "{ledger}");
    drop(serving);
    mock.stop().await;
}
