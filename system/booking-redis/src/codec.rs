//! The compact encodings the scripts write, read back into domain values.
//!
//! Ids never contain `|` (the id types refuse it), so `|` separates fields:
//!
//! - a pending hold: `p|<level>|<token>|<admitted_ms>`
//! - a held hold: `h|<level>|<token>|<payment_id>|<deadline_ms>`
//! - a paid mark: `<level>|<payment_id>`
//!
//! Pure functions: anything that does not parse is [`LedgerError::Corrupt`].

use booking::ledger::{Hold, HoldState, LedgerError};
use booking::{Level, PaymentId, RequestToken};

fn corrupt(what: &str, raw: &str) -> LedgerError {
    LedgerError::Corrupt(format!("unreadable {what}: {raw:?}"))
}

/// Reads a hold as the scripts write it.
pub(crate) fn read_hold(raw: &str) -> Result<Hold, LedgerError> {
    let bad = || corrupt("hold", raw);
    let fields: Vec<&str> = raw.split('|').collect();
    let (state, level, token, rest) = match fields.as_slice() {
        [state, level, token, rest @ ..] => (*state, *level, *token, rest),
        _ => return Err(bad()),
    };
    let level = Level::parse(level).map_err(|_| bad())?;
    let token = RequestToken::parse(token).map_err(|_| bad())?;
    let state = match (state, rest) {
        ("p", [admitted_ms]) => HoldState::Pending {
            admitted_ms: admitted_ms.parse().map_err(|_| bad())?,
        },
        ("h", [payment_id, deadline_ms]) => HoldState::Held {
            payment_id: PaymentId::parse(payment_id).map_err(|_| bad())?,
            deadline_ms: deadline_ms.parse().map_err(|_| bad())?,
        },
        _ => return Err(bad()),
    };
    Ok(Hold {
        level,
        token,
        state,
    })
}

/// Reads a paid mark as the scripts write it.
pub(crate) fn read_paid(raw: &str) -> Result<(Level, PaymentId), LedgerError> {
    let bad = || corrupt("paid mark", raw);
    let (level, payment_id) = raw.split_once('|').ok_or_else(bad)?;
    Ok((
        Level::parse(level).map_err(|_| bad())?,
        PaymentId::parse(payment_id).map_err(|_| bad())?,
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn holds_and_paid_marks_read_back() {
        assert_eq!(
            read_hold("p|gold|r-1|1700000000000").unwrap(),
            Hold {
                level: Level::parse("gold").unwrap(),
                token: RequestToken::parse("r-1").unwrap(),
                state: HoldState::Pending {
                    admitted_ms: 1_700_000_000_000
                },
            }
        );
        assert_eq!(
            read_hold(&format!("h|gold|r-1|TR_9|{}", u64::MAX)).unwrap(),
            Hold {
                level: Level::parse("gold").unwrap(),
                token: RequestToken::parse("r-1").unwrap(),
                state: HoldState::Held {
                    payment_id: PaymentId::parse("TR_9").unwrap(),
                    deadline_ms: u64::MAX,
                },
            }
        );
        assert_eq!(
            read_paid("gold|TR_9").unwrap(),
            (
                Level::parse("gold").unwrap(),
                PaymentId::parse("TR_9").unwrap()
            )
        );
    }

    #[test]
    fn anything_else_is_corrupt() {
        for raw in [
            "",
            "p",
            "p|gold|r-1",
            "p|gold|r-1|x",
            "p|gold|r-1|1|2",
            "h|gold|r-1|1",
            "h|gold|r-1|TR|-1",
            "x|gold|r-1|1",
            "p|gold bar|r-1|1",
            "p||r-1|1",
        ] {
            assert!(
                matches!(read_hold(raw), Err(LedgerError::Corrupt(_))),
                "{raw:?}"
            );
        }
        for raw in ["", "gold", "gold|", "|TR", "gold|TR|x"] {
            assert!(
                matches!(read_paid(raw), Err(LedgerError::Corrupt(_))),
                "{raw:?}"
            );
        }
    }
}
