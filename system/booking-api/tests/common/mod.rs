//! The test harness every booking-api integration test shares: a [`Stack`]
//! whose records, queue and outputs are embedded and whose ledger and
//! coordination are embedded or, with [`Backend::Redis`], on a private
//! `redis-server` of the stack's own (a free loopback port, a unique key
//! prefix, killed when the stack is dropped); its gateway is a real
//! [`BkashGateway`] talking to a real mock gateway
//! (`mock_gateway::start_local`) over loopback, served by the API's router on
//! `127.0.0.1:0`.
//!
//! ```ignore
//! let t = TestStack::start().await;                 // defaults below
//! let t = TestStack::start_on(Backend::Redis).await; // same, on Redis
//! let (status, body, _) = t.book("c-1", "gold").await;
//! ```
//!
//! A test that should hold on both backends is an `async fn(Backend)` named
//! in [`on_both_backends!`], which makes an `embedded::<name>` and a
//! `redis::<name>` test of it.
//!
//! Defaults ([`TestOptions::default`]): sale `test-sale`, levels gold (cap 10,
//! price 500) and silver (cap 10, price 300), candidates `c-0` … `c-99`
//! (raw ids; the ledger holds their hashes), the sale open, the article's
//! settings, the system clock, an empty mock script, and the mock subscribing
//! `<api>/payment/webhook` for its SNS notifications (its signing certificate
//! URL and topic trusted by [`Stack::webhook_trust`]).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

#[path = "../../../booking-redis/tests/support/redis_server.rs"]
mod redis_server;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use booking::clock::{Clock, SystemClock};
use booking::queue::{
    Message, Queue, QueueDepth, QueueError, ReceiptHandle, Received, SendOutcome,
};
use booking::{CandidateHash, Coordination, Ledger, Level, SaleId, Settings};
use booking_api::{Stack, WebhookTrust};
use booking_bkash::{BkashConfig, BkashGateway, Credentials};
use booking_embedded::coordination::EmbeddedCoordination;
use booking_embedded::ledger::EmbeddedLedger;
use booking_embedded::outputs::{AlertLog, ObjectSink, OutboxMailer};
use booking_embedded::queue::{EmbeddedQueue, QueueConfig};
use booking_embedded::records::{EmbeddedRecords, RecordsConfig};
use booking_redis::{RedisCoordination, RedisLedger};
use mock_gateway::{Running, ScriptSpec};
pub use redis_server::RedisServer;
use reqwest::header::HeaderMap;
use serde_json::Value;
use tokio::net::TcpListener;

/// The key prefix of every embedded test stack; a Redis one adds a random
/// suffix (`test-<16 hex digits>`).
pub const PREFIX: &str = "test";

/// Where the seat ledger and coordination live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// In process.
    #[default]
    Embedded,
    /// On a private `redis-server` started for the stack.
    Redis,
}

/// Makes two tests of each named `async fn(Backend)`: `embedded::<name>` and
/// `redis::<name>`.
#[allow(unused_macros)]
macro_rules! on_both_backends {
    ($($name:ident),+ $(,)?) => {
        mod embedded {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::common::Backend::Embedded).await;
                }
            )+
        }
        mod redis {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::common::Backend::Redis).await;
                }
            )+
        }
    };
}

/// The mock's default merchant.
pub fn credentials() -> Credentials {
    Credentials {
        username: "sellout".into(),
        password: "sellout-password".into(),
        app_key: "sellout-app-key".into(),
        app_secret: "sellout-app-secret".into(),
    }
}

/// The hash of a raw candidate id.
pub fn hash(raw: &str) -> CandidateHash {
    CandidateHash::of(raw)
}

/// Puts a test double in front of the embedded queue.
pub type WrapQueue = fn(Arc<EmbeddedQueue>) -> Arc<dyn Queue>;

/// How to build a [`TestStack`].
#[derive(Debug, Clone)]
pub struct TestOptions {
    /// The sale.
    pub sale: String,
    /// Levels: (name, cap, price).
    pub levels: Vec<(String, u32, String)>,
    /// Eligible candidates, raw ids.
    pub candidates: Vec<String>,
    /// Open the sale.
    pub open: bool,
    /// The settings.
    pub settings: Settings,
    /// The mock gateway's script (TOML).
    pub script: String,
    /// The mock's config (`public_url` is replaced; the webhook URL is added
    /// when `webhooks`).
    pub mock_config: mock_gateway::Config,
    /// Subscribe `<api>/payment/webhook` to the mock's notifications.
    pub webhooks: bool,
    /// The clock of the stack (and of the gateway's token cache).
    pub clock: Arc<dyn Clock>,
    /// Wraps the embedded queue before the stack gets it (a failing double).
    pub wrap_queue: Option<WrapQueue>,
    /// Where the ledger and coordination live (Redis: a private server, a
    /// pool of `settings.redis_pool_size`). Redis keeps its TTLs by its own
    /// clock: a [`ManualClock`](booking::ManualClock) does not move them.
    pub backend: Backend,
    /// Run the mock gateway on this runtime instead of the caller's (the
    /// benchmark keeps the third party's threads apart from the system's, to
    /// account their CPU separately).
    pub gateway_runtime: Option<tokio::runtime::Handle>,
}

impl Default for TestOptions {
    fn default() -> TestOptions {
        TestOptions {
            sale: "test-sale".into(),
            levels: vec![
                ("gold".into(), 10, "500".into()),
                ("silver".into(), 10, "300".into()),
            ],
            candidates: (0..100).map(|i| format!("c-{i}")).collect(),
            open: true,
            settings: Settings::default(),
            script: String::new(),
            mock_config: mock_gateway::Config::default(),
            webhooks: true,
            clock: Arc::new(SystemClock),
            wrap_queue: None,
            backend: Backend::Embedded,
            gateway_runtime: None,
        }
    }
}

/// A running API on a test stack, against a running mock gateway.
#[derive(Debug)]
pub struct TestStack {
    /// What every handler shares.
    pub stack: Arc<Stack>,
    /// The mock gateway (its ledger is `mock.app.gateway`).
    pub mock: Running,
    /// The API's base URL, `http://127.0.0.1:<port>`.
    pub url: String,
    /// The API's address.
    pub addr: SocketAddr,
    /// A client for the API.
    pub http: reqwest::Client,
    /// The ledger (embedded or Redis).
    pub ledger: Arc<dyn Ledger>,
    /// The queue, concretely (behind `wrap_queue` if any).
    pub queue: Arc<EmbeddedQueue>,
    /// The records, concretely.
    pub records: Arc<EmbeddedRecords>,
    /// Locks, the booking copy, latches, the gateway token (embedded or
    /// Redis).
    pub coordination: Arc<dyn Coordination>,
    /// The key prefix (`stack.prefix`).
    pub prefix: String,
    /// The private Redis server ([`Backend::Redis`]); killed on drop, after
    /// the API.
    pub redis: Option<RedisServer>,
    /// `status.json`.
    pub sink: Arc<ObjectSink>,
    /// Confirmation emails.
    pub mailer: Arc<OutboxMailer>,
    /// Alerts.
    pub alerts: Arc<AlertLog>,
    /// The gateway adapter.
    pub gateway: Arc<BkashGateway>,
    /// The options it was built with.
    pub options: TestOptions,
    embedded_coordination: Option<Arc<EmbeddedCoordination>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<()>,
}

impl TestStack {
    /// A stack with [`TestOptions::default`].
    pub async fn start() -> TestStack {
        TestStack::start_with(TestOptions::default()).await
    }

    /// A stack with [`TestOptions::default`] on `backend`.
    pub async fn start_on(backend: Backend) -> TestStack {
        TestStack::start_with(TestOptions {
            backend,
            ..TestOptions::default()
        })
        .await
    }

    /// A stack with `options`: the mock started, the ledger reset to the
    /// levels, the candidates loaded, the sale opened if asked, the API serving.
    pub async fn start_with(options: TestOptions) -> TestStack {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let url = format!("http://{addr}");

        let mut mock_config = options.mock_config.clone();
        if options.webhooks {
            mock_config
                .webhook_urls
                .push(format!("{url}/payment/webhook"));
        }
        let topic = mock_config.topic_arn.clone();
        let spec = ScriptSpec::from_toml(&options.script).expect("the mock script parses");
        let mock = match &options.gateway_runtime {
            Some(runtime) => runtime
                .spawn(mock_gateway::start_local(mock_config, spec))
                .await
                .expect("the mock gateway's start task"),
            None => mock_gateway::start_local(mock_config, spec).await,
        }
        .expect("the mock gateway starts");

        let clock = options.clock.clone();
        let settings = options.settings.clone();
        let Backends {
            ledger,
            coordination,
            embedded_coordination,
            prefix,
            redis,
        } = Backends::start(&options, clock.clone()).await;
        let queue = Arc::new(EmbeddedQueue::new(
            clock.clone(),
            QueueConfig::from_settings(&settings),
        ));
        let records = Arc::new(EmbeddedRecords::new(
            clock.clone(),
            RecordsConfig::default(),
        ));
        let sink = Arc::new(ObjectSink::new(clock.clone()));
        let mailer = Arc::new(OutboxMailer::new());
        let alerts = Arc::new(AlertLog::new());
        let gateway = Arc::new(
            BkashGateway::connect(
                BkashConfig::new(mock.url.clone(), credentials()),
                coordination.clone(),
                clock.clone(),
                &settings,
                &prefix,
            )
            .expect("the gateway client builds"),
        );
        let stack_queue: Arc<dyn Queue> = match options.wrap_queue {
            Some(wrap) => wrap(queue.clone()),
            None => queue.clone(),
        };
        let sale = SaleId::parse(&options.sale).expect("sale id");
        let prices: BTreeMap<Level, String> = options
            .levels
            .iter()
            .map(|(l, _, p)| (Level::parse(l).expect("level"), p.clone()))
            .collect();
        let cert_urls = sns::CertUrlPolicy::none()
            .allow_http_loopback(IpAddr::V4(Ipv4Addr::LOCALHOST), Some(mock.addr.port()))
            .expect("loopback");
        let stack = Arc::new(Stack {
            sale,
            prefix: prefix.clone(),
            settings,
            prices,
            public_url: url.clone(),
            ledger: ledger.clone(),
            records: records.clone(),
            stream: records.clone(),
            queue: stack_queue,
            coordination: coordination.clone(),
            gateway: gateway.clone(),
            mailer: mailer.clone(),
            alerts: alerts.clone(),
            status_sink: sink.clone(),
            clock,
            entropy: Arc::new(booking::OsEntropy),
            webhook_trust: WebhookTrust {
                cert_urls,
                topics: sns::TopicPolicy::only([topic]),
            },
        });

        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let router = booking_api::router(stack.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client");
        let t = TestStack {
            stack,
            mock,
            url,
            addr,
            http,
            ledger,
            queue,
            records,
            coordination,
            prefix,
            redis,
            embedded_coordination,
            sink,
            mailer,
            alerts,
            gateway,
            options: options.clone(),
            shutdown: Some(tx),
            server,
        };
        t.reset(
            &options
                .levels
                .iter()
                .map(|(l, cap, _)| (l.as_str(), *cap))
                .collect::<Vec<_>>(),
            &options.candidates,
            options.open,
        )
        .await;
        t
    }

    /// Resets the sale to `levels`, loads `candidates` (raw ids) and opens it
    /// or not.
    pub async fn reset(&self, levels: &[(&str, u32)], candidates: &[String], open: bool) {
        let ledger = &self.stack.ledger;
        let sale = &self.stack.sale;
        let levels: Vec<(Level, u32)> = levels
            .iter()
            .map(|(l, cap)| (Level::parse(l).expect("level"), *cap))
            .collect();
        ledger.reset(sale, &levels).await.expect("reset");
        let hashes: Vec<CandidateHash> = candidates.iter().map(|c| hash(c)).collect();
        ledger.load_candidates(sale, &hashes).await.expect("load");
        ledger.set_open(sale, open).await.expect("open");
    }

    /// `POST /bookings` with `{"candidate", "level"}`.
    pub async fn book(&self, candidate: &str, level: &str) -> (u16, Value, HeaderMap) {
        self.post_json(
            "/bookings",
            &serde_json::json!({"candidate": candidate, "level": level}).to_string(),
        )
        .await
    }

    /// `POST <path>` with a raw body as `application/json`; the body read as
    /// JSON (`Value::Null` if it is not JSON).
    pub async fn post_json(&self, path: &str, body: &str) -> (u16, Value, HeaderMap) {
        let response = self
            .http
            .post(format!("{}{path}", self.url))
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .expect("the API answers");
        read(response).await
    }

    /// `GET <path>`: status, body text, headers.
    pub async fn get(&self, path: &str) -> (u16, String, HeaderMap) {
        let response = self
            .http
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .expect("the API answers");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        (status, response.text().await.expect("body"), headers)
    }

    /// The time left to live of a coordination key: `None` if it is absent,
    /// `Some(None)` if it has no TTL.
    pub async fn coordination_ttl(&self, key: &str) -> Option<Option<Duration>> {
        match &self.redis {
            None => self
                .embedded_coordination
                .as_ref()
                .expect("an embedded coordination")
                .ttl(key),
            Some(server) => match redis_command(server.port(), &["PTTL", key]).await {
                -2 => None,
                -1 => Some(None),
                ms => Some(Some(Duration::from_millis(
                    u64::try_from(ms).expect("PTTL >= 0"),
                ))),
            },
        }
    }

    /// Every message waiting in the queue (received, so now in flight).
    pub async fn drain_queue(&self) -> Vec<Received> {
        let mut all = Vec::new();
        loop {
            let batch = self
                .queue
                .receive(10, Duration::ZERO)
                .await
                .expect("receive");
            if batch.is_empty() {
                return all;
            }
            all.extend(batch);
        }
    }

    /// The count of a level in the ledger.
    pub async fn taken(&self, level: &str) -> u32 {
        let counters = self
            .stack
            .ledger
            .counters(&self.stack.sale)
            .await
            .expect("counters");
        counters
            .levels
            .iter()
            .find(|l| l.level.as_str() == level)
            .map_or(0, |l| l.count)
    }

    /// Stops the API and the mock (a Redis server is killed as the stack is
    /// dropped, after them).
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.server).await;
        self.mock.stop().await;
    }
}

/// The ledger and coordination of one stack, and their key prefix.
struct Backends {
    ledger: Arc<dyn Ledger>,
    coordination: Arc<dyn Coordination>,
    embedded_coordination: Option<Arc<EmbeddedCoordination>>,
    prefix: String,
    redis: Option<RedisServer>,
}

impl Backends {
    async fn start(options: &TestOptions, clock: Arc<dyn Clock>) -> Backends {
        match options.backend {
            Backend::Embedded => {
                let coordination = Arc::new(EmbeddedCoordination::new(clock));
                Backends {
                    ledger: Arc::new(EmbeddedLedger::new()),
                    coordination: coordination.clone(),
                    embedded_coordination: Some(coordination),
                    prefix: PREFIX.into(),
                    redis: None,
                }
            }
            Backend::Redis => {
                let server = RedisServer::start();
                let url = server.url();
                let pool = options.settings.redis_pool_size;
                let prefix = format!("{PREFIX}-{:016x}", rand::random::<u64>());
                let ledger = RedisLedger::connect(&url, pool, &prefix)
                    .await
                    .expect("the Redis ledger connects");
                let coordination = RedisCoordination::connect(&url, pool)
                    .await
                    .expect("Redis coordination connects");
                // as the server does: the pools open before the first request
                tokio::join!(ledger.warm(pool), coordination.warm(pool));
                Backends {
                    ledger: Arc::new(ledger),
                    coordination: Arc::new(coordination),
                    embedded_coordination: None,
                    prefix,
                    redis: Some(server),
                }
            }
        }
    }
}

/// One command to the Redis server on `port` over a fresh connection; its
/// integer answer.
async fn redis_command(port: u16, args: &[&str]) -> i64 {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut request = format!("*{}\r\n", args.len());
    for a in args {
        request.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to redis-server");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("write to redis-server");
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .await
        .expect("read from redis-server");
    line.strip_prefix(':')
        .and_then(|n| n.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("{args:?}: not an integer reply: {line:?}"))
}

/// Status, JSON body (or `Null`), headers.
pub async fn read(response: reqwest::Response) -> (u16, Value, HeaderMap) {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response.bytes().await.expect("body");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        headers,
    )
}

/// A queue that fails sends while told to, and otherwise forwards to an
/// embedded queue: the enqueue-failure double.
#[derive(Debug)]
pub struct FlakyQueue {
    /// The real queue.
    pub inner: Arc<EmbeddedQueue>,
    /// Fail every send while set.
    pub fail_sends: AtomicBool,
    /// Sends refused so far.
    pub refused: AtomicU64,
}

impl FlakyQueue {
    /// Failing from the start.
    pub fn failing(inner: Arc<EmbeddedQueue>) -> Arc<dyn Queue> {
        Arc::new(FlakyQueue {
            inner,
            fail_sends: AtomicBool::new(true),
            refused: AtomicU64::new(0),
        })
    }
}

#[async_trait]
impl Queue for FlakyQueue {
    async fn send(&self, message: Message) -> Result<SendOutcome, QueueError> {
        if self.fail_sends.load(Ordering::SeqCst) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(QueueError::Unavailable("injected send failure".into()));
        }
        self.inner.send(message).await
    }
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Received>, QueueError> {
        self.inner.receive(max, wait).await
    }
    async fn delete(&self, receipt: &ReceiptHandle) -> Result<(), QueueError> {
        self.inner.delete(receipt).await
    }
    async fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        timeout: Duration,
    ) -> Result<(), QueueError> {
        self.inner.change_visibility(receipt, timeout).await
    }
    async fn oldest_age(&self) -> Result<Option<Duration>, QueueError> {
        self.inner.oldest_age().await
    }
    async fn depth(&self) -> Result<QueueDepth, QueueError> {
        self.inner.depth().await
    }
    async fn dead_letters(&self) -> Result<Vec<Message>, QueueError> {
        self.inner.dead_letters().await
    }
}
