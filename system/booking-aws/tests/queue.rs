//! The SQS FIFO queue against the queue contract (`booking_contract::queue`)
//! on moto, through the real SDK, each case on queues of its own; then what
//! only SQS has: batch delete, the on-failure queue and the S3 status
//! document with its cache headers.
//!
//! moto's timing is its own (real time, visibility in whole seconds), it
//! forgets a deduplication ID once its message is deleted, ignores
//! `DeduplicationScope=messageGroup`, may reorder a group after a
//! visibility-timeout redelivery or under concurrent receives, keeps a
//! long poll blocked on the groups in flight when it began, and accepts
//! some stale receipts; SQS never
//! says a send was deduplicated and the adapter's oldest age is what its own
//! receives saw. The fixture's capabilities say so, and the contract checks
//! the rest.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::types::QueueAttributeName;
use booking::StatusSink;
use booking::clock::{Clock, SystemClock};
use booking::queue::{Message, Queue, QueueConfig, QueueError};
use booking_aws::provision::{ProvisionOptions, admission_queue_attributes, fifo_attributes};
use booking_aws::{Clients, SqsQueue};
use booking_aws_local::{LocalAws, Moto, moto_settings};
use booking_contract::queue::{Capabilities, QueueFixture};
use booking_streams::{BatchFailure, DiscardReason, FailureDestination};
use common::provisioned;

/// How much longer than asked an `advance` sleeps: moto compares its own
/// clock, in whole seconds of visibility.
const ADVANCE_SLACK: Duration = Duration::from_millis(150);

/// SQS FIFO queues on the process's moto, each pair (queue and dead-letter
/// queue) freshly named.
#[derive(Debug)]
struct Sqs {
    clients: Clients,
}

impl Sqs {
    async fn start() -> Sqs {
        let moto: &'static Moto = Moto::shared().expect("moto");
        Sqs {
            clients: moto_settings(moto).clients().await,
        }
    }

    async fn create(
        &self,
        name: &str,
        attributes: impl IntoIterator<Item = (String, String)>,
    ) -> String {
        let mut create = self.clients.sqs.create_queue().queue_name(name);
        for (k, v) in attributes {
            create = create.attributes(QueueAttributeName::from(k.as_str()), v);
        }
        create
            .send()
            .await
            .expect("queue created")
            .queue_url()
            .unwrap()
            .to_owned()
    }
}

#[async_trait]
impl QueueFixture for Sqs {
    async fn queue(&self, config: QueueConfig) -> Arc<dyn Queue> {
        let names = LocalAws::resources();
        let dead_letter_url = self
            .create(&names.dead_letter_queue, fifo_attributes())
            .await;
        let arn = self
            .clients
            .sqs
            .get_queue_attributes()
            .queue_url(&dead_letter_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .expect("attributes")
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
            .expect("an ARN");
        let options = ProvisionOptions {
            visibility_timeout: config.visibility_timeout,
            receives_max: config.receives_max,
            allow_unsupported: true,
        };
        self.create(&names.queue, admission_queue_attributes(&options, &arn))
            .await;
        let queue = SqsQueue::connect(
            self.clients.sqs.clone(),
            &names.queue,
            &names.dead_letter_queue,
            config.visibility_timeout,
            Arc::new(SystemClock),
        )
        .await
        .expect("connected");
        Arc::new(queue)
    }

    async fn advance(&self, by: Duration) {
        tokio::time::sleep(by + ADVANCE_SLACK).await;
    }

    fn now_ms(&self) -> u64 {
        SystemClock.now_ms()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            manual_time: false,
            reports_duplicates: false,
            full_deduplication: false,
            order_after_redelivery: false,
            order_under_concurrent_receives: false,
            long_poll_sees_unblocked_groups: false,
            stale_receipts_refused: false,
            exact_oldest_age: false,
        }
    }
}

booking_contract::queue_contract!(Sqs::start().await);

const HOUR: Duration = Duration::from_secs(3_600);

fn msg(group: &str, dedup: &str, body: &str) -> Message {
    Message {
        body: body.into(),
        group_id: group.into(),
        deduplication_id: dedup.into(),
    }
}

#[tokio::test]
async fn a_group_is_delivered_in_order_and_a_duplicate_send_once() {
    let (_local, a) = provisioned(HOUR, Duration::from_secs(30)).await;
    let q = &a.queue;
    for i in 0..4 {
        q.send(msg("ab12", &format!("d{i}"), &format!("m{i}")))
            .await
            .unwrap();
    }
    // a retried send: same (group, deduplication ID) while the first is queued
    q.send(msg("ab12", "d1", "m1-again")).await.unwrap();
    q.send(msg("cd34", "x", "other")).await.unwrap();
    let depth = q.depth().await.unwrap();
    assert_eq!(
        (depth.visible, depth.in_flight),
        (5, 0),
        "the duplicate was not queued"
    );

    // each receive's messages deleted in one batch call before the next
    // receive (fauxqs, the rehearsals' SQS, delivers one message of a group
    // per receive and holds the group back until it is deleted)
    let mut bodies = Vec::new();
    let mut handled = 0;
    for _ in 0..10 {
        let got = q.receive(10, Duration::from_secs(1)).await.unwrap();
        let mut receipts = Vec::new();
        for r in got {
            assert_eq!(r.receive_count, 1);
            assert!(r.sent_ms > 0);
            if r.message.group_id == "ab12" {
                bodies.push(r.message.body.clone());
                assert_eq!(r.message.deduplication_id, format!("d{}", bodies.len() - 1));
            }
            receipts.push(r.receipt);
        }
        if receipts.is_empty() {
            continue;
        }
        assert!(q.oldest_age().await.unwrap().is_some());
        let results = q.delete_message_batch(&receipts).await.unwrap();
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        handled += receipts.len();
        if handled == 5 {
            break;
        }
    }
    assert_eq!(bodies, ["m0", "m1", "m2", "m3"], "in order, m1 once");
    assert_eq!(q.depth().await.unwrap(), Default::default());
    assert_eq!(q.oldest_age().await.unwrap(), None);
    assert!(matches!(
        q.delete_message_batch(&[]).await,
        Err(QueueError::Invalid(_))
    ));
    // an empty long poll waits and comes back empty
    let started = std::time::Instant::now();
    assert!(
        q.receive(10, Duration::from_secs(1))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(started.elapsed() >= Duration::from_millis(900));
}

#[tokio::test]
async fn given_up_stream_records_reach_the_failure_queue() {
    let (_local, a) = provisioned(HOUR, Duration::from_secs(30)).await;
    let failure = BatchFailure {
        handler: "sync".into(),
        reason: DiscardReason::RetriesExhausted,
        attempts: 11,
        records: vec![],
    };
    a.failures.send(&failure).await.unwrap();
    let out = a
        .clients
        .sqs
        .receive_message()
        .queue_url(a.failures.url())
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    let body = out.messages()[0].body().unwrap();
    let back: BatchFailure = serde_json::from_str(body).unwrap();
    assert_eq!(back, failure);
}

#[tokio::test]
async fn the_status_document_is_overwritten_whole_with_cache_headers() {
    let (_local, a) = provisioned(HOUR, Duration::from_secs(30)).await;
    assert_eq!(a.status.get().await.unwrap(), None, "nothing yet");
    a.status.put(br#"{"v":1}"#).await.unwrap();
    a.status.put(br#"{"v":2}"#).await.unwrap();
    assert_eq!(
        a.status.get().await.unwrap().as_deref(),
        Some(&br#"{"v":2}"#[..])
    );
    let head = a
        .clients
        .s3
        .head_object()
        .bucket(&a.resources.bucket)
        .key(&a.resources.status_key)
        .send()
        .await
        .unwrap();
    assert_eq!(
        head.cache_control(),
        Some(booking_aws::status::STATUS_CACHE_CONTROL)
    );
    assert_eq!(head.content_type(), Some("application/json"));
}
