//! The outputs contract suite: what every adapter of the status sink
//! ([`StatusSink`]) and of the output log ([`OutputLog`], with the
//! [`Mailer`] and [`Alerts`] it reads back) must do.
//!
//! Two suites, each a fixture trait and a macro that expands to one
//! `#[tokio::test]` per case:
//!
//! - [`status_sink_contract!`](crate::status_sink_contract) over a [`StatusSinkFixture`]: `get` on an
//!   empty sink is `None`; `put` replaces the whole document (a shorter one
//!   leaves nothing of a longer one); `get` returns the latest; documents
//!   come back byte for byte.
//! - [`output_log_contract!`](crate::output_log_contract) over an [`OutputLogFixture`]: mail, alerts
//!   and status writes read back in order, duplicates kept, every field
//!   whole; status writes stamped with the adapter's clock and filtered
//!   with `since_ms` inclusive; concurrent senders lose nothing.
//!
//! An adapter's test file runs a suite with its fixture expression, which is
//! evaluated afresh in every case (it may `.await`):
//!
//! ```ignore
//! booking_contract::status_sink_contract!(Fixture::start().await);
//! booking_contract::output_log_contract!(Fixture::start().await);
//! ```
//!
//! The calling crate needs `tokio` (with its test macro) as a dev-dependency.

// a case fails the way a test does: by panicking with what went wrong
#![allow(clippy::expect_used)]

use std::sync::Arc;

use async_trait::async_trait;
use booking::notify::{Alert, Alerts, Confirmation, Mailer, OutputLog, StatusSink, StatusWrite};
use booking::{CandidateHash, Level, PaymentId, SaleId};

/// The time every output-log fixture's clock starts at, ms since the epoch.
pub const T0_MS: u64 = 1_700_000_000_000;

/// Confirmations sent concurrently in [`output_log_concurrent_senders_lose_nothing`].
pub const CONCURRENT_SENDS: usize = 64;

/// A status sink under test.
#[async_trait]
pub trait StatusSinkFixture: Send + Sync {
    /// A sink of its own, with no document yet.
    async fn sink(&self) -> Arc<dyn StatusSink>;
}

/// The four output ports of one adapter, sharing one store.
#[derive(Debug, Clone)]
pub struct Outputs {
    /// Sends confirmations.
    pub mailer: Arc<dyn Mailer>,
    /// Raises alerts.
    pub alerts: Arc<dyn Alerts>,
    /// The status document.
    pub status: Arc<dyn StatusSink>,
    /// Reads the three back.
    pub log: Arc<dyn OutputLog>,
}

/// An output log under test, with the clock it stamps status writes with.
#[async_trait]
pub trait OutputLogFixture: Send + Sync {
    /// Outputs of their own, empty, whose status writes are stamped with
    /// the fixture's clock, which starts at [`T0_MS`].
    async fn outputs(&self) -> Outputs;
    /// Moves that clock forward.
    fn advance_ms(&self, ms: u64);
}

/// Runs every case of the status sink suite against `$fixture` (an
/// expression of a type implementing [`StatusSinkFixture`], evaluated in
/// each case).
#[macro_export]
macro_rules! status_sink_contract {
    ($fixture:expr) => {
        $crate::status_sink_contract!(@cases $fixture;
            status_sink_an_empty_sink_has_no_document,
            status_sink_put_replaces_the_whole_document,
            status_sink_get_returns_the_latest_of_many,
            status_sink_documents_come_back_byte_for_byte,
        );
    };
    (@cases $fixture:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let fixture = $fixture;
                $crate::outputs::$case(&fixture).await;
            }
        )+
    };
}

/// Runs every case of the output log suite against `$fixture` (an
/// expression of a type implementing [`OutputLogFixture`], evaluated in each
/// case).
#[macro_export]
macro_rules! output_log_contract {
    ($fixture:expr) => {
        $crate::output_log_contract!(@cases $fixture;
            output_log_starts_empty,
            output_log_mail_in_send_order_with_duplicates,
            output_log_alerts_in_order_with_every_field,
            output_log_status_writes_in_landing_order_with_their_time,
            output_log_status_writes_since_is_inclusive,
            output_log_status_writes_keep_duplicates_and_equal_times,
            output_log_status_writes_byte_for_byte,
            output_log_concurrent_senders_lose_nothing,
        );
    };
    (@cases $fixture:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let fixture = $fixture;
                $crate::outputs::$case(&fixture).await;
            }
        )+
    };
}

/// A confirmation of payment `payment` (trx id only when `trx`).
pub fn confirmation(payment: &str, trx: bool) -> Confirmation {
    Confirmation {
        sale: SaleId::parse("launch").unwrap_or_else(|e| panic!("{e}")),
        candidate: CandidateHash::of(payment),
        level: Level::parse("gold").unwrap_or_else(|e| panic!("{e}")),
        payment_id: PaymentId::parse(payment).unwrap_or_else(|e| panic!("{e}")),
        trx_id: trx.then(|| format!("trx-{payment}")),
        recovered: false,
    }
}

/// An alert of `kind` about `detail`, naming a candidate and a payment when
/// `about` is set.
pub fn alert(kind: &str, detail: &str, about: Option<&str>) -> Alert {
    Alert {
        kind: kind.to_owned(),
        detail: detail.to_owned(),
        candidate: about.map(CandidateHash::of),
        payment_id: about.map(|p| PaymentId::parse(p).unwrap_or_else(|e| panic!("{e}"))),
    }
}

fn write(at_ms: u64, document: &[u8]) -> StatusWrite {
    StatusWrite {
        at_ms,
        document: document.to_vec(),
    }
}

/// A document of `n` levels, as a writer would put it.
fn document(n: usize, taken: u32) -> Vec<u8> {
    let levels: Vec<_> = (0..n)
        .map(|i| serde_json::json!({"level": format!("level-{i}"), "taken": taken, "cap": 100}))
        .collect();
    serde_json::to_vec(&serde_json::json!({"sale": "launch", "levels": levels}))
        .unwrap_or_else(|e| panic!("{e}"))
}

// ------------------------------------------------------------ status sink

/// `get` before any `put` is `None`, not an empty document or an error.
pub async fn status_sink_an_empty_sink_has_no_document(f: &impl StatusSinkFixture) {
    let sink = f.sink().await;
    assert_eq!(sink.get().await.expect("get"), None);
}

/// A `put` replaces the whole document: a shorter one after a longer one
/// leaves no trace of the longer.
pub async fn status_sink_put_replaces_the_whole_document(f: &impl StatusSinkFixture) {
    let sink = f.sink().await;
    let long = document(20, 7);
    let short = document(1, 8);
    assert!(short.len() < long.len());
    sink.put(&long).await.expect("put long");
    assert_eq!(sink.get().await.expect("get").as_deref(), Some(&long[..]));
    sink.put(&short).await.expect("put short");
    assert_eq!(sink.get().await.expect("get").as_deref(), Some(&short[..]));
}

/// After many puts, `get` returns the last one.
pub async fn status_sink_get_returns_the_latest_of_many(f: &impl StatusSinkFixture) {
    let sink = f.sink().await;
    for taken in 0..10 {
        sink.put(&document(3, taken)).await.expect("put");
    }
    assert_eq!(
        sink.get().await.expect("get"),
        Some(document(3, 9)),
        "the last write wins"
    );
}

/// Documents are bytes: separators, NULs and bytes that are not UTF-8 come
/// back unchanged.
pub async fn status_sink_documents_come_back_byte_for_byte(f: &impl StatusSinkFixture) {
    let sink = f.sink().await;
    let odd = b"{\"a\":\"|\"}|\x00\xff\xfe\r\n12|".to_vec();
    sink.put(&odd).await.expect("put");
    assert_eq!(sink.get().await.expect("get"), Some(odd));
}

// ------------------------------------------------------------- output log

/// Fresh outputs read back nothing.
pub async fn output_log_starts_empty(f: &impl OutputLogFixture) {
    let o = f.outputs().await;
    assert!(o.log.sent_mail().await.expect("mail").is_empty());
    assert!(o.log.alerts_raised().await.expect("alerts").is_empty());
    assert!(o.log.status_writes(0).await.expect("writes").is_empty());
    assert_eq!(o.status.get().await.expect("get"), None);
}

/// Every confirmation sent comes back in send order, duplicates kept (the
/// audit's "exactly one email per PAID booking" must find a second one),
/// every field whole.
pub async fn output_log_mail_in_send_order_with_duplicates(f: &impl OutputLogFixture) {
    let o = f.outputs().await;
    let sent = [
        confirmation("TR1", true),
        confirmation("TR2", false),
        confirmation("TR1", true),
        confirmation("TR3", true),
    ];
    for c in &sent {
        o.mailer.send(c).await.expect("send");
    }
    assert_eq!(o.log.sent_mail().await.expect("mail"), sent);
}

/// Alerts come back oldest first, with and without a candidate and payment.
pub async fn output_log_alerts_in_order_with_every_field(f: &impl OutputLogFixture) {
    let o = f.outputs().await;
    let raised = [
        alert("dead_letter", "one", None),
        alert("extensions_exhausted", "two", Some("TR9")),
        alert("dead_letter", "one", None),
    ];
    for a in &raised {
        o.alerts.raise(a.clone()).await.expect("raise");
    }
    assert_eq!(o.log.alerts_raised().await.expect("alerts"), raised);
}

/// Each `put` is one status write, stamped with the adapter's clock, in the
/// order they landed; the sink's current document is the last.
pub async fn output_log_status_writes_in_landing_order_with_their_time(f: &impl OutputLogFixture) {
    let o = f.outputs().await;
    o.status.put(b"one").await.expect("put");
    f.advance_ms(5);
    o.status.put(b"two").await.expect("put");
    f.advance_ms(1_995);
    o.status.put(b"three").await.expect("put");
    assert_eq!(
        o.log.status_writes(0).await.expect("writes"),
        [
            write(T0_MS, b"one"),
            write(T0_MS + 5, b"two"),
            write(T0_MS + 2_000, b"three")
        ]
    );
    assert_eq!(
        o.status.get().await.expect("get").as_deref(),
        Some(&b"three"[..])
    );
}

/// `status_writes(since)` keeps the writes at or after `since`.
pub async fn output_log_status_writes_since_is_inclusive(f: &impl OutputLogFixture) {
    let o = f.outputs().await;
    for (i, document) in [b"a", b"b", b"c"].iter().enumerate() {
        if i > 0 {
            f.advance_ms(10);
        }
        o.status.put(*document).await.expect("put");
    }
    let since = |ms| {
        let log = o.log.clone();
        async move { log.status_writes(ms).await.expect("writes") }
    };
    assert_eq!(since(T0_MS).await.len(), 3);
    assert_eq!(
        since(T0_MS + 10).await,
        [write(T0_MS + 10, b"b"), write(T0_MS + 20, b"c")]
    );
    assert_eq!(since(T0_MS + 11).await, [write(T0_MS + 20, b"c")]);
    assert_eq!(since(T0_MS + 20).await, [write(T0_MS + 20, b"c")]);
    assert!(since(T0_MS + 21).await.is_empty());
}

/// The same document written twice is two writes, and writes in the same
/// millisecond keep their landing order.
pub async fn output_log_status_writes_keep_duplicates_and_equal_times(f: &impl OutputLogFixture) {
    let o = f.outputs().await;
    for document in [&b"x"[..], b"x", b"y", b"x"] {
        o.status.put(document).await.expect("put");
    }
    assert_eq!(
        o.log.status_writes(0).await.expect("writes"),
        [
            write(T0_MS, b"x"),
            write(T0_MS, b"x"),
            write(T0_MS, b"y"),
            write(T0_MS, b"x")
        ]
    );
}

/// A status write's document comes back byte for byte, separators, NULs
/// and non-UTF-8 included.
pub async fn output_log_status_writes_byte_for_byte(f: &impl OutputLogFixture) {
    let o = f.outputs().await;
    let odd = b"12|{\"a\":\"|\"}\x00\xff\n".to_vec();
    o.status.put(&odd).await.expect("put");
    o.status.put(b"").await.expect("put an empty document");
    assert_eq!(
        o.log.status_writes(0).await.expect("writes"),
        [write(T0_MS, &odd), write(T0_MS, b"")]
    );
}

/// [`CONCURRENT_SENDS`] confirmations and as many alerts sent at once all
/// land, each once.
pub async fn output_log_concurrent_senders_lose_nothing(f: &impl OutputLogFixture) {
    let o = f.outputs().await;
    let mut tasks = Vec::new();
    for i in 0..CONCURRENT_SENDS {
        let (mailer, alerts) = (o.mailer.clone(), o.alerts.clone());
        tasks.push(tokio::spawn(async move {
            mailer
                .send(&confirmation(&format!("TR{i}"), true))
                .await
                .expect("send");
            alerts
                .raise(alert("dead_letter", &format!("{i}"), None))
                .await
                .expect("raise");
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let mut mail: Vec<String> = o
        .log
        .sent_mail()
        .await
        .expect("mail")
        .into_iter()
        .map(|c| c.payment_id.as_str().to_owned())
        .collect();
    mail.sort();
    let mut expected: Vec<String> = (0..CONCURRENT_SENDS).map(|i| format!("TR{i}")).collect();
    expected.sort();
    assert_eq!(mail, expected);
    let mut details: Vec<usize> = o
        .log
        .alerts_raised()
        .await
        .expect("alerts")
        .iter()
        .map(|a| a.detail.parse().expect("a number"))
        .collect();
    details.sort_unstable();
    assert_eq!(details, (0..CONCURRENT_SENDS).collect::<Vec<_>>());
}
