//! Counting fronts: a forwarding server in front of a local emulator that
//! counts every call by service and operation, whatever made it
//! (`aws-local --count FILE`). The adapters count their own calls
//! (`booking_aws::calls`, on `/metrics`); a front counts a binary that does
//! not, such as an older build, so two builds are measured the same way.
//!
//! The operation is the `X-Amz-Target` header's (SQS, DynamoDB and Streams
//! speak JSON: `AmazonSQS.SendMessage` → `SendMessage`), or, for S3's REST
//! calls, the method and whether an object or a bucket is named
//! (`PUT object`) ([`operation_of`]).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use booking_aws::AwsCalls;
use tokio::sync::watch;

/// The operation of one call (pure): the part of `X-Amz-Target` after its
/// dot, else S3's method and whether the path names an object (two path
/// segments, path-style) or a bucket.
pub fn operation_of(method: &str, path: &str, target: Option<&str>) -> String {
    if let Some(t) = target {
        return t.rsplit('.').next().unwrap_or(t).to_owned();
    }
    let segments = path.trim_matches('/').split('/').filter(|s| !s.is_empty());
    let what = match segments.count() {
        0 => "service",
        1 => "bucket",
        _ => "object",
    };
    format!("{method} {what}")
}

#[derive(Debug, Clone)]
struct Front {
    service: &'static str,
    upstream: String,
    http: reqwest::Client,
    calls: Arc<AwsCalls>,
}

async fn forward(
    State(front): State<Front>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let target = headers.get("x-amz-target").and_then(|v| v.to_str().ok());
    front.calls.count(
        front.service,
        &operation_of(method.as_str(), uri.path(), target),
    );
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let Ok(m) = reqwest::Method::from_bytes(method.as_str().as_bytes()) else {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    };
    let mut request = front
        .http
        .request(m, format!("{}{path}", front.upstream))
        .body(body);
    for (name, value) in &headers {
        // the signature covers the host the client addressed: keep it
        if name != "content-length" {
            request = request.header(name.as_str(), value.as_bytes());
        }
    }
    let answer = match request.send().await {
        Ok(a) => a,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let (status, out) = relayed_head(&answer);
    match answer.bytes().await {
        Ok(b) => (status, out, b).into_response(),
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}

/// The upstream answer's status and headers as a proxy relays them (the
/// length and transfer encoding are the relaying server's own).
pub(crate) fn relayed_head(answer: &reqwest::Response) -> (StatusCode, HeaderMap) {
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut out = HeaderMap::new();
    for (name, value) in answer.headers() {
        if name == "content-length" || name == "transfer-encoding" {
            continue;
        }
        if let (Ok(n), Ok(v)) = (
            axum::http::HeaderName::from_bytes(name.as_str().as_bytes()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) {
            out.insert(n, v);
        }
    }
    (status, out)
}

/// A running front.
#[derive(Debug)]
pub struct CountingFront {
    /// Where clients go instead of the upstream.
    pub url: String,
    stop: watch::Sender<bool>,
}

impl CountingFront {
    /// A front for `service` (the name its counts go under) forwarding to
    /// `upstream`, counting into `calls`, on a free loopback port.
    pub async fn start(
        service: &'static str,
        upstream: &str,
        calls: Arc<AwsCalls>,
    ) -> std::io::Result<CountingFront> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let front = Front {
            service,
            upstream: upstream.trim_end_matches('/').to_owned(),
            // no redirects: the client sees what the upstream said
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(std::io::Error::other)?,
            calls,
        };
        let app = axum::Router::new().fallback(forward).with_state(front);
        let (stop, mut stopped) = watch::channel(false);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.wait_for(|s| *s).await;
                })
                .await;
        });
        Ok(CountingFront { url, stop })
    }
}

impl Drop for CountingFront {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_come_from_the_target_or_the_s3_path() {
        assert_eq!(
            operation_of("POST", "/", Some("AmazonSQS.SendMessageBatch")),
            "SendMessageBatch"
        );
        assert_eq!(
            operation_of("POST", "/", Some("DynamoDB_20120810.PutItem")),
            "PutItem"
        );
        assert_eq!(
            operation_of("PUT", "/bucket/status.json", None),
            "PUT object"
        );
        assert_eq!(operation_of("HEAD", "/bucket", None), "HEAD bucket");
        assert_eq!(operation_of("GET", "/", None), "GET service");
    }
}
