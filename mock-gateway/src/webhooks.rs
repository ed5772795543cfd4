//! Webhooks as AWS SNS HTTP(S) deliveries: subscription confirmation, signed
//! notifications carrying bKash's IPN JSON, SNS's retry policy, and the scripted
//! drops, duplicates, delays, reorders and forgeries.
//!
//! Each subscriber endpoint first receives a signed `SubscriptionConfirmation`
//! whose `SubscribeURL` points back at this gateway; only after the endpoint
//! visits it do notifications flow. Every message and every attempt is kept in
//! the delivery log, part of the ground-truth ledger.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use parking_lot::{Mutex, RwLock};
use serde::Serialize;
use serde_json::json;
use sns::{MessageType, SignatureVersion, Signer, SnsMessage};

use crate::clock::Clock;
use crate::config::{Config, DeliveryPolicy};
use crate::metrics::{Delivery, Metrics};
use crate::payments::Payment;
use crate::script::{Action, Decision, Forgery};
use crate::wire::ipn_time;

/// Path the gateway serves its signing certificate at.
pub const CERT_PATH: &str = "/SimpleNotificationService-mock.pem";
/// Subject CN of the gateway's generated signing certificate.
const SIGNER_COMMON_NAME: &str = "sns.mock.sellout.local";
/// Subject CN of the certificate forgeries are signed with.
const ATTACKER_COMMON_NAME: &str = "sns.attacker.example";
/// Path the attacker's certificate (used by forgeries) is served at.
pub const ATTACKER_CERT_PATH: &str = "/__mock/attacker.pem";
/// The SigningCertURL of a cert-URL-spoofing forgery: a host made to look like SNS.
pub const SPOOFED_CERT_URL: &str =
    "https://sns.ap-southeast-1.amazonaws.com.attacker.example/SimpleNotificationService-0000.pem";

/// One subscriber endpoint.
#[derive(Debug, Clone, Serialize)]
pub struct Subscription {
    /// The subscription's ARN.
    pub arn: String,
    /// Where notifications go.
    pub endpoint: String,
    /// The confirmation token.
    #[serde(skip)]
    pub token: String,
    /// Whether the endpoint visited the SubscribeURL.
    pub confirmed: bool,
}

/// One delivery attempt.
#[derive(Debug, Clone, Serialize)]
pub struct Attempt {
    /// When it started.
    pub at: DateTime<Utc>,
    /// The HTTP status answered, if any.
    pub status: Option<u16>,
    /// Why it failed without a status (timeout, refused).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Where a message ended up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Still being attempted.
    Pending,
    /// A 2xx arrived.
    Delivered,
    /// Every retry failed.
    GivenUp,
    /// A script dropped it.
    Dropped,
    /// No confirmed subscription; never sent.
    Unconfirmed,
}

/// One message to one endpoint, with its attempts.
#[derive(Debug, Clone, Serialize)]
pub struct DeliveryRecord {
    /// Position in the log.
    pub seq: u64,
    /// `MessageId`.
    pub message_id: String,
    /// `Type`.
    pub message_type: &'static str,
    /// The payment it is about.
    pub payment_id: Option<String>,
    /// The transaction it is about.
    pub trx_id: Option<String>,
    /// The endpoint.
    pub endpoint: String,
    /// The scripted rule that shaped it.
    pub rule: Option<String>,
    /// "duplicate", "dropped", "unsigned", "bad_signature", "tampered", "replay",
    /// "cert_url_spoof", or none. A `replay` with nothing to replay yet is `dropped` as outcome.
    pub variant: Option<String>,
    /// What happened.
    pub outcome: Outcome,
    /// Attempts in order.
    pub attempts: Vec<Attempt>,
}

/// The delivery log. [`Webhooks::clear_log`] starts a new generation, so that a delivery
/// still in flight from before cannot write its attempts into a record of the new log.
#[derive(Debug, Default)]
struct DeliveryLog {
    generation: u64,
    records: Vec<DeliveryRecord>,
}

/// Where a delivery's record is: the log generation and the record's `seq` in it.
#[derive(Debug, Clone, Copy)]
struct Slot {
    generation: u64,
    seq: u64,
}

/// The SNS side of the gateway.
#[derive(Debug)]
pub struct Webhooks {
    topic_arn: String,
    public_url: String,
    version: SignatureVersion,
    policy: DeliveryPolicy,
    signer: OnceLock<Result<Signer, String>>,
    attacker: OnceLock<Result<Signer, String>>,
    subscriptions: RwLock<Vec<Subscription>>,
    log: Mutex<DeliveryLog>,
    last_notification: Mutex<Option<SnsMessage>>,
    sequence: AtomicU64,
    seed: u64,
    http: reqwest::Client,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
}

/// Why the webhooks could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The HTTP client could not be built.
    #[error("http client: {0}")]
    Http(#[from] reqwest::Error),
}

fn sns_timestamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

impl Webhooks {
    /// Webhooks for `config`, signing with `signer` (a fresh key if `None`).
    pub fn new(
        config: &Config,
        signer: Option<Signer>,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
    ) -> Result<Webhooks, WebhookError> {
        // RSA key generation is slow; a gateway whose webhooks are never used
        // never pays for it: keys are made on first use.
        let signer_slot = OnceLock::new();
        if let Some(s) = signer {
            let _ = signer_slot.set(Ok(s));
        }
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent("Amazon Simple Notification Service Agent")
            .build()?;
        let webhooks = Webhooks {
            topic_arn: config.topic_arn.clone(),
            public_url: config.public_url.trim_end_matches('/').to_owned(),
            version: if config.signature_version == 2 {
                SignatureVersion::V2
            } else {
                SignatureVersion::V1
            },
            policy: config.delivery.clone(),
            signer: signer_slot,
            attacker: OnceLock::new(),
            subscriptions: RwLock::new(Vec::new()),
            log: Mutex::new(DeliveryLog::default()),
            last_notification: Mutex::new(None),
            sequence: AtomicU64::new(0),
            seed: config.seed,
            http,
            metrics,
            clock,
        };
        for endpoint in &config.webhook_urls {
            webhooks.add_subscription(endpoint);
        }
        Ok(webhooks)
    }

    /// Makes the gateway's signing key now, if it is not made yet; whether
    /// there is one. Key generation takes long enough (a 2048-bit RSA key)
    /// to stall an async runtime's thread, and every other caller waits for
    /// the first: a harness that subscribes webhooks mid-run calls this on a
    /// blocking thread before the run (a rehearsal's after-rush subscription
    /// stalled its process for about 300 ms when the key was made on the
    /// first signature).
    pub fn prepare_keys(&self) -> bool {
        self.gateway_signer().is_some()
    }

    /// Whether the gateway's signing key is made (by [`Self::prepare_keys`]
    /// or a first signature).
    pub fn has_key(&self) -> bool {
        self.signer.get().is_some_and(Result::is_ok)
    }

    /// The gateway's signing certificate (PEM), served at [`CERT_PATH`].
    pub fn cert_pem(&self) -> &str {
        self.gateway_signer()
            .map(Signer::cert_pem)
            .unwrap_or_default()
    }

    /// The attacker's certificate (PEM), served at [`ATTACKER_CERT_PATH`].
    pub fn attacker_cert_pem(&self) -> &str {
        self.attacker_signer()
            .map(Signer::cert_pem)
            .unwrap_or_default()
    }

    /// The `SigningCertURL` genuine messages carry.
    pub fn cert_url(&self) -> String {
        format!("{}{CERT_PATH}", self.public_url)
    }

    /// The topic.
    pub fn topic_arn(&self) -> &str {
        &self.topic_arn
    }

    fn next(&self) -> u64 {
        self.sequence.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn message_id(&self) -> String {
        let n = self.next();
        let a = crate::ids::mix(self.seed ^ n);
        let b = crate::ids::mix(a ^ n.rotate_left(32));
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            (a >> 32) as u32,
            (a >> 16) as u16,
            a & 0xfff,
            (b >> 52) & 0xfff,
            b & 0xffff_ffff_ffff
        )
    }

    /// Adds a subscription (not yet confirmed); returns its ARN.
    pub fn add_subscription(&self, endpoint: &str) -> Subscription {
        let n = self.next();
        let sub = Subscription {
            arn: format!("{}:{}", self.topic_arn, self.message_id()),
            endpoint: endpoint.to_owned(),
            token: format!(
                "{:016x}{:016x}",
                crate::ids::mix(self.seed ^ n ^ 0x5eed),
                crate::ids::mix(n)
            ),
            confirmed: false,
        };
        self.subscriptions.write().push(sub.clone());
        sub
    }

    /// Whether any endpoint is subscribed (confirmed or not): cheaper than
    /// [`Webhooks::subscriptions`], which copies them.
    pub fn has_subscriptions(&self) -> bool {
        !self.subscriptions.read().is_empty()
    }

    /// The subscriptions.
    pub fn subscriptions(&self) -> Vec<Subscription> {
        self.subscriptions.read().clone()
    }

    /// The delivery log.
    pub fn log(&self) -> Vec<DeliveryRecord> {
        self.log.lock().records.clone()
    }

    /// Empties the delivery log (subscriptions stay).
    pub fn clear_log(&self) {
        let mut log = self.log.lock();
        log.generation += 1;
        log.records.clear();
        drop(log);
        *self.last_notification.lock() = None;
    }

    /// `GET /?Action=ConfirmSubscription&TopicArn=…&Token=…`: confirms the
    /// subscription with that token; returns its ARN.
    pub fn confirm(&self, topic_arn: &str, token: &str) -> Option<String> {
        if topic_arn != self.topic_arn {
            return None;
        }
        let mut subs = self.subscriptions.write();
        let sub = subs.iter_mut().find(|s| s.token == token)?;
        if !sub.confirmed {
            tracing::info!(endpoint = %sub.endpoint, "webhook subscription confirmed");
        }
        sub.confirmed = true;
        Some(sub.arn.clone())
    }

    /// `GET /?Action=Unsubscribe&SubscriptionArn=…`.
    pub fn unsubscribe(&self, arn: &str) -> bool {
        let mut subs = self.subscriptions.write();
        let before = subs.len();
        subs.retain(|s| s.arn != arn);
        subs.len() != before
    }

    fn gateway_signer(&self) -> Option<&Signer> {
        let made = self
            .signer
            .get_or_init(|| Signer::generate(SIGNER_COMMON_NAME).map_err(|e| e.to_string()));
        made.as_ref()
            .inspect_err(|e| tracing::error!(error = %e, "no signing key"))
            .ok()
    }

    fn attacker_signer(&self) -> Option<&Signer> {
        let made = self
            .attacker
            .get_or_init(|| Signer::generate(ATTACKER_COMMON_NAME).map_err(|e| e.to_string()));
        made.as_ref()
            .inspect_err(|e| tracing::error!(error = %e, "no attacker key"))
            .ok()
    }

    fn sign(&self, msg: &mut SnsMessage, signer: Option<&Signer>) {
        let Some(signer) = signer else { return };
        if let Err(e) = signer.sign(msg, self.version) {
            tracing::error!(error = %e, "signing an SNS message failed");
        }
    }

    /// Sends a signed `SubscriptionConfirmation` to every unconfirmed endpoint,
    /// retrying each until it answers 2xx or the attempts run out.
    pub fn request_confirmations(self: &Arc<Self>) {
        for sub in self.subscriptions().into_iter().filter(|s| !s.confirmed) {
            let mut msg = SnsMessage {
                message_type: MessageType::SubscriptionConfirmation,
                message_id: self.message_id(),
                token: Some(sub.token.clone()),
                topic_arn: self.topic_arn.clone(),
                subject: None,
                message: format!(
                    "You have chosen to subscribe to the topic {}.\nTo confirm the subscription, visit the SubscribeURL included in this message.",
                    self.topic_arn
                ),
                subscribe_url: Some(format!(
                    "{}/?Action=ConfirmSubscription&TopicArn={}&Token={}",
                    self.public_url,
                    urlencode(&self.topic_arn),
                    sub.token
                )),
                timestamp: sns_timestamp(self.clock.now()),
                signature_version: self.version.as_str().to_owned(),
                signature: String::new(),
                signing_cert_url: self.cert_url(),
                unsubscribe_url: None,
            };
            self.sign(&mut msg, self.gateway_signer());
            let slot = self.record(&msg, &sub, None, None, None, None);
            let this = self.clone();
            let policy = DeliveryPolicy {
                retries: self.policy.confirm_attempts.saturating_sub(1),
                ..self.policy.clone()
            };
            tokio::spawn(async move {
                this.deliver(
                    slot,
                    sub,
                    serde_json::to_vec(&msg).unwrap_or_default(),
                    &msg,
                    policy,
                    Duration::ZERO,
                )
                .await;
            });
        }
    }

    fn record(
        &self,
        msg: &SnsMessage,
        sub: &Subscription,
        payment: Option<&Payment>,
        rule: Option<String>,
        variant: Option<&str>,
        outcome: Option<Outcome>,
    ) -> Slot {
        let mut log = self.log.lock();
        let seq = log.records.len() as u64;
        let generation = log.generation;
        log.records.push(DeliveryRecord {
            seq,
            message_id: msg.message_id.clone(),
            message_type: msg.message_type.as_str(),
            payment_id: payment.map(|p| p.payment_id.clone()),
            trx_id: payment.and_then(|p| p.trx_id.clone()),
            endpoint: sub.endpoint.clone(),
            rule,
            variant: variant.map(str::to_owned),
            outcome: outcome.unwrap_or(Outcome::Pending),
            attempts: Vec::new(),
        });
        Slot { generation, seq }
    }

    /// bKash's IPN JSON for a completed payment: the SNS `Message`.
    pub fn ipn(payment: &Payment) -> String {
        json!({
            "dateTime": payment.executed_at.map(ipn_time),
            "debitMSISDN": payment.customer_msisdn,
            "creditOrganizationName": "sellout",
            "creditShortCode": "01700000000",
            "trxID": payment.trx_id,
            "paymentID": payment.payment_id,
            "transactionStatus": "Completed",
            "transactionType": "1003",
            "amount": payment.amount,
            "currency": payment.currency,
            "transactionReference": payment.payer_reference,
            "merchantInvoiceNumber": payment.merchant_invoice_number,
        })
        .to_string()
    }

    /// Publishes the notification of a completed payment to every confirmed
    /// subscriber, shaped by the scripted decision if one fired.
    pub fn publish(self: &Arc<Self>, payment: &Payment, decision: Option<Decision>) {
        let subs = self.subscriptions();
        for sub in subs {
            let mut msg = SnsMessage {
                message_type: MessageType::Notification,
                message_id: self.message_id(),
                token: None,
                topic_arn: self.topic_arn.clone(),
                subject: None,
                message: Webhooks::ipn(payment),
                subscribe_url: None,
                timestamp: sns_timestamp(self.clock.now()),
                signature_version: self.version.as_str().to_owned(),
                signature: String::new(),
                signing_cert_url: self.cert_url(),
                unsubscribe_url: Some(format!(
                    "{}/?Action=Unsubscribe&SubscriptionArn={}",
                    self.public_url,
                    urlencode(&sub.arn)
                )),
            };
            self.sign(&mut msg, self.gateway_signer());
            if !sub.confirmed {
                self.record(
                    &msg,
                    &sub,
                    Some(payment),
                    None,
                    None,
                    Some(Outcome::Unconfirmed),
                );
                self.metrics.webhook(Delivery::Unconfirmed);
                continue;
            }
            let rule = decision.as_ref().map(|d| d.rule.clone());
            let mut rng = decision.as_ref().map(|d| d.rng.clone());
            let action = decision.as_ref().map(|d| d.action.clone());
            let mut hold = Duration::ZERO;
            let mut copies = 0;
            let mut spacing = Duration::ZERO;
            let mut variant: Option<&'static str> = None;
            match action {
                None => {}
                Some(Action::Drop) => {
                    self.record(
                        &msg,
                        &sub,
                        Some(payment),
                        rule,
                        Some("dropped"),
                        Some(Outcome::Dropped),
                    );
                    self.metrics.webhook(Delivery::Dropped);
                    continue;
                }
                Some(Action::Delay(lat)) => {
                    if let Some(rng) = rng.as_mut() {
                        hold = lat.sample(rng);
                    }
                }
                Some(Action::Reorder { hold_ms }) => hold = Duration::from_millis(hold_ms),
                Some(Action::Duplicate {
                    copies: c,
                    spacing_ms,
                }) => {
                    copies = c;
                    spacing = Duration::from_millis(spacing_ms);
                }
                Some(Action::Forge(forgery)) => {
                    match self.forge(&mut msg, &forgery) {
                        Some(v) => variant = Some(v),
                        None => {
                            // Nothing to replay yet: the genuine message is intercepted and
                            // lost. The ledger still says what became of it.
                            self.record(
                                &msg,
                                &sub,
                                Some(payment),
                                rule,
                                Some("replay"),
                                Some(Outcome::Dropped),
                            );
                            self.metrics.webhook(Delivery::Dropped);
                            continue;
                        }
                    }
                    self.metrics.webhook(Delivery::Forged);
                }
                Some(_) => {}
            }
            if variant.is_none() {
                *self.last_notification.lock() = Some(msg.clone());
            }
            let body = serialize_for_wire(&msg, variant == Some("unsigned"));
            for copy in 0..=copies {
                let v = if copy == 0 {
                    variant
                } else {
                    Some("duplicate")
                };
                let slot = self.record(&msg, &sub, Some(payment), rule.clone(), v, None);
                let this = self.clone();
                let sub = sub.clone();
                let body = body.clone();
                let msg = msg.clone();
                let policy = self.policy.clone();
                let wait = hold + spacing * copy;
                tokio::spawn(
                    async move { this.deliver(slot, sub, body, &msg, policy, wait).await },
                );
            }
        }
    }

    /// Turns a genuine message into a forgery; `None` if there is nothing to
    /// replay yet (the genuine message is then lost, as intercepted).
    fn forge(&self, msg: &mut SnsMessage, forgery: &Forgery) -> Option<&'static str> {
        match forgery {
            Forgery::Unsigned => {
                msg.signature.clear();
                Some("unsigned")
            }
            Forgery::BadSignature => {
                self.sign(msg, self.attacker_signer());
                Some("bad_signature")
            }
            Forgery::Tampered => {
                msg.message = msg.message.replacen("\"amount\":\"", "\"amount\":\"9", 1);
                Some("tampered")
            }
            Forgery::Replay => {
                let old = self.last_notification.lock().clone()?;
                *msg = old;
                Some("replay")
            }
            Forgery::CertUrlSpoof => {
                msg.signing_cert_url = SPOOFED_CERT_URL.to_owned();
                self.sign(msg, self.attacker_signer());
                Some("cert_url_spoof")
            }
            Forgery::RedirectStatus(_) => None,
        }
    }

    async fn deliver(
        self: Arc<Self>,
        slot: Slot,
        sub: Subscription,
        body: Vec<u8>,
        msg: &SnsMessage,
        policy: DeliveryPolicy,
        wait: Duration,
    ) {
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let total = policy.retries + 1;
        for attempt in 0..total {
            if attempt > 0 {
                tokio::time::sleep(policy.delay_before_retry(attempt)).await;
            }
            let at = self.clock.now();
            let mut req = self
                .http
                .post(&sub.endpoint)
                .timeout(Duration::from_millis(policy.attempt_timeout_ms))
                .header("content-type", "text/plain; charset=UTF-8")
                .header(sns::HEADER_MESSAGE_TYPE, msg.message_type.as_str())
                .header(sns::HEADER_MESSAGE_ID, &msg.message_id)
                .header(sns::HEADER_TOPIC_ARN, &msg.topic_arn)
                .body(body.clone());
            if msg.message_type == MessageType::Notification {
                req = req.header("x-amz-sns-subscription-arn", &sub.arn);
            }
            let (status, error) = match req.send().await {
                Ok(resp) => (Some(resp.status().as_u16()), None),
                Err(e) => (None, Some(e.to_string())),
            };
            let ok = status.is_some_and(|s| (200..300).contains(&s));
            {
                let mut log = self.log.lock();
                let current = log.generation == slot.generation;
                if let Some(r) = log.records.get_mut(slot.seq as usize).filter(|_| current) {
                    r.attempts.push(Attempt {
                        at,
                        status,
                        error: error.clone(),
                    });
                    if ok {
                        r.outcome = Outcome::Delivered;
                    } else if attempt + 1 == total {
                        r.outcome = Outcome::GivenUp;
                    }
                }
            }
            if ok {
                self.metrics.webhook(Delivery::Delivered);
                return;
            }
            self.metrics.webhook(Delivery::AttemptFailed);
            tracing::warn!(endpoint = %sub.endpoint, ?status, ?error, attempt, "webhook attempt failed");
        }
        self.metrics.webhook(Delivery::GivenUp);
    }
}

/// The JSON body SNS posts; an unsigned forgery has no `Signature` at all.
fn serialize_for_wire(msg: &SnsMessage, unsigned: bool) -> Vec<u8> {
    let mut v = serde_json::to_value(msg).unwrap_or_default();
    if unsigned {
        if let Some(o) = v.as_object_mut() {
            o.remove("Signature");
        }
    }
    serde_json::to_vec_pretty(&v).unwrap_or_default()
}

fn urlencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}
