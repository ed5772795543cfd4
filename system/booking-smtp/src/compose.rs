//! A confirmation as an email, and back (pure: no I/O).

use booking::notify::Confirmation;
use booking::{CandidateHash, Level, PaymentId, SaleId};
use lettre::Message;
use lettre::message::Mailbox;
use lettre::message::header::{ContentType, HeaderName, HeaderValue};

use crate::config::SmtpConfig;

/// The sale the email confirms a seat of.
pub const HEADER_SALE: &str = "X-Sellout-Sale";
/// The candidate (its hash).
pub const HEADER_CANDIDATE: &str = "X-Sellout-Candidate";
/// The seat's level.
pub const HEADER_LEVEL: &str = "X-Sellout-Level";
/// The payment.
pub const HEADER_PAYMENT: &str = "X-Sellout-Payment";
/// The gateway's transaction, when known.
pub const HEADER_TRX: &str = "X-Sellout-Trx";
/// `1` when the email sweep sent it (a send of unknown outcome may have
/// gone before it), `0` otherwise.
pub const HEADER_RECOVERED: &str = "X-Sellout-Recovered";

/// A confirmation that cannot be written as an email.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComposeError {
    /// An address or header was refused.
    #[error("composing the email: {0}")]
    Invalid(String),
}

/// Who a confirmation email is from and what its names point at: what
/// composing takes of a mailer's settings, the same for every transport
/// (`[mail.smtp]` here, `[mail.ses]` in `booking-aws`), so an email is the
/// same bytes whichever way it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addressing<'a> {
    /// The `From` address, e.g. `Tickets <tickets@example.com>`.
    pub from: &'a str,
    /// A candidate's address is `<candidate hash>@<recipient_domain>`.
    pub recipient_domain: &'a str,
    /// The right-hand side of every Message-ID.
    pub message_id_domain: &'a str,
}

/// A domain part as an address or a Message-ID takes it: labels of ASCII
/// letters, digits and hyphens.
pub(crate) fn domain_ok(d: &str) -> bool {
    !d.is_empty()
        && d.len() <= 253
        && d.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

impl Addressing<'_> {
    /// Checks that an email can be composed with these: both domains are
    /// domains and `from` is an address. The error names the setting.
    pub fn check(&self) -> Result<(), String> {
        if !domain_ok(self.recipient_domain) {
            return Err(format!(
                "recipient_domain {:?} is not a domain",
                self.recipient_domain
            ));
        }
        if !domain_ok(self.message_id_domain) {
            return Err(format!(
                "message_id_domain {:?} is not a domain",
                self.message_id_domain
            ));
        }
        if self.from.trim().is_empty() {
            return Err("from is empty".to_owned());
        }
        if self.from.parse::<Mailbox>().is_err() {
            return Err(format!("from {:?} is not an address", self.from));
        }
        Ok(())
    }
}

/// The candidate's address: `<candidate hash>@<domain>`.
pub fn recipient(confirmation: &Confirmation, domain: &str) -> String {
    format!("{}@{domain}", confirmation.candidate.as_str())
}

fn header(name: &str, value: String) -> Result<HeaderValue, ComposeError> {
    let name = HeaderName::new_from_ascii(name.to_owned())
        .map_err(|e| ComposeError::Invalid(format!("header {name}: {e}")))?;
    Ok(HeaderValue::new(name, value))
}

/// The email of `confirmation`: its stable Message-ID (the same for every
/// send of the same booking, so a receiver can drop a repeat), `From` and
/// the candidate's address, a text body, and the `X-Sellout-*` headers that
/// [`read_back`] reads.
pub fn compose(confirmation: &Confirmation, config: &SmtpConfig) -> Result<Message, ComposeError> {
    compose_with(confirmation, config.addressing())
}

/// [`compose`] with the addressing given: what a mailer other than SMTP
/// sends (SES takes the raw message, `Message::formatted`).
pub fn compose_with(
    confirmation: &Confirmation,
    addressing: Addressing<'_>,
) -> Result<Message, ComposeError> {
    let c = confirmation;
    let a = addressing;
    let from: Mailbox = a
        .from
        .parse()
        .map_err(|e| ComposeError::Invalid(format!("from {:?}: {e}", a.from)))?;
    let to: Mailbox = recipient(c, a.recipient_domain)
        .parse()
        .map_err(|e| ComposeError::Invalid(format!("recipient: {e}")))?;
    let mut builder = Message::builder()
        .message_id(Some(c.message_id(a.message_id_domain)))
        .from(from)
        .to(to)
        .subject(format!("Your seat is confirmed: {} ({})", c.level, c.sale))
        .header(ContentType::TEXT_PLAIN)
        .raw_header(header(HEADER_SALE, c.sale.to_string())?)
        .raw_header(header(HEADER_CANDIDATE, c.candidate.to_string())?)
        .raw_header(header(HEADER_LEVEL, c.level.to_string())?)
        .raw_header(header(HEADER_PAYMENT, c.payment_id.to_string())?)
        .raw_header(header(
            HEADER_RECOVERED,
            if c.recovered { "1" } else { "0" }.to_owned(),
        )?);
    if let Some(trx) = &c.trx_id {
        builder = builder.raw_header(header(HEADER_TRX, trx.clone())?);
    }
    let body = format!(
        "Your payment went through and your seat is yours.\n\n\
         Sale: {}\nLevel: {}\nPayment: {}\nTransaction: {}\n\n\
         Keep this email: it is your confirmation.\n",
        c.sale,
        c.level,
        c.payment_id,
        c.trx_id.as_deref().unwrap_or("-"),
    );
    builder
        .body(body)
        .map_err(|e| ComposeError::Invalid(e.to_string()))
}

/// What a server stored, read back: the Message-ID and the confirmation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// The Message-ID header, as sent (with its angle brackets).
    pub message_id: String,
    /// The booking it confirms.
    pub confirmation: Confirmation,
}

/// The header block of a raw message, unfolded: (name, value) in order.
fn headers(raw: &str) -> Vec<(String, String)> {
    let block = raw
        .split("\r\n\r\n")
        .next()
        .unwrap_or("")
        .split("\n\n")
        .next()
        .unwrap_or("");
    let mut out: Vec<(String, String)> = Vec::new();
    for line in block.lines() {
        let line = line.trim_end_matches('\r');
        if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = out.last_mut() {
                if !v.is_empty() {
                    v.push(' ');
                }
                v.push_str(line.trim());
            }
        } else if let Some((name, value)) = line.split_once(':') {
            out.push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
    out
}

/// The confirmation an email composed by [`compose`] carries, from the raw
/// message a server stored. An email without the headers, or with a value
/// that is not a valid id, is an error naming it.
pub fn read_back(raw: &[u8]) -> Result<Delivered, String> {
    let text = std::str::from_utf8(raw).map_err(|e| format!("not UTF-8: {e}"))?;
    let hs = headers(text);
    let get = |name: &str| {
        hs.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let need = |name: &str| get(name).ok_or_else(|| format!("no {name} header"));
    let bad = |name: &str, e: &dyn std::fmt::Display| format!("{name}: {e}");
    let confirmation = Confirmation {
        sale: SaleId::parse(need(HEADER_SALE)?).map_err(|e| bad(HEADER_SALE, &e))?,
        candidate: CandidateHash::parse(need(HEADER_CANDIDATE)?)
            .map_err(|e| bad(HEADER_CANDIDATE, &e))?,
        level: Level::parse(need(HEADER_LEVEL)?).map_err(|e| bad(HEADER_LEVEL, &e))?,
        payment_id: PaymentId::parse(need(HEADER_PAYMENT)?).map_err(|e| bad(HEADER_PAYMENT, &e))?,
        trx_id: get(HEADER_TRX).map(str::to_owned),
        recovered: match need(HEADER_RECOVERED)? {
            "1" => true,
            "0" => false,
            other => return Err(format!("{HEADER_RECOVERED}: {other:?} is neither 0 nor 1")),
        },
    };
    Ok(Delivered {
        message_id: need("Message-ID")?.to_owned(),
        confirmation,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn confirmation(trx: Option<&str>, recovered: bool) -> Confirmation {
        Confirmation {
            sale: SaleId::parse("launch").unwrap(),
            candidate: CandidateHash::of("alice"),
            level: Level::parse("floor").unwrap(),
            payment_id: PaymentId::parse("TR0011ABC").unwrap(),
            trx_id: trx.map(str::to_owned),
            recovered,
        }
    }

    #[test]
    fn an_email_reads_back_as_its_confirmation() {
        let config = SmtpConfig::default();
        for c in [
            confirmation(Some("8JK2LM"), false),
            confirmation(None, true),
        ] {
            let raw = compose(&c, &config).unwrap().formatted();
            let back = read_back(&raw).unwrap();
            assert_eq!(back.confirmation, c);
            assert_eq!(back.message_id, "<TR0011ABC.launch@sellout.invalid>");
            let text = String::from_utf8(raw).unwrap();
            assert!(text.contains(&format!(
                "To: {}@candidates.sellout.invalid",
                c.candidate.as_str()
            )));
            assert!(text.contains("Your seat is confirmed: floor (launch)"));
        }
    }

    #[test]
    fn every_send_of_a_booking_has_the_same_message_id() {
        let config = SmtpConfig::default();
        let first = compose(&confirmation(None, false), &config).unwrap();
        let again = compose(&confirmation(Some("X1"), true), &config).unwrap();
        let id = |m: &Message| read_back(&m.formatted()).unwrap().message_id;
        assert_eq!(id(&first), id(&again));
        let other = Confirmation {
            payment_id: PaymentId::parse("TR0099").unwrap(),
            ..confirmation(None, false)
        };
        assert_ne!(id(&first), id(&compose(&other, &config).unwrap()));
    }

    #[test]
    fn folded_and_lowercase_headers_are_read() {
        let c = confirmation(None, false);
        let raw = format!(
            "message-id: <a@b>\r\nx-sellout-sale: launch\r\nX-Sellout-Candidate:\r\n {}\r\n\
             X-Sellout-Level: floor\r\nX-Sellout-Payment: TR0011ABC\r\nX-Sellout-Recovered: 0\r\n\r\nbody: x\r\n",
            c.candidate.as_str()
        );
        let back = read_back(raw.as_bytes()).unwrap();
        assert_eq!(back.confirmation, c);
        assert_eq!(back.message_id, "<a@b>");
    }

    #[test]
    fn an_email_that_is_not_a_confirmation_is_named() {
        assert!(
            read_back(b"Subject: hi\r\n\r\nhello")
                .unwrap_err()
                .contains(HEADER_SALE)
        );
        let c = confirmation(None, false);
        let raw = String::from_utf8(compose(&c, &SmtpConfig::default()).unwrap().formatted())
            .unwrap()
            .replace("X-Sellout-Recovered: 0", "X-Sellout-Recovered: maybe");
        assert!(read_back(raw.as_bytes()).unwrap_err().contains("maybe"));
        let raw = String::from_utf8(compose(&c, &SmtpConfig::default()).unwrap().formatted())
            .unwrap()
            .replace("X-Sellout-Level: floor", "X-Sellout-Level: fl oor");
        assert!(
            read_back(raw.as_bytes())
                .unwrap_err()
                .contains(HEADER_LEVEL)
        );
    }
}
