//! Coordination state that lives beside the seat ledger (in Redis in
//! production): locks with owner tokens, short-lived values (the booking copy,
//! the shared gateway token) and once-only latches (the status document's
//! throttle and transitions).
//!
//! Keys come from [`keys`], which puts every key of one sale under the same
//! hash tag so a Redis Cluster serves them from one slot.

use std::time::Duration;

use async_trait::async_trait;

use crate::ids::{Level, PaymentId, SaleId};

/// A coordination backend could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoordinationError {
    /// Unreachable, timed out or failed.
    #[error("coordination backend unavailable: {0}")]
    Unavailable(String),
}

/// Locks, values with a TTL, latches. Every method is one atomic step.
#[async_trait]
pub trait Coordination: Send + Sync + std::fmt::Debug {
    /// Takes `key` for `owner` for `ttl` if nobody holds it (SET NX PX).
    async fn try_lock(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<bool, CoordinationError>;
    /// Releases `key` only if `owner` holds it (compare-and-delete).
    async fn unlock(&self, key: &str, owner: &str) -> Result<bool, CoordinationError>;
    /// Sets the lock's remaining time to `ttl` only if `owner` holds it.
    async fn extend_lock(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<bool, CoordinationError>;
    /// The value at `key`.
    async fn get(&self, key: &str) -> Result<Option<String>, CoordinationError>;
    /// Sets `key` (with a TTL, or for good).
    async fn set(
        &self,
        key: &str,
        value: &str,
        ttl: Option<Duration>,
    ) -> Result<(), CoordinationError>;
    /// Deletes `key`; whether it existed.
    async fn delete(&self, key: &str) -> Result<bool, CoordinationError>;
    /// Sets `key` only if absent (SET NX, optional TTL); whether this call set it.
    async fn set_once(
        &self,
        key: &str,
        value: &str,
        ttl: Option<Duration>,
    ) -> Result<bool, CoordinationError>;
}

/// Key names. `prefix` separates deployments or test runs sharing one server.
pub mod keys {
    use super::*;

    fn sale_key(prefix: &str, sale: &SaleId, rest: &str) -> String {
        format!("{prefix}:{{sale:{sale}}}:{rest}")
    }

    /// The booking copy of a payment (the fast payer's record source).
    pub fn booking_copy(prefix: &str, sale: &SaleId, payment: &PaymentId) -> String {
        sale_key(prefix, sale, &format!("copy:{payment}"))
    }

    /// The per-payment execute lock (at most one execute per payment).
    pub fn execute_lock(prefix: &str, sale: &SaleId, payment: &PaymentId) -> String {
        sale_key(prefix, sale, &format!("execute-lock:{payment}"))
    }

    /// An owed confirmation email's retry state (tries, when the next is
    /// due: `booking_service::outbox`).
    pub fn email_retry(prefix: &str, sale: &SaleId, payment: &PaymentId) -> String {
        sale_key(prefix, sale, &format!("email-retry:{payment}"))
    }

    /// The reconciler's single-leader lock.
    pub fn reconciler_lock(prefix: &str, sale: &SaleId) -> String {
        sale_key(prefix, sale, "reconciler-lock")
    }

    /// The status document's 2 s write throttle.
    pub fn status_throttle(prefix: &str, sale: &SaleId) -> String {
        sale_key(prefix, sale, "status:throttle")
    }

    /// The latch of a level's full transition.
    pub fn level_full_latch(prefix: &str, sale: &SaleId, level: &Level) -> String {
        sale_key(prefix, sale, &format!("status:full:{level}"))
    }

    /// The latch of the sale's closed transition.
    pub fn closed_latch(prefix: &str, sale: &SaleId) -> String {
        sale_key(prefix, sale, "status:closed")
    }

    /// The TTL service's sweep lock (one sweep per interval, fleet-wide).
    pub fn ttl_sweep_lock(prefix: &str, sale: &SaleId) -> String {
        sale_key(prefix, sale, "ttl_sweep")
    }

    /// When the sale was last reset, ms (the audit reads status writes from
    /// then on, whichever instance it runs on).
    pub fn reset_at(prefix: &str, sale: &SaleId) -> String {
        sale_key(prefix, sale, "reset_at_ms")
    }

    /// The lease of a stream handler's one mapping in the fleet.
    pub fn stream_lease(prefix: &str, sale: &SaleId, handler: &str) -> String {
        sale_key(prefix, sale, &format!("stream:{handler}:lease"))
    }

    /// A stream handler's durable checkpoint (the last sequence done).
    pub fn stream_checkpoint(prefix: &str, sale: &SaleId, handler: &str) -> String {
        sale_key(prefix, sale, &format!("stream:{handler}:checkpoint"))
    }

    /// The shared gateway token (fleet-wide, not per sale).
    pub fn gateway_token(prefix: &str) -> String {
        format!("{prefix}:{{gateway}}:token")
    }

    /// The gateway token's refresh lock.
    pub fn gateway_token_lock(prefix: &str) -> String {
        format!("{prefix}:{{gateway}}:token-lock")
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn every_sale_key_shares_one_hash_tag() {
            let sale = SaleId::parse("launch").unwrap();
            let level = Level::parse("gold").unwrap();
            let pay = PaymentId::parse("TR1").unwrap();
            for k in [
                booking_copy("p", &sale, &pay),
                execute_lock("p", &sale, &pay),
                reconciler_lock("p", &sale),
                status_throttle("p", &sale),
                level_full_latch("p", &sale, &level),
                closed_latch("p", &sale),
            ] {
                assert!(k.starts_with("p:{sale:launch}:"), "{k}");
            }
            assert_ne!(gateway_token("p"), gateway_token_lock("p"));
        }
    }
}
