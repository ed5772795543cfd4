//! The DynamoDB record store and its stream against dynoxide (through the
//! real SDK): the records and stream contract suites (booking-contract),
//! each case on freshly provisioned local resources, then what only
//! DynamoDB has: the raw item of a PAID booking, the held index's buckets,
//! a missing table, and the Streams front that spells the TTL service's
//! identity.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use async_trait::async_trait;
use booking::records::{
    ChangeStream, Condition, ConfirmPath, RecordError, RecordStatus, RecordStore, StreamKind,
};
use booking::{CandidateHash, Clock, SystemClock};
use booking_aws::{Adapters, DynamoStream};
use booking_aws_local::LocalAws;
use booking_contract::records::RecordsFixture;
use common::{held, now_ms, pay, provisioned};

const HOUR: Duration = Duration::from_secs(3_600);

/// dynoxide with its TTL service an hour late (so it deletes nothing on its
/// own during a case), the provisioned adapters, and one stream reader.
struct AwsFixture {
    local: LocalAws,
    adapters: Adapters,
    stream: DynamoStream,
}

#[async_trait]
impl RecordsFixture for AwsFixture {
    fn records(&self) -> &dyn RecordStore {
        self.adapters.records.as_ref()
    }

    fn stream(&self) -> &dyn ChangeStream {
        &self.stream
    }

    /// DynamoDB's TTL runs on the real clock: so do the cases here.
    fn now_ms(&self) -> u64 {
        SystemClock.now_ms()
    }

    async fn run_ttl_service(&self) {
        self.local.dynoxide.set_ttl_lag(Duration::ZERO);
        let swept = self.local.dynoxide.sweep_ttl().await;
        self.local.dynoxide.set_ttl_lag(HOUR);
        swept.unwrap();
    }

    /// dynoxide's GSIs and eventually consistent reads are never behind.
    async fn settle(&self) {}

    /// The reader is a shard iterator: it drops what it has read past.
    fn rereads_behind(&self) -> bool {
        false
    }

    /// dynoxide writes a MODIFY for a put that changes nothing (DynamoDB
    /// does not).
    fn skips_unchanged_writes(&self) -> bool {
        false
    }
}

async fn fixture() -> AwsFixture {
    let (local, adapters) = provisioned(HOUR, Duration::from_secs(60)).await;
    let stream = adapters.stream().await.unwrap();
    AwsFixture {
        local,
        adapters,
        stream,
    }
}

booking_contract::records_contract!(fixture);
booking_contract::stream_contract!(fixture);

/// HELD→PAID on the table itself: the item has neither the TTL attribute
/// nor the held index's key any more.
#[tokio::test]
async fn a_paid_item_has_neither_the_ttl_nor_the_held_index_key() {
    let (_local, a) = provisioned(HOUR, Duration::from_secs(60)).await;
    let store = &a.records;
    let t = now_ms();
    let r = held("bob", "P1", t, 600_000);
    store.put(r.clone(), Condition::NotExists).await.unwrap();
    let c = r.candidate.clone();
    let raw_item = |c: CandidateHash| {
        let a = a.clone();
        async move {
            a.clients
                .dynamodb
                .get_item()
                .table_name(&a.resources.table)
                .key(
                    "candidate",
                    aws_sdk_dynamodb::types::AttributeValue::S(c.to_string()),
                )
                .consistent_read(true)
                .send()
                .await
                .unwrap()
                .item()
                .cloned()
                .unwrap()
        }
    };
    let item = raw_item(c.clone()).await;
    assert!(item.contains_key("expires_at_s"));
    assert!(item.contains_key("held_bucket"));
    let paid = store
        .mark_paid(&c, &pay("P1"), ConfirmPath::Webhook, t + 2)
        .await
        .unwrap();
    assert_eq!(paid.status, RecordStatus::Paid);
    let item = raw_item(c).await;
    assert!(!item.contains_key("expires_at_s"));
    assert!(!item.contains_key("held_bucket"));
}

#[tokio::test]
async fn indexes_find_by_payment_and_holds_by_deadline_most_overdue_first() {
    let (_local, a) = provisioned(HOUR, Duration::from_secs(60)).await;
    let store = &a.records;
    let t = now_ms();
    // 40 holds over every bucket, deadlines spread; two paid
    let mut all = Vec::new();
    for i in 0..40u64 {
        let r = held(&format!("c{i}"), &format!("P{i}"), t, 1_000 * (40 - i));
        store.put(r.clone(), Condition::NotExists).await.unwrap();
        all.push(r);
    }
    for r in &all[..2] {
        store
            .mark_paid(&r.candidate, &r.payment_id, ConfirmPath::Callback, t + 1)
            .await
            .unwrap();
    }
    let found = store.by_payment(&pay("P7")).await.unwrap().unwrap();
    assert_eq!(found.candidate, all[7].candidate);
    assert_eq!(store.by_payment(&pay("nope")).await.unwrap(), None);
    let paid = store.by_payment(&pay("P0")).await.unwrap().unwrap();
    assert_eq!(
        paid.status,
        RecordStatus::Paid,
        "the GSI keeps paid records"
    );

    // due before t + 20 s: holds 21..=39 (deadlines t+19s .. t+1s), most overdue first
    let due = store.held_due(t + 20_000, 100).await.unwrap();
    let want: Vec<CandidateHash> = (21..40).rev().map(|i| all[i].candidate.clone()).collect();
    assert_eq!(
        due.iter().map(|r| r.candidate.clone()).collect::<Vec<_>>(),
        want
    );
    assert!(due.windows(2).all(|w| w[0].deadline_ms <= w[1].deadline_ms));
    let top = store.held_due(t + 20_000, 5).await.unwrap();
    assert_eq!(top, due[..5].to_vec());
    // paid records are not in the held index at all
    let every = store.held_due(u64::MAX, 1_000).await.unwrap();
    assert_eq!(every.len(), 38);
    assert!(every.iter().all(|r| r.status == RecordStatus::Held));
    assert!(store.held_due(t, 0).await.unwrap().is_empty());

    let scanned = store.scan_all().await.unwrap();
    assert_eq!(scanned.len(), 40);
    assert!(
        scanned.windows(2).all(|w| w[0].candidate < w[1].candidate),
        "candidate order"
    );
    assert_eq!(store.throttles().await.unwrap().total(), 0);
}

#[tokio::test]
async fn a_missing_table_is_reported_as_such() {
    let (_local, a) = provisioned(HOUR, Duration::from_secs(60)).await;
    let wrong = booking_aws::DynamoRecords::new(a.clients.dynamodb.clone(), "no-such-table");
    let e = wrong.get(&CandidateHash::of("x"), true).await.unwrap_err();
    assert!(
        matches!(&e, RecordError::Unavailable(m) if m.contains("no-such-table") && m.contains("provision")),
        "{e:?}"
    );
}

// Why the Streams endpoint goes through the front: read straight from
// dynoxide, the SDK finds no identity in the lower-case keys, and a TTL
// deletion would look like the application's own.
#[tokio::test]
async fn without_the_front_the_sdk_cannot_see_the_ttl_service() {
    let (local, a) = provisioned(Duration::ZERO, Duration::from_secs(60)).await;
    let t = now_ms();
    a.records
        .put(
            held("gina", "P1", t - 120_000, 60_000),
            Condition::NotExists,
        )
        .await
        .unwrap();
    local.dynoxide.sweep_ttl().await.unwrap();
    let mut direct = local.settings();
    direct.endpoints.dynamodb_streams = Some(local.dynoxide.dynamodb_url.clone());
    let clients = direct.clients().await;
    let stream =
        booking_aws::DynamoStream::connect(&clients.dynamodb, clients.streams, &a.resources.table)
            .await
            .unwrap();
    let records = stream.read(0, 100, Duration::from_secs(5)).await.unwrap();
    let removal = records
        .iter()
        .find(|r| r.kind == StreamKind::Remove)
        .expect("a REMOVE");
    assert!(
        !removal.is_ttl_removal(),
        "if this fails, dynoxide spells userIdentity as the API does: drop the front"
    );
    let front = a.stream().await.unwrap();
    let fixed = front.read(0, 100, Duration::from_secs(5)).await.unwrap();
    assert!(fixed.iter().any(|r| r.is_ttl_removal()));
}
