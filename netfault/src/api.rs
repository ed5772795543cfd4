//! The HTTP API, route for route toxiproxy's (`api.go`): the same paths,
//! methods, status codes and JSON bodies, errors as
//! `{"error": "...", "status": N}`.

use std::net::SocketAddr;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::proxy::{ProxyPatch, ProxySpec};
use crate::toxic::{Toxic, ToxicJson};
use crate::{Netfault, NetfaultError};

/// The version `/version` reports: toxiproxy's whose API this follows, with
/// this crate's as build metadata (clients comparing versions see 2.12.0).
pub const VERSION: &str = concat!("2.12.0+netfault.", env!("CARGO_PKG_VERSION"));

/// An error as toxiproxy answers it.
struct ApiError(NetfaultError);

impl From<NetfaultError> for ApiError {
    fn from(e: NetfaultError) -> ApiError {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.0.status();
        if status >= 500 {
            tracing::warn!(error = %self.0, "request failed");
        }
        let body = json!({"error": self.0.to_string(), "status": status});
        reply(code(status), &body)
    }
}

fn code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

fn reply(status: StatusCode, body: &impl Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            bytes,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

type Answer = Result<Response, ApiError>;

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, NetfaultError> {
    serde_json::from_slice(body).map_err(|e| NetfaultError::BadRequest(e.to_string()))
}

/// The routes, toxiproxy's.
pub(crate) fn router(netfault: Netfault) -> Router {
    Router::new()
        .route("/version", get(version))
        .route("/reset", post(reset))
        .route("/proxies", get(proxy_index).post(proxy_create))
        .route("/populate", post(populate))
        .route(
            "/proxies/{proxy}",
            get(proxy_show)
                .post(proxy_update)
                .patch(proxy_update)
                .delete(proxy_delete),
        )
        .route(
            "/proxies/{proxy}/toxics",
            get(toxic_index).post(toxic_create),
        )
        .route(
            "/proxies/{proxy}/toxics/{toxic}",
            get(toxic_show)
                .post(toxic_update)
                .patch(toxic_update)
                .delete(toxic_delete),
        )
        .layer(middleware::from_fn(stop_browsers))
        .with_state(netfault)
}

/// As toxiproxy: a browser is refused, so that a web page cannot drive the
/// API on a developer's loopback (it could not read the answers, but it
/// could post).
async fn stop_browsers(request: Request, next: Next) -> Response {
    let browser = request
        .headers()
        .get(header::USER_AGENT)
        .and_then(|ua| ua.to_str().ok())
        .is_some_and(|ua| ua.starts_with("Mozilla/"));
    if browser {
        return (StatusCode::FORBIDDEN, "User agent not allowed\n").into_response();
    }
    next.run(request).await
}

async fn version() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json;charset=utf-8"),
        )],
        format!("{{\"version\": \"{VERSION}\"}}\n"),
    )
        .into_response()
}

async fn reset(State(nf): State<Netfault>) -> Answer {
    nf.reset_checked().await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn proxy_index(State(nf): State<Netfault>) -> Answer {
    let by_name: serde_json::Map<String, serde_json::Value> = nf
        .list()
        .into_iter()
        .map(|p| (p.name.clone(), json!(p)))
        .collect();
    Ok(reply(StatusCode::OK, &by_name))
}

async fn proxy_create(State(nf): State<Netfault>, body: Bytes) -> Answer {
    let spec: ProxySpec = parse(&body)?;
    let info = nf.create(spec).await?;
    Ok(reply(StatusCode::CREATED, &info))
}

async fn populate(State(nf): State<Netfault>, body: Bytes) -> Answer {
    let specs: Vec<ProxySpec> = parse(&body)?;
    let (proxies, error) = nf.populate(specs).await;
    Ok(match error {
        None => reply(StatusCode::CREATED, &json!({"proxies": proxies})),
        Some(e) => {
            let status = e.status();
            reply(
                code(status),
                &json!({"error": e.to_string(), "status": status, "proxies": proxies}),
            )
        }
    })
}

async fn proxy_show(State(nf): State<Netfault>, Path(proxy): Path<String>) -> Answer {
    let info = nf.get(&proxy).ok_or(NetfaultError::ProxyNotFound)?;
    Ok(reply(StatusCode::OK, &info))
}

async fn proxy_update(
    State(nf): State<Netfault>,
    Path(proxy): Path<String>,
    body: Bytes,
) -> Answer {
    if nf.get(&proxy).is_none() {
        return Err(NetfaultError::ProxyNotFound.into());
    }
    let patch: ProxyPatch = parse(&body)?;
    Ok(reply(StatusCode::OK, &nf.update(&proxy, patch).await?))
}

async fn proxy_delete(State(nf): State<Netfault>, Path(proxy): Path<String>) -> Answer {
    nf.delete(&proxy).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn toxic_index(State(nf): State<Netfault>, Path(proxy): Path<String>) -> Answer {
    Ok(reply(StatusCode::OK, &nf.toxics(&proxy)?))
}

async fn toxic_create(
    State(nf): State<Netfault>,
    Path(proxy): Path<String>,
    body: Bytes,
) -> Answer {
    if nf.get(&proxy).is_none() {
        return Err(NetfaultError::ProxyNotFound.into());
    }
    let json: ToxicJson = parse(&body)?;
    let toxic = Toxic::try_from(json)?;
    Ok(reply(StatusCode::OK, &nf.add_toxic(&proxy, toxic)?))
}

async fn toxic_show(
    State(nf): State<Netfault>,
    Path((proxy, toxic)): Path<(String, String)>,
) -> Answer {
    Ok(reply(StatusCode::OK, &nf.toxic(&proxy, &toxic)?))
}

async fn toxic_update(
    State(nf): State<Netfault>,
    Path((proxy, toxic)): Path<(String, String)>,
    body: Bytes,
) -> Answer {
    nf.toxic(&proxy, &toxic)?;
    let changes: serde_json::Value = parse(&body)?;
    // the API takes toxiproxy's body only: attributes and toxicity
    let changes = match changes {
        serde_json::Value::Object(mut map) => {
            map.retain(|k, _| k == "attributes" || k == "toxicity");
            serde_json::Value::Object(map)
        }
        other => other,
    };
    Ok(reply(
        StatusCode::OK,
        &nf.update_toxic(&proxy, &toxic, changes)?,
    ))
}

async fn toxic_delete(
    State(nf): State<Netfault>,
    Path((proxy, toxic)): Path<(String, String)>,
) -> Answer {
    nf.remove_toxic(&proxy, &toxic)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Serves the HTTP API of `netfault` on `listen` (port 0: a free port) in
/// a spawned task; answers the bound address and the task (abort it to
/// stop serving). Binds what it is given: a caller that must stay on
/// loopback checks first (the binary does).
pub async fn serve(
    netfault: Netfault,
    listen: SocketAddr,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), NetfaultError> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| NetfaultError::Bind {
            listen: listen.to_string(),
            source,
        })?;
    let addr = listener.local_addr()?;
    let app = netfault.router();
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "the API server stopped");
        }
    });
    tracing::info!(%addr, "netfault API listening");
    Ok((addr, task))
}
