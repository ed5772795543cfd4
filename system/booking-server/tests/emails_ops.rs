//! `emails pending` and `emails resend` on an instance that is built but
//! not served (no reconciler runs, so nothing else sends what is owed):
//! PAID records whose email is owed, one paid long ago and one paid just
//! now, an SMTP mailer in front of a real SMTP server (aiosmtpd). Pending
//! lists both; resend sends only the one paid more than a sweep interval
//! ago (a winner may still be sending the other), marked recovered, and
//! marks it so it is owed no more.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../booking-smtp/tests/support/smtp_sink.rs"]
mod smtp_sink;

use booking::records::{BookingRecord, Condition, ConfirmPath};
use booking::{CandidateHash, Level, PaymentId, SaleId};
use booking_server::config::{LevelConfig, MailConfig, MailKind, ServerConfig};
use booking_server::ops;

#[tokio::test]
async fn pending_lists_every_owed_email_and_resend_sends_those_past_the_grace() {
    let sink = smtp_sink::Sink::start(&[]);
    let config = ServerConfig {
        levels: vec![LevelConfig {
            level: Level::parse("gold").unwrap(),
            cap: 10,
            price: "500.00".into(),
        }],
        mail: MailConfig {
            kind: MailKind::Smtp,
            smtp: booking_smtp::SmtpConfig {
                host: "127.0.0.1".into(),
                port: sink.port,
                tls: booking_smtp::SmtpTls::None,
                ..booking_smtp::SmtpConfig::default()
            },
            readback_maildir: Some(sink.maildir.clone()),
            ..MailConfig::default()
        },
        ..ServerConfig::default()
    };
    let server = booking_server::build(&config, "http://127.0.0.1:1")
        .await
        .unwrap();
    let stack = &server.stack;
    let now = stack.clock.now_ms();
    let grace = stack.settings.sweep_interval.as_millis() as u64;
    let paid = |who: &str, payment: &str, paid_ms: u64| {
        BookingRecord::held(
            CandidateHash::of(who),
            SaleId::parse("launch").unwrap(),
            Level::parse("gold").unwrap(),
            PaymentId::parse(payment).unwrap(),
            paid_ms - 1_000,
            paid_ms + 600_000,
        )
        .into_paid(ConfirmPath::Callback, paid_ms)
    };
    let old = paid("old", "P-OLD", now - 2 * grace);
    let fresh = paid("fresh", "P-FRESH", now);
    for r in [&old, &fresh] {
        stack
            .records
            .put(r.clone(), Condition::NotExists)
            .await
            .unwrap();
    }

    let pending = ops::emails_pending(&server).await.unwrap();
    let listed: Vec<&str> = pending.owed.iter().map(|o| o.payment_id.as_str()).collect();
    assert_eq!(listed, ["P-OLD", "P-FRESH"], "oldest paid first");
    assert!(!pending.truncated);
    // measured from the clock when pending is asked, a few ms after `now`
    let owed_for = pending.owed[0].owed_for_ms;
    assert!(
        (2 * grace..2 * grace + 5_000).contains(&owed_for),
        "owed for {owed_for} ms, paid {} ms before the test began",
        2 * grace
    );

    let resent = ops::emails_resend(&server).await.unwrap();
    assert_eq!((resent.owed, resent.sent, resent.failed), (1, 1, 0));
    let delivered = sink.log().delivered().unwrap();
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    assert_eq!(delivered[0].confirmation.payment_id.as_str(), "P-OLD");
    assert!(delivered[0].confirmation.recovered);
    let left = ops::emails_pending(&server).await.unwrap();
    let left: Vec<&str> = left.owed.iter().map(|o| o.payment_id.as_str()).collect();
    assert_eq!(left, ["P-FRESH"], "sent and marked: owed no more");
    // again: nothing past the grace is owed, nothing is sent twice
    let again = ops::emails_resend(&server).await.unwrap();
    assert_eq!((again.owed, again.sent), (0, 0));
    assert_eq!(sink.log().delivered().unwrap().len(), 1);
}
