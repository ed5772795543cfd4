//! What every AWS adapter test starts from: local servers and a freshly
//! provisioned, uniquely named set of resources.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use booking::records::BookingRecord;
use booking::{CandidateHash, Level, PaymentId, SaleId, SystemClock};
use booking_aws::{Adapters, ProvisionOptions, provision};
use booking_aws_local::LocalAws;

/// Local servers (TTL service `ttl_lag` late) and provisioned adapters on
/// them; the queue's visibility timeout is `visibility`.
pub async fn provisioned(ttl_lag: Duration, visibility: Duration) -> (LocalAws, Adapters) {
    let local = LocalAws::start_with(ttl_lag)
        .await
        .expect("local AWS servers");
    let clients = local.settings().clients().await;
    let resources = LocalAws::resources();
    let options = ProvisionOptions {
        visibility_timeout: visibility,
        receives_max: 5,
        allow_unsupported: true,
    };
    provision(&clients, &resources, &options)
        .await
        .expect("provisioned");
    let adapters = Adapters::connect(clients, resources, visibility, Arc::new(SystemClock))
        .await
        .expect("connected");
    (local, adapters)
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A HELD record of candidate `c` with payment `p`, created at `created_ms`,
/// due `hold_ms` later.
pub fn held(c: &str, p: &str, created_ms: u64, hold_ms: u64) -> BookingRecord {
    BookingRecord::held(
        CandidateHash::of(c),
        SaleId::parse("launch").unwrap(),
        Level::parse("gold").unwrap(),
        PaymentId::parse(p).unwrap(),
        created_ms,
        created_ms + hold_ms,
    )
}

pub fn pay(p: &str) -> PaymentId {
    PaymentId::parse(p).unwrap()
}

/// A server on loopback that accepts every connection and never answers:
/// its URL. The connections stay open as long as the runtime runs.
pub async fn black_hole() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    url
}
