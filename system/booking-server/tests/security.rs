//! The security suite: attacks on a running instance, on the embedded stack
//! and on Redis (127.0.0.1:6379, a unique key prefix; skipped with a note
//! when no Redis answers there), with the mock gateway behind it. For each
//! attack the test asserts the answer AND that nothing changed: the ledger's
//! counters (`/ops/counters`), the records (`/ops/status`), every payment at
//! the gateway with its execute calls (the mock's own ledger), and the
//! connections a trap server saw (an attack that names a URL names the
//! trap: zero connections means no outbound fetch).
//!
//! - bodies on `POST /bookings`: malformed, non-UTF-8, deeply nested,
//!   wrong content type, oversized (10 MB with a length: refused before the
//!   client finished sending; chunked without a length: refused after the
//!   limit);
//! - callbacks: a forged signature, an unknown payment, a replay of a
//!   delivered callback, one payment's signature on another payment, and
//!   twenty concurrent copies of one valid callback (one execute);
//! - SNS webhooks: unsigned, attacker-signed with the certificate on the
//!   trap, attacker-signed with an allowed certificate URL, a subscription
//!   confirmation whose `SubscribeURL` is the trap;
//! - caller-supplied URLs: callback and redirect URLs in the booking body,
//!   and `Host` / `X-Forwarded-Host` headers, never reach the gateway;
//! - secrets: `/metrics`, `/status.json`, `/openapi.json` (and the health
//!   routes) show none of the gateway password, app secret, app key or
//!   admin token;
//! - admin routes: none on the public listener (404, even with the token);
//!   on the admin listener 401 without the token, with a wrong one, with it
//!   in the query string or as Basic, and for any path, each counted on
//!   `/metrics`, nothing changed;
//! - slow clients: a thousand half-open connections, then a booking
//!   succeeds; a client that stalls in its head is cut off at the default
//!   header timeout (the config does not set the limits: the instance
//!   serves with `HttpLimits::PUBLIC`, so this waits out its 10 s).
//!
//! (`/ops/audit?gateway=…` → 400 is in `end_to_end.rs`.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use booking::{SaleId, Settings};
use booking_server::config::{Environment, ServerConfig, StackConfig, StackKind};
use common::sum_of;
use mock_gateway::payer::{ActResult, Payer};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SALE: &str = "sec";

/// A TCP listener that only counts the connections made to it.
struct Trap {
    addr: SocketAddr,
    seen: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Trap {
    async fn start() -> Trap {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let seen = Arc::new(AtomicUsize::new(0));
        let s = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((_c, _)) = l.accept().await {
                s.fetch_add(1, Ordering::SeqCst);
            }
        });
        Trap { addr, seen, task }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn seen(&self) -> usize {
        self.seen.load(Ordering::SeqCst)
    }
}

/// The secrets the instance is configured with.
struct Secrets {
    password: String,
    app_key: String,
    app_secret: String,
    admin_token: String,
}

struct Instance {
    public: String,
    public_addr: SocketAddr,
    admin: String,
    http: reqwest::Client,
    mock: mock_gateway::Running,
    trap: Trap,
    secrets: Secrets,
    spawned: booking_server::Spawned,
}

/// What "nothing changed" compares.
#[derive(Debug, PartialEq)]
struct Snapshot {
    counters: Value,
    records: Value,
    gateway: Value,
    trap: usize,
}

impl Instance {
    /// An instance on `stack` (keys under `prefix`), the sale open with
    /// `candidates` loaded.
    async fn start(stack: StackConfig, prefix: &str, candidates: usize) -> Instance {
        let r = rand::random::<u64>();
        let secrets = Secrets {
            password: format!("pw-{r:016x}-secret"),
            app_key: format!("key-{r:016x}-secret"),
            app_secret: format!("appsecret-{r:016x}"),
            admin_token: format!("admintoken-{r:016x}"),
        };
        let merchant = mock_gateway::config::Merchant {
            username: "sec-merchant".into(),
            password: secrets.password.clone(),
            app_key: secrets.app_key.clone(),
            app_secret: secrets.app_secret.clone(),
        };
        let mock_config = mock_gateway::Config {
            merchants: vec![merchant],
            ..mock_gateway::Config::default()
        };
        let mut config = ServerConfig {
            sale: SaleId::parse(SALE).unwrap(),
            levels: vec![
                common::level("gold", 50, "500.00"),
                common::level("silver", 2, "500.00"),
            ],
            admin_token: Some(secrets.admin_token.clone()),
            environment: Environment::Rehearsal,
            settings: Settings::default(),
            stack,
            key_prefix: prefix.into(),
            ..ServerConfig::default()
        };
        config.gateway.username = "sec-merchant".into();
        config.gateway.password = secrets.password.clone();
        config.gateway.app_key = secrets.app_key.clone();
        config.gateway.app_secret = secrets.app_secret.clone();
        let (spawned, mock) = common::start_with_mock(mock_config, config).await;
        let public = spawned.public.clone();
        let admin = spawned.admin.clone();
        let public_addr = spawned.server.config.listen;
        let i = Instance {
            public,
            public_addr,
            admin,
            http: reqwest::Client::new(),
            mock,
            trap: Trap::start().await,
            secrets,
            spawned,
        };
        i.ops("/ops/reset", None).await;
        let list: Vec<String> = (0..candidates).map(|n| format!("sec-{n:03}")).collect();
        let loaded = i.ops("/ops/load-candidates", Some(json!(list))).await;
        assert_eq!(loaded["added"], candidates, "{loaded}");
        let opened = i.ops("/ops/open", None).await;
        assert_eq!(opened["counters"]["open"], true, "{opened}");
        i
    }

    async fn ops_with(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let request = self
            .http
            .request(method, format!("{}{path}", self.admin))
            .bearer_auth(&self.secrets.admin_token)
            .header("x-confirm-sale", SALE);
        common::ok_json(request, body, path).await
    }

    async fn ops(&self, path: &str, body: Option<Value>) -> Value {
        self.ops_with(reqwest::Method::POST, path, body).await
    }

    async fn snapshot(&self) -> Snapshot {
        let counters = self
            .ops_with(reqwest::Method::GET, "/ops/counters", None)
            .await;
        let status = self
            .ops_with(reqwest::Method::GET, "/ops/status", None)
            .await;
        Snapshot {
            counters,
            records: status["records"].clone(),
            gateway: serde_json::to_value(self.mock.app.gateway.payments()).unwrap(),
            trap: self.trap.seen(),
        }
    }

    /// `attack` changes nothing, once the instance has had a moment to act
    /// on it (the loops, a webhook's task).
    async fn unchanged<F: std::future::Future<Output = ()>>(&self, what: &str, attack: F) {
        let before = self.snapshot().await;
        attack.await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let after = self.snapshot().await;
        assert_eq!(before, after, "{what} changed something");
        assert_eq!(after.trap, 0, "{what}: the trap was connected to");
    }

    async fn book(&self, candidate: &str) -> Value {
        let r = self
            .http
            .post(format!("{}/bookings", self.public))
            .json(&json!({"candidate": candidate, "level": "gold"}))
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        assert_eq!(status, 201, "{body}");
        body
    }

    /// A booking whose payment the payer approved: its callback URL,
    /// returned, not delivered.
    async fn approved(&self, candidate: &str) -> (Value, url::Url) {
        let b = self.book(candidate).await;
        let payer = Payer::new(Duration::from_secs(20)).unwrap();
        match payer
            .act(b["redirect_url"].as_str().unwrap(), "pay")
            .await
            .unwrap()
        {
            ActResult::Redirect(url) => (b, url),
            other => panic!("no redirect: {other:?}"),
        }
    }

    fn executes(&self, payment: &str) -> usize {
        self.mock
            .app
            .gateway
            .payments()
            .iter()
            .find(|p| p.payment_id == payment)
            .map_or(0, |p| p.execute_calls.len())
    }

    async fn get(&self, path_and_query: &str) -> (u16, String) {
        let r = self
            .http
            .get(format!("{}{path_and_query}", self.public))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    async fn post_raw(&self, content_type: &str, body: Vec<u8>) -> (u16, String) {
        let r = self
            .http
            .post(format!("{}/bookings", self.public))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    async fn webhook(&self, body: String) -> u16 {
        self.http
            .post(format!("{}/payment/webhook", self.public))
            .header("content-type", "text/plain; charset=UTF-8")
            .header("x-amz-sns-message-type", "Notification")
            .body(body)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    /// An instance on the embedded stack (keys under [`SALE`]).
    async fn embedded(candidates: usize) -> Instance {
        Instance::start(common::embedded_stack(), SALE, candidates).await
    }

    async fn stop(self) {
        self.spawned.stop().await.expect("server stops");
        self.mock.stop().await;
        self.trap.task.abort();
    }
}

/// The stacks the suite runs on: embedded always; Redis when one answers
/// on 127.0.0.1:6379.
async fn stacks() -> Vec<(StackConfig, String)> {
    let mut out = vec![(common::embedded_stack(), SALE.to_owned())];
    if TcpStream::connect("127.0.0.1:6379").await.is_ok() {
        out.push((
            StackConfig {
                kind: StackKind::Redis,
                redis_url: "redis://127.0.0.1:6379".into(),
                redis_pool_size: 8,
                ..StackConfig::default()
            },
            format!("sec-{:016x}", rand::random::<u64>()),
        ));
    } else {
        eprintln!("no Redis on 127.0.0.1:6379: the Redis half of the suite is skipped");
    }
    out
}

// ---------------------------------------------------------------------------
// bodies on POST /bookings

async fn bodies(i: &Instance) {
    let cases: Vec<(&str, &str, Vec<u8>)> = vec![
        ("malformed JSON", "application/json", br#"{"candidate": "sec-000", "level": "#.to_vec()),
        ("not an object", "application/json", b"[1, 2, 3]".to_vec()),
        ("wrong types", "application/json", br#"{"candidate": 7, "level": ["gold"]}"#.to_vec()),
        ("empty", "application/json", Vec::new()),
        (
            "non-UTF-8",
            "application/json",
            b"{\"candidate\": \"sec-\xff\xfe\", \"level\": \"gold\"}".to_vec(),
        ),
        (
            "a form, not JSON",
            "application/x-www-form-urlencoded",
            b"candidate=sec-000&level=gold".to_vec(),
        ),
        (
            "multipart, not JSON",
            "multipart/form-data; boundary=x",
            b"--x\r\ncontent-disposition: form-data; name=\"candidate\"\r\n\r\nsec-000\r\n--x--\r\n"
                .to_vec(),
        ),
        (
            "deeply nested",
            "application/json",
            "[".repeat(100_000).into_bytes(),
        ),
        (
            "deeply nested object",
            "application/json",
            format!(
                r#"{{"candidate": "sec-000", "level": "gold", "x": {}}}"#,
                "{\"a\":".repeat(50_000)
            )
            .into_bytes(),
        ),
    ];
    for (what, content_type, body) in cases {
        i.unchanged(what, async {
            let (status, answer) = i.post_raw(content_type, body).await;
            assert!((400..500).contains(&status), "{what}: {status} {answer}");
        })
        .await;
    }
    // the instance still books
    let (status, _) = i.get("/healthz").await;
    assert_eq!(status, 200);
}

/// 10 MB announced: the answer (413) comes once the route's limit is
/// passed, before the client has sent more than a sliver (twice the limit)
/// of what it announced. (The length is not refused up front: axum reads up
/// to the limit.)
async fn oversized_with_length(i: &Instance) {
    i.unchanged("a 10 MB body", async {
        let mut s = TcpStream::connect(i.public_addr).await.unwrap();
        let head = format!(
            "POST /bookings HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n",
            10 * 1024 * 1024
        );
        s.write_all(head.as_bytes()).await.unwrap();
        // past the route's limit (16 KiB), far short of what was announced
        let limit = booking_api::bookings::BODY_BYTES_MAX;
        s.write_all(&vec![b' '; 2 * limit]).await.unwrap();
        let started = Instant::now();
        let mut answer = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut answer))
            .await
            .expect("answered without the rest of the body")
            .unwrap();
        let answer = String::from_utf8_lossy(&answer[..n]).into_owned();
        assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
        assert!(started.elapsed() < Duration::from_secs(2));
    })
    .await;
}

/// 10 MB chunked, no length: refused once past the limit; the server does
/// not read on to the end.
async fn oversized_chunked(i: &Instance) {
    i.unchanged("a 10 MB chunked body", async {
        let s = TcpStream::connect(i.public_addr).await.unwrap();
        let (mut rd, mut wr) = s.into_split();
        wr.write_all(
            b"POST /bookings HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
              transfer-encoding: chunked\r\n\r\n",
        )
        .await
        .unwrap();
        let sender = tokio::spawn(async move {
            let mut chunk = format!("{:x}\r\n", 64 * 1024).into_bytes();
            chunk.extend_from_slice(&[b' '; 64 * 1024]);
            chunk.extend_from_slice(b"\r\n");
            let mut sent = 0usize;
            for _ in 0..160 {
                if wr.write_all(&chunk).await.is_err() {
                    break;
                }
                sent += 64 * 1024;
            }
            sent
        });
        let mut answer = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), rd.read(&mut answer))
            .await
            .expect("answered")
            .unwrap();
        let answer = String::from_utf8_lossy(&answer[..n]).into_owned();
        assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
        drop(rd);
        let _ = sender.await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// callbacks

fn with_param(url: &url::Url, name: &str, value: &str) -> String {
    let pairs: Vec<(String, String)> = url
        .query_pairs()
        .map(|(k, v)| {
            if k == name {
                (k.into_owned(), value.to_owned())
            } else {
                (k.into_owned(), v.into_owned())
            }
        })
        .collect();
    let query = serde_urlencoded_pairs(&pairs);
    format!("/payment/callback?{query}")
}

fn serde_urlencoded_pairs(pairs: &[(String, String)]) -> String {
    let mut u = url::Url::parse("http://x/").unwrap();
    u.query_pairs_mut().extend_pairs(pairs);
    u.query().unwrap_or_default().to_owned()
}

fn param(url: &url::Url, name: &str) -> String {
    url.query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
        .unwrap()
}

async fn callbacks(i: &Instance) {
    let (a, a_url) = i.approved("sec-001").await;
    let (b, b_url) = i.approved("sec-002").await;
    let a_payment = a["payment_id"].as_str().unwrap().to_owned();
    let b_payment = b["payment_id"].as_str().unwrap().to_owned();
    assert_eq!(param(&a_url, "paymentID"), a_payment);

    // a forged signature on a real payment
    i.unchanged("a forged callback signature", async {
        let forged = with_param(&a_url, "signature", "forged0000");
        let (status, page) = i.get(&forged).await;
        assert_eq!(status, 403, "{page}");
        let (status, page) = i.get(&with_param(&a_url, "signature", "")).await;
        assert!(status == 403 || status == 400, "{status} {page}");
    })
    .await;
    // an unknown payment
    i.unchanged("a callback of an unknown payment", async {
        let unknown = with_param(&a_url, "paymentID", "TR0011UNKNOWN0000001");
        let (status, page) = i.get(&unknown).await;
        assert!(status == 404 || status == 403, "{status} {page}");
    })
    .await;
    // A's signature presented for B's payment, and B's for A's
    i.unchanged("a cross-payment callback", async {
        let cross = with_param(&a_url, "paymentID", &b_payment);
        let (status, page) = i.get(&cross).await;
        assert_eq!(status, 403, "{page}");
        let cross = with_param(&b_url, "paymentID", &a_payment);
        let (status, page) = i.get(&cross).await;
        assert_eq!(status, 403, "{page}");
    })
    .await;
    // (`status` decides nothing: a forged `cancel` is in
    // booking-api's confirm_paths.rs)
    assert_eq!(i.executes(&a_payment), 0);
    assert_eq!(i.executes(&b_payment), 0);

    // twenty concurrent copies of A's valid callback: one execute
    let path = format!("/payment/callback?{}", a_url.query().unwrap());
    let copies: Vec<_> = (0..20)
        .map(|_| {
            let http = i.http.clone();
            let url = format!("{}{path}", i.public);
            tokio::spawn(async move { http.get(url).send().await.unwrap().status().as_u16() })
        })
        .collect();
    let mut statuses = Vec::new();
    for c in copies {
        statuses.push(c.await.unwrap());
    }
    assert!(statuses.contains(&200), "{statuses:?}");
    assert!(
        statuses.iter().all(|s| [200, 202, 409].contains(s)),
        "{statuses:?}"
    );
    assert_eq!(i.executes(&a_payment), 1, "one execute for twenty copies");
    // a replay later changes nothing
    i.unchanged("a replayed callback", async {
        let (status, page) = i.get(&path).await;
        assert_eq!(status, 200, "{page}");
    })
    .await;
    assert_eq!(i.executes(&a_payment), 1);
    assert_eq!(i.executes(&b_payment), 0);
}

// ---------------------------------------------------------------------------
// SNS webhooks

fn notification(payment: &str, cert_url: &str, topic: &str) -> sns::SnsMessage {
    sns::SnsMessage {
        message_type: sns::MessageType::Notification,
        message_id: format!("{:032x}", rand::random::<u128>()),
        token: None,
        topic_arn: topic.to_owned(),
        subject: None,
        message: json!({
            "paymentID": payment,
            "trxID": "TRX0000001",
            "merchantInvoiceNumber": "sec-invoice",
            "transactionStatus": "Completed",
        })
        .to_string(),
        subscribe_url: None,
        timestamp: chrono::Utc::now()
            .format("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string(),
        signature_version: "1".into(),
        signature: String::new(),
        signing_cert_url: cert_url.to_owned(),
        unsubscribe_url: Some(format!("{cert_url}?Action=Unsubscribe")),
    }
}

async fn webhooks(i: &Instance) {
    let (b, _) = i.approved("sec-010").await;
    let payment = b["payment_id"].as_str().unwrap().to_owned();
    let topic = i.mock.app.webhooks.topic_arn().to_owned();
    let attacker = sns::Signer::generate("sns.amazonaws.com").unwrap();
    let trap_cert = i.trap.url("/SimpleNotificationService-attacker.pem");
    let allowed_cert = i.mock.app.webhooks.cert_url();

    i.unchanged("an unsigned notification", async {
        let msg = notification(&payment, &allowed_cert, &topic);
        let status = i.webhook(serde_json::to_string(&msg).unwrap()).await;
        assert_eq!(status, 403);
    })
    .await;
    for cert_url in [
        trap_cert.clone(),
        format!(
            "http://localhost:{}/SimpleNotificationService-a.pem",
            i.trap.addr.port()
        ),
        format!(
            "https://127.0.0.1:{}/SimpleNotificationService-a.pem",
            i.trap.addr.port()
        ),
        format!(
            "https://sns.ap-southeast-1.amazonaws.com@127.0.0.1:{}/SimpleNotificationService-a.pem",
            i.trap.addr.port()
        ),
    ] {
        i.unchanged(
            &format!("an attacker-signed notification, cert at {cert_url}"),
            async {
                let mut msg = notification(&payment, &cert_url, &topic);
                attacker.sign(&mut msg, sns::SignatureVersion::V1).unwrap();
                let status = i.webhook(serde_json::to_string(&msg).unwrap()).await;
                assert_eq!(status, 403);
            },
        )
        .await;
    }
    // signed by the attacker's key, naming the real certificate: the
    // signature does not verify (the allowed fetch is the mock's own)
    let before = i.snapshot().await;
    let mut msg = notification(&payment, &allowed_cert, &topic);
    attacker.sign(&mut msg, sns::SignatureVersion::V2).unwrap();
    assert_eq!(i.webhook(serde_json::to_string(&msg).unwrap()).await, 403);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        before,
        i.snapshot().await,
        "an attacker's signature on the real cert URL"
    );
    // a subscription confirmation sending us to the trap, signed by the
    // attacker (refused before any visit)
    i.unchanged("a SubscribeURL on the trap", async {
        let mut msg = notification(&payment, &trap_cert, &topic);
        msg.message_type = sns::MessageType::SubscriptionConfirmation;
        msg.token = Some("token".into());
        msg.subscribe_url = Some(i.trap.url(&format!(
            "/?Action=ConfirmSubscription&TopicArn={topic}&Token=token"
        )));
        msg.unsubscribe_url = None;
        attacker.sign(&mut msg, sns::SignatureVersion::V1).unwrap();
        let r = i
            .http
            .post(format!("{}/payment/webhook", i.public))
            .header("content-type", "text/plain; charset=UTF-8")
            .header("x-amz-sns-message-type", "SubscriptionConfirmation")
            .body(serde_json::to_string(&msg).unwrap())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403);
    })
    .await;
    assert_eq!(i.executes(&payment), 0);
}

// ---------------------------------------------------------------------------
// caller-supplied URLs

async fn caller_urls(i: &Instance) {
    let trap = i.trap.url("/steal");
    let r = i
        .http
        .post(format!("{}/bookings", i.public))
        .header("host", i.trap.addr.to_string())
        .header("x-forwarded-host", i.trap.addr.to_string())
        .header("x-forwarded-proto", "http")
        .header("forwarded", format!("host={}", i.trap.addr))
        .json(&json!({
            "candidate": "sec-020",
            "level": "gold",
            "callback_url": trap,
            "callbackURL": trap,
            "redirect_url": trap,
            "successCallbackURL": trap,
        }))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let body: Value = r.json().await.unwrap_or(Value::Null);
    assert!(
        status == 201 || (400..500).contains(&status),
        "{status} {body}"
    );
    for p in i.mock.app.gateway.payments() {
        assert!(
            p.callback_url
                .starts_with(&format!("{}/payment/callback", i.public)),
            "a payment's callback is not ours: {}",
            p.callback_url
        );
        assert!(!p.callback_url.contains(&i.trap.addr.to_string()));
    }
    if status == 201 {
        let redirect = body["redirect_url"].as_str().unwrap();
        assert!(redirect.starts_with(&i.mock.url), "{redirect}");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(i.trap.seen(), 0);
}

// ---------------------------------------------------------------------------
// secrets

async fn no_secrets(i: &Instance) {
    let s = &i.secrets;
    for path in [
        "/metrics",
        "/status.json",
        "/openapi.json",
        "/healthz",
        "/readyz",
        "/status",
    ] {
        let (status, text) = i.get(path).await;
        assert!(
            status < 500 && status != 404 || path == "/status",
            "{path}: {status}"
        );
        for secret in [&s.password, &s.app_key, &s.app_secret, &s.admin_token] {
            assert!(!text.contains(secret.as_str()), "{path} shows a secret");
        }
    }
}

// ---------------------------------------------------------------------------
// slow clients

async fn half_open_clients(i: &Instance) {
    let mut held = Vec::new();
    for n in 0..1_000 {
        let mut s = TcpStream::connect(i.public_addr).await.unwrap();
        if n % 2 == 0 {
            s.write_all(b"POST /bookings HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n")
                .await
                .unwrap();
        }
        held.push(s);
    }
    let started = Instant::now();
    let b = i.book("sec-030").await;
    assert_eq!(b["outcome"], "admitted", "{b}");
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(held);
}

// ---------------------------------------------------------------------------
// admin routes

/// The admin routes: absent from the public listener (404, whatever the
/// token), and on the admin listener refused without the token, with a
/// wrong one (one byte off, the right one as Basic, in the query string,
/// another instance's token), or with a path trick; each refusal changes
/// nothing and is counted on `/metrics`.
async fn admin_routes(i: &Instance) {
    let token = i.secrets.admin_token.clone();
    let mut off_by_one = token.clone().into_bytes();
    let last = off_by_one.len() - 1;
    off_by_one[last] ^= 1;
    let off_by_one = String::from_utf8(off_by_one).unwrap();
    let wrong: Vec<(String, Option<String>)> = vec![
        ("no token".into(), None),
        ("one byte off".into(), Some(format!("Bearer {off_by_one}"))),
        (
            "a prefix of it".into(),
            Some(format!("Bearer {}", &token[..token.len() - 1])),
        ),
        ("as Basic".into(), Some(format!("Basic {token}"))),
        ("lower-case scheme".into(), Some(format!("bearer{token}"))),
        (
            "another token".into(),
            Some("Bearer admintoken-0000000000000000".into()),
        ),
    ];
    let refused_before = sum_of(&i.get("/metrics").await.1, "booking_admin_refused_total");
    let mut refused = 0u64;
    i.unchanged("the admin routes attacked", async {
        for (method, path) in common::SALE_ROUTES {
            let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            // the public listener has no admin route, with or without the token
            for auth in [None, Some(format!("Bearer {token}"))] {
                let mut r = i
                    .http
                    .request(method.clone(), format!("{}{path}", i.public));
                if let Some(a) = &auth {
                    r = r.header("authorization", a).header("x-confirm-sale", SALE);
                }
                let code = r.send().await.unwrap().status().as_u16();
                assert_eq!(code, 404, "{method} {path} on the public listener");
            }
            for (what, auth) in &wrong {
                let mut r = i
                    .http
                    .request(method.clone(), format!("{}{path}", i.admin))
                    .header("x-confirm-sale", SALE);
                if let Some(a) = auth {
                    r = r.header("authorization", a);
                }
                let resp = r.send().await.unwrap();
                assert_eq!(resp.status().as_u16(), 401, "{method} {path}: {what}");
                refused += 1;
            }
            // the token in the query string is no token
            let code = i
                .http
                .request(
                    method.clone(),
                    format!("{}{path}?access_token={token}", i.admin),
                )
                .send()
                .await
                .unwrap()
                .status()
                .as_u16();
            assert_eq!(code, 401, "{method} {path} with the token in the query");
            refused += 1;
        }
        // a path that is no route tells nothing without the token either
        for path in [
            "/ops/../ops/reset",
            "/ops//reset",
            "/OPS/RESET",
            "/ops/nope",
        ] {
            let resp = i
                .http
                .post(format!("{}{path}", i.admin))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status().as_u16(), 401, "{path}");
            refused += 1;
        }
    })
    .await;
    let refused_after = sum_of(&i.get("/metrics").await.1, "booking_admin_refused_total");
    assert_eq!(
        refused_after - refused_before,
        refused,
        "every refusal counted"
    );
}

// ---------------------------------------------------------------------------

/// Deletes the keys under `prefix` on 127.0.0.1:6379 (best effort, with
/// `redis-cli`): the suite leaves nothing behind on a shared server.
fn clear_redis_prefix(prefix: &str) {
    let script = format!("redis-cli --scan --pattern '{prefix}:*' | xargs -r redis-cli del");
    if let Err(e) = std::process::Command::new("sh")
        .args(["-c", &script])
        .stdout(std::process::Stdio::null())
        .status()
    {
        eprintln!("keys under {prefix} left on Redis: {e}");
    }
}

async fn suite(stack: StackConfig, prefix: &str) {
    let redis = stack.kind == StackKind::Redis;
    let i = Instance::start(stack, prefix, 40).await;
    bodies(&i).await;
    oversized_with_length(&i).await;
    oversized_chunked(&i).await;
    callbacks(&i).await;
    webhooks(&i).await;
    caller_urls(&i).await;
    no_secrets(&i).await;
    half_open_clients(&i).await;
    admin_routes(&i).await;
    assert_eq!(i.trap.seen(), 0, "no outbound request reached the trap");
    i.stop().await;
    if redis {
        clear_redis_prefix(prefix);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_attack_is_refused_and_changes_nothing_on_each_stack() {
    for (stack, prefix) in stacks().await {
        eprintln!("security suite on {:?}", stack.kind);
        suite(stack, &prefix).await;
    }
}

/// Found by this suite (issue 18): `POST /bookings` read its body as JSON
/// whatever the `Content-Type`, so a JSON body sent as `text/plain` (or a
/// form, or with no type) booked a seat. Those are CORS "simple" requests:
/// a page on any origin can make a visitor's browser send them without a
/// preflight. The route now answers 415 to anything but `application/json`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_body_sent_as_text_plain_is_refused() {
    let i = Instance::embedded(1).await;
    i.unchanged("a JSON body sent as text/plain", async {
        let (status, answer) = i
            .post_raw(
                "text/plain",
                br#"{"candidate": "sec-000", "level": "gold"}"#.to_vec(),
            )
            .await;
        assert_eq!(status, 415, "{answer}");
        for content_type in [
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "",
        ] {
            let (status, answer) = i
                .post_raw(
                    content_type,
                    br#"{"candidate": "sec-000", "level": "gold"}"#.to_vec(),
                )
                .await;
            assert_eq!(status, 415, "{content_type:?}: {answer}");
        }
    })
    .await;
    // the same body as JSON books
    let b = i.book("sec-000").await;
    assert_eq!(b["outcome"], "admitted", "{b}");
    i.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stalled_in_its_head_is_cut_off_at_the_default_header_timeout() {
    let i = Instance::embedded(1).await;
    let limit = booking_server::http_serve::HEADER_READ_TIMEOUT;
    let mut s = TcpStream::connect(i.public_addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: ")
        .await
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(limit + Duration::from_secs(5), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(read.is_ok(), "still open after {:?}", started.elapsed());
    assert!(
        started.elapsed() >= limit - Duration::from_secs(1),
        "cut off early: {:?}",
        started.elapsed()
    );
    // and the instance serves others meanwhile and after
    let (status, _) = i.get("/healthz").await;
    assert_eq!(status, 200);
    i.stop().await;
}
