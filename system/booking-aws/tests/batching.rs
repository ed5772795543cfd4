//! The queue's batch calls, counted by the clients' interceptor, on both
//! local SQS servers (the rehearsals' one, fauxqs where installed, and
//! moto): sends made together leave as `SendMessageBatch` calls of ten,
//! each sender answered, each message delivered once; deletes and
//! visibility changes of many receipts are one call per ten, a stale
//! receipt refused alone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use booking::SystemClock;
use booking::queue::{Message, Queue, QueueError, ReceiptHandle, Received};
use booking_aws::{Adapters, AwsSettings, ProvisionOptions, provision};
use booking_aws_local::{LocalAws, Moto, moto_settings};

const VISIBILITY: Duration = Duration::from_secs(30);

async fn adapters(settings: AwsSettings) -> Adapters {
    let clients = settings.clients().await;
    let resources = LocalAws::resources();
    let options = ProvisionOptions {
        visibility_timeout: VISIBILITY,
        receives_max: 5,
        allow_unsupported: true,
    };
    provision(&clients, &resources, &options)
        .await
        .expect("provisioned");
    Adapters::connect(clients, resources, VISIBILITY, Arc::new(SystemClock))
        .await
        .expect("connected")
}

fn msg(i: usize) -> Message {
    Message {
        body: format!("m{i}"),
        group_id: format!("g{i:03}"),
        deduplication_id: format!("d{i}"),
    }
}

/// Receives until `n` messages came (or ten empty receives), without
/// deleting them.
async fn receive_all(q: &dyn Queue, n: usize) -> Vec<Received> {
    let mut got = Vec::new();
    let mut empty = 0;
    while got.len() < n && empty < 10 {
        let batch = q.receive(10, Duration::from_secs(1)).await.unwrap();
        if batch.is_empty() {
            empty += 1;
        }
        got.extend(batch);
    }
    got
}

async fn sends_made_together_leave_in_batches_of_ten(a: &Adapters) {
    let calls = &a.clients.calls;
    let q: Arc<dyn Queue> = a.queue.clone();
    // a current-thread runtime: every send is queued before the send loop
    // runs, so the batches are exactly 10, 10 and 5
    let sent = futures_util::future::join_all((0..25).map(|i| q.send(msg(i)))).await;
    assert!(sent.iter().all(Result::is_ok), "{sent:?}");
    assert_eq!(calls.calls("SQS", "SendMessageBatch"), 3);
    assert_eq!(calls.calls("SQS", "SendMessage"), 0);
    // one alone is a plain SendMessage
    q.send(msg(25)).await.unwrap();
    assert_eq!(calls.calls("SQS", "SendMessage"), 1);
    // a resend of one already queued is deduplicated by SQS, not queued twice
    q.send(msg(3)).await.unwrap();

    let got = receive_all(&*q, 26).await;
    let mut bodies: Vec<String> = got.iter().map(|r| r.message.body.clone()).collect();
    bodies.sort_by_key(|b| b[1..].parse::<usize>().unwrap());
    let want: Vec<String> = (0..26).map(|i| format!("m{i}")).collect();
    assert_eq!(bodies, want, "each message once");

    // 26 deletes: 10, 10 and 6 in three batch calls
    let before = calls.calls("SQS", "DeleteMessageBatch");
    let receipts: Vec<ReceiptHandle> = got.iter().map(|r| r.receipt.clone()).collect();
    let results = q.delete_batch(&receipts).await;
    assert_eq!(results.len(), 26);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(calls.calls("SQS", "DeleteMessageBatch") - before, 3);
    assert_eq!(calls.calls("SQS", "DeleteMessage"), 0);
    let depth = q.depth().await.unwrap();
    assert_eq!((depth.visible, depth.in_flight), (0, 0));
}

async fn visibility_changes_go_ten_a_call_and_a_stale_receipt_alone_fails(a: &Adapters) {
    let calls = &a.clients.calls;
    let q: Arc<dyn Queue> = a.queue.clone();
    for i in 0..3 {
        q.send(msg(100 + i)).await.unwrap();
    }
    let got = receive_all(&*q, 3).await;
    assert_eq!(got.len(), 3);
    let mut receipts: Vec<ReceiptHandle> = got.iter().map(|r| r.receipt.clone()).collect();
    // one of them deleted: its receipt is no longer in flight
    q.delete(&receipts[1]).await.unwrap();
    receipts.push(ReceiptHandle("not-a-receipt".into()));
    let before = calls.calls("SQS", "ChangeMessageVisibilityBatch");
    let results = q.change_visibility_batch(&receipts, VISIBILITY).await;
    assert_eq!(
        calls.calls("SQS", "ChangeMessageVisibilityBatch") - before,
        1
    );
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    assert!(
        matches!(results[3], Err(QueueError::InvalidReceipt)),
        "{results:?}"
    );
    // extended: still hidden
    assert!(q.receive(10, Duration::ZERO).await.unwrap().is_empty());
    // given back at once: visible again
    let back = q
        .change_visibility_batch(&[receipts[0].clone(), receipts[2].clone()], Duration::ZERO)
        .await;
    assert!(back.iter().all(Result::is_ok), "{back:?}");
    assert_eq!(receive_all(&*q, 2).await.len(), 2);
}

#[tokio::test]
async fn batches_on_the_rehearsals_sqs() {
    let local = LocalAws::start().await.expect("local AWS servers");
    let a = adapters(local.settings()).await;
    sends_made_together_leave_in_batches_of_ten(&a).await;
    visibility_changes_go_ten_a_call_and_a_stale_receipt_alone_fails(&a).await;
    // the counts cover every client: provision's and connect's calls too
    assert!(a.clients.calls.calls("SQS", "GetQueueUrl") >= 2);
    assert!(a.clients.calls.service_calls("S3") >= 1);
    drop(local);
}

#[tokio::test]
async fn batches_on_moto() {
    let moto: &'static Moto = Moto::shared().expect("moto");
    let a = adapters(moto_settings(moto)).await;
    sends_made_together_leave_in_batches_of_ten(&a).await;
    visibility_changes_go_ten_a_call_and_a_stale_receipt_alone_fails(&a).await;
}
