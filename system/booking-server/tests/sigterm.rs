//! SIGTERM mid-load, end to end with the real binary: two `booking serve`
//! processes on one private `redis-server` (the Redis stack, one sale),
//! the mock gateway in process, a bounded load of bookings spread over
//! both by a client that, like a load balancer, retries a `503` with
//! `Retry-After` on the other instance. The reconciler's leader is sent
//! SIGTERM after a third of the load. Asserted: it exits 0 within the
//! bound; `/readyz` went 503 before it exited; every booking got a definite
//! answer (no connection error: each succeeded, or got 503 + Retry-After
//! and then succeeded on the other); the survivor leads the reconciler
//! within a sweep or two of the exit (the lock was released, not left to
//! its TTL); the sale completes (some paid, the rest released) and the
//! survivor's audit is green. Both instances log JSON lines
//! (`--log-format json`), every one of which must parse.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use booking::{Level, SaleId, Settings};
use booking_server::config::{Environment, LevelConfig, ServerConfig, StackKind};
use mock_gateway::payer::{Behaviour, Payer};
use serde_json::Value;

const TOKEN: &str = "sigterm-token-012345";
const PREFIX: &str = "sigterm";
/// Bookings in the load: one per candidate.
const BOOKINGS: usize = 300;
/// Client tasks sending them.
const CLIENTS: usize = 8;
/// The leader is stopped after this many answers.
const STOP_AFTER: u64 = (BOOKINGS / 3) as u64;
/// How long the draining instance keeps its listener open.
const NOTICE_MS: u64 = 1_500;
/// How long its requests in flight get after that: the request deadline,
/// the shortest `booking serve` accepts.
const GRACE_MS: u64 = 8_000;
/// The stopped instance must be gone within this long of the SIGTERM:
/// notice + grace + a worker long poll (5 s) + slack.
const EXIT_MAX: Duration = Duration::from_secs(20);
/// How long the debug binary may take to start listening.
const START_MAX: Duration = Duration::from_secs(60);
/// The whole load, and the settle after it.
const LOAD_MAX: Duration = Duration::from_secs(60);
const SETTLE_MAX: Duration = Duration::from_secs(30);

/// Every process the test started, killed on every path.
#[derive(Default)]
struct Procs {
    children: Vec<Child>,
    files: Vec<std::path::PathBuf>,
}

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.children {
            if c.try_wait().ok().flatten().is_none() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One RESP command to the private Redis, its reply's first line and bulk.
fn redis(port: u16, args: &[&str]) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let mut cmd = format!("*{}\r\n", args.len());
    for a in args {
        cmd.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.write_all(cmd.as_bytes()).ok()?;
    let mut r = std::io::BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let line = line.trim_end().to_owned();
    if let Some(len) = line.strip_prefix('$') {
        let len: i64 = len.parse().ok()?;
        if len < 0 {
            return None;
        }
        let mut buf = vec![0; len as usize + 2];
        r.read_exact(&mut buf).ok()?;
        return Some(String::from_utf8_lossy(&buf[..len as usize]).into_owned());
    }
    Some(line)
}

/// One `booking serve` process: its URL, its instance id (the
/// reconciler's owner token) and its JSON log lines.
struct Instance {
    index: usize,
    url: String,
    /// The admin listener.
    admin: String,
    instance: String,
    log: Arc<Mutex<Vec<String>>>,
}

fn start_instance(procs: &mut Procs, index: usize, config: &ServerConfig) -> Instance {
    let path = std::env::temp_dir().join(format!(
        "booking-sigterm-{}-{index}-{:x}.toml",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::write(&path, toml::to_string(config).unwrap()).unwrap();
    procs.files.push(path.clone());
    let mut child = Command::new(env!("CARGO_BIN_EXE_booking"))
        .args(["serve", "--log-format", "json", "--config"])
        .arg(&path)
        .args(["--drain-notice-ms", &NOTICE_MS.to_string()])
        .args(["--drain-grace-ms", &GRACE_MS.to_string()])
        .env("RUST_LOG", "info")
        .env_remove("SELLOUT_CONFIG")
        .env_remove("SELLOUT_ADMIN_TOKEN")
        .env_remove("SELLOUT_DRAIN_NOTICE_MS")
        .env_remove("SELLOUT_DRAIN_GRACE_MS")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    procs.children.push(child);
    let log = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel();
    let lines = log.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                if v["fields"]["message"] == "booking server listening" {
                    let _ = tx.send((
                        v["fields"]["addr"].as_str().unwrap_or_default().to_owned(),
                        v["fields"]["admin_addr"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        v["fields"]["instance"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                    ));
                }
            }
            lines.lock().unwrap().push(line);
        }
    });
    let (addr, admin, instance) = rx.recv_timeout(START_MAX).unwrap_or_else(|_| {
        panic!(
            "instance {index} never listened: {:#?}",
            log.lock().unwrap()
        )
    });
    Instance {
        index,
        url: format!("http://{addr}"),
        admin: format!("http://{admin}"),
        instance,
        log,
    }
}

/// Every stderr line of an instance is a JSON object with a level and a
/// message among its fields.
fn assert_json_lines(i: &Instance) -> usize {
    let lines = i.log.lock().unwrap().clone();
    assert!(!lines.is_empty());
    for line in &lines {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("instance {}: not JSON ({e}): {line}", i.index));
        assert!(v["level"].is_string(), "no level: {line}");
        assert!(v["timestamp"].is_string(), "no timestamp: {line}");
        assert!(v["fields"]["message"].is_string(), "no message: {line}");
    }
    lines.len()
}

fn logged(i: &Instance, message: &str) -> Option<Value> {
    i.log
        .lock()
        .unwrap()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["fields"]["message"] == message)
}

async fn ops(
    http: &reqwest::Client,
    base: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Value {
    let mut r = match method {
        "GET" => http.get(format!("{base}{path}")),
        _ => http.post(format!("{base}{path}")),
    }
    .bearer_auth(TOKEN)
    .timeout(Duration::from_secs(30));
    if let Some(b) = body {
        r = r.json(&b);
    }
    let resp = r.send().await.unwrap();
    let code = resp.status().as_u16();
    let v: Value = resp.json().await.unwrap_or(Value::Null);
    assert_eq!(code, 200, "{path}: {v}");
    v
}

/// What the load saw.
#[derive(Debug, Default)]
struct Tally {
    ok: AtomicU64,
    retried_503: AtomicU64,
    busy_503: AtomicU64,
    answered_by_stopped: AtomicU64,
    paid: AtomicU64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sigtermed_instance_drains_exits_0_and_loses_no_request() {
    if Command::new("redis-server")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("redis-server is not on PATH: run scripts/setup");
    }
    let mut procs = Procs::default();
    let test_started = Instant::now();

    // a private redis-server
    let redis_port = free_port();
    procs.children.push(
        Command::new("redis-server")
            .args(["--port", &redis_port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let up = Instant::now();
    while redis(redis_port, &["PING"]).as_deref() != Some("+PONG") {
        assert!(
            up.elapsed() < Duration::from_secs(10),
            "redis-server never answered"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // the mock gateway, its webhooks to both instances
    let ports = [free_port(), free_port()];
    let urls: Vec<String> = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    let mock_config = mock_gateway::Config {
        webhook_urls: urls
            .iter()
            .map(|u| format!("{u}/payment/webhook"))
            .collect(),
        ..mock_gateway::Config::default()
    };
    let topic = mock_config.topic_arn.clone();
    let mock = mock_gateway::start_local(mock_config, mock_gateway::ScriptSpec::default())
        .await
        .unwrap();

    let mut base = ServerConfig {
        sale: SaleId::parse("sigterm").unwrap(),
        levels: vec![LevelConfig {
            level: Level::parse("general").unwrap(),
            cap: BOOKINGS as u32,
            price: "1000.00".into(),
        }],
        environment: Environment::Rehearsal,
        admin_token: Some(TOKEN.into()),
        key_prefix: format!("{PREFIX}-{:x}", rand::random::<u32>()),
        settings: Settings {
            hold: Duration::from_secs(3),
            sweep_interval: Duration::from_millis(200),
            sweep_window: Duration::from_millis(1_200),
            sweep_budget: Duration::from_secs(1),
            visibility_timeout: Duration::from_secs(5),
            status_throttle: Duration::from_millis(100),
            booking_copy_slack: Duration::from_secs(2),
            pending_stale_after: booking::settings::REQUEST_DEADLINE
                + booking::settings::CLOCK_SKEW_MAX,
            ..Settings::default()
        },
        ..ServerConfig::default()
    };
    base.stack.kind = StackKind::Redis;
    base.stack.redis_url = format!("redis://127.0.0.1:{redis_port}");
    base.gateway.base_url = mock.url.clone();
    base.gateway.mock_ledger = true;
    base.webhook.loopback_sns_port = Some(mock.addr.port());
    base.webhook.topic_arns = Some(vec![topic]);
    let mut instances = Vec::new();
    for (index, (port, url)) in ports.iter().zip(&urls).enumerate() {
        let mut c = base.clone();
        c.listen = std::net::SocketAddr::from(([127, 0, 0, 1], *port));
        c.admin_listen = "127.0.0.1:0".parse().unwrap();
        c.public_url = url.clone();
        instances.push(start_instance(&mut procs, index, &c));
    }
    let http = reqwest::Client::new();
    for i in &instances {
        let r = http.get(format!("{}/readyz", i.url)).send().await.unwrap();
        assert_eq!(r.status(), 200, "instance {} ready", i.index);
    }

    // the sale: reset, candidates, open
    let survivor_url = instances[0].admin.clone();
    ops(&http, &survivor_url, "POST", "/ops/reset", None).await;
    let candidates: Vec<String> = (0..BOOKINGS).map(|i| format!("cand-{i:04}")).collect();
    ops(
        &http,
        &survivor_url,
        "POST",
        "/ops/load-candidates",
        Some(serde_json::json!(candidates)),
    )
    .await;
    ops(&http, &survivor_url, "POST", "/ops/open", None).await;

    // the reconciler's leader is the one to stop
    let lock = format!("{}:{{sale:sigterm}}:reconciler-lock", base.key_prefix);
    let leader = loop {
        if let Some(owner) = redis(redis_port, &["GET", &lock]) {
            if let Some(i) = instances.iter().position(|i| i.instance == owner) {
                break i;
            }
        }
        assert!(test_started.elapsed() < START_MAX, "no reconciler leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let other = 1 - leader;
    let (stopped_url, other_url) = (instances[leader].url.clone(), instances[other].url.clone());
    let other_admin = instances[other].admin.clone();
    let stopped_pid = procs.children[1 + leader].id();

    // the load: each candidate once, alternating instances until the
    // stopped one says it drains
    let tally = Arc::new(Tally::default());
    let draining = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicU64::new(0));
    let answered = Arc::new(AtomicU64::new(0));
    let load_started = Instant::now();
    let mut clients = Vec::new();
    let payer = Arc::new(Payer::new(Duration::from_secs(10)).unwrap());
    for _ in 0..CLIENTS {
        let (http, tally, draining, next, answered) = (
            http.clone(),
            tally.clone(),
            draining.clone(),
            next.clone(),
            answered.clone(),
        );
        let payer = payer.clone();
        let (stopped_url, other_url, candidates) =
            (stopped_url.clone(), other_url.clone(), candidates.clone());
        clients.push(tokio::spawn(async move {
            let mut booked: Vec<(bool, Value)> = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::SeqCst) as usize;
                if n >= BOOKINGS {
                    return Ok(booked);
                }
                let body = serde_json::json!({"candidate": candidates[n], "level": "general"});
                let mut to_stopped = n % 2 == 0 && !draining.load(Ordering::SeqCst);
                let mut tries = 0;
                loop {
                    tries += 1;
                    if tries > 50 || load_started.elapsed() > LOAD_MAX {
                        return Err(format!("{}: no success after {tries} tries", candidates[n]));
                    }
                    let url = if to_stopped { &stopped_url } else { &other_url };
                    let resp = http
                        .post(format!("{url}/bookings"))
                        .json(&body)
                        .timeout(Duration::from_secs(20))
                        .send()
                        .await
                        .map_err(|e| format!("{} to {url}: no answer: {e}", candidates[n]))?;
                    let status = resp.status().as_u16();
                    let retry_after = resp.headers().contains_key("retry-after");
                    let v: Value = resp.json().await.map_err(|e| format!("reading: {e}"))?;
                    match status {
                        201 => {
                            answered.fetch_add(1, Ordering::SeqCst);
                            tally.ok.fetch_add(1, Ordering::SeqCst);
                            if to_stopped {
                                tally.answered_by_stopped.fetch_add(1, Ordering::SeqCst);
                            }
                            // every 30th pays at once (the holds are short),
                            // on the instance that stays
                            if !to_stopped && n % 30 == 1 {
                                let run = payer
                                    .run(
                                        v["redirect_url"].as_str().unwrap_or_default(),
                                        &Behaviour::PayNow,
                                    )
                                    .await
                                    .map_err(|e| format!("paying: {e}"))?;
                                if run.delivered.len() != 1 {
                                    return Err(format!("payment not delivered: {run:?}"));
                                }
                                tally.paid.fetch_add(1, Ordering::SeqCst);
                            }
                            booked.push((to_stopped, v));
                            break;
                        }
                        503 if retry_after && v["error"] == "draining" => {
                            // the load balancer's part: elsewhere from now on
                            draining.store(true, Ordering::SeqCst);
                            tally.retried_503.fetch_add(1, Ordering::SeqCst);
                            to_stopped = false;
                        }
                        503 if retry_after => {
                            tally.busy_503.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        _ => return Err(format!("{}: {status} {v}", candidates[n])),
                    }
                }
            }
        }));
    }

    // SIGTERM the leader a third of the way in, and watch its /readyz
    while answered.load(Ordering::SeqCst) < STOP_AFTER {
        assert!(load_started.elapsed() < LOAD_MAX, "the load stalled");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let readyz_503 = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (http, url, seen) = (http.clone(), stopped_url.clone(), readyz_503.clone());
        tokio::spawn(async move {
            let until = Instant::now() + EXIT_MAX;
            while Instant::now() < until {
                if let Ok(r) = http.get(format!("{url}/readyz")).send().await {
                    if r.status() == 503 && r.headers().contains_key("retry-after") {
                        seen.store(true, Ordering::SeqCst);
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let sent = Command::new("kill")
        .args(["-TERM", &stopped_pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -TERM {stopped_pid}");
    let sigterm_at = Instant::now();
    let answered_at_sigterm = answered.load(Ordering::SeqCst);
    let status = loop {
        if let Some(status) = procs.children[1 + leader].try_wait().unwrap() {
            break status;
        }
        assert!(
            sigterm_at.elapsed() < EXIT_MAX,
            "still running {EXIT_MAX:?} after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let exit_after = sigterm_at.elapsed();
    watcher.await.unwrap();
    assert!(status.success(), "exit status {status:?}");
    assert!(
        readyz_503.load(Ordering::SeqCst),
        "/readyz never said 503 before the exit"
    );

    // the lock: released on the way out, taken by the survivor at a sweep
    let exited = Instant::now();
    let takeover = loop {
        if redis(redis_port, &["GET", &lock]).as_deref() == Some(instances[other].instance.as_str())
        {
            break exited.elapsed();
        }
        assert!(
            exited.elapsed() < Duration::from_secs(3),
            "the survivor did not lead within 3 s of the exit (the lock's TTL is ~10 s)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    // every request answered
    let mut booked = Vec::new();
    for c in clients {
        match c.await.unwrap() {
            Ok(b) => booked.extend(b),
            Err(e) => panic!("a request was lost: {e}"),
        }
    }
    let load_took = load_started.elapsed();
    assert_eq!(booked.len(), BOOKINGS, "every booking succeeded once");
    assert_eq!(tally.ok.load(Ordering::SeqCst), BOOKINGS as u64);
    assert!(
        tally.retried_503.load(Ordering::SeqCst) >= 1,
        "the drain refused something: {tally:?}"
    );
    assert!(
        logged(
            &instances[leader],
            "draining: POST /bookings refused (503, Retry-After), /readyz 503"
        )
        .is_some()
    );
    assert!(logged(&instances[leader], "booking server stopped").is_some());
    let handed_back = logged(
        &instances[leader],
        "stopping: messages not handled handed back to the queue",
    )
    .map_or(0, |v| v["fields"]["handed_back"].as_u64().unwrap_or(0));

    // the sale completes: some paid during the load, the rest lapse; the
    // survivor's worker and reconciler settle everything
    let paid = tally.paid.load(Ordering::SeqCst);
    assert!(paid >= 5, "{tally:?}");
    let settle_start = Instant::now();
    loop {
        let s = ops(&http, &other_admin, "GET", "/ops/status", None).await;
        let r = &s["records"]["general"];
        if r["held"].as_u64() == Some(0)
            && r["paid"].as_u64() == Some(paid)
            && s["queue"]["visible"] == 0
            && s["queue"]["in_flight"] == 0
        {
            break;
        }
        assert!(settle_start.elapsed() < SETTLE_MAX, "not settled: {s:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let report = ops(&http, &other_admin, "GET", "/ops/audit", None).await;
    let failed: Vec<&Value> = report["invariants"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["passed"] != true)
        .collect();
    assert!(failed.is_empty(), "failed invariants: {failed:#?}");
    assert_eq!(report["passed"], true);

    let lines = assert_json_lines(&instances[leader]);
    drop(procs);
    mock.stop().await;
    eprintln!(
        "sigterm: {BOOKINGS} bookings by {CLIENTS} clients in {load_took:?}; SIGTERM after {answered_at_sigterm} answers; \
         {} answered by the stopped instance, {} refused with 503 draining and retried on the other, {} busy 503s; \
         exit 0 after {exit_after:?}; survivor led {takeover:?} after the exit; {handed_back} messages handed back; \
         {paid} paid, the rest released; audit green; {lines} JSON log lines; whole test {:?}",
        tally.answered_by_stopped.load(Ordering::SeqCst),
        tally.retried_503.load(Ordering::SeqCst),
        tally.busy_503.load(Ordering::SeqCst),
        test_started.elapsed()
    );
}
