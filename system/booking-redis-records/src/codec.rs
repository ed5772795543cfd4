//! A booking record as the hash fields the scripts store (one per attribute,
//! every value a string), and back. Pure: the scripts copy the fields they do
//! not change, so this is the only place that spells an attribute.

use std::collections::HashMap;

use booking::records::{BookingRecord, ConfirmPath, RecordStatus};
use booking::{CandidateHash, Level, PaymentId, SaleId};

/// `HELD` / `PAID`, as the scripts compare them.
pub(crate) fn status_text(status: RecordStatus) -> &'static str {
    match status {
        RecordStatus::Held => "HELD",
        RecordStatus::Paid => "PAID",
    }
}

/// `callback` / `webhook` / `reconciler`.
pub(crate) fn path_text(path: ConfirmPath) -> &'static str {
    match path {
        ConfirmPath::Callback => "callback",
        ConfirmPath::Webhook => "webhook",
        ConfirmPath::Reconciler => "reconciler",
    }
}

/// The record's fields: every attribute, the optional ones only when set
/// (an absent `expires_at_s` is the PAID record's missing TTL attribute).
pub(crate) fn to_fields(r: &BookingRecord) -> Vec<(&'static str, String)> {
    let mut fields = vec![
        ("candidate", r.candidate.to_string()),
        ("sale", r.sale.to_string()),
        ("level", r.level.to_string()),
        ("payment_id", r.payment_id.to_string()),
        ("status", status_text(r.status).to_owned()),
        ("deadline_ms", r.deadline_ms.to_string()),
        ("created_ms", r.created_ms.to_string()),
        ("extensions", r.extensions.to_string()),
        ("query_failures", r.query_failures.to_string()),
        (
            "email_sent",
            if r.email_sent { "1" } else { "0" }.to_owned(),
        ),
    ];
    if let Some(e) = r.expires_at_s {
        fields.push(("expires_at_s", e.to_string()));
    }
    if let Some(p) = r.paid_ms {
        fields.push(("paid_ms", p.to_string()));
    }
    if let Some(p) = r.paid_by {
        fields.push(("paid_by", path_text(p).to_owned()));
    }
    fields
}

fn field<'a>(f: &'a HashMap<String, String>, name: &str) -> Result<&'a str, String> {
    f.get(name)
        .map(String::as_str)
        .ok_or_else(|| format!("record without {name}"))
}

fn number<T: std::str::FromStr>(f: &HashMap<String, String>, name: &str) -> Result<T, String> {
    let text = field(f, name)?;
    text.parse()
        .map_err(|_| format!("record's {name} is not a number: {text:?}"))
}

fn optional<T: std::str::FromStr>(
    f: &HashMap<String, String>,
    name: &str,
) -> Result<Option<T>, String> {
    match f.get(name) {
        None => Ok(None),
        Some(_) => number(f, name).map(Some),
    }
}

/// The record stored as `fields`. Invariants are not checked: a record the
/// zoo's `paid_keeps_ttl` bug wrote must read back as it is.
pub(crate) fn from_fields(f: &HashMap<String, String>) -> Result<BookingRecord, String> {
    let bad = |what: &str, e: booking::ids::InvalidId| format!("record's {what}: {e}");
    let status = match field(f, "status")? {
        "HELD" => RecordStatus::Held,
        "PAID" => RecordStatus::Paid,
        other => return Err(format!("record's status is {other:?}")),
    };
    let paid_by = match f.get("paid_by").map(String::as_str) {
        None => None,
        Some("callback") => Some(ConfirmPath::Callback),
        Some("webhook") => Some(ConfirmPath::Webhook),
        Some("reconciler") => Some(ConfirmPath::Reconciler),
        Some(other) => return Err(format!("record's paid_by is {other:?}")),
    };
    let email_sent = match field(f, "email_sent")? {
        "0" => false,
        "1" => true,
        other => return Err(format!("record's email_sent is {other:?}")),
    };
    Ok(BookingRecord {
        candidate: CandidateHash::parse(field(f, "candidate")?).map_err(|e| bad("candidate", e))?,
        sale: SaleId::parse(field(f, "sale")?).map_err(|e| bad("sale", e))?,
        level: Level::parse(field(f, "level")?).map_err(|e| bad("level", e))?,
        payment_id: PaymentId::parse(field(f, "payment_id")?).map_err(|e| bad("payment_id", e))?,
        status,
        deadline_ms: number(f, "deadline_ms")?,
        expires_at_s: optional(f, "expires_at_s")?,
        created_ms: number(f, "created_ms")?,
        paid_ms: optional(f, "paid_ms")?,
        paid_by,
        extensions: number(f, "extensions")?,
        query_failures: number(f, "query_failures")?,
        email_sent,
    })
}

/// A record image as the scripts encode it (a JSON object of the fields).
pub(crate) fn from_json(json: &str) -> Result<BookingRecord, String> {
    let fields: HashMap<String, String> =
        serde_json::from_str(json).map_err(|e| format!("record image is not JSON: {e}"))?;
    from_fields(&fields)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn held() -> BookingRecord {
        BookingRecord::held(
            CandidateHash::of("x"),
            SaleId::parse("launch").unwrap(),
            Level::parse("gold").unwrap(),
            PaymentId::parse("P1").unwrap(),
            1_700_000_000_000,
            1_700_000_600_001,
        )
    }

    fn round_trip(r: &BookingRecord) -> BookingRecord {
        let map: HashMap<String, String> = to_fields(r)
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        from_fields(&map).unwrap()
    }

    #[test]
    fn every_attribute_survives_the_fields() {
        let h = held();
        assert_eq!(round_trip(&h), h);
        let paid = BookingRecord {
            extensions: 3,
            query_failures: 2,
            email_sent: true,
            ..h.into_paid(ConfirmPath::Reconciler, 1_700_000_000_500)
        };
        assert_eq!(round_trip(&paid), paid);
        let names: Vec<&str> = to_fields(&paid).iter().map(|(k, _)| *k).collect();
        assert!(
            !names.contains(&"expires_at_s"),
            "a PAID record has no TTL field at all"
        );
        assert_eq!(round_trip(&held()).expires_at_s, Some(1_700_000_601));
    }

    #[test]
    fn a_broken_record_is_an_error_not_a_guess() {
        let mut map: HashMap<String, String> = to_fields(&held())
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        map.insert("status".into(), "RELEASED".into());
        assert!(from_fields(&map).unwrap_err().contains("status"));
        map.insert("status".into(), "HELD".into());
        map.insert("deadline_ms".into(), "1.7e12".into());
        assert!(from_fields(&map).unwrap_err().contains("deadline_ms"));
        map.remove("deadline_ms");
        assert!(
            from_fields(&map)
                .unwrap_err()
                .contains("without deadline_ms")
        );
        assert!(from_json("not json").is_err());
    }
}
