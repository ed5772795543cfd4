//! The queue's limits and default methods, and the output log's default
//! clear, run against tiny in-test backends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;

use booking::notify::{OutputsCleared, StatusWrite};
use booking::queue::{BODY_BYTES_MAX, ID_LEN_MAX, Purged, QueueConfig, VISIBILITY_TIMEOUT_MAX};
use booking::{
    Alert, BookingRecord, CandidateHash, ConfirmPath, Confirmation, Level, Message, NotifyError,
    OutputLog, PaymentId, Queue, QueueDepth, QueueError, ReceiptHandle, Received, SaleId,
    SendOutcome, Settings,
};

#[test]
fn sqs_limits_are_twelve_hours_and_256_kib() {
    assert_eq!(VISIBILITY_TIMEOUT_MAX, Duration::from_secs(43_200));
    assert_eq!(VISIBILITY_TIMEOUT_MAX.as_secs() / 3_600, 12);
    assert_eq!(BODY_BYTES_MAX, 262_144);
    assert_eq!(ID_LEN_MAX, 128);
}

fn ok_message() -> Message {
    Message::admission(&CandidateHash::of("c"), 1, "{}".into())
}

#[test]
fn a_message_exactly_at_each_limit_is_accepted() {
    let at_body_limit = Message {
        body: "x".repeat(BODY_BYTES_MAX),
        ..ok_message()
    };
    assert_eq!(at_body_limit.check(), Ok(()));
    let at_id_limit = Message {
        group_id: "g".repeat(ID_LEN_MAX),
        deduplication_id: "d".repeat(ID_LEN_MAX),
        ..ok_message()
    };
    assert_eq!(at_id_limit.check(), Ok(()));
    let over = Message {
        deduplication_id: "d".repeat(ID_LEN_MAX + 1),
        ..ok_message()
    };
    assert!(matches!(over.check(), Err(QueueError::Invalid(_))));
}

#[test]
fn a_queue_takes_its_numbers_from_the_settings() {
    let settings = Settings {
        visibility_timeout: Duration::from_millis(2_500),
        receives_max: 9,
        deduplication_window: Duration::from_millis(7_000),
        ..Settings::default()
    };
    assert_eq!(
        QueueConfig::from_settings(&settings),
        QueueConfig {
            visibility_timeout: Duration::from_millis(2_500),
            receives_max: 9,
            deduplication_window: Duration::from_millis(7_000),
        }
    );
    assert_eq!(
        QueueConfig::from_settings(&Settings::default()),
        QueueConfig::default()
    );
}

#[test]
fn purged_total_counts_every_kind_of_message() {
    assert_eq!(Purged::default().total(), 0);
    let p = Purged {
        visible: 2,
        in_flight: 3,
        dead_letters: 5,
    };
    assert_eq!(p.total(), 10);
    assert_eq!(
        Purged {
            visible: 0,
            in_flight: 0,
            dead_letters: 4
        }
        .total(),
        4
    );
}

/// A queue with only the required methods: `delete` and
/// `change_visibility` know a set of live receipts and log every call.
#[derive(Debug, Default)]
struct TinyQueue {
    live: Mutex<BTreeSet<String>>,
    calls: Mutex<Vec<String>>,
}

impl TinyQueue {
    fn with(receipts: &[&str]) -> TinyQueue {
        let q = TinyQueue::default();
        q.live.lock().extend(receipts.iter().map(|r| r.to_string()));
        q
    }
}

#[async_trait]
impl Queue for TinyQueue {
    async fn send(&self, _: Message) -> Result<SendOutcome, QueueError> {
        Err(QueueError::Unavailable("not in this fake".into()))
    }
    async fn receive(&self, _: usize, _: Duration) -> Result<Vec<Received>, QueueError> {
        Err(QueueError::Unavailable("not in this fake".into()))
    }
    async fn delete(&self, receipt: &ReceiptHandle) -> Result<(), QueueError> {
        self.calls.lock().push(format!("delete {}", receipt.0));
        if self.live.lock().remove(&receipt.0) {
            Ok(())
        } else {
            Err(QueueError::InvalidReceipt)
        }
    }
    async fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        timeout: Duration,
    ) -> Result<(), QueueError> {
        self.calls
            .lock()
            .push(format!("hide {} {}ms", receipt.0, timeout.as_millis()));
        if self.live.lock().contains(&receipt.0) {
            Ok(())
        } else {
            Err(QueueError::InvalidReceipt)
        }
    }
    async fn oldest_age(&self) -> Result<Option<Duration>, QueueError> {
        Ok(None)
    }
    async fn depth(&self) -> Result<QueueDepth, QueueError> {
        Ok(QueueDepth::default())
    }
    async fn dead_letters(&self) -> Result<Vec<Message>, QueueError> {
        Ok(Vec::new())
    }
}

fn receipts(names: &[&str]) -> Vec<ReceiptHandle> {
    names.iter().map(|n| ReceiptHandle(n.to_string())).collect()
}

#[tokio::test]
async fn delete_batch_answers_each_receipt_in_order() {
    let q = TinyQueue::with(&["r1", "r3"]);
    let answers = q.delete_batch(&receipts(&["r1", "r2", "r3"])).await;
    assert_eq!(
        answers,
        vec![Ok(()), Err(QueueError::InvalidReceipt), Ok(())]
    );
    assert_eq!(*q.calls.lock(), vec!["delete r1", "delete r2", "delete r3"]);
    assert!(q.live.lock().is_empty(), "both live messages deleted");
    assert!(q.delete_batch(&[]).await.is_empty());
}

#[tokio::test]
async fn change_visibility_batch_answers_each_receipt_in_order() {
    let q = TinyQueue::with(&["r2"]);
    let answers = q
        .change_visibility_batch(&receipts(&["r1", "r2"]), Duration::from_millis(1_500))
        .await;
    assert_eq!(answers, vec![Err(QueueError::InvalidReceipt), Ok(())]);
    assert_eq!(*q.calls.lock(), vec!["hide r1 1500ms", "hide r2 1500ms"]);
    assert!(
        q.change_visibility_batch(&[], Duration::ZERO)
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn a_queue_without_its_own_purge_says_it_cannot_purge() {
    let q = TinyQueue::with(&["r1"]);
    assert_eq!(q.purge().await, Ok(None));
    assert_eq!(q.live.lock().len(), 1, "nothing removed");
}

#[derive(Debug)]
struct TinyLog;

#[async_trait]
impl OutputLog for TinyLog {
    async fn sent_mail(&self) -> Result<Vec<Confirmation>, NotifyError> {
        Ok(Vec::new())
    }
    async fn alerts_raised(&self) -> Result<Vec<Alert>, NotifyError> {
        Ok(Vec::new())
    }
    async fn status_writes(&self, _: u64) -> Result<Vec<StatusWrite>, NotifyError> {
        Ok(Vec::new())
    }
}

#[tokio::test]
async fn an_output_log_without_its_own_clear_says_it_cannot_clear() {
    let sale = SaleId::parse("launch").unwrap();
    assert_eq!(TinyLog.clear_sale(&sale).await, Ok(None));
    assert_ne!(
        TinyLog.clear_sale(&sale).await,
        Ok(Some(OutputsCleared::default()))
    );
}

#[test]
fn a_confirmations_message_id_names_the_payment_and_the_sale() {
    let record = BookingRecord::held(
        CandidateHash::of("c"),
        SaleId::parse("launch").unwrap(),
        Level::parse("gold").unwrap(),
        PaymentId::parse("TR0011").unwrap(),
        1,
        2,
    )
    .into_paid(ConfirmPath::Callback, 3);
    let first = Confirmation::of(&record, Some("trx".into()), false);
    let recovered = Confirmation::of(&record, None, true);
    assert_eq!(
        first.message_id("mail.example"),
        "<TR0011.launch@mail.example>"
    );
    assert_eq!(
        recovered.message_id("mail.example"),
        first.message_id("mail.example"),
        "a repeat carries the same id"
    );
    let other = Confirmation {
        payment_id: PaymentId::parse("TR0012").unwrap(),
        ..first.clone()
    };
    assert_ne!(other.message_id("d"), first.message_id("d"));
}
