//! A whole rehearsal in miniature, through the server's HTTP surface only:
//! the mock gateway on loopback (subscribing the server's webhook), a stack
//! with a 2 s hold, then reset → load 20 candidates → open → bookings → some
//! paid (PayNow: callback and webhook), some abandoned → the reconciler
//! releases the abandoned after the deadline → audit passes, and a released
//! seat is booked and paid again → audit passes again. The rehearsal runs
//! three times: on the embedded stack; with the ledger and coordination on a
//! private `redis-server` (a free loopback port, killed at the end) under a
//! unique key prefix; and on the AWS stack (that Redis, DynamoDB and its
//! stream on dynoxide, SQS and S3 on moto, the back office on this
//! machine's PostgreSQL in a schema of its own), where the audit also
//! proves every PAID booking reached the back office.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../../booking-redis/tests/support/redis_server.rs"]
mod redis_server;
#[path = "../../booking-smtp/tests/support/smtp_sink.rs"]
mod smtp_sink;

use std::sync::Arc;
use std::time::{Duration, Instant};

use booking::SaleId;
use booking_server::config::{MailConfig, MailKind, ServerConfig, StackConfig, StackKind};
use common::sum_of;
use mock_gateway::payer::{Behaviour, Payer};
use redis_server::RedisServer;
use serde_json::{Value, json};

/// The longest wait for the background loops to settle.
const SETTLE_MAX: Duration = Duration::from_secs(12);

struct Harness {
    base: String,
    /// The admin listener: every `/ops/` path goes there.
    admin: String,
    http: reqwest::Client,
    mock: mock_gateway::Running,
    spawned: booking_server::Spawned,
}

impl Harness {
    /// The mock gateway and a server on `stack`, keys under `key_prefix`.
    async fn start(stack: StackConfig, key_prefix: &str, mail: MailConfig) -> Harness {
        let config = ServerConfig {
            sale: SaleId::parse("e2e").unwrap(),
            levels: vec![
                common::level("gold", 3, "500.00"),
                common::level("silver", 2, "300.00"),
            ],
            settings: common::fast_settings(Duration::from_secs(2)),
            stack,
            key_prefix: key_prefix.into(),
            mail,
            ..ServerConfig::default()
        };
        let (spawned, mock) =
            common::start_with_mock(mock_gateway::Config::default(), config).await;
        let base = spawned.public.clone();
        let admin = spawned.admin.clone();
        Harness {
            base,
            admin,
            http: reqwest::Client::new(),
            mock,
            spawned,
        }
    }

    /// `path` on the public listener, or on the admin one for `/ops/`
    /// (confirming the production sale, as an operator would).
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        if path.starts_with("/ops/") {
            self.http
                .request(method, format!("{}{path}", self.admin))
                .header("x-confirm-sale", "e2e")
        } else {
            self.http.request(method, format!("{}{path}", self.base))
        }
    }

    async fn post(&self, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut r = self.request(reqwest::Method::POST, path);
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let resp = self
            .request(reqwest::Method::GET, path)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn book(&self, candidate: &str, level: &str) -> (u16, Value) {
        self.post(
            "/bookings",
            Some(json!({"candidate": candidate, "level": level})),
        )
        .await
    }

    /// Polls `/ops/status` until `done` holds, at most [`SETTLE_MAX`].
    async fn settle(&self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let (code, status) = self.get("/ops/status").await;
            assert_eq!(code, 200, "{status}");
            if done(&status) {
                return status;
            }
            assert!(
                start.elapsed() < SETTLE_MAX,
                "{what}: not settled after {SETTLE_MAX:?}: {status:#}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn metrics(&self) -> String {
        let resp = self
            .http
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp.text().await.unwrap()
    }

    async fn audit(&self) -> Value {
        let (code, report) = self.get("/ops/audit").await;
        assert_eq!(code, 200, "{report}");
        report
    }

    async fn stop(self) {
        self.spawned.stop().await.expect("server stops");
        self.mock.stop().await;
    }
}

fn records(status: &Value, level: &str) -> (u64, u64) {
    let r = &status["records"][level];
    (
        r["held"].as_u64().unwrap_or(0),
        r["paid"].as_u64().unwrap_or(0),
    )
}

fn counted(status: &Value, level: &str) -> u64 {
    status["counters"]["levels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["level"] == level)
        .unwrap()["count"]
        .as_u64()
        .unwrap()
}

/// Seats the published document shows taken on `level` (a write another
/// writer held the lock for lands just after the status call that asked for
/// it: a settle waits for it before the audit compares).
fn documented(status: &Value, level: &str) -> Option<u64> {
    status["document"]["levels"]
        .as_array()?
        .iter()
        .find(|l| l["level"] == level)?["taken"]
        .as_u64()
}

fn assert_passed_with(report: &Value, more: &[&str]) {
    let invariants = report["invariants"].as_array().unwrap();
    let failed: Vec<&Value> = invariants.iter().filter(|i| i["passed"] != true).collect();
    assert!(failed.is_empty(), "failed invariants: {failed:#?}");
    assert_eq!(report["passed"], true);
    for name in [
        "admissions_within_cap",
        "ledger_matches_records",
        "one_booking_per_candidate",
        "no_throttling",
        "dead_letter_queue_empty",
        "one_email_per_paid",
        "status_matches_counters",
        "status_never_showed_full_level_open",
        "gateway_completed_have_paid_booking",
        "paid_bookings_completed_at_gateway",
        "no_payment_executed_after_deadline",
        "one_token_grant",
        "status_writes_in_read_order",
    ]
    .iter()
    .chain(more)
    {
        assert!(
            invariants.iter().any(|i| i["name"] == *name),
            "{name} not audited"
        );
    }
}

async fn pay(payer: &Payer, booking: &Value, behaviour: Behaviour) {
    let url = booking["redirect_url"].as_str().expect("redirect_url");
    let run = payer.run(url, &behaviour).await.unwrap();
    if behaviour == Behaviour::PayNow {
        assert_eq!(run.delivered.len(), 1, "{run:?}");
        assert_eq!(run.delivered[0].status, Some(200), "{run:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rehearsal_holds_every_invariant_and_releases_abandoned_seats() {
    let stack = common::embedded_stack();
    rehearsal(stack, "e2e", &[], MailConfig::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rehearsal_mailing_over_smtp_delivers_one_email_per_paid_booking() {
    // a real SMTP server (aiosmtpd); the audit counts what it delivered
    let sink = smtp_sink::Sink::start(&[]);
    let mail = common::smtp_mail(sink.port, sink.maildir.clone());
    let stack = common::embedded_stack();
    rehearsal(stack, "e2e", &[], mail).await;
    let delivered = sink.log().delivered().unwrap();
    let mut ids: Vec<&str> = delivered.iter().map(|d| d.message_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        (delivered.len(), ids.len()),
        (4, 4),
        "one email per paid booking, each its own Message-ID: {delivered:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rehearsal_on_redis_holds_every_invariant_and_releases_abandoned_seats() {
    let redis = RedisServer::start_with(&["--appendonly", "yes"]);
    let stack = StackConfig {
        kind: StackKind::Redis,
        redis_url: redis.url(),
        redis_pool_size: 16,
        ..StackConfig::default()
    };
    rehearsal(
        stack,
        &format!("e2e-{:016x}", rand::random::<u64>()),
        &[],
        MailConfig::default(),
    )
    .await;
    drop(redis);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rehearsal_on_aws_holds_every_invariant_and_fills_the_back_office() {
    let redis = RedisServer::start_with(&["--appendonly", "yes"]);
    let local = booking_aws_local::LocalAws::start().await.unwrap();
    let id = format!("{:016x}", rand::random::<u64>());
    let postgres = std::env::var("SELLOUT_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".to_owned());
    let stack = StackConfig {
        postgres_url: Some(postgres.clone()),
        postgres_schema: format!("e2e_{id}"),
        ..common::aws_stack(redis.url(), 16, local.settings(), format!("e2e{id}"))
    };
    let config = ServerConfig {
        stack: stack.clone(),
        settings: common::fast_settings(Duration::from_secs(2)),
        ..ServerConfig::default()
    };
    let done = booking_server::provision(&config, false).await.unwrap();
    assert!(done.aws.as_ref().unwrap().changed());
    assert_eq!(done.migrations_applied, vec![1, 2]);
    let again = booking_server::provision(&config, false).await.unwrap();
    assert!(
        !again.aws.as_ref().unwrap().changed() && again.migrations_applied.is_empty(),
        "idempotent"
    );
    rehearsal(
        stack,
        &format!("e2e-{id}"),
        &["paid_in_back_office"],
        MailConfig::default(),
    )
    .await;
    let office = booking_postgres::BackOffice::connect(&postgres, &format!("e2e_{id}"))
        .await
        .unwrap();
    let rows = office.paid(&SaleId::parse("e2e").unwrap()).await.unwrap();
    assert!(
        rows.len() >= 3,
        "the paid bookings are in PostgreSQL: {rows:?}"
    );
    office.drop_schema().await.unwrap();
    drop(redis);
}

/// Reset → load → open → book → pay some, abandon some → released → audit →
/// rebook → audit → close → audit, on `stack`.
async fn rehearsal(
    stack: StackConfig,
    key_prefix: &str,
    more_invariants: &[&str],
    mail: MailConfig,
) {
    let h = Harness::start(stack, key_prefix, mail).await;
    let payer = Payer::new(Duration::from_secs(10)).unwrap();

    // reset, load, open
    let (code, reset) = h.post("/ops/reset", None).await;
    assert_eq!(code, 200, "{reset}");
    assert_eq!(reset["levels"].as_array().unwrap().len(), 2);
    let candidates: Vec<String> = (0..20).map(|i| format!("cand-{i:02}")).collect();
    let (code, loaded) = h
        .post("/ops/load-candidates", Some(json!(candidates)))
        .await;
    assert_eq!(code, 200, "{loaded}");
    assert_eq!(loaded["read"], 20);
    assert_eq!(loaded["added"], 20);
    let (code, _) = h.book("cand-00", "gold").await;
    assert_eq!(code, 409, "closed before open");
    let (code, opened) = h.post("/ops/open", None).await;
    assert_eq!(code, 200, "{opened}");
    assert_eq!(opened["counters"]["open"], true);

    // bookings: gold has 3 seats, silver 2
    let mut booked = Vec::new();
    for (c, level) in [
        ("cand-00", "gold"),
        ("cand-01", "gold"),
        ("cand-02", "gold"),
        ("cand-04", "silver"),
        ("cand-05", "silver"),
    ] {
        let (code, b) = h.book(c, level).await;
        assert_eq!(code, 201, "{c}: {b}");
        assert_eq!(b["status"], "HELD");
        booked.push(b);
    }
    let (code, full) = h.book("cand-03", "gold").await;
    assert_eq!((code, full["error"].as_str()), (409, Some("level_full")));
    let (code, again) = h.book("cand-00", "gold").await;
    assert_eq!(code, 200, "{again}");
    assert_eq!(again["outcome"], "already_holding");
    let (code, stranger) = h.book("stranger", "gold").await;
    assert_eq!(code, 403, "{stranger}");

    // pay three, abandon two
    pay(&payer, &booked[0], Behaviour::PayNow).await;
    pay(&payer, &booked[1], Behaviour::PayNow).await;
    pay(&payer, &booked[3], Behaviour::PayNow).await;
    pay(&payer, &booked[2], Behaviour::Abandon).await;
    pay(&payer, &booked[4], Behaviour::Abandon).await;

    // the worker, then the reconciler after the 2 s deadline
    let settled = h
        .settle("abandoned released", |s| {
            records(s, "gold") == (0, 2)
                && records(s, "silver") == (0, 1)
                && counted(s, "gold") == 2
                && counted(s, "silver") == 1
                && documented(s, "gold") == Some(2)
                && documented(s, "silver") == Some(1)
                && s["queue"]["visible"] == 0
                && s["queue"]["in_flight"] == 0
                && s["emails"] == 3
        })
        .await;
    assert_eq!(settled["dead_letters"], 0);
    assert_passed_with(&h.audit().await, more_invariants);

    // the released gold seat is booked again, and paid
    let (code, rebooked) = h.book("cand-03", "gold").await;
    assert_eq!(code, 201, "{rebooked}");
    pay(&payer, &rebooked, Behaviour::PayNow).await;
    let (code, b) = h.book("cand-02", "gold").await;
    assert_eq!(
        (code, b["error"].as_str()),
        (409, Some("level_full")),
        "{b}"
    );
    let settled = h
        .settle("rebooked seat paid", |s| {
            records(s, "gold") == (0, 3)
                && counted(s, "gold") == 3
                && documented(s, "gold") == Some(3)
                && s["queue"]["in_flight"] == 0
                && s["queue"]["visible"] == 0
                && s["emails"] == 4
        })
        .await;
    let gold = settled["document"]["levels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["level"] == "gold")
        .unwrap()
        .clone();
    assert_eq!(gold["state"], "full", "{gold}");
    assert_passed_with(&h.audit().await, more_invariants);

    // close, and the CLI's audit surface still answers
    let (code, closed) = h.post("/ops/close", None).await;
    assert_eq!(code, 200, "{closed}");
    assert_eq!(closed["counters"]["open"], false);
    assert_passed_with(&h.audit().await, more_invariants);

    // the background services' figures reach /metrics (sampled every second):
    // four bookings paid (by whichever path won), two holds given back
    let start = Instant::now();
    let metrics = loop {
        let text = h.metrics().await;
        if sum_of(&text, "booking_releases_total{") == 2 {
            break text;
        }
        assert!(
            start.elapsed() < SETTLE_MAX,
            "releases never reached /metrics:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(sum_of(&metrics, "booking_paid_total{"), 4, "{metrics}");
    assert!(
        sum_of(
            &metrics,
            r#"booking_worker_messages_total{outcome="stored"}"#
        ) >= 1
    );
    assert_eq!(
        sum_of(&metrics, r#"booking_queue_messages{state="dead_letter"}"#),
        0
    );
    assert_eq!(
        sum_of(&metrics, r#"booking_token_calls_total{call="grant"}"#),
        1,
        "{metrics}"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn emails_owed_while_smtp_is_down_are_listed_then_resent_once() {
    // nothing listens on the SMTP port yet: the winner's send fails
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let maildir = smtp_sink::temp_dir("owed");
    let mail = MailConfig {
        kind: MailKind::Smtp,
        smtp: booking_smtp::SmtpConfig {
            host: "127.0.0.1".into(),
            port,
            tls: booking_smtp::SmtpTls::None,
            timeout_ms: 2_000,
            ..booking_smtp::SmtpConfig::default()
        },
        readback_maildir: Some(maildir.clone()),
        ..MailConfig::default()
    };
    let stack = common::embedded_stack();
    let h = Harness::start(stack, "e2e-owed", mail).await;
    let payer = Payer::new(Duration::from_secs(10)).unwrap();
    assert_eq!(h.post("/ops/reset", None).await.0, 200);
    let (code, _) = h
        .post("/ops/load-candidates", Some(json!(["owed-0", "owed-1"])))
        .await;
    assert_eq!(code, 200);
    assert_eq!(h.post("/ops/open", None).await.0, 200);
    let mut paid = Vec::new();
    for c in ["owed-0", "owed-1"] {
        let (code, b) = h.book(c, "gold").await;
        assert_eq!(code, 201, "{b}");
        pay(&payer, &b, Behaviour::PayNow).await;
        paid.push(b["payment_id"].as_str().unwrap().to_owned());
    }
    let owed = h.get("/ops/emails/pending").await.1;
    let mut listed: Vec<String> = owed["owed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["payment_id"].as_str().unwrap().to_owned())
        .collect();
    listed.sort();
    paid.sort();
    assert_eq!(
        listed, paid,
        "both emails are owed while SMTP is down: {owed}"
    );
    assert_eq!(owed["truncated"], false);

    // the server comes up; `booking emails resend` sends what is owed
    let sink = smtp_sink::Sink::start_in(maildir, &["--port", &port.to_string()]);
    tokio::time::sleep(Duration::from_millis(600)).await; // past the e2e sweep interval
    let base = h.admin.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_booking"))
            .args(["--server", &base, "emails", "resend"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let resent: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(out.status.success(), "{resent}");
    assert_eq!(resent["failed"], 0, "{resent}");
    let (code, left) = h.get("/ops/emails/pending").await;
    assert_eq!(code, 200, "{left}");
    assert!(left["owed"].as_array().unwrap().is_empty(), "{left}");
    // exactly one email per paid booking reached the server (whoever sent
    // it: this resend or the reconciler's sweep), marked recovered
    let delivered = sink.log().delivered().unwrap();
    let mut got: Vec<String> = delivered
        .iter()
        .map(|d| d.confirmation.payment_id.to_string())
        .collect();
    got.sort();
    assert_eq!(got, paid, "{delivered:?}");
    assert!(delivered.iter().all(|d| d.confirmation.recovered));
    assert_passed_with(&h.audit().await, &[]);
    h.stop().await;
}

/// A listener that counts the connections made to it (and answers none).
async fn trap() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(conn);
        }
    });
    (url, hits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_audit_fetches_only_the_configured_gateway_never_a_url_from_the_request() {
    let h = Harness::start(StackConfig::default(), "e2e-ssrf", MailConfig::default()).await;
    let (trap_url, hits) = trap().await;
    for url in [
        trap_url.clone(),
        format!("{trap_url}/latest/meta-data/"),
        "http://169.254.169.254".to_owned(),
    ] {
        let (code, body) = h
            .get(&format!("/ops/audit?gateway={}", urlencode(&url)))
            .await;
        assert_eq!(code, 400, "{url}: {body}");
        assert!(
            body.to_string().contains("configured gateway"),
            "{url}: {body}"
        );
    }
    // the configured gateway's ground truth is still read
    let report = h.audit().await;
    assert!(
        report["invariants"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["name"] == "paid_bookings_completed_at_gateway"),
        "{report}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        hits.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the server connected to a URL named in a request"
    );
    h.stop().await;
}

fn urlencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}
