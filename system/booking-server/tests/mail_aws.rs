//! `[mail] kind = "ses"` and `[alerts] kind = "sns"` as an instance wires
//! them (`mail_ports`, `alerts_port`), against moto: what SES took is in the
//! stack's own log and read back from moto for the audit; every alert is in
//! the stack's own log, the ones SNS refused included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use booking::notify::{Alert, Confirmation, OutputLog};
use booking::{CandidateHash, Level, PaymentId, SaleId, SystemClock};
use booking_aws_local::{Moto, moto_settings};
use booking_embedded::outputs::{AlertLog, EmbeddedOutputs, ObjectSink, OutboxMailer};
use booking_server::alerts::alerts_port;
use booking_server::config::{AlertsConfig, AlertsKind, MailConfig, MailKind};
use booking_server::mail::mail_ports;

fn own_outputs() -> EmbeddedOutputs {
    EmbeddedOutputs {
        mailer: Arc::new(OutboxMailer::new()),
        alerts: Arc::new(AlertLog::new()),
        sink: Arc::new(ObjectSink::new(Arc::new(SystemClock))),
    }
}

fn unique(what: &str) -> String {
    format!("{what}-{:016x}", rand::random::<u64>())
}

#[tokio::test]
async fn ses_mail_is_logged_and_read_back_from_moto() {
    let moto: &'static Moto = Moto::shared().expect("moto");
    let aws = moto_settings(moto);
    let from = format!("{}@sellout.invalid", unique("tickets"));
    aws.ses_client(&aws.load().await)
        .create_email_identity()
        .email_identity(&from)
        .send()
        .await
        .expect("sender verified");
    let mail = MailConfig {
        kind: MailKind::Ses,
        ses: booking_aws::SesConfig {
            from: from.clone(),
            ..booking_aws::SesConfig::default()
        },
        readback_moto_url: Some(moto.url.clone()),
        ..MailConfig::default()
    };
    mail.check().unwrap();
    let own = own_outputs();
    let (mailer, outputs) = mail_ports(&mail, &aws, own.mailer.clone(), Arc::new(own.clone()))
        .await
        .unwrap();
    let c = Confirmation {
        sale: SaleId::parse("launch").unwrap(),
        candidate: CandidateHash::of("alice"),
        level: Level::parse("gold").unwrap(),
        payment_id: PaymentId::parse("TR0011").unwrap(),
        trx_id: Some("TRX1".into()),
        recovered: false,
    };
    mailer.send(&c).await.unwrap();
    // the audit reads what moto recorded from our sender...
    assert_eq!(outputs.sent_mail().await.unwrap(), vec![c.clone()]);
    // ...and the stack's own log has it too
    assert_eq!(own.sent_mail().await.unwrap(), vec![c.clone()]);

    // a sender SES does not know: the send fails, nothing is logged
    let unverified = MailConfig {
        ses: booking_aws::SesConfig {
            from: format!("{}@sellout.invalid", unique("nobody")),
            ..booking_aws::SesConfig::default()
        },
        ..mail
    };
    let own = own_outputs();
    let (mailer, outputs) =
        mail_ports(&unverified, &aws, own.mailer.clone(), Arc::new(own.clone()))
            .await
            .unwrap();
    assert!(mailer.send(&c).await.is_err());
    assert!(own.sent_mail().await.unwrap().is_empty());
    assert!(outputs.sent_mail().await.unwrap().is_empty());
}

#[tokio::test]
async fn sns_alerts_are_published_and_every_one_is_in_the_stack_s_log() {
    let moto: &'static Moto = Moto::shared().expect("moto");
    let aws = moto_settings(moto);
    let topic_arn = aws
        .sns_client(&aws.load().await)
        .create_topic()
        .name(unique("sellout-alerts"))
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    let alert = |kind: &str| Alert {
        kind: kind.into(),
        detail: "d".into(),
        candidate: None,
        payment_id: Some(PaymentId::parse("TR0011").unwrap()),
    };
    let config = AlertsConfig {
        kind: AlertsKind::Sns,
        topic_arn: Some(topic_arn),
    };
    config.check().unwrap();
    let own = own_outputs();
    let alerts = alerts_port(&config, &aws, own.alerts.clone())
        .await
        .unwrap();
    alerts.raise(alert("dead_letter")).await.unwrap();

    // a topic that is gone: the raise fails, the audit still counts it
    let gone = AlertsConfig {
        kind: AlertsKind::Sns,
        topic_arn: Some(format!(
            "arn:aws:sns:us-east-1:123456789012:{}",
            unique("gone")
        )),
    };
    let alerts = alerts_port(&gone, &aws, own.alerts.clone()).await.unwrap();
    let e = alerts.raise(alert("paid_after_release")).await.unwrap_err();
    assert!(e.to_string().contains("NotFound"), "{e}");
    assert_eq!(
        own.alerts_raised().await.unwrap(),
        vec![alert("dead_letter"), alert("paid_after_release")]
    );
}
