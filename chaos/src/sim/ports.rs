//! The simulation's own ports: a gateway with seeded payers behind it
//! ([`SimGateway`]), its token endpoints with bKash's grant allowance
//! ([`SimTokenEndpoint`]), an API instance's way to it through the real
//! [`TokenManager`] ([`TokenedGateway`]), and the layers that record a
//! history as the ledger and the mailer see it ([`RecordingLedger`],
//! [`RecordingMailer`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use booking::gateway::{
    CreatePayment, CreatedPayment, Executed, ExecutedVia, GatewayError, GatewayPaymentState,
    PaymentGateway, PaymentStatus, codes,
};
use booking::ledger::{Admission, Counters, Hold, Ledger, LedgerError, Step};
use booking::notify::{Confirmation, Mailer, NotifyError};
use booking::{CandidateHash, Clock, Level, PaymentId, RequestToken, SaleId};
use booking_bkash::{IssuedToken, TokenIssuer, TokenManager};
use chrono::{DateTime, Utc};
use mock_gateway::codes::Code;
use mock_gateway::config::{
    GRANT_LIMIT_DEFAULT, GRANT_WINDOW_SECS_DEFAULT, ID_TOKEN_TTL_SECS_DEFAULT,
    REFRESH_TOKEN_TTL_SECS_DEFAULT,
};
use mock_gateway::tokens::{Issued, TokenLimits, Tokens};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::history::{History, OpKind, OpValue};

/// One payment at the simulated gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimPayment {
    /// The merchant invoice it was created with.
    pub invoice: String,
    /// The per-payment signature every redirect of this payment carries.
    pub signature: String,
    /// Where it stands.
    pub state: GatewayPaymentState,
    /// When it was created, clock ms.
    pub created_ms: u64,
    /// After this the gateway executes nothing (the checkout expired).
    pub expires_ms: u64,
    /// When it was executed (money moved), clock ms.
    pub completed_ms: Option<u64>,
}

/// A bKash-like gateway in memory: payments are created by the API (with
/// a per-payment signature, as bKash appends to its redirects), approved,
/// cancelled or failed by the payers (directly, as at the gateway's own
/// pages), executed by the callback and queried by the reconciler and the
/// webhook. A payment completes only when executed before it expires. The
/// payers take the signature for their redirect back
/// ([`SimGateway::signature`]) and the webhook its IPN ([`SimGateway::ipn`])
/// from here.
#[derive(Debug)]
pub struct SimGateway {
    clock: Arc<dyn Clock>,
    checkout_ms: u64,
    next: AtomicU64,
    payments: Mutex<BTreeMap<PaymentId, SimPayment>>,
}

impl SimGateway {
    /// A gateway whose checkouts expire `checkout` after creation.
    pub fn new(clock: Arc<dyn Clock>, checkout: Duration) -> SimGateway {
        SimGateway {
            clock,
            checkout_ms: checkout.as_millis() as u64,
            next: AtomicU64::new(1),
            payments: Mutex::new(BTreeMap::new()),
        }
    }

    fn payer_step(
        &self,
        payment: &PaymentId,
        from: impl Fn(&GatewayPaymentState) -> bool,
        to: GatewayPaymentState,
    ) -> bool {
        let now = self.clock.now_ms();
        let mut book = self.payments.lock();
        match book.get_mut(payment) {
            Some(p) if from(&p.state) && now < p.expires_ms => {
                p.state = to;
                true
            }
            _ => false,
        }
    }

    /// The payer verifies (PIN/OTP): initiated → authorized, before expiry.
    pub fn approve(&self, payment: &PaymentId) -> bool {
        self.payer_step(
            payment,
            |s| *s == GatewayPaymentState::Initiated,
            GatewayPaymentState::Authorized,
        )
    }

    /// The payer cancels: initiated or authorized → cancelled.
    pub fn cancel(&self, payment: &PaymentId) -> bool {
        self.payer_step(
            payment,
            |s| {
                matches!(
                    s,
                    GatewayPaymentState::Initiated | GatewayPaymentState::Authorized
                )
            },
            GatewayPaymentState::Cancelled,
        )
    }

    /// The wallet refuses: initiated or authorized → failed.
    pub fn fail(&self, payment: &PaymentId) -> bool {
        self.payer_step(
            payment,
            |s| {
                matches!(
                    s,
                    GatewayPaymentState::Initiated | GatewayPaymentState::Authorized
                )
            },
            GatewayPaymentState::Failed,
        )
    }

    /// A payment's state.
    pub fn state(&self, payment: &PaymentId) -> Option<GatewayPaymentState> {
        self.payments.lock().get(payment).map(|p| p.state.clone())
    }

    /// Whether `payment` is approved and its checkout still open: an execute
    /// now would complete it.
    pub fn executable(&self, payment: &PaymentId) -> bool {
        let now = self.clock.now_ms();
        self.payments
            .lock()
            .get(payment)
            .is_some_and(|p| p.state == GatewayPaymentState::Authorized && now < p.expires_ms)
    }

    /// The signature the gateway appends to `payment`'s redirects.
    pub fn signature(&self, payment: &PaymentId) -> Option<String> {
        self.payments
            .lock()
            .get(payment)
            .map(|p| p.signature.clone())
    }

    /// The IPN the gateway notifies for `payment` once it completed, as
    /// bKash sends it (the `Message` of the SNS notification): `paymentID`,
    /// `trxID`, `merchantInvoiceNumber`, `transactionStatus`. `None` before
    /// it completed.
    pub fn ipn(&self, payment: &PaymentId) -> Option<String> {
        let book = self.payments.lock();
        let p = book.get(payment)?;
        let GatewayPaymentState::Completed { trx_id } = &p.state else {
            return None;
        };
        let ipn = serde_json::json!({
            "paymentID": payment.as_str(),
            "trxID": trx_id,
            "merchantInvoiceNumber": p.invoice,
            "transactionStatus": "Completed",
        });
        Some(ipn.to_string())
    }

    /// Every payment, by ID.
    pub fn payments(&self) -> BTreeMap<PaymentId, SimPayment> {
        self.payments.lock().clone()
    }
}

/// A payment's signature: 64 bits of a keyed hash of its ID, in hex. Not a
/// secret here (the sim's payers never guess one), but not the ID either, so
/// a redirect without the gateway's signature is refused as in production.
fn signature_of(payment: &PaymentId) -> String {
    let mut h: u64 = 0x5349_4d2d_5349_474e; // the gateway's key
    for b in payment.as_str().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
        h ^= h >> 29;
    }
    format!("{h:016x}")
}

/// A gateway through which the API instance dies right after its execute
/// call (the money may have moved): the answer never comes back, the
/// callback never goes on. The sim's `callback_crash`.
#[derive(Debug)]
pub struct DiesAfterExecute(pub Arc<dyn PaymentGateway>);

#[async_trait]
impl PaymentGateway for DiesAfterExecute {
    async fn create(
        &self,
        req: &CreatePayment,
        within: Duration,
    ) -> Result<CreatedPayment, GatewayError> {
        self.0.create(req, within).await
    }

    async fn execute(
        &self,
        payment: &PaymentId,
        within: Duration,
    ) -> Result<Executed, GatewayError> {
        let _lost = self.0.execute(payment, within).await;
        std::future::pending().await
    }

    async fn query(
        &self,
        payment: &PaymentId,
        within: Duration,
    ) -> Result<PaymentStatus, GatewayError> {
        self.0.query(payment, within).await
    }
}

fn refused(code: &str, message: &str) -> GatewayError {
    GatewayError::Refused {
        code: code.to_owned(),
        message: message.to_owned(),
    }
}

#[async_trait]
impl PaymentGateway for SimGateway {
    async fn create(
        &self,
        req: &CreatePayment,
        _within: Duration,
    ) -> Result<CreatedPayment, GatewayError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let id = PaymentId::parse(&format!("SIM{n:09}"))
            .map_err(|e| GatewayError::Unavailable(e.to_string()))?;
        let now = self.clock.now_ms();
        let signature = signature_of(&id);
        self.payments.lock().insert(
            id.clone(),
            SimPayment {
                invoice: req.invoice.clone(),
                signature: signature.clone(),
                state: GatewayPaymentState::Initiated,
                created_ms: now,
                expires_ms: now.saturating_add(self.checkout_ms),
                completed_ms: None,
            },
        );
        Ok(CreatedPayment {
            bkash_url: format!("https://sim.gateway/checkout/{id}"),
            signature,
            payment_id: id,
        })
    }

    async fn execute(
        &self,
        payment: &PaymentId,
        _within: Duration,
    ) -> Result<Executed, GatewayError> {
        let now = self.clock.now_ms();
        let mut book = self.payments.lock();
        let Some(p) = book.get_mut(payment) else {
            return Err(refused(codes::INVALID_PAYMENT_ID, "Invalid Payment ID"));
        };
        match &p.state {
            GatewayPaymentState::Authorized if now < p.expires_ms => {
                let trx_id = format!("TRX{payment}");
                p.state = GatewayPaymentState::Completed {
                    trx_id: trx_id.clone(),
                };
                p.completed_ms = Some(now);
                Ok(Executed {
                    payment_id: payment.clone(),
                    trx_id,
                    amount: None,
                    via: ExecutedVia::Answer,
                })
            }
            GatewayPaymentState::Completed { .. } => Err(refused(
                codes::EXECUTION_ALREADY_COMPLETED,
                "Execution Already Completed",
            )),
            _ => Err(refused(
                codes::INVALID_PAYMENT_STATE,
                "Invalid Payment State",
            )),
        }
    }

    async fn query(
        &self,
        payment: &PaymentId,
        _within: Duration,
    ) -> Result<PaymentStatus, GatewayError> {
        let book = self.payments.lock();
        let p = book
            .get(payment)
            .ok_or_else(|| refused(codes::INVALID_PAYMENT_ID, "Invalid Payment ID"))?;
        Ok(PaymentStatus {
            payment_id: payment.clone(),
            state: p.state.clone(),
            amount: None,
            invoice: Some(p.invoice.clone()),
        })
    }
}

/// The app key the simulated merchant's instances grant with: one merchant,
/// one allowance.
pub const SIM_APP_KEY: &str = "sim-app-key";

/// bKash's token figures, as the mock gateway enforces them by default: two
/// grants an hour per app key, id tokens living an hour, refresh tokens 28
/// days.
pub fn bkash_token_limits() -> TokenLimits {
    let secs = |s: u64| chrono::Duration::seconds(i64::try_from(s).unwrap_or(i64::MAX));
    TokenLimits {
        grant_limit: GRANT_LIMIT_DEFAULT,
        grant_window: secs(GRANT_WINDOW_SECS_DEFAULT),
        id_ttl: secs(ID_TOKEN_TTL_SECS_DEFAULT),
        refresh_ttl: secs(REFRESH_TOKEN_TTL_SECS_DEFAULT),
    }
}

/// What the token endpoints answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenLog {
    /// When each grant the allowance let through was made, clock ms.
    pub granted_ms: Vec<u64>,
    /// When each grant refused for the allowance was asked for, clock ms.
    pub refused_ms: Vec<u64>,
    /// Refreshes answered (they spend no grant).
    pub refreshes: u64,
}

/// The gateway's token grant and refresh endpoints, in memory, with the
/// mock gateway's rules ([`mock_gateway::tokens::Tokens`]: the rolling
/// per-app-key allowance of `take_grant`, id and refresh tokens that
/// expire, refresh tokens bound to their app key). A grant is spent when the
/// call reaches the endpoint; the answer comes `latency` later (or the call
/// times out at its `within`, the grant spent all the same). Every grant is
/// logged, so the end of a sale can say how many one window held.
#[derive(Debug)]
pub struct SimTokenEndpoint {
    clock: Arc<dyn Clock>,
    started_ms: u64,
    limits: TokenLimits,
    latency: Duration,
    tokens: Tokens,
    next: AtomicU64,
    log: Mutex<TokenLog>,
}

/// Clock ms as the mock's time.
fn at(ms: u64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(i64::try_from(ms).unwrap_or(i64::MAX)).unwrap_or_default()
}

fn code_error(code: Code) -> GatewayError {
    refused(code.as_str(), code.message())
}

impl SimTokenEndpoint {
    /// Endpoints with bKash's figures ([`bkash_token_limits`]) answering
    /// after `latency`.
    pub fn new(clock: Arc<dyn Clock>, latency: Duration) -> SimTokenEndpoint {
        SimTokenEndpoint::with_limits(clock, bkash_token_limits(), latency)
    }

    /// Endpoints enforcing `limits`. The log's times are `clock`'s;
    /// [`SimTokenEndpoint::regrants`] gives them as ms since this call.
    pub fn with_limits(
        clock: Arc<dyn Clock>,
        limits: TokenLimits,
        latency: Duration,
    ) -> SimTokenEndpoint {
        SimTokenEndpoint {
            started_ms: clock.now_ms(),
            clock,
            limits,
            latency,
            tokens: Tokens::default(),
            next: AtomicU64::new(1),
            log: Mutex::new(TokenLog::default()),
        }
    }

    fn fresh(&self) -> String {
        format!("sim-token-{}", self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// The answer, `latency` after the call (a timeout if `within` ends
    /// first: the call's effect stands).
    async fn answer(
        &self,
        within: Duration,
        answer: Result<Issued, Code>,
    ) -> Result<IssuedToken, GatewayError> {
        if self.latency > within {
            tokio::time::sleep(within).await;
            return Err(GatewayError::Timeout);
        }
        tokio::time::sleep(self.latency).await;
        answer.map_err(code_error).map(|t| IssuedToken {
            id_token: t.id_token,
            refresh_token: Some(t.refresh_token),
            expires_in: Duration::from_secs(t.expires_in),
        })
    }

    /// Whether an API call with `id_token` is let through now (the
    /// gateway's `Authorization` check).
    pub fn check(&self, id_token: &str) -> Result<(), GatewayError> {
        self.tokens
            .check(id_token, SIM_APP_KEY, at(self.clock.now_ms()))
            .map_err(code_error)
    }

    /// The rolling window of the allowance.
    pub fn window(&self) -> Duration {
        self.limits.grant_window.to_std().unwrap_or_default()
    }

    /// What the endpoints answered so far.
    pub fn log(&self) -> TokenLog {
        self.log.lock().clone()
    }

    /// Grants the app key spent in the window ending now (what the mock's
    /// ledger reports as `grants_in_window`).
    pub fn grants_in_window(&self) -> usize {
        self.tokens
            .grants_in_window(at(self.clock.now_ms()), self.limits.grant_window)
            .into_iter()
            .filter(|(key, _)| key == SIM_APP_KEY)
            .map(|(_, n)| n)
            .sum()
    }

    /// The most grants any one window held: the grants from each grant on,
    /// less than a window later.
    pub fn busiest_window(&self) -> usize {
        let window = u64::try_from(self.window().as_millis()).unwrap_or(u64::MAX);
        let granted = &self.log.lock().granted_ms;
        granted
            .iter()
            .map(|t| {
                granted
                    .iter()
                    .filter(|u| **u >= *t && **u - *t < window)
                    .count()
            })
            .max()
            .unwrap_or(0)
    }

    /// What the sale spent, for the `one_token_grant` check: grants in the
    /// busiest window, grants refused, refreshes.
    pub fn spent(&self) -> String {
        let log = self.log();
        format!(
            "app key {SIM_APP_KEY}: {} grant(s) in the busiest {} s window, {} in all, \
             {} refused for the allowance, {} refresh(es)",
            self.busiest_window(),
            self.window().as_secs(),
            log.granted_ms.len(),
            log.refused_ms.len(),
            log.refreshes
        )
    }

    /// The `one_token_grant` violations: the fleet shares one token, so a
    /// window holds one grant at most (refreshes spend none), and no grant
    /// is refused for the allowance.
    pub fn regrants(&self) -> Vec<String> {
        let log = self.log();
        let since = |times: &[u64]| {
            times
                .iter()
                .map(|t| t.saturating_sub(self.started_ms))
                .collect::<Vec<_>>()
        };
        let mut out = Vec::new();
        let busiest = self.busiest_window();
        if busiest > 1 {
            out.push(format!(
                "app key {SIM_APP_KEY}: {busiest} grants in one window, granted at ms {:?}",
                since(&log.granted_ms)
            ));
        }
        if !log.refused_ms.is_empty() {
            out.push(format!(
                "app key {SIM_APP_KEY}: {} grant(s) refused for the allowance, at ms {:?}",
                log.refused_ms.len(),
                since(&log.refused_ms)
            ));
        }
        out
    }
}

#[async_trait]
impl TokenIssuer for SimTokenEndpoint {
    async fn grant(&self, within: Duration) -> Result<IssuedToken, GatewayError> {
        let now = self.clock.now_ms();
        let answer = self
            .tokens
            .grant(SIM_APP_KEY, at(now), self.limits, || self.fresh());
        {
            let mut log = self.log.lock();
            match &answer {
                Ok(_) => log.granted_ms.push(now),
                Err(_) => log.refused_ms.push(now),
            }
        }
        self.answer(within, answer).await
    }

    async fn refresh(
        &self,
        refresh_token: &str,
        within: Duration,
    ) -> Result<IssuedToken, GatewayError> {
        let now = at(self.clock.now_ms());
        let answer = self
            .tokens
            .refresh(SIM_APP_KEY, refresh_token, now, self.limits, || {
                self.fresh()
            });
        if answer.is_ok() {
            self.log.lock().refreshes += 1;
        }
        self.answer(within, answer).await
    }
}

/// One API instance's gateway: each call (create, execute, query) takes the
/// fleet's token from the instance's own [`TokenManager`] first, as
/// `booking_bkash::BkashGateway` does, within the call's budget; without one
/// it is refused ([`GatewayError::TokenUnavailable`]) and the gateway is not
/// called. A token the endpoint no longer accepts is dropped for the fleet.
/// The call gets what is left of its budget.
#[derive(Debug)]
pub struct TokenedGateway {
    tokens: TokenManager,
    endpoint: Arc<SimTokenEndpoint>,
    inner: Arc<dyn PaymentGateway>,
}

impl TokenedGateway {
    /// Calls to `inner` with tokens from `tokens`, checked by `endpoint`.
    pub fn new(
        tokens: TokenManager,
        endpoint: Arc<SimTokenEndpoint>,
        inner: Arc<dyn PaymentGateway>,
    ) -> TokenedGateway {
        TokenedGateway {
            tokens,
            endpoint,
            inner,
        }
    }

    /// The instance's token manager.
    pub fn tokens(&self) -> &TokenManager {
        &self.tokens
    }

    /// A token the gateway accepts, within `within`: what is left of it.
    async fn authorized(&self, within: Duration) -> Result<Duration, GatewayError> {
        let deadline = Instant::now() + within;
        let token = self.tokens.token_until(deadline).await?;
        if let Err(e) = self.endpoint.check(&token) {
            tracing::debug!(error = %e, "the gateway refused the token");
            self.tokens.invalidate(&token).await;
            return Err(GatewayError::TokenUnavailable);
        }
        Ok(deadline.saturating_duration_since(Instant::now()))
    }
}

#[async_trait]
impl PaymentGateway for TokenedGateway {
    async fn create(
        &self,
        req: &CreatePayment,
        within: Duration,
    ) -> Result<CreatedPayment, GatewayError> {
        let left = self.authorized(within).await?;
        self.inner.create(req, left).await
    }

    async fn execute(
        &self,
        payment: &PaymentId,
        within: Duration,
    ) -> Result<Executed, GatewayError> {
        let left = self.authorized(within).await?;
        self.inner.execute(payment, left).await
    }

    async fn query(
        &self,
        payment: &PaymentId,
        within: Duration,
    ) -> Result<PaymentStatus, GatewayError> {
        let left = self.authorized(within).await?;
        self.inner.query(payment, left).await
    }
}

/// A refused admission's name, for the history.
fn refusal_name(admission: &Admission) -> &'static str {
    match admission {
        Admission::Admitted { .. } => "admitted",
        Admission::LevelFull => "level_full",
        Admission::SaleClosed => "sale_closed",
        Admission::NotEligible => "not_eligible",
        Admission::UnknownLevel => "unknown_level",
        Admission::AlreadyHolding { .. } => "already_holding",
        Admission::AlreadyPaid { .. } => "already_paid",
    }
}

/// The history's process for a candidate's operations.
pub fn process_of(candidate: &CandidateHash) -> u64 {
    u64::from_str_radix(&candidate.as_str()[..15], 16).unwrap_or(0)
}

/// A ledger that records every admission and every release (undo or
/// payment-guarded release) as the ledger answered it, for the history's
/// checkers. An error is an unknown outcome (a reset may have applied it); a
/// call dropped half-way (a request deadline) stays unknown.
#[derive(Debug)]
pub struct RecordingLedger {
    inner: Arc<dyn Ledger>,
    history: History,
    /// The level of each admission's token and of each attached payment.
    levels: Mutex<(HashMap<RequestToken, Level>, HashMap<PaymentId, Level>)>,
    admitted: AtomicU64,
    released: AtomicU64,
    undone: AtomicU64,
}

impl RecordingLedger {
    /// Records the calls to `inner` into `history`.
    pub fn new(inner: Arc<dyn Ledger>, history: History) -> RecordingLedger {
        RecordingLedger {
            inner,
            history,
            levels: Mutex::new((HashMap::new(), HashMap::new())),
            admitted: AtomicU64::new(0),
            released: AtomicU64::new(0),
            undone: AtomicU64::new(0),
        }
    }

    /// Admissions the ledger answered `Admitted`.
    pub fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::Relaxed)
    }

    /// Payment-guarded releases the ledger answered `Done`.
    pub fn released(&self) -> u64 {
        self.released.load(Ordering::Relaxed)
    }

    /// Undos of admissions the ledger answered `Done`.
    pub fn undone(&self) -> u64 {
        self.undone.load(Ordering::Relaxed)
    }

    fn release_value(step: Step) -> OpValue {
        match step {
            Step::Done => OpValue::Released,
            Step::NoMatch => OpValue::Refused {
                reason: "no_match".into(),
            },
            Step::Paid => OpValue::Refused {
                reason: "paid".into(),
            },
        }
    }
}

#[async_trait]
impl Ledger for RecordingLedger {
    async fn reset(&self, sale: &SaleId, levels: &[(Level, u32)]) -> Result<(), LedgerError> {
        self.inner.reset(sale, levels).await
    }

    async fn load_candidates(
        &self,
        sale: &SaleId,
        candidates: &[CandidateHash],
    ) -> Result<u64, LedgerError> {
        self.inner.load_candidates(sale, candidates).await
    }

    async fn set_open(&self, sale: &SaleId, open: bool) -> Result<(), LedgerError> {
        self.inner.set_open(sale, open).await
    }

    async fn admit(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        level: &Level,
        token: &RequestToken,
        now_ms: u64,
    ) -> Result<Admission, LedgerError> {
        let op = self.history.invoke(
            process_of(candidate),
            OpKind::Admit {
                candidate: candidate.clone(),
                level: level.clone(),
            },
        );
        self.levels.lock().0.insert(token.clone(), level.clone());
        let answer = self
            .inner
            .admit(sale, candidate, level, token, now_ms)
            .await;
        match &answer {
            Ok(Admission::Admitted { .. }) => {
                self.admitted.fetch_add(1, Ordering::Relaxed);
                op.ok(OpValue::Admitted { payment: None });
            }
            Ok(refusal) => op.ok(OpValue::Refused {
                reason: refusal_name(refusal).to_owned(),
            }),
            Err(_) => op.unknown(),
        }
        answer
    }

    async fn attach_payment(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        token: &RequestToken,
        payment_id: &PaymentId,
        deadline_ms: u64,
    ) -> Result<Step, LedgerError> {
        {
            let mut levels = self.levels.lock();
            if let Some(level) = levels.0.get(token).cloned() {
                levels.1.insert(payment_id.clone(), level);
            }
        }
        self.inner
            .attach_payment(sale, candidate, token, payment_id, deadline_ms)
            .await
    }

    async fn undo_admission(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        token: &RequestToken,
    ) -> Result<Step, LedgerError> {
        let level = self.levels.lock().0.get(token).cloned();
        let op = level.map(|level| {
            self.history.invoke(
                process_of(candidate),
                OpKind::Release {
                    candidate: candidate.clone(),
                    level,
                    payment: None,
                },
            )
        });
        let answer = self.inner.undo_admission(sale, candidate, token).await;
        if answer == Ok(Step::Done) {
            self.undone.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(op) = op {
            match &answer {
                Ok(step) => op.ok(Self::release_value(*step)),
                Err(_) => op.unknown(),
            }
        }
        answer
    }

    async fn release(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<Step, LedgerError> {
        let level = self.levels.lock().1.get(payment_id).cloned();
        let op = level.map(|level| {
            self.history.invoke(
                process_of(candidate),
                OpKind::Release {
                    candidate: candidate.clone(),
                    level,
                    payment: Some(payment_id.clone()),
                },
            )
        });
        let answer = self.inner.release(sale, candidate, payment_id).await;
        if answer == Ok(Step::Done) {
            self.released.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(op) = op {
            match &answer {
                Ok(step) => op.ok(Self::release_value(*step)),
                Err(_) => op.unknown(),
            }
        }
        answer
    }

    async fn mark_paid(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<Step, LedgerError> {
        self.inner.mark_paid(sale, candidate, payment_id).await
    }

    async fn extend(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
        deadline_ms: u64,
    ) -> Result<Step, LedgerError> {
        self.inner
            .extend(sale, candidate, payment_id, deadline_ms)
            .await
    }

    async fn hold(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
    ) -> Result<Option<Hold>, LedgerError> {
        self.inner.hold(sale, candidate).await
    }

    async fn paid(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
    ) -> Result<Option<PaymentId>, LedgerError> {
        self.inner.paid(sale, candidate).await
    }

    async fn stale_pending(
        &self,
        sale: &SaleId,
        admitted_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<(CandidateHash, Hold)>, LedgerError> {
        self.inner
            .stale_pending(sale, admitted_before_ms, limit)
            .await
    }

    async fn stale_held(
        &self,
        sale: &SaleId,
        deadline_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<(CandidateHash, Hold)>, LedgerError> {
        self.inner.stale_held(sale, deadline_before_ms, limit).await
    }

    async fn counters(&self, sale: &SaleId) -> Result<Counters, LedgerError> {
        self.inner.counters(sale).await
    }
}

/// A mailer that records every send in the history (an error is unknown:
/// the message may have gone out).
#[derive(Debug)]
pub struct RecordingMailer {
    inner: Arc<dyn Mailer>,
    history: History,
}

impl RecordingMailer {
    /// Records the sends to `inner` into `history`.
    pub fn new(inner: Arc<dyn Mailer>, history: History) -> RecordingMailer {
        RecordingMailer { inner, history }
    }
}

#[async_trait]
impl Mailer for RecordingMailer {
    async fn send(&self, confirmation: &Confirmation) -> Result<(), NotifyError> {
        let op = self.history.invoke(
            process_of(&confirmation.candidate),
            OpKind::Email {
                candidate: confirmation.candidate.clone(),
                payment: confirmation.payment_id.clone(),
            },
        );
        let sent = self.inner.send(confirmation).await;
        match &sent {
            Ok(()) => op.ok(OpValue::Sent),
            Err(_) => op.unknown(),
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use booking::ManualClock;

    #[tokio::test]
    async fn payments_complete_only_when_approved_and_executed_before_expiry() {
        let clock = ManualClock::new(1_000);
        let gw = SimGateway::new(Arc::new(clock.clone()), Duration::from_secs(600));
        let req = CreatePayment {
            invoice: "inv".into(),
            amount: "500".into(),
            payer_reference: "p".into(),
            callback_url: "u".into(),
        };
        let w = Duration::from_secs(8);
        let a = gw.create(&req, w).await.unwrap().payment_id;
        let b = gw.create(&req, w).await.unwrap().payment_id;
        assert_ne!(a, b);
        // not approved: the execute is refused and nothing moves
        let e = gw.execute(&a, w).await.unwrap_err();
        assert_eq!(e.refused_code(), Some(codes::INVALID_PAYMENT_STATE));
        assert!(gw.approve(&a));
        assert!(!gw.approve(&a), "approved once");
        let done = gw.execute(&a, w).await.unwrap();
        assert_eq!(done.trx_id, format!("TRX{a}"));
        let again = gw.execute(&a, w).await.unwrap_err();
        assert_eq!(
            again.refused_code(),
            Some(codes::EXECUTION_ALREADY_COMPLETED)
        );
        assert!(!gw.cancel(&a), "a completed payment is not cancelled");
        // expired: approved too late, executed too late
        assert!(gw.approve(&b));
        clock.advance(Duration::from_secs(600));
        assert!(gw.execute(&b, w).await.is_err());
        assert_eq!(gw.state(&b), Some(GatewayPaymentState::Authorized));
        let q = gw.query(&a, w).await.unwrap();
        assert!(matches!(q.state, GatewayPaymentState::Completed { .. }));
        let missing = PaymentId::parse("NOPE").unwrap();
        assert!(gw.query(&missing, w).await.is_err());
        assert_eq!(q.invoice.as_deref(), Some("inv"));
    }

    #[tokio::test]
    async fn signatures_are_per_payment_and_the_ipn_comes_only_once_completed() {
        let clock = ManualClock::new(1_000);
        let gw = SimGateway::new(Arc::new(clock.clone()), Duration::from_secs(600));
        let req = CreatePayment {
            invoice: "sim-c-1".into(),
            amount: "500".into(),
            payer_reference: "p".into(),
            callback_url: "u".into(),
        };
        let w = Duration::from_secs(8);
        let a = gw.create(&req, w).await.unwrap();
        let b = gw.create(&req, w).await.unwrap();
        assert_eq!(gw.signature(&a.payment_id), Some(a.signature.clone()));
        assert_ne!(a.signature, b.signature);
        assert!(!a.signature.contains(a.payment_id.as_str()));
        assert_eq!(gw.ipn(&a.payment_id), None, "not completed yet");
        assert!(!gw.executable(&a.payment_id));
        assert!(gw.approve(&a.payment_id));
        assert!(gw.executable(&a.payment_id));
        gw.execute(&a.payment_id, w).await.unwrap();
        let ipn: serde_json::Value = serde_json::from_str(&gw.ipn(&a.payment_id).unwrap()).unwrap();
        assert_eq!(ipn["paymentID"], a.payment_id.as_str());
        assert_eq!(ipn["trxID"], format!("TRX{}", a.payment_id));
        assert_eq!(ipn["merchantInvoiceNumber"], "sim-c-1");
        assert_eq!(ipn["transactionStatus"], "Completed");
    }

    const EPOCH: u64 = 1_800_000_000_000;
    const HOUR: Duration = Duration::from_secs(3600);

    fn refused_code(e: &GatewayError) -> Option<&str> {
        e.refused_code()
    }

    #[tokio::test(start_paused = true)]
    async fn the_endpoint_allows_two_grants_an_hour_and_refreshes_spend_none() {
        let clock = crate::injector::TokioClock::new(EPOCH);
        let ep = SimTokenEndpoint::new(Arc::new(clock), Duration::ZERO);
        let w = Duration::from_secs(1);
        let first = ep.grant(w).await.unwrap();
        assert_eq!(first.expires_in, HOUR, "bKash's id tokens live an hour");
        assert!(ep.check(&first.id_token).is_ok());
        assert!(ep.check("forged").is_err());
        ep.grant(w).await.unwrap();
        let third = ep.grant(w).await.unwrap_err();
        assert_eq!(refused_code(&third), Some("2081"), "{third}");
        assert_eq!(ep.busiest_window(), 2);
        assert_eq!(ep.grants_in_window(), 2);
        assert_eq!(ep.regrants().len(), 2, "{:?}", ep.regrants());
        assert!(
            ep.spent()
                .contains("2 grant(s) in the busiest 3600 s window")
        );
        // a refresh spends nothing and gives a token the gateway takes
        tokio::time::sleep(Duration::from_secs(600)).await;
        let rt = first.refresh_token.clone().unwrap();
        let refreshed = ep.refresh(&rt, w).await.unwrap();
        assert_eq!(refreshed.refresh_token.as_deref(), Some(rt.as_str()));
        assert!(ep.check(&refreshed.id_token).is_ok());
        assert!(ep.refresh("unknown", w).await.is_err());
        let log = ep.log();
        assert_eq!((log.granted_ms.len(), log.refused_ms.len()), (2, 1));
        assert_eq!(log.refreshes, 1);
        // an hour on: the first token is refused, the window has rolled
        tokio::time::sleep(HOUR - Duration::from_secs(600)).await;
        assert_eq!(
            refused_code(&ep.check(&first.id_token).unwrap_err()),
            Some("2080")
        );
        ep.grant(w).await.unwrap();
        assert_eq!(ep.grants_in_window(), 1);
        assert_eq!(ep.busiest_window(), 2, "the busiest window is kept");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_grant_times_out_at_the_callers_budget_spent_all_the_same() {
        let clock = crate::injector::TokioClock::new(EPOCH);
        let ep = SimTokenEndpoint::new(Arc::new(clock), Duration::from_secs(5));
        let started = Instant::now();
        assert_eq!(
            ep.grant(Duration::from_secs(1)).await,
            Err(GatewayError::Timeout)
        );
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        assert_eq!(ep.log().granted_ms.len(), 1);
        let t = ep.grant(Duration::from_secs(30)).await.unwrap();
        assert_eq!(started.elapsed(), Duration::from_secs(6));
        assert!(ep.check(&t.id_token).is_ok());
    }

    /// `n` API instances' gateways over one coordination store and one
    /// endpoint (which answers after `latency`), the zoo's switch as `bugs`.
    fn fleet(
        n: usize,
        latency: Duration,
        bugs: booking::Bugs,
    ) -> (Arc<SimTokenEndpoint>, Arc<SimGateway>, Vec<TokenedGateway>) {
        let clock: Arc<dyn Clock> = Arc::new(crate::injector::TokioClock::new(EPOCH));
        let ep = Arc::new(SimTokenEndpoint::new(clock.clone(), latency));
        let gw = Arc::new(SimGateway::new(clock.clone(), Duration::from_secs(600)));
        let store: Arc<dyn booking::Coordination> = Arc::new(
            booking_embedded::coordination::EmbeddedCoordination::new(clock.clone()),
        );
        let entropy: Arc<dyn booking::Entropy> = Arc::new(booking::SeededEntropy::new(1));
        let settings = booking::Settings {
            bugs,
            ..booking::Settings::default()
        };
        let instances = (0..n)
            .map(|_| {
                let tokens = TokenManager::with_entropy(
                    ep.clone(),
                    store.clone(),
                    clock.clone(),
                    booking_bkash::TokenConfig::from_settings(&settings),
                    "sim",
                    entropy.clone(),
                );
                TokenedGateway::new(tokens, ep.clone(), gw.clone())
            })
            .collect();
        (ep, gw, instances)
    }

    fn request() -> CreatePayment {
        CreatePayment {
            invoice: "inv".into(),
            amount: "500".into(),
            payer_reference: "p".into(),
            callback_url: "u".into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn instances_paying_at_once_wait_for_one_slow_grant() {
        // the grant outlasts the requests' 8 s: they give up, it lands
        let (ep, gw, instances) = fleet(3, Duration::from_secs(20), booking::Bugs::none());
        let w = Duration::from_secs(8);
        let req = request();
        let (a, b, c) = tokio::join!(
            instances[0].create(&req, w),
            instances[1].create(&req, w),
            instances[2].create(&req, w)
        );
        for answer in [a, b, c] {
            assert_eq!(answer.unwrap_err(), GatewayError::TokenUnavailable);
        }
        assert!(gw.payments().is_empty(), "no token, no call");
        tokio::time::sleep(Duration::from_secs(12)).await;
        for g in &instances {
            g.create(&req, w).await.unwrap();
        }
        assert_eq!(gw.payments().len(), 3);
        assert_eq!(ep.log().granted_ms.len(), 1);
        assert!(ep.regrants().is_empty());
        let grants: u64 = instances.iter().map(|g| g.tokens().stats().grants).sum();
        assert_eq!(grants, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn with_the_zoo_switch_each_instance_grants_and_the_third_is_locked_out() {
        let bugs = booking::Bugs::of([booking::Bug::TokenGrantPerInstance]);
        let (ep, gw, instances) = fleet(3, Duration::from_millis(300), bugs);
        let w = Duration::from_secs(8);
        let req = request();
        let (a, b, c) = tokio::join!(
            instances[0].create(&req, w),
            instances[1].create(&req, w),
            instances[2].create(&req, w)
        );
        let answers = [a, b, c];
        assert_eq!(answers.iter().filter(|a| a.is_ok()).count(), 2);
        assert_eq!(
            answers.iter().filter(|a| a.is_err()).collect::<Vec<_>>(),
            [&Err(GatewayError::TokenUnavailable)]
        );
        assert_eq!(gw.payments().len(), 2);
        let log = ep.log();
        assert_eq!((log.granted_ms.len(), log.refused_ms.len()), (2, 1));
        assert_eq!(ep.regrants().len(), 2, "{:?}", ep.regrants());
    }

    #[tokio::test(start_paused = true)]
    async fn a_token_the_gateway_no_longer_takes_is_dropped_and_replaced() {
        let (ep, gw, instances) = fleet(1, Duration::ZERO, booking::Bugs::none());
        let g = &instances[0];
        let w = Duration::from_secs(8);
        let id = g.tokens().token(w).await.unwrap();
        // the gateway forgets its tokens (a restart of its token store)
        ep.tokens.clear();
        assert_eq!(
            g.query(&PaymentId::parse("SIM1").unwrap(), w).await,
            Err(GatewayError::TokenUnavailable)
        );
        assert!(gw.payments().is_empty());
        // the refresh token is gone too: the next call grants
        g.create(&request(), w).await.unwrap();
        assert_ne!(g.tokens().token(w).await.unwrap(), id);
        assert_eq!(ep.log().granted_ms.len(), 2);
    }
}

/// The queue as the worker sees it, remembering which bookings' messages
/// the worker has finished with (deleted), so a confirmation can tell "the
/// worker has not got to it yet" from "the worker got to it and left the
/// wrong record".
#[derive(Debug)]
pub struct TrackingQueue {
    inner: Arc<dyn booking::queue::Queue>,
    receipts: Mutex<HashMap<String, PaymentId>>,
    handled: Mutex<std::collections::BTreeSet<PaymentId>>,
}

impl TrackingQueue {
    /// Tracks `inner`.
    pub fn new(inner: Arc<dyn booking::queue::Queue>) -> TrackingQueue {
        TrackingQueue {
            inner,
            receipts: Mutex::new(HashMap::new()),
            handled: Mutex::new(std::collections::BTreeSet::new()),
        }
    }

    /// Whether the worker deleted a message of the booking with `payment`.
    pub fn handled(&self, payment: &PaymentId) -> bool {
        self.handled.lock().contains(payment)
    }
}

#[async_trait]
impl booking::queue::Queue for TrackingQueue {
    async fn send(
        &self,
        message: booking::queue::Message,
    ) -> Result<booking::queue::SendOutcome, booking::queue::QueueError> {
        self.inner.send(message).await
    }

    async fn receive(
        &self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<booking::queue::Received>, booking::queue::QueueError> {
        let got = self.inner.receive(max, wait).await?;
        let mut receipts = self.receipts.lock();
        for r in &got {
            if let Ok(m) = serde_json::from_str::<booking::AdmittedBooking>(&r.message.body) {
                receipts.insert(r.receipt.0.clone(), m.payment_id);
            }
        }
        Ok(got)
    }

    async fn delete(
        &self,
        receipt: &booking::queue::ReceiptHandle,
    ) -> Result<(), booking::queue::QueueError> {
        self.inner.delete(receipt).await?;
        if let Some(p) = self.receipts.lock().remove(&receipt.0) {
            self.handled.lock().insert(p);
        }
        Ok(())
    }

    async fn change_visibility(
        &self,
        receipt: &booking::queue::ReceiptHandle,
        timeout: Duration,
    ) -> Result<(), booking::queue::QueueError> {
        self.inner.change_visibility(receipt, timeout).await
    }

    async fn oldest_age(&self) -> Result<Option<Duration>, booking::queue::QueueError> {
        self.inner.oldest_age().await
    }

    async fn depth(&self) -> Result<booking::queue::QueueDepth, booking::queue::QueueError> {
        self.inner.depth().await
    }

    async fn dead_letters(
        &self,
    ) -> Result<Vec<booking::queue::Message>, booking::queue::QueueError> {
        self.inner.dead_letters().await
    }
}
