//! `POST /bookings` and the small routes, over a real socket, on the embedded
//! stack with the real bKash adapter against the mock gateway; what touches
//! the ledger and coordination also with both on a private Redis server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use booking::AdmittedBooking;
use booking::coordination::keys;
use booking::invoice_number;
use booking::ledger::{Admission, HoldState};
use booking::{Level, PaymentId, RequestToken, Settings};
use common::{Backend, FlakyQueue, TestOptions, TestStack, hash};
use serde_json::Value;

fn level(s: &str) -> Level {
    Level::parse(s).unwrap()
}

// The ledger and coordination embedded, and on a private Redis server.
on_both_backends!(
    an_admitted_booking_is_held_in_the_ledger_the_copy_and_the_queue,
    a_duplicate_booking_returns_the_live_hold,
    a_pending_hold_is_returned_as_pending,
    every_refusal_has_its_own_answer,
    a_gateway_error_at_create_gives_the_seat_back_before_answering,
    an_enqueue_failure_gives_the_seat_back_and_drops_the_copy,
    a_gateway_slower_than_the_deadline_is_503_within_it_and_undone,
    the_cap_holds_under_200_concurrent_bookings_for_50_seats,
    status_json_is_built_from_the_counters_then_written_on_admission,
);

async fn an_admitted_booking_is_held_in_the_ledger_the_copy_and_the_queue(backend: Backend) {
    let t = TestStack::start_on(backend).await;
    let before = t.stack.clock.now_ms();
    let (status, body, _) = t.book("c-1", "gold").await;
    assert_eq!(status, 201, "{body}");
    let c = hash("c-1");
    assert_eq!(body["outcome"], "admitted");
    assert_eq!(body["status"], "HELD");
    assert_eq!(body["candidate_hash"], c.as_str());
    assert_eq!(body["level"], "gold");
    let payment = PaymentId::parse(body["payment_id"].as_str().unwrap()).unwrap();
    let deadline_ms = body["deadline_ms"].as_u64().unwrap();
    let hold_ms = t.stack.settings.hold.as_millis() as u64;
    assert!(deadline_ms >= before + hold_ms && deadline_ms <= t.stack.clock.now_ms() + hold_ms);
    let rfc = body["deadline"].as_str().unwrap();
    let parsed = chrono::DateTime::parse_from_rfc3339(rfc).unwrap();
    assert_eq!(parsed.timestamp_millis() as u64, deadline_ms);

    // the gateway has the payment, with our invoice, price and callback
    let p = t.mock.app.gateway.payment(payment.as_str()).unwrap();
    assert_eq!(p.amount, "500");
    let request_ms = {
        let hold = t
            .stack
            .ledger
            .hold(&t.stack.sale, &c)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(hold.level, level("gold"));
        assert_eq!(
            hold.state,
            HoldState::Held {
                payment_id: payment.clone(),
                deadline_ms
            }
        );
        // the copy and the message carry the same request time
        let key = keys::booking_copy(&t.stack.prefix, &t.stack.sale, &payment);
        let json = t.stack.coordination.get(&key).await.unwrap().unwrap();
        let copy: AdmittedBooking = serde_json::from_str(&json).unwrap();
        assert_eq!(copy.candidate, c);
        assert_eq!(copy.payment_id, payment);
        assert_eq!(copy.token, Some(hold.token));
        assert_eq!(copy.deadline_ms, deadline_ms);
        assert_eq!(copy.signature, Some(p.signature));
        let ttl = t.coordination_ttl(&key).await.unwrap().unwrap();
        let want = t.stack.settings.hold + t.stack.settings.booking_copy_slack;
        assert!(
            ttl <= want && ttl > want - Duration::from_secs(5),
            "{ttl:?}"
        );
        assert_eq!(
            serde_json::from_str::<Value>(&json).unwrap()["redirect_url"],
            body["redirect_url"]
        );
        copy.request_ms
    };
    assert_eq!(
        p.merchant_invoice_number,
        invoice_number(&t.stack.sale, &c, request_ms)
    );
    assert_eq!(p.callback_url, format!("{}/payment/callback", t.url));
    assert!(
        body["redirect_url"]
            .as_str()
            .unwrap()
            .contains(payment.as_str())
    );

    // one HELD message for the worker
    let queued = t.drain_queue().await;
    assert_eq!(queued.len(), 1);
    let m: AdmittedBooking = serde_json::from_str(&queued[0].message.body).unwrap();
    assert_eq!(m.candidate, c);
    assert_eq!(m.payment_id, payment);
    assert_eq!(m.level, level("gold"));
    assert_eq!((m.request_ms, m.deadline_ms), (request_ms, deadline_ms));
    assert!(m.token.is_some());
    assert_eq!(queued[0].message.group_id, &c.as_str()[..4]);
    assert_eq!(m.held_record().status, booking::RecordStatus::Held);
    assert_eq!(t.taken("gold").await, 1);
    t.stop().await;
}

#[tokio::test]
async fn a_candidate_hash_is_taken_as_it_is() {
    let t = TestStack::start().await;
    let c = hash("c-2");
    let (status, body, _) = t.book(&c.as_str().to_uppercase(), "silver").await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["candidate_hash"], c.as_str());
    let p = t
        .mock
        .app
        .gateway
        .payment(body["payment_id"].as_str().unwrap())
        .unwrap();
    assert_eq!(p.amount, "300", "silver's price");
    t.stop().await;
}

async fn a_duplicate_booking_returns_the_live_hold(backend: Backend) {
    let t = TestStack::start_on(backend).await;
    let (s1, first, _) = t.book("c-3", "gold").await;
    assert_eq!(s1, 201);
    // again, even for another level: the one live hold comes back
    let (s2, again, _) = t.book("c-3", "silver").await;
    assert_eq!(s2, 200, "{again}");
    assert_eq!(again["outcome"], "already_holding");
    assert_eq!(again["status"], "HELD");
    assert_eq!(again["level"], "gold");
    for field in ["payment_id", "deadline_ms", "deadline", "redirect_url"] {
        assert_eq!(again[field], first[field], "{field}");
    }
    assert_eq!(t.taken("gold").await, 1);
    assert_eq!(t.taken("silver").await, 0);
    assert_eq!(t.drain_queue().await.len(), 1, "no second message");
    assert_eq!(t.mock.app.gateway.payments().len(), 1, "no second payment");
    t.stop().await;
}

async fn a_pending_hold_is_returned_as_pending(backend: Backend) {
    let t = TestStack::start_on(backend).await;
    let c = hash("c-4");
    let token = RequestToken::parse("someone-else").unwrap();
    let admitted = t
        .stack
        .ledger
        .admit(&t.stack.sale, &c, &level("gold"), &token, 1)
        .await
        .unwrap();
    assert!(matches!(admitted, Admission::Admitted { .. }));
    let (status, body, _) = t.book("c-4", "gold").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "PENDING");
    assert_eq!(body["payment_id"], Value::Null);
    t.stop().await;
}

async fn every_refusal_has_its_own_answer(backend: Backend) {
    let t = TestStack::start_with(TestOptions {
        backend,
        levels: vec![
            ("gold".into(), 1, "500".into()),
            ("silver".into(), 5, "300".into()),
        ],
        ..TestOptions::default()
    })
    .await;

    // not on the list
    let (s, b, _) = t.book("stranger", "gold").await;
    assert_eq!((s, b["error"].as_str()), (403, Some("not_eligible")), "{b}");
    // no such level
    let (s, b, _) = t.book("c-1", "platinum").await;
    assert_eq!(
        (s, b["error"].as_str()),
        (404, Some("unknown_level")),
        "{b}"
    );
    // level full
    assert_eq!(t.book("c-1", "gold").await.0, 201);
    let (s, b, _) = t.book("c-2", "gold").await;
    assert_eq!((s, b["error"].as_str()), (409, Some("level_full")), "{b}");
    // already paid
    let c5 = hash("c-5");
    let (s, b, _) = t.book("c-5", "silver").await;
    assert_eq!(s, 201);
    let payment = PaymentId::parse(b["payment_id"].as_str().unwrap()).unwrap();
    t.stack
        .ledger
        .mark_paid(&t.stack.sale, &c5, &payment)
        .await
        .unwrap();
    let (s, b, _) = t.book("c-5", "silver").await;
    assert_eq!((s, b["error"].as_str()), (409, Some("already_paid")), "{b}");
    // sale closed
    t.stack.ledger.set_open(&t.stack.sale, false).await.unwrap();
    let (s, b, _) = t.book("c-6", "silver").await;
    assert_eq!((s, b["error"].as_str()), (409, Some("sale_closed")), "{b}");
    // every refusal carries a message
    assert!(b["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert_eq!(t.taken("gold").await, 1);
    assert_eq!(t.taken("silver").await, 1);
    t.stop().await;
}

async fn a_gateway_error_at_create_gives_the_seat_back_before_answering(backend: Backend) {
    let t = TestStack::start_with(TestOptions {
        backend,
        script: r#"
            [[rule]]
            op = "create"
            action = { fail = { code = "2003" } }
        "#
        .into(),
        ..TestOptions::default()
    })
    .await;
    let (status, body, headers) = t.book("c-1", "gold").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], "busy");
    assert_eq!(headers["retry-after"], "1");
    // undone before the answer: nothing counted, held or queued
    assert_eq!(t.taken("gold").await, 0);
    assert_eq!(
        t.stack
            .ledger
            .hold(&t.stack.sale, &hash("c-1"))
            .await
            .unwrap(),
        None
    );
    assert!(t.drain_queue().await.is_empty());
    let (_, metrics, _) = t.get("/metrics").await;
    assert!(
        metrics.contains(r#"booking_undos_total{reason="create",step="done"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"booking_gateway_errors_total{op="create",kind="refused"} 1"#));
    assert!(metrics.contains(r#"booking_admissions_total{outcome="busy"} 1"#));
    t.stop().await;
}

async fn an_enqueue_failure_gives_the_seat_back_and_drops_the_copy(backend: Backend) {
    let t = TestStack::start_with(TestOptions {
        backend,
        wrap_queue: Some(FlakyQueue::failing),
        ..TestOptions::default()
    })
    .await;
    let (status, body, headers) = t.book("c-1", "gold").await;
    assert_eq!(status, 503, "{body}");
    assert!(headers.contains_key("retry-after"));
    assert_eq!(t.taken("gold").await, 0);
    assert_eq!(
        t.stack
            .ledger
            .hold(&t.stack.sale, &hash("c-1"))
            .await
            .unwrap(),
        None
    );
    // the payment was created; its copy is gone, so no callback can confirm it
    let payments = t.mock.app.gateway.payments();
    assert_eq!(payments.len(), 1);
    let payment = PaymentId::parse(&payments[0].payment_id).unwrap();
    let key = keys::booking_copy(&t.stack.prefix, &t.stack.sale, &payment);
    assert_eq!(t.stack.coordination.get(&key).await.unwrap(), None);
    assert!(t.drain_queue().await.is_empty());
    let (_, metrics, _) = t.get("/metrics").await;
    assert!(metrics.contains(r#"booking_undos_total{reason="enqueue",step="done"} 1"#));
    // the candidate may try again
    assert_eq!(t.book("c-1", "gold").await.0, 503);
    assert_eq!(t.taken("gold").await, 0);
    t.stop().await;
}

async fn a_gateway_slower_than_the_deadline_is_503_within_it_and_undone(backend: Backend) {
    let t = TestStack::start_with(TestOptions {
        backend,
        settings: Settings {
            // the shortest Settings::check allows: four undo reserves
            request_deadline: Duration::from_secs(2),
            ..Settings::default()
        },
        script: r#"
            [[rule]]
            op = "create"
            action = { timeout = { complete = true, hang_ms = 5000 } }
        "#
        .into(),
        ..TestOptions::default()
    })
    .await;
    let started = Instant::now();
    let (status, body, _) = t.book("c-1", "gold").await;
    let took = started.elapsed();
    assert_eq!(status, 503, "{body}");
    assert!(took < Duration::from_millis(2500), "{took:?}");
    assert_eq!(t.taken("gold").await, 0);
    t.stop().await;
}

async fn the_cap_holds_under_200_concurrent_bookings_for_50_seats(backend: Backend) {
    let t = TestStack::start_with(TestOptions {
        backend,
        levels: vec![("gold".into(), 50, "500".into())],
        candidates: (0..200).map(|i| format!("c-{i}")).collect(),
        ..TestOptions::default()
    })
    .await;
    let mut tasks = Vec::new();
    for i in 0..200 {
        let http = t.http.clone();
        let url = format!("{}/bookings", t.url);
        tasks.push(tokio::spawn(async move {
            let r = http
                .post(url)
                .json(&serde_json::json!({"candidate": format!("c-{i}"), "level": "gold"}))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap();
            (status, body)
        }));
    }
    let mut created = 0;
    let mut full = 0;
    for task in tasks {
        let (status, body) = task.await.unwrap();
        match status {
            201 => created += 1,
            409 if body["error"] == "level_full" => full += 1,
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!((created, full), (50, 150));
    assert_eq!(t.taken("gold").await, 50);
    assert_eq!(t.drain_queue().await.len(), 50);
    assert_eq!(t.mock.app.gateway.payments().len(), 50);
    t.stop().await;
}

#[tokio::test]
async fn malformed_requests_are_4xx_and_never_500() {
    let t = TestStack::start().await;
    let bad = [
        "",
        "{",
        "null",
        "[]",
        "42",
        "\"c-1\"",
        "{}",
        r#"{"candidate":"c-1"}"#,
        r#"{"level":"gold"}"#,
        r#"{"candidate":"c-1","level":"gold","extra":1}"#,
        r#"{"candidate":1,"level":"gold"}"#,
        r#"{"candidate":"c-1","level":null}"#,
        r#"{"candidate":"","level":"gold"}"#,
        r#"{"candidate":"c-1","level":""}"#,
        r#"{"candidate":"c-1","level":"gold star"}"#,
        r#"{"candidate":"c-1","level":"g{o}ld"}"#,
        r#"{"candidate":"a\u0000b","level":"gold"}"#,
        r#"{"candidate":"c-1","level":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}"#,
        r#"{"candidate":"c-1","level":"gold"} trailing"#,
        "\u{feff}{}",
    ];
    for body in bad {
        let (status, answer, _) = t.post_json("/bookings", body).await;
        assert_eq!(status, 400, "{body:?} → {answer}");
        assert_eq!(answer["error"], "bad_request", "{body:?}");
        assert!(answer["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    let long = format!(r#"{{"candidate":"{}","level":"gold"}}"#, "x".repeat(300));
    assert_eq!(t.post_json("/bookings", &long).await.0, 400);
    let huge = format!(
        r#"{{"candidate":"{}","level":"gold"}}"#,
        "x".repeat(100_000)
    );
    let (status, answer, _) = t.post_json("/bookings", &huge).await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (413, Some("payload_too_large"))
    );
    // no content type, another content type: refused unread (a page on
    // another origin can make a browser send those without a preflight)
    for content_type in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let mut r = t
            .http
            .post(format!("{}/bookings", t.url))
            .body(r#"{"candidate":"c-9","level":"gold"}"#);
        if let Some(c) = content_type {
            r = r.header("content-type", c);
        }
        let r = r.send().await.unwrap();
        assert_eq!(r.status().as_u16(), 415, "{content_type:?}");
        let answer: Value = r.json().await.unwrap();
        assert_eq!(
            answer["error"], "unsupported_media_type",
            "{content_type:?}"
        );
    }
    let r = t
        .http
        .post(format!("{}/bookings", t.url))
        .header("content-type", "application/json; charset=utf-8")
        .body(r#"{"candidate":"c-9","level":"gold"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201, "JSON with a charset is JSON");
    // wrong methods and paths are not 500 either
    assert_eq!(t.get("/bookings").await.0, 405);
    assert_eq!(t.get("/nope").await.0, 404);
    assert_eq!(t.taken("gold").await, 1);
    t.stop().await;
}

async fn status_json_is_built_from_the_counters_then_written_on_admission(backend: Backend) {
    let t = TestStack::start_on(backend).await;
    let (status, body, headers) = t.get("/status.json").await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "application/json");
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["sale"], "test-sale");
    assert_eq!(doc["open"], true);
    assert_eq!(doc["levels"][0]["level"], "gold");
    assert_eq!(doc["levels"][0]["taken"], 0);
    assert_eq!(t.sink.write_count(), 0);

    assert_eq!(t.book("c-1", "gold").await.0, 201);
    // the poke runs after the answer
    let written = async {
        while t.sink.write_count() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), written)
        .await
        .expect("the status document is written after an admission");
    let (_, body, _) = t.get("/status.json").await;
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["levels"][0]["taken"], 1);
    assert_eq!(doc["levels"][0]["left"], 9);
    t.stop().await;
}

#[tokio::test]
async fn healthz_metrics_and_openapi_answer() {
    let t = TestStack::start().await;
    let (status, body, _) = t.get("/healthz").await;
    assert_eq!(status, 200);
    let health: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["sale"], "test-sale");

    assert_eq!(t.book("c-1", "gold").await.0, 201);
    assert_eq!(t.book("stranger", "gold").await.0, 403);
    let (status, metrics, headers) = t.get("/metrics").await;
    assert_eq!(status, 200);
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    for line in [
        r#"booking_admissions_total{outcome="admitted"} 1"#,
        r#"booking_admissions_total{outcome="not_eligible"} 1"#,
        "booking_holds_total 1",
        r#"booking_gateway_calls_total{op="create"} 1"#,
        r#"booking_level_taken{level="gold"} 1"#,
        r#"booking_level_cap{level="gold"} 10"#,
        "booking_sale_open 1",
        "booking_request_duration_seconds_count 2",
    ] {
        assert!(metrics.contains(line), "{line} missing from\n{metrics}");
    }
    assert!(metrics.trim_end().ends_with("# EOF"));

    let (status, body, _) = t.get("/openapi.json").await;
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.0"));
    for path in booking_api::openapi::PATHS {
        assert!(doc["paths"][path].is_object(), "{path} not in the document");
    }
    let listed: Vec<&String> = doc["paths"].as_object().unwrap().keys().collect();
    assert_eq!(
        listed.len(),
        booking_api::openapi::PATHS.len() + booking_api::openapi::ADMIN_PATHS.len()
    );
    // every path of ours is served (the confirm paths are the other module's)
    for path in ["/status.json", "/healthz", "/metrics", "/openapi.json"] {
        assert_eq!(t.get(path).await.0, 200, "{path}");
    }
    for (code, _) in doc["paths"]["/bookings"]["post"]["responses"]
        .as_object()
        .unwrap()
    {
        assert!(code.parse::<u16>().is_ok_and(|c| c != 500), "{code}");
    }
    t.stop().await;
}
