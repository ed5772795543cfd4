#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The Lambda functions: one invocation on its own (partial batch failures,
//! malformed events, the real expiry handler releasing a seat), and the
//! binary end to end through `lambda_runtime` against an in-test Lambda
//! Runtime API.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use booking::ledger::{Admission, Ledger, Step};
use booking::records::{BookingRecord, StreamRecord};
use booking::{CandidateHash, Level, ManualClock, PaymentId, RequestToken, SaleId};
use booking_embedded::ledger::EmbeddedLedger;
use booking_embedded::records::{EmbeddedRecords, RecordsConfig};
use booking_lambda::{InvokeError, invoke};
use booking_streams::item::item_of;
use booking_streams::mapping::BatchHandler;
use parking_lot::Mutex;
use serde_json::{Value, json};

fn held(who: &str, payment: &str) -> BookingRecord {
    BookingRecord::held(
        CandidateHash::of(who),
        SaleId::parse("launch").unwrap(),
        Level::parse("gold").unwrap(),
        PaymentId::parse(payment).unwrap(),
        1_000,
        601_000,
    )
}

/// A TTL-service deletion of `record`, as Lambda delivers it.
fn ttl_removal(record: &BookingRecord, seq: &str) -> Value {
    json!({"eventID": seq, "eventName": "REMOVE", "eventVersion": "1.1", "eventSource": "aws:dynamodb",
           "awsRegion": "ap-southeast-1",
           "dynamodb": {"ApproximateCreationDateTime": 1700000700.5,
                        "Keys": {"candidate": {"S": record.candidate.as_str()}},
                        "OldImage": item_of(record).unwrap(), "SequenceNumber": seq,
                        "SizeBytes": 26, "StreamViewType": "NEW_AND_OLD_IMAGES"},
           "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"}})
}

fn insert(record: &BookingRecord, seq: &str) -> Value {
    json!({"eventID": seq, "eventName": "INSERT", "eventVersion": "1.1", "eventSource": "aws:dynamodb",
           "dynamodb": {"ApproximateCreationDateTime": 1700000000.0,
                        "Keys": {"candidate": {"S": record.candidate.as_str()}},
                        "NewImage": item_of(record).unwrap(), "SequenceNumber": seq,
                        "StreamViewType": "NEW_AND_OLD_IMAGES"}})
}

/// A handler that fails at one local sequence number and records what it saw.
#[derive(Debug, Default)]
struct FailingAt {
    at: Option<u64>,
    seen: Mutex<Vec<u64>>,
}

#[async_trait]
impl BatchHandler for FailingAt {
    fn name(&self) -> &'static str {
        "failing"
    }
    async fn handle_batch(&self, records: &[StreamRecord]) -> Option<u64> {
        for r in records {
            if Some(r.sequence) == self.at {
                return self.at;
            }
            self.seen.lock().push(r.sequence);
        }
        None
    }
}

fn batch(n: usize) -> Value {
    let records: Vec<Value> = (1..=n)
        .map(|i| {
            insert(
                &held(&format!("c{i}"), &format!("TR{i}")),
                &format!("4000{i}"),
            )
        })
        .collect();
    json!({ "Records": records })
}

#[tokio::test]
async fn a_failed_record_is_reported_by_its_sequence_number_and_the_rest_retried() {
    let handler = FailingAt {
        at: Some(2),
        ..FailingAt::default()
    };
    let answer = invoke(&handler, batch(3)).await.unwrap();
    assert_eq!(
        serde_json::to_value(&answer).unwrap(),
        json!({"batchItemFailures": [{"itemIdentifier": "40002"}]})
    );
    assert_eq!(*handler.seen.lock(), vec![1]);

    let all = FailingAt::default();
    let answer = invoke(&all, batch(3)).await.unwrap();
    assert_eq!(
        serde_json::to_value(&answer).unwrap(),
        json!({"batchItemFailures": []})
    );
    assert_eq!(*all.seen.lock(), vec![1, 2, 3]);
    // an empty batch is handled without calling the handler
    let none = FailingAt::default();
    invoke(&none, json!({"Records": []})).await.unwrap();
    assert!(none.seen.lock().is_empty());
}

#[tokio::test]
async fn malformed_events_are_errors_and_reach_no_handler() {
    let handler = FailingAt::default();
    for bad in [
        json!({"foo": 1}),
        json!("text"),
        json!({"Records": [{"eventName": "INSERT"}]}),
    ] {
        assert!(
            matches!(
                invoke(&handler, bad.clone()).await,
                Err(InvokeError::NotAStreamEvent(_))
            ),
            "{bad}"
        );
    }
    let not_a_booking = json!({"Records": [{"eventName": "INSERT",
        "dynamodb": {"SequenceNumber": "1", "NewImage": {"candidate": {"S": "x"}}}}]});
    assert!(matches!(
        invoke(&handler, not_a_booking).await,
        Err(InvokeError::MalformedRecord(_))
    ));
    assert!(handler.seen.lock().is_empty());
}

#[tokio::test]
async fn the_expiry_function_gives_back_the_seat_of_a_held_record_the_ttl_deleted() {
    let clock = ManualClock::new(1_000);
    let ledger = Arc::new(EmbeddedLedger::new());
    let sale = SaleId::parse("launch").unwrap();
    let gold = Level::parse("gold").unwrap();
    ledger.reset(&sale, &[(gold.clone(), 5)]).await.unwrap();
    let who = CandidateHash::of("x");
    ledger
        .load_candidates(&sale, std::slice::from_ref(&who))
        .await
        .unwrap();
    ledger.set_open(&sale, true).await.unwrap();
    let token = RequestToken::parse("t1").unwrap();
    assert!(matches!(
        ledger
            .admit(&sale, &who, &gold, &token, 1_000)
            .await
            .unwrap(),
        Admission::Admitted { .. }
    ));
    let payment = PaymentId::parse("TR1").unwrap();
    assert_eq!(
        ledger
            .attach_payment(&sale, &who, &token, &payment, 601_000)
            .await
            .unwrap(),
        Step::Done
    );
    let records = Arc::new(EmbeddedRecords::new(
        Arc::new(clock),
        RecordsConfig::default(),
    ));
    let handler = booking_service::expiry::ExpiryHandler::new(records, ledger.clone(), 0);
    // the README's sample event: the TTL service deleted x's HELD record
    let event: Value =
        serde_json::from_str(&std::fs::read_to_string(SAMPLE_EVENT).unwrap()).unwrap();
    let answer = invoke(&handler, event.clone()).await.unwrap();
    assert!(answer.batch_item_failures.is_empty());
    assert!(
        ledger.hold(&sale, &who).await.unwrap().is_none(),
        "the seat is back"
    );
    assert_eq!(ledger.counters(&sale).await.unwrap().levels[0].count, 0);
    // Lambda delivers at least once: the same batch again changes nothing
    let again = invoke(&handler, event).await.unwrap();
    assert!(again.batch_item_failures.is_empty());
    assert_eq!(ledger.counters(&sale).await.unwrap().levels[0].count, 0);
}

/// The Lambda Runtime API, as much of it as `lambda_runtime` uses.
#[derive(Debug, Default)]
struct RuntimeApi {
    events: Mutex<VecDeque<(String, Value)>>,
    responses: Mutex<Vec<(String, Value)>>,
    errors: Mutex<Vec<(String, Value)>>,
    init_errors: Mutex<Vec<Value>>,
}

async fn next(State(api): State<Arc<RuntimeApi>>) -> impl IntoResponse {
    loop {
        if let Some((id, event)) = api.events.lock().pop_front() {
            let mut h = HeaderMap::new();
            h.insert("Lambda-Runtime-Aws-Request-Id", id.parse().unwrap());
            let deadline = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis()
                + 30_000;
            h.insert(
                "Lambda-Runtime-Deadline-Ms",
                deadline.to_string().parse().unwrap(),
            );
            h.insert(
                "Lambda-Runtime-Invoked-Function-Arn",
                "arn:aws:lambda:ap-southeast-1:000000000000:function:booking-expiry"
                    .parse()
                    .unwrap(),
            );
            h.insert("Lambda-Runtime-Trace-Id", "Root=1-0-0".parse().unwrap());
            return (h, axum::Json(event));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn response(
    State(api): State<Arc<RuntimeApi>>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> &'static str {
    api.responses
        .lock()
        .push((id, serde_json::from_slice(&body).unwrap_or(Value::Null)));
    "{}"
}

async fn error(
    State(api): State<Arc<RuntimeApi>>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> &'static str {
    api.errors
        .lock()
        .push((id, serde_json::from_slice(&body).unwrap_or(Value::Null)));
    "{}"
}

async fn init_error(State(api): State<Arc<RuntimeApi>>, body: axum::body::Bytes) -> &'static str {
    api.init_errors
        .lock()
        .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
    "{}"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_expiry_binary_answers_invocations_through_the_runtime_api() {
    let api = Arc::new(RuntimeApi::default());
    api.events.lock().push_back((
        "req-1".into(),
        json!({"Records": [ttl_removal(&held("nobody", "TR9"), "6001")]}),
    ));
    api.events
        .lock()
        .push_back(("req-2".into(), json!({"not": "an event"})));
    let app = Router::new()
        .route("/2018-06-01/runtime/invocation/next", get(next))
        .route(
            "/2018-06-01/runtime/invocation/{id}/response",
            post(response),
        )
        .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
        .route("/2018-06-01/runtime/init/error", post(init_error))
        .with_state(api.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    // the embedded stack: nothing to reach, the same construction as AWS
    let dir = std::env::temp_dir().join(format!("booking-lambda-{:016x}", rand_u64()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("booking.toml");
    std::fs::write(&config, "sale = \"launch\"\n").unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_booking-expiry-lambda"))
        .env(booking_lambda::CONFIG_ENV, &config)
        .env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", "booking-expiry")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "test")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", "test")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while (api.responses.lock().len() + api.errors.lock().len() < 2)
        && started.elapsed() < Duration::from_secs(60)
        && api.init_errors.lock().is_empty()
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.kill().await.ok();
    assert!(
        api.init_errors.lock().is_empty(),
        "{:?}",
        api.init_errors.lock()
    );
    assert_eq!(
        *api.responses.lock(),
        vec![("req-1".to_owned(), json!({"batchItemFailures": []}))]
    );
    let errors = api.errors.lock().clone();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, "req-2");
    assert!(
        errors[0]
            .1
            .to_string()
            .contains("not a DynamoDB stream event"),
        "{:?}",
        errors[0].1
    );
}

fn rand_u64() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// Every `Key: value` of the template, in order.
fn template_values(key: &str) -> Vec<String> {
    let text = include_str!("../../../deploy/lambda.yaml");
    text.lines()
        .filter_map(|l| l.trim().strip_prefix(&format!("{key}:")))
        .map(|v| v.trim().to_owned())
        .collect()
}

#[test]
fn the_deployed_mappings_are_the_local_mappings_settings() {
    let local = booking_streams::policy::MappingConfig::default();
    let both = |key: &str, want: String| {
        assert_eq!(template_values(key), vec![want.clone(), want], "{key}");
    };
    both("BatchSize", local.batch_size.to_string());
    both("MaximumRetryAttempts", local.retry_attempts_max.to_string());
    both(
        "MaximumRecordAgeInSeconds",
        local.record_age_max.as_secs().to_string(),
    );
    both(
        "BisectBatchOnFunctionError",
        local.bisect_on_error.to_string(),
    );
    both(
        "FunctionResponseTypes",
        "[ReportBatchItemFailures]".to_owned(),
    );
    // one Globals entry for both functions, and the on-failure queue twice
    assert_eq!(template_values("Handler"), ["bootstrap"]);
    assert_eq!(
        template_values("Type")
            .iter()
            .filter(|t| *t == "SQS")
            .count(),
        2
    );
}

/// The sample event `events/ttl-removal.json`, which the README invokes.
const SAMPLE_EVENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/events/ttl-removal.json");

#[tokio::test]
async fn the_sample_event_is_a_ttl_deletion_of_a_held_booking_in_the_tables_item_format() {
    let text = std::fs::read_to_string(SAMPLE_EVENT).unwrap();
    let sample: Value = serde_json::from_str(&text).unwrap();
    let expected = json!({"Records": [ttl_removal(&held("x", "TR1"), "5001")]});
    assert_eq!(
        sample,
        expected,
        "events/ttl-removal.json drifted from the table's item format; it should be:\n{}",
        serde_json::to_string_pretty(&expected).unwrap()
    );
}

/// Runs a function binary locally on one event file.
fn run_local(bin: &str, event: &std::path::Path) -> std::process::Output {
    let dir = std::env::temp_dir().join(format!("booking-lambda-local-{:016x}", rand_u64()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("booking.toml");
    std::fs::write(&config, "sale = \"launch\"\n").unwrap();
    let out = std::process::Command::new(bin)
        .arg(booking_lambda::EVENT_FLAG)
        .arg(event)
        .env(booking_lambda::CONFIG_ENV, &config)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).ok();
    out
}

#[test]
fn the_expiry_binary_answers_a_local_event_file_and_refuses_a_malformed_one() {
    let bin = env!("CARGO_BIN_EXE_booking-expiry-lambda");
    let out = run_local(bin, std::path::Path::new(SAMPLE_EVENT));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer, json!({"batchItemFailures": []}));

    let bad = std::env::temp_dir().join(format!("not-an-event-{:016x}.json", rand_u64()));
    std::fs::write(&bad, r#"{"not": "an event"}"#).unwrap();
    let out = run_local(bin, &bad);
    std::fs::remove_file(&bad).ok();
    assert!(!out.status.success());
    assert!(
        out.stdout.is_empty(),
        "no answer is printed for a malformed event"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a DynamoDB stream event"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_function_takes_no_arguments_but_an_event_file() {
    let args = |a: &[&str]| booking_lambda::local_event(a.iter().map(|s| s.to_string()));
    assert_eq!(args(&[]).unwrap(), None);
    assert_eq!(
        args(&["--event", "e.json"]).unwrap(),
        Some(std::path::PathBuf::from("e.json"))
    );
    for bad in [
        &["--event"][..],
        &["e.json"],
        &["--event", "a", "b"],
        &["--events", "a"],
    ] {
        assert!(args(bad).is_err(), "{bad:?}");
    }
}
