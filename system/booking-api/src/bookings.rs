//! Placeholder: written next.
use std::sync::Arc;

/// The routes of this module.
pub fn routes() -> axum::Router<Arc<crate::Stack>> {
    axum::Router::new()
}
