//! Payments and their state machine: the gateway's ground truth.
//!
//! ```text
//!  create ──► Initiated ──pay──► Authorized ──execute──► Completed ──refund──► (refunded)
//!                 │                  │
//!                 ├──cancel──────────┴──► Cancelled
//!                 └──fail──► Failed
//! ```
//! Transitions are pure methods on [`Payment`]; the caller supplies the time and
//! fresh IDs. Every execute call and payer action is kept on the payment, so the
//! ledger read by the audit says what the gateway really did.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::codes::Code;
use crate::wire::Amount;

/// Where a payment stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PaymentState {
    /// Created; the payer has not acted.
    Initiated,
    /// The payer approved; the merchant has not executed.
    Authorized,
    /// Executed: money moved. Final except for refunds.
    Completed,
    /// The payer (or a script) cancelled.
    Cancelled,
    /// The payer's wallet refused.
    Failed,
}

impl PaymentState {
    /// bKash's `transactionStatus` for this state. An authorised payment is still
    /// "Initiated" to the merchant until executed; `verificationStatus` tells them apart.
    pub fn transaction_status(self) -> &'static str {
        match self {
            PaymentState::Initiated | PaymentState::Authorized => "Initiated",
            PaymentState::Completed => "Completed",
            PaymentState::Cancelled => "Cancelled",
            PaymentState::Failed => "Failed",
        }
    }

    /// bKash's `verificationStatus`: whether the payer has verified (PIN/OTP).
    pub fn verification_status(self) -> &'static str {
        match self {
            PaymentState::Initiated | PaymentState::Cancelled | PaymentState::Failed => {
                "Incomplete"
            }
            PaymentState::Authorized | PaymentState::Completed => "Complete",
        }
    }
}

/// What the payer did on the checkout page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PayerAction {
    /// Approve the payment.
    Pay,
    /// Cancel it.
    Cancel,
    /// Fail it (wrong PIN, insufficient balance...).
    Fail,
}

impl PayerAction {
    /// Parses the checkout form's `action` field.
    pub fn parse(s: &str) -> Option<PayerAction> {
        match s {
            "pay" => Some(PayerAction::Pay),
            "cancel" => Some(PayerAction::Cancel),
            "fail" => Some(PayerAction::Fail),
            _ => None,
        }
    }
}

/// The `status` a redirect carries back to the merchant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RedirectStatus {
    /// `status=success`
    Success,
    /// `status=failure`
    Failure,
    /// `status=cancel`
    Cancel,
}

impl RedirectStatus {
    /// The query value.
    pub fn as_str(self) -> &'static str {
        match self {
            RedirectStatus::Success => "success",
            RedirectStatus::Failure => "failure",
            RedirectStatus::Cancel => "cancel",
        }
    }
}

/// One execute call as the gateway saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecuteCall {
    /// When it arrived.
    pub at: DateTime<Utc>,
    /// "0000" if it completed the payment, else the code answered.
    pub status_code: String,
    /// The scripted rule that shaped the answer, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scripted: Option<String>,
}

/// One payer action as the gateway saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PayerEvent {
    /// When.
    pub at: DateTime<Utc>,
    /// What.
    pub action: PayerAction,
    /// "0000" if it changed or confirmed the state, else the refusal code.
    pub status_code: String,
}

/// A refund of part or all of a completed payment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Refund {
    /// The refund's own transaction ID.
    pub refund_trx_id: String,
    /// How much.
    pub amount: String,
    /// When.
    pub completed_at: DateTime<Utc>,
    /// Merchant's SKU field.
    pub sku: Option<String>,
    /// Merchant's reason field.
    pub reason: Option<String>,
}

/// A payment, with everything that happened to it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Payment {
    /// bKash `paymentID`.
    #[serde(rename = "paymentID")]
    pub payment_id: String,
    /// The app key that created it.
    pub app_key: String,
    /// `mode` as sent ("0011").
    pub mode: String,
    /// `payerReference` as sent.
    pub payer_reference: String,
    /// `callbackURL` as sent.
    #[serde(rename = "callbackURL")]
    pub callback_url: String,
    /// Amount.
    pub amount: String,
    /// Amount in poisha, for sums.
    pub amount_poisha: u64,
    /// "BDT".
    pub currency: String,
    /// "sale".
    pub intent: String,
    /// `merchantInvoiceNumber` as sent.
    pub merchant_invoice_number: String,
    /// The per-payment signature carried by every redirect of this payment.
    pub signature: String,
    /// State.
    pub state: PaymentState,
    /// When created.
    pub created_at: DateTime<Utc>,
    /// When the payer approved.
    pub authorized_at: Option<DateTime<Utc>>,
    /// When executed.
    pub executed_at: Option<DateTime<Utc>>,
    /// When cancelled or failed.
    pub ended_at: Option<DateTime<Utc>>,
    /// The transaction ID, once executed.
    #[serde(rename = "trxID")]
    pub trx_id: Option<String>,
    /// The payer's wallet number.
    pub customer_msisdn: Option<String>,
    /// Why a failed payment failed.
    pub failure_code: Option<String>,
    /// Every execute call.
    pub execute_calls: Vec<ExecuteCall>,
    /// Every payer action.
    pub payer_events: Vec<PayerEvent>,
    /// Refunds.
    pub refunds: Vec<Refund>,
}

/// What `create` was asked for, already parsed.
#[derive(Debug, Clone)]
pub struct NewPayment {
    /// `mode`
    pub mode: String,
    /// `payerReference`
    pub payer_reference: String,
    /// `callbackURL`
    pub callback_url: String,
    /// `amount`
    pub amount: Amount,
    /// `currency`
    pub currency: String,
    /// `intent`
    pub intent: String,
    /// `merchantInvoiceNumber`
    pub merchant_invoice_number: String,
}

impl Payment {
    /// A new payment in `Initiated`.
    pub fn new(
        payment_id: String,
        app_key: String,
        signature: String,
        req: NewPayment,
        now: DateTime<Utc>,
    ) -> Payment {
        Payment {
            payment_id,
            app_key,
            mode: req.mode,
            payer_reference: req.payer_reference,
            callback_url: req.callback_url,
            amount: req.amount.to_string(),
            amount_poisha: req.amount.poisha(),
            currency: req.currency,
            intent: req.intent,
            merchant_invoice_number: req.merchant_invoice_number,
            signature,
            state: PaymentState::Initiated,
            created_at: now,
            authorized_at: None,
            executed_at: None,
            ended_at: None,
            trx_id: None,
            customer_msisdn: None,
            failure_code: None,
            execute_calls: Vec::new(),
            payer_events: Vec::new(),
            refunds: Vec::new(),
        }
    }

    /// The payer acts. Paying again while still authorised repeats the success
    /// redirect (a second tab); acting on a finished payment is refused.
    pub fn payer_acts(
        &mut self,
        action: PayerAction,
        msisdn: &str,
        failure: Code,
        now: DateTime<Utc>,
    ) -> Result<RedirectStatus, Code> {
        let result = match (self.state, action) {
            (PaymentState::Initiated, PayerAction::Pay) => {
                self.state = PaymentState::Authorized;
                self.authorized_at = Some(now);
                self.customer_msisdn = Some(msisdn.to_owned());
                Ok(RedirectStatus::Success)
            }
            (PaymentState::Authorized, PayerAction::Pay) => Ok(RedirectStatus::Success),
            (PaymentState::Initiated | PaymentState::Authorized, PayerAction::Cancel) => {
                self.state = PaymentState::Cancelled;
                self.ended_at = Some(now);
                Ok(RedirectStatus::Cancel)
            }
            (PaymentState::Initiated, PayerAction::Fail) => {
                self.state = PaymentState::Failed;
                self.ended_at = Some(now);
                self.failure_code = Some(failure.as_str().to_owned());
                Ok(RedirectStatus::Failure)
            }
            (PaymentState::Authorized, PayerAction::Fail) => Err(Code::InvalidPaymentState),
            (PaymentState::Completed, _) => Err(Code::PaymentAlreadyCompleted),
            (PaymentState::Cancelled, _) => Err(Code::AlreadyCancelled),
            (PaymentState::Failed, _) => Err(Code::InvalidPaymentState),
        };
        self.payer_events.push(PayerEvent {
            at: now,
            action,
            status_code: result.err().unwrap_or(Code::Successful).as_str().to_owned(),
        });
        result
    }

    /// The gateway cancels the payment itself (a scripted `cancel`). Only an
    /// unfinished payment can be cancelled.
    pub fn cancel_by_gateway(&mut self, now: DateTime<Utc>) -> bool {
        match self.state {
            PaymentState::Initiated | PaymentState::Authorized => {
                self.state = PaymentState::Cancelled;
                self.ended_at = Some(now);
                true
            }
            _ => false,
        }
    }

    /// Decides an execute call without recording it: at most one succeeds.
    pub fn execute_verdict(&self) -> Result<(), Code> {
        match self.state {
            PaymentState::Authorized => Ok(()),
            PaymentState::Initiated | PaymentState::Failed => Err(Code::InvalidPaymentState),
            PaymentState::Completed => Err(Code::ExecutionAlreadyCompleted),
            PaymentState::Cancelled => Err(Code::AlreadyCancelled),
        }
    }

    /// Executes: moves an authorised payment to `Completed` with `trx_id`, and
    /// records the call whatever its outcome.
    pub fn execute(
        &mut self,
        trx_id: impl FnOnce() -> String,
        now: DateTime<Utc>,
        scripted: Option<String>,
    ) -> Result<(), Code> {
        let verdict = self.execute_verdict();
        if verdict.is_ok() {
            self.state = PaymentState::Completed;
            self.executed_at = Some(now);
            self.trx_id = Some(trx_id());
        }
        self.execute_calls.push(ExecuteCall {
            at: now,
            status_code: verdict
                .err()
                .unwrap_or(Code::Successful)
                .as_str()
                .to_owned(),
            scripted,
        });
        verdict
    }

    /// Refunds `amount` of a completed payment whose transaction is `trx_id`.
    pub fn refund(
        &mut self,
        trx_id: &str,
        amount: Amount,
        sku: Option<String>,
        reason: Option<String>,
        refund_trx_id: impl FnOnce() -> String,
        now: DateTime<Utc>,
    ) -> Result<&Refund, Code> {
        if self.state != PaymentState::Completed {
            return Err(Code::InvalidPaymentState);
        }
        if self.trx_id.as_deref() != Some(trx_id) {
            return Err(Code::TransactionNotFound);
        }
        let refunded = self.refunded_poisha();
        if refunded >= self.amount_poisha {
            return Err(Code::AlreadyRefunded);
        }
        if refunded + amount.poisha() > self.amount_poisha {
            return Err(Code::RefundExceedsAmount);
        }
        self.refunds.push(Refund {
            refund_trx_id: refund_trx_id(),
            amount: amount.to_string(),
            completed_at: now,
            sku,
            reason,
        });
        self.refunds.last().ok_or(Code::ProcessFailed)
    }

    /// Poisha refunded so far.
    pub fn refunded_poisha(&self) -> u64 {
        self.refunds
            .iter()
            .filter_map(|r| Amount::parse(&r.amount).ok())
            .map(Amount::poisha)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn payment() -> Payment {
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        Payment::new(
            "TR0011A".into(),
            "k".into(),
            "sig".into(),
            NewPayment {
                mode: "0011".into(),
                payer_reference: "01770618575".into(),
                callback_url: "http://m/cb".into(),
                amount: Amount::parse("500").unwrap(),
                currency: "BDT".into(),
                intent: "sale".into(),
                merchant_invoice_number: "INV1".into(),
            },
            now,
        )
    }

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 1, 0).unwrap()
    }

    #[test]
    fn execute_before_the_payer_authorises_is_2056() {
        let mut p = payment();
        assert_eq!(
            p.execute(|| "T1".into(), now(), None),
            Err(Code::InvalidPaymentState)
        );
        assert_eq!(p.state, PaymentState::Initiated);
        assert_eq!(p.execute_calls.len(), 1);
        assert_eq!(p.execute_calls[0].status_code, "2056");
    }

    #[test]
    fn execute_succeeds_exactly_once() {
        let mut p = payment();
        assert_eq!(
            p.payer_acts(PayerAction::Pay, "017", Code::InsufficientBalance, now()),
            Ok(RedirectStatus::Success)
        );
        assert_eq!(p.state.transaction_status(), "Initiated");
        assert_eq!(p.state.verification_status(), "Complete");
        assert_eq!(p.execute(|| "T1".into(), now(), None), Ok(()));
        assert_eq!(p.trx_id.as_deref(), Some("T1"));
        assert_eq!(
            p.execute(|| "T2".into(), now(), None),
            Err(Code::ExecutionAlreadyCompleted)
        );
        assert_eq!(
            p.trx_id.as_deref(),
            Some("T1"),
            "a second execute never changes the trx"
        );
        assert_eq!(p.state.transaction_status(), "Completed");
        assert_eq!(
            p.payer_acts(PayerAction::Pay, "017", Code::InsufficientBalance, now()),
            Err(Code::PaymentAlreadyCompleted)
        );
        assert_eq!(
            p.payer_acts(PayerAction::Cancel, "017", Code::InsufficientBalance, now()),
            Err(Code::PaymentAlreadyCompleted)
        );
        assert_eq!(p.state, PaymentState::Completed);
    }

    #[test]
    fn cancelled_and_failed_payments_refuse_execute() {
        let mut p = payment();
        assert_eq!(
            p.payer_acts(PayerAction::Cancel, "017", Code::InsufficientBalance, now()),
            Ok(RedirectStatus::Cancel)
        );
        assert_eq!(
            p.execute(|| "T".into(), now(), None),
            Err(Code::AlreadyCancelled)
        );
        assert_eq!(p.state.transaction_status(), "Cancelled");
        let mut q = payment();
        assert_eq!(
            q.payer_acts(PayerAction::Fail, "017", Code::InsufficientBalance, now()),
            Ok(RedirectStatus::Failure)
        );
        assert_eq!(q.failure_code.as_deref(), Some("2023"));
        assert_eq!(
            q.execute(|| "T".into(), now(), None),
            Err(Code::InvalidPaymentState)
        );
        assert_eq!(
            q.payer_acts(PayerAction::Pay, "017", Code::InsufficientBalance, now()),
            Err(Code::InvalidPaymentState)
        );
        // a second tab paying again while authorised repeats success without change
        let mut r = payment();
        r.payer_acts(PayerAction::Pay, "017", Code::InsufficientBalance, now())
            .unwrap();
        let at = r.authorized_at;
        assert_eq!(
            r.payer_acts(PayerAction::Pay, "018", Code::InsufficientBalance, now()),
            Ok(RedirectStatus::Success)
        );
        assert_eq!(r.authorized_at, at);
        assert_eq!(r.customer_msisdn.as_deref(), Some("017"));
        // the gateway can cancel only unfinished payments
        assert!(r.cancel_by_gateway(now()));
        assert!(!r.cancel_by_gateway(now()));
    }

    #[test]
    fn refunds_are_bounded_by_the_amount() {
        let mut p = payment();
        assert_eq!(
            p.refund(
                "T1",
                Amount::parse("1").unwrap(),
                None,
                None,
                || "R".into(),
                now()
            )
            .unwrap_err(),
            Code::InvalidPaymentState
        );
        p.payer_acts(PayerAction::Pay, "017", Code::InsufficientBalance, now())
            .unwrap();
        p.execute(|| "T1".into(), now(), None).unwrap();
        assert_eq!(
            p.refund(
                "T9",
                Amount::parse("1").unwrap(),
                None,
                None,
                || "R".into(),
                now()
            )
            .unwrap_err(),
            Code::TransactionNotFound
        );
        assert_eq!(
            p.refund(
                "T1",
                Amount::parse("500.01").unwrap(),
                None,
                None,
                || "R".into(),
                now()
            )
            .unwrap_err(),
            Code::RefundExceedsAmount
        );
        assert_eq!(
            p.refund(
                "T1",
                Amount::parse("200").unwrap(),
                None,
                None,
                || "R1".into(),
                now()
            )
            .unwrap()
            .amount,
            "200"
        );
        assert_eq!(
            p.refund(
                "T1",
                Amount::parse("301").unwrap(),
                None,
                None,
                || "R".into(),
                now()
            )
            .unwrap_err(),
            Code::RefundExceedsAmount
        );
        assert_eq!(
            p.refund(
                "T1",
                Amount::parse("300").unwrap(),
                None,
                None,
                || "R2".into(),
                now()
            )
            .unwrap()
            .refund_trx_id,
            "R2"
        );
        assert_eq!(
            p.refund(
                "T1",
                Amount::parse("1").unwrap(),
                None,
                None,
                || "R".into(),
                now()
            )
            .unwrap_err(),
            Code::AlreadyRefunded
        );
        assert_eq!(p.refunded_poisha(), 50_000);
    }
}
