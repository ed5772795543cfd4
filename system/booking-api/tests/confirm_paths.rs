//! Confirm paths 1 (browser callback) and 2 (SNS webhook) against the real
//! mock gateway: signed SNS deliveries, scripted timeouts, forgeries,
//! duplicates, replays; the embedded stack behind the API, and for every test
//! that goes past the signature checks, the ledger and coordination on a
//! private Redis server too (all but the one on a manual clock: Redis keeps
//! its TTLs by its own).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::sync::Arc;
use std::time::Duration;

use booking::AdmittedBooking;
use booking::records::{BookingRecord, Condition, ConfirmPath, RecordStatus, RecordStore};
use booking::{CandidateHash, Clock, HoldState, ManualClock, PaymentId, Settings};
use booking_api::confirm_paths::load_copy;
use booking_api::{Stack, WebhookTrust};
use common::{Backend, TestOptions, TestStack, hash};
use mock_gateway::ScriptSpec;
use mock_gateway::payer::{ActResult, Behaviour, Payer};
use mock_gateway::webhooks::{DeliveryRecord, Outcome};

/// Options for these tests: a 4 s request deadline (execute 1.5 s, the one
/// query 1.5 s), a 3 s scripted hang, SNS notifications not retried (so a
/// rejected one shows one 403), confirmations retried quickly.
fn options() -> TestOptions {
    let mut o = TestOptions {
        settings: Settings {
            request_deadline: Duration::from_secs(4),
            ..Settings::default()
        },
        ..TestOptions::default()
    };
    o.mock_config.hang_ms = 3_000;
    o.mock_config.delivery.retries = 0;
    o.mock_config.delivery.min_delay_ms = 100;
    o.mock_config.delivery.max_delay_ms = 100;
    o.mock_config.delivery.confirm_attempts = 50;
    o
}

async fn start(backend: Backend) -> TestStack {
    start_with(TestOptions {
        backend,
        ..options()
    })
    .await
}

async fn start_with(o: TestOptions) -> TestStack {
    let t = TestStack::start_with(o).await;
    eventually("the webhook subscription is confirmed", || {
        let subs = t.mock.app.webhooks.subscriptions();
        !subs.is_empty() && subs.iter().all(|s| s.confirmed)
    })
    .await;
    t
}

async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..200 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting until {what}");
}

/// A booking made through `POST /bookings`.
struct Booked {
    candidate: CandidateHash,
    payment: PaymentId,
    copy: AdmittedBooking,
    bkash_url: String,
}

async fn book(t: &TestStack, candidate: &str) -> Booked {
    let (status, body, _) = t.book(candidate, "gold").await;
    assert_eq!(status, 201, "{body}");
    let payment = PaymentId::parse(body["payment_id"].as_str().unwrap()).unwrap();
    let copy = load_copy(&t.stack, &payment)
        .await
        .unwrap()
        .expect("the copy");
    Booked {
        candidate: hash(candidate),
        payment,
        copy,
        bkash_url: body["redirect_url"].as_str().unwrap().to_owned(),
    }
}

/// What the worker does with the admission: the HELD record.
async fn write_held(t: &TestStack, b: &Booked) {
    t.records
        .put(b.copy.held_record(), Condition::NotExists)
        .await
        .unwrap();
}

/// A booking whose HELD record the worker wrote.
async fn book_held(t: &TestStack, candidate: &str) -> Booked {
    let b = book(t, candidate).await;
    write_held(t, &b).await;
    b
}

async fn record(t: &TestStack, b: &Booked) -> Option<BookingRecord> {
    t.records.get(&b.candidate, true).await.unwrap()
}

fn executes(t: &TestStack, b: &Booked) -> usize {
    t.mock
        .app
        .gateway
        .payment(b.payment.as_str())
        .unwrap()
        .execute_calls
        .len()
}

fn completed_executes(t: &TestStack, b: &Booked) -> usize {
    t.mock
        .app
        .gateway
        .payment(b.payment.as_str())
        .unwrap()
        .execute_calls
        .iter()
        .filter(|c| c.status_code == "0000")
        .count()
}

fn script(t: &TestStack, toml: &str) {
    t.mock
        .app
        .gateway
        .set_script(ScriptSpec::from_toml(toml).unwrap())
        .unwrap();
}

fn payer() -> Payer {
    Payer::new(Duration::from_secs(20)).unwrap()
}

/// The payer approves on the checkout page; the redirect is returned, not
/// delivered.
async fn approve(b: &Booked) -> url::Url {
    match payer().act(&b.bkash_url, "pay").await.unwrap() {
        ActResult::Redirect(url) => url,
        other => panic!("no redirect: {other:?}"),
    }
}

/// Delivers a redirect to the API: status and page.
async fn deliver(t: &TestStack, url: &url::Url) -> (u16, String) {
    let response = t.http.get(url.clone()).send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

async fn callback(t: &TestStack, query: &str) -> (u16, String) {
    let (status, body, _) = t.get(&format!("/payment/callback?{query}")).await;
    (status, body)
}

/// The webhook deliveries about `b`'s payment, once every one has an outcome.
async fn deliveries(t: &TestStack, b: &Booked, count: usize) -> Vec<DeliveryRecord> {
    let of = |t: &TestStack| -> Vec<DeliveryRecord> {
        t.mock
            .app
            .webhooks
            .log()
            .into_iter()
            .filter(|d| d.payment_id.as_deref() == Some(b.payment.as_str()))
            .collect()
    };
    eventually("the webhooks are delivered", || {
        let log = of(t);
        log.len() >= count && log.iter().all(|d| d.outcome != Outcome::Pending)
    })
    .await;
    of(t)
}

fn statuses(log: &[DeliveryRecord]) -> Vec<Option<u16>> {
    log.iter()
        .flat_map(|d| d.attempts.iter().map(|a| a.status))
        .collect()
}

async fn assert_paid_once(t: &TestStack, b: &Booked, by: ConfirmPath) {
    let r = record(t, b).await.expect("a record");
    assert_eq!(r.status, RecordStatus::Paid);
    assert_eq!(r.payment_id, b.payment);
    assert_eq!(r.paid_by, Some(by), "paid by");
    assert_eq!(r.expires_at_s, None, "a PAID record carries no TTL");
    assert!(r.email_sent);
    assert_eq!(t.mailer.sent_for(&b.payment), 1, "exactly one email");
    assert_eq!(
        t.ledger.paid(&t.stack.sale, &b.candidate).await.unwrap(),
        Some(b.payment.clone())
    );
}

async fn assert_still_held(t: &TestStack, b: &Booked) {
    let r = record(t, b).await.expect("a record");
    assert_eq!(r.status, RecordStatus::Held);
    assert_eq!(r.payment_id, b.payment);
    assert!(r.expires_at_s.is_some());
    assert_eq!(t.mailer.sent_for(&b.payment), 0, "no email");
    let hold = t.ledger.hold(&t.stack.sale, &b.candidate).await.unwrap();
    assert!(
        matches!(hold.map(|h| h.state), Some(HoldState::Held { payment_id, .. }) if payment_id == b.payment),
        "the seat is still held for this payment"
    );
}

// The ledger and coordination embedded, and on a private Redis server.
on_both_backends!(
    the_callback_marks_a_booking_paid_and_the_later_webhook_sends_no_second_email,
    a_wrong_or_missing_signature_is_refused_and_changes_nothing,
    an_unknown_payment_is_refused,
    a_forged_cancel_on_a_held_booking_changes_nothing,
    a_forged_cancel_on_a_paid_booking_changes_nothing,
    a_redirect_delivered_twice_at_once_executes_once,
    an_execute_timeout_is_recovered_by_the_one_query,
    an_uncertain_execute_is_left_to_the_reconciler,
    a_payer_faster_than_the_worker_gets_a_paid_record_from_the_copy,
    the_webhook_marks_paid_when_the_redirect_never_arrives,
    the_webhook_before_the_callbacks_answer_wins_and_the_callback_finds_it_paid,
    the_webhook_writes_paid_from_the_copy_for_a_fast_payer,
    duplicated_and_replayed_notifications_are_harmless,
    a_correctly_signed_notification_for_an_unknown_booking_is_answered_200,
);

// ---------------------------------------------------------------------------
// Confirm path 1: the callback

async fn the_callback_marks_a_booking_paid_and_the_later_webhook_sends_no_second_email(
    backend: Backend,
) {
    let t = start(backend).await;
    let b = book_held(&t, "c-1").await;
    let run = payer().run(&b.bkash_url, &Behaviour::PayNow).await.unwrap();
    assert_eq!(run.delivered[0].status, Some(200));
    assert_paid_once(&t, &b, ConfirmPath::Callback).await;
    assert_eq!(executes(&t, &b), 1);
    // the gateway's notification comes after the execute: answered 200, no-op
    let log = deliveries(&t, &b, 1).await;
    assert_eq!(statuses(&log), vec![Some(200)]);
    assert_paid_once(&t, &b, ConfirmPath::Callback).await;
    let (_, metrics, _) = t.get("/metrics").await;
    assert!(
        metrics.contains(r#"booking_paid_total{path="callback",source="record"} 1"#),
        "{metrics}"
    );
    assert!(
        !metrics.contains(r#"booking_paid_total{path="webhook""#),
        "the webhook found it paid: not counted"
    );
    t.stop().await;
}

async fn a_wrong_or_missing_signature_is_refused_and_changes_nothing(backend: Backend) {
    let t = start(backend).await;
    let b = book_held(&t, "c-1").await;
    let url = approve(&b).await;
    let pid = b.payment.as_str();
    for query in [
        format!("paymentID={pid}&status=success&signature=forged"),
        format!("paymentID={pid}&status=success&signature="),
        format!("paymentID={pid}&status=success"),
    ] {
        let (status, page) = callback(&t, &query).await;
        assert_eq!(status, 403, "{query}: {page}");
        assert!(page.contains("data-result=\"forbidden\""));
    }
    assert_eq!(executes(&t, &b), 0, "nothing reached the gateway");
    assert_still_held(&t, &b).await;
    // the genuine redirect still works afterwards
    assert_eq!(deliver(&t, &url).await.0, 200);
    assert_paid_once(&t, &b, ConfirmPath::Callback).await;
    t.stop().await;
}

async fn an_unknown_payment_is_refused(backend: Backend) {
    let t = start(backend).await;
    for query in [
        "paymentID=TR0000NOSUCH&status=success&signature=x",
        "paymentID=bad%7Cid&status=success&signature=x",
        "status=success",
    ] {
        let (status, page) = callback(&t, query).await;
        assert_eq!(status, 404, "{query}: {page}");
    }
    // a real payment at the gateway that we did not issue (no booking copy)
    let created = t
        .stack
        .gateway
        .create(
            &booking::CreatePayment {
                invoice: "not-ours".into(),
                amount: "500".into(),
                payer_reference: "x".into(),
                callback_url: format!("{}/payment/callback", t.url),
            },
            Duration::from_secs(4),
        )
        .await
        .unwrap();
    let query = format!(
        "paymentID={}&status=success&signature={}",
        created.payment_id, created.signature
    );
    assert_eq!(callback(&t, &query).await.0, 404);
    let p = t
        .mock
        .app
        .gateway
        .payment(created.payment_id.as_str())
        .unwrap();
    assert!(p.execute_calls.is_empty());
    t.stop().await;
}

async fn a_forged_cancel_on_a_held_booking_changes_nothing(backend: Backend) {
    let t = start(backend).await;
    let b = book_held(&t, "c-1").await;
    // the payer has not approved; someone who saw the link types status=cancel
    let query = format!(
        "paymentID={}&status=cancel&signature={}",
        b.payment,
        b.copy.signature.as_deref().unwrap_or_default()
    );
    let (status, page) = callback(&t, &query).await;
    assert_eq!(status, 402, "{page}");
    assert!(page.contains("not_paid"));
    assert_eq!(completed_executes(&t, &b), 0);
    assert_still_held(&t, &b).await;
    // status decides nothing either way: a payer who paid and whose redirect
    // says "cancel" is paid
    let run = payer()
        .run(&b.bkash_url, &Behaviour::ForgeStatus("cancel".into()))
        .await
        .unwrap();
    assert_eq!(run.delivered[0].status, Some(200));
    assert_paid_once(&t, &b, ConfirmPath::Callback).await;
    t.stop().await;
}

async fn a_forged_cancel_on_a_paid_booking_changes_nothing(backend: Backend) {
    let t = start(backend).await;
    let b = book_held(&t, "c-1").await;
    payer().run(&b.bkash_url, &Behaviour::PayNow).await.unwrap();
    assert_paid_once(&t, &b, ConfirmPath::Callback).await;
    let calls = executes(&t, &b);
    for status in ["cancel", "failure", "success"] {
        let query = format!(
            "paymentID={}&status={status}&signature={}",
            b.payment,
            b.copy.signature.as_deref().unwrap_or_default()
        );
        let (code, page) = callback(&t, &query).await;
        assert_eq!(code, 200, "{page}");
        assert!(page.contains("data-result=\"paid\""));
    }
    assert_eq!(executes(&t, &b), calls, "no execute for a PAID booking");
    assert_paid_once(&t, &b, ConfirmPath::Callback).await;
    t.stop().await;
}

async fn a_redirect_delivered_twice_at_once_executes_once(backend: Backend) {
    let t = start(backend).await;
    let b = book_held(&t, "c-1").await;
    script(
        &t,
        &format!(
            "[[rule]]\nop = \"execute\"\nselect = {{ payment_id = \"{}\" }}\naction = {{ delay = {{ ms = 600 }} }}\n",
            b.payment
        ),
    );
    let url = approve(&b).await;
    let (first, second) = tokio::join!(deliver(&t, &url), deliver(&t, &url));
    let mut codes = [first.0, second.0];
    codes.sort_unstable();
    assert_eq!(
        codes,
        [200, 202],
        "one executes, the other is told it is processing"
    );
    assert_eq!(
        executes(&t, &b),
        1,
        "exactly one execute reached the gateway"
    );
    // Back button afterwards: paid, no execute
    assert_eq!(deliver(&t, &url).await.0, 200);
    assert_eq!(executes(&t, &b), 1);
    assert_paid_once(&t, &b, ConfirmPath::Callback).await;
    t.stop().await;
}

async fn an_execute_timeout_is_recovered_by_the_one_query(backend: Backend) {
    let t = start(backend).await;
    let b = book_held(&t, "c-1").await;
    // execute hangs but completes; the notification is lost, so only the
    // callback's query can recover the payment
    script(
        &t,
        &format!(
            "[[rule]]\nop = \"execute\"\nselect = {{ payment_id = \"{p}\" }}\naction = {{ timeout = {{ complete = true }} }}\n\
             [[rule]]\nop = \"webhook\"\nselect = {{ payment_id = \"{p}\" }}\naction = \"drop\"\n",
            p = b.payment
        ),
    );
    let run = payer().run(&b.bkash_url, &Behaviour::PayNow).await.unwrap();
    assert_eq!(run.delivered[0].status, Some(200));
    assert_eq!(executes(&t, &b), 1);
    assert_paid_once(&t, &b, ConfirmPath::Callback).await;
    t.stop().await;
}

async fn an_uncertain_execute_is_left_to_the_reconciler(backend: Backend) {
    let t = start(backend).await;
    let b = book_held(&t, "c-1").await;
    // execute hangs and does not complete: the query finds it not completed
    script(
        &t,
        &format!(
            "[[rule]]\nop = \"execute\"\nselect = {{ payment_id = \"{}\" }}\naction = {{ timeout = {{ complete = false }} }}\ntimes = 1\n",
            b.payment
        ),
    );
    let url = approve(&b).await;
    let (status, page) = deliver(&t, &url).await;
    assert_eq!(status, 202, "{page}");
    assert!(page.contains("pending"));
    assert_still_held(&t, &b).await;
    // the payer reloads: this time the execute goes through
    assert_eq!(deliver(&t, &url).await.0, 200);
    assert_paid_once(&t, &b, ConfirmPath::Callback).await;
    t.stop().await;
}

async fn a_payer_faster_than_the_worker_gets_a_paid_record_from_the_copy(backend: Backend) {
    let t = start(backend).await;
    let b = book(&t, "c-1").await; // the worker has not run
    assert!(record(&t, &b).await.is_none());
    let run = payer().run(&b.bkash_url, &Behaviour::PayNow).await.unwrap();
    assert_eq!(run.delivered[0].status, Some(200));
    assert_paid_once(&t, &b, ConfirmPath::Callback).await;
    let r = record(&t, &b).await.unwrap();
    assert_eq!(r.level, b.copy.level);
    assert_eq!(r.deadline_ms, b.copy.deadline_ms);
    assert_eq!(r.created_ms, b.copy.request_ms);
    // the webhook after it finds it paid; the worker's late put is refused
    deliveries(&t, &b, 1).await;
    let late = t
        .records
        .put(b.copy.held_record(), Condition::NotExists)
        .await;
    assert!(late.is_err(), "the worker's put finds the PAID record");
    assert_paid_once(&t, &b, ConfirmPath::Callback).await;
    let (_, metrics, _) = t.get("/metrics").await;
    assert!(
        metrics.contains(r#"booking_paid_total{path="callback",source="copy"} 1"#),
        "{metrics}"
    );
    t.stop().await;
}

#[tokio::test]
async fn a_callback_after_the_deadline_is_refused_without_execute() {
    let start_ms = booking::SystemClock.now_ms();
    let clock = ManualClock::new(start_ms);
    let o = TestOptions {
        clock: Arc::new(clock.clone()),
        ..options()
    };
    let t = start_with(o).await;
    let b = book_held(&t, "c-1").await;
    let url = approve(&b).await;
    clock.advance(t.stack.settings.hold + Duration::from_secs(1));
    let (status, page) = deliver(&t, &url).await;
    assert_eq!(status, 410, "{page}");
    assert!(page.contains("expired"));
    assert_eq!(
        executes(&t, &b),
        0,
        "no money taken for a seat the reconciler may release"
    );
    assert_still_held(&t, &b).await;
    t.stop().await;
}

// ---------------------------------------------------------------------------
// Confirm path 2: the webhook

async fn the_webhook_marks_paid_when_the_redirect_never_arrives(backend: Backend) {
    let t = start(backend).await;
    let b = book_held(&t, "c-1").await;
    payer()
        .run(&b.bkash_url, &Behaviour::PayAndClose)
        .await
        .unwrap();
    // the payment completes without our callback (executed elsewhere)
    t.stack
        .gateway
        .execute(&b.payment, Duration::from_secs(4))
        .await
        .unwrap();
    let log = deliveries(&t, &b, 1).await;
    assert_eq!(statuses(&log), vec![Some(200)]);
    assert_paid_once(&t, &b, ConfirmPath::Webhook).await;
    t.stop().await;
}

async fn the_webhook_before_the_callbacks_answer_wins_and_the_callback_finds_it_paid(
    backend: Backend,
) {
    let t = start(backend).await;
    let b = book_held(&t, "c-1").await;
    // execute completes at once but answers only after the callback gave up:
    // the notification arrives while the callback waits
    script(
        &t,
        &format!(
            "[[rule]]\nop = \"execute\"\nselect = {{ payment_id = \"{}\" }}\naction = {{ timeout = {{ complete = true }} }}\n",
            b.payment
        ),
    );
    let run = payer().run(&b.bkash_url, &Behaviour::PayNow).await.unwrap();
    assert_eq!(run.delivered[0].status, Some(200));
    let log = deliveries(&t, &b, 1).await;
    assert_eq!(statuses(&log), vec![Some(200)]);
    assert_paid_once(&t, &b, ConfirmPath::Webhook).await;
    assert_eq!(executes(&t, &b), 1);
    t.stop().await;
}

async fn the_webhook_writes_paid_from_the_copy_for_a_fast_payer(backend: Backend) {
    let t = start(backend).await;
    let b = book(&t, "c-1").await; // no worker
    payer()
        .run(&b.bkash_url, &Behaviour::PayAndClose)
        .await
        .unwrap();
    t.stack
        .gateway
        .execute(&b.payment, Duration::from_secs(4))
        .await
        .unwrap();
    deliveries(&t, &b, 1).await;
    assert_paid_once(&t, &b, ConfirmPath::Webhook).await;
    t.stop().await;
}

async fn duplicated_and_replayed_notifications_are_harmless(backend: Backend) {
    let t = start(backend).await;
    let first = book_held(&t, "c-1").await;
    script(
        &t,
        "[[rule]]\nop = \"webhook\"\naction = { duplicate = { copies = 2 } }\ntimes = 1\n\
         [[rule]]\nop = \"webhook\"\naction = { forge = \"replay\" }\ntimes = 1\n",
    );
    payer()
        .run(&first.bkash_url, &Behaviour::PayAndClose)
        .await
        .unwrap();
    t.stack
        .gateway
        .execute(&first.payment, Duration::from_secs(4))
        .await
        .unwrap();
    let log = deliveries(&t, &first, 3).await;
    assert_eq!(statuses(&log), vec![Some(200); 3]);
    assert_paid_once(&t, &first, ConfirmPath::Webhook).await;
    // the next payment's notification is replaced by a replay of the first's
    let second = book_held(&t, "c-2").await;
    payer()
        .run(&second.bkash_url, &Behaviour::PayNow)
        .await
        .unwrap();
    eventually("the replay is delivered", || {
        t.mock
            .app
            .webhooks
            .log()
            .iter()
            .any(|d| d.variant.as_deref() == Some("replay") && d.outcome != Outcome::Pending)
    })
    .await;
    let replay: Vec<DeliveryRecord> = t
        .mock
        .app
        .webhooks
        .log()
        .into_iter()
        .filter(|d| d.variant.as_deref() == Some("replay"))
        .collect();
    assert_eq!(
        statuses(&replay),
        vec![Some(200)],
        "a signed replay is answered 200"
    );
    assert_paid_once(&t, &first, ConfirmPath::Webhook).await;
    assert_paid_once(&t, &second, ConfirmPath::Callback).await;
    t.stop().await;
}

/// A payment completed behind the API's back whose notification is forged
/// by `forgery`: answered 403, nothing changed.
async fn forged_notification_is_rejected(forgery: &str) {
    let t = start(Backend::Embedded).await;
    let b = book_held(&t, "c-1").await;
    script(
        &t,
        &format!("[[rule]]\nop = \"webhook\"\naction = {{ forge = {forgery} }}\n"),
    );
    payer()
        .run(&b.bkash_url, &Behaviour::PayAndClose)
        .await
        .unwrap();
    t.stack
        .gateway
        .execute(&b.payment, Duration::from_secs(4))
        .await
        .unwrap();
    let log = deliveries(&t, &b, 1).await;
    assert_eq!(statuses(&log), vec![Some(403)], "{forgery}");
    assert_still_held(&t, &b).await;
    t.stop().await;
}

#[tokio::test]
async fn a_badly_signed_notification_is_rejected() {
    forged_notification_is_rejected("\"bad_signature\"").await;
}

#[tokio::test]
async fn an_unsigned_notification_is_rejected() {
    forged_notification_is_rejected("\"unsigned\"").await;
}

#[tokio::test]
async fn a_tampered_notification_is_rejected() {
    forged_notification_is_rejected("\"tampered\"").await;
}

#[tokio::test]
async fn a_spoofed_certificate_url_is_rejected() {
    forged_notification_is_rejected("\"cert_url_spoof\"").await;
}

#[tokio::test]
async fn a_correctly_signed_message_from_another_topic_is_rejected() {
    let t = start(Backend::Embedded).await;
    // a second API instance trusting only another topic, subscribed to the
    // mock: the mock's correctly signed confirmation names the wrong topic
    let other = Arc::new(Stack {
        entropy: t.stack.entropy.clone(),
        webhook_trust: WebhookTrust {
            cert_urls: t.stack.webhook_trust.cert_urls.clone(),
            topics: sns::TopicPolicy::only(["arn:aws:sns:ap-southeast-1:000000000000:other"]),
        },
        ..(*t.stack).clone()
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}/payment/webhook", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, booking_api::router(other)).await;
    });
    let sub = t.mock.app.webhooks.add_subscription(&endpoint);
    t.mock.app.webhooks.request_confirmations();
    eventually("the confirmation is answered", || {
        t.mock
            .app
            .webhooks
            .log()
            .iter()
            .any(|d| d.endpoint == endpoint && !d.attempts.is_empty())
    })
    .await;
    let attempts: Vec<Option<u16>> = t
        .mock
        .app
        .webhooks
        .log()
        .iter()
        .filter(|d| d.endpoint == endpoint)
        .flat_map(|d| d.attempts.iter().map(|a| a.status))
        .collect();
    assert_eq!(attempts[0], Some(403));
    let confirmed = t
        .mock
        .app
        .webhooks
        .subscriptions()
        .iter()
        .any(|s| s.arn == sub.arn && s.confirmed);
    assert!(!confirmed, "the subscription was not confirmed");
    server.abort();
    t.stop().await;
}

async fn a_correctly_signed_notification_for_an_unknown_booking_is_answered_200(backend: Backend) {
    let t = start(backend).await;
    // a payment at the gateway that is not one of our bookings
    let created = t
        .stack
        .gateway
        .create(
            &booking::CreatePayment {
                invoice: "test-sale-unknown-1".into(),
                amount: "500".into(),
                payer_reference: "x".into(),
                callback_url: format!("{}/payment/callback", t.url),
            },
            Duration::from_secs(4),
        )
        .await
        .unwrap();
    payer()
        .run(&created.bkash_url, &Behaviour::PayAndClose)
        .await
        .unwrap();
    t.stack
        .gateway
        .execute(&created.payment_id, Duration::from_secs(4))
        .await
        .unwrap();
    eventually("the notification is delivered", || {
        t.mock.app.webhooks.log().iter().any(|d| {
            d.payment_id.as_deref() == Some(created.payment_id.as_str())
                && d.outcome != Outcome::Pending
        })
    })
    .await;
    let log = t.mock.app.webhooks.log();
    let d = log
        .iter()
        .find(|d| d.payment_id.as_deref() == Some(created.payment_id.as_str()))
        .unwrap();
    assert_eq!(d.outcome, Outcome::Delivered);
    assert_eq!(d.attempts[0].status, Some(200));
    assert!(t.records.scan_all().await.unwrap().is_empty());
    assert!(t.mailer.sent().is_empty());
    t.stop().await;
}

#[tokio::test]
async fn garbage_on_the_webhook_is_rejected() {
    let t = start(Backend::Embedded).await;
    for body in ["", "not json", "{}", r#"{"Type":"Notification"}"#] {
        let response = t
            .http
            .post(format!("{}/payment/webhook", t.url))
            .header("content-type", "text/plain; charset=UTF-8")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 403, "{body:?}");
    }
    t.stop().await;
}

// ---------------------------------------------------------------------------
// The bug zoo's callback switches: each does its damage only when on.

fn with_bug(bug: booking::Bug) -> TestOptions {
    let mut o = options();
    o.settings.bugs = booking::Bugs::of([bug]);
    o
}

#[tokio::test]
async fn the_trust_redirect_cancel_bug_frees_a_held_seat() {
    let t = start_with(with_bug(booking::Bug::TrustRedirectCancel)).await;
    let b = book_held(&t, "c-1").await;
    let query = format!(
        "paymentID={}&status=cancel&signature={}",
        b.payment,
        b.copy.signature.as_deref().unwrap_or_default()
    );
    let (status, page) = callback(&t, &query).await;
    assert_eq!(status, 402, "{page}");
    assert!(record(&t, &b).await.is_none(), "the record is gone");
    assert!(
        t.ledger
            .hold(&t.stack.sale, &b.candidate)
            .await
            .unwrap()
            .is_none(),
        "the seat was given back on the browser's word"
    );
    assert_eq!(executes(&t, &b), 0);
    t.stop().await;
}

#[tokio::test]
async fn the_trust_redirect_success_bug_marks_paid_without_an_execute() {
    let t = start_with(with_bug(booking::Bug::TrustRedirectSuccess)).await;
    let b = book_held(&t, "c-1").await;
    let url = approve(&b).await;
    let (status, page) = deliver(&t, &url).await;
    assert_eq!(status, 200, "{page}");
    let r = record(&t, &b).await.unwrap();
    assert_eq!(r.status, RecordStatus::Paid);
    assert_eq!(executes(&t, &b), 0, "PAID, and no money taken");
    t.stop().await;
}

#[tokio::test]
async fn the_execute_after_deadline_bug_executes_a_late_callback() {
    let start_ms = booking::SystemClock.now_ms();
    let clock = ManualClock::new(start_ms);
    let o = TestOptions {
        clock: Arc::new(clock.clone()),
        ..with_bug(booking::Bug::ExecuteAfterDeadline)
    };
    let t = start_with(o).await;
    let b = book_held(&t, "c-1").await;
    let url = approve(&b).await;
    clock.advance(t.stack.settings.hold + Duration::from_secs(1));
    let (status, page) = deliver(&t, &url).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(executes(&t, &b), 1, "money taken after the deadline");
    t.stop().await;
}
