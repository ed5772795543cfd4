//! `junit.xml`: a run's verdicts as JUnit XML, the test-result format CI
//! systems read (GitHub Actions reporters, GitLab, Jenkins, Buildkite).
//!
//! One `<testsuite>` per run, one `<testcase>` per verdict (invariants and
//! thresholds); a failed verdict gets a `<failure>` whose message carries its
//! figure, its bound and its detail. The writer ([`render`]) takes plain
//! [`TestSuite`]s so that other tools (`chaos matrix`, `chaos zoo`) write
//! theirs with it too. The XML is written and escaped by `quick-xml`;
//! characters XML 1.0 cannot carry at all (most control characters) become
//! `U+FFFD`.

use std::io;

use quick_xml::Writer;
use quick_xml::events::{BytesDecl, BytesText, Event};

use crate::figures::{duration_ms, fmt_num, threshold, with_unit};
use crate::model::{Report, Verdict};

/// The JUnit file's name in a run folder.
pub const JUNIT_XML: &str = "junit.xml";

/// The longest failure message, characters (the body keeps everything).
pub const MESSAGE_MAX: usize = 500;

/// One suite: a run, or a matrix, or the zoo.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TestSuite {
    /// Its name (`rehearsal default (embedded)`, `chaos matrix`, …).
    pub name: String,
    /// When it started, RFC 3339 (`None`: not known).
    pub timestamp: Option<String>,
    /// How long it took, seconds.
    pub time_secs: f64,
    /// Facts about it as `<property name= value=>` (run id, seed, …).
    pub properties: Vec<(String, String)>,
    /// Its cases, in order.
    pub cases: Vec<TestCase>,
}

impl TestSuite {
    /// How many cases failed.
    pub fn failures(&self) -> usize {
        self.cases.iter().filter(|c| c.failure.is_some()).count()
    }
}

/// One case: a verdict, a matrix run, a zoo row.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TestCase {
    /// Its name (`booking_p99_ms`, `seed 3`, …).
    pub name: String,
    /// Its group (`rehearsal.thresholds`, `chaos.matrix.calm`, …).
    pub classname: String,
    /// How long it took, seconds (0 when not measured apart).
    pub time_secs: f64,
    /// Why it failed (`None`: it passed).
    pub failure: Option<Failure>,
    /// Anything else worth keeping (`<system-out>`; `None`: none).
    pub output: Option<String>,
}

/// Why a case failed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Failure {
    /// One line: what failed, with the figure and the bound (cut at
    /// [`MESSAGE_MAX`] characters).
    pub message: String,
    /// Its kind (`type=`): `invariant`, `threshold`, `not_caught`, …
    pub kind: String,
    /// The whole story (the element's text).
    pub text: String,
}

/// `s` with every character XML 1.0 cannot carry replaced by `U+FFFD`
/// (escaping does not help those: `&#1;` is not allowed either).
pub fn xml_chars(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\t' | '\n' | '\r' => c,
            '\u{0}'..='\u{1f}' | '\u{fffe}' | '\u{ffff}' => '\u{fffd}',
            c => c,
        })
        .collect()
}

/// `s` on one line (line breaks become spaces), cut at `max` characters with
/// an ellipsis.
fn one_line(s: &str, max: usize) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        flat
    } else {
        let mut cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// Seconds as JUnit writes them: three decimals.
fn secs(s: f64) -> String {
    format!("{:.3}", if s.is_finite() { s.max(0.0) } else { 0.0 })
}

/// Writes one suite.
fn write_suite(w: &mut Writer<Vec<u8>>, suite: &TestSuite) -> io::Result<()> {
    let tests = suite.cases.len().to_string();
    let failures = suite.failures().to_string();
    let time = secs(suite.time_secs);
    let name = xml_chars(&suite.name);
    let mut el = w
        .create_element("testsuite")
        .with_attribute(("name", name.as_str()))
        .with_attribute(("tests", tests.as_str()))
        .with_attribute(("failures", failures.as_str()))
        .with_attribute(("errors", "0"))
        .with_attribute(("skipped", "0"))
        .with_attribute(("time", time.as_str()));
    let timestamp = suite.timestamp.as_deref().map(xml_chars);
    if let Some(t) = &timestamp {
        el = el.with_attribute(("timestamp", t.as_str()));
    }
    el.write_inner_content(|w| {
        if !suite.properties.is_empty() {
            w.create_element("properties").write_inner_content(|w| {
                for (k, v) in &suite.properties {
                    let (k, v) = (xml_chars(k), xml_chars(v));
                    w.create_element("property")
                        .with_attribute(("name", k.as_str()))
                        .with_attribute(("value", v.as_str()))
                        .write_empty()?;
                }
                Ok(())
            })?;
        }
        for case in &suite.cases {
            write_case(w, case)?;
        }
        Ok(())
    })?;
    Ok(())
}

/// Writes one case.
fn write_case(w: &mut Writer<Vec<u8>>, case: &TestCase) -> io::Result<()> {
    let (name, classname) = (xml_chars(&case.name), xml_chars(&case.classname));
    let time = secs(case.time_secs);
    let el = w
        .create_element("testcase")
        .with_attribute(("name", name.as_str()))
        .with_attribute(("classname", classname.as_str()))
        .with_attribute(("time", time.as_str()));
    if case.failure.is_none() && case.output.is_none() {
        el.write_empty()?;
        return Ok(());
    }
    el.write_inner_content(|w| {
        if let Some(f) = &case.failure {
            let message = xml_chars(&one_line(&f.message, MESSAGE_MAX));
            let kind = xml_chars(&f.kind);
            let text = xml_chars(&f.text);
            w.create_element("failure")
                .with_attribute(("message", message.as_str()))
                .with_attribute(("type", kind.as_str()))
                .write_text_content(BytesText::new(&text))?;
        }
        if let Some(out) = &case.output {
            let out = xml_chars(out);
            w.create_element("system-out")
                .write_text_content(BytesText::new(&out))?;
        }
        Ok(())
    })?;
    Ok(())
}

/// The JUnit XML of `suites`: a `<testsuites>` root named `name` with the
/// totals, one `<testsuite>` each.
pub fn render(name: &str, suites: &[TestSuite]) -> String {
    let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
    let tests = suites
        .iter()
        .map(|s| s.cases.len())
        .sum::<usize>()
        .to_string();
    let failures = suites
        .iter()
        .map(TestSuite::failures)
        .sum::<usize>()
        .to_string();
    let time = secs(suites.iter().map(|s| s.time_secs).sum());
    let name = xml_chars(name);
    // writing into a Vec cannot fail
    let written = w
        .write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))
        .and_then(|()| {
            w.create_element("testsuites")
                .with_attribute(("name", name.as_str()))
                .with_attribute(("tests", tests.as_str()))
                .with_attribute(("failures", failures.as_str()))
                .with_attribute(("errors", "0"))
                .with_attribute(("time", time.as_str()))
                .write_inner_content(|w| {
                    for s in suites {
                        write_suite(w, s)?;
                    }
                    Ok(())
                })
                .map(|_| ())
        });
    debug_assert!(written.is_ok(), "writing XML into memory: {written:?}");
    let mut out = String::from_utf8(w.into_inner())
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    out.push('\n');
    out
}

/// Whether a verdict is a threshold (a measured figure held to a bound,
/// like `booking_p99_ms ≤ 50 ms`) rather than an invariant (a count of
/// violations that must be 0).
pub fn is_threshold(v: &Verdict) -> bool {
    v.threshold != 0.0 || v.bound == booking_audit::AT_LEAST
}

/// The one-line failure message of a verdict: `booking_p99_ms: 120 ms,
/// bound ≤ 50 ms — 54000 bookings`.
pub fn verdict_message(v: &Verdict) -> String {
    let mut m = format!(
        "{}: {}, bound {}",
        v.name,
        with_unit(v.figure, &v.unit),
        threshold(v)
    );
    if !v.detail.is_empty() {
        m.push_str(" — ");
        m.push_str(&v.detail);
    }
    one_line(&m, MESSAGE_MAX)
}

/// The case of one verdict of `r`.
fn verdict_case(r: &Report, v: &Verdict) -> TestCase {
    let kind = if is_threshold(v) {
        "threshold"
    } else {
        "invariant"
    };
    let failure = (!v.passed).then(|| {
        let mut text = format!(
            "{} failed in run {}\nfigure: {}\nbound: {}\n",
            v.name,
            r.run_id,
            with_unit(v.figure, &v.unit),
            threshold(v)
        );
        if let Some(x) = r.relaxed(&v.name) {
            text.push_str(&format!(
                "relaxed by {} from {}\n",
                x.by,
                fmt_num(x.default_bound)
            ));
        }
        if !v.detail.is_empty() {
            text.push_str(&format!("detail: {}\n", v.detail));
        }
        Failure {
            message: verdict_message(v),
            kind: kind.to_owned(),
            text,
        }
    });
    TestCase {
        name: v.name.clone(),
        classname: format!("rehearsal.{kind}s"),
        time_secs: 0.0,
        failure,
        output: None,
    }
}

/// The suite of a run: one case per verdict, the run's facts as properties.
pub fn report_suite(r: &Report) -> TestSuite {
    let mut properties = vec![
        ("run_id".to_owned(), r.run_id.clone()),
        ("profile".to_owned(), r.profile_name.clone()),
        ("stack".to_owned(), r.stack.clone()),
        ("seed".to_owned(), r.seed.to_string()),
        ("passed".to_owned(), r.passed.to_string()),
    ];
    if let Some(s) = &r.shard {
        properties.push(("shard".to_owned(), format!("{}/{}", s.index, s.count)));
    }
    TestSuite {
        name: format!("rehearsal {} ({})", r.profile_name, r.stack),
        timestamp: (!r.started_at.is_empty()).then(|| r.started_at.clone()),
        time_secs: duration_ms(r) as f64 / 1_000.0,
        properties,
        cases: r.invariants.iter().map(|v| verdict_case(r, v)).collect(),
    }
}

/// `junit.xml` of a run.
pub fn render_report(r: &Report) -> String {
    render(&format!("rehearsal {}", r.run_id), &[report_suite(r)])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::xml_check::{self, attr, tags};

    fn case(name: &str, failure: Option<&str>) -> TestCase {
        TestCase {
            name: name.into(),
            classname: "x".into(),
            time_secs: 1.5,
            failure: failure.map(|m| Failure {
                message: m.into(),
                kind: "k".into(),
                text: format!("body of {m}"),
            }),
            output: None,
        }
    }

    #[test]
    fn suites_count_their_cases_and_failures_and_escape_everything() {
        let suite = TestSuite {
            name: "a <suite> & \"quotes\"".into(),
            timestamp: Some("2026-12-02T18:43:18Z".into()),
            time_secs: 2.0,
            properties: vec![("seed".into(), "7".into())],
            cases: vec![
                case("ok", None),
                case("bad", Some("x < 3 & y > \"2\"\nsecond line \u{1}")),
            ],
        };
        let xml = render("all", &[suite.clone(), suite]);
        xml_check::check(&xml).unwrap();
        let tags = tags(&xml);
        let root = &tags[0];
        assert_eq!(root.0, "testsuites");
        assert_eq!((attr(root, "tests"), attr(root, "failures")), ("4", "2"));
        assert_eq!(attr(root, "time"), "4.000");
        let suite = tags.iter().find(|t| t.0 == "testsuite").unwrap();
        assert_eq!(attr(suite, "name"), "a <suite> & \"quotes\"");
        assert_eq!((attr(suite, "tests"), attr(suite, "failures")), ("2", "1"));
        let failure = tags.iter().find(|t| t.0 == "failure").unwrap();
        // one line, the control character replaced
        assert_eq!(
            attr(failure, "message"),
            "x < 3 & y > \"2\" second line \u{fffd}"
        );
        assert!(xml.contains("body of x &lt; 3 &amp; y"), "{xml}");
        let props: Vec<_> = tags.iter().filter(|t| t.0 == "property").collect();
        assert_eq!(props.len(), 2);
        assert_eq!(
            (attr(props[0], "name"), attr(props[0], "value")),
            ("seed", "7")
        );
    }

    #[test]
    fn a_long_message_is_cut_but_its_body_is_not() {
        let long = "y".repeat(2 * MESSAGE_MAX);
        let xml = render(
            "r",
            &[TestSuite {
                name: "s".into(),
                cases: vec![case("c", Some(&long))],
                ..TestSuite::default()
            }],
        );
        let tags = tags(&xml);
        let f = tags.iter().find(|t| t.0 == "failure").unwrap();
        assert_eq!(attr(f, "message").chars().count(), MESSAGE_MAX);
        assert!(attr(f, "message").ends_with('…'));
        assert!(xml.contains(&format!("body of {long}")));
    }

    #[test]
    fn verdicts_are_invariants_or_thresholds_and_a_failure_says_figure_and_bound() {
        let inv = Verdict::at_most("count_is_paid", 3.0, 0.0, "count", "3 levels off".into());
        let p99 = Verdict::at_most("booking_p99_ms", 120.5, 50.0, "ms", "54000 bookings".into());
        let rate = Verdict::at_least("rush_rate", 1990.0, 1950.0, "bookings/s", String::new());
        assert!(!is_threshold(&inv));
        assert!(is_threshold(&p99) && is_threshold(&rate));
        assert_eq!(
            verdict_message(&p99),
            "booking_p99_ms: 120.5 ms, bound ≤ 50 ms — 54000 bookings"
        );
        let r = Report {
            run_id: "run-1".into(),
            profile_name: "ci".into(),
            stack: "embedded".into(),
            invariants: vec![inv, p99, rate],
            ..Report::default()
        };
        let xml = render_report(&r);
        let tags = tags(&xml);
        let cases: Vec<_> = tags.iter().filter(|t| t.0 == "testcase").collect();
        let names: Vec<_> = cases.iter().map(|t| attr(t, "name")).collect();
        assert_eq!(names, ["count_is_paid", "booking_p99_ms", "rush_rate"]);
        let classes: Vec<_> = cases.iter().map(|t| attr(t, "classname")).collect();
        assert_eq!(
            classes,
            [
                "rehearsal.invariants",
                "rehearsal.thresholds",
                "rehearsal.thresholds"
            ]
        );
        let failures: Vec<_> = tags.iter().filter(|t| t.0 == "failure").collect();
        assert_eq!(failures.len(), 2);
        assert_eq!(attr(failures[0], "type"), "invariant");
        assert!(attr(failures[0], "message").starts_with("count_is_paid: 3, bound ≤ 0"));
        assert!(xml.contains("figure: 120.5 ms\nbound: ≤ 50 ms\ndetail: 54000 bookings"));
        let suite = tags.iter().find(|t| t.0 == "testsuite").unwrap();
        assert_eq!(attr(suite, "failures"), "2");
        assert_eq!(attr(suite, "name"), "rehearsal ci (embedded)");
    }

    #[test]
    fn xml_chars_keep_text_and_replace_what_xml_cannot_carry() {
        assert_eq!(xml_chars("a\tb\nc ü ✓"), "a\tb\nc ü ✓");
        assert_eq!(xml_chars("\u{0}\u{1b}[31m"), "\u{fffd}\u{fffd}[31m");
        assert_eq!(one_line("a\r\nb", 10), "a  b");
    }
}
