//! The bKash adapter against the mock gateway over real sockets: create, the
//! payer pays, execute, query; the one query after an execute timeout; refusals.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use booking::clock::SystemClock;
use booking::gateway::{ExecutedVia, GatewayError, GatewayPaymentState, PaymentGateway, codes};
use booking::ids::PaymentId;
use booking_bkash::{BkashGateway, TokenConfig};
use booking_embedded::coordination::EmbeddedCoordination;
use common::{REQUEST, calls, grants, instance, mock, payment};
use mock_gateway::Running;
use mock_gateway::payer::{ActResult, Payer};
use mock_gateway::payments::PaymentState;

fn bkash(running: &Running, query_reserve: Duration) -> BkashGateway {
    let store = Arc::new(EmbeddedCoordination::default());
    instance(
        running,
        &store,
        Arc::new(SystemClock),
        TokenConfig::default(),
        query_reserve,
    )
}

/// Creates a payment and has the payer approve it; returns its ID.
async fn approved(running: &Running, g: &BkashGateway, invoice: &str) -> PaymentId {
    let created = g.create(&payment(invoice), REQUEST).await.unwrap();
    let payer = Payer::new(Duration::from_secs(5)).unwrap();
    let act = payer.act(&created.bkash_url, "pay").await.unwrap();
    assert!(matches!(act, ActResult::Redirect(_)), "{act:?}");
    let p = running
        .app
        .gateway
        .payment(created.payment_id.as_str())
        .unwrap();
    assert_eq!(p.state, PaymentState::Authorized);
    created.payment_id
}

#[tokio::test]
async fn create_pay_execute_query_round_trip_with_the_ledgers_signature() {
    let running = mock("").await;
    let g = bkash(&running, Duration::from_secs(2));

    let created = g.create(&payment("INV-1"), REQUEST).await.unwrap();
    let ledger = running
        .app
        .gateway
        .payment(created.payment_id.as_str())
        .unwrap();
    assert_eq!(
        created.signature, ledger.signature,
        "the per-payment signature"
    );
    assert_eq!(ledger.merchant_invoice_number, "INV-1");
    assert_eq!(ledger.amount, "500");
    assert!(created.bkash_url.contains(created.payment_id.as_str()));

    let status = g.query(&created.payment_id, REQUEST).await.unwrap();
    assert_eq!(status.state, GatewayPaymentState::Initiated);
    assert_eq!(status.invoice.as_deref(), Some("INV-1"));

    // the payer pays; the redirect carries the same signature
    let payer = Payer::new(Duration::from_secs(5)).unwrap();
    let ActResult::Redirect(back) = payer.act(&created.bkash_url, "pay").await.unwrap() else {
        panic!("the checkout page redirects");
    };
    let query: Vec<(String, String)> = back
        .query_pairs()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
    assert!(
        query.contains(&("signature".into(), created.signature.clone())),
        "{back}"
    );
    assert!(query.contains(&("paymentID".into(), created.payment_id.to_string())));
    assert_eq!(
        g.query(&created.payment_id, REQUEST).await.unwrap().state,
        GatewayPaymentState::Authorized
    );

    let done = g.execute(&created.payment_id, REQUEST).await.unwrap();
    let ledger = running
        .app
        .gateway
        .payment(created.payment_id.as_str())
        .unwrap();
    assert_eq!(ledger.state, PaymentState::Completed);
    assert_eq!(Some(done.trx_id.clone()), ledger.trx_id);
    assert_eq!(done.via, ExecutedVia::Answer);
    assert_eq!(done.amount.as_deref(), Some("500"));
    assert_eq!(
        g.query(&created.payment_id, REQUEST).await.unwrap().state,
        GatewayPaymentState::Completed {
            trx_id: done.trx_id
        }
    );

    // executing again is refused by the gateway, with no recovery query
    let status_calls = calls(&running, "status");
    let again = g.execute(&created.payment_id, REQUEST).await.unwrap_err();
    assert_eq!(
        again.refused_code(),
        Some(codes::EXECUTION_ALREADY_COMPLETED)
    );
    assert_eq!(calls(&running, "status"), status_calls);
    assert_eq!(grants(&running), 1, "one token for every call");
}

#[tokio::test]
async fn an_execute_that_times_out_but_completed_is_recovered_by_one_query() {
    let running = mock(
        r#"
        [[rule]]
        op = "execute"
        action = { timeout = { complete = true, hang_ms = 10000 } }
        "#,
    )
    .await;
    let g = bkash(&running, Duration::from_millis(500));
    let id = approved(&running, &g, "INV-T1").await;

    let status_before = calls(&running, "status");
    let started = Instant::now();
    let done = g.execute(&id, Duration::from_millis(1500)).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "execute had 1 s"
    );

    let ledger = running.app.gateway.payment(id.as_str()).unwrap();
    assert_eq!(done.via, ExecutedVia::Query);
    assert_eq!(Some(done.trx_id), ledger.trx_id);
    assert_eq!(ledger.execute_calls.len(), 1);
    assert_eq!(calls(&running, "status") - status_before, 1, "queried once");
}

#[tokio::test]
async fn an_execute_that_times_out_without_completing_stays_uncertain() {
    let running = mock(
        r#"
        [[rule]]
        op = "execute"
        action = { timeout = { complete = false, hang_ms = 10000 } }
        "#,
    )
    .await;
    let g = bkash(&running, Duration::from_millis(500));
    let id = approved(&running, &g, "INV-T2").await;

    let status_before = calls(&running, "status");
    let started = Instant::now();
    let outcome = g.execute(&id, Duration::from_millis(1500)).await;
    assert_eq!(outcome, Err(GatewayError::Timeout));
    assert!(started.elapsed() < Duration::from_millis(1500));

    let ledger = running.app.gateway.payment(id.as_str()).unwrap();
    assert_eq!(ledger.state, PaymentState::Authorized, "nothing executed");
    assert_eq!(ledger.execute_calls.len(), 1, "exactly one execute call");
    assert_eq!(calls(&running, "execute"), 1);
    assert_eq!(
        calls(&running, "status") - status_before,
        1,
        "exactly one status call"
    );
}

#[tokio::test]
async fn an_execute_whose_answer_is_lost_is_queried_once_too() {
    let running = mock(
        r#"
        [[rule]]
        op = "execute"
        action = { fail = "reset" }
        "#,
    )
    .await;
    let g = bkash(&running, Duration::from_millis(500));
    let id = approved(&running, &g, "INV-R").await;
    let status_before = calls(&running, "status");
    assert_eq!(
        g.execute(&id, REQUEST).await,
        Err(GatewayError::Timeout),
        "an answer lost on the way may have executed: uncertain"
    );
    assert_eq!(calls(&running, "status") - status_before, 1);
}

#[tokio::test]
async fn refusals_carry_the_gateways_code() {
    let running = mock("").await;
    let g = bkash(&running, Duration::from_secs(2));

    let mut bad = payment("INV-BAD");
    bad.amount = "-1".into();
    let refused = g.create(&bad, REQUEST).await.unwrap_err();
    assert!(
        matches!(&refused, GatewayError::Refused { code, message } if code == "2006" && !message.is_empty()),
        "{refused:?}"
    );

    // executing an unpaid payment: refused, and a refusal needs no query
    let created = g.create(&payment("INV-2"), REQUEST).await.unwrap();
    let status_before = calls(&running, "status");
    let refused = g.execute(&created.payment_id, REQUEST).await.unwrap_err();
    assert_eq!(refused.refused_code(), Some(codes::INVALID_PAYMENT_STATE));
    assert_eq!(calls(&running, "status"), status_before);

    let unknown = PaymentId::parse("TR0011NOPE").unwrap();
    let refused = g.query(&unknown, REQUEST).await.unwrap_err();
    assert_eq!(refused.refused_code(), Some(codes::INVALID_PAYMENT_ID));
}

#[tokio::test]
async fn an_unreachable_gateway_is_unavailable_not_refused() {
    // a port nobody listens on
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let mut config = booking_bkash::BkashConfig::new(url, common::credentials());
    config.query_reserve = Duration::from_millis(100);
    let g = booking_bkash::BkashGateway::connect(
        config,
        Arc::new(EmbeddedCoordination::default()),
        Arc::new(SystemClock),
        &booking::Settings::default(),
        "unreachable",
    )
    .unwrap();
    assert_eq!(
        g.tokens().token(Duration::from_millis(500)).await,
        Err(GatewayError::TokenUnavailable)
    );
    assert_eq!(g.tokens().stats().failures, 1);
    assert_eq!(
        g.create(&payment("INV-X"), Duration::from_millis(200))
            .await,
        Err(GatewayError::TokenUnavailable),
        "the failed grant holds the lock: no second attempt"
    );
    assert_eq!(g.tokens().stats().grants, 1);
}
