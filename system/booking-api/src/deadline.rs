//! The request deadline (`Settings::request_deadline`, the article's 8 s) as a
//! middleware: a handler still running at the deadline is dropped and the
//! client gets `503 deadline_exceeded` with `Retry-After`, never a 500.
//!
//! The bookings routes enforce the deadline themselves (the request path runs
//! in its own task, so it can undo an admission before the answer even when
//! the client goes away); this layer is for every other route:
//!
//! ```ignore
//! router.layer(axum::middleware::from_fn_with_state(stack.clone(), deadline::request_deadline))
//! ```
//!
//! A handler that is dropped here must leave nothing half done: only wrap
//! handlers whose work is safe to abandon at any await point.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::Stack;
use crate::answers;

/// Runs the rest of the stack under `stack.settings.request_deadline`.
pub async fn request_deadline(
    State(stack): State<Arc<Stack>>,
    request: Request,
    next: Next,
) -> Response {
    match tokio::time::timeout(stack.settings.request_deadline, next.run(request)).await {
        Ok(response) => response,
        Err(_) => answers::deadline_exceeded(),
    }
}
