//! Serving an [`axum::Router`] on a listener with limits ([`serve`],
//! [`HttpLimits`]): what `axum::serve` does, plus the bounds a public
//! listener needs against slow and numerous clients.
//!
//! - **Headers** ([`HttpLimits::header_read_timeout`]): a connection whose
//!   request head has not fully arrived this long after the server started
//!   waiting for it is closed. This covers a new connection that sends
//!   nothing or half a head (slowloris) and an idle keep-alive connection
//!   between requests (the wait for the next head starts when the previous
//!   answer is written), so an idle client holds a connection slot for at
//!   most this long.
//! - **Body** ([`HttpLimits::body_timeout`]): a request body that has not
//!   fully arrived this long after its head is cut off; the client gets
//!   `408 {"error": "body_timeout"}` and the connection closes.
//! - **Whole request** ([`HttpLimits::request_timeout`]): a request whose
//!   answer is not ready this long after its head arrived gets
//!   `503 {"error": "request_timeout"}` with `Retry-After`, and the
//!   connection closes. The handler is dropped: the API's own routes finish
//!   well inside (`POST /bookings` runs its own 8 s deadline in its own
//!   task, every other API route runs under the same deadline,
//!   `booking_api::deadline`), so this is the backstop for the rest.
//! - **Connections** ([`HttpLimits::max_connections`]): at most this many
//!   connections are served at once. One beyond is still accepted and
//!   answered `503 {"error": "too_many_connections"}` with `Retry-After` and
//!   `Connection: close`, then closed (a client hears why rather than
//!   waiting in the kernel's backlog); at most [`REFUSALS_IN_FLIGHT_MAX`]
//!   such answers are written at once, and beyond that a connection is
//!   closed at once. The cap is lowered to fit the process's open-file limit
//!   ([`fitted_max_connections`]). What keeps idle half-open clients from
//!   holding the cap is the header timeout: a flood must open
//!   `max_connections / header_read_timeout` connections a second (1,000/s
//!   with the defaults) to keep every slot.
//!
//! Shutdown: once `shutdown` completes the listener is dropped (no new
//! connections), every open connection is told to finish its request in
//! flight and close (idle keep-alive connections close at once), and
//! [`serve`] returns when the last one has. The caller bounds that wait
//! (`run.rs`'s drain grace).
//!
//! Not bounded here: a client that reads the answer slowly. The answers
//! are small JSON documents that fit the socket's send buffer.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::{Bytes, Frame, Incoming};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// [`HttpLimits::header_read_timeout`] by default: a request head (a few
/// hundred bytes) arrives in well under a second from any client; 10 s
/// allows for a slow mobile link and frees a slowloris' slot quickly.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// [`HttpLimits::body_timeout`] by default: the API's bodies are small
/// (`POST /bookings` is a few hundred bytes, refused past its limit), so a
/// body still arriving after 10 s is a slow client holding a slot.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// [`HttpLimits::request_timeout`] by default: well over the API's 8 s
/// request deadline (`Settings::request_deadline`, which answers first),
/// a backstop for anything that does not keep it.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// [`HttpLimits::max_connections`] by default. Each connection is one file
/// descriptor; a container's usual open-file limit is 1,048,576 and a
/// shell's often 1,024 to 20,000, and the instance needs descriptors of its
/// own (Redis and gateway pools, logs): the cap is lowered to fit the limit
/// at start ([`fitted_max_connections`]).
pub const MAX_CONNECTIONS: usize = 10_000;
/// Descriptors kept for everything but the served connections (outbound
/// pools, files, the over-cap refusals) when fitting the cap to the
/// open-file limit.
pub const RESERVED_FDS: u64 = 512;
/// Over-cap connections being answered `503` at once at most; more are
/// closed without an answer (their slots would otherwise be another
/// unbounded set).
pub const REFUSALS_IN_FLIGHT_MAX: usize = 256;
/// How long an over-cap refusal may take (writing the `503`, then reading
/// what the client sent so the close is not a reset that loses the answer).
pub const REFUSAL_TIMEOUT: Duration = Duration::from_secs(1);
/// After an accept error that is not about one connection (out of file
/// descriptors, say), how long the listener waits before accepting again.
pub const ACCEPT_ERROR_PAUSE: Duration = Duration::from_secs(1);

/// The bounds [`serve`] keeps; see the module for each one's meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// A request head must arrive within this of the server waiting for it
    /// (new connections and idle keep-alive ones alike).
    pub header_read_timeout: Duration,
    /// A request body must arrive within this of its head (`408`).
    pub body_timeout: Duration,
    /// An answer must be ready within this of the head (`503`).
    pub request_timeout: Duration,
    /// Connections served at once; more are answered `503` and closed.
    pub max_connections: usize,
}

impl HttpLimits {
    /// The public listener's: [`HEADER_READ_TIMEOUT`], [`BODY_TIMEOUT`],
    /// [`REQUEST_TIMEOUT`], [`MAX_CONNECTIONS`].
    pub const PUBLIC: HttpLimits = HttpLimits {
        header_read_timeout: HEADER_READ_TIMEOUT,
        body_timeout: BODY_TIMEOUT,
        request_timeout: REQUEST_TIMEOUT,
        max_connections: MAX_CONNECTIONS,
    };
    /// An operator's listener (the `/ops/` routes, loopback): the same
    /// header and body bounds, a long whole-request bound (an audit reads
    /// every record and the gateway's ledger; a candidate load writes a
    /// million rows) and few connections.
    pub const ADMIN: HttpLimits = HttpLimits {
        header_read_timeout: HEADER_READ_TIMEOUT,
        body_timeout: Duration::from_secs(120),
        request_timeout: Duration::from_secs(30 * 60),
        max_connections: 64,
    };
}

impl Default for HttpLimits {
    /// [`HttpLimits::PUBLIC`].
    fn default() -> HttpLimits {
        HttpLimits::PUBLIC
    }
}

/// `wanted` lowered, if need be, so that the connections and
/// [`RESERVED_FDS`] fit the process's soft open-file limit (at least 1).
pub fn fitted_max_connections(wanted: usize) -> usize {
    use nix::sys::resource::{Resource, getrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, _)) => {
            let room = soft
                .saturating_sub(RESERVED_FDS + REFUSALS_IN_FLIGHT_MAX as u64)
                .max(1);
            let room = usize::try_from(room).unwrap_or(usize::MAX);
            if wanted > room {
                tracing::warn!(
                    wanted,
                    fitted = room,
                    open_file_limit = soft,
                    "max_connections lowered to fit the open-file limit (raise `ulimit -n`)"
                );
                room
            } else {
                wanted
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "open-file limit unknown; max_connections kept");
            wanted
        }
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` completes,
/// then stops accepting and waits for the open connections to finish
/// (the module's shutdown). Errors only if the listener's address cannot be
/// read; accept errors are logged and waited out.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    let max = fitted_max_connections(limits.max_connections);
    let slots = Arc::new(Semaphore::new(max));
    let refusals = Arc::new(Semaphore::new(REFUSALS_IN_FLIGHT_MAX));
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let service = Limited {
        inner: TowerToHyperService::new(app),
        limits,
    };
    tracing::debug!(%addr, max_connections = max, ?limits, "serving with limits");
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    if !is_connection_error(&e) {
                        tracing::error!(%addr, error = %e, "accept error");
                        tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    }
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            match refusals.clone().try_acquire_owned() {
                Ok(refusal) => {
                    tokio::spawn(async move {
                        refuse(stream).await;
                        drop(refusal);
                    });
                }
                Err(_) => drop(stream),
            }
            tracing::debug!(%peer, max_connections = max, "connection over the cap refused");
            continue;
        };
        let conn = builder.serve_connection(TokioIo::new(stream), service.clone());
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    tracing::debug!(%addr, open = graceful.count(), "listener closed; waiting for open connections");
    graceful.shutdown().await;
    Ok(())
}

/// The over-cap answer, written raw (hyper is not involved: the slot it
/// would need is what is missing).
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\n\
content-length: 32\r\n\
retry-after: 1\r\n\
connection: close\r\n\
\r\n\
{\"error\":\"too_many_connections\"}";

/// Answers an over-cap connection [`REFUSAL`] and closes it, within
/// [`REFUSAL_TIMEOUT`].
async fn refuse(mut stream: TcpStream) {
    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, async {
        stream.write_all(REFUSAL).await?;
        stream.shutdown().await?;
        // read what the client sent (to its end or the timeout): closing
        // with unread bytes would reset the connection and could lose the
        // answer before the client reads it
        let mut sink = [0u8; 4096];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<(), std::io::Error>(())
    })
    .await;
}

/// Errors that concern one connection only (axum's list).
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

/// The app behind the body and whole-request bounds.
#[derive(Debug, Clone)]
struct Limited {
    inner: TowerToHyperService<Router>,
    limits: HttpLimits,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl hyper::service::Service<Request<Incoming>> for Limited {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let late = Arc::new(AtomicBool::new(false));
        let body_timeout = self.limits.body_timeout;
        let flag = late.clone();
        let req = req.map(|body| TimedBody {
            inner: body,
            deadline: tokio::time::Instant::now() + body_timeout,
            timer: None,
            late: flag,
        });
        let answer = hyper::service::Service::call(&self.inner, req);
        let within = self.limits.request_timeout;
        Box::pin(async move {
            let answer = match tokio::time::timeout(within, answer).await {
                Ok(Ok(answer)) => answer,
                Ok(Err(never)) => match never {},
                Err(_) => {
                    tracing::warn!(timeout_ms = within.as_millis() as u64, "request cut off");
                    let mut r = closing(StatusCode::SERVICE_UNAVAILABLE, "request_timeout");
                    r.headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                    return Ok(r);
                }
            };
            if late.load(Ordering::Acquire) {
                tracing::debug!(
                    timeout_ms = body_timeout.as_millis() as u64,
                    "request body too slow"
                );
                return Ok(closing(StatusCode::REQUEST_TIMEOUT, "body_timeout"));
            }
            Ok(answer)
        })
    }
}

/// A `{"error": why}` answer that closes the connection.
fn closing(status: StatusCode, why: &'static str) -> Response<Body> {
    let mut r = Response::new(Body::from(format!("{{\"error\":\"{why}\"}}")));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// A request body that fails once its deadline passes before its end
/// (and says so through `late`, which turns the answer into a `408`).
struct TimedBody {
    inner: Incoming,
    /// When the whole body must have arrived.
    deadline: tokio::time::Instant,
    /// Armed at the first wait for the body (a body already there, or one
    /// never read, costs no timer).
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    late: Arc<AtomicBool>,
}

/// The body did not arrive within [`HttpLimits::body_timeout`].
#[derive(Debug, thiserror::Error)]
#[error("request body not received within the body timeout")]
struct BodyTimedOut;

impl hyper::body::Body for TimedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(BoxError::from)));
        }
        let deadline = self.deadline;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.as_mut().poll(cx).is_ready() {
            self.late.store(true, Ordering::Release);
            return Poll::Ready(Some(Err(Box::new(BodyTimedOut))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_refusal_is_a_whole_http_answer() {
        let text = std::str::from_utf8(REFUSAL).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"], "too_many_connections");
    }

    #[test]
    fn the_cap_fits_the_open_file_limit() {
        let (soft, _) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        let fitted = fitted_max_connections(usize::MAX);
        assert!((fitted as u64) < soft.max(2));
        assert_eq!(fitted_max_connections(10), 10);
    }

    #[test]
    fn the_defaults_keep_their_order() {
        let l = HttpLimits::default();
        assert!(l.header_read_timeout <= l.request_timeout);
        assert!(l.body_timeout <= l.request_timeout);
        // over the API's own request deadline, which must answer first
        assert!(l.request_timeout > booking::settings::REQUEST_DEADLINE);
    }
}
