//! The bKash API over HTTP: every endpoint's success and error answers, the
//! grant limit, token expiry, execute-at-most-once, and bad input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use mock_gateway::payer::{ActResult, Behaviour, Payer};
use mock_gateway::{Config, ManualClock, Running, ScriptSpec};
use serde_json::{Value, json};

const USER: &str = "sellout";
const PASS: &str = "sellout-password";
const KEY: &str = "sellout-app-key";
const SECRET: &str = "sellout-app-secret";

struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    fn new(running: &Running) -> Client {
        Client {
            http: reqwest::Client::new(),
            base: running.url.clone(),
        }
    }

    async fn raw(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<reqwest::Body>,
    ) -> reqwest::Response {
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .body(body)
            .header("content-type", "application/json");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send().await.unwrap()
    }

    async fn post(&self, path: &str, headers: &[(&str, &str)], body: Value) -> Value {
        let resp = self.raw(path, headers, body.to_string()).await;
        assert_eq!(
            resp.status(),
            200,
            "{path} answers HTTP 200, errors included"
        );
        resp.json().await.unwrap()
    }

    async fn grant(&self) -> Value {
        self.post(
            "/tokenized/checkout/token/grant",
            &[("username", USER), ("password", PASS)],
            json!({"app_key": KEY, "app_secret": SECRET}),
        )
        .await
    }

    async fn token(&self) -> String {
        let g = self.grant().await;
        assert_eq!(g["statusCode"], "0000", "{g}");
        g["id_token"].as_str().unwrap().to_owned()
    }

    async fn call(&self, token: &str, op: &str, body: Value) -> Value {
        self.post(
            &format!("/tokenized/checkout/{op}"),
            &[("authorization", token), ("x-app-key", KEY)],
            body,
        )
        .await
    }

    async fn create(&self, token: &str, invoice: &str) -> Value {
        self.call(token, "create", create_body(invoice)).await
    }
}

fn create_body(invoice: &str) -> Value {
    json!({
        "mode": "0011",
        "payerReference": "01770618575",
        "callbackURL": "http://127.0.0.1:9/payment/callback",
        "amount": "500",
        "currency": "BDT",
        "intent": "sale",
        "merchantInvoiceNumber": invoice,
    })
}

async fn gateway(config: Config) -> Running {
    mock_gateway::start_local(config, ScriptSpec::default())
        .await
        .unwrap()
}

fn roomy() -> Config {
    Config {
        grant_limit: 100,
        ..Config::default()
    }
}

async fn pay(url: &str) {
    let payer = Payer::new(std::time::Duration::from_secs(5)).unwrap();
    match payer.act(url, "pay").await.unwrap() {
        ActResult::Redirect(u) => assert!(u.query().unwrap().contains("status=success")),
        other => panic!("pay answered {other:?}"),
    }
}

#[tokio::test]
async fn grant_answers_bkash_token_fields_and_refuses_bad_credentials() {
    let gw = gateway(roomy()).await;
    let c = Client::new(&gw);
    let g = c.grant().await;
    assert_eq!(g["statusCode"], "0000");
    assert_eq!(g["statusMessage"], "Successful");
    assert_eq!(g["token_type"], "Bearer");
    assert_eq!(g["expires_in"], 3600, "expires_in is a number, 3600");
    assert!(g["id_token"].as_str().unwrap().len() >= 32);
    assert!(g["refresh_token"].as_str().is_some());

    let grant_with = |u: &'static str, p: &'static str, body: Value| {
        let c = &c;
        async move {
            c.post(
                "/tokenized/checkout/token/grant",
                &[("username", u), ("password", p)],
                body,
            )
            .await
        }
    };
    let wrong_pass = grant_with(USER, "nope", json!({"app_key": KEY, "app_secret": SECRET})).await;
    assert_eq!(wrong_pass["statusCode"], "2079");
    let wrong_key = grant_with(
        USER,
        PASS,
        json!({"app_key": "other", "app_secret": SECRET}),
    )
    .await;
    assert_eq!(wrong_key["statusCode"], "2001");
    let wrong_secret = grant_with(USER, PASS, json!({"app_key": KEY, "app_secret": "x"})).await;
    assert_eq!(wrong_secret["statusCode"], "2001");
    let missing = grant_with(USER, PASS, json!({"app_key": KEY})).await;
    assert_eq!(missing["statusCode"], "2065");
    let garbage = c
        .raw(
            "/tokenized/checkout/token/grant",
            &[("username", USER), ("password", PASS)],
            "{oops",
        )
        .await;
    assert_eq!(garbage.status(), 200);
    assert_eq!(garbage.json::<Value>().await.unwrap()["statusCode"], "2025");
    for refused in [&wrong_pass, &wrong_key, &missing] {
        assert!(
            refused.get("id_token").is_none(),
            "a refusal carries no token: {refused}"
        );
        assert!(
            refused["statusMessage"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn third_grant_in_the_window_is_refused_but_refresh_is_not_limited() {
    let gw = gateway(Config::default()).await; // the real limit: 2 per hour
    let c = Client::new(&gw);
    let first = c.grant().await;
    assert_eq!(first["statusCode"], "0000");
    assert_eq!(c.grant().await["statusCode"], "0000");
    let third = c.grant().await;
    assert_eq!(third["statusCode"], "2081", "{third}");
    assert!(third.get("id_token").is_none());
    // refresh works without spending the allowance, and the new token is usable
    for _ in 0..3 {
        let r = c
            .post(
                "/tokenized/checkout/token/refresh",
                &[("username", USER), ("password", PASS)],
                json!({"app_key": KEY, "app_secret": SECRET, "refresh_token": first["refresh_token"]}),
            )
            .await;
        assert_eq!(r["statusCode"], "0000", "{r}");
        assert_eq!(r["refresh_token"], first["refresh_token"]);
        let created = c.create(r["id_token"].as_str().unwrap(), "INV-R").await;
        assert_eq!(created["statusCode"], "0000");
    }
    let bad = c
        .post(
            "/tokenized/checkout/token/refresh",
            &[("username", USER), ("password", PASS)],
            json!({"app_key": KEY, "app_secret": SECRET, "refresh_token": "forged"}),
        )
        .await;
    assert_eq!(bad["statusCode"], "2080");
    assert_eq!(gw.app.gateway.metrics.json()["grants"], 2);
    gw.stop().await;
}

#[tokio::test]
async fn tokens_expire_after_an_hour_and_unknown_tokens_are_refused() {
    let clock = ManualClock::new(chrono::Utc::now());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gw = mock_gateway::start(
        listener,
        Config {
            public_url: String::new(),
            ..roomy()
        },
        ScriptSpec::default(),
        None,
        Arc::new(clock.clone()),
    )
    .await
    .unwrap();
    let c = Client::new(&gw);
    let token = c.token().await;
    assert_eq!(c.create(&token, "A").await["statusCode"], "0000");
    assert_eq!(
        c.create(&format!("Bearer {token}"), "A").await["statusCode"],
        "0000",
        "Bearer prefix accepted"
    );
    assert_eq!(c.create("not-a-token", "A").await["statusCode"], "2080");
    assert_eq!(
        c.call(&token, "create", create_body("A")).await["statusCode"],
        "0000"
    );
    let no_key = c
        .post(
            "/tokenized/checkout/create",
            &[("authorization", token.as_str())],
            create_body("A"),
        )
        .await;
    assert_eq!(no_key["statusCode"], "2001");
    let wrong_key = c
        .post(
            "/tokenized/checkout/create",
            &[("authorization", token.as_str()), ("x-app-key", "other")],
            create_body("A"),
        )
        .await;
    assert_eq!(wrong_key["statusCode"], "2001");
    let no_auth = c
        .post(
            "/tokenized/checkout/create",
            &[("x-app-key", KEY)],
            create_body("A"),
        )
        .await;
    assert_eq!(no_auth["statusCode"], "2080");
    clock.advance(chrono::Duration::seconds(3599));
    assert_eq!(
        c.create(&token, "B").await["statusCode"],
        "0000",
        "still valid just before expiry"
    );
    clock.advance(chrono::Duration::seconds(1));
    assert_eq!(
        c.create(&token, "C").await["statusCode"],
        "2080",
        "expired at expires_in"
    );
    gw.stop().await;
}

#[tokio::test]
async fn create_answers_every_field_and_validates_input() {
    let gw = gateway(roomy()).await;
    let c = Client::new(&gw);
    let token = c.token().await;
    let p = c.create(&token, "INV-1").await;
    assert_eq!(p["statusCode"], "0000");
    for field in [
        "paymentID",
        "bkashURL",
        "callbackURL",
        "successCallbackURL",
        "failureCallbackURL",
        "cancelledCallbackURL",
        "amount",
        "currency",
        "intent",
        "merchantInvoiceNumber",
        "paymentCreateTime",
    ] {
        assert!(
            p[field].as_str().is_some_and(|s| !s.is_empty()),
            "{field} missing in {p}"
        );
    }
    assert_eq!(p["transactionStatus"], "Initiated");
    assert_eq!(p["amount"], "500");
    assert_eq!(p["merchantInvoiceNumber"], "INV-1");
    let created =
        mock_gateway::wire::parse_api_time(p["paymentCreateTime"].as_str().unwrap()).unwrap();
    assert!(
        (chrono::Utc::now() - created).num_seconds().abs() < 60,
        "bKash time format, Dhaka time"
    );
    let id = p["paymentID"].as_str().unwrap();
    let success = url::Url::parse(p["successCallbackURL"].as_str().unwrap()).unwrap();
    let q: std::collections::HashMap<_, _> = success.query_pairs().into_owned().collect();
    assert_eq!(q["paymentID"], id);
    assert_eq!(q["status"], "success");
    assert_eq!(
        q["signature"],
        gw.app.gateway.payment(id).unwrap().signature
    );
    assert!(
        p["cancelledCallbackURL"]
            .as_str()
            .unwrap()
            .contains("status=cancel")
    );
    assert!(
        p["failureCallbackURL"]
            .as_str()
            .unwrap()
            .contains("status=failure")
    );
    // a number amount, as some clients send
    let mut numeric = create_body("INV-2");
    numeric["amount"] = json!(12.5);
    let n = c.call(&token, "create", numeric).await;
    assert_eq!(n["amount"], "12.50");

    let mut bad = Vec::new();
    for (field, value, code) in [
        ("amount", json!("0"), "2006"),
        ("amount", json!("-3"), "2006"),
        ("amount", json!("5.555"), "2006"),
        ("amount", json!("ten"), "2006"),
        ("currency", json!("USD"), "2007"),
        ("intent", json!("authorization"), "2008"),
        ("mode", json!("0001"), "2064"),
        ("mode", json!("42"), "2063"),
        ("callbackURL", json!("ftp://x/cb"), "2049"),
        ("merchantInvoiceNumber", json!("x".repeat(256)), "2031"),
    ] {
        let mut body = create_body("INV-X");
        body[field] = value.clone();
        let answer = c.call(&token, "create", body).await;
        if answer["statusCode"] != code {
            bad.push(format!("{field}={value}: {answer}"));
        }
    }
    for field in [
        "mode",
        "callbackURL",
        "amount",
        "currency",
        "intent",
        "merchantInvoiceNumber",
    ] {
        let mut body = create_body("INV-X");
        body.as_object_mut().unwrap().remove(field);
        let answer = c.call(&token, "create", body).await;
        if answer["statusCode"] != "2065" {
            bad.push(format!("missing {field}: {answer}"));
        }
    }
    assert!(bad.is_empty(), "wrong codes:\n{}", bad.join("\n"));
    let before = gw.app.gateway.payments().len();
    assert_eq!(before, 2, "refused creates leave no payment");
    gw.stop().await;
}

#[tokio::test]
async fn execute_needs_the_payer_and_succeeds_once() {
    let gw = gateway(roomy()).await;
    let c = Client::new(&gw);
    let token = c.token().await;
    let p = c.create(&token, "INV-E").await;
    let id = p["paymentID"].as_str().unwrap();
    let early = c.call(&token, "execute", json!({"paymentID": id})).await;
    assert_eq!(
        early["statusCode"], "2056",
        "not yet authorised by the payer"
    );
    pay(p["bkashURL"].as_str().unwrap()).await;
    let status = c
        .call(&token, "payment/status", json!({"paymentID": id}))
        .await;
    assert_eq!(status["transactionStatus"], "Initiated");
    assert_eq!(status["verificationStatus"], "Complete");
    let done = c.call(&token, "execute", json!({"paymentID": id})).await;
    assert_eq!(done["statusCode"], "0000", "{done}");
    assert_eq!(done["transactionStatus"], "Completed");
    assert_eq!(done["paymentID"], id);
    assert_eq!(done["merchantInvoiceNumber"], "INV-E");
    assert_eq!(done["amount"], "500");
    assert_eq!(done["customerMsisdn"], "01770618575");
    assert!(done["paymentExecuteTime"].as_str().is_some());
    let trx = done["trxID"].as_str().unwrap().to_owned();
    let again = c.call(&token, "execute", json!({"paymentID": id})).await;
    assert_eq!(again["statusCode"], "2117");
    assert!(again.get("trxID").is_none());
    let unknown = c
        .call(&token, "execute", json!({"paymentID": "TR0011NOPE"}))
        .await;
    assert_eq!(unknown["statusCode"], "2002");
    let missing = c.call(&token, "execute", json!({})).await;
    assert_eq!(missing["statusCode"], "2065");

    let status = c
        .call(&token, "payment/status", json!({"paymentID": id}))
        .await;
    assert_eq!(status["statusCode"], "0000");
    assert_eq!(status["transactionStatus"], "Completed");
    assert_eq!(status["trxID"], trx.as_str());
    assert_eq!(status["merchantInvoice"], "INV-E");
    assert_eq!(status["verificationStatus"], "Complete");
    assert_eq!(status["mode"], "0011");
    let ledger = gw.app.gateway.payment(id).unwrap();
    let codes: Vec<_> = ledger
        .execute_calls
        .iter()
        .map(|e| e.status_code.as_str())
        .collect();
    assert_eq!(
        codes,
        ["2056", "0000", "2117"],
        "the ledger keeps every execute call"
    );
    gw.stop().await;
}

#[tokio::test]
async fn concurrent_executes_complete_a_payment_exactly_once() {
    let gw = gateway(roomy()).await;
    let c = Arc::new(Client::new(&gw));
    let token = c.token().await;
    for round in 0..10 {
        let p = c.create(&token, &format!("INV-C{round}")).await;
        let id = p["paymentID"].as_str().unwrap().to_owned();
        pay(p["bkashURL"].as_str().unwrap()).await;
        let calls = (0..16).map(|_| {
            let c = c.clone();
            let token = token.clone();
            let id = id.clone();
            tokio::spawn(async move { c.call(&token, "execute", json!({"paymentID": id})).await })
        });
        let answers: Vec<Value> = futures_util::future::join_all(calls)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let ok: Vec<_> = answers
            .iter()
            .filter(|a| a["statusCode"] == "0000")
            .collect();
        assert_eq!(ok.len(), 1, "exactly one execute wins: {answers:?}");
        assert!(
            answers
                .iter()
                .filter(|a| a["statusCode"] != "0000")
                .all(|a| a["statusCode"] == "2117")
        );
    }
    assert_eq!(gw.app.gateway.metrics.json()["executed"], 10);
    gw.stop().await;
}

#[tokio::test]
async fn cancelled_and_failed_payments_are_refused() {
    let gw = gateway(roomy()).await;
    let c = Client::new(&gw);
    let token = c.token().await;
    let payer = Payer::new(std::time::Duration::from_secs(5)).unwrap();
    let cancelled = c.create(&token, "INV-X1").await;
    let run = payer
        .run(cancelled["bkashURL"].as_str().unwrap(), &Behaviour::Cancel)
        .await
        .unwrap();
    match &run.actions[0] {
        ActResult::Redirect(u) => assert!(u.query().unwrap().contains("status=cancel")),
        other => panic!("{other:?}"),
    }
    let id = cancelled["paymentID"].as_str().unwrap();
    assert_eq!(
        c.call(&token, "execute", json!({"paymentID": id})).await["statusCode"],
        "2069"
    );
    assert_eq!(
        c.call(&token, "payment/status", json!({"paymentID": id}))
            .await["transactionStatus"],
        "Cancelled"
    );
    // the payer cannot pay a cancelled payment
    match payer
        .act(cancelled["bkashURL"].as_str().unwrap(), "pay")
        .await
        .unwrap()
    {
        ActResult::Refused { http: 409, code } => assert_eq!(code.as_deref(), Some("2069")),
        other => panic!("{other:?}"),
    }
    let failed = c.create(&token, "INV-X2").await;
    payer
        .run(failed["bkashURL"].as_str().unwrap(), &Behaviour::Fail)
        .await
        .unwrap();
    let fid = failed["paymentID"].as_str().unwrap();
    assert_eq!(
        c.call(&token, "execute", json!({"paymentID": fid})).await["statusCode"],
        "2056"
    );
    assert_eq!(
        c.call(&token, "payment/status", json!({"paymentID": fid}))
            .await["transactionStatus"],
        "Failed"
    );
    gw.stop().await;
}

#[tokio::test]
async fn search_and_refund() {
    let gw = gateway(roomy()).await;
    let c = Client::new(&gw);
    let token = c.token().await;
    let p = c.create(&token, "INV-S").await;
    let id = p["paymentID"].as_str().unwrap();
    pay(p["bkashURL"].as_str().unwrap()).await;
    let trx = c.call(&token, "execute", json!({"paymentID": id})).await["trxID"]
        .as_str()
        .unwrap()
        .to_owned();
    let found = c
        .call(&token, "general/searchTransaction", json!({"trxID": trx}))
        .await;
    assert_eq!(found["statusCode"], "0000");
    assert_eq!(found["trxID"], trx.as_str());
    assert_eq!(found["transactionStatus"], "Completed");
    assert_eq!(found["amount"], "500");
    for field in [
        "initiationTime",
        "completedTime",
        "transactionType",
        "customerMsisdn",
        "organizationShortCode",
    ] {
        assert!(found[field].as_str().is_some(), "{field} in {found}");
    }
    assert_eq!(
        c.call(
            &token,
            "general/searchTransaction",
            json!({"trxID": "NOPE"})
        )
        .await["statusCode"],
        "2033"
    );

    let refund = |amount: &'static str| {
        let c = &c;
        let token = token.clone();
        let trx = trx.clone();
        async move {
            c.call(&token, "payment/refund", json!({"paymentID": id, "trxID": trx, "amount": amount, "sku": "seat", "reason": "test"}))
                .await
        }
    };
    let r1 = refund("200").await;
    assert_eq!(r1["statusCode"], "0000", "{r1}");
    assert_eq!(r1["originalTrxID"], trx.as_str());
    assert_eq!(r1["amount"], "200");
    assert_eq!(r1["transactionStatus"], "Completed");
    assert_ne!(r1["refundTrxID"], trx.as_str());
    assert_eq!(refund("300.01").await["statusCode"], "2026");
    assert_eq!(refund("300").await["statusCode"], "0000");
    assert_eq!(refund("1").await["statusCode"], "2034");
    // refund status: same path without an amount reports the latest refund
    let st = c
        .call(
            &token,
            "payment/refund",
            json!({"paymentID": id, "trxID": trx}),
        )
        .await;
    assert_eq!(st["statusCode"], "0000");
    assert_eq!(st["amount"], "300");
    let wrong_trx = c
        .call(
            &token,
            "payment/refund",
            json!({"paymentID": id, "trxID": "X", "amount": "1"}),
        )
        .await;
    assert_eq!(wrong_trx["statusCode"], "2033");
    let after = c
        .call(&token, "general/searchTransaction", json!({"trxID": trx}))
        .await;
    assert_eq!(after["maxRefundableAmount"], "0");
    gw.stop().await;
}

#[tokio::test]
async fn versioned_paths_serve_the_same_api() {
    let gw = gateway(roomy()).await;
    let c = Client {
        http: reqwest::Client::new(),
        base: format!("{}/v1.2.0-beta", gw.url),
    };
    let token = c.token().await;
    assert_eq!(c.create(&token, "INV-V").await["statusCode"], "0000");
    gw.stop().await;
}

#[tokio::test]
async fn no_input_makes_the_api_answer_anything_but_a_bkash_json_error() {
    let gw = gateway(roomy()).await;
    let c = Client::new(&gw);
    let token = c.token().await;
    let bodies: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"null".to_vec(),
        b"[]".to_vec(),
        b"\"str\"".to_vec(),
        b"{\"paymentID\": {\"$ne\": 1}}".to_vec(),
        b"{\"paymentID\": 12345678901234567890123}".to_vec(),
        b"{\"amount\": 1e308, \"mode\": \"0011\"}".to_vec(),
        vec![0xff, 0xfe, 0x00, 0x7b],
        format!("{{\"trxID\": \"{}\"}}", "A".repeat(100_000)).into_bytes(),
        b"{\"paymentID\": \"\\u0000\"}".to_vec(),
    ];
    for op in [
        "token/grant",
        "token/refresh",
        "create",
        "execute",
        "payment/status",
        "general/searchTransaction",
        "payment/refund",
    ] {
        for body in &bodies {
            let resp = c
                .raw(
                    &format!("/tokenized/checkout/{op}"),
                    &[
                        ("authorization", &token),
                        ("x-app-key", KEY),
                        ("username", USER),
                        ("password", PASS),
                    ],
                    body.clone(),
                )
                .await;
            assert_eq!(resp.status(), 200, "{op} {body:?}");
            let v: Value = resp.json().await.unwrap();
            let code = v["statusCode"].as_str().unwrap();
            assert_ne!(
                code,
                "0000",
                "{op} accepted {:?}",
                String::from_utf8_lossy(body)
            );
            assert!(v["statusMessage"].as_str().is_some());
        }
    }
    gw.stop().await;
}

#[tokio::test]
async fn checkout_page_shows_the_payment_and_refuses_bad_links() {
    let gw = gateway(roomy()).await;
    let c = Client::new(&gw);
    let token = c.token().await;
    let p = c.create(&token, "INV-PAGE").await;
    let url = p["bkashURL"].as_str().unwrap();
    let payer = Payer::new(std::time::Duration::from_secs(5)).unwrap();
    let html = payer.open(url).await.unwrap();
    assert!(
        html.contains("INV-PAGE") && html.contains("value=pay") && html.contains("value=cancel")
    );
    let forged = url.replace("hash=", "hash=00");
    assert!(
        payer.open(&forged).await.is_err(),
        "a wrong hash shows no page"
    );
    match payer.act(&forged, "pay").await.unwrap() {
        ActResult::Refused { http: 404, .. } => {}
        other => panic!("{other:?}"),
    }
    match payer.act(url, "dance").await.unwrap() {
        ActResult::Refused { http: 400, .. } => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(
        gw.app
            .gateway
            .payment(p["paymentID"].as_str().unwrap())
            .unwrap()
            .payer_events
            .len(),
        0
    );
    // second tab: both tabs pay, both redirects say success, the payment is authorised once
    let run = payer.run(url, &Behaviour::SecondTab).await.unwrap();
    assert_eq!(run.actions.len(), 2);
    assert!(run.actions.iter().all(
        |a| matches!(a, ActResult::Redirect(u) if u.query().unwrap().contains("status=success"))
    ));
    gw.stop().await;
}
