//! [`SnsAlerts`] against moto's SNS through the real SDK: a topic of its
//! own per test, fanned out to moto's SQS, where the alert is received.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use booking::notify::{Alert, Alerts, NotifyError};
use booking::{CandidateHash, PaymentId};
use booking_aws::alerts::subject;
use booking_aws::{AwsSettings, Endpoints, SnsAlerts};
use booking_aws_local::{Moto, moto_settings};

/// Receives for at most this long before giving up on a message.
const RECEIVE_WITHIN: Duration = Duration::from_secs(10);

fn name(what: &str) -> String {
    format!("{what}-{:016x}", rand::random::<u64>())
}

/// A queue subscribed to `topic_arn` (raw delivery or the SNS envelope):
/// its URL.
async fn subscribed_queue(
    sns: &aws_sdk_sns::Client,
    sqs: &aws_sdk_sqs::Client,
    topic_arn: &str,
    raw: bool,
) -> String {
    let url = sqs
        .create_queue()
        .queue_name(name("alerts"))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()
        .remove(&aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .unwrap();
    let mut subscribe = sns
        .subscribe()
        .topic_arn(topic_arn)
        .protocol("sqs")
        .endpoint(arn);
    if raw {
        subscribe = subscribe.attributes("RawMessageDelivery", "true");
    }
    subscribe.send().await.unwrap();
    url
}

/// The next message body on `url`.
async fn receive(sqs: &aws_sdk_sqs::Client, url: &str) -> String {
    let started = Instant::now();
    while started.elapsed() < RECEIVE_WITHIN {
        let out = sqs
            .receive_message()
            .queue_url(url)
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        if let Some(m) = out.messages.unwrap_or_default().into_iter().next() {
            return m.body.unwrap();
        }
    }
    panic!("nothing on {url} within {RECEIVE_WITHIN:?}");
}

#[tokio::test]
async fn an_alert_reaches_a_subscribed_queue_as_json() {
    let moto: &'static Moto = Moto::shared().expect("moto");
    let settings = moto_settings(moto);
    let sdk = settings.load().await;
    let sns = settings.sns_client(&sdk);
    let sqs = settings.clients_from(&sdk).sqs;
    let topic_arn = sns
        .create_topic()
        .name(name("sellout-alerts"))
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    let raw_queue = subscribed_queue(&sns, &sqs, &topic_arn, true).await;
    let envelope_queue = subscribed_queue(&sns, &sqs, &topic_arn, false).await;

    let alert = Alert {
        kind: "paid_after_release".into(),
        detail: "payment TR0011 completed for a released seat".into(),
        candidate: Some(CandidateHash::of("alice")),
        payment_id: Some(PaymentId::parse("TR0011").unwrap()),
    };
    let alerts = SnsAlerts::new(sns, &topic_arn).unwrap();
    alerts.raise(alert.clone()).await.expect("published");

    // raw delivery: the message is the alert's JSON, every field kept
    let body = receive(&sqs, &raw_queue).await;
    let back: Alert = serde_json::from_str(&body).unwrap();
    assert_eq!(back, alert);
    assert_eq!(back.kind, "paid_after_release");
    assert_eq!(back.payment_id.as_ref().map(|p| p.as_str()), Some("TR0011"));

    // the SNS envelope: the short subject, the same message
    let envelope: serde_json::Value =
        serde_json::from_str(&receive(&sqs, &envelope_queue).await).expect("an SNS notification");
    assert_eq!(envelope["TopicArn"].as_str(), Some(topic_arn.as_str()));
    assert_eq!(
        envelope["Subject"].as_str(),
        Some("sellout alert: paid_after_release")
    );
    assert_eq!(envelope["Subject"].as_str(), Some(subject(&alert).as_str()));
    let message: Alert = serde_json::from_str(envelope["Message"].as_str().unwrap()).unwrap();
    assert_eq!(message, alert);
}

#[tokio::test]
async fn a_publish_to_a_missing_topic_is_an_error() {
    let moto: &'static Moto = Moto::shared().expect("moto");
    let settings = moto_settings(moto);
    let sns = settings.sns_client(&settings.load().await);
    let missing = format!("arn:aws:sns:us-east-1:123456789012:{}", name("missing"));
    let alerts = SnsAlerts::new(sns, &missing).unwrap();
    let NotifyError::Unavailable(why) = alerts
        .raise(Alert {
            kind: "dead_letter".into(),
            detail: "d".into(),
            candidate: None,
            payment_id: None,
        })
        .await
        .unwrap_err();
    assert!(why.starts_with("sns Publish: "), "{why}");
    assert!(why.contains("NotFound"), "{why}");
    assert!(why.contains(&missing), "{why}");
}

#[tokio::test]
async fn a_publish_that_gets_no_answer_fails_within_its_bound() {
    let settings = AwsSettings {
        endpoints: Endpoints {
            sns: Some(common::black_hole().await),
            ..Endpoints::default()
        },
        local_credentials: true,
        ..AwsSettings::default()
    };
    let sns = settings.sns_client(&settings.load().await);
    let alerts = SnsAlerts::new(sns, "arn:aws:sns:us-east-1:123456789012:t")
        .unwrap()
        .with_timeout(Duration::from_millis(300));
    let started = Instant::now();
    let e = alerts
        .raise(Alert {
            kind: "k".into(),
            detail: "d".into(),
            candidate: None,
            payment_id: None,
        })
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(e.to_string().contains("no answer within 300 ms"), "{e}");
    assert!(took < Duration::from_secs(3), "{took:?}");
}
