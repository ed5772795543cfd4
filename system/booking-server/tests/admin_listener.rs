//! The ops routes are closed by default: served only on the admin listener
//! (loopback unless configured), behind the token when one is set, with
//! every refusal counted on `/metrics`; a production step that changes the
//! sale needs it named; `booking serve` refuses an admin listener off
//! loopback without a token, naming the setting; the `booking` CLI finds
//! the admin address and token in the server's configuration.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use booking_server::config::ServerConfig;
use serde_json::Value;

mod common;
use common::serve_refused;

/// The current token and the one being rotated out.
const CURRENT: &str = "admin-current-0123456789";
const PREVIOUS: &str = "admin-previous-012345678";

/// The fault routes (with `[faults]`): with [`common::SALE_ROUTES`], every
/// admin route.
const FAULT_ROUTES: [(&str, &str); 2] = [("GET", "/ops/faults"), ("POST", "/ops/faults/start")];

struct Running {
    public: String,
    admin: String,
    http: reqwest::Client,
    spawned: booking_server::Spawned,
}

impl Running {
    /// A server built from `config` (its listeners on loopback ports of
    /// their own).
    async fn start(config: ServerConfig) -> Running {
        let spawned = booking_server::Spawned::start(config).await.unwrap();
        Running {
            public: spawned.public.clone(),
            admin: spawned.admin.clone(),
            http: reqwest::Client::new(),
            spawned,
        }
    }

    async fn call(
        &self,
        base: &str,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let url = format!("{base}{path}");
        let mut r = match method {
            "GET" => self.http.get(url),
            _ => self.http.post(url),
        };
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        let resp = r.send().await.unwrap();
        let code = resp.status().as_u16();
        (code, resp.json().await.unwrap_or(Value::Null))
    }

    async fn counters(&self, token: &str) -> Value {
        let bearer = format!("Bearer {token}");
        let (code, v) = self
            .call(
                &self.admin,
                "GET",
                "/ops/counters",
                &[("authorization", &bearer)],
            )
            .await;
        assert_eq!(code, 200, "{v}");
        v
    }

    async fn metrics(&self) -> String {
        common::get_text(&self.http, format!("{}/metrics", self.public)).await
    }

    async fn stop(self) {
        self.spawned.stop().await.expect("server stops");
    }
}

/// The value of the series of `metric` whose line contains `label`.
fn series(text: &str, metric: &str, label: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(metric) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_config_that_names_only_the_sale_no_admin_route_answers_on_the_public_port() {
    let config = ServerConfig::from_toml("sale = \"only-the-sale\"\n").unwrap();
    assert_eq!(
        config.admin_listen.to_string(),
        booking_server::admin_settings::ADMIN_LISTEN_DEFAULT,
        "loopback by default"
    );
    assert!(config.admin_listen.ip().is_loopback());
    let r = Running::start(config).await;
    for (method, path) in common::SALE_ROUTES.into_iter().chain(FAULT_ROUTES) {
        let (code, _) = r.call(&r.public, method, path, &[]).await;
        assert_eq!(code, 404, "{method} {path} on the public listener");
    }
    // the public routes are still there
    assert_eq!(r.call(&r.public, "GET", "/healthz", &[]).await.0, 200);
    // and the admin listener serves the ops routes (loopback, no token set)
    let (code, status) = r.call(&r.admin, "GET", "/ops/status", &[]).await;
    assert_eq!(code, 200, "{status}");
    // a production sale: the steps that change it need it named
    for (path, _) in [
        ("/ops/reset", ()),
        ("/ops/load-candidates", ()),
        ("/ops/close", ()),
    ] {
        let (code, body) = r.call(&r.admin, "POST", path, &[]).await;
        assert_eq!(code, 428, "{path}: {body}");
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("--confirm only-the-sale"),
            "{path}: {body}"
        );
        let (code, _) = r
            .call(
                &r.admin,
                "POST",
                path,
                &[("x-confirm-sale", "another-sale")],
            )
            .await;
        assert_eq!(code, 428, "{path}: another sale named");
    }
    let metrics = r.metrics().await;
    assert_eq!(
        series(&metrics, "booking_admin_refused_total", "unconfirmed"),
        6,
        "{metrics}"
    );
    let confirm = [("x-confirm-sale", "only-the-sale")];
    let (code, body) = r.call(&r.admin, "POST", "/ops/reset", &confirm).await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = r
        .call(&r.admin, "POST", "/ops/load-candidates", &confirm)
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(r.call(&r.admin, "POST", "/ops/open", &[]).await.0, 200);
    // an open sale is not reset: close it first
    let (code, body) = r.call(&r.admin, "POST", "/ops/reset", &confirm).await;
    assert_eq!(code, 409, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("close it first"),
        "{body}"
    );
    let (_, counters) = r.call(&r.admin, "GET", "/ops/counters", &[]).await;
    assert_eq!(
        counters["open"], true,
        "the refused reset changed nothing: {counters}"
    );
    assert_eq!(
        r.call(&r.admin, "POST", "/ops/close", &confirm).await.0,
        200
    );
    assert_eq!(
        r.call(&r.admin, "POST", "/ops/reset", &confirm).await.0,
        200
    );
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_every_admin_route_refuses_without_it_counts_and_changes_nothing() {
    let dir = std::env::temp_dir().join(format!("admin-listener-{:x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tokens");
    // the rotation: the new token first, the old one still accepted
    std::fs::write(&file, format!("{CURRENT}\n{PREVIOUS}\n")).unwrap();
    let config = ServerConfig {
        admin_token_file: Some(file.clone()),
        ..ServerConfig::from_toml("sale = \"tokened\"\nenvironment = \"rehearsal\"\n").unwrap()
    };
    let r = Running::start(config).await;
    let before = r.counters(CURRENT).await;
    let mut missing = 0;
    let mut wrong = 0;
    for (method, path) in common::SALE_ROUTES.into_iter().chain(FAULT_ROUTES) {
        let (code, body) = r.call(&r.admin, method, path, &[]).await;
        assert_eq!(code, 401, "{method} {path} without a token: {body}");
        missing += 1;
        for bad in [
            "Bearer admin-current-0123456780",
            "Bearer not-a-token",
            "Basic YWRtaW46YWRtaW4=",
        ] {
            let (code, _) = r
                .call(&r.admin, method, path, &[("authorization", bad)])
                .await;
            assert_eq!(code, 401, "{method} {path} with {bad:?}");
            if bad.starts_with("Bearer") {
                wrong += 1;
            } else {
                missing += 1;
            }
        }
    }
    // nothing changed: the sale is as it was (not reset, not opened)
    assert_eq!(r.counters(CURRENT).await, before);
    let metrics = r.metrics().await;
    assert_eq!(
        series(
            &metrics,
            "booking_admin_refused_total",
            "reason=\"missing\""
        ),
        missing,
        "{metrics}"
    );
    assert_eq!(
        series(&metrics, "booking_admin_refused_total", "reason=\"wrong\""),
        wrong,
        "{metrics}"
    );
    // the 401 says how to authenticate
    let resp = r
        .http
        .get(format!("{}/ops/status", r.admin))
        .send()
        .await
        .unwrap();
    assert!(
        resp.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer")
    );
    // both tokens of the rotation are accepted
    for token in [CURRENT, PREVIOUS] {
        let bearer = format!("Bearer {token}");
        let (code, body) = r
            .call(
                &r.admin,
                "POST",
                "/ops/reset",
                &[("authorization", &bearer)],
            )
            .await;
        assert_eq!(code, 200, "{body}");
    }
    // no token leaks on the public documents
    for path in ["/metrics", "/status.json", "/openapi.json"] {
        let text = common::get_text(&r.http, format!("{}{path}", r.public)).await;
        assert!(
            !text.contains(CURRENT) && !text.contains(PREVIOUS),
            "{path}"
        );
    }

    // the CLI finds the admin address and the current token in the
    // server's configuration file
    let server_config = dir.join("server.toml");
    let addr = r.admin.trim_start_matches("http://");
    std::fs::write(
        &server_config,
        format!(
            "sale = \"tokened\"\nadmin_listen = \"{addr}\"\nadmin_token_file = \"{}\"\n",
            file.display()
        ),
    )
    .unwrap();
    let out = tokio::task::spawn_blocking({
        let server_config = server_config.clone();
        move || {
            Command::new(env!("CARGO_BIN_EXE_booking"))
                .arg("--server-config")
                .arg(&server_config)
                .arg("status")
                .env_remove("SELLOUT_SERVER")
                .env_remove("SELLOUT_ADMIN_TOKEN")
                .env_remove("SELLOUT_CONFIG")
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(status["counters"].is_object(), "{status}");
    r.stop().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_production_start_with_a_public_admin_listener_and_no_token_refuses_naming_the_setting() {
    let (status, stderr) = serve_refused("sale = \"launch\"\nadmin_listen = \"0.0.0.0:0\"\n");
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("admin_listen = 0.0.0.0:0") && stderr.contains("set admin_token"),
        "{stderr}"
    );
    let (status, stderr) = serve_refused(
        "sale = \"launch\"\nadmin_listen = \"127.0.0.1:0\"\nadmin_token = \"short\"\n",
    );
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("admin_token: an admin token is at least 16 bytes"),
        "{stderr}"
    );
}
