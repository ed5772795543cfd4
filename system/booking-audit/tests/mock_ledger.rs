//! The typed reader against the mock gateway's own serialization: a
//! payment as `/__mock/ledger` writes it reads back field for field.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use booking_audit::{GatewayState, GatewayTruth};
use chrono::{TimeZone, Utc};
use mock_gateway::payments::{NewPayment, Payment, PaymentState};
use mock_gateway::wire::Amount;

#[test]
fn the_mock_ledger_json_reads_typed() {
    let created = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let executed = created + chrono::Duration::nanoseconds(10_250_123_456);
    let mut p = Payment::new(
        "TR0011abc".into(),
        "app-key".into(),
        "sig".into(),
        NewPayment {
            mode: "0011".into(),
            payer_reference: "01700000000".into(),
            callback_url: "http://127.0.0.1/callback".into(),
            amount: Amount::parse("1500.00").unwrap(),
            currency: "BDT".into(),
            intent: "sale".into(),
            merchant_invoice_number: "launch-abc-17".into(),
        },
        created,
    );
    p.state = PaymentState::Completed;
    p.executed_at = Some(executed);
    let open = Payment::new(
        "TR0011def".into(),
        "app-key".into(),
        "sig".into(),
        NewPayment {
            mode: "0011".into(),
            payer_reference: "01700000001".into(),
            callback_url: "http://127.0.0.1/callback".into(),
            amount: Amount::parse("500.00").unwrap(),
            currency: "BDT".into(),
            intent: "sale".into(),
            merchant_invoice_number: "launch-def-18".into(),
        },
        created,
    );
    // the shape of control.rs's `ledger`
    let ledger = serde_json::json!({
        "payments": [p, open],
        "webhooks": [],
        "subscriptions": [],
        "faults": [],
        "grants_in_window": {"app-key": 1},
    });
    let truth = GatewayTruth::from_json(&ledger.to_string()).unwrap();
    let [done, waiting] = &truth.payments[..] else {
        panic!("{truth:?}")
    };
    assert_eq!(done.payment_id, "TR0011abc");
    assert_eq!(done.state, GatewayState::Completed);
    assert_eq!(done.app_key, "app-key");
    assert_eq!(done.amount_poisha, 150_000);
    assert_eq!(done.merchant_invoice_number, "launch-abc-17");
    assert_eq!(
        done.created_ms,
        Some(u64::try_from(created.timestamp_millis()).unwrap())
    );
    assert_eq!(
        done.executed_ms,
        Some(u64::try_from(executed.timestamp_millis()).unwrap())
    );
    assert_eq!(waiting.state, GatewayState::Initiated);
    assert_eq!(waiting.executed_ms, None);
    assert_eq!(
        truth.grants_in_window.unwrap().get("app-key").copied(),
        Some(1)
    );
}
