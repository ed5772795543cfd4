//! The wire format: bKash's times, amounts and request-body parsing.
//!
//! Pure functions only; the handlers in [`crate::api`] call them.

use std::borrow::Cow;

use chrono::{DateTime, FixedOffset, Utc};
use serde::de::IgnoredAny;
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
///
/// Written by hand (this runs several times per API answer): the same text as
/// chrono's `%Y-%m-%dT%H:%M:%S:%3f GMT+0600` in Dhaka time.
pub fn api_time(t: DateTime<Utc>) -> String {
    use chrono::{Datelike, Timelike};
    let local = t.naive_utc() + chrono::Duration::seconds(i64::from(BANGLADESH_OFFSET_SECS));
    let year = local.year();
    if !(0..=9999).contains(&year) {
        // outside what four digits hold: chrono knows how to write it
        return t
            .with_timezone(&dhaka())
            .format("%Y-%m-%dT%H:%M:%S:%3f GMT+0600")
            .to_string();
    }
    let millis = local.nanosecond() % 1_000_000_000 / 1_000_000;
    let mut b = *b"0000-00-00T00:00:00:000 GMT+0600";
    let mut put = |at: usize, width: usize, mut v: u32| {
        for i in (at..at + width).rev() {
            b[i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, 4, year as u32);
    put(5, 2, local.month());
    put(8, 2, local.day());
    put(11, 2, local.hour());
    put(14, 2, local.minute());
    // a leap second shows as :60, as chrono writes it
    put(17, 2, local.second() + local.nanosecond() / 1_000_000_000);
    put(20, 3, millis);
    // every byte written above is an ASCII digit
    String::from_utf8_lossy(&b).into_owned()
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

/// One field of a request body, classified as [`Body`] would see it, read by
/// [`fields`] without building a generic JSON tree.
#[derive(Debug, Default)]
pub enum Field<'a> {
    /// Not in the body.
    #[default]
    Absent,
    /// `null`.
    Null,
    /// A string (borrowed from the body when it has no escapes).
    Str(Cow<'a, str>),
    /// A number.
    Num(serde_json::Number),
    /// A boolean, an array or an object.
    Other,
}

impl<'a> Field<'a> {
    /// As [`Body::optional`]: absent, null or blank is `None`; numbers are
    /// stringified; anything else is [`Code::InvalidRequestBody`].
    pub fn optional(self) -> Result<Option<String>, Code> {
        match self {
            Field::Absent | Field::Null => Ok(None),
            Field::Str(s) if s.trim().is_empty() => Ok(None),
            Field::Str(s) => Ok(Some(s.into_owned())),
            Field::Num(n) => Ok(Some(n.to_string())),
            Field::Other => Err(Code::InvalidRequestBody),
        }
    }

    /// As [`Body::required`]: missing or blank is [`Code::MandatoryFieldMissing`].
    pub fn required(self) -> Result<String, Code> {
        self.optional()?.ok_or(Code::MandatoryFieldMissing)
    }

    /// Whether the field is absent or null (what [`Body::raw`] filters out).
    pub fn is_missing(&self) -> bool {
        matches!(self, Field::Absent | Field::Null)
    }

    /// As [`Amount::from_json`] on the raw value.
    pub fn amount(&self) -> Result<Amount, Code> {
        match self {
            Field::Str(s) => Amount::parse(s),
            Field::Num(n) => Amount::parse(&n.to_string()),
            _ => Err(Code::InvalidAmount),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Field<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Field<'de>, D::Error> {
        d.deserialize_any(FieldVisitor)
    }
}

struct FieldVisitor;

impl<'de> serde::de::Visitor<'de> for FieldVisitor {
    type Value = Field<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Field<'de>, E> {
        Ok(Field::Other)
    }

    fn visit_i64<E>(self, v: i64) -> Result<Field<'de>, E> {
        Ok(Field::Num(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Field<'de>, E> {
        Ok(Field::Num(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Field<'de>, E> {
        // as serde_json's Value: a non-finite float is null
        Ok(serde_json::Number::from_f64(v).map_or(Field::Null, Field::Num))
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Field<'de>, E> {
        Ok(Field::Str(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Field<'de>, E> {
        Ok(Field::Str(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Field<'de>, E> {
        Ok(Field::Str(Cow::Owned(v)))
    }

    fn visit_unit<E>(self) -> Result<Field<'de>, E> {
        Ok(Field::Null)
    }

    fn visit_none<E>(self) -> Result<Field<'de>, E> {
        Ok(Field::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Field<'de>, D::Error> {
        <Field<'de> as serde::Deserialize<'de>>::deserialize(d)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Field<'de>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Field::Other)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Field<'de>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Field::Other)
    }
}

/// Which of the wanted names a key is.
struct KeySeed<'n>(&'n [&'n str]);

impl<'de> serde::de::DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Option<usize>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> serde::de::Visitor<'de> for KeySeed<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E>(self, v: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|n| *n == v))
    }
}

/// The wanted fields of a JSON object.
struct FieldsSeed<'n, const N: usize>(&'n [&'n str; N]);

impl<'de, const N: usize> serde::de::DeserializeSeed<'de> for FieldsSeed<'_, N> {
    type Value = [Field<'de>; N];

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, const N: usize> serde::de::Visitor<'de> for FieldsSeed<'_, N> {
    type Value = [Field<'de>; N];

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out: [Field<'de>; N] = std::array::from_fn(|_| Field::Absent);
        while let Some(key) = map.next_key_seed(KeySeed(self.0))? {
            match key {
                // a repeated key: the last one wins, as in serde_json's Map
                Some(i) => out[i] = map.next_value()?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(out)
    }
}

/// Reads the fields `names` of a JSON object body, classifying each as
/// [`Body`] would; anything but a JSON object is [`Code::InvalidRequestBody`].
/// Other keys are skipped (but must be valid JSON).
pub fn fields<'a, const N: usize>(
    bytes: &'a [u8],
    names: &[&str; N],
) -> Result<[Field<'a>; N], Code> {
    use serde::de::DeserializeSeed;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let out = FieldsSeed(names)
        .deserialize(&mut de)
        .map_err(|_| Code::InvalidRequestBody)?;
    de.end().map_err(|_| Code::InvalidRequestBody)?;
    Ok(out)
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
