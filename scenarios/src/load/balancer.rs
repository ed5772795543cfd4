//! The load's view of the booking instances as a load balancer with
//! readiness checks has it: a request to an instance marked down goes to the
//! next live one; a connection error (refused, or the connection dropped
//! before an answer: the instance died) or a `503 draining` (the instance
//! is stopping on SIGTERM and did nothing: [`is_draining`]) marks its
//! instance down and the request is sent again to a live one; a probe of
//! `GET /readyz` every [`PROBE_EVERY`] brings a down instance back once it
//! answers 200 (a draining instance's `/healthz` still answers 200; its
//! `/readyz` does not).
//!
//! Connection errors (and draining refusals with them) are counted apart
//! from server errors, with the moment each was seen
//! ([`super::LiveStats::connection_error`]), so a rehearsal that kills or
//! stops instances can tell the errors its faults caused from any other.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often an instance marked down is probed.
pub const PROBE_EVERY: Duration = Duration::from_millis(100);
/// One probe's time limit.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// The booking instances and which are down.
#[derive(Debug)]
pub struct Balancer {
    bases: Vec<String>,
    down: Vec<AtomicBool>,
}

impl Balancer {
    /// Every instance of `bases` (base URLs) up.
    pub fn new(bases: &[String]) -> Balancer {
        Balancer {
            bases: bases
                .iter()
                .map(|b| b.trim_end_matches('/').to_owned())
                .collect(),
            down: bases.iter().map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// The instances' base URLs.
    pub fn bases(&self) -> &[String] {
        &self.bases
    }

    /// The instance `url` goes to, if it is one of them.
    pub fn instance_of(&self, url: &str) -> Option<usize> {
        self.bases.iter().position(|b| {
            url.strip_prefix(b.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['/', '?']))
        })
    }

    /// Whether instance `i` is marked down.
    pub fn is_down(&self, i: usize) -> bool {
        self.down.get(i).is_some_and(|d| d.load(Ordering::Acquire))
    }

    /// Marks instance `i` down; `true` if it was up.
    pub fn mark_down(&self, i: usize) -> bool {
        self.down
            .get(i)
            .is_some_and(|d| !d.swap(true, Ordering::AcqRel))
    }

    /// Marks instance `i` up; `true` if it was down.
    pub fn mark_up(&self, i: usize) -> bool {
        self.down
            .get(i)
            .is_some_and(|d| d.swap(false, Ordering::AcqRel))
    }

    /// The first live instance from `i` on (wrapping), `i` itself if it is
    /// up; `None` if every instance is down.
    pub fn live_from(&self, i: usize) -> Option<usize> {
        let n = self.bases.len();
        (0..n).map(|k| (i + k) % n).find(|j| !self.is_down(*j))
    }

    /// `url` (on instance `from`) sent to instance `to` instead.
    pub fn rebase(&self, url: &str, from: usize, to: usize) -> String {
        match url.strip_prefix(self.bases[from].as_str()) {
            Some(rest) => format!("{}{rest}", self.bases[to]),
            None => url.to_owned(),
        }
    }

    /// The instances marked down now.
    pub fn down_now(&self) -> Vec<usize> {
        (0..self.bases.len()).filter(|i| self.is_down(*i)).collect()
    }
}

/// Whether a failed request is a connection error: refused, or the
/// connection closed or reset before the whole answer was read (not a
/// timeout: an instance that hangs is not a dead one).
pub fn is_connection_error(e: &goose_reqwest::Error) -> bool {
    use std::io::ErrorKind;
    if e.is_timeout() {
        return false;
    }
    if e.is_connect() || e.is_request() || e.is_body() {
        return true;
    }
    // a body cut short reads as a decode error caused by the connection
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                ErrorKind::UnexpectedEof
                    | ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::BrokenPipe
            )
        {
            return true;
        }
        source = s.source();
    }
    false
}

/// Whether an answer is an instance's refusal while it drains (`503` with
/// the error code `draining`, `booking_api::drain`): nothing was done, and
/// the instance is on its way out.
pub fn is_draining(status: u16, body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Error<'a> {
        #[serde(borrow)]
        error: Option<std::borrow::Cow<'a, str>>,
    }
    status == 503
        && serde_json::from_slice::<Error<'_>>(body)
            .ok()
            .and_then(|e| e.error)
            .is_some_and(|code| code == booking_api::drain::DRAINING)
}

/// The readiness route probed: 200 only while an instance takes traffic.
pub const PROBE_PATH: &str = "/readyz";

/// Probes the instances marked down every [`PROBE_EVERY`] and marks each up
/// once its `GET /readyz` ([`PROBE_PATH`]) answers 200. Runs until dropped.
pub async fn health_checks(balancer: std::sync::Arc<Balancer>, client: goose_reqwest::Client) {
    let mut tick = tokio::time::interval(PROBE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for i in balancer.down_now() {
            let url = format!("{}{PROBE_PATH}", balancer.bases[i]);
            let answered = client
                .get(&url)
                .timeout(PROBE_TIMEOUT)
                .send()
                .await
                .is_ok_and(|r| r.status().as_u16() == 200);
            if answered && balancer.mark_up(i) {
                tracing::info!(instance = i, "health check: instance answers again");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn balancer() -> Balancer {
        Balancer::new(&[
            "http://127.0.0.1:1/".to_owned(),
            "http://127.0.0.1:2".to_owned(),
            "http://127.0.0.1:3".to_owned(),
        ])
    }

    #[test]
    fn urls_are_matched_to_their_instance() {
        let b = balancer();
        assert_eq!(b.instance_of("http://127.0.0.1:1/bookings"), Some(0));
        assert_eq!(
            b.instance_of("http://127.0.0.1:2/payment/callback?paymentID=x"),
            Some(1)
        );
        assert_eq!(b.instance_of("http://127.0.0.1:3"), Some(2));
        assert_eq!(
            b.instance_of("http://127.0.0.1:10/bookings"),
            None,
            "a port prefix is not a match"
        );
        assert_eq!(b.instance_of("http://gw/checkout/1"), None);
    }

    #[tokio::test]
    async fn a_draining_refusal_is_told_from_a_busy_one() {
        // the booking system's own refusal, as it goes on the wire
        let refusal = booking_api::drain::refusal();
        let status = refusal.status().as_u16();
        let body = axum::body::to_bytes(refusal.into_body(), 4096)
            .await
            .unwrap();
        assert!(is_draining(status, &body));
        assert!(!is_draining(503, br#"{"error":"busy","message":"x"}"#));
        assert!(!is_draining(500, br#"{"error":"draining"}"#));
        assert!(!is_draining(503, b"draining"));
        assert!(!is_draining(503, b""));
    }

    /// A listener that answers each connection with `reply` (then closes).
    async fn serving(reply: &'static [u8]) -> String {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(reply).await;
            }
        });
        format!("http://{addr}/")
    }

    #[tokio::test]
    async fn a_dead_instance_is_a_connection_error_and_a_slow_one_is_not() {
        let client = goose_reqwest::Client::builder()
            .timeout(Duration::from_millis(300))
            .build()
            .unwrap();
        let failed = |r: Result<goose_reqwest::Response, goose_reqwest::Error>| r.err().unwrap();
        // nothing listens: refused
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = failed(client.get(format!("http://127.0.0.1:{port}/")).send().await);
        assert!(is_connection_error(&e), "{e:?}");
        // closed before an answer
        let url = serving(b"").await;
        let e = failed(client.get(&url).send().await);
        assert!(is_connection_error(&e), "{e:?}");
        // headers, then the body cut short
        let url = serving(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort").await;
        let r = client.get(&url).send().await.unwrap();
        let e = r.bytes().await.unwrap_err();
        assert!(is_connection_error(&e), "{e:?}");
        // accepted, never answered: a timeout, not a dead instance
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", l.local_addr().unwrap());
        let e = failed(client.get(&url).send().await);
        assert!(e.is_timeout() && !is_connection_error(&e), "{e:?}");
        drop(l);
    }

    #[test]
    fn requests_to_a_down_instance_go_to_the_next_live_one() {
        let b = balancer();
        assert_eq!(b.live_from(1), Some(1));
        assert!(b.mark_down(1));
        assert!(!b.mark_down(1), "already down");
        assert_eq!(b.live_from(1), Some(2));
        assert!(b.mark_down(2));
        assert_eq!(b.live_from(1), Some(0), "wraps");
        assert!(b.mark_down(0));
        assert_eq!(b.live_from(0), None);
        assert_eq!(b.down_now(), vec![0, 1, 2]);
        assert!(b.mark_up(2));
        assert!(!b.mark_up(2));
        assert_eq!(b.live_from(0), Some(2));
        assert_eq!(
            b.rebase("http://127.0.0.1:2/payment/callback?paymentID=x", 1, 2),
            "http://127.0.0.1:3/payment/callback?paymentID=x"
        );
    }
}
