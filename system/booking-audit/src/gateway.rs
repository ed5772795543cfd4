//! [`GatewayTruth`]: what the payment gateway says really happened, typed.
//!
//! The mock gateway's `/__mock/ledger` (`mock-gateway/src/control.rs`,
//! `ledger`) is the one source of it over HTTP: `payments` (each
//! `mock_gateway::payments::Payment`, camelCase: `paymentID`, `appKey`,
//! `amount`, `amountPoisha`, `merchantInvoiceNumber`, `state` as
//! `Initiated`/`Authorized`/`Completed`/`Cancelled`/`Failed`, `createdAt`,
//! `executedAt` … as RFC 3339 UTC) and `grants_in_window` (app key → token
//! grants in the gateway's rolling window); `webhooks`, `subscriptions` and
//! `faults` are not read. [`GatewayTruth::from_json`] and
//! [`GatewayTruth::from_value`] are the one reader; the virtual-time sale
//! builds the same type from its simulated gateway.

use std::collections::BTreeMap;

use booking::{CandidateHash, SaleId, parse_invoice};
use serde::{Deserialize, Serialize};

/// Where a payment stands at the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum GatewayState {
    /// Created; the payer has not acted.
    Initiated,
    /// The payer approved; the merchant has not executed.
    Authorized,
    /// Executed: money moved.
    Completed,
    /// The payer (or a script) cancelled.
    Cancelled,
    /// The payer's wallet refused.
    Failed,
    /// A state this reader does not know.
    #[serde(other)]
    Unknown,
}

/// One payment as the gateway knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayPayment {
    /// bKash `paymentID`.
    pub payment_id: String,
    /// Its state.
    pub state: GatewayState,
    /// Who paid, where the gateway knows (the simulated gateway does; the
    /// mock's ledger names only the invoice).
    pub candidate: Option<CandidateHash>,
    /// The app key that created it.
    pub app_key: String,
    /// The amount in poisha.
    pub amount_poisha: u64,
    /// `merchantInvoiceNumber` as sent (`<sale>-<candidate hash>-<request ms>`).
    pub merchant_invoice_number: String,
    /// When it was created, ms since the epoch (`None`: not stamped or unreadable).
    pub created_ms: Option<u64>,
    /// When it was executed (completed), ms since the epoch.
    pub executed_ms: Option<u64>,
}

impl GatewayPayment {
    /// Whether money moved.
    pub fn completed(&self) -> bool {
        self.state == GatewayState::Completed
    }
}

/// The gateway's ground truth.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(from = "WireLedger")]
pub struct GatewayTruth {
    /// Every payment, in creation order.
    pub payments: Vec<GatewayPayment>,
    /// Token grants per app key in the gateway's rolling window (`None`: the
    /// gateway grants no tokens, as the simulated one).
    pub grants_in_window: Option<BTreeMap<String, u64>>,
}

impl GatewayTruth {
    /// Reads the mock gateway's `/__mock/ledger` JSON.
    pub fn from_json(json: &str) -> Result<GatewayTruth, serde_json::Error> {
        serde_json::from_str(json)
    }

    /// Reads the mock gateway's `/__mock/ledger` JSON, already parsed.
    pub fn from_value(value: &serde_json::Value) -> Result<GatewayTruth, serde_json::Error> {
        GatewayTruth::deserialize(value)
    }

    /// The payments that completed.
    pub fn completed(&self) -> impl Iterator<Item = &GatewayPayment> {
        self.payments.iter().filter(|p| p.completed())
    }

    /// What a deployment's audit judges after a reset: the payments of
    /// `sale` created at or after `since_ms` (its last reset; 0: never).
    /// The gateway keeps every payment it ever saw, of every sale and every
    /// earlier run against it, whose records the reset deleted. A payment
    /// whose invoice (`<sale>-<candidate>-<ms>`, [`booking::parse_invoice`])
    /// names another sale, or whose creation is stamped before `since_ms`,
    /// is left out; one whose invoice or creation time cannot be read is
    /// kept (it cannot be told apart, and judging it is the safe side). The
    /// token grants are the gateway's, kept whole.
    pub fn of_sale_since(&self, sale: &SaleId, since_ms: u64) -> GatewayTruth {
        let ours = |p: &GatewayPayment| {
            let of_sale =
                parse_invoice(&p.merchant_invoice_number).is_none_or(|(s, _, _)| s == *sale);
            let since = p.created_ms.is_none_or(|c| c >= since_ms);
            of_sale && since
        };
        GatewayTruth {
            payments: self.payments.iter().filter(|p| ours(p)).cloned().collect(),
            grants_in_window: self.grants_in_window.clone(),
        }
    }
}

#[derive(Deserialize)]
struct WireLedger {
    #[serde(default)]
    payments: Vec<WirePayment>,
    #[serde(default)]
    grants_in_window: BTreeMap<String, u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePayment {
    #[serde(rename = "paymentID")]
    payment_id: String,
    state: GatewayState,
    #[serde(default)]
    app_key: String,
    #[serde(default)]
    amount_poisha: u64,
    #[serde(default)]
    merchant_invoice_number: String,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    executed_at: Option<String>,
}

impl From<WireLedger> for GatewayTruth {
    fn from(w: WireLedger) -> GatewayTruth {
        GatewayTruth {
            payments: w
                .payments
                .into_iter()
                .map(|p| GatewayPayment {
                    created_ms: p.created_at.as_deref().and_then(rfc3339_ms),
                    executed_ms: p.executed_at.as_deref().and_then(rfc3339_ms),
                    payment_id: p.payment_id,
                    state: p.state,
                    candidate: None,
                    app_key: p.app_key,
                    amount_poisha: p.amount_poisha,
                    merchant_invoice_number: p.merchant_invoice_number,
                })
                .collect(),
            grants_in_window: Some(w.grants_in_window),
        }
    }
}

/// An RFC 3339 time (`2026-01-01T00:00:10.250Z`, `…+06:00`) as ms since the
/// epoch; `None` if it is not one or is before the epoch. Fractions beyond
/// milliseconds are cut.
pub fn rfc3339_ms(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let digits = b.get(from..from + len)?;
        if !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(digits).ok()?.parse().ok()
    };
    let sep = |at: usize, c: &[u8]| b.get(at).is_some_and(|x| c.contains(x));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let mut at = 19;
    let mut ms = 0i64;
    if sep(at, b".") {
        at += 1;
        let start = at;
        while b.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        if at == start {
            return None;
        }
        let frac = &s[start..at.min(start + 3)];
        ms = format!("{frac:0<3}").parse().ok()?;
    }
    let offset_min = match b.get(at)? {
        b'Z' | b'z' if at + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if at + 6 == b.len() && sep(at + 3, b":") => {
            let m = num(at + 1, 2)? * 60 + num(at + 4, 2)?;
            if *sign == b'+' { m } else { -m }
        }
        _ => return None,
    };
    // days from 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
    // days_from_civil)
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_min * 60;
    u64::try_from(secs * 1_000 + ms).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_deployments_audit_judges_the_sales_payments_since_its_reset() {
        let c = CandidateHash::of("x");
        let payment = |id: &str, invoice: String, created_ms: Option<u64>| GatewayPayment {
            payment_id: id.into(),
            state: GatewayState::Completed,
            candidate: None,
            app_key: "k".into(),
            amount_poisha: 1,
            merchant_invoice_number: invoice,
            created_ms,
            executed_ms: None,
        };
        let truth = GatewayTruth {
            payments: vec![
                payment("before", format!("launch-{c}-1"), Some(999)),
                payment("at", format!("launch-{c}-2"), Some(1_000)),
                payment("after", format!("launch-{c}-3"), Some(1_500)),
                payment("other-sale", format!("encore-{c}-4"), Some(1_500)),
                payment("unstamped", format!("launch-{c}-5"), None),
                payment("foreign-invoice", "INV-77".into(), Some(1_500)),
            ],
            grants_in_window: Some(BTreeMap::from([("k".to_owned(), 1)])),
        };
        let launch = SaleId::parse("launch").unwrap();
        let judged = truth.of_sale_since(&launch, 1_000);
        let ids: Vec<&str> = judged
            .payments
            .iter()
            .map(|p| p.payment_id.as_str())
            .collect();
        assert_eq!(ids, ["at", "after", "unstamped", "foreign-invoice"]);
        assert_eq!(judged.grants_in_window, truth.grants_in_window);
        assert_eq!(
            truth.of_sale_since(&launch, 0).payments.len(),
            5,
            "never reset: every payment of the sale, only the other sale's left out"
        );
    }

    #[test]
    fn rfc3339_times_read_as_epoch_ms() {
        // 2026-01-01T00:00:10Z = 1767225610000 ms
        assert_eq!(rfc3339_ms("2026-01-01T00:00:10Z"), Some(1_767_225_610_000));
        assert_eq!(
            rfc3339_ms("2026-01-01T00:00:10.250Z"),
            Some(1_767_225_610_250)
        );
        assert_eq!(
            rfc3339_ms("2026-01-01T00:00:10.25098765Z"),
            Some(1_767_225_610_250)
        );
        assert_eq!(
            rfc3339_ms("2026-01-01T06:00:10+06:00"),
            Some(1_767_225_610_000)
        );
        assert_eq!(rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(rfc3339_ms("2024-02-29T12:00:00Z"), Some(1_709_208_000_000));
        for bad in [
            "",
            "2026-01-01",
            "2026-01-01T00:00:10",
            "2026-13-01T00:00:10Z",
            "2026-01-01T00:00:10.Z",
            "2026-01-01T00:00:10Zjunk",
            "1969-12-31T23:59:59Z",
        ] {
            assert_eq!(rfc3339_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_mock_ledger_reads_typed() {
        let v = serde_json::json!({
            "payments": [
                {"paymentID": "a", "appKey": "k", "amount": "15.00", "amountPoisha": 1500,
                 "merchantInvoiceNumber": "s-c-1", "state": "Completed",
                 "createdAt": "2026-01-01T00:00:00Z", "executedAt": "2026-01-01T00:00:10.250Z",
                 "executeCalls": [], "payerEvents": []},
                {"paymentID": "b", "state": "Initiated", "createdAt": "2026-01-01T00:00:00Z",
                 "executedAt": null},
                {"paymentID": "c", "state": "Refunded"},
            ],
            "grants_in_window": {"k": 2, "other": 1},
            "webhooks": [], "faults": [],
        });
        let t = GatewayTruth::from_value(&v).unwrap();
        assert_eq!(t.payments.len(), 3);
        let a = &t.payments[0];
        assert_eq!(
            (
                a.payment_id.as_str(),
                a.state,
                a.amount_poisha,
                a.app_key.as_str()
            ),
            ("a", GatewayState::Completed, 1500, "k")
        );
        assert_eq!(a.merchant_invoice_number, "s-c-1");
        assert_eq!(
            (a.created_ms, a.executed_ms),
            (Some(1_767_225_600_000), Some(1_767_225_610_250))
        );
        assert_eq!(t.payments[1].executed_ms, None);
        assert_eq!(t.payments[2].state, GatewayState::Unknown);
        assert_eq!(
            t.completed()
                .map(|p| p.payment_id.as_str())
                .collect::<Vec<_>>(),
            ["a"]
        );
        let grants = t.grants_in_window.unwrap();
        assert_eq!((grants["k"], grants["other"]), (2, 1));
        assert_eq!(
            GatewayTruth::from_json(&v.to_string())
                .unwrap()
                .payments
                .len(),
            3
        );
        // an empty ledger is an empty truth, with no grants
        let empty = GatewayTruth::from_json("{}").unwrap();
        assert!(empty.payments.is_empty());
        assert_eq!(empty.grants_in_window, Some(BTreeMap::new()));
        // a payment without its ID is not a ledger
        assert!(GatewayTruth::from_json(r#"{"payments": [{"state": "Completed"}]}"#).is_err());
    }
}
