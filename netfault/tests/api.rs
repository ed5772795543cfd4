//! The HTTP API as a toxiproxy client sees it: routes, status codes and
//! JSON bodies (toxiproxy's `api.go`), and what the proxies then do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;

use common::{connect, echo_server, round_trip, silent_for};
use netfault::Netfault;
use reqwest::StatusCode;
use serde_json::{Value, json};

struct Api {
    base: String,
    http: reqwest::Client,
    task: tokio::task::JoinHandle<()>,
    nf: Netfault,
}

impl Drop for Api {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Api {
    async fn start() -> Api {
        let nf = Netfault::new();
        let (addr, task) = netfault::serve(nf.clone(), "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        Api {
            base: format!("http://{addr}"),
            http: reqwest::Client::new(),
            task,
            nf,
        }
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, value)
    }

    async fn raw(&self, method: &str, path: &str, body: &'static str) -> (StatusCode, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let response = self
            .http
            .request(method, format!("{}{path}", self.base))
            .body(body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json().await.unwrap())
    }
}

fn error(message: &str, status: u16) -> Value {
    json!({"error": message, "status": status})
}

#[tokio::test]
async fn proxies_are_created_listed_shown_updated_and_deleted() {
    let api = Api::start().await;
    let echo = echo_server().await;
    let upstream = echo.addr.to_string();

    let (status, body) = api.call("GET", "/version", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body["version"].as_str().unwrap().starts_with("2."));

    let spec = json!({"name": "redis", "listen": "127.0.0.1:0", "upstream": upstream});
    let (status, created) = api.call("POST", "/proxies", Some(spec.clone())).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(created["name"], "redis");
    assert_eq!(created["upstream"], upstream.as_str());
    assert_eq!(created["enabled"], true);
    assert_eq!(created["toxics"], json!([]));
    let listen: SocketAddr = created["listen"].as_str().unwrap().parse().unwrap();
    assert_ne!(listen.port(), 0, "the answer has the real port");
    round_trip(&mut connect(listen).await, b"via api").await;

    let (status, body) = api.call("POST", "/proxies", Some(spec)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body, error("proxy already exists", 409));

    let (status, all) = api.call("GET", "/proxies", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(all, json!({"redis": created}));

    let (status, shown) = api.call("GET", "/proxies/redis", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown, created);

    let (status, body) = api.call("GET", "/proxies/nope", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, error("proxy not found", 404));

    // disable (POST, toxiproxy's deprecated form) and enable (PATCH)
    let (status, body) = api
        .call("POST", "/proxies/redis", Some(json!({"enabled": false})))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["enabled"], false);
    assert!(tokio::net::TcpStream::connect(listen).await.is_err());
    let (status, body) = api
        .call("PATCH", "/proxies/redis", Some(json!({"enabled": true})))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["enabled"], true);
    assert_eq!(body["listen"], listen.to_string());
    round_trip(&mut connect(listen).await, b"again").await;

    let (status, body) = api.call("DELETE", "/proxies/redis", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(body, Value::Null);
    let (status, body) = api.call("DELETE", "/proxies/redis", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, error("proxy not found", 404));
    assert!(api.nf.list().is_empty());
}

#[tokio::test]
async fn bad_proxy_input_is_refused_and_changes_nothing() {
    let api = Api::start().await;
    let (status, body) = api
        .call("POST", "/proxies", Some(json!({"name": "x"})))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body, error("missing required field: upstream", 400));

    let (status, body) = api
        .call("POST", "/proxies", Some(json!({"upstream": "127.0.0.1:9"})))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body, error("missing required field: name", 400));

    let (status, body) = api.raw("POST", "/proxies", "{not json").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("bad request body: "),
        "{body}"
    );
    assert_eq!(body["status"], 400);

    let wide = json!({"name": "wide", "listen": "0.0.0.0:0", "upstream": "127.0.0.1:9"});
    let (status, body) = api.call("POST", "/proxies", Some(wide)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(api.nf.list().is_empty());

    // populate checks every proxy before creating any
    let specs = json!([
        {"name": "a", "upstream": "127.0.0.1:9"},
        {"name": "b"}
    ]);
    let (status, body) = api.call("POST", "/populate", Some(specs)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"], "missing required field: upstream at proxy 2");
    assert!(api.nf.list().is_empty());
}

#[tokio::test]
async fn populate_creates_keeps_and_replaces() {
    let api = Api::start().await;
    let specs = json!([
        {"name": "a", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:9"},
        {"name": "b", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:9", "enabled": false}
    ]);
    let (status, body) = api.call("POST", "/populate", Some(specs)).await;
    assert_eq!(status, StatusCode::CREATED);
    let proxies = body["proxies"].as_array().unwrap();
    assert_eq!(proxies.len(), 2);
    assert_eq!(proxies[1]["enabled"], false);
    let a_listen = proxies[0]["listen"].as_str().unwrap().to_owned();

    // the same listen and upstream: kept as it is; another upstream: replaced
    let again = json!([
        {"name": "a", "listen": a_listen, "upstream": "127.0.0.1:9"},
        {"name": "b", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:10"}
    ]);
    let (status, body) = api.call("POST", "/populate", Some(again)).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(body["proxies"][0]["listen"], a_listen.as_str());
    assert_eq!(api.nf.get("b").unwrap().upstream, "127.0.0.1:10");
    assert!(api.nf.get("b").unwrap().enabled);
}

#[tokio::test]
async fn toxics_crud_and_reset() {
    let api = Api::start().await;
    let echo = echo_server().await;
    let (_, created) = api
        .call(
            "POST",
            "/proxies",
            Some(json!({"name": "gw", "upstream": echo.addr.to_string()})),
        )
        .await;
    let listen: SocketAddr = created["listen"].as_str().unwrap().parse().unwrap();

    let latency = json!({"type": "latency", "attributes": {"latency": 200}});
    let (status, toxic) = api
        .call("POST", "/proxies/gw/toxics", Some(latency.clone()))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        toxic,
        json!({"attributes": {"latency": 200, "jitter": 0}, "name": "latency_downstream",
               "type": "latency", "stream": "downstream", "toxicity": 1.0})
    );
    let rtt = round_trip(&mut connect(listen).await, b"slow").await;
    assert!(rtt.as_millis() >= 195, "{rtt:?}");

    let (status, body) = api.call("POST", "/proxies/gw/toxics", Some(latency)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body, error("toxic already exists", 409));

    let bad_type = json!({"type": "lag", "attributes": {}});
    let (status, body) = api.call("POST", "/proxies/gw/toxics", Some(bad_type)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body, error("invalid toxic type", 400));

    let bad_stream = json!({"type": "timeout", "stream": "sideways"});
    let (status, body) = api
        .call("POST", "/proxies/gw/toxics", Some(bad_stream))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body,
        error(
            "stream was invalid, can be either upstream or downstream",
            400
        )
    );

    let bad_attr = json!({"type": "timeout", "attributes": {"timeout": "soon"}});
    let (status, body) = api.call("POST", "/proxies/gw/toxics", Some(bad_attr)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("bad request body")
    );

    let (status, body) = api
        .call(
            "POST",
            "/proxies/nope/toxics",
            Some(json!({"type": "timeout"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, error("proxy not found", 404));
    assert_eq!(
        api.nf.toxics("gw").unwrap().len(),
        1,
        "bad input added a toxic"
    );

    let upstream_cut = json!({"name": "cut", "type": "limit_data", "stream": "upstream",
                              "toxicity": 0.5, "attributes": {"bytes": 5}});
    let (status, _) = api
        .call("POST", "/proxies/gw/toxics", Some(upstream_cut))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, list) = api.call("GET", "/proxies/gw/toxics", None).await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["cut", "latency_downstream"], "upstream ones first");

    let (status, shown) = api.call("GET", "/proxies/gw/toxics/cut", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown["attributes"], json!({"bytes": 5}));
    let (status, body) = api.call("GET", "/proxies/gw/toxics/nope", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, error("toxic not found", 404));

    let change = json!({"attributes": {"bytes": 50}, "toxicity": 1.0});
    let (status, updated) = api
        .call("PATCH", "/proxies/gw/toxics/cut", Some(change))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(updated["attributes"], json!({"bytes": 50}));
    assert_eq!(updated["toxicity"], 1.0);
    assert_eq!(updated["stream"], "upstream");
    let (status, updated) = api
        .call(
            "POST",
            "/proxies/gw/toxics/latency_downstream",
            Some(json!({"attributes": {"jitter": 10}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(updated["attributes"], json!({"latency": 200, "jitter": 10}));
    let (status, _) = api
        .call(
            "PATCH",
            "/proxies/gw/toxics/nope",
            Some(json!({"attributes": {}})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (status, body) = api.call("DELETE", "/proxies/gw/toxics/cut", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(body, Value::Null);
    let (status, body) = api.call("DELETE", "/proxies/gw/toxics/cut", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, error("toxic not found", 404));

    // a blackhole and a disabled proxy, then /reset puts everything right
    api.call(
        "POST",
        "/proxies/gw/toxics",
        Some(json!({"type": "timeout", "attributes": {"timeout": 0}})),
    )
    .await;
    let mut held = connect(listen).await;
    tokio::io::AsyncWriteExt::write_all(&mut held, b"x")
        .await
        .unwrap();
    assert!(silent_for(&mut held, std::time::Duration::from_millis(200)).await);
    api.call("POST", "/proxies/gw", Some(json!({"enabled": false})))
        .await;
    let (status, body) = api.call("POST", "/reset", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(body, Value::Null);
    let (_, shown) = api.call("GET", "/proxies/gw", None).await;
    assert_eq!(shown["enabled"], true);
    assert_eq!(shown["toxics"], json!([]));
    let rtt = round_trip(&mut connect(listen).await, b"fast").await;
    assert!(rtt.as_millis() < 195, "latency survived the reset: {rtt:?}");
}

#[tokio::test]
async fn browsers_are_refused_as_toxiproxy_refuses_them() {
    let api = Api::start().await;
    let response = api
        .http
        .post(format!("{}/proxies", api.base))
        .header("User-Agent", "Mozilla/5.0 (X11; Linux x86_64)")
        .body(r#"{"name":"x","upstream":"127.0.0.1:9"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(api.nf.list().is_empty());
}
