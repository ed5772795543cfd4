//! The gateway's state and its operations, free of HTTP: token grant, create,
//! execute, status, search, refund and the payer's actions. [`crate::api`] maps
//! requests onto these; tests and benches may call them directly.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::Duration;
use dashmap::DashMap;
use hmac::{Hmac, Mac};
use parking_lot::{Mutex, RwLock};
use rustc_hash::FxBuildHasher;
use serde::Serialize;
use serde_json::{Value, json};
use sha2::Sha256;

use crate::clock::Clock;
use crate::codes::Code;
use crate::config::{Config, Merchant};
use crate::ids::{base36, mix};
use crate::metrics::Metrics;
use crate::payments::{NewPayment, PayerAction, Payment, PaymentState, RedirectStatus};
use crate::script::{Script, ScriptSpec};
use crate::tokens::{Issued, TokenLimits, Tokens};
use crate::wire::{Amount, Body, api_time, fields};

/// Longest `payerReference` / `merchantInvoiceNumber` bKash accepts.
pub const FIELD_LEN_MAX: usize = 255;

/// `transactionType` the real gateway reports for tokenized checkout payments.
const TRANSACTION_TYPE: &str = "bKash Tokenized Checkout via API";
/// The merchant's short code in search answers.
const ORGANIZATION_SHORT_CODE: &str = "50022";

/// The whole gateway.
#[derive(Debug)]
pub struct Gateway {
    config: Config,
    clock: Arc<dyn Clock>,
    /// HMAC keyed once with the gateway's random secret; cloned per MAC.
    mac_key: Hmac<Sha256>,
    tokens: Tokens,
    payments: DashMap<String, Payment, FxBuildHasher>,
    by_trx: DashMap<String, String, FxBuildHasher>,
    script: RwLock<Arc<Script>>,
    sequence: AtomicU64,
    journal: Mutex<Vec<Fault>>,
    /// Counters.
    pub metrics: Arc<Metrics>,
}

/// Longest fault journal kept; older entries are dropped first.
pub const JOURNAL_LEN_MAX: usize = 200_000;

/// One scripted decision that changed what the gateway did: the fault log.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Fault {
    /// When.
    pub at: chrono::DateTime<chrono::Utc>,
    /// Operation.
    pub op: &'static str,
    /// Rule name.
    pub rule: String,
    /// The action, as data.
    pub action: crate::script::Action,
    /// The payment concerned, if known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payment_id: Option<String>,
}

impl Gateway {
    /// A gateway with `config`, reading time from `clock`.
    pub fn new(config: Config, clock: Arc<dyn Clock>) -> Gateway {
        let mut secret = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut secret);
        let script = Arc::new(Script::new(ScriptSpec::default(), config.seed));
        // HMAC takes keys of any length: this cannot fail
        let mac_key = match Hmac::<Sha256>::new_from_slice(&secret) {
            Ok(m) => m,
            Err(_) => unreachable!("HMAC accepts any key length"),
        };
        Gateway {
            config,
            clock,
            mac_key,
            tokens: Tokens::default(),
            payments: DashMap::with_capacity_and_hasher(1024, FxBuildHasher),
            by_trx: DashMap::with_capacity_and_hasher(1024, FxBuildHasher),
            script: RwLock::new(script),
            sequence: AtomicU64::new(0),
            journal: Mutex::new(Vec::new()),
            metrics: Arc::new(Metrics::default()),
        }
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The clock.
    pub fn clock(&self) -> &dyn Clock {
        self.clock.as_ref()
    }

    /// The live script.
    pub fn script(&self) -> Arc<Script> {
        self.script.read().clone()
    }

    /// Replaces the script (validated first); counters of the old one are dropped.
    pub fn set_script(&self, spec: ScriptSpec) -> Result<(), crate::script::ScriptError> {
        spec.validate()?;
        *self.script.write() = Arc::new(Script::new(spec, self.config.seed));
        Ok(())
    }

    fn next(&self) -> u64 {
        self.sequence.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The first 16 bytes of HMAC-SHA256(secret, what), in lowercase hex.
    fn mac(&self, what: &[u8]) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut mac = self.mac_key.clone();
        mac.update(what);
        let digest = mac.finalize().into_bytes();
        let mut out = String::with_capacity(32);
        for b in digest.iter().take(16) {
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        out
    }

    fn fresh_token(&self) -> String {
        let n = self.next();
        format!(
            "{}{}",
            self.mac(&n.to_le_bytes()),
            self.mac(&(!n).to_le_bytes())
        )
    }

    fn payment_id(&self) -> String {
        let n = self.next();
        format!(
            "TR0011{}{}",
            base36(n, 6),
            base36(mix(self.config.seed ^ mix(n)), 8)
        )
    }

    fn trx_id(&self) -> String {
        let n = self.next();
        let tail = base36(mix(self.config.seed.rotate_left(17) ^ mix(n)), 10);
        format!("{}{}", &tail[..2], base36(n, 8))
    }

    fn limits(&self) -> TokenLimits {
        TokenLimits {
            grant_limit: self.config.grant_limit,
            grant_window: Duration::seconds(self.config.grant_window_secs as i64),
            id_ttl: Duration::seconds(self.config.id_token_ttl_secs as i64),
            refresh_ttl: Duration::seconds(self.config.refresh_token_ttl_secs as i64),
        }
    }

    fn merchant(&self, username: Option<&str>, password: Option<&str>) -> Result<&Merchant, Code> {
        self.config
            .merchants
            .iter()
            .find(|m| {
                Some(m.username.as_str()) == username && Some(m.password.as_str()) == password
            })
            .ok_or(Code::InvalidCredentials)
    }

    /// Authenticates a grant or refresh: header credentials, then the body's
    /// `app_key`/`app_secret` of the same merchant.
    fn merchant_call(
        &self,
        username: Option<&str>,
        password: Option<&str>,
        body: &[u8],
    ) -> Result<(&Merchant, Body), Code> {
        let merchant = self.merchant(username, password)?;
        let body = Body::parse(body)?;
        let key = body.required("app_key")?;
        let secret = body.required("app_secret")?;
        if key != merchant.app_key || secret != merchant.app_secret {
            return Err(Code::InvalidAppKey);
        }
        Ok((merchant, body))
    }

    /// `token/grant`: spends one of the app key's grants.
    pub fn grant(
        &self,
        username: Option<&str>,
        password: Option<&str>,
        body: &[u8],
    ) -> Result<Value, Code> {
        let (merchant, _) = self.merchant_call(username, password, body)?;
        let issued =
            self.tokens
                .grant(&merchant.app_key, self.clock.now(), self.limits(), || {
                    self.fresh_token()
                })?;
        self.metrics.granted();
        tracing::info!(app_key = %merchant.app_key, "token granted");
        Ok(token_answer(issued))
    }

    /// `token/refresh`: a new id_token for a live refresh token; no grant spent.
    pub fn refresh(
        &self,
        username: Option<&str>,
        password: Option<&str>,
        body: &[u8],
    ) -> Result<Value, Code> {
        let (merchant, body) = self.merchant_call(username, password, body)?;
        let refresh_token = body.required("refresh_token")?;
        let issued = self.tokens.refresh(
            &merchant.app_key,
            &refresh_token,
            self.clock.now(),
            self.limits(),
            || self.fresh_token(),
        )?;
        Ok(token_answer(issued))
    }

    /// Checks the `Authorization` and `X-APP-Key` headers; returns the app key.
    pub fn authorize<'a>(
        &self,
        authorization: Option<&str>,
        app_key: Option<&'a str>,
    ) -> Result<&'a str, Code> {
        let app_key = app_key
            .filter(|k| !k.is_empty())
            .ok_or(Code::InvalidAppKey)?;
        if !self.config.merchants.iter().any(|m| m.app_key == app_key) {
            return Err(Code::InvalidAppKey);
        }
        let authorization = authorization
            .filter(|a| !a.trim().is_empty())
            .ok_or(Code::InvalidToken)?;
        self.tokens
            .check(authorization, app_key, self.clock.now())?;
        Ok(app_key)
    }

    /// Parses and validates a `create` body.
    pub fn parse_create(body: &[u8]) -> Result<NewPayment, Code> {
        Gateway::parse_create_with_url(body).map(|(req, _)| req)
    }

    /// [`Gateway::parse_create`], also returning the parsed callback URL (the
    /// redirect URLs of the answer are built from it).
    pub fn parse_create_with_url(body: &[u8]) -> Result<(NewPayment, url::Url), Code> {
        let [
            mode,
            callback_url,
            amount,
            currency,
            intent,
            merchant_invoice_number,
            payer_reference,
        ] = fields(
            body,
            &[
                "mode",
                "callbackURL",
                "amount",
                "currency",
                "intent",
                "merchantInvoiceNumber",
                "payerReference",
            ],
        )?;
        // the same checks, in the same order, as bKash answers them
        let mode = mode.required()?;
        let callback_url = callback_url.required()?;
        if amount.is_missing() {
            return Err(Code::MandatoryFieldMissing);
        }
        let currency = currency.required()?;
        let intent = intent.required()?;
        let merchant_invoice_number = merchant_invoice_number.required()?;
        let payer_reference = payer_reference.optional()?.unwrap_or_default();
        match mode.as_str() {
            "0011" => {}
            "0000" | "0001" | "0002" => return Err(Code::ModeUnavailable),
            _ => return Err(Code::ModeInvalid),
        }
        if payer_reference.len() > FIELD_LEN_MAX {
            return Err(Code::InvalidPayerReference);
        }
        let parsed = url::Url::parse(&callback_url).map_err(|_| Code::InvalidCallbackUrl)?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(Code::InvalidCallbackUrl);
        }
        let amount = amount.amount()?;
        if currency != "BDT" {
            return Err(Code::InvalidCurrency);
        }
        if intent != "sale" {
            return Err(Code::InvalidIntent);
        }
        if merchant_invoice_number.len() > FIELD_LEN_MAX {
            return Err(Code::InvalidMerchantInvoiceNumber);
        }
        Ok((
            NewPayment {
                mode,
                payer_reference,
                callback_url,
                amount,
                currency,
                intent,
                merchant_invoice_number,
            },
            parsed,
        ))
    }

    /// `create`: a new payment in `Initiated`, and the answer bKash gives.
    pub fn create(&self, app_key: &str, req: NewPayment) -> Payment {
        let payment_id = self.payment_id();
        let signature = self.mac(payment_id.as_bytes());
        let payment = Payment::new(
            payment_id.clone(),
            app_key.to_owned(),
            signature,
            req,
            self.clock.now(),
        );
        self.payments.insert(payment_id, payment.clone());
        payment
    }

    /// The checkout page URL of a payment (`bkashURL`).
    pub fn bkash_url(&self, p: &Payment) -> String {
        format!(
            "{}/checkout/{}?hash={}&mode={}&apiVersion=v1.2.0-beta",
            self.config.public_url.trim_end_matches('/'),
            p.payment_id,
            p.signature,
            p.mode
        )
    }

    /// The create answer for a payment.
    pub fn create_answer<'p>(&self, p: &'p Payment) -> CreateAnswer<'p> {
        let redirects = url::Url::parse(&p.callback_url)
            .ok()
            .map(|u| RedirectUrls::new(&u, p));
        self.create_answer_with(p, redirects)
    }

    fn create_answer_with<'p>(
        &self,
        p: &'p Payment,
        redirects: Option<RedirectUrls>,
    ) -> CreateAnswer<'p> {
        let RedirectUrls {
            success,
            failure,
            cancel,
        } = redirects.unwrap_or_else(|| RedirectUrls {
            success: p.callback_url.clone(),
            failure: p.callback_url.clone(),
            cancel: p.callback_url.clone(),
        });
        CreateAnswer {
            payment_id: &p.payment_id,
            payment_create_time: api_time(p.created_at),
            transaction_status: "Initiated",
            amount: &p.amount,
            currency: &p.currency,
            intent: &p.intent,
            merchant_invoice_number: &p.merchant_invoice_number,
            payer_reference: &p.payer_reference,
            bkash_url: self.bkash_url(p),
            callback_url: &p.callback_url,
            success_callback_url: success,
            failure_callback_url: failure,
            cancelled_callback_url: cancel,
            status_code: Code::Successful.as_str(),
            status_message: Code::Successful.message(),
        }
    }

    /// `create` as the API serves it: stores the payment and returns its ID
    /// and the answer's JSON bytes, without copying the payment. `callback` is
    /// the payment's callback URL as [`Gateway::parse_create_with_url`] parsed it.
    pub fn create_serialized(
        &self,
        app_key: &str,
        req: NewPayment,
        callback: &url::Url,
    ) -> (String, Vec<u8>) {
        let payment_id = self.payment_id();
        let signature = self.mac(payment_id.as_bytes());
        let payment = Payment::new(
            payment_id.clone(),
            app_key.to_owned(),
            signature,
            req,
            self.clock.now(),
        );
        let redirects = RedirectUrls::new(callback, &payment);
        let bytes = to_json_bytes(&self.create_answer_with(&payment, Some(redirects)));
        self.payments.insert(payment_id.clone(), payment);
        (payment_id, bytes)
    }

    /// A payment's merchant invoice number, for selectors.
    pub fn invoice_of(&self, payment_id: &str) -> Option<String> {
        self.payments
            .get(payment_id)
            .map(|p| p.merchant_invoice_number.clone())
    }

    /// A copy of a payment.
    pub fn payment(&self, payment_id: &str) -> Option<Payment> {
        self.payments.get(payment_id).map(|p| p.clone())
    }

    /// Every payment, oldest first.
    pub fn payments(&self) -> Vec<Payment> {
        let mut all: Vec<Payment> = self.payments.iter().map(|p| p.clone()).collect();
        all.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then(a.payment_id.cmp(&b.payment_id))
        });
        all
    }

    fn owned_payment(
        &self,
        app_key: &str,
        payment_id: &str,
    ) -> Result<dashmap::mapref::one::RefMut<'_, String, Payment>, Code> {
        match self.payments.get_mut(payment_id) {
            Some(p) if p.app_key == app_key => Ok(p),
            _ => Err(Code::InvalidPaymentId),
        }
    }

    /// `execute`: completes an authorised payment, at most once. Returns the answer
    /// and, when this call completed the payment, a copy for the webhook.
    pub fn execute(
        &self,
        app_key: &str,
        payment_id: &str,
        scripted: Option<String>,
    ) -> Result<(Value, Payment), Code> {
        self.execute_with(app_key, payment_id, scripted, |p| {
            let answer = serde_json::to_value(ExecuteAnswer::of(p)).unwrap_or(Value::Null);
            (answer, p.clone())
        })
    }

    /// `execute` as the API serves it: the answer's JSON bytes, and a copy of
    /// the payment only when `webhook_copy` (someone subscribed to webhooks).
    pub fn execute_serialized(
        &self,
        app_key: &str,
        payment_id: &str,
        scripted: Option<String>,
        webhook_copy: bool,
    ) -> Result<(Vec<u8>, Option<Payment>), Code> {
        self.execute_with(app_key, payment_id, scripted, |p| {
            (
                to_json_bytes(&ExecuteAnswer::of(p)),
                webhook_copy.then(|| p.clone()),
            )
        })
    }

    fn execute_with<R>(
        &self,
        app_key: &str,
        payment_id: &str,
        scripted: Option<String>,
        answer: impl FnOnce(&Payment) -> R,
    ) -> Result<R, Code> {
        let now = self.clock.now();
        let mut p = self.owned_payment(app_key, payment_id)?;
        p.execute(|| self.trx_id(), now, scripted)?;
        if let Some(trx) = &p.trx_id {
            self.by_trx.insert(trx.clone(), p.payment_id.clone());
        }
        self.metrics.executed();
        Ok(answer(&p))
    }

    /// Parses the `paymentID` of an execute/status body.
    pub fn payment_id_of(body: &[u8]) -> Result<String, Code> {
        let [id] = fields(body, &["paymentID"])?;
        id.required()
    }

    /// `payment/status`: the payment as bKash reports it.
    pub fn status(&self, app_key: &str, payment_id: &str) -> Result<Value, Code> {
        let p = self.owned_payment(app_key, payment_id)?;
        let mut v = json!({
            "paymentID": p.payment_id,
            "mode": p.mode,
            "paymentCreateTime": api_time(p.created_at),
            "amount": p.amount,
            "currency": p.currency,
            "intent": p.intent,
            "merchantInvoice": p.merchant_invoice_number,
            "payerReference": p.payer_reference,
            "transactionStatus": p.state.transaction_status(),
            "verificationStatus": p.state.verification_status(),
            "userVerificationStatus": p.state.verification_status(),
            "statusCode": Code::Successful.as_str(),
            "statusMessage": Code::Successful.message(),
        });
        if let Some(obj) = v.as_object_mut() {
            if let Some(t) = p.executed_at {
                obj.insert("paymentExecuteTime".into(), api_time(t).into());
            }
            if let Some(trx) = &p.trx_id {
                obj.insert("trxID".into(), trx.clone().into());
            }
            if let Some(m) = &p.customer_msisdn {
                obj.insert("customerMsisdn".into(), m.clone().into());
                obj.insert("payerAccount".into(), m.clone().into());
            }
        }
        Ok(v)
    }

    /// `general/searchTransaction`.
    pub fn search(&self, app_key: &str, body: &[u8]) -> Result<Value, Code> {
        let trx = Body::parse(body)?.required("trxID")?;
        let payment_id = self
            .by_trx
            .get(&trx)
            .map(|p| p.clone())
            .ok_or(Code::TransactionNotFound)?;
        let p = self
            .owned_payment(app_key, &payment_id)
            .map_err(|_| Code::TransactionNotFound)?;
        let refunded = p.refunded_poisha();
        Ok(json!({
            "trxID": trx,
            "initiationTime": api_time(p.created_at),
            "completedTime": p.executed_at.map(api_time),
            "transactionType": TRANSACTION_TYPE,
            "customerMsisdn": p.customer_msisdn,
            "payerAccount": p.customer_msisdn,
            "transactionStatus": p.state.transaction_status(),
            "amount": p.amount,
            "currency": p.currency,
            "organizationShortCode": ORGANIZATION_SHORT_CODE,
            "serviceFee": "0.00",
            "creditedAmount": p.amount,
            "maxRefundableAmount": Amount::from_poisha(p.amount_poisha - refunded.min(p.amount_poisha)).to_string(),
            "merchantInvoiceNumber": p.merchant_invoice_number,
            "statusCode": Code::Successful.as_str(),
            "statusMessage": Code::Successful.message(),
        }))
    }

    /// `payment/refund`: refunds `amount`, or, without an amount, reports the
    /// latest refund (bKash's refund-status call uses the same path).
    pub fn refund(&self, app_key: &str, body: &[u8]) -> Result<Value, Code> {
        let body = Body::parse(body)?;
        let payment_id = body.required("paymentID")?;
        let trx_id = body.required("trxID")?;
        let amount = body.raw("amount").map(Amount::from_json).transpose()?;
        let sku = body.optional("sku")?;
        let reason = body.optional("reason")?;
        let now = self.clock.now();
        let mut p = self.owned_payment(app_key, &payment_id)?;
        let refund = match amount {
            Some(amount) => p
                .refund(&trx_id, amount, sku, reason, || self.trx_id(), now)?
                .clone(),
            None => {
                if p.trx_id.as_deref() != Some(trx_id.as_str()) {
                    return Err(Code::TransactionNotFound);
                }
                p.refunds.last().cloned().ok_or(Code::TransactionNotFound)?
            }
        };
        Ok(json!({
            "originalTrxID": trx_id,
            "refundTrxID": refund.refund_trx_id,
            "transactionStatus": "Completed",
            "amount": refund.amount,
            "currency": p.currency,
            "charge": "0.00",
            "completedTime": api_time(refund.completed_at),
            "statusCode": Code::Successful.as_str(),
            "statusMessage": Code::Successful.message(),
        }))
    }

    /// The payer acts on the checkout page. `hash` must be the one in the bkashURL.
    /// Returns the redirect status and the payment after the action.
    pub fn payer_acts(
        &self,
        payment_id: &str,
        hash: &str,
        action: PayerAction,
        msisdn: Option<&str>,
        failure: Option<Code>,
    ) -> Result<(RedirectStatus, Payment), Code> {
        let now = self.clock.now();
        let mut p = self
            .payments
            .get_mut(payment_id)
            .ok_or(Code::InvalidPaymentId)?;
        if !constant_time_eq(p.signature.as_bytes(), hash.as_bytes()) {
            return Err(Code::InvalidPaymentId);
        }
        let msisdn = msisdn
            .filter(|m| !m.is_empty())
            .unwrap_or(&self.config.default_msisdn);
        self.metrics.payer(action);
        let status = p.payer_acts(
            action,
            msisdn,
            failure.unwrap_or(Code::InsufficientBalance),
            now,
        )?;
        Ok((status, p.clone()))
    }

    /// Whether `payment_id` exists and was created with `app_key`.
    pub fn payment_owned_by(&self, app_key: &str, payment_id: &str) -> bool {
        self.payments
            .get(payment_id)
            .is_some_and(|p| p.app_key == app_key)
    }

    /// Records an execute call a script answered without executing (a scripted
    /// failure or a hang without completion): the ledger keeps every call.
    pub fn note_unexecuted_call(&self, payment_id: &str, answer: &str, rule: &str) {
        let now = self.clock.now();
        if let Some(mut p) = self.payments.get_mut(payment_id) {
            p.execute_calls.push(crate::payments::ExecuteCall {
                at: now,
                status_code: answer.to_owned(),
                scripted: Some(rule.to_owned()),
            });
        }
    }

    /// Appends a rule to the live script, keeping every existing rule's firing
    /// count and the per-operation call counts (so `times` and `nth` hold).
    pub fn add_rule(&self, rule: crate::script::Rule) -> Result<(), crate::script::ScriptError> {
        let mut live = self.script.write();
        let next = live.with_rule(rule)?;
        *live = Arc::new(next);
        Ok(())
    }

    /// The gateway cancels a payment itself (scripted `cancel`).
    pub fn cancel(&self, payment_id: &str) -> bool {
        let now = self.clock.now();
        self.payments
            .get_mut(payment_id)
            .is_some_and(|mut p| p.cancel_by_gateway(now))
    }

    /// Grants spent per app key in the current window.
    pub fn grants_in_window(&self) -> Vec<(String, usize)> {
        self.tokens
            .grants_in_window(self.clock.now(), self.limits().grant_window)
    }

    /// [`Gateway::grants_in_window`] as a JSON object (app key → grants), as
    /// the ledger and the stats show it.
    pub fn grants_in_window_json(&self) -> serde_json::Value {
        serde_json::Value::Object(
            self.grants_in_window()
                .into_iter()
                .map(|(key, n)| (key, serde_json::Value::from(n)))
                .collect(),
        )
    }

    /// Counts of payments per state.
    pub fn state_counts(&self) -> Value {
        let mut counts = std::collections::BTreeMap::<&'static str, u64>::new();
        for p in self.payments.iter() {
            let k = match p.state {
                PaymentState::Initiated => "initiated",
                PaymentState::Authorized => "authorized",
                PaymentState::Completed => "completed",
                PaymentState::Cancelled => "cancelled",
                PaymentState::Failed => "failed",
            };
            *counts.entry(k).or_default() += 1;
        }
        json!(counts)
    }

    /// Records a scripted decision in the fault journal.
    pub fn record_fault(
        &self,
        op: crate::script::Operation,
        rule: &str,
        action: &crate::script::Action,
        payment_id: Option<&str>,
    ) {
        self.metrics.scripted(op);
        tracing::info!(op = op.as_str(), rule, ?action, payment_id, "scripted");
        let mut j = self.journal.lock();
        if j.len() >= JOURNAL_LEN_MAX {
            j.remove(0);
        }
        j.push(Fault {
            at: self.clock.now(),
            op: op.as_str(),
            rule: rule.to_owned(),
            action: action.clone(),
            payment_id: payment_id.map(str::to_owned),
        });
    }

    /// The fault journal.
    pub fn faults(&self) -> Vec<Fault> {
        self.journal.lock().clone()
    }

    /// Forgets every payment, token and grant, and the script.
    pub fn reset(&self) {
        self.journal.lock().clear();
        self.payments.clear();
        self.by_trx.clear();
        self.tokens.clear();
        *self.script.write() = Arc::new(Script::new(ScriptSpec::default(), self.config.seed));
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn token_answer(issued: Issued) -> Value {
    json!({
        "statusCode": Code::Successful.as_str(),
        "statusMessage": Code::Successful.message(),
        "id_token": issued.id_token,
        "token_type": "Bearer",
        "expires_in": issued.expires_in,
        "refresh_token": issued.refresh_token,
    })
}

/// The merchant's callback URL with `paymentID`, `status` and the payment's
/// `signature` appended to whatever query it already has.
pub fn redirect_url(p: &Payment, status: &str) -> String {
    match url::Url::parse(&p.callback_url) {
        Ok(u) => RedirectBase::new(&u).with(p, status),
        Err(_) => p.callback_url.clone(),
    }
}

/// A parsed callback URL cut where the redirect's query pairs go: what
/// `Url::query_pairs_mut().append_pair(..)` would produce, by concatenation.
struct RedirectBase<'u> {
    /// Everything before the fragment.
    head: &'u str,
    /// What separates the existing query from the appended pairs.
    separator: &'static str,
    /// The fragment, kept after the query.
    fragment: Option<&'u str>,
}

impl<'u> RedirectBase<'u> {
    fn new(u: &'u url::Url) -> RedirectBase<'u> {
        let s = u.as_str();
        let fragment = u.fragment();
        let head = match fragment {
            Some(f) => &s[..s.len() - f.len() - 1],
            None => s,
        };
        let separator = match u.query() {
            None => "?",
            Some("") => "",
            Some(_) => "&",
        };
        RedirectBase {
            head,
            separator,
            fragment,
        }
    }

    fn with(&self, p: &Payment, status: &str) -> String {
        let mut out = String::with_capacity(
            self.head.len()
                + 40
                + p.payment_id.len()
                + p.signature.len()
                + self.fragment.map_or(0, str::len),
        );
        out.push_str(self.head);
        out.push_str(self.separator);
        let pairs = [
            ("paymentID=", p.payment_id.as_str()),
            ("&status=", status),
            ("&signature=", p.signature.as_str()),
        ];
        for (key, value) in pairs {
            out.push_str(key);
            out.extend(url::form_urlencoded::byte_serialize(value.as_bytes()));
        }
        if let Some(f) = self.fragment {
            out.push('#');
            out.push_str(f);
        }
        out
    }
}

/// The three redirect URLs of a create answer.
struct RedirectUrls {
    success: String,
    failure: String,
    cancel: String,
}

impl RedirectUrls {
    fn new(callback: &url::Url, p: &Payment) -> RedirectUrls {
        let base = RedirectBase::new(callback);
        RedirectUrls {
            success: base.with(p, RedirectStatus::Success.as_str()),
            failure: base.with(p, RedirectStatus::Failure.as_str()),
            cancel: base.with(p, RedirectStatus::Cancel.as_str()),
        }
    }
}

/// The answer to `create`.
#[derive(Debug, Serialize)]
pub struct CreateAnswer<'p> {
    #[serde(rename = "paymentID")]
    payment_id: &'p str,
    #[serde(rename = "paymentCreateTime")]
    payment_create_time: String,
    #[serde(rename = "transactionStatus")]
    transaction_status: &'static str,
    amount: &'p str,
    currency: &'p str,
    intent: &'p str,
    #[serde(rename = "merchantInvoiceNumber")]
    merchant_invoice_number: &'p str,
    #[serde(rename = "payerReference")]
    payer_reference: &'p str,
    #[serde(rename = "bkashURL")]
    bkash_url: String,
    #[serde(rename = "callbackURL")]
    callback_url: &'p str,
    #[serde(rename = "successCallbackURL")]
    success_callback_url: String,
    #[serde(rename = "failureCallbackURL")]
    failure_callback_url: String,
    #[serde(rename = "cancelledCallbackURL")]
    cancelled_callback_url: String,
    #[serde(rename = "statusCode")]
    status_code: &'static str,
    #[serde(rename = "statusMessage")]
    status_message: &'static str,
}

/// The answer to a successful `execute`.
#[derive(Debug, Serialize)]
struct ExecuteAnswer<'p> {
    #[serde(rename = "paymentID")]
    payment_id: &'p str,
    #[serde(rename = "customerMsisdn")]
    customer_msisdn: Option<&'p str>,
    #[serde(rename = "payerReference")]
    payer_reference: &'p str,
    #[serde(rename = "paymentExecuteTime")]
    payment_execute_time: Option<String>,
    #[serde(rename = "trxID")]
    trx_id: Option<&'p str>,
    #[serde(rename = "transactionStatus")]
    transaction_status: &'static str,
    amount: &'p str,
    currency: &'p str,
    intent: &'p str,
    #[serde(rename = "merchantInvoiceNumber")]
    merchant_invoice_number: &'p str,
    #[serde(rename = "statusCode")]
    status_code: &'static str,
    #[serde(rename = "statusMessage")]
    status_message: &'static str,
}

impl<'p> ExecuteAnswer<'p> {
    fn of(p: &'p Payment) -> ExecuteAnswer<'p> {
        ExecuteAnswer {
            payment_id: &p.payment_id,
            customer_msisdn: p.customer_msisdn.as_deref(),
            payer_reference: &p.payer_reference,
            payment_execute_time: p.executed_at.map(api_time),
            trx_id: p.trx_id.as_deref(),
            transaction_status: p.state.transaction_status(),
            amount: &p.amount,
            currency: &p.currency,
            intent: &p.intent,
            merchant_invoice_number: &p.merchant_invoice_number,
            status_code: Code::Successful.as_str(),
            status_message: Code::Successful.message(),
        }
    }
}

/// The error answer's shape.
#[derive(Serialize)]
struct ErrorAnswer {
    #[serde(rename = "statusCode")]
    status_code: &'static str,
    #[serde(rename = "statusMessage")]
    status_message: &'static str,
}

/// Serializes an answer; our answers (strings and numbers only) cannot fail.
pub fn to_json_bytes<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(1024);
    if serde_json::to_writer(&mut out, v).is_err() {
        out.clear();
        out.extend_from_slice(b"{}");
    }
    out
}

/// The error answer bKash gives: HTTP 200 with a code and a message.
pub fn error_answer(code: Code) -> Value {
    json!({ "statusCode": code.as_str(), "statusMessage": code.message() })
}

/// [`error_answer`] as JSON bytes.
pub fn error_answer_bytes(code: Code) -> Vec<u8> {
    to_json_bytes(&ErrorAnswer {
        status_code: code.as_str(),
        status_message: code.message(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_bkash_shaped_and_unique() {
        let g = Gateway::new(Config::default(), Arc::new(crate::clock::SystemClock));
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let id = g.payment_id();
            assert!(id.starts_with("TR0011") && id.len() == 20, "{id}");
            assert!(seen.insert(id));
            let trx = g.trx_id();
            assert_eq!(trx.len(), 10);
            assert!(
                trx.bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
            );
            assert!(seen.insert(trx));
        }
    }

    #[test]
    fn create_validation_uses_bkash_codes() {
        let ok = r#"{"mode":"0011","payerReference":"p","callbackURL":"http://m/cb","amount":"500","currency":"BDT","intent":"sale","merchantInvoiceNumber":"I1"}"#;
        assert!(Gateway::parse_create(ok.as_bytes()).is_ok());
        let cases = [
            (r#"{"mode":"0011""#.to_string(), Code::InvalidRequestBody),
            (
                ok.replace(r#""mode":"0011","#, ""),
                Code::MandatoryFieldMissing,
            ),
            (
                ok.replace(r#""amount":"500","#, ""),
                Code::MandatoryFieldMissing,
            ),
            (ok.replace("\"500\"", "\"-1\""), Code::InvalidAmount),
            (ok.replace("\"500\"", "\"abc\""), Code::InvalidAmount),
            (ok.replace("\"500\"", "\"1.001\""), Code::InvalidAmount),
            (ok.replace("BDT", "USD"), Code::InvalidCurrency),
            (ok.replace("sale", "authorization"), Code::InvalidIntent),
            (ok.replace("\"0011\"", "\"0001\""), Code::ModeUnavailable),
            (ok.replace("\"0011\"", "\"9\""), Code::ModeInvalid),
            (
                ok.replace("http://m/cb", "javascript:alert(1)"),
                Code::InvalidCallbackUrl,
            ),
            (
                ok.replace("http://m/cb", "not a url"),
                Code::InvalidCallbackUrl,
            ),
            (
                ok.replace("\"I1\"", &format!("\"{}\"", "x".repeat(256))),
                Code::InvalidMerchantInvoiceNumber,
            ),
            (
                ok.replace("\"p\"", &format!("\"{}\"", "x".repeat(256))),
                Code::InvalidPayerReference,
            ),
            (ok.replace("\"p\"", "{}"), Code::InvalidRequestBody),
        ];
        for (body, code) in cases {
            assert_eq!(
                Gateway::parse_create(body.as_bytes()).unwrap_err(),
                code,
                "{body}"
            );
        }
    }

    #[test]
    fn redirect_urls_keep_the_merchants_query() {
        let g = Gateway::new(Config::default(), Arc::new(crate::clock::SystemClock));
        let mut req = Gateway::parse_create(br#"{"mode":"0011","callbackURL":"http://m/cb?x=1","amount":1,"currency":"BDT","intent":"sale","merchantInvoiceNumber":"I"}"#).unwrap();
        req.payer_reference = "p".into();
        let p = g.create("k", req);
        let u = url::Url::parse(&redirect_url(&p, "cancel")).unwrap();
        let q: Vec<(String, String)> = u.query_pairs().map(|(a, b)| (a.into(), b.into())).collect();
        assert_eq!(q[0], ("x".into(), "1".into()));
        assert_eq!(q[1], ("paymentID".into(), p.payment_id.clone()));
        assert_eq!(q[2], ("status".into(), "cancel".into()));
        assert_eq!(q[3], ("signature".into(), p.signature.clone()));
    }
}
