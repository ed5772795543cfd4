//! The payment gateway port (bKash Tokenized Checkout in production).
//!
//! Three calls: create a payment (the payer is sent to its `bkash_url`),
//! execute it once the payer has approved (money moves), and query it. Every
//! call takes the time it may use, so a request handler passes what is left of
//! its own deadline.
//!
//! Execute is the one call whose failure is ambiguous: a timeout says nothing
//! about whether the payment completed. The gateway's integration guide, and
//! the article, say to query the payment once, and only to recover a payment
//! that did complete: [`decide_execute_outcome`] is that decision. Anything the
//! query does not confirm stays uncertain and is left to the reconciler, which
//! never releases on uncertainty.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::ids::PaymentId;

/// bKash status codes the booking system acts on.
pub mod codes {
    /// `execute` on a payment that is already completed.
    pub const EXECUTION_ALREADY_COMPLETED: &str = "2117";
    /// The payment is not in a state that allows the call (e.g. executing a
    /// payment the payer has not approved).
    pub const INVALID_PAYMENT_STATE: &str = "2056";
    /// No payment has this ID.
    pub const INVALID_PAYMENT_ID: &str = "2002";
}

/// What a payment is created with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatePayment {
    /// The merchant invoice number (`merchantInvoiceNumber`): how the webhook
    /// finds the booking. At most 255 characters.
    pub invoice: String,
    /// The amount in BDT as bKash takes it: a decimal with at most two
    /// decimals, e.g. `"500"` or `"500.50"`.
    pub amount: String,
    /// `payerReference`: shown to the payer, at most 255 characters.
    pub payer_reference: String,
    /// Where the payer's browser is sent back (`callbackURL`); the gateway
    /// appends `paymentID`, `status` and the per-payment `signature`.
    pub callback_url: String,
}

/// A payment the gateway created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedPayment {
    /// The gateway's payment ID.
    pub payment_id: PaymentId,
    /// Where the payer goes to pay.
    pub bkash_url: String,
    /// The per-payment `signature` the gateway appends to every redirect of
    /// this payment (read from `successCallbackURL`): the callback accepts a
    /// redirect only if it carries this value.
    pub signature: String,
}

/// How an execute came to be known as done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutedVia {
    /// The execute call answered.
    Answer,
    /// The execute call timed out and the one query after it found the
    /// payment completed.
    Query,
}

/// A completed payment: money moved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Executed {
    /// The payment.
    pub payment_id: PaymentId,
    /// The gateway's transaction ID.
    pub trx_id: String,
    /// The amount, as the gateway reports it, if it did.
    pub amount: Option<String>,
    /// The execute answer, or the query after a timeout.
    pub via: ExecutedVia,
}

/// Where a payment stands at the gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GatewayPaymentState {
    /// Created; the payer has not verified.
    Initiated,
    /// The payer verified (PIN/OTP); the merchant has not executed.
    Authorized,
    /// Executed: money moved.
    Completed {
        /// The transaction ID.
        trx_id: String,
    },
    /// Cancelled by the payer or the gateway.
    Cancelled,
    /// The payer's wallet refused.
    Failed,
    /// Something this adapter does not know, as the gateway said it.
    Unknown(String),
}

impl GatewayPaymentState {
    /// Whether the payment can never complete any more.
    pub fn is_final_failure(&self) -> bool {
        matches!(
            self,
            GatewayPaymentState::Cancelled | GatewayPaymentState::Failed
        )
    }
}

/// A payment as the gateway reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentStatus {
    /// The payment.
    pub payment_id: PaymentId,
    /// Its state.
    pub state: GatewayPaymentState,
    /// The amount, if reported.
    pub amount: Option<String>,
    /// The merchant invoice number, if reported.
    pub invoice: Option<String>,
}

/// Why a gateway call gave no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GatewayError {
    /// No answer in time, or an answer lost on the way: the call may or may
    /// not have taken effect.
    #[error("gateway timed out")]
    Timeout,
    /// The gateway answered no, with its status code: the call did not take
    /// effect.
    #[error("gateway refused: {code} {message}")]
    Refused {
        /// bKash `statusCode` (see [`codes`]).
        code: String,
        /// bKash `statusMessage`.
        message: String,
    },
    /// The gateway could not be reached, or answered something unreadable.
    #[error("gateway unavailable: {0}")]
    Unavailable(String),
    /// No valid token could be had within the deadline: nothing was sent.
    #[error("gateway token unavailable")]
    TokenUnavailable,
}

impl GatewayError {
    /// The refusal code, if the gateway refused.
    pub fn refused_code(&self) -> Option<&str> {
        match self {
            GatewayError::Refused { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// The payment gateway. Every call uses at most `within`.
#[async_trait]
pub trait PaymentGateway: Send + Sync + std::fmt::Debug {
    /// Creates a payment.
    async fn create(
        &self,
        req: &CreatePayment,
        within: Duration,
    ) -> Result<CreatedPayment, GatewayError>;

    /// Executes an approved payment. If the execute call times out, queries
    /// the payment once, only to recover a completed one
    /// ([`decide_execute_outcome`]); an error other than
    /// [`GatewayError::Refused`] means "not known to be executed": leave it to
    /// the reconciler.
    async fn execute(
        &self,
        payment: &PaymentId,
        within: Duration,
    ) -> Result<Executed, GatewayError>;

    /// Where a payment stands.
    async fn query(
        &self,
        payment: &PaymentId,
        within: Duration,
    ) -> Result<PaymentStatus, GatewayError>;
}

/// After an execute call gave no answer (`execute_error`), the one query's
/// result decides: a completed payment is executed (recovered); anything else
/// (another state, or the query failing too) leaves the execute's own error:
/// not executed as far as we know, uncertain, for the reconciler.
pub fn decide_execute_outcome(
    payment: &PaymentId,
    execute_error: GatewayError,
    query: Result<PaymentStatus, GatewayError>,
) -> Result<Executed, GatewayError> {
    match query {
        Ok(PaymentStatus {
            state: GatewayPaymentState::Completed { trx_id },
            amount,
            ..
        }) => Ok(Executed {
            payment_id: payment.clone(),
            trx_id,
            amount,
            via: ExecutedVia::Query,
        }),
        _ => Err(execute_error),
    }
}

/// Whether an execute error calls for the one recovery query: every error but
/// a refusal (the gateway said no, so nothing happened) and a missing token
/// (nothing was sent).
pub fn execute_needs_query(error: &GatewayError) -> bool {
    matches!(error, GatewayError::Timeout | GatewayError::Unavailable(_))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pid() -> PaymentId {
        PaymentId::parse("TR0011ABC").unwrap()
    }

    fn status(state: GatewayPaymentState) -> PaymentStatus {
        PaymentStatus {
            payment_id: pid(),
            state,
            amount: Some("500".into()),
            invoice: Some("inv".into()),
        }
    }

    #[test]
    fn only_a_completed_query_recovers_a_timed_out_execute() {
        let done = decide_execute_outcome(
            &pid(),
            GatewayError::Timeout,
            Ok(status(GatewayPaymentState::Completed {
                trx_id: "TRX1".into(),
            })),
        )
        .unwrap();
        assert_eq!(done.trx_id, "TRX1");
        assert_eq!(done.via, ExecutedVia::Query);
        assert_eq!(done.amount.as_deref(), Some("500"));

        for state in [
            GatewayPaymentState::Initiated,
            GatewayPaymentState::Authorized,
            GatewayPaymentState::Cancelled,
            GatewayPaymentState::Failed,
            GatewayPaymentState::Unknown("Pending".into()),
        ] {
            assert_eq!(
                decide_execute_outcome(&pid(), GatewayError::Timeout, Ok(status(state.clone()))),
                Err(GatewayError::Timeout),
                "{state:?}"
            );
        }
        assert_eq!(
            decide_execute_outcome(
                &pid(),
                GatewayError::Unavailable("reset".into()),
                Err(GatewayError::Timeout)
            ),
            Err(GatewayError::Unavailable("reset".into()))
        );
    }

    #[test]
    fn refusals_and_missing_tokens_need_no_query() {
        assert!(execute_needs_query(&GatewayError::Timeout));
        assert!(execute_needs_query(&GatewayError::Unavailable("x".into())));
        assert!(!execute_needs_query(&GatewayError::TokenUnavailable));
        assert!(!execute_needs_query(&GatewayError::Refused {
            code: "2056".into(),
            message: "Invalid Payment State".into()
        }));
        assert_eq!(
            GatewayError::Refused {
                code: "2117".into(),
                message: String::new()
            }
            .refused_code(),
            Some(codes::EXECUTION_ALREADY_COMPLETED)
        );
        assert!(GatewayPaymentState::Cancelled.is_final_failure());
        assert!(!GatewayPaymentState::Authorized.is_final_failure());
    }

    #[test]
    fn states_serialize_as_data() {
        let json =
            serde_json::to_string(&GatewayPaymentState::Completed { trx_id: "T".into() }).unwrap();
        assert_eq!(json, r#"{"completed":{"trx_id":"T"}}"#);
        let unknown = GatewayPaymentState::Unknown("Pending".into());
        let json = serde_json::to_string(&unknown).unwrap();
        assert_eq!(json, r#"{"unknown":"Pending"}"#);
        assert_eq!(
            serde_json::from_str::<GatewayPaymentState>(&json).unwrap(),
            unknown
        );
        assert_eq!(
            serde_json::to_string(&GatewayPaymentState::Authorized).unwrap(),
            r#""authorized""#
        );
    }
}
