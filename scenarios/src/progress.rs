//! What a person watching the rehearsal reads: a plain progress line every
//! second on stderr (no terminal tricks, so CI logs read well) and a
//! one-screen summary at the end. Formatting only; the numbers come from
//! [`crate::rehearse`].

use std::fmt::Write as _;

use reports::{Report, Sample};

/// One progress line: phase, elapsed, request and booking rates, latency,
/// holds, paid, seats left, queue age.
pub fn line(phase: &str, sample: &Sample) -> String {
    let left: u64 = sample.seats_left.values().sum();
    format!(
        "[{:>6.1}s] {:<7} req/s {:>6.0}  book/s {:>6.0}  p99 {:>6.1} ms  holds {:>6}  paid {:>6}  released {:>6}  seats left {:>6}  queue {:>5} ms",
        sample.t_ms as f64 / 1_000.0,
        phase,
        sample.requests_per_s,
        sample.bookings_per_s,
        sample.p99_ms,
        sample.holds,
        sample.paid,
        sample.released,
        left,
        sample.queue_age_ms,
    )
}

/// A count with thousands separators: `20,700`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn figure(v: f64, unit: &str) -> String {
    match unit {
        "count" | "seats" => thousands(v.max(0.0).round() as u64),
        "%" => format!("{v:.4} %"),
        "ms" => format!("{v:.1} ms"),
        "bookings/s" => format!("{v:.0}/s"),
        _ => format!("{v} {unit}"),
    }
}

/// The end-of-run summary: verdict, load, sale, queue, each invariant, where
/// the report is.
pub fn summary(report: &Report, folder: &str) -> String {
    let mut s = String::new();
    let verdict = if report.passed { "PASSED" } else { "FAILED" };
    let _ = writeln!(
        s,
        "rehearsal {}  profile {}  stack {}  seed {}  {verdict}",
        report.run_id, report.profile_name, report.stack, report.seed
    );
    let l = &report.load;
    let _ = writeln!(
        s,
        "load   {} arrivals scheduled, {} started ({} late, {} dropped); rush {:.0}/s of {:.0}/s; {} requests, {} server errors",
        thousands(l.arrivals_scheduled),
        thousands(l.arrivals_started),
        thousands(l.arrivals_late),
        thousands(l.arrivals_dropped),
        l.achieved_rate,
        l.target_rate,
        thousands(l.requests),
        thousands(l.server_errors),
    );
    for t in &l.transactions {
        let _ = writeln!(
            s,
            "       {:<10} {:>8}  p50 {:>7.1}  p90 {:>7.1}  p99 {:>7.1}  p99.9 {:>7.1}  max {:>8.1} ms  errors {}",
            t.name,
            thousands(t.count),
            t.p50_ms,
            t.p90_ms,
            t.p99_ms,
            t.p999_ms,
            t.max_ms,
            thousands(t.errors)
        );
    }
    let sale = &report.sale;
    let paid: u64 = sale.paid_by_path.values().sum();
    let paths = sale
        .paid_by_path
        .iter()
        .map(|(k, v)| format!("{k} {}", thousands(*v)))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(
        s,
        "sale   {} seats; {} holds; {} paid ({paths}); {} released; {} resold; {} extended; {} emails; {} alerts",
        thousands(sale.seats),
        thousands(sale.holds_created),
        thousands(paid),
        thousands(sale.released),
        thousands(sale.resold),
        thousands(sale.extended),
        thousands(sale.emails),
        thousands(sale.alerts),
    );
    let levels = sale
        .levels
        .iter()
        .map(|lv| format!("{} {}/{}", lv.level, thousands(lv.taken), thousands(lv.cap)))
        .collect::<Vec<_>>()
        .join("  ");
    let _ = writeln!(s, "levels {levels}");
    if let Some(m) = &sale.mail {
        let _ = writeln!(s, "{}", mail_line(m));
    }
    let _ = writeln!(
        s,
        "queue  oldest message {} ms; {} dead letters",
        thousands(report.queue.oldest_age_max_ms),
        report.queue.dead_letters
    );
    for i in &report.invariants {
        let op = if i.bound == crate::thresholds::AT_LEAST {
            ">="
        } else {
            "<="
        };
        let _ = writeln!(
            s,
            "  {} {:<40} {:>14} {op} {}",
            if i.passed { "ok  " } else { "FAIL" },
            i.name,
            figure(i.figure, &i.unit),
            figure(i.threshold, &i.unit),
        );
        if !i.passed && !i.detail.is_empty() {
            let _ = writeln!(s, "       {}", i.detail);
        }
    }
    let _ = writeln!(s, "report {folder}");
    s
}

/// The summary's mail line: what the mail server delivered, read back.
pub fn mail_line(m: &reports::MailFigures) -> String {
    format!(
        "mail   {}: {} emails delivered for {} PAID bookings ({} with an email, {} Message-IDs; {} recovered sends, {} repeats); read from {}",
        m.kind,
        thousands(m.delivered),
        thousands(m.paid),
        thousands(m.bookings),
        thousands(m.message_ids),
        thousands(m.recovered),
        thousands(m.repeats),
        m.read_from
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn thousands_are_separated() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(20_700), "20,700");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn a_progress_line_says_phase_rates_and_seats() {
        let sample = Sample {
            t_ms: 12_345,
            bookings_per_s: 2_001.0,
            requests_per_s: 4_000.0,
            p99_ms: 9.5,
            holds: 10,
            paid: 5,
            released: 1,
            seats_left: BTreeMap::from([("a".into(), 3), ("b".into(), 4)]),
            queue_age_ms: 12,
            ..Sample::default()
        };
        let l = line("rush", &sample);
        assert!(l.starts_with("[  12.3s] rush"), "{l}");
        assert!(l.contains("book/s   2001"), "{l}");
        assert!(l.contains("seats left      7"), "{l}");
        assert!(!l.contains('\n'));
    }
}
