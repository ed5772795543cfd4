//! What every handler shares: the ports, the sale, the settings. The type
//! lives in `booking_service::stack`, below HTTP, so the simulator runs the
//! same request path over it.

pub use booking_service::stack::{Stack, WebhookTrust};
