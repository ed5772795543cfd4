//! Round trips per second against the mock gateway served on ONE core.
//!
//! The real router (through [`mock_gateway::start`], as the binary serves it)
//! runs on a tokio `current_thread` runtime in its own OS thread; a lean
//! HTTP/1.1 client (hyper's connection API, keep-alive, `BENCH_CONNS`
//! connections) runs on another thread with its own runtime. After one token
//! grant, every round trip is `create` (full bKash body) → the payer approves →
//! `execute`, and every answer is checked.
//!
//! Two phases, each after a warm-up:
//! - (a) the payer approves in-process (`Gateway::payer_acts`): the headline
//!   "create+execute round trips/s";
//! - (b) the payer approves over HTTP (`POST bkashURL` with `action=pay`,
//!   answered `302`): full three-request checkouts/s.
//!
//! Besides wall-clock rates it prints the CPU time the server thread used, so
//! "round trips per server CPU-second" stays meaningful on a shared, noisy
//! machine. Exits non-zero only on wrong answers, never on speed. Each phase
//! starts from an empty ledger (`Gateway::reset`) and a freshly granted token.
//!
//! Two diagnostic phases follow (skip them with `BENCH_EXTRA=0`):
//! - (c) the floor: `GET /healthz` over the same client, i.e. hyper + axum +
//!   the kernel's loopback TCP with no gateway logic;
//! - (d) the gateway logic alone, no HTTP: the `Gateway` calls the handlers make,
//!   in a loop on the client thread.
//!
//! Environment: `BENCH_SECS` (measured seconds per phase, default 5),
//! `BENCH_WARMUP_SECS` (default 1), `BENCH_CONNS` (connections, default 16),
//! `BENCH_EXTRA` (0 skips phases c and d).
//!
//! `cargo bench -p mock-gateway --bench round_trip`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST, LOCATION};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use mock_gateway::payments::{PayerAction, RedirectStatus};
use mock_gateway::{App, Config, Gateway, ScriptSpec, SystemClock};
use serde::Deserialize;

// the binary's allocator, so the bench measures what `mock-gateway` serves with
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What the booking system must sustain: 2,000 bookings/s with a wide margin.
const TARGET: f64 = 20_000.0;
const API: &str = "/v1.2.0-beta/tokenized/checkout";

type Conn = SendRequest<Full<Bytes>>;

// ---------------------------------------------------------------- thread CPU

/// `/proc/<pid>/task/<tid>` of the calling thread.
fn this_thread_proc_dir() -> PathBuf {
    // /proc/thread-self -> "<pid>/task/<tid>"
    let rel = std::fs::read_link("/proc/thread-self").unwrap_or_default();
    PathBuf::from("/proc").join(rel)
}

/// CPU time (user + system) a thread has used, in nanoseconds: from
/// `schedstat` (ns) when the kernel has it, else `stat` utime+stime (ticks,
/// USER_HZ assumed 100).
fn thread_cpu_ns(dir: &std::path::Path) -> Option<u64> {
    if let Ok(s) = std::fs::read_to_string(dir.join("schedstat")) {
        if let Some(ns) = s.split_whitespace().next().and_then(|v| v.parse().ok()) {
            return Some(ns);
        }
    }
    let (user, system) = thread_user_sys_ns(dir)?;
    Some(user + system)
}

/// User and system CPU time of a thread, in nanoseconds, from `stat`
/// (10 ms resolution: USER_HZ assumed 100).
fn thread_user_sys_ns(dir: &std::path::Path) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // after "pid (comm) ": state is field 3, utime 14, stime 15
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime * 10_000_000, stime * 10_000_000))
}

// ---------------------------------------------------------------- server

struct Server {
    app: Arc<App>,
    addr: SocketAddr,
    cpu_dir: PathBuf,
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

/// The gateway, served on a current_thread runtime in its own OS thread.
fn spawn_server() -> Server {
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("gateway".into())
        .spawn(move || {
            let cpu_dir = this_thread_proc_dir();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("server runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                let config = Config {
                    public_url: String::new(),
                    grant_limit: 1_000_000,
                    ..Config::default()
                };
                let running = mock_gateway::start(
                    listener,
                    config,
                    ScriptSpec::default(),
                    None,
                    Arc::new(SystemClock),
                )
                .await
                .expect("gateway start");
                let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
                tx.send((running.app.clone(), running.addr, cpu_dir, stop_tx))
                    .expect("hand over");
                let _ = stop_rx.await;
                running.stop().await;
            });
        })
        .expect("server thread");
    let (app, addr, cpu_dir, stop) = rx.recv().expect("server started");
    Server {
        app,
        addr,
        cpu_dir,
        stop,
        thread,
    }
}

// ---------------------------------------------------------------- client

/// Shared by the client tasks.
struct Ctx {
    app: Arc<App>,
    host: String,
    token: String,
    app_key: String,
}

async fn connect(addr: SocketAddr) -> Conn {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

struct Answer {
    status: StatusCode,
    location: Option<String>,
    body: Bytes,
}

async fn send(conn: &mut Conn, req: Request<Full<Bytes>>) -> Result<Answer, String> {
    conn.ready().await.map_err(|e| format!("connection: {e}"))?;
    let resp = conn
        .send_request(req)
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = resp.status();
    let location = resp
        .headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    Ok(Answer {
        status,
        location,
        body,
    })
}

fn api_request(ctx: &Ctx, op: &str, body: String) -> Request<Full<Bytes>> {
    Request::builder()
        .method(Method::POST)
        .uri(format!("{API}/{op}"))
        .header(HOST, &ctx.host)
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "application/json")
        .header(AUTHORIZATION, &ctx.token)
        .header("x-app-key", &ctx.app_key)
        .body(Full::new(Bytes::from(body)))
        .expect("request")
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateAnswer {
    status_code: String,
    #[serde(rename = "paymentID", default)]
    payment_id: String,
    #[serde(rename = "bkashURL", default)]
    bkash_url: String,
    #[serde(default)]
    transaction_status: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecuteAnswer {
    status_code: String,
    #[serde(rename = "paymentID", default)]
    payment_id: String,
    #[serde(default)]
    transaction_status: String,
    #[serde(rename = "trxID", default)]
    trx_id: Option<String>,
}

async fn grant(addr: SocketAddr, config: &Config) -> String {
    let merchant = &config.merchants[0];
    let mut conn = connect(addr).await;
    let req = Request::builder()
        .method(Method::POST)
        .uri(format!("{API}/token/grant"))
        .header(HOST, addr.to_string())
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "application/json")
        .header("username", &merchant.username)
        .header("password", &merchant.password)
        .body(Full::new(Bytes::from(
            serde_json::json!({
                "app_key": merchant.app_key,
                "app_secret": merchant.app_secret,
            })
            .to_string(),
        )))
        .expect("grant request");
    let answer = send(&mut conn, req).await.expect("grant");
    let v: serde_json::Value = serde_json::from_slice(&answer.body).expect("grant json");
    assert_eq!(v["statusCode"], "0000", "grant refused: {v}");
    v["id_token"].as_str().expect("id_token").to_owned()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Payer {
    /// `Gateway::payer_acts` on the client thread.
    InProcess,
    /// `POST bkashURL` with `action=pay`.
    Http,
    /// No checkout: `GET /healthz`, the cost of HTTP alone (framework + kernel).
    Floor,
}

struct Stats {
    round_trips: u64,
    failures: u64,
    first_failure: Option<String>,
    create: Histogram<u64>,
    pay: Histogram<u64>,
    execute: Histogram<u64>,
}

impl Stats {
    fn new() -> Stats {
        let h = || Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram");
        Stats {
            round_trips: 0,
            failures: 0,
            first_failure: None,
            create: h(),
            pay: h(),
            execute: h(),
        }
    }

    fn fail(&mut self, why: String) {
        self.failures += 1;
        if self.first_failure.is_none() {
            self.first_failure = Some(why);
        }
    }

    fn merge(&mut self, other: Stats) {
        self.round_trips += other.round_trips;
        self.failures += other.failures;
        if self.first_failure.is_none() {
            self.first_failure = other.first_failure;
        }
        self.create.add(&other.create).expect("merge");
        self.pay.add(&other.pay).expect("merge");
        self.execute.add(&other.execute).expect("merge");
    }
}

fn elapsed_ns(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_nanos())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// One checkout; `Err` says what was wrong. Transport errors are `Err(Err(_))`:
/// the connection is unusable.
async fn checkout(
    ctx: &Ctx,
    conn: &mut Conn,
    payer: Payer,
    invoice: &str,
    stats: &mut Stats,
) -> Result<Result<(), String>, String> {
    // create
    let body = format!(
        r#"{{"mode":"0011","payerReference":"01770618575","callbackURL":"http://merchant.test/bkash/callback","amount":"500","currency":"BDT","intent":"sale","merchantInvoiceNumber":"{invoice}"}}"#
    );
    let t = Instant::now();
    let a = send(conn, api_request(ctx, "create", body)).await?;
    stats.create.saturating_record(elapsed_ns(t));
    let created: CreateAnswer = match serde_json::from_slice(&a.body) {
        Ok(c) if a.status == StatusCode::OK => c,
        _ => return Ok(Err(format!("create: HTTP {} {:?}", a.status, a.body))),
    };
    if created.status_code != "0000" || created.transaction_status != "Initiated" {
        return Ok(Err(format!("create: {:?}", a.body)));
    }
    let Some(at) = created.bkash_url.find("/checkout/") else {
        return Ok(Err(format!("create: bkashURL {}", created.bkash_url)));
    };
    let checkout_path = &created.bkash_url[at..];
    let hash = checkout_path
        .split_once("hash=")
        .map(|(_, q)| q.split('&').next().unwrap_or(""))
        .unwrap_or("");

    // the payer approves
    match payer {
        Payer::InProcess => {
            let t = Instant::now();
            let acted =
                ctx.app
                    .gateway
                    .payer_acts(&created.payment_id, hash, PayerAction::Pay, None, None);
            stats.pay.saturating_record(elapsed_ns(t));
            if !matches!(acted, Ok((RedirectStatus::Success, _))) {
                return Ok(Err(format!("payer: {:?}", acted.map(|(s, _)| s))));
            }
        }
        // (`Floor` never gets here: its workers call `floor` instead)
        Payer::Http | Payer::Floor => {
            let req = Request::builder()
                .method(Method::POST)
                .uri(checkout_path)
                .header(HOST, &ctx.host)
                .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Full::new(Bytes::from_static(b"action=pay")))
                .expect("pay request");
            let t = Instant::now();
            let a = send(conn, req).await?;
            stats.pay.saturating_record(elapsed_ns(t));
            let ok = a.status == StatusCode::FOUND
                && a.location.as_deref().is_some_and(|l| {
                    l.contains("status=success") && l.contains(created.payment_id.as_str())
                });
            if !ok {
                return Ok(Err(format!(
                    "payer: HTTP {} location {:?}",
                    a.status, a.location
                )));
            }
        }
    }

    // execute
    let body = format!(r#"{{"paymentID":"{}"}}"#, created.payment_id);
    let t = Instant::now();
    let a = send(conn, api_request(ctx, "execute", body)).await?;
    stats.execute.saturating_record(elapsed_ns(t));
    let executed: ExecuteAnswer = match serde_json::from_slice(&a.body) {
        Ok(e) if a.status == StatusCode::OK => e,
        _ => return Ok(Err(format!("execute: HTTP {} {:?}", a.status, a.body))),
    };
    if executed.status_code != "0000"
        || executed.transaction_status != "Completed"
        || executed.payment_id != created.payment_id
        || executed.trx_id.as_deref().is_none_or(str::is_empty)
    {
        return Ok(Err(format!("execute: {:?}", a.body)));
    }
    Ok(Ok(()))
}

/// One `GET /healthz`.
async fn floor(
    ctx: &Ctx,
    conn: &mut Conn,
    stats: &mut Stats,
) -> Result<Result<(), String>, String> {
    let req = Request::builder()
        .method(Method::GET)
        .uri("/healthz")
        .header(HOST, &ctx.host)
        .body(Full::new(Bytes::new()))
        .expect("healthz request");
    let t = Instant::now();
    let a = send(conn, req).await?;
    stats.create.saturating_record(elapsed_ns(t));
    if a.status != StatusCode::OK || &a.body[..] != b"ok" {
        return Ok(Err(format!("healthz: HTTP {} {:?}", a.status, a.body)));
    }
    Ok(Ok(()))
}

async fn worker(
    ctx: Arc<Ctx>,
    mut conn: Conn,
    payer: Payer,
    tag: String,
    deadline: Instant,
) -> (Conn, Stats) {
    let mut stats = Stats::new();
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        if payer == Payer::Floor {
            match floor(&ctx, &mut conn, &mut stats).await {
                Ok(Ok(())) => stats.round_trips += 1,
                Ok(Err(why)) => stats.fail(why),
                Err(transport) => {
                    stats.fail(transport);
                    break;
                }
            }
            continue;
        }
        let invoice = format!("{tag}-{n}");
        match checkout(&ctx, &mut conn, payer, &invoice, &mut stats).await {
            Ok(Ok(())) => stats.round_trips += 1,
            Ok(Err(why)) => stats.fail(why),
            Err(transport) => {
                stats.fail(transport);
                break;
            }
        }
    }
    (conn, stats)
}

/// What the gateway logic alone costs, without HTTP: the calls `api::create`,
/// the checkout page and `api::execute` make, run on the calling thread.
struct Logic {
    round_trips: u64,
    failures: u64,
    first_failure: Option<String>,
    wall: Duration,
    cpu: Duration,
}

fn logic_only(ctx: &Ctx, cpu_dir: &std::path::Path, secs: f64) -> Logic {
    let gw = &ctx.app.gateway;
    let cpu0 = thread_cpu_ns(cpu_dir).unwrap_or(0);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let mut out = Logic {
        round_trips: 0,
        failures: 0,
        first_failure: None,
        wall: Duration::ZERO,
        cpu: Duration::ZERO,
    };
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        let create = format!(
            r#"{{"mode":"0011","payerReference":"01770618575","callbackURL":"http://merchant.test/bkash/callback","amount":"500","currency":"BDT","intent":"sale","merchantInvoiceNumber":"d-{n}"}}"#
        );
        let one = || -> Result<(), String> {
            let key = gw
                .authorize(Some(&ctx.token), Some(&ctx.app_key))
                .map_err(|c| format!("authorize: {c:?}"))?;
            let req = Gateway::parse_create(create.as_bytes()).map_err(|c| format!("{c:?}"))?;
            let payment = gw.create(key, req);
            let created =
                serde_json::to_vec(&gw.create_answer(&payment)).map_err(|e| e.to_string())?;
            std::hint::black_box(created);
            gw.payer_acts(
                &payment.payment_id,
                &payment.signature,
                PayerAction::Pay,
                None,
                None,
            )
            .map_err(|c| format!("payer: {c:?}"))?;
            let execute = format!(r#"{{"paymentID":"{}"}}"#, payment.payment_id);
            let key = gw
                .authorize(Some(&ctx.token), Some(&ctx.app_key))
                .map_err(|c| format!("authorize: {c:?}"))?;
            let id = Gateway::payment_id_of(execute.as_bytes()).map_err(|c| format!("{c:?}"))?;
            let (answer, _payment) = gw
                .execute(key, &id, None)
                .map_err(|c| format!("execute: {c:?}"))?;
            if answer["transactionStatus"] != "Completed" {
                return Err(format!("execute: {answer}"));
            }
            let executed = serde_json::to_vec(&answer).map_err(|e| e.to_string())?;
            std::hint::black_box(executed);
            Ok(())
        };
        match one() {
            Ok(()) => out.round_trips += 1,
            Err(why) => {
                out.failures += 1;
                out.first_failure.get_or_insert(why);
            }
        }
    }
    out.wall = start.elapsed();
    out.cpu = Duration::from_nanos(thread_cpu_ns(cpu_dir).unwrap_or(0).saturating_sub(cpu0));
    out
}

struct Phase {
    stats: Stats,
    wall: Duration,
    server_cpu: Duration,
    /// Server thread user and system CPU (10 ms resolution).
    server_user_sys: (Duration, Duration),
    client_cpu: Duration,
}

async fn run_phase(
    ctx: &Arc<Ctx>,
    conns: &mut Vec<Conn>,
    server_cpu_dir: &std::path::Path,
    client_cpu_dir: &std::path::Path,
    payer: Payer,
    name: &str,
    secs: f64,
) -> Phase {
    let cpu = |dir| Duration::from_nanos(thread_cpu_ns(dir).unwrap_or(0));
    let split = |dir| thread_user_sys_ns(dir).unwrap_or((0, 0));
    let server0 = cpu(server_cpu_dir);
    let split0 = split(server_cpu_dir);
    let client0 = cpu(client_cpu_dir);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let tasks: Vec<_> = conns
        .drain(..)
        .enumerate()
        .map(|(i, conn)| {
            tokio::spawn(worker(
                ctx.clone(),
                conn,
                payer,
                format!("{name}-{i}"),
                deadline,
            ))
        })
        .collect();
    let mut stats = Stats::new();
    for t in tasks {
        let (conn, s) = t.await.expect("worker");
        conns.push(conn);
        stats.merge(s);
    }
    let wall = start.elapsed();
    let split1 = split(server_cpu_dir);
    Phase {
        stats,
        wall,
        server_cpu: cpu(server_cpu_dir).saturating_sub(server0),
        server_user_sys: (
            Duration::from_nanos(split1.0.saturating_sub(split0.0)),
            Duration::from_nanos(split1.1.saturating_sub(split0.1)),
        ),
        client_cpu: cpu(client_cpu_dir).saturating_sub(client0),
    }
}

// ---------------------------------------------------------------- report

fn grouped(x: f64) -> String {
    if !x.is_finite() {
        return "n/a".to_owned();
    }
    let n = x.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn verdict(x: f64) -> &'static str {
    if x >= TARGET { "PASS" } else { "below" }
}

fn latency_line(name: &str, h: &Histogram<u64>) {
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "  {name:<16} n={:<8} p50 {:>7.1} µs   p99 {:>7.1} µs   p99.9 {:>7.1} µs   max {:>8.1} µs",
        h.len(),
        us(0.50),
        us(0.99),
        us(0.999),
        h.max() as f64 / 1000.0
    );
}

fn report(p: &Phase, payer: Payer) {
    let secs = p.wall.as_secs_f64();
    let server_secs = p.server_cpu.as_secs_f64();
    let rt = p.stats.round_trips as f64;
    let requests = match payer {
        Payer::InProcess => (p.stats.create.len() + p.stats.execute.len()) as f64,
        Payer::Http => (p.stats.create.len() + p.stats.pay.len() + p.stats.execute.len()) as f64,
        Payer::Floor => p.stats.create.len() as f64,
    };
    let per_cpu = if server_secs > 0.0 {
        rt / server_secs
    } else {
        f64::NAN
    };
    match payer {
        Payer::InProcess => {
            println!(
                "create+execute round trips/s (server on 1 core): {}  [target {}: {}]",
                grouped(rt / secs),
                grouped(TARGET),
                verdict(rt / secs)
            );
            println!(
                "round trips per server CPU-second: {}  [target {}: {}]",
                grouped(per_cpu),
                grouped(TARGET),
                verdict(per_cpu)
            );
        }
        Payer::Http => {
            println!(
                "full checkout (create+pay+execute)/s: {}",
                grouped(rt / secs)
            );
            println!("full checkouts per server CPU-second: {}", grouped(per_cpu));
        }
        Payer::Floor => {
            println!("GET /healthz requests/s: {}", grouped(rt / secs));
            println!("GET /healthz per server CPU-second: {}", grouped(per_cpu));
        }
    }
    println!(
        "HTTP requests/s: {}   ({} round trips in {:.2} s, {} failures)",
        grouped(requests / secs),
        grouped(rt),
        secs,
        p.stats.failures
    );
    let (user, system) = p.server_user_sys;
    println!(
        "server thread CPU: {:.2} s = {:.0}% of wall (user {:.2} s, system {:.2} s); \
         {:.1} µs per HTTP request; client thread CPU: {:.0}% of wall",
        server_secs,
        100.0 * server_secs / secs,
        user.as_secs_f64(),
        system.as_secs_f64(),
        1e6 * server_secs / requests.max(1.0),
        100.0 * p.client_cpu.as_secs_f64() / secs
    );
    println!("latency per request (client side):");
    match payer {
        Payer::Floor => latency_line("healthz", &p.stats.create),
        Payer::InProcess | Payer::Http => {
            latency_line("create", &p.stats.create);
            let pay = if payer == Payer::Http {
                "pay"
            } else {
                "pay (in-process)"
            };
            latency_line(pay, &p.stats.pay);
            latency_line("execute", &p.stats.execute);
        }
    }
    if let Some(why) = &p.stats.first_failure {
        println!("first failure: {why}");
    }
}

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|v: &f64| *v >= 0.0)
        .unwrap_or(default)
}

fn main() {
    let secs = env_f64("BENCH_SECS", 5.0).max(0.1);
    let warmup = env_f64("BENCH_WARMUP_SECS", 1.0);
    let conns_n = (env_f64("BENCH_CONNS", 16.0) as usize).max(1);
    let extras = env_f64("BENCH_EXTRA", 1.0) > 0.0;

    let server = spawn_server();
    let client_cpu_dir = this_thread_proc_dir();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");

    println!(
        "mock-gateway round trip bench: server = tokio current_thread runtime on 1 OS thread, \
         client = {conns_n} keep-alive HTTP/1.1 connections on another thread; \
         {warmup} s warm-up + {secs} s measured per phase; {} CPUs online",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    let mut phases = vec![
        (
            Payer::InProcess,
            "a",
            "(a) create + payer approves in-process + execute",
        ),
        (
            Payer::Http,
            "b",
            "(b) full checkout: create + POST bkashURL action=pay (302) + execute",
        ),
    ];
    if extras {
        phases.push((
            Payer::Floor,
            "c",
            "(c) floor: GET /healthz, HTTP alone (hyper + axum + kernel), no gateway logic",
        ));
    }

    let failures = rt.block_on(async {
        let config = server.app.gateway.config().clone();
        let mut total_failures = 0;
        for (payer, name, title) in phases {
            // every phase starts from an empty ledger, with a fresh token
            server.app.gateway.reset();
            let ctx = Arc::new(Ctx {
                app: server.app.clone(),
                host: server.addr.to_string(),
                token: grant(server.addr, &config).await,
                app_key: config.merchants[0].app_key.clone(),
            });
            let mut conns = Vec::with_capacity(conns_n);
            for _ in 0..conns_n {
                conns.push(connect(server.addr).await);
            }
            println!();
            println!("{title}");
            let w = run_phase(
                &ctx,
                &mut conns,
                &server.cpu_dir,
                &client_cpu_dir,
                payer,
                &format!("{name}w"),
                warmup,
            )
            .await;
            println!(
                "warm-up: {} round trips in {:.2} s ({} failures)",
                grouped(w.stats.round_trips as f64),
                w.wall.as_secs_f64(),
                w.stats.failures
            );
            if let Some(why) = &w.stats.first_failure {
                println!("first warm-up failure: {why}");
            }
            let p = run_phase(
                &ctx,
                &mut conns,
                &server.cpu_dir,
                &client_cpu_dir,
                payer,
                name,
                secs,
            )
            .await;
            report(&p, payer);
            total_failures += w.stats.failures + p.stats.failures;
            // close the connections so the graceful stop does not wait on them
            drop(conns);
        }

        if !extras {
            return total_failures;
        }
        // (d) the gateway logic alone, no HTTP, on this thread
        server.app.gateway.reset();
        let ctx = Ctx {
            app: server.app.clone(),
            host: server.addr.to_string(),
            token: grant(server.addr, &config).await,
            app_key: config.merchants[0].app_key.clone(),
        };
        println!();
        println!(
            "(d) gateway logic alone, no HTTP: authorize + parse + create + answer JSON, \
             payer_acts, authorize + execute + answer JSON, on the client thread"
        );
        let w = logic_only(&ctx, &client_cpu_dir, warmup);
        let d = logic_only(&ctx, &client_cpu_dir, secs);
        let cpu = d.cpu.as_secs_f64();
        println!(
            "gateway logic: {} create+pay+execute per CPU-second = {:.1} µs per round trip \
             ({} in {:.2} s, {} failures)",
            grouped(d.round_trips as f64 / cpu.max(1e-9)),
            1e6 * cpu / (d.round_trips.max(1) as f64),
            grouped(d.round_trips as f64),
            d.wall.as_secs_f64(),
            d.failures
        );
        if let Some(why) = w.first_failure.as_ref().or(d.first_failure.as_ref()) {
            println!("first failure: {why}");
        }
        total_failures += w.failures + d.failures;
        total_failures
    });
    drop(rt);

    let _ = server.stop.send(());
    let _ = server.thread.join();

    println!();
    if failures > 0 {
        println!("FAILED: {failures} round trips got wrong answers");
        std::process::exit(1);
    }
    println!("all answers correct");
}
