//! bKash Tokenized Checkout answers, read into the port's types. Pure: the
//! HTTP side hands over parsed JSON.
//!
//! bKash answers errors with HTTP 200 and a non-`"0000"` `statusCode` (some
//! endpoints use `errorCode`/`errorMessage` instead); both are refusals.

use std::time::Duration;

use booking::PaymentId;
use booking::gateway::{
    CreatedPayment, Executed, ExecutedVia, GatewayError, GatewayPaymentState, PaymentStatus,
};
use serde_json::Value;

/// The code of success.
pub const SUCCESS: &str = "0000";
/// The mock's code for an unknown or expired token (real bKash answers HTTP
/// 401 instead); both mean "get another token".
pub const INVALID_TOKEN: &str = "2080";

/// A token pair as grant or refresh answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedToken {
    /// The bearer token for API calls.
    pub id_token: String,
    /// The token to refresh with, if the answer had one.
    pub refresh_token: Option<String>,
    /// How long `id_token` lives.
    pub expires_in: Duration,
}

fn text<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// A string field, or a number written as one (bKash sends both).
fn text_or_number(v: &Value, key: &str) -> Option<String> {
    match v.get(key)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn unreadable(what: &str) -> GatewayError {
    GatewayError::Unavailable(format!("unreadable answer: {what}"))
}

/// A refusal if the answer carries an error code; `Ok` otherwise.
pub fn check_status(v: &Value) -> Result<(), GatewayError> {
    if let Some(code) = text_or_number(v, "errorCode") {
        return Err(GatewayError::Refused {
            code,
            message: text(v, "errorMessage").unwrap_or_default().to_owned(),
        });
    }
    match text_or_number(v, "statusCode") {
        Some(code) if code != SUCCESS => Err(GatewayError::Refused {
            code,
            message: text(v, "statusMessage").unwrap_or_default().to_owned(),
        }),
        _ => Ok(()),
    }
}

/// A grant or refresh answer.
pub fn parse_token(v: &Value) -> Result<IssuedToken, GatewayError> {
    check_status(v)?;
    let id_token = text(v, "id_token").ok_or_else(|| unreadable("no id_token"))?;
    let expires_in = text_or_number(v, "expires_in")
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| unreadable("no expires_in"))?;
    Ok(IssuedToken {
        id_token: id_token.to_owned(),
        refresh_token: text(v, "refresh_token").map(str::to_owned),
        expires_in: Duration::from_secs(expires_in),
    })
}

fn payment_id(v: &Value) -> Result<PaymentId, GatewayError> {
    let raw = text(v, "paymentID").ok_or_else(|| unreadable("no paymentID"))?;
    PaymentId::parse(raw).map_err(|e| unreadable(&e.to_string()))
}

/// The `signature` query value of a redirect URL.
pub fn signature_of(redirect_url: &str) -> Option<String> {
    let u = url::Url::parse(redirect_url).ok()?;
    u.query_pairs()
        .find(|(k, _)| k == "signature")
        .map(|(_, v)| v.into_owned())
        .filter(|s| !s.is_empty())
}

/// A create answer.
pub fn parse_created(v: &Value) -> Result<CreatedPayment, GatewayError> {
    check_status(v)?;
    let payment_id = payment_id(v)?;
    let bkash_url = text(v, "bkashURL").ok_or_else(|| unreadable("no bkashURL"))?;
    let signature = text(v, "successCallbackURL")
        .and_then(signature_of)
        .ok_or_else(|| unreadable("no signature in successCallbackURL"))?;
    Ok(CreatedPayment {
        payment_id,
        bkash_url: bkash_url.to_owned(),
        signature,
    })
}

/// An execute answer. A success answer that does not say the payment
/// completed is unreadable (so the one query decides).
pub fn parse_executed(v: &Value, asked: &PaymentId) -> Result<Executed, GatewayError> {
    check_status(v)?;
    match parse_state(v) {
        GatewayPaymentState::Completed { trx_id } => Ok(Executed {
            payment_id: asked.clone(),
            trx_id,
            amount: text_or_number(v, "amount"),
            via: ExecutedVia::Answer,
        }),
        other => Err(unreadable(&format!("execute answered {other:?}"))),
    }
}

/// `transactionStatus` and `verificationStatus` (with `trxID`) as a state.
pub fn parse_state(v: &Value) -> GatewayPaymentState {
    let status = text(v, "transactionStatus").unwrap_or_default();
    let verified = text(v, "verificationStatus") == Some("Complete")
        || text(v, "userVerificationStatus") == Some("Complete");
    match status {
        "Completed" => match text(v, "trxID") {
            Some(trx) => GatewayPaymentState::Completed {
                trx_id: trx.to_owned(),
            },
            None => GatewayPaymentState::Unknown("Completed without trxID".into()),
        },
        "Initiated" if verified => GatewayPaymentState::Authorized,
        "Initiated" => GatewayPaymentState::Initiated,
        "Cancelled" => GatewayPaymentState::Cancelled,
        "Failed" => GatewayPaymentState::Failed,
        other => GatewayPaymentState::Unknown(other.to_owned()),
    }
}

/// A status (query) answer about `asked`.
pub fn parse_status(v: &Value, asked: &PaymentId) -> Result<PaymentStatus, GatewayError> {
    check_status(v)?;
    Ok(PaymentStatus {
        payment_id: asked.clone(),
        state: parse_state(v),
        amount: text_or_number(v, "amount"),
        invoice: text(v, "merchantInvoiceNumber")
            .or_else(|| text(v, "merchantInvoice"))
            .map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pid() -> PaymentId {
        PaymentId::parse("TR0011X").unwrap()
    }

    #[test]
    fn both_error_shapes_are_refusals() {
        assert_eq!(
            check_status(&json!({"statusCode": "2056", "statusMessage": "Invalid Payment State"})),
            Err(GatewayError::Refused {
                code: "2056".into(),
                message: "Invalid Payment State".into()
            })
        );
        assert_eq!(
            check_status(&json!({"errorCode": "2001", "errorMessage": "Invalid App Key"}))
                .unwrap_err()
                .refused_code(),
            Some("2001")
        );
        assert_eq!(
            check_status(&json!({"statusCode": 503}))
                .unwrap_err()
                .refused_code(),
            Some("503")
        );
        assert!(check_status(&json!({"statusCode": "0000"})).is_ok());
        assert!(check_status(&json!({"id_token": "x"})).is_ok());
    }

    #[test]
    fn tokens_parse_with_string_or_number_lifetimes() {
        let t = parse_token(&json!({"id_token": "a", "refresh_token": "r", "expires_in": 3600}))
            .unwrap();
        assert_eq!(t.expires_in, Duration::from_secs(3600));
        assert_eq!(t.refresh_token.as_deref(), Some("r"));
        let t = parse_token(&json!({"id_token": "a", "expires_in": "60"})).unwrap();
        assert_eq!(
            (t.expires_in, t.refresh_token),
            (Duration::from_secs(60), None)
        );
        assert!(matches!(
            parse_token(&json!({"expires_in": 60})),
            Err(GatewayError::Unavailable(_))
        ));
        assert_eq!(
            parse_token(&json!({"statusCode": "2081", "statusMessage": "spent"}))
                .unwrap_err()
                .refused_code(),
            Some("2081")
        );
    }

    #[test]
    fn the_signature_comes_from_the_success_callback_url() {
        let created = parse_created(&json!({
            "paymentID": "TR0011X",
            "bkashURL": "http://gw/checkout/TR0011X?hash=h",
            "successCallbackURL": "http://m/cb?x=1&paymentID=TR0011X&status=success&signature=a%2Bb",
            "statusCode": "0000",
        }))
        .unwrap();
        assert_eq!(created.signature, "a+b", "percent-decoded");
        assert_eq!(created.payment_id, pid());
        assert!(matches!(
            parse_created(
                &json!({"paymentID": "TR0011X", "bkashURL": "u", "successCallbackURL": "http://m/cb?status=success"})
            ),
            Err(GatewayError::Unavailable(_))
        ));
        assert!(matches!(
            parse_created(&json!({"paymentID": "TR|1", "bkashURL": "u"})),
            Err(GatewayError::Unavailable(_))
        ));
    }

    #[test]
    fn states_follow_transaction_and_verification_status() {
        let s = |t: &str, v: &str| {
            parse_state(&json!({"transactionStatus": t, "verificationStatus": v, "trxID": "T1"}))
        };
        assert_eq!(s("Initiated", "Incomplete"), GatewayPaymentState::Initiated);
        assert_eq!(s("Initiated", "Complete"), GatewayPaymentState::Authorized);
        assert_eq!(
            s("Completed", "Complete"),
            GatewayPaymentState::Completed {
                trx_id: "T1".into()
            }
        );
        assert_eq!(s("Cancelled", ""), GatewayPaymentState::Cancelled);
        assert_eq!(s("Failed", ""), GatewayPaymentState::Failed);
        assert_eq!(
            s("Expired", ""),
            GatewayPaymentState::Unknown("Expired".into())
        );
        assert!(matches!(
            parse_state(&json!({"transactionStatus": "Completed"})),
            GatewayPaymentState::Unknown(_)
        ));
        let st = parse_status(
            &json!({"transactionStatus": "Initiated", "merchantInvoice": "I1", "amount": "500"}),
            &pid(),
        )
        .unwrap();
        assert_eq!(
            (st.invoice.as_deref(), st.amount.as_deref()),
            (Some("I1"), Some("500"))
        );
    }

    #[test]
    fn an_execute_answer_must_say_completed() {
        let done = parse_executed(
            &json!({"statusCode": "0000", "transactionStatus": "Completed", "trxID": "T9", "amount": "500"}),
            &pid(),
        )
        .unwrap();
        assert_eq!(
            (done.trx_id.as_str(), done.via),
            ("T9", ExecutedVia::Answer)
        );
        assert!(matches!(
            parse_executed(
                &json!({"statusCode": "0000", "transactionStatus": "Initiated"}),
                &pid()
            ),
            Err(GatewayError::Unavailable(_))
        ));
        assert_eq!(
            parse_executed(&json!({"statusCode": "2117"}), &pid())
                .unwrap_err()
                .refused_code(),
            Some("2117")
        );
    }
}
