//! The gateway's webhooks end to end, over real sockets on 127.0.0.1.
//!
//! A small SNS HTTP subscriber records every POST the gateway makes to it and, when told to,
//! confirms its subscription the way a real endpoint does: it verifies the
//! `SubscriptionConfirmation` with the `sns` crate, then visits the `SubscribeURL`. Payments
//! are made through the real bKash API (grant, create, the payer's checkout page, execute), and
//! what arrives is checked against the execute answer, the `sns` verifier, the `openssl` command
//! line and the gateway's ledger.
//!
//! Every wait is a bounded poll ([`WAIT`]); checks that something does *not* happen watch for
//! [`QUIET`], well above the fast delivery policy's retry delay.

// clippy's allow-unwrap-in-tests covers #[test] fns, not this binary's helpers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use mock_gateway::config::{Config, DeliveryPolicy, Merchant};
use mock_gateway::payer::{ActResult, Behaviour, Payer};
use mock_gateway::webhooks::{ATTACKER_CERT_PATH, CERT_PATH, SPOOFED_CERT_URL};
use mock_gateway::{Running, ScriptSpec};
use parking_lot::Mutex;
use serde_json::{Value, json};
use sns::{CertUrlPolicy, MessageType, ParseError, SnsMessage, TopicPolicy, Verifier, VerifyError};
use tokio::net::TcpListener;

/// The topic the gateway is configured with (not the default one, so that it is really read).
const TOPIC: &str = "arn:aws:sns:ap-southeast-1:123456789012:bkash-ipn-webhook-tests";
/// Upper bound of every wait for something that should happen.
const WAIT: Duration = Duration::from_secs(10);
/// Poll interval of those waits.
const POLL: Duration = Duration::from_millis(10);
/// How long to watch for something that must not happen (6 × the retry delay).
const QUIET: Duration = Duration::from_millis(300);
/// Hold of the reorder and delay rules: far longer than one whole payment takes.
const HOLD_MS: u64 = 1_000;

/// Polls `probe` until it yields a value; fails the test after [`WAIT`].
async fn eventually<T>(what: &str, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The receiving side's verification, as the booking system does it.

/// Why a receiver refused a body.
#[derive(Debug, PartialEq)]
enum Rejected {
    Parse(ParseError),
    Verify(VerifyError),
}

/// Verifies SNS bodies the safe way: parse, check topic and `SigningCertURL` before fetching,
/// fetch the certificate, check the signature and the certificate's validity.
#[derive(Debug)]
struct Receiver {
    verifier: Verifier,
    http: reqwest::Client,
    /// Every certificate URL fetched, in order.
    fetched: Mutex<Vec<String>>,
}

impl Receiver {
    /// Trusts exactly the gateway's loopback `host:port` and exactly [`TOPIC`].
    fn for_gateway(gateway: SocketAddr) -> Receiver {
        let urls = CertUrlPolicy::none()
            .allow_http_loopback(gateway.ip(), Some(gateway.port()))
            .unwrap();
        Receiver {
            verifier: Verifier::new(urls, TopicPolicy::only([TOPIC])),
            http: reqwest::Client::new(),
            fetched: Mutex::default(),
        }
    }

    async fn fetch(&self, url: &str) -> Vec<u8> {
        self.fetched.lock().push(url.to_owned());
        let resp = self.http.get(url).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "GET {url}");
        resp.bytes().await.unwrap().to_vec()
    }

    fn fetch_count(&self) -> usize {
        self.fetched.lock().len()
    }

    async fn verify(&self, body: &[u8]) -> Result<SnsMessage, Rejected> {
        let msg = SnsMessage::from_json(body).map_err(Rejected::Parse)?;
        let url = self
            .verifier
            .check_before_fetch(&msg)
            .map_err(Rejected::Verify)?;
        let pem = self.fetch(url.as_str()).await;
        self.verifier
            .verify_at(&msg, &pem, SystemTime::now())
            .map_err(Rejected::Verify)?;
        Ok(msg)
    }
}

// ---------------------------------------------------------------------------------------------
// The subscriber endpoint.

/// One POST the endpoint received.
#[derive(Debug, Clone)]
struct Post {
    headers: HeaderMap,
    body: Bytes,
    at: Instant,
}

impl Post {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn kind(&self) -> Option<&str> {
        self.header(sns::HEADER_MESSAGE_TYPE)
    }

    /// The body as plain JSON: readable even when it is not a valid SNS message.
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    fn msg(&self) -> SnsMessage {
        SnsMessage::from_json(&self.body).unwrap()
    }

    /// The bKash IPN in `Message`, read without trusting anything.
    fn ipn(&self) -> Value {
        serde_json::from_str(self.json()["Message"].as_str().unwrap()).unwrap()
    }

    fn trx(&self) -> String {
        self.ipn()["trxID"].as_str().unwrap().to_owned()
    }
}

/// The endpoint's state, shared with its handler.
#[derive(Debug, Default)]
struct Endpoint {
    posts: Mutex<Vec<Post>>,
    /// Verify each `SubscriptionConfirmation` and visit its `SubscribeURL`.
    auto_confirm: AtomicBool,
    /// Answer 500 to this many more notifications.
    fail_next: AtomicU32,
    /// Answer 500 to every notification.
    always_fail: AtomicBool,
    /// Set once the gateway's address is known.
    receiver: OnceLock<Arc<Receiver>>,
    /// `SubscribeURL`s visited with a 200 answer.
    confirmed: AtomicUsize,
}

async fn receive(State(ep): State<Arc<Endpoint>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let post = Post {
        headers,
        body,
        at: Instant::now(),
    };
    let confirmation = post.kind() == Some(MessageType::SubscriptionConfirmation.as_str());
    ep.posts.lock().push(post.clone());
    if confirmation {
        if ep.auto_confirm.load(Ordering::SeqCst) {
            tokio::spawn(confirm(ep.clone(), post.body));
        }
        return StatusCode::OK;
    }
    let fail_one = ep
        .fail_next
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if ep.always_fail.load(Ordering::SeqCst) || fail_one {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    }
}

/// What a real endpoint does with a `SubscriptionConfirmation`: verify it, then visit its
/// `SubscribeURL`.
async fn confirm(ep: Arc<Endpoint>, body: Bytes) {
    // the test hands the verifier over right after the gateway starts
    let deadline = Instant::now() + WAIT;
    let receiver = loop {
        if let Some(r) = ep.receiver.get() {
            break r.clone();
        }
        if Instant::now() > deadline {
            eprintln!("endpoint never got its verifier");
            return;
        }
        tokio::time::sleep(POLL).await;
    };
    let msg = match receiver.verify(&body).await {
        Ok(msg) => msg,
        Err(e) => {
            eprintln!("endpoint refuses to confirm a bad SubscriptionConfirmation: {e:?}");
            return;
        }
    };
    let url = msg.subscribe_url.unwrap();
    let resp = receiver.http.get(&url).send().await.unwrap();
    if resp.status() == StatusCode::OK {
        ep.confirmed.fetch_add(1, Ordering::SeqCst);
    }
}

/// Serves `ep` on a free loopback port; returns its URL.
async fn serve_endpoint(ep: Arc<Endpoint>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route("/sns", post(receive)).with_state(ep);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/sns")
}

// ---------------------------------------------------------------------------------------------
// A gateway with one subscriber, and payments through the bKash API.

/// Retries and timeouts small enough for tests.
fn fast_delivery() -> DeliveryPolicy {
    DeliveryPolicy {
        retries: 3,
        min_delay_ms: 50,
        max_delay_ms: 50,
        attempt_timeout_ms: 2_000,
        confirm_attempts: 3,
    }
}

#[derive(Debug)]
struct Setup {
    signature_version: u8,
    /// Let the endpoint confirm its subscription (and wait until it has).
    confirm: bool,
    delivery: DeliveryPolicy,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            signature_version: 1,
            confirm: true,
            delivery: fast_delivery(),
        }
    }
}

/// A completed payment.
#[derive(Debug, Clone)]
struct Paid {
    payment_id: String,
    trx_id: String,
    invoice: String,
    amount: String,
    execute: Value,
}

#[derive(Debug)]
struct Harness {
    gw: Running,
    ep: Arc<Endpoint>,
    endpoint_url: String,
    receiver: Arc<Receiver>,
    http: reqwest::Client,
    payer: Payer,
    merchant: Merchant,
    token: Mutex<String>,
    invoices: AtomicU32,
}

impl Harness {
    async fn start(setup: Setup) -> Harness {
        let ep = Arc::new(Endpoint::default());
        ep.auto_confirm.store(setup.confirm, Ordering::SeqCst);
        let endpoint_url = serve_endpoint(ep.clone()).await;
        let config = Config {
            webhook_urls: vec![endpoint_url.clone()],
            topic_arn: TOPIC.into(),
            signature_version: setup.signature_version,
            delivery: setup.delivery,
            ..Config::default()
        };
        let merchant = config.merchants[0].clone();
        let gw = mock_gateway::start_local(config, ScriptSpec::default())
            .await
            .unwrap();
        let receiver = Arc::new(Receiver::for_gateway(gw.addr));
        ep.receiver.set(receiver.clone()).unwrap();
        let h = Harness {
            gw,
            ep,
            endpoint_url,
            receiver,
            http: reqwest::Client::new(),
            payer: Payer::new(Duration::from_secs(5)).unwrap(),
            merchant,
            token: Mutex::new(String::new()),
            invoices: AtomicU32::new(0),
        };
        h.grant().await;
        if setup.confirm {
            eventually("the subscription to be confirmed", async || {
                let subs = h.subscriptions().await;
                subs.iter().all(|s| s["confirmed"] == true).then_some(())
            })
            .await;
            assert_eq!(h.ep.confirmed.load(Ordering::SeqCst), 1);
        }
        h
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.gw.url)
    }

    /// A fresh id_token (again after a reset, which forgets tokens).
    async fn grant(&self) {
        let answer: Value = self
            .http
            .post(self.url("/tokenized/checkout/token/grant"))
            .header("username", &self.merchant.username)
            .header("password", &self.merchant.password)
            .json(&json!({
                "app_key": self.merchant.app_key,
                "app_secret": self.merchant.app_secret,
            }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["statusCode"], "0000", "grant: {answer}");
        *self.token.lock() = answer["id_token"].as_str().unwrap().to_owned();
    }

    async fn api(&self, path: &str, body: Value) -> Value {
        let token = self.token.lock().clone();
        let answer: Value = self
            .http
            .post(self.url(path))
            .header("authorization", token)
            .header("x-app-key", &self.merchant.app_key)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["statusCode"], "0000", "{path}: {answer}");
        answer
    }

    /// Creates a payment of BDT `amount`, has the payer authorise it, executes it.
    async fn pay(&self, amount: &str) -> Paid {
        let n = self.invoices.fetch_add(1, Ordering::SeqCst) + 1;
        let invoice = format!("INV-WH-{n:04}");
        let created = self
            .api(
                "/tokenized/checkout/create",
                json!({
                    "mode": "0011",
                    "payerReference": "01700000001",
                    "callbackURL": "http://127.0.0.1:9/merchant/callback",
                    "amount": amount,
                    "currency": "BDT",
                    "intent": "sale",
                    "merchantInvoiceNumber": invoice,
                }),
            )
            .await;
        let payment_id = created["paymentID"].as_str().unwrap().to_owned();
        let bkash_url = created["bkashURL"].as_str().unwrap();
        let run = self
            .payer
            .run(bkash_url, &Behaviour::PayAndClose)
            .await
            .unwrap();
        assert!(
            matches!(run.actions.as_slice(),
                [ActResult::Redirect(u)] if u.query_pairs().any(|(k, v)| k == "status" && v == "success")),
            "payer: {:?}",
            run.actions
        );
        let execute = self
            .api(
                "/tokenized/checkout/execute",
                json!({ "paymentID": payment_id }),
            )
            .await;
        assert_eq!(execute["transactionStatus"], "Completed", "{execute}");
        Paid {
            payment_id,
            trx_id: execute["trxID"].as_str().unwrap().to_owned(),
            invoice,
            amount: amount.to_owned(),
            execute,
        }
    }

    async fn get(&self, path: &str) -> Value {
        let resp = self.http.get(self.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "GET {path}");
        resp.json().await.unwrap()
    }

    async fn subscriptions(&self) -> Vec<Value> {
        self.get("/__mock/subscriptions")
            .await
            .as_array()
            .unwrap()
            .clone()
    }

    /// The ledger's webhook deliveries.
    async fn records(&self) -> Vec<Value> {
        self.get("/__mock/ledger").await["webhooks"]
            .as_array()
            .unwrap()
            .clone()
    }

    async fn records_for(&self, paid: &Paid) -> Vec<Value> {
        let mut records = self.records().await;
        records.retain(|r| r["payment_id"] == paid.payment_id.as_str());
        records
    }

    /// Waits until the payment's only record reaches `outcome`; returns it.
    async fn outcome(&self, paid: &Paid, outcome: &str) -> Value {
        eventually(
            &format!("{} to be {outcome}", paid.payment_id),
            async || {
                let records = self.records_for(paid).await;
                (records.len() == 1 && records[0]["outcome"] == outcome).then(|| records[0].clone())
            },
        )
        .await
    }

    /// Replaces the script in process.
    fn script(&self, toml: &str) {
        self.gw
            .app
            .gateway
            .set_script(ScriptSpec::from_toml(toml).unwrap())
            .unwrap();
    }

    /// Replaces the script through `PUT /__mock/rules`.
    async fn put_rules(&self, toml: &str) {
        let resp = self
            .http
            .put(self.url("/__mock/rules"))
            .header("content-type", "application/toml")
            .body(toml.to_owned())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "PUT /__mock/rules");
    }

    fn posts(&self) -> Vec<Post> {
        self.ep.posts.lock().clone()
    }

    fn notifications(&self) -> Vec<Post> {
        let mut posts = self.posts();
        posts.retain(|p| p.kind() == Some(MessageType::Notification.as_str()));
        posts
    }

    /// Waits for at least `n` notification posts; returns all of them.
    async fn wait_notifications(&self, n: usize) -> Vec<Post> {
        eventually(&format!("{n} notification posts"), async || {
            let posts = self.notifications();
            (posts.len() >= n).then_some(posts)
        })
        .await
    }

    /// Waits for a notification post about `paid`.
    async fn notification_for(&self, paid: &Paid) -> Post {
        eventually(
            &format!("a notification about {}", paid.trx_id),
            async || {
                self.notifications()
                    .into_iter()
                    .find(|p| p.trx() == paid.trx_id)
            },
        )
        .await
    }

    /// Watches for [`QUIET`]: no post may arrive meanwhile.
    async fn quiet(&self) {
        let before = self.posts().len();
        tokio::time::sleep(QUIET).await;
        let after = self.posts();
        assert_eq!(
            after.len(),
            before,
            "unexpected posts: {:?}",
            after[before..]
                .iter()
                .map(|p| String::from_utf8_lossy(&p.body).into_owned())
                .collect::<Vec<_>>()
        );
    }

    /// The gateway's subscription ARN for the endpoint.
    async fn subscription_arn(&self) -> String {
        let subs = self.subscriptions().await;
        assert_eq!(subs.len(), 1, "{subs:?}");
        assert_eq!(subs[0]["endpoint"], self.endpoint_url.as_str());
        subs[0]["arn"].as_str().unwrap().to_owned()
    }

    async fn cert_pem(&self, path: &str) -> Vec<u8> {
        let resp = self.http.get(self.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "GET {path}");
        resp.bytes().await.unwrap().to_vec()
    }
}

/// The `status` of each attempt of a ledger record.
fn statuses(record: &Value) -> Vec<Option<u64>> {
    record["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["status"].as_u64())
        .collect()
}

fn query(url: &str) -> Vec<(String, String)> {
    url::Url::parse(url)
        .unwrap()
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn query_value(url: &str, key: &str) -> String {
    query(url)
        .into_iter()
        .find(|(k, _)| k == key)
        .unwrap_or_else(|| panic!("{url} has no {key}"))
        .1
}

/// The headers every SNS post carries, consistent with its body.
fn check_sns_headers(post: &Post, msg: &SnsMessage) {
    assert_eq!(
        post.header(sns::HEADER_MESSAGE_TYPE),
        Some(msg.message_type.as_str())
    );
    assert_eq!(
        post.header(sns::HEADER_MESSAGE_ID),
        Some(msg.message_id.as_str())
    );
    assert_eq!(post.header(sns::HEADER_TOPIC_ARN), Some(TOPIC));
    let content_type = post.header("content-type").unwrap();
    assert!(
        content_type.starts_with("text/plain"),
        "content-type {content_type}"
    );
    assert_eq!(
        post.header("user-agent"),
        Some("Amazon Simple Notification Service Agent")
    );
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`, as SNS writes it.
fn check_sns_timestamp(ts: &str) {
    assert_eq!(ts.len(), 24, "{ts}");
    assert!(ts.ends_with('Z'), "{ts}");
    let t = chrono::DateTime::parse_from_rfc3339(ts).unwrap();
    let age = chrono::Utc::now().signed_duration_since(t);
    assert!(age.num_seconds().abs() < 60, "timestamp {ts} is {age} old");
}

/// The IPN of a completed payment, field by field, against the execute answer.
fn check_ipn(ipn: &Value, paid: &Paid) {
    assert_eq!(ipn["trxID"], paid.trx_id.as_str(), "{ipn}");
    assert_eq!(ipn["paymentID"], paid.payment_id.as_str());
    assert_eq!(ipn["merchantInvoiceNumber"], paid.invoice.as_str());
    assert_eq!(ipn["transactionStatus"], "Completed");
    assert_eq!(ipn["amount"], paid.amount.as_str(), "amount is a string");
    assert_eq!(ipn["amount"], paid.execute["amount"]);
    assert_eq!(ipn["currency"], "BDT");
    let msisdn = ipn["debitMSISDN"].as_str().unwrap();
    assert_eq!(msisdn, Config::default().default_msisdn);
    assert_eq!(ipn["debitMSISDN"], paid.execute["customerMsisdn"]);
    let date_time = ipn["dateTime"].as_str().unwrap();
    assert!(
        date_time.len() == 14 && date_time.bytes().all(|b| b.is_ascii_digit()),
        "dateTime {date_time:?}"
    );
    let executed =
        mock_gateway::wire::parse_api_time(paid.execute["paymentExecuteTime"].as_str().unwrap())
            .unwrap();
    assert_eq!(
        date_time,
        mock_gateway::wire::ipn_time(executed),
        "dateTime is the execute time in Dhaka"
    );
}

// ---------------------------------------------------------------------------------------------
// 1. Subscription confirmation.

#[tokio::test]
async fn confirmation_comes_first_and_notifications_wait_for_it() {
    let h = Harness::start(Setup {
        confirm: false,
        ..Setup::default()
    })
    .await;

    // The first thing the endpoint hears is a signed SubscriptionConfirmation.
    let first = eventually("the SubscriptionConfirmation", async || {
        h.posts().first().cloned()
    })
    .await;
    assert_eq!(first.kind(), Some("SubscriptionConfirmation"));
    let msg = h.receiver.verify(&first.body).await.unwrap();
    assert_eq!(msg.message_type, MessageType::SubscriptionConfirmation);
    check_sns_headers(&first, &msg);
    assert_eq!(
        first.header("x-amz-sns-subscription-arn"),
        None,
        "SNS sends no subscription ARN before the subscription exists"
    );
    check_sns_timestamp(&msg.timestamp);
    assert_eq!(msg.topic_arn, TOPIC);
    assert_eq!(msg.signature_version, "1");
    assert_eq!(msg.signing_cert_url, h.url(CERT_PATH));
    assert_eq!(msg.unsubscribe_url, None);
    let token = msg.token.clone().unwrap();
    assert!(!token.is_empty());
    let subscribe_url = msg.subscribe_url.clone().unwrap();
    assert!(
        subscribe_url.starts_with(&h.url("/?")),
        "SubscribeURL {subscribe_url}"
    );
    assert_eq!(query_value(&subscribe_url, "Action"), "ConfirmSubscription");
    assert_eq!(query_value(&subscribe_url, "TopicArn"), TOPIC);
    assert_eq!(query_value(&subscribe_url, "Token"), token);

    // The signature covers the token, and the allowlists are exact.
    let cert = h.cert_pem(CERT_PATH).await;
    let mut forged = msg.clone();
    forged.token = Some(format!("{token}0"));
    assert_eq!(sns::verify(&forged, &cert), Err(VerifyError::BadSignature));
    let other_port = CertUrlPolicy::none()
        .allow_http_loopback(h.gw.addr.ip(), Some(h.gw.addr.port().wrapping_add(1)))
        .unwrap();
    assert!(matches!(
        Verifier::new(other_port, TopicPolicy::only([TOPIC])).check_before_fetch(&msg),
        Err(VerifyError::CertUrlNotAllowed(_))
    ));
    assert!(matches!(
        h.receiver
            .verify(
                first
                    .json()
                    .to_string()
                    .replace(TOPIC, &format!("{TOPIC}-other"))
                    .as_bytes()
            )
            .await,
        Err(Rejected::Verify(VerifyError::TopicNotAllowed(_)))
    ));

    let subs = h.subscriptions().await;
    assert_eq!(subs.len(), 1);
    assert_eq!(subs[0]["confirmed"], false);
    let records = h.records().await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["message_type"], "SubscriptionConfirmation");
    assert_eq!(records[0]["message_id"], msg.message_id.as_str());
    assert_eq!(records[0]["outcome"], "delivered");
    assert_eq!(statuses(&records[0]), [Some(200)]);

    // A payment completed before confirmation is not sent.
    let before = h.pay("500").await;
    let unconfirmed = h.outcome(&before, "unconfirmed").await;
    assert_eq!(unconfirmed["message_type"], "Notification");
    assert_eq!(unconfirmed["trx_id"], before.trx_id.as_str());
    assert!(statuses(&unconfirmed).is_empty());
    h.quiet().await;
    assert_eq!(h.posts().len(), 1, "only the confirmation so far");

    // A wrong token confirms nothing.
    let wrong = h
        .http
        .get(h.url(&format!(
            "/?Action=ConfirmSubscription&TopicArn={TOPIC}&Token=0{token}"
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::BAD_REQUEST);
    assert_eq!(h.subscriptions().await[0]["confirmed"], false);

    // The endpoint visits the SubscribeURL.
    let resp = h.http.get(&subscribe_url).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let xml = resp.text().await.unwrap();
    let arn = h.subscription_arn().await;
    assert!(
        xml.contains(&format!("<SubscriptionArn>{arn}</SubscriptionArn>")),
        "{xml}"
    );
    assert_eq!(h.subscriptions().await[0]["confirmed"], true);

    // The next completed payment produces exactly one notification; the earlier one never
    // follows.
    let after = h.pay("750").await;
    let posts = h.wait_notifications(1).await;
    assert_eq!(posts[0].trx(), after.trx_id);
    let record = h.outcome(&after, "delivered").await;
    assert_eq!(statuses(&record), [Some(200)]);
    h.quiet().await;
    assert_eq!(h.notifications().len(), 1);
    assert_eq!(h.records_for(&before).await.len(), 1);
    assert_eq!(h.posts().len(), 2);
}

// ---------------------------------------------------------------------------------------------
// 2. The notification.

async fn check_notification(version: u8) {
    let h = Harness::start(Setup {
        signature_version: version,
        ..Setup::default()
    })
    .await;
    let paid = h.pay("1250.50").await;
    let post = h.notification_for(&paid).await;

    let msg = h.receiver.verify(&post.body).await.unwrap();
    assert_eq!(msg.signature_version, version.to_string());
    check_sns_headers(&post, &msg);
    let arn = h.subscription_arn().await;
    assert_eq!(
        post.header("x-amz-sns-subscription-arn"),
        Some(arn.as_str())
    );
    assert_eq!(msg.message_type, MessageType::Notification);
    assert_eq!(msg.topic_arn, TOPIC);
    assert_eq!(msg.token, None);
    assert_eq!(msg.subscribe_url, None);
    assert_eq!(msg.signing_cert_url, h.url(CERT_PATH));
    check_sns_timestamp(&msg.timestamp);
    let unsubscribe = msg.unsubscribe_url.clone().unwrap();
    assert!(unsubscribe.starts_with(&h.url("/?")), "{unsubscribe}");
    assert_eq!(query_value(&unsubscribe, "Action"), "Unsubscribe");
    assert_eq!(query_value(&unsubscribe, "SubscriptionArn"), arn);
    check_ipn(&serde_json::from_str(&msg.message).unwrap(), &paid);

    // The version really names the algorithm: the same signature read as the other one fails,
    // and so does any change to a signed field.
    let cert = h.cert_pem(CERT_PATH).await;
    let mut other = msg.clone();
    other.signature_version = if version == 1 { "2" } else { "1" }.into();
    assert_eq!(sns::verify(&other, &cert), Err(VerifyError::BadSignature));
    let mut changed = msg.clone();
    changed.timestamp = changed.timestamp.replace('Z', "1Z");
    assert_eq!(sns::verify(&changed, &cert), Err(VerifyError::BadSignature));

    let record = h.outcome(&paid, "delivered").await;
    assert_eq!(record["message_id"], msg.message_id.as_str());
    assert_eq!(record["trx_id"], paid.trx_id.as_str());
    assert_eq!(record["variant"], Value::Null);
    assert_eq!(statuses(&record), [Some(200)]);
    h.quiet().await;
    assert_eq!(h.notifications().len(), 1);
}

#[tokio::test]
async fn notification_v1_is_a_signed_bkash_ipn() {
    check_notification(1).await;
}

#[tokio::test]
async fn notification_v2_is_a_signed_bkash_ipn() {
    check_notification(2).await;
}

// ---------------------------------------------------------------------------------------------
// 3. Independent verification with the openssl command line.

fn openssl_available() -> bool {
    let found = Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found && std::env::var_os("SNS_SKIP_OPENSSL").is_none() {
        panic!("`openssl` not found on PATH; install it or set SNS_SKIP_OPENSSL=1");
    }
    found
}

fn scratch_dir(label: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "mock-gateway-webhooks-{}-{n}-{label}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn openssl(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

/// `openssl dgst -verify` of `data` against the signature and the certificate's public key.
fn openssl_verifies(label: &str, cert_pem: &[u8], data: &[u8], msg: &SnsMessage) -> bool {
    let dir = scratch_dir(label);
    std::fs::write(dir.join("cert.pem"), cert_pem).unwrap();
    std::fs::write(dir.join("data.txt"), data).unwrap();
    std::fs::write(
        dir.join("sig.bin"),
        STANDARD.decode(&msg.signature).unwrap(),
    )
    .unwrap();
    let out = openssl(
        &dir,
        &[
            "x509",
            "-in",
            "cert.pem",
            "-pubkey",
            "-noout",
            "-out",
            "pubkey.pem",
        ],
    );
    assert!(
        out.status.success(),
        "openssl x509: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let digest = match msg.signature_version.as_str() {
        "1" => "-sha1",
        "2" => "-sha256",
        other => panic!("SignatureVersion {other}"),
    };
    let out = openssl(
        &dir,
        &[
            "dgst",
            digest,
            "-verify",
            "pubkey.pem",
            "-signature",
            "sig.bin",
            "data.txt",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ok = out.status.success() && stdout.contains("Verified OK");
    if !ok {
        assert!(
            stdout.contains("Verification failure")
                || String::from_utf8_lossy(&out.stderr).contains("Verification failure"),
            "openssl dgst failed for another reason: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    ok
}

async fn check_with_openssl(version: u8) {
    let h = Harness::start(Setup {
        signature_version: version,
        ..Setup::default()
    })
    .await;
    let paid = h.pay("99.9").await;
    let post = h.notification_for(&paid).await;
    let confirmation = h.posts().into_iter().next().unwrap();
    assert_eq!(confirmation.kind(), Some("SubscriptionConfirmation"));

    for (what, post) in [("confirmation", &confirmation), ("notification", &post)] {
        let msg = post.msg();
        assert_eq!(msg.signature_version, version.to_string());
        // the certificate exactly as a receiver gets it: from the allowed SigningCertURL
        let url = h.receiver.verifier.check_before_fetch(&msg).unwrap();
        let cert = h.receiver.fetch(url.as_str()).await;
        let data = sns::string_to_sign(&msg).unwrap();
        let label = format!("v{version}-{what}");
        assert!(
            openssl_verifies(&label, &cert, data.as_bytes(), &msg),
            "openssl rejects the gateway's v{version} {what}"
        );
        let tampered = data.replacen("Message\n", "Message\nX", 1);
        assert!(
            !openssl_verifies(
                &format!("{label}-tampered"),
                &cert,
                tampered.as_bytes(),
                &msg
            ),
            "openssl accepts a tampered v{version} {what}: the check proves nothing"
        );
    }
}

#[tokio::test]
async fn signatures_verify_with_the_openssl_cli() {
    if !openssl_available() {
        return;
    }
    tokio::join!(check_with_openssl(1), check_with_openssl(2));
}

// ---------------------------------------------------------------------------------------------
// 4. Retries.

#[tokio::test]
async fn failed_posts_are_retried_until_delivered() {
    let h = Harness::start(Setup::default()).await;
    h.ep.fail_next.store(2, Ordering::SeqCst);
    let paid = h.pay("500").await;

    let record = h.outcome(&paid, "delivered").await;
    assert_eq!(statuses(&record), [Some(500), Some(500), Some(200)]);
    let posts = h.wait_notifications(3).await;
    assert_eq!(posts.len(), 3);
    for p in &posts {
        assert_eq!(p.body, posts[0].body, "a retry sends the same body");
        assert_eq!(
            p.header(sns::HEADER_MESSAGE_ID),
            Some(record["message_id"].as_str().unwrap())
        );
        h.receiver.verify(&p.body).await.unwrap();
    }
    // linear backoff of 50 ms between attempts
    for pair in posts.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(gap >= Duration::from_millis(45), "retry after {gap:?}");
    }
    h.quiet().await;
    assert_eq!(h.notifications().len(), 3);
    assert_eq!(statuses(&h.records_for(&paid).await[0]).len(), 3);
}

#[tokio::test]
async fn retries_run_out_and_the_message_is_given_up() {
    let h = Harness::start(Setup::default()).await;
    h.ep.always_fail.store(true, Ordering::SeqCst);
    let paid = h.pay("500").await;

    let record = h.outcome(&paid, "given_up").await;
    let attempts = fast_delivery().retries as usize + 1;
    assert_eq!(statuses(&record), vec![Some(500); attempts]);
    assert_eq!(h.wait_notifications(attempts).await.len(), attempts);
    // no attempt after giving up
    h.quiet().await;
    assert_eq!(h.notifications().len(), attempts);
    let record = &h.records_for(&paid).await[0];
    assert_eq!(record["outcome"], "given_up");
    assert_eq!(statuses(record).len(), attempts);
}

// ---------------------------------------------------------------------------------------------
// 5. Scripted webhook actions.

#[tokio::test]
async fn script_drop_sends_nothing() {
    let h = Harness::start(Setup::default()).await;
    h.script("[[rule]]\nname = \"lose-one\"\nop = \"webhook\"\naction = \"drop\"\ntimes = 1");
    let dropped = h.pay("500").await;
    let sent = h.pay("600").await;

    h.notification_for(&sent).await;
    let record = h.outcome(&dropped, "dropped").await;
    assert_eq!(record["rule"], "lose-one");
    assert!(statuses(&record).is_empty());
    h.outcome(&sent, "delivered").await;
    h.quiet().await;
    let trxs: Vec<String> = h.notifications().iter().map(Post::trx).collect();
    assert_eq!(trxs, [sent.trx_id]);
}

#[tokio::test]
async fn script_duplicate_posts_the_same_message_twice() {
    let h = Harness::start(Setup::default()).await;
    h.script(
        "[[rule]]\nop = \"webhook\"\naction = { duplicate = { copies = 1, spacing_ms = 100 } }",
    );
    let paid = h.pay("500").await;

    let posts = h.wait_notifications(2).await;
    assert_eq!(posts[0].body, posts[1].body, "the very same body");
    let first = h.receiver.verify(&posts[0].body).await.unwrap();
    let second = h.receiver.verify(&posts[1].body).await.unwrap();
    assert_eq!(first.message_id, second.message_id, "same MessageId");
    assert_eq!(
        posts[0].header(sns::HEADER_MESSAGE_ID),
        posts[1].header(sns::HEADER_MESSAGE_ID)
    );
    assert_eq!(posts[0].trx(), paid.trx_id);
    let gap = posts[1].at - posts[0].at;
    assert!(gap >= Duration::from_millis(80), "copies {gap:?} apart");

    let records = eventually("both copies delivered", async || {
        let records = h.records_for(&paid).await;
        records
            .iter()
            .all(|r| r["outcome"] == "delivered")
            .then_some(records)
    })
    .await;
    assert_eq!(records.len(), 2, "{records:?}");
    assert!(
        records
            .iter()
            .all(|r| r["message_id"] == first.message_id.as_str())
    );
    let variants: Vec<&Value> = records.iter().map(|r| &r["variant"]).collect();
    assert_eq!(variants, [&Value::Null, &json!("duplicate")]);
    h.quiet().await;
    assert_eq!(h.notifications().len(), 2);
}

#[tokio::test]
async fn script_reorder_and_delay_let_later_notifications_overtake() {
    let h = Harness::start(Setup::default()).await;

    h.script(&format!(
        "[[rule]]\nop = \"webhook\"\naction = {{ reorder = {{ hold_ms = {HOLD_MS} }} }}\ntimes = 1"
    ));
    let held = h.pay("500").await;
    let overtaking = h.pay("600").await;
    let posts = h.wait_notifications(2).await;
    let trxs: Vec<String> = posts.iter().map(Post::trx).collect();
    assert_eq!(
        trxs,
        [overtaking.trx_id.clone(), held.trx_id.clone()],
        "reorder"
    );
    h.outcome(&held, "delivered").await;

    // `delay` through the control API this time
    h.put_rules(&format!(
        "[[rule]]\nop = \"webhook\"\naction = {{ delay = {{ ms = {HOLD_MS} }} }}\ntimes = 1"
    ))
    .await;
    let delayed = h.pay("700").await;
    let overtaking = h.pay("800").await;
    let posts = h.wait_notifications(4).await;
    let trxs: Vec<String> = posts[2..].iter().map(Post::trx).collect();
    assert_eq!(
        trxs,
        [overtaking.trx_id.clone(), delayed.trx_id.clone()],
        "delay"
    );
    for p in &posts {
        h.receiver.verify(&p.body).await.unwrap();
    }
    h.outcome(&delayed, "delivered").await;
    h.quiet().await;
    assert_eq!(h.notifications().len(), 4);
}

/// Starts a gateway with a one-shot forgery rule, pays once, returns the forged post.
async fn forged(forgery: &str) -> (Harness, Paid, Post) {
    let h = Harness::start(Setup::default()).await;
    h.script(&format!(
        "[[rule]]\nname = \"forge\"\nop = \"webhook\"\naction = {{ forge = \"{forgery}\" }}\ntimes = 1"
    ));
    let paid = h.pay("500").await;
    let post = h.notification_for(&paid).await;
    let record = h.outcome(&paid, "delivered").await;
    assert_eq!(record["variant"], forgery);
    assert_eq!(record["rule"], "forge");
    (h, paid, post)
}

#[tokio::test]
async fn forged_unsigned_notification_has_no_signature() {
    let (h, _, post) = forged("unsigned").await;
    let body = post.json();
    assert!(body.get("Signature").is_none(), "{body}");
    assert_eq!(body["Type"], "Notification");
    assert_eq!(
        h.receiver.verify(&post.body).await,
        Err(Rejected::Parse(ParseError::MissingField("Signature")))
    );
    assert_eq!(h.receiver.fetch_count(), 1, "only the confirmation's fetch");
}

#[tokio::test]
async fn forged_bad_signature_does_not_verify() {
    let (h, _, post) = forged("bad_signature").await;
    let msg = post.msg();
    assert_eq!(
        msg.signing_cert_url,
        h.url(CERT_PATH),
        "points at the genuine cert"
    );
    assert_eq!(
        h.receiver.verify(&post.body).await,
        Err(Rejected::Verify(VerifyError::BadSignature))
    );
    // signed, but by the attacker's key
    let attacker = h.cert_pem(ATTACKER_CERT_PATH).await;
    assert_eq!(sns::verify(&msg, &attacker), Ok(()));
}

#[tokio::test]
async fn forged_tampered_notification_does_not_verify() {
    let (h, paid, post) = forged("tampered").await;
    let ipn = post.ipn();
    assert_eq!(ipn["trxID"], paid.trx_id.as_str());
    assert_eq!(
        ipn["amount"],
        format!("9{}", paid.amount),
        "the amount was raised"
    );
    assert_eq!(
        h.receiver.verify(&post.body).await,
        Err(Rejected::Verify(VerifyError::BadSignature))
    );
    // it was the gateway's genuine signature over the untampered message
    let mut original = post.msg();
    original.message = original
        .message
        .replacen("\"amount\":\"9", "\"amount\":\"", 1);
    let cert = h.cert_pem(CERT_PATH).await;
    assert_eq!(sns::verify(&original, &cert), Ok(()));
}

#[tokio::test]
async fn forged_cert_url_spoof_is_refused_before_fetching() {
    let (h, _, post) = forged("cert_url_spoof").await;
    let msg = post.msg();
    assert_eq!(msg.signing_cert_url, SPOOFED_CERT_URL);
    let fetched = h.receiver.fetch_count();
    assert_eq!(
        h.receiver.verify(&post.body).await,
        Err(Rejected::Verify(VerifyError::CertUrlNotAllowed(
            SPOOFED_CERT_URL.into()
        )))
    );
    assert_eq!(h.receiver.fetch_count(), fetched, "nothing was fetched");
    // the look-alike host fools not even the AWS pattern
    let aws = Verifier::new(CertUrlPolicy::aws(), TopicPolicy::only([TOPIC]));
    assert_eq!(
        aws.check_before_fetch(&msg),
        Err(VerifyError::CertUrlNotAllowed(SPOOFED_CERT_URL.into()))
    );
    // only the URL check stops it: the attacker's cert would "prove" the signature
    let attacker = h.cert_pem(ATTACKER_CERT_PATH).await;
    assert_eq!(sns::verify(&msg, &attacker), Ok(()));
}

#[tokio::test]
async fn forged_replay_is_a_validly_signed_earlier_notification() {
    let h = Harness::start(Setup::default()).await;
    let replay = "[[rule]]\nop = \"webhook\"\naction = { forge = \"replay\" }\ntimes = 1";

    // Nothing to replay yet: the genuine message is lost, and the ledger says so.
    h.script(replay);
    let lost = h.pay("400").await;
    let record = h.outcome(&lost, "dropped").await;
    assert_eq!(record["variant"], "replay");
    assert!(statuses(&record).is_empty());

    let genuine = h.pay("500").await;
    let original = h.notification_for(&genuine).await;
    h.outcome(&genuine, "delivered").await;

    h.script(replay);
    let paid = h.pay("600").await;
    let record = h.outcome(&paid, "delivered").await;
    assert_eq!(record["variant"], "replay");
    let posts = h.wait_notifications(2).await;
    let replayed = &posts[1];
    assert_eq!(
        replayed.body, original.body,
        "byte for byte the earlier body"
    );
    let old = h.receiver.verify(&original.body).await.unwrap();
    let msg = h
        .receiver
        .verify(&replayed.body)
        .await
        .expect("a replay is validly signed");
    assert_eq!(msg.message_id, old.message_id);
    assert_eq!(msg.signature, old.signature);
    assert_eq!(
        replayed.header(sns::HEADER_MESSAGE_ID),
        Some(old.message_id.as_str())
    );
    assert_eq!(record["message_id"], old.message_id.as_str());
    // what a receiver must notice: the MessageId and the trxID are ones it has seen before
    assert_eq!(replayed.trx(), genuine.trx_id);
    h.quiet().await;
    let trxs: Vec<String> = h.notifications().iter().map(Post::trx).collect();
    assert_eq!(
        trxs,
        [genuine.trx_id.clone(), genuine.trx_id.clone()],
        "no notification for {} or {}",
        lost.trx_id,
        paid.trx_id
    );
}

// ---------------------------------------------------------------------------------------------
// 6. Unsubscribing.

#[tokio::test]
async fn unsubscribe_url_stops_notifications() {
    let h = Harness::start(Setup::default()).await;
    let first = h.pay("500").await;
    let post = h.notification_for(&first).await;
    let msg = h.receiver.verify(&post.body).await.unwrap();

    let resp = h
        .http
        .get(msg.unsubscribe_url.clone().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(
        resp.text().await.unwrap().contains("UnsubscribeResponse"),
        "SNS's XML answer"
    );
    assert_eq!(h.subscriptions().await, Vec::<Value>::new());
    // a second visit finds nothing to unsubscribe
    let again = h
        .http
        .get(msg.unsubscribe_url.unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::BAD_REQUEST);

    let posts = h.posts().len();
    let later = h.pay("600").await;
    h.quiet().await;
    assert_eq!(h.posts().len(), posts, "nothing posted after unsubscribing");
    assert_eq!(h.records_for(&later).await, Vec::<Value>::new());
}

// ---------------------------------------------------------------------------------------------
// The ledger across a reset.

#[tokio::test]
async fn reset_during_retries_does_not_touch_later_records() {
    let h = Harness::start(Setup {
        delivery: DeliveryPolicy {
            min_delay_ms: 400,
            max_delay_ms: 400,
            ..fast_delivery()
        },
        ..Setup::default()
    })
    .await;
    h.ep.fail_next.store(1, Ordering::SeqCst);
    let retried = h.pay("500").await;
    h.wait_notifications(1).await; // answered 500; the retry comes in 400 ms

    let resp = h.http.post(h.url("/__mock/reset")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    assert_eq!(h.records().await, Vec::<Value>::new());
    h.grant().await;
    let b = h.pay("600").await;
    let c = h.pay("700").await;
    h.outcome(&b, "delivered").await;
    h.outcome(&c, "delivered").await;

    // the pre-reset message is retried (delivery goes on) …
    eventually("the pre-reset retry", async || {
        let n = h
            .notifications()
            .iter()
            .filter(|p| p.trx() == retried.trx_id)
            .count();
        (n == 2).then_some(())
    })
    .await;
    // … but its attempt must not land in a record of the new ledger.
    h.quiet().await;
    let records = h.records().await;
    assert_eq!(records.len(), 2, "{records:?}");
    for r in &records {
        assert_eq!(r["outcome"], "delivered", "{r}");
        assert_eq!(statuses(r), [Some(200)], "{r}");
    }
}
