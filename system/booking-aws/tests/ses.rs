//! [`SesMailer`] against moto's SES v2 through the real SDK, read back by
//! [`SesMotoOutputs`] from moto's state document. Each test sends from an
//! address of its own, so tests sharing the process's moto never read each
//! other's mail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use booking::notify::{Alert, Confirmation, Mailer, NotifyError, OutputLog, StatusWrite};
use booking::{CandidateHash, Level, PaymentId, SaleId};
use booking_aws::{AwsSettings, Endpoints, SesConfig, SesMailer, SesMotoLog, SesMotoOutputs};
use booking_aws_local::{Moto, moto_settings};

/// A stand-in for the stack's own log: one alert, one status write.
#[derive(Debug)]
struct Base;

fn base_alert() -> Alert {
    Alert {
        kind: "from_the_base".into(),
        detail: "the stack's own log".into(),
        candidate: None,
        payment_id: None,
    }
}

#[async_trait]
impl OutputLog for Base {
    async fn sent_mail(&self) -> Result<Vec<Confirmation>, NotifyError> {
        Ok(Vec::new())
    }
    async fn alerts_raised(&self) -> Result<Vec<Alert>, NotifyError> {
        Ok(vec![base_alert()])
    }
    async fn status_writes(&self, since_ms: u64) -> Result<Vec<StatusWrite>, NotifyError> {
        Ok(vec![StatusWrite {
            at_ms: since_ms,
            document: b"{}".to_vec(),
        }])
    }
}

/// An address no other test sends from.
fn sender() -> String {
    format!("tickets-{:016x}@sellout.invalid", rand::random::<u64>())
}

fn confirmation(candidate: &str, level: &str, payment: &str, trx: Option<&str>) -> Confirmation {
    Confirmation {
        sale: SaleId::parse("launch").unwrap(),
        candidate: CandidateHash::of(candidate),
        level: Level::parse(level).unwrap(),
        payment_id: PaymentId::parse(payment).unwrap(),
        trx_id: trx.map(str::to_owned),
        recovered: false,
    }
}

async fn ses_client(settings: &AwsSettings) -> aws_sdk_sesv2::Client {
    let sdk = settings.load().await;
    settings.ses_client(&sdk)
}

#[tokio::test]
async fn a_confirmation_sent_through_ses_reads_back_as_sent() {
    let moto: &'static Moto = Moto::shared().expect("moto");
    let client = ses_client(&moto_settings(moto)).await;
    let address = sender();
    client
        .create_email_identity()
        .email_identity(&address)
        .send()
        .await
        .expect("sender verified");
    let config = SesConfig {
        from: format!("Tickets <{address}>"),
        message_id_domain: "mail.sellout.invalid".into(),
        ..SesConfig::default()
    };
    let mailer = SesMailer::new(client, config.clone()).unwrap();
    let first = confirmation("alice", "gold", "TR0011ABC", Some("8JK2LM"));
    let second = confirmation("bob", "floor", "TR0022DEF", None);
    // the email sweep's repeat of the first: same booking, same Message-ID
    let repeat = Confirmation {
        recovered: true,
        ..first.clone()
    };
    for c in [&first, &second, &repeat] {
        mailer.send(c).await.expect("sent");
    }

    let log = SesMotoLog::new(&moto.url, &config.from).unwrap();
    let delivered = log.delivered().await.unwrap();
    let got: Vec<_> = delivered.iter().map(|d| d.confirmation.clone()).collect();
    // payment, candidate, level, trx and the recovered flag all come back
    // from the X-Sellout-* headers moto recorded, in send order
    assert_eq!(got, vec![first.clone(), second.clone(), repeat.clone()]);
    let ids: Vec<_> = delivered.iter().map(|d| d.message_id.as_str()).collect();
    assert_eq!(
        ids,
        vec![
            "<TR0011ABC.launch@mail.sellout.invalid>",
            "<TR0022DEF.launch@mail.sellout.invalid>",
            "<TR0011ABC.launch@mail.sellout.invalid>",
        ]
    );
    assert_eq!(ids[0], first.message_id("mail.sellout.invalid"));

    // what moto recorded: the candidate's address, and the whole message
    // booking_smtp composes (its subject and text body included)
    let data: serde_json::Value = reqwest::get(log.data_url())
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ours: Vec<&serde_json::Value> = data["ses"]["RawMessage"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["source"].as_str().unwrap_or("").contains(&address))
        .collect();
    assert_eq!(ours.len(), 3);
    let to = booking_smtp::recipient(&second, &config.recipient_domain);
    assert!(
        ours[1]["destinations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d.as_str() == Some(to.as_str())),
        "{:?}",
        ours[1]["destinations"]
    );
    let raw = ours[1]["raw_data"].as_str().unwrap();
    assert!(raw.contains("Subject: Your seat is confirmed: floor (launch)"));
    assert!(raw.contains(&format!("From: Tickets <{address}>")));
    assert!(raw.contains("X-Sellout-Payment: TR0022DEF"));

    // the audit's view: mail from moto, alerts and status from the stack
    let outputs = SesMotoOutputs {
        base: Arc::new(Base),
        moto: log,
    };
    assert_eq!(
        outputs.sent_mail().await.unwrap(),
        vec![first, second, repeat]
    );
    assert_eq!(outputs.alerts_raised().await.unwrap(), vec![base_alert()]);
    assert_eq!(outputs.status_writes(7).await.unwrap()[0].at_ms, 7);
}

#[tokio::test]
async fn an_unverified_sender_is_refused_with_a_notify_error() {
    let moto: &'static Moto = Moto::shared().expect("moto");
    let address = sender();
    let config = SesConfig {
        from: address.clone(),
        ..SesConfig::default()
    };
    let mailer = SesMailer::new(ses_client(&moto_settings(moto)).await, config).unwrap();
    let NotifyError::Unavailable(why) = mailer
        .send(&confirmation("carol", "gold", "TR0033", None))
        .await
        .unwrap_err();
    assert!(why.starts_with("ses SendEmail: "), "{why}");
    assert!(why.contains("MessageRejected"), "{why}");
    assert!(why.contains(&address), "{why}");
    // nothing was recorded from it
    let log = SesMotoLog::new(&moto.url, &address).unwrap();
    assert!(log.sent_mail().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_send_that_gets_no_answer_fails_within_its_bound() {
    let settings = AwsSettings {
        endpoints: Endpoints {
            ses: Some(common::black_hole().await),
            ..Endpoints::default()
        },
        local_credentials: true,
        ..AwsSettings::default()
    };
    let config = SesConfig {
        from: sender(),
        send_timeout_ms: 300,
        ..SesConfig::default()
    };
    let mailer = SesMailer::new(ses_client(&settings).await, config).unwrap();
    let started = Instant::now();
    let NotifyError::Unavailable(why) = mailer
        .send(&confirmation("dave", "gold", "TR0044", None))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(why.contains("send_timeout_ms = 300"), "{why}");
    // well before the SDK's own attempt timeout (5 s) would have ended it
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

#[tokio::test]
async fn a_moto_that_does_not_answer_is_an_error_for_the_audit() {
    let log = SesMotoLog::new("http://127.0.0.1:1", "t@sellout.invalid").unwrap();
    assert!(matches!(
        log.sent_mail().await,
        Err(NotifyError::Unavailable(_))
    ));
}
