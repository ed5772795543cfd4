//! The request path's edges as a client sees them: the error answers
//! (`Retry-After` on `429` and `503`, `400 bad_request`), the request
//! deadline layer, the body limit, the longest raw candidate, the callback
//! page's words, and the routes as `booking-server` mounts them
//! (`bookings::routes()`, `confirm_paths::routes()`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::Response;
use axum::routing::get;
use booking::Settings;
use booking_api::{Stack, answers, bookings, confirm_paths, deadline};
use common::{TestOptions, TestStack, hash};
use serde_json::Value;
use tokio::net::TcpListener;

/// Serves `router` on a fresh loopback port: its base URL.
async fn serve(router: Router) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    url
}

/// A response's status, `Retry-After` and JSON body.
async fn answer_of(response: Response) -> (StatusCode, Option<String>, Value) {
    let status = response.status();
    let retry = response
        .headers()
        .get(header::RETRY_AFTER)
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = axum::body::to_bytes(response.into_body(), 64 * 1024)
        .await
        .unwrap();
    (
        status,
        retry,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn a_429_asks_the_client_to_retry_like_a_503() {
    let (status, retry, body) = answer_of(answers::error(
        StatusCode::TOO_MANY_REQUESTS,
        "slow_down",
        "too many requests",
    ))
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry.as_deref(), Some("1"), "429 carries Retry-After");
    assert_eq!(body["error"], "slow_down");
    assert_eq!(body["message"], "too many requests");

    let (status, retry, _) =
        answer_of(answers::error(StatusCode::CONFLICT, "level_full", "full")).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(retry, None, "a refusal is not retried");
}

#[tokio::test]
async fn bad_request_is_a_400_with_its_code_and_no_retry() {
    let (status, retry, body) = answer_of(answers::bad_request("the query is malformed")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(retry, None);
    assert_eq!(body["error"], "bad_request");
    assert_eq!(body["message"], "the query is malformed");
}

#[tokio::test]
async fn a_handler_still_running_at_the_deadline_is_503_deadline_exceeded() {
    let t = TestStack::start_with(TestOptions {
        settings: Settings {
            request_deadline: Duration::from_millis(200),
            ..Settings::default()
        },
        ..TestOptions::default()
    })
    .await;
    // the layer as `booking_api::router` puts it on the confirm paths
    let router: Router<Arc<Stack>> = Router::new()
        .route("/never", get(std::future::pending::<&'static str>))
        .route("/at-once", get(|| async { "done" }))
        .layer(axum::middleware::from_fn_with_state(
            t.stack.clone(),
            deadline::request_deadline,
        ));
    let url = serve(router.with_state(t.stack.clone())).await;

    let r = t.http.get(format!("{url}/never")).send().await.unwrap();
    let (status, body, headers) = common::read(r).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], "deadline_exceeded");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert_eq!(headers["retry-after"], "1");

    // a handler that answers in time is answered as it is
    let r = t.http.get(format!("{url}/at-once")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.text().await.unwrap(), "done");
    t.stop().await;
}

#[tokio::test]
async fn a_body_of_16_kib_is_read_and_one_byte_more_is_413() {
    let t = TestStack::start().await;
    let request = r#"{"candidate":"c-1","level":"gold"}"#;
    // padded with JSON whitespace to exactly 16 KiB
    let at_limit = format!("{request}{}", " ".repeat(16 * 1024 - request.len()));
    assert_eq!(at_limit.len(), 16_384);
    let (status, body, _) = t.post_json("/bookings", &at_limit).await;
    assert_eq!(status, 201, "a 16 KiB body is read: {body}");
    assert_eq!(body["candidate_hash"], hash("c-1").as_str());

    let request = r#"{"candidate":"c-2","level":"gold"}"#;
    let over = format!("{request}{}", " ".repeat(16 * 1024 + 1 - request.len()));
    let (status, body, _) = t.post_json("/bookings", &over).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (413, Some("payload_too_large")),
        "{body}"
    );
    assert_eq!(t.taken("gold").await, 1, "only the first was booked");
    t.stop().await;
}

#[tokio::test]
async fn a_raw_candidate_of_256_characters_is_a_candidate() {
    let longest = "é".repeat(256);
    let t = TestStack::start_with(TestOptions {
        candidates: vec!["c-1".into(), longest.clone()],
        ..TestOptions::default()
    })
    .await;
    let (status, body, _) = t.book(&longest, "gold").await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["candidate_hash"], hash(&longest).as_str());
    // one more character is not a candidate
    let (status, body, _) = t.book(&"é".repeat(257), "gold").await;
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")));
    assert_eq!(t.taken("gold").await, 1);
    t.stop().await;
}

/// `GET /payment/callback` with a query that does not parse (a key twice).
const MALFORMED_CALLBACK: &str = "/payment/callback?paymentID=a&paymentID=b";

#[tokio::test]
async fn the_callback_page_says_what_happened_in_words() {
    let t = TestStack::start().await;
    let (status, page, headers) = t.get(MALFORMED_CALLBACK).await;
    assert_eq!(status, 400, "{page}");
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert!(page.contains("data-result=\"bad_request\""), "{page}");
    assert!(page.contains("<title>Bad request</title>"), "{page}");
    assert!(page.contains("<h1>Bad request</h1>"), "{page}");
    assert!(page.contains("This payment link is malformed."), "{page}");

    // no payment named: no such booking
    let (status, page, _) = t.get("/payment/callback").await;
    assert_eq!(status, 404, "{page}");
    assert!(page.contains("data-result=\"unknown_payment\""), "{page}");
    assert!(page.contains("<h1>Unknown payment</h1>"), "{page}");
    assert!(
        page.contains("We have no booking with this payment."),
        "{page}"
    );
    t.stop().await;
}

#[tokio::test]
async fn the_routes_as_the_server_mounts_them_answer() {
    let t = TestStack::start().await;
    let router = Router::new()
        .merge(bookings::routes())
        .merge(confirm_paths::routes())
        .with_state(t.stack.clone());
    let url = serve(router).await;

    let r = t
        .http
        .post(format!("{url}/bookings"))
        .json(&serde_json::json!({"candidate": "c-7", "level": "silver"}))
        .send()
        .await
        .unwrap();
    let (status, body, _) = common::read(r).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["outcome"], "admitted");
    assert_eq!(t.taken("silver").await, 1);

    let r = t.http.get(format!("{url}/healthz")).send().await.unwrap();
    let (status, health, _) = common::read(r).await;
    assert_eq!(status, 200);
    assert_eq!(health["status"], "ok");

    let r = t
        .http
        .get(format!("{url}{MALFORMED_CALLBACK}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(
        r.text()
            .await
            .unwrap()
            .contains("data-result=\"bad_request\"")
    );
    t.stop().await;
}
