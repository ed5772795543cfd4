//! bKash status codes the mock answers with.
//!
//! Every error is an HTTP 200 whose body carries a non-"0000" `statusCode` and a
//! `statusMessage`, as the real gateway does. The numbers and messages are bKash's
//! own (its public error-code table) except where a variant says it is mock-only:
//! the public table has no code for those situations, so the mock picks one that
//! no real code uses and documents it here.

use serde::Serialize;

/// One bKash status code with its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Code {
    /// "0000" Successful.
    Successful,
    /// 2001: the `X-APP-Key` (or the grant's `app_key`/`app_secret`) is unknown.
    InvalidAppKey,
    /// 2002: no payment has this ID.
    InvalidPaymentId,
    /// 2003: generic failure; what a scripted `fail` without a code answers.
    ProcessFailed,
    /// 2006: the amount is not a positive number with at most two decimals.
    InvalidAmount,
    /// 2007: only BDT is accepted.
    InvalidCurrency,
    /// 2008: only `sale` is accepted.
    InvalidIntent,
    /// 2023: the payer's wallet cannot cover the amount (a payer `fail` reason).
    InsufficientBalance,
    /// 2025: the body is not the JSON object the operation expects.
    InvalidRequestBody,
    /// 2026: a refund larger than what is left to refund.
    RefundExceedsAmount,
    /// 2031: the merchant invoice number is empty or too long.
    InvalidMerchantInvoiceNumber,
    /// 2033: no transaction has this `trxID` (or it does not belong to the payment).
    TransactionNotFound,
    /// 2034: the transaction has already been refunded in full.
    AlreadyRefunded,
    /// 2048: the payer reference is too long.
    InvalidPayerReference,
    /// 2049: the callback URL is not an absolute http(s) URL.
    InvalidCallbackUrl,
    /// 2056: the payment is not in a state that allows the operation.
    InvalidPaymentState,
    /// 2062: the payment has already been completed (payer acting again).
    PaymentAlreadyCompleted,
    /// 2063: `mode` is not one the gateway knows.
    ModeInvalid,
    /// 2064: a known mode this mock does not offer (agreement modes).
    ModeUnavailable,
    /// 2065: a mandatory field is missing.
    MandatoryFieldMissing,
    /// 2069: the transaction has already been cancelled.
    AlreadyCancelled,
    /// 2117: execute called again on a completed payment.
    ExecutionAlreadyCompleted,
    /// 2079 (mock-only): grant with a wrong `username`/`password`.
    InvalidCredentials,
    /// 2080 (mock-only): unknown or expired `id_token` / `refresh_token`.
    InvalidToken,
    /// 2081 (mock-only): the per-app-key token grant allowance is spent.
    GrantRateLimited,
    /// 503: maintenance; what a scripted `fail` with `code = "503"` answers.
    Maintenance,
}

impl Code {
    /// The `statusCode` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Successful => "0000",
            Code::InvalidAppKey => "2001",
            Code::InvalidPaymentId => "2002",
            Code::ProcessFailed => "2003",
            Code::InvalidAmount => "2006",
            Code::InvalidCurrency => "2007",
            Code::InvalidIntent => "2008",
            Code::InsufficientBalance => "2023",
            Code::InvalidRequestBody => "2025",
            Code::RefundExceedsAmount => "2026",
            Code::InvalidMerchantInvoiceNumber => "2031",
            Code::TransactionNotFound => "2033",
            Code::AlreadyRefunded => "2034",
            Code::InvalidPayerReference => "2048",
            Code::InvalidCallbackUrl => "2049",
            Code::InvalidPaymentState => "2056",
            Code::PaymentAlreadyCompleted => "2062",
            Code::ModeInvalid => "2063",
            Code::ModeUnavailable => "2064",
            Code::MandatoryFieldMissing => "2065",
            Code::AlreadyCancelled => "2069",
            Code::ExecutionAlreadyCompleted => "2117",
            Code::InvalidCredentials => "2079",
            Code::InvalidToken => "2080",
            Code::GrantRateLimited => "2081",
            Code::Maintenance => "503",
        }
    }

    /// The `statusMessage` string.
    pub fn message(self) -> &'static str {
        match self {
            Code::Successful => "Successful",
            Code::InvalidAppKey => "Invalid App Key",
            Code::InvalidPaymentId => "Invalid Payment ID",
            Code::ProcessFailed => "Process failed",
            Code::InvalidAmount => "Invalid Amount",
            Code::InvalidCurrency => "Invalid Currency",
            Code::InvalidIntent => "Invalid Intent",
            Code::InsufficientBalance => "Insufficient Balance",
            Code::InvalidRequestBody => "Invalid request body",
            Code::RefundExceedsAmount => {
                "The reversal amount cannot be greater than the original transaction amount"
            }
            Code::InvalidMerchantInvoiceNumber => "Invalid Merchant Invoice Number",
            Code::TransactionNotFound => "Transaction not found",
            Code::AlreadyRefunded => {
                "The transaction cannot be reversed because the original transaction has been reversed"
            }
            Code::InvalidPayerReference => "Invalid Payer Reference",
            Code::InvalidCallbackUrl => "Invalid Merchant Callback URL",
            Code::InvalidPaymentState => "Invalid Payment State",
            Code::PaymentAlreadyCompleted => "The payment has already been completed",
            Code::ModeInvalid => "Mode is not valid as per request data",
            Code::ModeUnavailable => "This product mode currently unavailable",
            Code::MandatoryFieldMissing => "Mandatory field missing",
            Code::AlreadyCancelled => "Transaction has already been cancelled",
            Code::ExecutionAlreadyCompleted => "The payment execution has already been completed",
            Code::InvalidCredentials => "Invalid username and password",
            Code::InvalidToken => "Invalid or expired token",
            Code::GrantRateLimited => "Token grant limit exceeded, try again later",
            Code::Maintenance => "System is undergoing maintenance. Please try again later",
        }
    }

    /// Every code, for lookups by string.
    pub const ALL: [Code; 26] = [
        Code::Successful,
        Code::InvalidAppKey,
        Code::InvalidPaymentId,
        Code::ProcessFailed,
        Code::InvalidAmount,
        Code::InvalidCurrency,
        Code::InvalidIntent,
        Code::InsufficientBalance,
        Code::InvalidRequestBody,
        Code::RefundExceedsAmount,
        Code::InvalidMerchantInvoiceNumber,
        Code::TransactionNotFound,
        Code::AlreadyRefunded,
        Code::InvalidPayerReference,
        Code::InvalidCallbackUrl,
        Code::InvalidPaymentState,
        Code::PaymentAlreadyCompleted,
        Code::ModeInvalid,
        Code::ModeUnavailable,
        Code::MandatoryFieldMissing,
        Code::AlreadyCancelled,
        Code::ExecutionAlreadyCompleted,
        Code::InvalidCredentials,
        Code::InvalidToken,
        Code::GrantRateLimited,
        Code::Maintenance,
    ];

    /// Looks a code up by its `statusCode` string.
    pub fn parse(s: &str) -> Option<Code> {
        Code::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for c in Code::ALL {
            assert!(seen.insert(c.as_str()), "duplicate code {}", c.as_str());
            assert_eq!(Code::parse(c.as_str()), Some(c));
            assert!(!c.message().is_empty());
        }
        assert_eq!(Code::parse("9999"), None);
        assert_eq!(Code::ExecutionAlreadyCompleted.as_str(), "2117");
        assert_eq!(Code::InvalidPaymentState.as_str(), "2056");
    }
}
