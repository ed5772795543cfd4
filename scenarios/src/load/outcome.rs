//! What the answers mean, and what each payer does: pure decisions, kept
//! apart from the goose wiring so they can be tested on their own.

use std::time::Duration;

use serde::Deserialize;

use super::PayerKind;

/// The longest `Retry-After` honoured; a longer one is cut to this.
pub const RETRY_AFTER_MAX: Duration = Duration::from_secs(30);
/// The wait before a retry when the answer gave no `Retry-After`.
pub const RETRY_AFTER_DEFAULT: Duration = Duration::from_secs(1);

/// What a `POST /bookings` answer means to the load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BookingAnswer {
    /// `201`: a hold; pay at `redirect_url`.
    Admitted {
        /// The gateway's checkout page, when the answer had one.
        redirect_url: Option<String>,
    },
    /// `200 already_holding`: the candidate holds a seat already.
    Holding,
    /// A refusal the sale is meant to give (`level_full`, `sale_closed`,
    /// `not_eligible`, `already_paid`, `unknown_level`, …): any 4xx.
    Refused(String),
    /// `503` (`busy`, `deadline_exceeded`) or another 5xx: try again later.
    Busy {
        /// The error code, or `http_<status>`.
        code: String,
        /// How long to wait first.
        retry_after: Duration,
    },
    /// No answer (connection refused or reset, timeout).
    Transport,
}

#[derive(Debug, Default, Deserialize)]
struct Body {
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    outcome: Option<String>,
    #[serde(default)]
    redirect_url: Option<String>,
}

/// Classifies a booking answer: `status` (`None`: no answer), the body, and
/// the `Retry-After` header.
pub fn classify_booking(
    status: Option<u16>,
    body: &[u8],
    retry_after: Option<&str>,
) -> BookingAnswer {
    let Some(status) = status else {
        return BookingAnswer::Transport;
    };
    let parsed: Body = serde_json::from_slice(body).unwrap_or_default();
    let code = || {
        parsed
            .error
            .clone()
            .unwrap_or_else(|| format!("http_{status}"))
    };
    match status {
        201 => BookingAnswer::Admitted {
            redirect_url: parsed.redirect_url.clone(),
        },
        200..=299 if parsed.outcome.as_deref() == Some("already_holding") => BookingAnswer::Holding,
        200..=299 => BookingAnswer::Refused(code()),
        400..=499 => BookingAnswer::Refused(code()),
        _ if status >= 500 => BookingAnswer::Busy {
            code: code(),
            retry_after: retry_delay(retry_after),
        },
        _ => BookingAnswer::Refused(code()),
    }
}

impl BookingAnswer {
    /// The key it is counted under: `admitted`, `already_holding`, the
    /// API's error code, `http_<status>`, or `transport_error`.
    pub fn key(&self) -> &str {
        match self {
            BookingAnswer::Admitted { .. } => "admitted",
            BookingAnswer::Holding => "already_holding",
            BookingAnswer::Refused(code) | BookingAnswer::Busy { code, .. } => code,
            BookingAnswer::Transport => "transport_error",
        }
    }

    /// Whether the sale answered as designed (so goose counts a success):
    /// a hold, a live hold, or a refusal. Busy and unanswered are failures.
    pub fn expected(&self) -> bool {
        !matches!(self, BookingAnswer::Busy { .. } | BookingAnswer::Transport)
    }

    /// When to retry, if at all: after the answer's wait for busy, after
    /// [`RETRY_AFTER_DEFAULT`] for no answer.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            BookingAnswer::Busy { retry_after, .. } => Some(*retry_after),
            BookingAnswer::Transport => Some(RETRY_AFTER_DEFAULT),
            _ => None,
        }
    }
}

/// A `Retry-After` header in whole seconds (HTTP dates are not sent by this
/// API; anything unreadable means the default), at most [`RETRY_AFTER_MAX`].
pub fn retry_delay(header: Option<&str>) -> Duration {
    header
        .and_then(|h| h.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(RETRY_AFTER_DEFAULT)
        .min(RETRY_AFTER_MAX)
}

/// What one payer does on the checkout page, as
/// [`mock_gateway::payer::Payer::run`] does it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayerPlan {
    /// Wait `pay_late_after` before starting.
    pub late: bool,
    /// Times the page is opened (`GET`) before any action.
    pub opens: u8,
    /// Buttons pressed (`POST action=…`), in order.
    pub actions: &'static [&'static str],
    /// Times each redirect is delivered (2: Back pressed).
    pub deliveries: u8,
    /// Deliver the redirect with `status` rewritten to this.
    pub forge_status: Option<&'static str>,
}

/// The plan of a payer `kind`.
pub fn plan(kind: PayerKind) -> PayerPlan {
    let pay = PayerPlan {
        late: false,
        opens: 0,
        actions: &["pay"],
        deliveries: 1,
        forge_status: None,
    };
    match kind {
        PayerKind::PayNow => pay,
        PayerKind::PayLate => PayerPlan { late: true, ..pay },
        PayerKind::Abandon => PayerPlan {
            opens: 1,
            actions: &[],
            ..pay
        },
        PayerKind::Cancel => PayerPlan {
            actions: &["cancel"],
            ..pay
        },
        PayerKind::Fail => PayerPlan {
            actions: &["fail"],
            ..pay
        },
        PayerKind::PressBack => PayerPlan {
            deliveries: 2,
            ..pay
        },
        PayerKind::SecondTab => PayerPlan {
            opens: 2,
            actions: &["pay", "pay"],
            ..pay
        },
        PayerKind::ForgeCancel => PayerPlan {
            forge_status: Some("cancel"),
            ..pay
        },
        PayerKind::ForgeSuccess => PayerPlan {
            actions: &["cancel"],
            forge_status: Some("success"),
            ..pay
        },
    }
}

/// The checkout page's answer to a button.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionAnswer {
    /// `302` to the merchant's callback.
    Redirect(url::Url),
    /// `200` without a redirect (a scripted drop).
    NoRedirect,
    /// Anything else (`http`: its status), or a `302` without a usable
    /// `Location`.
    Refused(u16),
    /// No answer.
    Transport,
}

impl ActionAnswer {
    /// The key it is counted under.
    pub fn key(&self) -> String {
        match self {
            ActionAnswer::Redirect(_) => "redirect".into(),
            ActionAnswer::NoRedirect => "no_redirect".into(),
            ActionAnswer::Refused(http) => format!("refused_{http}"),
            ActionAnswer::Transport => "transport_error".into(),
        }
    }
}

/// Classifies the checkout page's answer to a button.
pub fn classify_action(status: Option<u16>, location: Option<&str>) -> ActionAnswer {
    match status {
        None => ActionAnswer::Transport,
        Some(302) => match location.map(url::Url::parse) {
            Some(Ok(url)) => ActionAnswer::Redirect(url),
            _ => ActionAnswer::Refused(302),
        },
        Some(200) => ActionAnswer::NoRedirect,
        Some(other) => ActionAnswer::Refused(other),
    }
}

/// The merchant's answer to a delivered redirect, by name (see the booking
/// API's confirm paths): `paid` (200), `processing` (202), `not_paid`
/// (402), `needs_attention` (409), `expired` (410), `forbidden` (403),
/// `unknown` (404), `bad_request` (400), `unavailable` (503),
/// `http_<status>` otherwise, `transport_error` without an answer.
pub fn callback_answer(status: Option<u16>) -> String {
    let name = match status {
        None => "transport_error",
        Some(200) => "paid",
        Some(202) => "processing",
        Some(400) => "bad_request",
        Some(402) => "not_paid",
        Some(403) => "forbidden",
        Some(404) => "unknown",
        Some(409) => "needs_attention",
        Some(410) => "expired",
        Some(503) => "unavailable",
        Some(other) => return format!("http_{other}"),
    };
    name.to_owned()
}

/// Whether an answer counts as a success in goose's tables: any answer
/// below 500 (refusals and a callback's "not paid" are the system working).
pub fn answered_as_designed(status: Option<u16>) -> bool {
    status.is_some_and(|s| s < 500)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booking_answers_are_classified_by_status_and_code() {
        let admitted = classify_booking(
            Some(201),
            br#"{"outcome":"admitted","redirect_url":"http://gw/checkout/TR1","status":"HELD"}"#,
            None,
        );
        assert_eq!(
            admitted,
            BookingAnswer::Admitted {
                redirect_url: Some("http://gw/checkout/TR1".into())
            }
        );
        assert_eq!(admitted.key(), "admitted");
        let holding = classify_booking(Some(200), br#"{"outcome":"already_holding"}"#, None);
        assert_eq!(holding, BookingAnswer::Holding);
        assert_eq!(holding.key(), "already_holding");
        let full = classify_booking(Some(409), br#"{"error":"level_full","message":"x"}"#, None);
        assert_eq!(full.key(), "level_full");
        assert!(full.expected());
        assert_eq!(full.retry_after(), None);
        let stranger = classify_booking(Some(403), br#"{"error":"not_eligible"}"#, None);
        assert_eq!(stranger.key(), "not_eligible");
        let odd = classify_booking(Some(418), b"teapot", None);
        assert_eq!(odd.key(), "http_418");
    }

    #[test]
    fn busy_and_unanswered_are_retried_and_not_expected() {
        let busy = classify_booking(Some(503), br#"{"error":"busy"}"#, Some("2"));
        assert_eq!(busy.key(), "busy");
        assert!(!busy.expected());
        assert_eq!(busy.retry_after(), Some(Duration::from_secs(2)));
        let late = classify_booking(Some(503), br#"{"error":"deadline_exceeded"}"#, None);
        assert_eq!(late.key(), "deadline_exceeded");
        assert_eq!(late.retry_after(), Some(RETRY_AFTER_DEFAULT));
        let bare = classify_booking(Some(502), b"", None);
        assert_eq!(bare.key(), "http_502");
        assert!(bare.retry_after().is_some());
        let gone = classify_booking(None, b"", None);
        assert_eq!(gone.key(), "transport_error");
        assert!(!gone.expected());
        assert_eq!(gone.retry_after(), Some(RETRY_AFTER_DEFAULT));
    }

    #[test]
    fn retry_after_is_read_in_seconds_and_bounded() {
        assert_eq!(retry_delay(Some("3")), Duration::from_secs(3));
        assert_eq!(retry_delay(Some(" 0 ")), Duration::ZERO);
        assert_eq!(retry_delay(Some("soon")), RETRY_AFTER_DEFAULT);
        assert_eq!(retry_delay(None), RETRY_AFTER_DEFAULT);
        assert_eq!(retry_delay(Some("86400")), RETRY_AFTER_MAX);
    }

    #[test]
    fn payer_plans_mirror_the_mock_gateways_payer() {
        assert_eq!(plan(PayerKind::PayNow).actions, &["pay"]);
        assert!(!plan(PayerKind::PayNow).late);
        assert!(plan(PayerKind::PayLate).late);
        let abandon = plan(PayerKind::Abandon);
        assert_eq!((abandon.opens, abandon.actions.len()), (1, 0));
        assert_eq!(plan(PayerKind::Cancel).actions, &["cancel"]);
        assert_eq!(plan(PayerKind::Fail).actions, &["fail"]);
        assert_eq!(plan(PayerKind::PressBack).deliveries, 2);
        let tabs = plan(PayerKind::SecondTab);
        assert_eq!((tabs.opens, tabs.actions), (2, &["pay", "pay"][..]));
        assert_eq!(plan(PayerKind::ForgeCancel).forge_status, Some("cancel"));
        let forged = plan(PayerKind::ForgeSuccess);
        assert_eq!(
            (forged.actions, forged.forge_status),
            (&["cancel"][..], Some("success"))
        );
        for kind in PayerKind::ALL {
            let p = plan(kind);
            assert_eq!(p.late, kind == PayerKind::PayLate, "{kind:?}");
            assert_eq!(
                p.forge_status.is_some(),
                matches!(kind, PayerKind::ForgeCancel | PayerKind::ForgeSuccess)
            );
        }
    }

    #[test]
    fn checkout_answers_are_classified() {
        let r = classify_action(Some(302), Some("http://m/payment/callback?paymentID=TR1"));
        assert!(matches!(&r, ActionAnswer::Redirect(u) if u.path() == "/payment/callback"));
        assert_eq!(r.key(), "redirect");
        assert_eq!(classify_action(Some(302), None), ActionAnswer::Refused(302));
        assert_eq!(
            classify_action(Some(302), Some("not a url")),
            ActionAnswer::Refused(302)
        );
        assert_eq!(classify_action(Some(200), None), ActionAnswer::NoRedirect);
        assert_eq!(classify_action(Some(409), None).key(), "refused_409");
        assert_eq!(classify_action(None, None).key(), "transport_error");
    }

    #[test]
    fn callback_answers_are_named() {
        assert_eq!(callback_answer(Some(200)), "paid");
        assert_eq!(callback_answer(Some(402)), "not_paid");
        assert_eq!(callback_answer(Some(410)), "expired");
        assert_eq!(callback_answer(Some(299)), "http_299");
        assert_eq!(callback_answer(None), "transport_error");
        assert!(answered_as_designed(Some(402)));
        assert!(!answered_as_designed(Some(503)));
        assert!(!answered_as_designed(None));
    }
}
