//! DynamoDB and DynamoDB Streams in process: a dynoxide database served on
//! a free loopback port, a TTL service that runs late, and a front for the
//! Streams API that spells `userIdentity` as the API does.
//!
//! # The `userIdentity` workaround
//!
//! dynoxide writes a TTL deletion's identity in `GetRecords` as Lambda's
//! event does, `{"type", "principalId"}`; the Streams API (and so the SDK's
//! deserializer) spells it `{"Type", "PrincipalId"}`, and the SDK reads
//! nothing from the lower-case keys. The Streams endpoint here is a small
//! front ([`fix_user_identity`]) that forwards every call to dynoxide and
//! renames those two keys in `GetRecords` answers (recomputing the
//! `x-amz-crc32` header of the rewritten body). DynamoDB calls go to
//! dynoxide directly.
//!
//! # A late TTL service
//!
//! DynamoDB deletes expired items late (minutes to days), and the design
//! relies on it: the reconciler, which looks a sweep window ahead, decides
//! first. dynoxide deletes as soon as a sweep runs, so its clock runs
//! `ttl_lag` behind: a sweep deletes what expired `ttl_lag` ago. The same
//! clock stamps stream records, which therefore look `ttl_lag` older than
//! they are: keep `ttl_lag` well below the stream mappings' max record age,
//! or every record is given up as too old (seen: a 1 h lag against the 1 h
//! default age sent every record to the on-failure queue).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use dynoxide::Database;
use dynoxide::storage_backend::clock::Clock;
use tokio::sync::watch;

/// The Streams call whose answer is rewritten.
pub const GET_RECORDS_TARGET: &str = "DynamoDBStreams_20120810.GetRecords";

/// A clock `lag_ms` behind the system's.
#[derive(Debug, Default)]
pub struct LaggingClock {
    lag_ms: AtomicU64,
}

impl LaggingClock {
    /// Sets the lag.
    pub fn set_lag(&self, lag: Duration) {
        self.lag_ms.store(lag.as_millis() as u64, Ordering::Relaxed);
    }

    fn now_ms(&self) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        now.saturating_sub(self.lag_ms.load(Ordering::Relaxed))
    }
}

impl Clock for LaggingClock {
    fn now_unix_secs(&self) -> u64 {
        self.now_ms() / 1_000
    }

    fn now_unix_secs_f64(&self) -> f64 {
        self.now_ms() as f64 / 1_000.0
    }
}

/// Renames `type`/`principalId` to `Type`/`PrincipalId` in every record's
/// `userIdentity` of a `GetRecords` answer. Anything that is not such an
/// answer comes back unchanged.
pub fn fix_user_identity(body: &[u8]) -> Option<Vec<u8>> {
    let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let records = v.get_mut("Records")?.as_array_mut()?;
    let mut changed = false;
    for r in records {
        let Some(identity) = r.get_mut("userIdentity").and_then(|u| u.as_object_mut()) else {
            continue;
        };
        for (from, to) in [("type", "Type"), ("principalId", "PrincipalId")] {
            if let Some(value) = identity.remove(from) {
                identity.insert(to.to_owned(), value);
                changed = true;
            }
        }
    }
    if !changed {
        return None;
    }
    serde_json::to_vec(&v).ok()
}

#[derive(Debug, Clone)]
struct Front {
    upstream: String,
    http: reqwest::Client,
}

async fn forward(State(front): State<Front>, headers: HeaderMap, body: Bytes) -> Response {
    let mut request = front.http.post(&front.upstream).body(body);
    for (name, value) in &headers {
        if name != "host" && name != "content-length" {
            request = request.header(name.as_str(), value.as_bytes());
        }
    }
    let target = headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let answer = match request.send().await {
        Ok(a) => a,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let (status, mut out_headers) = crate::counting::relayed_head(&answer);
    let mut bytes = match answer.bytes().await {
        Ok(b) => b.to_vec(),
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let fixed = (target == GET_RECORDS_TARGET)
        .then(|| fix_user_identity(&bytes))
        .flatten();
    if let Some(fixed) = fixed {
        bytes = fixed;
        if let Ok(v) = HeaderValue::from_str(&crc32fast::hash(&bytes).to_string()) {
            out_headers.insert("x-amz-crc32", v);
        }
    }
    (status, out_headers, bytes).into_response()
}

/// A running dynoxide: DynamoDB on one port, the Streams front on another.
pub struct Dynoxide {
    /// The database (for sweeping by hand).
    pub db: Database,
    /// DynamoDB's endpoint.
    pub dynamodb_url: String,
    /// DynamoDB Streams' endpoint (the front).
    pub streams_url: String,
    clock: Arc<LaggingClock>,
    stop: watch::Sender<bool>,
}

impl std::fmt::Debug for Dynoxide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dynoxide")
            .field("dynamodb_url", &self.dynamodb_url)
            .field("streams_url", &self.streams_url)
            .finish_non_exhaustive()
    }
}

impl Dynoxide {
    /// Starts both servers and a TTL sweep every `sweep_every`, the TTL
    /// service `ttl_lag` late.
    pub async fn start(ttl_lag: Duration, sweep_every: Duration) -> std::io::Result<Dynoxide> {
        let clock = Arc::new(LaggingClock::default());
        clock.set_lag(ttl_lag);
        let db = Database::memory_with_clock(clock.clone())
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let (stop, stopped) = watch::channel(false);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let dynamodb_url = format!("http://{}", listener.local_addr()?);
        let mut rx = stopped.clone();
        let served = db.clone();
        tokio::spawn(async move {
            let shutdown = async move {
                let _ = rx.wait_for(|s| *s).await;
            };
            if let Err(e) = dynoxide::server::serve_with_shutdown(listener, served, shutdown).await
            {
                tracing::error!(error = %e, "dynoxide stopped");
            }
        });
        let front = Front {
            upstream: format!("{dynamodb_url}/"),
            http: reqwest::Client::new(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let streams_url = format!("http://{}", listener.local_addr()?);
        let app = axum::Router::new().fallback(forward).with_state(front);
        let mut rx = stopped.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = rx.wait_for(|s| *s).await;
                })
                .await;
        });
        let sweeper = db.clone();
        let mut rx = stopped;
        tokio::spawn(async move {
            let mut every = tokio::time::interval(sweep_every.max(Duration::from_millis(10)));
            loop {
                tokio::select! {
                    _ = rx.wait_for(|s| *s) => break,
                    _ = every.tick() => {}
                }
                let db = sweeper.clone();
                match tokio::task::spawn_blocking(move || db.sweep_ttl()).await {
                    Ok(Ok(n)) if n > 0 => tracing::info!(deleted = n, "dynoxide TTL sweep"),
                    Ok(Err(e)) => tracing::warn!(error = %e, "dynoxide TTL sweep failed"),
                    _ => {}
                }
            }
        });
        Ok(Dynoxide {
            db,
            dynamodb_url,
            streams_url,
            clock,
            stop,
        })
    }

    /// Changes how late the TTL service is.
    pub fn set_ttl_lag(&self, lag: Duration) {
        self.clock.set_lag(lag);
    }

    /// Runs one TTL sweep now; how many items it deleted.
    pub async fn sweep_ttl(&self) -> Result<usize, String> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || db.sweep_ttl())
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())
    }
}

impl Drop for Dynoxide {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_identity_is_renamed_as_the_api_spells_it() {
        let body = serde_json::json!({"Records": [
            {"eventName": "INSERT", "dynamodb": {}},
            {"eventName": "REMOVE", "dynamodb": {}, "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"}}
        ], "NextShardIterator": "x"});
        let fixed: serde_json::Value = serde_json::from_slice(
            &fix_user_identity(&serde_json::to_vec(&body).unwrap()).unwrap(),
        )
        .unwrap();
        assert_eq!(
            fixed["Records"][1]["userIdentity"],
            serde_json::json!({"Type": "Service", "PrincipalId": "dynamodb.amazonaws.com"})
        );
        assert_eq!(fixed["Records"][0], body["Records"][0]);
        assert_eq!(fixed["NextShardIterator"], "x");
        let clean = serde_json::json!({"Records": [{"eventName": "INSERT"}]});
        assert!(fix_user_identity(&serde_json::to_vec(&clean).unwrap()).is_none());
        assert!(fix_user_identity(b"not json").is_none());
    }

    #[test]
    fn the_lagging_clock_is_behind_by_its_lag() {
        let c = LaggingClock::default();
        let now = c.now_unix_secs();
        c.set_lag(Duration::from_secs(3_600));
        assert!(now - c.now_unix_secs() >= 3_599);
    }
}
