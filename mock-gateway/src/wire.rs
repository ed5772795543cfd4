//! The wire format: bKash's times, amounts and request-body parsing.
//!
//! Pure functions only; the handlers in [`crate::api`] call them.

use chrono::{DateTime, FixedOffset, Utc};
use serde_json::{Map, Value};

use crate::codes::Code;

/// bKash reports every time in Bangladesh time, UTC+06:00.
const BANGLADESH_OFFSET_SECS: i32 = 6 * 3600;

const DHAKA: FixedOffset = match FixedOffset::east_opt(BANGLADESH_OFFSET_SECS) {
    Some(offset) => offset,
    None => panic!("UTC+06:00 is a valid offset"),
};

fn dhaka() -> FixedOffset {
    DHAKA
}

/// A time as bKash writes it in API answers: `2023-01-23T06:21:19:254 GMT+0600`.
pub fn api_time(t: DateTime<Utc>) -> String {
    t.with_timezone(&dhaka())
        .format("%Y-%m-%dT%H:%M:%S:%3f GMT+0600")
        .to_string()
}

/// A time as bKash writes it in IPN messages: `20180419122246`.
pub fn ipn_time(t: DateTime<Utc>) -> String {
    t.with_timezone(&dhaka()).format("%Y%m%d%H%M%S").to_string()
}

/// Parses [`api_time`]'s format back (tests and clients use it).
pub fn parse_api_time(s: &str) -> Option<DateTime<Utc>> {
    let s = s.strip_suffix(" GMT+0600")?;
    let naive = chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S:%3f").ok()?;
    naive
        .and_local_timezone(dhaka())
        .single()
        .map(|t| t.with_timezone(&Utc))
}

/// The largest amount one payment may carry, in poisha (BDT 1,000,000).
pub const AMOUNT_POISHA_MAX: u64 = 100_000_000;

/// A positive amount of BDT with at most two decimals, held in poisha (1/100 taka).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Amount(u64);

impl Amount {
    /// From whole poisha.
    pub fn from_poisha(poisha: u64) -> Amount {
        Amount(poisha)
    }

    /// In poisha.
    pub fn poisha(self) -> u64 {
        self.0
    }

    /// Parses a decimal string such as `"500"`, `"10.5"` or `"10.50"`.
    /// Rejects zero, negatives, more than two decimals, exponents, and anything
    /// above [`AMOUNT_POISHA_MAX`].
    pub fn parse(s: &str) -> Result<Amount, Code> {
        let s = s.trim();
        let (whole, frac) = match s.split_once('.') {
            Some((w, f)) => (w, f),
            None => (s, ""),
        };
        let digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || whole.len() > 9 || !digits(whole) || frac.len() > 2 || !digits(frac)
        {
            return Err(Code::InvalidAmount);
        }
        if s.ends_with('.') {
            return Err(Code::InvalidAmount);
        }
        let whole: u64 = whole.parse().map_err(|_| Code::InvalidAmount)?;
        let frac_poisha: u64 = match frac.len() {
            0 => 0,
            1 => frac.parse::<u64>().map_err(|_| Code::InvalidAmount)? * 10,
            _ => frac.parse().map_err(|_| Code::InvalidAmount)?,
        };
        let poisha = whole
            .checked_mul(100)
            .and_then(|w| w.checked_add(frac_poisha))
            .ok_or(Code::InvalidAmount)?;
        if poisha == 0 || poisha > AMOUNT_POISHA_MAX {
            return Err(Code::InvalidAmount);
        }
        Ok(Amount(poisha))
    }

    /// Parses a JSON amount: bKash documents a string, some clients send a number.
    pub fn from_json(v: &Value) -> Result<Amount, Code> {
        match v {
            Value::String(s) => Amount::parse(s),
            Value::Number(n) => Amount::parse(&n.to_string()),
            _ => Err(Code::InvalidAmount),
        }
    }
}

impl std::fmt::Display for Amount {
    /// `500` for whole taka, `10.50` otherwise: always a string on the wire.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 % 100 == 0 {
            write!(f, "{}", self.0 / 100)
        } else {
            write!(f, "{}.{:02}", self.0 / 100, self.0 % 100)
        }
    }
}

/// A parsed request body: a JSON object, or the code bKash answers for anything else.
#[derive(Debug)]
pub struct Body(Map<String, Value>);

impl Body {
    /// Parses raw bytes; anything but a JSON object is [`Code::InvalidRequestBody`].
    pub fn parse(bytes: &[u8]) -> Result<Body, Code> {
        match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Object(map)) => Ok(Body(map)),
            _ => Err(Code::InvalidRequestBody),
        }
    }

    /// A mandatory, non-empty string field (numbers are accepted and stringified,
    /// since clients differ); missing or empty is [`Code::MandatoryFieldMissing`].
    pub fn required(&self, name: &str) -> Result<String, Code> {
        self.optional(name)?.ok_or(Code::MandatoryFieldMissing)
    }

    /// An optional string field; present but not a string or number is
    /// [`Code::InvalidRequestBody`].
    pub fn optional(&self, name: &str) -> Result<Option<String>, Code> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(_) => Err(Code::InvalidRequestBody),
        }
    }

    /// The raw value of a field.
    pub fn raw(&self, name: &str) -> Option<&Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn api_time_is_bkash_format_in_dhaka_time() {
        let t = Utc.with_ymd_and_hms(2023, 1, 23, 0, 21, 19).unwrap()
            + chrono::Duration::milliseconds(254);
        assert_eq!(api_time(t), "2023-01-23T06:21:19:254 GMT+0600");
        assert_eq!(parse_api_time(&api_time(t)), Some(t));
        assert_eq!(ipn_time(t), "20230123062119");
    }

    #[test]
    fn amounts_parse_and_print_as_bkash_strings() {
        assert_eq!(Amount::parse("500").unwrap().to_string(), "500");
        assert_eq!(Amount::parse("10.5").unwrap().poisha(), 1050);
        assert_eq!(Amount::parse("10.50").unwrap().to_string(), "10.50");
        assert_eq!(Amount::parse("0.01").unwrap().poisha(), 1);
        for bad in [
            "", "0", "0.00", "-5", "1.234", "1e3", "abc", "1.", ".5", " ", "1,000", "1000001",
        ] {
            assert_eq!(Amount::parse(bad), Err(Code::InvalidAmount), "{bad:?}");
        }
        assert_eq!(
            Amount::from_json(&serde_json::json!(1000))
                .unwrap()
                .poisha(),
            100_000
        );
        assert_eq!(
            Amount::from_json(&serde_json::json!(10.25))
                .unwrap()
                .poisha(),
            1025
        );
        assert_eq!(
            Amount::from_json(&serde_json::json!(true)),
            Err(Code::InvalidAmount)
        );
        assert_eq!(
            Amount::from_json(&serde_json::json!(-1)),
            Err(Code::InvalidAmount)
        );
    }

    #[test]
    fn bodies_classify_bad_input() {
        assert_eq!(
            Body::parse(b"{not json").unwrap_err(),
            Code::InvalidRequestBody
        );
        assert_eq!(Body::parse(b"[1,2]").unwrap_err(), Code::InvalidRequestBody);
        let b = Body::parse(br#"{"a":"x","n":5,"e":"","o":{}}"#).unwrap();
        assert_eq!(b.required("a").unwrap(), "x");
        assert_eq!(b.required("n").unwrap(), "5");
        assert_eq!(b.required("e").unwrap_err(), Code::MandatoryFieldMissing);
        assert_eq!(
            b.required("missing").unwrap_err(),
            Code::MandatoryFieldMissing
        );
        assert_eq!(b.required("o").unwrap_err(), Code::InvalidRequestBody);
    }
}
