//! What became of the confirmation emails, as figures ([`EmailFigures`]):
//! what a mailer outage's closing note and a run's report give, read off
//! the same [`SaleSnapshot`] the audit judges. Pure.

use std::collections::BTreeMap;

use booking::records::RecordStatus;
use serde::{Deserialize, Serialize};

use crate::SaleSnapshot;

use booking::notify::{
    ALERT_EMAIL_FAILED as EMAIL_FAILED, ALERT_EMAIL_UNDELIVERABLE as EMAIL_UNDELIVERABLE,
};

/// The emails of one sale, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmailFigures {
    /// PAID bookings (each owes one email).
    pub paid: u64,
    /// Emails delivered.
    pub delivered: u64,
    /// PAID bookings with no email delivered: lost (or still owed).
    pub missing: u64,
    /// PAID bookings whose email is still owed by the outbox (not marked sent).
    pub owed: u64,
    /// Emails the email sweep sent (their first try failed, or its outcome
    /// was unknown).
    pub recovered: u64,
    /// Emails beyond the first for one booking (an unknown outcome's repeat).
    pub repeats: u64,
    /// Tries that failed (`email_failed` alerts, and the `email_undeliverable`
    /// that ended a budget), when the alerts were read.
    pub failed_tries: Option<u64>,
    /// Emails whose tries were spent (`email_undeliverable`).
    pub undeliverable: Option<u64>,
}

impl EmailFigures {
    /// The figures of `s`'s sale.
    pub fn of(s: &SaleSnapshot) -> EmailFigures {
        let mut per_payment: BTreeMap<_, u64> = BTreeMap::new();
        let mut f = EmailFigures::default();
        for c in s.emails.iter().filter(|c| c.sale == s.sale) {
            *per_payment.entry(&c.payment_id).or_default() += 1;
            f.delivered += 1;
            f.recovered += u64::from(c.recovered);
        }
        for r in s
            .records
            .iter()
            .filter(|r| r.sale == s.sale && r.status == RecordStatus::Paid)
        {
            f.paid += 1;
            f.owed += u64::from(!r.email_sent);
            let n = per_payment.get(&r.payment_id).copied().unwrap_or(0);
            f.missing += u64::from(n == 0);
            f.repeats += n.saturating_sub(1);
        }
        if let Some(alerts) = &s.alerts {
            let count = |kind: &str| alerts.iter().filter(|a| a.kind == kind).count() as u64;
            let undeliverable = count(EMAIL_UNDELIVERABLE);
            f.failed_tries = Some(count(EMAIL_FAILED) + undeliverable);
            f.undeliverable = Some(undeliverable);
        }
        f
    }

    /// One line: `paid 10, delivered 10 (2 recovered, 0 repeats), 0 missing,
    /// 0 owed, 3 failed tries, 0 undeliverable`.
    pub fn line(&self) -> String {
        let opt = |v: Option<u64>| v.map_or("?".to_owned(), |v| v.to_string());
        format!(
            "paid {}, delivered {} ({} recovered, {} repeats), {} missing, {} owed, \
             {} failed tries, {} undeliverable",
            self.paid,
            self.delivered,
            self.recovered,
            self.repeats,
            self.missing,
            self.owed,
            opt(self.failed_tries),
            opt(self.undeliverable)
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use booking::notify::{Alert, Confirmation};
    use booking::records::{BookingRecord, ConfirmPath};
    use booking::{CandidateHash, Level, PaymentId, SaleId};

    fn record(who: &str, payment: &str, paid: bool, emailed: bool) -> BookingRecord {
        let r = BookingRecord::held(
            CandidateHash::of(who),
            SaleId::parse("s").unwrap(),
            Level::parse("gold").unwrap(),
            PaymentId::parse(payment).unwrap(),
            1,
            600_001,
        );
        if !paid {
            return r;
        }
        let mut r = r.into_paid(ConfirmPath::Callback, 2);
        r.email_sent = emailed;
        r
    }

    fn email(r: &BookingRecord, recovered: bool) -> Confirmation {
        Confirmation::of(r, None, recovered)
    }

    fn alert(kind: &str) -> Alert {
        Alert {
            kind: kind.into(),
            detail: String::new(),
            candidate: None,
            payment_id: None,
        }
    }

    #[test]
    fn each_figure_counts_its_own_cause() {
        let a = record("a", "PA", true, true); // one email
        let b = record("b", "PB", true, true); // first try failed, swept
        let c = record("c", "PC", true, true); // outcome unknown: a repeat
        let d = record("d", "PD", true, false); // owed, nothing delivered
        let e = record("e", "PE", false, false); // HELD: owes nothing
        let mut s = SaleSnapshot::empty(SaleId::parse("s").unwrap());
        s.records = vec![a.clone(), b.clone(), c.clone(), d, e];
        s.emails = vec![
            email(&a, false),
            email(&b, true),
            email(&c, false),
            email(&c, true),
        ];
        s.alerts = Some(vec![
            alert(EMAIL_FAILED),
            alert(EMAIL_FAILED),
            alert(EMAIL_UNDELIVERABLE),
            alert("paid_after_release"),
        ]);
        let f = EmailFigures::of(&s);
        assert_eq!(
            f,
            EmailFigures {
                paid: 4,
                delivered: 4,
                missing: 1,
                owed: 1,
                recovered: 2,
                repeats: 1,
                failed_tries: Some(3),
                undeliverable: Some(1),
            }
        );
        assert_eq!(
            f.line(),
            "paid 4, delivered 4 (2 recovered, 1 repeats), 1 missing, 1 owed, \
             3 failed tries, 1 undeliverable"
        );
        s.alerts = None;
        assert_eq!(EmailFigures::of(&s).failed_tries, None);
    }
}
