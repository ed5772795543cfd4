//! `ops::reset` leaves a consistent, empty sale, so a second rehearsal runs
//! against the same running deployment: on the embedded stack and on Redis
//! (a private `redis-server` with an append-only file, as a deployment's
//! must be, and a unique key prefix) and on AWS (that, with dynoxide and
//! the local SQS and S3), a first round books
//! (two PAID, one HELD, one PAID whose email is owed where the mailer is the
//! process's own,
//! a poison message in the dead-letter queue), the reset removes all of it
//! (and says how much), and a second round, in which a candidate PAID in
//! the first books and pays again, passes the whole audit with the mock
//! gateway's truth (which still holds the first round's payments).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../../booking-redis/tests/support/redis_server.rs"]
mod redis_server;
#[path = "../../booking-smtp/tests/support/smtp_sink.rs"]
mod smtp_sink;

use std::sync::Arc;
use std::time::{Duration, Instant};

use booking::coordination::keys;
use booking::queue::Message;
use booking::records::RecordStatus;
use booking::{CandidateHash, SaleId};
use booking_server::Server;
use booking_server::config::{MailConfig, ServerConfig, StackConfig, StackKind};
use booking_server::ops::{self, GatewayTruth};
use mock_gateway::payer::{Behaviour, Payer};
use serde_json::{Value, json};

const SETTLE_MAX: Duration = Duration::from_secs(20);
/// Long enough that the HELD booking is still held at the reset.
const HOLD: Duration = Duration::from_secs(60);

/// Makes the embedded stack's mailer fail every send (`down`) or work again.
fn mail_down(server: &Server, down: bool) {
    server
        .local_outputs
        .as_ref()
        .unwrap()
        .mailer
        .set_unavailable(down);
}

struct Harness {
    base: String,
    http: reqwest::Client,
    mock: mock_gateway::Running,
    server: Arc<Server>,
    spawned: booking_server::Spawned,
}

impl Harness {
    async fn start(stack: StackConfig, key_prefix: &str) -> Harness {
        Harness::start_mailing(stack, key_prefix, MailConfig::default()).await
    }

    async fn start_mailing(stack: StackConfig, key_prefix: &str, mail: MailConfig) -> Harness {
        let config = ServerConfig {
            sale: SaleId::parse("again").unwrap(),
            levels: vec![
                common::level("gold", 3, "500.00"),
                common::level("silver", 2, "300.00"),
            ],
            settings: common::fast_settings(HOLD),
            stack,
            key_prefix: key_prefix.into(),
            mail,
            ..ServerConfig::default()
        };
        let (spawned, mock) =
            common::start_with_mock(mock_gateway::Config::default(), config).await;
        let base = spawned.public.clone();
        let server = spawned.server.clone();
        Harness {
            base,
            http: reqwest::Client::new(),
            mock,
            server,
            spawned,
        }
    }

    async fn book(&self, candidate: &str, level: &str) -> (u16, Value) {
        let resp = self
            .http
            .post(format!("{}/bookings", self.base))
            .json(&json!({"candidate": candidate, "level": level}))
            .send()
            .await
            .unwrap();
        let code = resp.status().as_u16();
        (code, resp.json().await.unwrap_or(Value::Null))
    }

    async fn truth(&self) -> GatewayTruth {
        let text = common::get_text(&self.http, format!("{}/__mock/ledger", self.mock.url)).await;
        GatewayTruth::from_json(&text).unwrap()
    }

    /// This sale's records as (HELD, PAID) per level, once `want` holds.
    async fn settle_records(&self, what: &str, want: &[(&str, u64, u64)]) {
        let start = Instant::now();
        loop {
            let records = self.server.stack.records.scan_all().await.unwrap();
            let count = |level: &str, status: RecordStatus| {
                records
                    .iter()
                    .filter(|r| r.sale == self.server.stack.sale)
                    .filter(|r| r.level.as_str() == level && r.status == status)
                    .count() as u64
            };
            if want.iter().all(|(level, held, paid)| {
                count(level, RecordStatus::Held) == *held
                    && count(level, RecordStatus::Paid) == *paid
            }) {
                return;
            }
            assert!(
                start.elapsed() < SETTLE_MAX,
                "{what}: not settled: {records:#?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn stop(self) {
        self.spawned.stop().await.expect("server stops");
        self.mock.stop().await;
    }
}

async fn pay(payer: &Payer, booking: &Value) {
    let url = booking["redirect_url"].as_str().expect("redirect_url");
    let run = payer.run(url, &Behaviour::PayNow).await.unwrap();
    assert_eq!(run.delivered.len(), 1, "{run:?}");
    assert_eq!(run.delivered[0].status, Some(200), "{run:?}");
}

async fn book_held(h: &Harness, candidate: &str, level: &str) -> Value {
    let (code, b) = h.book(candidate, level).await;
    assert_eq!(code, 201, "{candidate}: {b}");
    assert_eq!(b["status"], "HELD", "{b}");
    b
}

async fn load_and_open(server: &Server) {
    let candidates: Vec<String> = (0..8).map(|i| format!("cand-{i:02}")).collect();
    let loaded = ops::load_candidates(server, &candidates).await.unwrap();
    assert_eq!(loaded.added, 8, "every candidate eligible again");
    let opened = ops::open(server).await.unwrap();
    assert!(opened.counters.open);
}

fn assert_audit_passed(report: &ops::AuditReport) {
    let failed: Vec<_> = report.invariants.iter().filter(|i| !i.passed).collect();
    assert!(failed.is_empty(), "failed invariants: {failed:#?}");
    assert!(report.passed);
    for name in [
        "one_booking_per_candidate",
        "ledger_matches_records",
        "one_email_per_paid",
        "dead_letter_queue_empty",
        "gateway_completed_have_paid_booking",
        "paid_bookings_completed_at_gateway",
        "no_payment_executed_after_deadline",
    ] {
        assert!(report.get(name).is_some(), "{name} not audited");
    }
}

/// Round 1, reset, round 2 on `stack`; `owed_email`: make one PAID
/// booking's confirmation fail (the embedded mailer can be made to).
async fn two_rounds(stack: StackConfig, key_prefix: &str, owed_email: bool) {
    let h = Harness::start(stack, key_prefix).await;
    let server = h.server.clone();
    let stack = &server.stack;
    let payer = Payer::new(Duration::from_secs(10)).unwrap();

    let first = ops::reset(&server).await.unwrap();
    assert_eq!(first.note, "clean", "{first:?}");
    load_and_open(&server).await;

    // round 1: cand-00 and cand-01 paid, cand-02 held
    let b0 = book_held(&h, "cand-00", "gold").await;
    let b1 = book_held(&h, "cand-01", "gold").await;
    let _b2 = book_held(&h, "cand-02", "silver").await;
    pay(&payer, &b0).await;
    if owed_email {
        mail_down(&server, true);
    }
    pay(&payer, &b1).await;
    // a poison message: the worker sends it on to the dead-letter queue
    stack
        .queue
        .send(Message {
            body: "not a booking".into(),
            group_id: "poison".into(),
            deduplication_id: "poison-1".into(),
        })
        .await
        .unwrap();
    h.settle_records("round 1", &[("gold", 0, 2), ("silver", 1, 0)])
        .await;
    common::wait_until(
        "the poison never dead-lettered",
        SETTLE_MAX,
        || async move { !stack.queue.dead_letters().await.unwrap().is_empty() },
    )
    .await;
    let retry_key = keys::email_retry(
        &stack.prefix,
        &stack.sale,
        &booking::PaymentId::parse(b1["payment_id"].as_str().unwrap()).unwrap(),
    );
    if owed_email {
        let retry_key = &retry_key;
        common::wait_until(
            "no retry state for the owed email",
            SETTLE_MAX,
            || async move { stack.coordination.get(retry_key).await.unwrap().is_some() },
        )
        .await;
        let owed = ops::emails_pending(&server).await.unwrap();
        assert_eq!(owed.owed.len(), 1, "{owed:?}");
    }
    let round1_completed = h.truth().await.completed().count();
    assert_eq!(round1_completed, 2);

    // the reset, of the closed sale (an open one is refused)
    let refused = ops::reset(&server).await.unwrap_err();
    assert!(matches!(refused, ops::OpsError::SaleOpen(_)), "{refused:?}");
    ops::close(&server).await.unwrap();
    let report = ops::reset(&server).await.unwrap();
    assert_eq!(report.records_removed, 3, "{report:?}");
    assert_eq!(report.dead_letters_removed, 1, "{report:?}");
    assert_eq!(
        report.email_retries_removed,
        u64::from(owed_email),
        "{report:?}"
    );
    assert_eq!(
        report.mail_removed,
        if owed_email { 1 } else { 2 },
        "{report:?}"
    );
    assert!(report.status_writes_removed >= 1, "{report:?}");
    if owed_email {
        assert!(
            report.alerts_removed >= 1,
            "the failed send's alert: {report:?}"
        );
    }
    assert_eq!(report.records_left, 0, "{report:?}");
    assert_eq!(report.dead_letters_left, 0, "{report:?}");
    assert_eq!(
        report.queue_left.visible + report.queue_left.in_flight,
        0,
        "{report:?}"
    );
    assert_eq!(report.note, "clean");
    let printed = serde_json::to_value(&report).unwrap();
    assert_eq!(
        printed["records_removed"], 3,
        "the CLI prints it: {printed}"
    );

    // everything of the sale is gone
    let counters = stack.ledger.counters(&stack.sale).await.unwrap();
    assert!(!counters.open);
    assert!(counters.levels.iter().all(|l| l.count == 0), "{counters:?}");
    assert_eq!(
        stack
            .ledger
            .paid(&stack.sale, &CandidateHash::of("cand-00"))
            .await
            .unwrap(),
        None
    );
    let left: Vec<_> = stack
        .records
        .scan_all()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.sale == stack.sale)
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(
        stack
            .records
            .owed_emails(u64::MAX, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        stack
            .records
            .held_due(u64::MAX, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(stack.queue.dead_letters().await.unwrap().is_empty());
    assert!(
        server
            .outputs
            .sent_mail()
            .await
            .unwrap()
            .iter()
            .all(|c| c.sale != stack.sale),
        "the sale's mail is forgotten"
    );
    assert_eq!(stack.coordination.get(&retry_key).await.unwrap(), None);
    assert!(ops::emails_pending(&server).await.unwrap().owed.is_empty());
    if owed_email {
        mail_down(&server, false);
    }
    // not eligible any more: the candidates went with the reset
    let (code, refused) = h.book("cand-00", "gold").await;
    assert!(code == 403 || code == 409, "{code}: {refused}");

    // round 2: cand-00, PAID in round 1, books and pays again
    load_and_open(&server).await;
    let again = book_held(&h, "cand-00", "gold").await;
    assert_ne!(again["payment_id"], b0["payment_id"]);
    pay(&payer, &again).await;
    let b3 = book_held(&h, "cand-03", "silver").await;
    pay(&payer, &b3).await;
    h.settle_records("round 2", &[("gold", 0, 1), ("silver", 0, 1)])
        .await;
    let start = Instant::now();
    loop {
        let mail = server.outputs.sent_mail().await.unwrap();
        let depth = stack.queue.depth().await.unwrap();
        if mail.iter().filter(|c| c.sale == stack.sale).count() == 2
            && depth.visible + depth.in_flight == 0
        {
            break;
        }
        assert!(start.elapsed() < SETTLE_MAX, "round 2's mail: {mail:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // the published document catches up with the counters
    let start = Instant::now();
    let report = loop {
        ops::status(&server).await.unwrap();
        let truth = h.truth().await;
        assert_eq!(truth.completed().count(), 4, "both rounds at the gateway");
        let report = ops::audit(&server, Some(&truth)).await.unwrap();
        if report.passed || start.elapsed() > SETTLE_MAX {
            break report;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_audit_passed(&report);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reset_clears_the_embedded_sale_for_a_second_round() {
    let stack = common::embedded_stack();
    two_rounds(stack, "reset-embedded", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reset_clears_the_redis_sale_for_a_second_round() {
    // a deployment's Redis keeps an append-only file (the build refuses
    // one that does not): a private one, killed at the end
    let redis = redis_server::RedisServer::start_with(&["--appendonly", "yes"]);
    let stack = StackConfig {
        kind: StackKind::Redis,
        redis_url: redis.url(),
        redis_pool_size: 8,
        ..StackConfig::default()
    };
    two_rounds(
        stack,
        &format!("reset-{:016x}", rand::random::<u64>()),
        false,
    )
    .await;
    drop(redis);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reset_clears_the_aws_sale_for_a_second_round() {
    // the ledger on a private Redis; DynamoDB and its stream on dynoxide,
    // SQS and S3 on the local emulators, provisioned fresh
    let redis = redis_server::RedisServer::start_with(&["--appendonly", "yes"]);
    let local = booking_aws_local::LocalAws::start().await.unwrap();
    let id = format!("{:016x}", rand::random::<u64>());
    let stack = common::aws_stack(redis.url(), 8, local.settings(), format!("reset{id}"));
    let config = ServerConfig {
        stack: stack.clone(),
        settings: common::fast_settings(HOLD),
        ..ServerConfig::default()
    };
    booking_server::provision(&config, false).await.unwrap();
    two_rounds(stack, &format!("reset-{id}"), true).await;
    drop(redis);
}

/// Mail sent over SMTP and read back from the receiver's maildir is not the
/// stack's to clear: with the sale's mail there, reset refuses (saying so)
/// before the ledger or the records change.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reset_refuses_while_a_mail_log_it_cannot_clear_holds_the_sales_mail() {
    let sink = smtp_sink::Sink::start(&[]);
    let mail = common::smtp_mail(sink.port, sink.maildir.clone());
    let stack = common::embedded_stack();
    let h = Harness::start_mailing(stack, "reset-smtp", mail).await;
    let server = h.server.clone();
    let payer = Payer::new(Duration::from_secs(10)).unwrap();
    let first = ops::reset(&server).await.unwrap();
    assert_eq!(
        first.note, "clean",
        "an empty maildir is no reason to refuse"
    );
    load_and_open(&server).await;
    let b0 = book_held(&h, "cand-00", "gold").await;
    pay(&payer, &b0).await;
    h.settle_records("paid", &[("gold", 0, 1)]).await;
    let outputs = &server.outputs;
    common::wait_until(
        "the email never reached the maildir",
        SETTLE_MAX,
        || async move { !outputs.sent_mail().await.unwrap().is_empty() },
    )
    .await;

    ops::close(&server).await.unwrap();
    let refused = ops::reset(&server).await.unwrap_err();
    let why = refused.to_string();
    assert!(
        matches!(refused, ops::OpsError::ResetRefused(_)),
        "{refused:?}"
    );
    assert!(why.contains("1 confirmation emails"), "{why}");
    // nothing but the open flag changed
    let records = server.stack.records.scan_all().await.unwrap();
    assert_eq!(records.len(), 1, "the record stays: {records:?}");
    let counters = server
        .stack
        .ledger
        .counters(&server.stack.sale)
        .await
        .unwrap();
    assert!(!counters.open, "closed first");
    assert_eq!(
        counters.levels.iter().map(|l| l.count).sum::<u32>(),
        1,
        "the ledger keeps its seat: {counters:?}"
    );
    h.stop().await;
}
