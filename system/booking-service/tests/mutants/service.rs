//! The service's own stack over `common::Stack`'s stores, and a booking made
//! through the request path: what the admission, callback and webhook
//! modules build on.

use std::collections::BTreeMap;
use std::sync::Arc;

use booking::{AdmittedBooking, PaymentGateway, RecordStore, SeededEntropy, Settings};
use booking_embedded::outputs::ObjectSink;
use booking_service::admission::{self, BookAnswer, Quiet};
use booking_service::stack::{Stack as ServiceStack, WebhookTrust};
use tokio::time::Instant;

use crate::common::{Stack, cand};

/// The service stack over `s`'s stores, with `gateway`, `settings`,
/// `records` (the record store the service reads and writes; the stream is
/// always `s.records`) and the public base URL `public_url`.
pub fn stack(
    s: &Stack,
    gateway: Arc<dyn PaymentGateway>,
    settings: Settings,
    records: Arc<dyn RecordStore>,
    public_url: &str,
) -> ServiceStack {
    let clock: Arc<dyn booking::Clock> = Arc::new(s.clock.clone());
    ServiceStack {
        sale: s.sale.clone(),
        prefix: "test".into(),
        settings,
        prices: BTreeMap::from([(s.level.clone(), "500".to_owned())]),
        public_url: public_url.into(),
        ledger: s.ledger.clone(),
        records,
        stream: s.records.clone(),
        queue: s.queue.clone(),
        coordination: s.coordination.clone(),
        gateway,
        mailer: s.mailer.clone(),
        alerts: s.alerts.clone(),
        status_sink: Arc::new(ObjectSink::new(clock.clone())),
        clock,
        entropy: Arc::new(SeededEntropy::new(7)),
        webhook_trust: WebhookTrust {
            cert_urls: sns::CertUrlPolicy::none(),
            topics: sns::TopicPolicy::any(),
        },
    }
}

/// `who` booked through the request path (the copy kept) and the worker's
/// HELD record written.
pub async fn booked(s: &Stack, svc: &ServiceStack, who: &str) -> AdmittedBooking {
    let deadline = Instant::now() + svc.settings.request_deadline;
    let answer = admission::book(svc, &Quiet, &cand(who), &s.level, deadline).await;
    let BookAnswer::Admitted { booking, .. } = answer else {
        panic!("{answer:?}")
    };
    s.records
        .put(booking.held_record(), booking::Condition::NotExists)
        .await
        .unwrap();
    booking
}
