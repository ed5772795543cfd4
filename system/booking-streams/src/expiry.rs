//! The expiry handler ([`booking_service::expiry::ExpiryHandler`]) as a
//! [`BatchHandler`]: it already stops at its first failed release, which is
//! what a partial-batch answer reports.

use async_trait::async_trait;
use booking::records::StreamRecord;
use booking_service::expiry::ExpiryHandler;

use crate::mapping::BatchHandler;

#[async_trait]
impl BatchHandler for ExpiryHandler {
    fn name(&self) -> &'static str {
        "expiry"
    }

    async fn handle_batch(&self, records: &[StreamRecord]) -> Option<u64> {
        ExpiryHandler::handle_batch(self, records).await.failed_at
    }
}
