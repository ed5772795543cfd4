//! Every scripted action and selector, the redirect rules, the grant allowance
//! and the `/__mock/` control API, exercised over real sockets.
//!
//! Each test asserts something that would break if the rule it sets up were
//! ignored or misapplied. Timing is only ever bounded from below; every wait is
//! bounded.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::RawQuery;
use mock_gateway::{Config, Running, ScriptSpec};
use parking_lot::Mutex;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::net::TcpListener;

const USERNAME: &str = "sellout";
const PASSWORD: &str = "sellout-password";
const APP_KEY: &str = "sellout-app-key";
const APP_SECRET: &str = "sellout-app-secret";
/// A callback URL nobody listens on: redirects are inspected, not followed.
const NOWHERE: &str = "http://127.0.0.1:9/cb";
/// The longest any test waits for something to happen.
const PATIENCE: Duration = Duration::from_secs(5);

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// A gateway with room for many grants, running `script` (TOML).
async fn gateway(script: &str) -> Running {
    gateway_with(
        Config {
            grant_limit: 100,
            ..Default::default()
        },
        script,
    )
    .await
}

async fn gateway_with(config: Config, script: &str) -> Running {
    let spec = ScriptSpec::from_toml(script).expect("test script parses");
    mock_gateway::start_local(config, spec).await.unwrap()
}

async fn grant(http: &reqwest::Client, base: &str) -> Value {
    let resp = http
        .post(format!("{base}/tokenized/checkout/token/grant"))
        .header("username", USERNAME)
        .header("password", PASSWORD)
        .json(&json!({ "app_key": APP_KEY, "app_secret": APP_SECRET }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    resp.json().await.unwrap()
}

/// A merchant talking to the gateway with a granted token.
struct Merchant {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Merchant {
    async fn connect(gw: &Running) -> Merchant {
        let http = http();
        let granted = grant(&http, &gw.url).await;
        assert_eq!(granted["statusCode"], "0000", "{granted}");
        let token = granted["id_token"].as_str().unwrap().to_owned();
        Merchant {
            http,
            base: gw.url.clone(),
            token,
        }
    }

    fn request(&self, path: &str, body: &Value) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}/tokenized/checkout/{path}", self.base))
            .header("authorization", &self.token)
            .header("x-app-key", APP_KEY)
            .json(body)
    }

    /// A bKash call that must answer HTTP 200 with JSON.
    async fn call(&self, path: &str, body: Value) -> Value {
        let resp = self.request(path, &body).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        resp.json().await.unwrap()
    }

    async fn create(&self, invoice: &str, callback: &str) -> Value {
        self.call(
            "create",
            json!({
                "mode": "0011",
                "payerReference": "01770618575",
                "callbackURL": callback,
                "amount": "500",
                "currency": "BDT",
                "intent": "sale",
                "merchantInvoiceNumber": invoice,
            }),
        )
        .await
    }

    /// Creates a payment that must succeed; returns its ID and `bkashURL`.
    async fn create_ok(&self, invoice: &str, callback: &str) -> (String, String) {
        let created = self.create(invoice, callback).await;
        assert_eq!(created["statusCode"], "0000", "{created}");
        (
            created["paymentID"].as_str().unwrap().to_owned(),
            created["bkashURL"].as_str().unwrap().to_owned(),
        )
    }

    /// Creates a payment and has the payer approve it (redirect not followed).
    async fn authorised(&self, invoice: &str) -> String {
        let (id, url) = self.create_ok(invoice, NOWHERE).await;
        let resp = press(&self.http, &url, "pay").await;
        assert_eq!(resp.status(), StatusCode::FOUND);
        id
    }

    async fn execute(&self, id: &str) -> Value {
        self.call("execute", json!({ "paymentID": id })).await
    }

    async fn status(&self, id: &str) -> Value {
        self.call("payment/status", json!({ "paymentID": id }))
            .await
    }
}

/// The payer presses a button on the checkout page.
async fn press(http: &reqwest::Client, bkash_url: &str, action: &str) -> reqwest::Response {
    http.post(bkash_url)
        .form(&[("action", action)])
        .send()
        .await
        .unwrap()
}

fn location(resp: &reqwest::Response) -> Option<String> {
    resp.headers()
        .get(reqwest::header::LOCATION)
        .map(|v| v.to_str().unwrap().to_owned())
}

fn query_of(url: &str) -> String {
    url::Url::parse(url)
        .unwrap()
        .query()
        .unwrap_or("")
        .to_owned()
}

fn query_value(url: &str, key: &str) -> Option<String> {
    url::Url::parse(url)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

/// A merchant's callback endpoint that records the query of every GET.
struct Callback {
    url: String,
    hits: Arc<Mutex<Vec<String>>>,
}

impl Callback {
    async fn start() -> Callback {
        let hits = Arc::new(Mutex::new(Vec::new()));
        let seen = hits.clone();
        let app = axum::Router::new().route(
            "/cb",
            axum::routing::get(move |RawQuery(q): RawQuery| {
                let seen = seen.clone();
                async move {
                    seen.lock().push(q.unwrap_or_default());
                    "thanks"
                }
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Callback {
            url: format!("http://{addr}/cb"),
            hits,
        }
    }

    fn hits(&self) -> Vec<String> {
        self.hits.lock().clone()
    }
}

/// Polls `done` until it holds, failing the test after [`PATIENCE`].
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn get_json(url: String) -> Value {
    let resp = http().get(url).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    resp.json().await.unwrap()
}

async fn ledger(gw: &Running) -> Value {
    get_json(format!("{}/__mock/ledger", gw.url)).await
}

async fn ledger_payment(gw: &Running, id: &str) -> Value {
    let ledger = ledger(gw).await;
    ledger["payments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["paymentID"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("{id} not in the ledger: {ledger}"))
}

async fn stats(gw: &Running) -> Value {
    get_json(format!("{}/__mock/stats", gw.url)).await
}

async fn rules(gw: &Running) -> Value {
    get_json(format!("{}/__mock/rules", gw.url)).await
}

async fn put_rules(gw: &Running, content_type: &str, body: &str) -> (StatusCode, Value) {
    let resp = http()
        .put(format!("{}/__mock/rules", gw.url))
        .header("content-type", content_type)
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap())
}

/// The names of the rules recorded in the fault journal, in order.
fn fault_rules(ledger: &Value) -> Vec<String> {
    ledger["faults"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap().to_owned())
        .collect()
}

// ---------------------------------------------------------------- fail

#[tokio::test]
async fn fail_with_a_code_answers_it_and_does_not_execute() {
    let gw = gateway(
        r#"
        [[rule]]
        name = "execute-refused"
        op = "execute"
        action = { fail = { code = "2003" } }
        times = 1
        "#,
    )
    .await;
    let m = Merchant::connect(&gw).await;
    let id = m.authorised("INV-FAIL-1").await;

    let answer = m.execute(&id).await; // HTTP 200 asserted by `call`
    assert_eq!(answer["statusCode"], "2003", "{answer}");
    assert!(answer.get("trxID").is_none(), "{answer}");

    let p = ledger_payment(&gw, &id).await;
    assert_eq!(p["state"], "Authorized", "{p}");
    assert!(p["trxID"].is_null(), "{p}");
    assert!(p["executedAt"].is_null(), "{p}");
    // the refused call is still in the payment's ledger, tagged with its rule
    assert_eq!(p["executeCalls"][0]["status_code"], "2003", "{p}");
    assert_eq!(p["executeCalls"][0]["scripted"], "execute-refused", "{p}");
    let status = m.status(&id).await;
    assert_eq!(status["transactionStatus"], "Initiated", "{status}");
    assert!(status.get("trxID").is_none(), "{status}");
    assert_eq!(fault_rules(&ledger(&gw).await), ["execute-refused"]);

    // the budget is spent: the payment can still be executed
    let again = m.execute(&id).await;
    assert_eq!(again["statusCode"], "0000", "{again}");
    assert_eq!(again["transactionStatus"], "Completed");
}

#[tokio::test]
async fn fail_with_an_http_status_answers_that_status() {
    let gw = gateway(
        r#"
        [[rule]]
        op = "create"
        action = { fail = { http = 503 } }
        "#,
    )
    .await;
    let m = Merchant::connect(&gw).await;
    let body = json!({
        "mode": "0011", "payerReference": "p", "callbackURL": NOWHERE, "amount": "500",
        "currency": "BDT", "intent": "sale", "merchantInvoiceNumber": "INV-503",
    });
    let resp = m.request("create", &body).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    let answer: Value = resp.json().await.unwrap();
    assert!(answer.get("paymentID").is_none(), "{answer}");
    assert!(answer.get("statusCode").is_none(), "{answer}");
    assert!(
        ledger(&gw).await["payments"].as_array().unwrap().is_empty(),
        "a refused create made no payment"
    );
}

#[tokio::test]
async fn fail_reset_breaks_the_answer() {
    let gw = gateway(
        r#"
        [[rule]]
        op = "status"
        action = { fail = "reset" }
        times = 1
        "#,
    )
    .await;
    let m = Merchant::connect(&gw).await;
    let (id, _) = m.create_ok("INV-RESET", NOWHERE).await;
    let body = json!({ "paymentID": id });
    let broken = match m.request("payment/status", &body).send().await {
        Err(e) => Some(e),
        Ok(resp) => resp.bytes().await.err(),
    };
    let err = broken.expect("a reset must not give a readable answer");
    assert!(!err.is_timeout(), "a reset, not a timeout: {err}");

    // the next call (budget spent) is answered normally
    let status = m.status(&id).await;
    assert_eq!(status["statusCode"], "0000");
    assert_eq!(status["paymentID"], id.as_str());
}

// ---------------------------------------------------------------- delay, timeout

#[tokio::test]
async fn delay_holds_the_answer_back_and_keeps_it_correct() {
    let gw = gateway(
        r#"
        [[rule]]
        op = "status"
        action = { delay = { ms = 300 } }
        "#,
    )
    .await;
    let m = Merchant::connect(&gw).await;
    let id = m.authorised("INV-DELAY").await;
    let started = Instant::now();
    let status = m.status(&id).await;
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
    assert_eq!(status["statusCode"], "0000", "{status}");
    assert_eq!(status["paymentID"], id.as_str());
    assert_eq!(status["verificationStatus"], "Complete");
}

#[tokio::test]
async fn timeout_that_completes_executes_behind_the_hang() {
    let gw = gateway(
        r#"
        [[rule]]
        name = "hang-but-do-it"
        op = "execute"
        action = { timeout = { complete = true, hang_ms = 3000 } }
        "#,
    )
    .await;
    let m = Merchant::connect(&gw).await;
    let id = m.authorised("INV-HANG-DONE").await;
    let err = m
        .request("execute", &json!({ "paymentID": id }))
        .timeout(Duration::from_millis(500))
        .send()
        .await
        .expect_err("the execute answer hangs past the client's deadline");
    assert!(err.is_timeout(), "{err}");

    let status = m.status(&id).await;
    assert_eq!(status["transactionStatus"], "Completed", "{status}");
    assert!(
        status["trxID"].as_str().is_some_and(|t| !t.is_empty()),
        "{status}"
    );
    let p = ledger_payment(&gw, &id).await;
    assert_eq!(p["executeCalls"][0]["status_code"], "0000", "{p}");
    assert_eq!(p["executeCalls"][0]["scripted"], "hang-but-do-it", "{p}");
}

#[tokio::test]
async fn timeout_without_completion_leaves_the_payment_open() {
    let gw = gateway(
        r#"
        [[rule]]
        op = "execute"
        action = { timeout = { complete = false, hang_ms = 3000 } }
        times = 1
        "#,
    )
    .await;
    let m = Merchant::connect(&gw).await;
    let id = m.authorised("INV-HANG-LOST").await;
    let err = m
        .request("execute", &json!({ "paymentID": id }))
        .timeout(Duration::from_millis(500))
        .send()
        .await
        .expect_err("the execute answer hangs past the client's deadline");
    assert!(err.is_timeout(), "{err}");

    let status = m.status(&id).await;
    assert_ne!(status["transactionStatus"], "Completed", "{status}");
    assert!(status.get("trxID").is_none(), "{status}");

    let executed = m.execute(&id).await;
    assert_eq!(executed["statusCode"], "0000", "{executed}");
    assert_eq!(executed["transactionStatus"], "Completed");
    assert!(executed["trxID"].as_str().is_some());
}

// ---------------------------------------------------------------- cancel

#[tokio::test]
async fn cancel_on_create_cancels_the_new_payment() {
    let gw = gateway(
        r#"
        [[rule]]
        op = "create"
        action = "cancel"
        "#,
    )
    .await;
    let m = Merchant::connect(&gw).await;
    let (id, url) = m.create_ok("INV-CANCEL-C", NOWHERE).await;
    let status = m.status(&id).await;
    assert_eq!(status["transactionStatus"], "Cancelled", "{status}");

    // the payer cannot approve it and the merchant cannot execute it
    let resp = press(&m.http, &url, "pay").await;
    assert_eq!(resp.status(), StatusCode::CONFLICT);
    assert_eq!(resp.headers()["x-bkash-status-code"], "2069");
    let executed = m.execute(&id).await;
    assert_eq!(executed["statusCode"], "2069", "{executed}");
    assert_eq!(ledger_payment(&gw, &id).await["state"], "Cancelled");
}

#[tokio::test]
async fn cancel_on_execute_cancels_instead_of_executing() {
    let gw = gateway(
        r#"
        [[rule]]
        op = "execute"
        action = "cancel"
        "#,
    )
    .await;
    let m = Merchant::connect(&gw).await;
    let id = m.authorised("INV-CANCEL-E").await;
    let executed = m.execute(&id).await;
    assert_eq!(executed["statusCode"], "2069", "{executed}");
    let status = m.status(&id).await;
    assert_eq!(status["transactionStatus"], "Cancelled", "{status}");
    assert!(status.get("trxID").is_none(), "{status}");
}

// ---------------------------------------------------------------- selectors

#[tokio::test]
async fn payment_id_selector_touches_only_that_payment() {
    let gw = gateway("").await;
    let m = Merchant::connect(&gw).await;
    let a = m.authorised("INV-A").await;
    let b = m.authorised("INV-B").await;
    let script = json!({ "rules": [{
        "op": "execute",
        "select": { "payment_id": a },
        "action": { "fail": { "code": "2003" } },
    }]});
    let (status, _) = put_rules(&gw, "application/json", &script.to_string()).await;
    assert_eq!(status, StatusCode::OK);

    assert_eq!(m.execute(&b).await["statusCode"], "0000");
    assert_eq!(m.execute(&a).await["statusCode"], "2003");
    assert_eq!(
        m.execute(&a).await["statusCode"],
        "2003",
        "no budget: every call"
    );
    assert_eq!(m.status(&a).await["transactionStatus"], "Initiated");
    assert_eq!(m.status(&b).await["transactionStatus"], "Completed");
}

#[tokio::test]
async fn invoice_prefix_selector_picks_by_merchant_invoice() {
    let gw = gateway(
        r#"
        [[rule]]
        op = "execute"
        select = { invoice_prefix = "VIP-" }
        action = { fail = { code = "503" } }
        "#,
    )
    .await;
    let m = Merchant::connect(&gw).await;
    let vip1 = m.authorised("VIP-1").await;
    let plain = m.authorised("REG-VIP-2").await;
    let vip3 = m.authorised("VIP-3").await;
    assert_eq!(m.execute(&vip1).await["statusCode"], "503");
    assert_eq!(m.execute(&plain).await["statusCode"], "0000");
    assert_eq!(m.execute(&vip3).await["statusCode"], "503");
}

#[tokio::test]
async fn nth_selector_fires_on_exactly_that_call() {
    let gw = gateway(
        r#"
        [[rule]]
        op = "status"
        select = { nth = 3 }
        action = { fail = { code = "2003" } }
        "#,
    )
    .await;
    let m = Merchant::connect(&gw).await;
    let (id, _) = m.create_ok("INV-NTH", NOWHERE).await;
    let mut codes = Vec::new();
    for _ in 0..5 {
        codes.push(
            m.status(&id).await["statusCode"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert_eq!(codes, ["0000", "0000", "2003", "0000", "0000"]);
}

/// Creates `n` payments in order and executes each without the payer acting:
/// an unpicked payment answers 2056 (not authorised), a picked one 2003.
async fn picked_by_fraction(script: &str, n: usize) -> Vec<usize> {
    let gw = gateway(script).await;
    let m = Merchant::connect(&gw).await;
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        ids.push(m.create_ok(&format!("INV-FR-{i}"), NOWHERE).await.0);
    }
    let mut picked = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let answer = m.execute(id).await;
        match answer["statusCode"].as_str().unwrap() {
            "2003" => picked.push(i),
            "2056" => {}
            other => panic!("payment {i}: unexpected {other}: {answer}"),
        }
    }
    let fired = stats(&gw).await["rules_fired"]["fraction"]
        .as_u64()
        .unwrap();
    assert_eq!(fired as usize, picked.len());
    picked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fraction_selector_is_seeded_and_close_to_p() {
    let script = r#"
        seed = 42
        [[rule]]
        name = "fraction"
        op = "execute"
        select = { fraction = 0.25 }
        action = { fail = { code = "2003" } }
        "#;
    let reseeded = script.replace("seed = 42", "seed = 43");
    let (first, second, other_seed) = tokio::join!(
        picked_by_fraction(script, 200),
        picked_by_fraction(script, 200),
        picked_by_fraction(&reseeded, 200),
    );
    assert_eq!(
        first, second,
        "same seed, same script, same order: same payments"
    );
    assert!(
        (30..=70).contains(&first.len()),
        "{} of 200 picked for p = 0.25",
        first.len()
    );
    assert_ne!(first, other_seed, "another seed picks other payments");
}

#[tokio::test]
async fn times_budget_fires_exactly_that_often() {
    let gw = gateway(
        r#"
        [[rule]]
        name = "three-times"
        op = "status"
        action = { fail = { code = "2003" } }
        times = 3
        "#,
    )
    .await;
    let m = Merchant::connect(&gw).await;
    let (id, _) = m.create_ok("INV-TIMES", NOWHERE).await;
    let mut codes = Vec::new();
    for _ in 0..6 {
        codes.push(
            m.status(&id).await["statusCode"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert_eq!(codes, ["2003", "2003", "2003", "0000", "0000", "0000"]);
    assert_eq!(stats(&gw).await["rules_fired"]["three-times"], 3);
}

// ---------------------------------------------------------------- redirects

#[tokio::test]
async fn redirect_drop_never_reaches_the_merchant() {
    let gw = gateway(
        r#"
        [[rule]]
        name = "lost-redirect"
        op = "redirect"
        action = "drop"
        "#,
    )
    .await;
    let cb = Callback::start().await;
    let m = Merchant::connect(&gw).await;
    let (id, url) = m.create_ok("INV-DROP", &cb.url).await;
    let resp = press(&m.http, &url, "pay").await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(location(&resp), None);
    // nothing may arrive: give a server-side delivery the chance to show up
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(cb.hits().is_empty(), "{:?}", cb.hits());
    // the payer's approval itself stands
    assert_eq!(m.status(&id).await["verificationStatus"], "Complete");
    assert_eq!(fault_rules(&ledger(&gw).await), ["lost-redirect"]);
}

#[tokio::test]
async fn redirect_delay_holds_the_302_back() {
    let gw = gateway(
        r#"
        [[rule]]
        op = "redirect"
        action = { delay = { ms = 300 } }
        "#,
    )
    .await;
    let m = Merchant::connect(&gw).await;
    let (id, url) = m.create_ok("INV-RDELAY", NOWHERE).await;
    let started = Instant::now();
    let resp = press(&m.http, &url, "pay").await;
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
    assert_eq!(resp.status(), StatusCode::FOUND);
    let to = location(&resp).unwrap();
    assert_eq!(query_value(&to, "status").as_deref(), Some("success"));
    assert_eq!(query_value(&to, "paymentID").as_deref(), Some(id.as_str()));
}

#[tokio::test]
async fn redirect_duplicate_replays_the_same_get() {
    let gw = gateway(
        r#"
        [[rule]]
        op = "redirect"
        action = { duplicate = { copies = 1 } }
        "#,
    )
    .await;
    let cb = Callback::start().await;
    let m = Merchant::connect(&gw).await;
    let (id, url) = m.create_ok("INV-DUP", &cb.url).await;
    let resp = press(&m.http, &url, "pay").await;
    assert_eq!(resp.status(), StatusCode::FOUND);
    let to = location(&resp).unwrap();
    // the payer follows the 302
    let followed = m.http.get(&to).send().await.unwrap();
    assert_eq!(followed.status(), StatusCode::OK);
    eventually("the replayed redirect", || cb.hits().len() >= 2).await;
    let expected = query_of(&to);
    assert_eq!(cb.hits(), [expected.clone(), expected]);
    assert_eq!(query_value(&to, "paymentID").as_deref(), Some(id.as_str()));
    // one copy only
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(cb.hits().len(), 2);
}

#[tokio::test]
async fn redirect_forged_status_lies_about_an_authorised_payment() {
    let gw = gateway(
        r#"
        [[rule]]
        op = "redirect"
        action = { forge = { redirect_status = "cancel" } }
        "#,
    )
    .await;
    let m = Merchant::connect(&gw).await;
    let (id, url) = m.create_ok("INV-FORGE", NOWHERE).await;
    let resp = press(&m.http, &url, "pay").await;
    assert_eq!(resp.status(), StatusCode::FOUND);
    let to = location(&resp).unwrap();
    assert_eq!(query_value(&to, "status").as_deref(), Some("cancel"));
    assert_eq!(query_value(&to, "paymentID").as_deref(), Some(id.as_str()));

    let status = m.status(&id).await;
    assert_ne!(status["transactionStatus"], "Cancelled", "{status}");
    assert_eq!(status["verificationStatus"], "Complete", "{status}");
    assert_eq!(ledger_payment(&gw, &id).await["state"], "Authorized");
    assert_eq!(m.execute(&id).await["statusCode"], "0000");
}

// ---------------------------------------------------------------- grants

#[tokio::test]
async fn third_grant_in_the_window_is_refused_without_a_token() {
    let gw = gateway_with(Config::default(), "").await;
    let http = http();
    for _ in 0..2 {
        let ok = grant(&http, &gw.url).await;
        assert_eq!(ok["statusCode"], "0000", "{ok}");
        assert!(ok["id_token"].as_str().is_some());
    }
    let third = grant(&http, &gw.url).await;
    assert_eq!(third["statusCode"], "2081", "{third}");
    assert!(third.get("id_token").is_none(), "{third}");
    assert!(third.get("refresh_token").is_none(), "{third}");
    let s = stats(&gw).await;
    assert_eq!(s["grants"], 2, "{s}");
    assert_eq!(s["refused"]["grant"]["2081"], 1, "{s}");
    assert_eq!(s["grants_in_window"][APP_KEY], 2, "{s}");
}

// ---------------------------------------------------------------- control API

#[tokio::test]
async fn control_put_takes_toml_and_json() {
    let gw = gateway("").await;
    let m = Merchant::connect(&gw).await;
    let (id, _) = m.create_ok("INV-CTL", NOWHERE).await;
    assert_eq!(m.status(&id).await["statusCode"], "0000");

    let toml = r#"
        seed = 11
        [[rule]]
        name = "from-toml"
        op = "status"
        action = { fail = { code = "2003" } }
        "#;
    let (status, live) = put_rules(&gw, "application/toml", toml).await;
    assert_eq!(status, StatusCode::OK, "{live}");
    assert_eq!(live["seed"], 11);
    assert_eq!(live["rule"][0]["name"], "from-toml");
    assert_eq!(rules(&gw).await, live);
    assert_eq!(m.status(&id).await["statusCode"], "2003");

    let json = json!({ "seed": 12, "rules": [{
        "name": "from-json",
        "op": "status",
        "select": "all",
        "action": { "fail": { "code": "503" } },
    }]});
    let (status, live) = put_rules(&gw, "application/json", &json.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{live}");
    assert_eq!(live["seed"], 12);
    assert_eq!(
        live["rule"].as_array().unwrap().len(),
        1,
        "replaced, not added"
    );
    assert_eq!(live["rule"][0]["name"], "from-json");
    assert_eq!(m.status(&id).await["statusCode"], "503");
}

#[tokio::test]
async fn control_refuses_invalid_scripts_and_keeps_the_live_one() {
    let gw = gateway(
        r#"
        seed = 5
        [[rule]]
        name = "keep-me"
        op = "status"
        action = { delay = { ms = 1 } }
        "#,
    )
    .await;
    let before = rules(&gw).await;
    let toml = "application/toml";
    let js = "application/json";
    let bad: [(&str, &str, &str); 9] = [
        (
            toml,
            "[[rule]]\nop = \"execute\"\naction = \"drop\"",
            "does not apply",
        ),
        (
            toml,
            "[[rule]]\nop = \"execute\"\naction = { fail = { code = \"7777\" } }",
            "unknown bKash code",
        ),
        (
            toml,
            "[[rule]]\nop = \"execute\"\naction = { fail = { code = \"0000\" } }",
            "not a failure code",
        ),
        (
            toml,
            "[[rule]]\nop = \"execute\"\nselect = { fraction = 1.5 }\naction = \"cancel\"",
            "within 0..=1",
        ),
        (toml, "this is { not toml", "does not parse"),
        (
            toml,
            "[[rule]]\nop = \"execute\"\nselct = { nth = 1 }\naction = \"cancel\"",
            "does not parse",
        ),
        (
            js,
            r#"{"rules":[{"op":"execute","select":{"fraction":1.5},"action":"cancel"}]}"#,
            "within 0..=1",
        ),
        (
            js,
            r#"{"rules":[{"op":"webhook","action":"cancel"}]}"#,
            "does not apply",
        ),
        (js, "garbage", "does not parse"),
    ];
    for (content_type, body, why) in bad {
        let (status, answer) = put_rules(&gw, content_type, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        let message = answer["error"].as_str().unwrap_or_default();
        assert!(message.contains(why), "{body}: {message:?} lacks {why:?}");
        assert_eq!(rules(&gw).await, before, "{body} changed the script");
    }

    let resp = http()
        .post(format!("{}/__mock/rules", gw.url))
        .json(&json!({ "op": "redirect", "action": { "fail": "reset" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let answer: Value = resp.json().await.unwrap();
    assert!(answer["error"].as_str().unwrap().contains("does not apply"));
    assert_eq!(
        rules(&gw).await,
        before,
        "a bad appended rule changed the script"
    );
}

#[tokio::test]
async fn control_post_appends_and_delete_clears() {
    let gw = gateway(
        r#"
        seed = 9
        [[rule]]
        name = "first"
        op = "status"
        select = { payment_id = "TR-NOBODY" }
        action = { fail = { code = "2003" } }
        "#,
    )
    .await;
    let m = Merchant::connect(&gw).await;
    let (id, _) = m.create_ok("INV-POST", NOWHERE).await;
    assert_eq!(m.status(&id).await["statusCode"], "0000");

    let resp = http()
        .post(format!("{}/__mock/rules", gw.url))
        .json(&json!({
            "name": "appended",
            "op": "status",
            "action": { "fail": { "code": "503" } },
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let live = rules(&gw).await;
    let names: Vec<&str> = live["rule"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["first", "appended"]);
    assert_eq!(live["seed"], 9);
    assert_eq!(m.status(&id).await["statusCode"], "503");

    let resp = http()
        .delete(format!("{}/__mock/rules", gw.url))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
    let live = rules(&gw).await;
    assert!(live["rule"].as_array().unwrap().is_empty(), "{live}");
    assert_eq!(live["seed"], 9, "clearing keeps the seed");
    assert_eq!(m.status(&id).await["statusCode"], "0000");
}

#[tokio::test]
async fn control_ledger_shows_calls_payer_events_and_faults() {
    let gw = gateway(
        r#"
        [[rule]]
        name = "slow-execute"
        op = "execute"
        action = { delay = { ms = 1 } }
        times = 1
        [[rule]]
        name = "second-status-fails"
        op = "status"
        select = { nth = 2 }
        action = { fail = { code = "2003" } }
        "#,
    )
    .await;
    let m = Merchant::connect(&gw).await;
    let id = m.authorised("INV-LEDGER").await;
    assert_eq!(m.execute(&id).await["statusCode"], "0000");
    assert_eq!(m.execute(&id).await["statusCode"], "2117");
    assert_eq!(m.status(&id).await["statusCode"], "0000");
    assert_eq!(m.status(&id).await["statusCode"], "2003");

    let l = ledger(&gw).await;
    let p = &l["payments"][0];
    assert_eq!(p["paymentID"], id.as_str(), "{l}");
    assert_eq!(p["merchantInvoiceNumber"], "INV-LEDGER");
    assert_eq!(p["state"], "Completed");
    let calls = p["executeCalls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{p}");
    assert_eq!(calls[0]["status_code"], "0000");
    assert_eq!(calls[0]["scripted"], "slow-execute");
    assert_eq!(calls[1]["status_code"], "2117");
    assert!(calls[1].get("scripted").is_none(), "{p}");
    let events = p["payerEvents"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{p}");
    assert_eq!(events[0]["action"], "pay");
    assert_eq!(events[0]["status_code"], "0000");

    assert_eq!(fault_rules(&l), ["slow-execute", "second-status-fails"]);
    let faults = l["faults"].as_array().unwrap();
    assert_eq!(faults[0]["op"], "execute");
    assert_eq!(faults[0]["payment_id"], id.as_str());
    assert_eq!(faults[1]["op"], "status");
    assert_eq!(faults[1]["action"], json!({ "fail": { "code": "2003" } }));

    let one = get_json(format!("{}/__mock/ledger/payments/{id}", gw.url)).await;
    assert_eq!(one["paymentID"], id.as_str());
    assert_eq!(one["trxID"], p["trxID"]);
    let missing = http()
        .get(format!("{}/__mock/ledger/payments/TR-NOBODY", gw.url))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn control_stats_and_metrics_count_calls_refusals_and_firings() {
    let gw = gateway(
        r#"
        [[rule]]
        name = "refuse-once"
        op = "execute"
        action = { fail = { code = "2003" } }
        times = 1
        "#,
    )
    .await;
    let m = Merchant::connect(&gw).await;
    let id = m.authorised("INV-STATS").await;
    assert_eq!(m.execute(&id).await["statusCode"], "2003");
    assert_eq!(m.execute(&id).await["statusCode"], "0000");
    assert_eq!(m.status(&id).await["statusCode"], "0000");

    let s = stats(&gw).await;
    assert_eq!(s["calls"]["grant"], 1, "{s}");
    assert_eq!(s["calls"]["create"], 1, "{s}");
    assert_eq!(s["calls"]["execute"], 2, "{s}");
    assert_eq!(s["calls"]["status"], 1, "{s}");
    assert_eq!(s["calls"]["redirect"], 1, "{s}");
    assert_eq!(s["refused"]["execute"]["2003"], 1, "{s}");
    assert_eq!(s["scripted"]["execute"], 1, "{s}");
    assert_eq!(s["grants"], 1, "{s}");
    assert_eq!(s["executed"], 1, "{s}");
    assert_eq!(s["rules_fired"]["refuse-once"], 1, "{s}");
    assert_eq!(s["payments"]["completed"], 1, "{s}");

    let resp = http()
        .get(format!("{}/metrics", gw.url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let text = resp.text().await.unwrap();
    assert!(text.contains("mock_gateway_calls_total"), "{text}");
    assert!(
        text.contains("mock_gateway_calls_total{op=\"execute\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("mock_gateway_refused_total{op=\"execute\",code=\"2003\"} 1"),
        "{text}"
    );
}

#[tokio::test]
async fn control_reset_forgets_payments_tokens_and_rules() {
    let gw = gateway(
        r#"
        [[rule]]
        op = "status"
        action = { fail = { code = "2003" } }
        "#,
    )
    .await;
    let m = Merchant::connect(&gw).await;
    m.create_ok("INV-RESET-1", NOWHERE).await;
    assert_eq!(ledger(&gw).await["payments"].as_array().unwrap().len(), 1);

    let resp = http()
        .post(format!("{}/__mock/reset", gw.url))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
    let l = ledger(&gw).await;
    assert!(l["payments"].as_array().unwrap().is_empty(), "{l}");
    assert!(l["faults"].as_array().unwrap().is_empty(), "{l}");
    assert!(rules(&gw).await["rule"].as_array().unwrap().is_empty());

    let refused = m.create("INV-RESET-2", NOWHERE).await;
    assert_eq!(refused["statusCode"], "2080", "{refused}");
    assert!(refused.get("paymentID").is_none());
    assert!(ledger(&gw).await["payments"].as_array().unwrap().is_empty());

    // a new grant works again
    let fresh = Merchant::connect(&gw).await;
    let (id, _) = fresh.create_ok("INV-RESET-3", NOWHERE).await;
    assert_eq!(fresh.status(&id).await["statusCode"], "0000");
}

#[tokio::test]
async fn appending_a_rule_keeps_the_budgets_of_the_others() {
    let gw = gateway(
        r#"
        [[rule]]
        name = "once"
        op = "status"
        action = { fail = { code = "2003" } }
        times = 1
        "#,
    )
    .await;
    let m = Merchant::connect(&gw).await;
    let (id, _) = m.create_ok("INV-KEEP", NOWHERE).await;
    assert_eq!(m.status(&id).await["statusCode"], "2003");
    assert_eq!(m.status(&id).await["statusCode"], "0000", "budget spent");
    let resp = http()
        .post(format!("{}/__mock/rules", gw.url))
        .json(&json!({"name": "other", "op": "create", "action": {"fail": {"code": "2003"}}, "select": {"invoice_prefix": "NEVER"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        m.status(&id).await["statusCode"],
        "0000",
        "appending must not refill the spent budget"
    );
}

#[tokio::test]
async fn a_caller_without_a_valid_token_is_refused_before_any_rule() {
    let gw = gateway(
        r#"
        [[rule]]
        name = "cancel-all"
        op = "execute"
        action = "cancel"
        "#,
    )
    .await;
    let m = Merchant::connect(&gw).await;
    let id = m.authorised("INV-AUTH").await;
    let intruder = Merchant {
        http: http(),
        base: gw.url.clone(),
        token: "stolen".into(),
    };
    assert_eq!(intruder.execute(&id).await["statusCode"], "2080");
    let p = ledger_payment(&gw, &id).await;
    assert_eq!(
        p["state"], "Authorized",
        "an unauthorised call must not trigger the cancel: {p}"
    );
    assert!(fault_rules(&ledger(&gw).await).is_empty());
}
