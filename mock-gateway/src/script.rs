//! Scripted behaviour: rules that make the gateway fail, stall, cancel, duplicate,
//! drop, reorder or forge, chosen deterministically from a seed.
//!
//! A script is data (TOML or JSON):
//! ```toml
//! seed = 7
//! [[rule]]
//! op = "execute"
//! select = { fraction = 0.1 }
//! action = { timeout = { complete = true } }
//! [[rule]]
//! op = "webhook"
//! select = "all"
//! action = { duplicate = { copies = 1 } }
//! times = 5
//! ```
//! For each call the first rule whose operation and selector match, and whose
//! `times` budget is not spent, decides. Fractions hash the seed, the rule's
//! position and the payment (or the call number when there is no payment), so the
//! same payments are picked in every run with the same seed, whatever the
//! interleaving.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::Distribution;
use serde::{Deserialize, Serialize};

/// The operations a rule can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// `token/grant`
    Grant,
    /// `token/refresh`
    Refresh,
    /// `create`
    Create,
    /// `execute`
    Execute,
    /// `payment/status`
    Status,
    /// `general/searchTransaction`
    Search,
    /// `payment/refund`
    Refund,
    /// An SNS notification to a subscriber.
    Webhook,
    /// The payer's redirect back to the merchant.
    Redirect,
}

impl Operation {
    /// Every operation, in a fixed order (used to index counters).
    pub const ALL: [Operation; 9] = [
        Operation::Grant,
        Operation::Refresh,
        Operation::Create,
        Operation::Execute,
        Operation::Status,
        Operation::Search,
        Operation::Refund,
        Operation::Webhook,
        Operation::Redirect,
    ];

    /// Position in [`Operation::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Name as in scripts and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Grant => "grant",
            Operation::Refresh => "refresh",
            Operation::Create => "create",
            Operation::Execute => "execute",
            Operation::Status => "status",
            Operation::Search => "search",
            Operation::Refund => "refund",
            Operation::Webhook => "webhook",
            Operation::Redirect => "redirect",
        }
    }

    fn is_api(self) -> bool {
        !matches!(self, Operation::Webhook | Operation::Redirect)
    }
}

/// Which calls a rule applies to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Selector {
    /// Every call.
    #[default]
    All,
    /// This fraction of payments (or of calls, for grant/refresh), in [0, 1].
    Fraction(f64),
    /// Calls about this payment.
    PaymentId(String),
    /// Calls about payments whose merchant invoice number starts with this.
    InvoicePrefix(String),
    /// The n-th call of the operation (1-based), counted since the script was set.
    Nth(u64),
}

/// How a failing call fails.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// HTTP 200 with this bKash `statusCode` (e.g. "2003", "503").
    Code(String),
    /// This HTTP status (5xx) with a short body.
    Http(u16),
    /// The connection breaks mid-response.
    Reset,
}

/// A latency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Latency {
    /// Exactly this many milliseconds.
    Ms(u64),
    /// Uniform between two bounds, milliseconds.
    Uniform([u64; 2]),
    /// Normal, clamped at zero.
    Normal {
        /// Mean, ms.
        mean_ms: f64,
        /// Standard deviation, ms.
        std_ms: f64,
    },
    /// Exponential with this mean.
    Exponential {
        /// Mean, ms.
        mean_ms: f64,
    },
    /// Log-normal: median and shape; a long tail.
    LogNormal {
        /// Median, ms.
        median_ms: f64,
        /// Shape (sigma of the underlying normal).
        sigma: f64,
    },
}

impl Latency {
    /// Draws one latency.
    pub fn sample(&self, rng: &mut ChaCha8Rng) -> Duration {
        let ms = match self {
            Latency::Ms(ms) => *ms as f64,
            Latency::Uniform([lo, hi]) => {
                let (lo, hi) = (*lo.min(hi), *lo.max(hi));
                rand::Rng::gen_range(rng, lo..=hi) as f64
            }
            Latency::Normal { mean_ms, std_ms } => rand_distr::Normal::new(*mean_ms, std_ms.abs())
                .map(|d| d.sample(rng))
                .unwrap_or(*mean_ms),
            Latency::Exponential { mean_ms } => {
                rand_distr::Exp::new(1.0 / mean_ms.max(f64::EPSILON))
                    .map(|d| d.sample(rng))
                    .unwrap_or(*mean_ms)
            }
            Latency::LogNormal { median_ms, sigma } => {
                rand_distr::LogNormal::new(median_ms.max(f64::EPSILON).ln(), sigma.abs())
                    .map(|d| d.sample(rng))
                    .unwrap_or(*median_ms)
            }
        };
        Duration::from_millis(ms.clamp(0.0, 3_600_000.0) as u64)
    }
}

/// Ways to forge what the gateway sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Forgery {
    /// A webhook with no signature.
    Unsigned,
    /// A webhook signed with a key that is not the gateway's.
    BadSignature,
    /// A webhook whose body was changed after signing (amount raised).
    Tampered,
    /// An earlier, already-delivered webhook sent again.
    Replay,
    /// A webhook signed by an attacker whose `SigningCertURL` points at a host
    /// made to look like SNS.
    CertUrlSpoof,
    /// A redirect whose `status` says this instead of the truth.
    RedirectStatus(String),
}

/// What a rule does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Action {
    /// Refuse the call without doing it.
    Fail(Failure),
    /// Cancel the payment (create: right after creating it; execute: before executing).
    Cancel,
    /// Answer late.
    Delay(Latency),
    /// Hang past the caller's deadline, with or without doing the work.
    Timeout {
        /// Whether the operation takes effect behind the hang.
        #[serde(default)]
        complete: bool,
        /// How long to hang; the gateway's `hang_ms` if absent.
        #[serde(default)]
        hang_ms: Option<u64>,
    },
    /// Deliver extra copies (webhooks, redirects).
    Duplicate {
        /// Extra copies.
        #[serde(default = "one")]
        copies: u32,
        /// Gap between copies, ms.
        #[serde(default)]
        spacing_ms: u64,
    },
    /// Never deliver (webhooks, redirects).
    Drop,
    /// Hold a delivery back so later ones overtake it.
    Reorder {
        /// How long to hold it, ms.
        hold_ms: u64,
    },
    /// Send a forgery.
    Forge(Forgery),
}

fn one() -> u32 {
    1
}

/// One rule. Unknown keys are refused: a misspelt `select` or `times` would
/// otherwise silently widen the rule to every call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// A name for logs and the ledger; `rule-<n>` if absent.
    #[serde(default)]
    pub name: Option<String>,
    /// The operation.
    pub op: Operation,
    /// Which calls.
    #[serde(default)]
    pub select: Selector,
    /// What to do.
    pub action: Action,
    /// At most this many firings; unlimited if absent.
    #[serde(default)]
    pub times: Option<u64>,
}

/// A whole script as loaded from a file or the control API. Unknown keys
/// (e.g. a misspelt `[[rule]]` table) are refused rather than ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ScriptSpec {
    /// Seed for fractions and latencies; the gateway's seed if absent.
    #[serde(default)]
    pub seed: Option<u64>,
    /// The rules, first match wins.
    #[serde(default, rename = "rule", alias = "rules")]
    pub rules: Vec<Rule>,
}

/// A rule or script that makes no sense.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ScriptError {
    /// The text does not parse.
    #[error("script does not parse: {0}")]
    Parse(String),
    /// A rule asks for something its operation cannot do.
    #[error("rule {rule}: action {action} does not apply to operation {op}")]
    ActionNotForOperation {
        /// Rule name.
        rule: String,
        /// Action kind.
        action: &'static str,
        /// Operation.
        op: &'static str,
    },
    /// A value out of range.
    #[error("rule {rule}: {why}")]
    Invalid {
        /// Rule name.
        rule: String,
        /// What is wrong.
        why: String,
    },
}

impl ScriptSpec {
    /// Parses TOML.
    pub fn from_toml(text: &str) -> Result<ScriptSpec, ScriptError> {
        let spec: ScriptSpec =
            toml::from_str(text).map_err(|e| ScriptError::Parse(e.to_string()))?;
        spec.validate()?;
        Ok(spec)
    }

    /// Checks every rule.
    pub fn validate(&self) -> Result<(), ScriptError> {
        for (i, r) in self.rules.iter().enumerate() {
            r.validate(i)?;
        }
        Ok(())
    }
}

impl Rule {
    /// The rule's name for logs.
    pub fn label(&self, index: usize) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("rule-{}", index + 1))
    }

    fn validate(&self, index: usize) -> Result<(), ScriptError> {
        let rule = self.label(index);
        let invalid = |why: String| ScriptError::Invalid {
            rule: rule.clone(),
            why,
        };
        if let Selector::Fraction(p) = self.select {
            if !(0.0..=1.0).contains(&p) || p.is_nan() {
                return Err(invalid(format!("fraction {p} is not within 0..=1")));
            }
        }
        if let Selector::Nth(0) = self.select {
            return Err(invalid("nth counts from 1".into()));
        }
        let (kind, ok) = match &self.action {
            Action::Fail(Failure::Http(s)) if !(400..=599).contains(s) => {
                return Err(invalid(format!("http status {s} is not an error status")));
            }
            Action::Fail(Failure::Code(c)) => match crate::codes::Code::parse(c) {
                None => return Err(invalid(format!("unknown bKash code {c:?}"))),
                Some(crate::codes::Code::Successful) => {
                    return Err(invalid(format!("code {c:?} is not a failure code")));
                }
                Some(_) => ("fail", self.op.is_api()),
            },
            Action::Fail(_) => ("fail", self.op.is_api()),
            Action::Cancel => (
                "cancel",
                matches!(self.op, Operation::Create | Operation::Execute),
            ),
            Action::Delay(_) => ("delay", true),
            Action::Timeout { .. } => ("timeout", self.op.is_api()),
            Action::Duplicate { .. } => (
                "duplicate",
                matches!(self.op, Operation::Webhook | Operation::Redirect),
            ),
            Action::Drop => (
                "drop",
                matches!(self.op, Operation::Webhook | Operation::Redirect),
            ),
            Action::Reorder { .. } => ("reorder", self.op == Operation::Webhook),
            Action::Forge(Forgery::RedirectStatus(s)) => {
                if !matches!(s.as_str(), "success" | "failure" | "cancel") {
                    return Err(invalid(format!(
                        "redirect status {s:?} is not success|failure|cancel"
                    )));
                }
                ("forge", self.op == Operation::Redirect)
            }
            Action::Forge(_) => ("forge", self.op == Operation::Webhook),
        };
        if ok {
            Ok(())
        } else {
            Err(ScriptError::ActionNotForOperation {
                rule,
                action: kind,
                op: self.op.as_str(),
            })
        }
    }
}

/// What a call is about, for selectors.
#[derive(Debug, Clone, Copy, Default)]
pub struct Subject<'a> {
    /// The payment's ID, when known.
    pub payment_id: Option<&'a str>,
    /// The payment's merchant invoice number, when known.
    pub invoice: Option<&'a str>,
}

/// A rule that fired for one call.
#[derive(Debug, Clone)]
pub struct Decision {
    /// The rule's name.
    pub rule: String,
    /// What to do.
    pub action: Action,
    /// A generator seeded for this call, for latencies.
    pub rng: ChaCha8Rng,
}

/// A live script: the rules plus their counters.
#[derive(Debug)]
pub struct Script {
    seed: u64,
    rules: Vec<(Rule, AtomicU64)>,
    calls: [AtomicU64; Operation::ALL.len()],
}

use crate::ids::{hash_str, mix};

impl Script {
    /// A script from a validated spec; `default_seed` when the spec has none.
    pub fn new(spec: ScriptSpec, default_seed: u64) -> Script {
        Script {
            seed: spec.seed.unwrap_or(default_seed),
            rules: spec
                .rules
                .into_iter()
                .map(|r| (r, AtomicU64::new(0)))
                .collect(),
            calls: Default::default(),
        }
    }

    /// This script plus `rule` at the end, with every counter carried over.
    pub fn with_rule(&self, rule: Rule) -> Result<Script, ScriptError> {
        rule.validate(self.rules.len())?;
        let mut rules: Vec<(Rule, AtomicU64)> = self
            .rules
            .iter()
            .map(|(r, n)| (r.clone(), AtomicU64::new(n.load(Ordering::Relaxed))))
            .collect();
        rules.push((rule, AtomicU64::new(0)));
        let calls = std::array::from_fn(|i| AtomicU64::new(self.calls[i].load(Ordering::Relaxed)));
        Ok(Script {
            seed: self.seed,
            rules,
            calls,
        })
    }

    /// The rules, as given.
    pub fn spec(&self) -> ScriptSpec {
        ScriptSpec {
            seed: Some(self.seed),
            rules: self.rules.iter().map(|(r, _)| r.clone()).collect(),
        }
    }

    /// How often each rule has fired.
    pub fn fired(&self) -> Vec<(String, u64)> {
        self.rules
            .iter()
            .enumerate()
            .map(|(i, (r, n))| (r.label(i), n.load(Ordering::Relaxed)))
            .collect()
    }

    /// Counts a call of `op` and returns the rule that decides it, if any.
    pub fn decide(&self, op: Operation, subject: Subject<'_>) -> Option<Decision> {
        let call = self.calls[op.index()].fetch_add(1, Ordering::Relaxed) + 1;
        if self.rules.is_empty() {
            return None;
        }
        for (i, (rule, fired)) in self.rules.iter().enumerate() {
            if rule.op != op || !self.selects(i, &rule.select, call, subject) {
                continue;
            }
            if let Some(max) = rule.times {
                // take one firing from the budget, or pass if it is spent
                let taken = fired.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    (n < max).then_some(n + 1)
                });
                if taken.is_err() {
                    continue;
                }
            } else {
                fired.fetch_add(1, Ordering::Relaxed);
            }
            let key = subject
                .payment_id
                .map(|p| hash_str(self.seed, p))
                .unwrap_or(call);
            let rng = ChaCha8Rng::seed_from_u64(mix(self.seed ^ mix(i as u64) ^ mix(key ^ call)));
            return Some(Decision {
                rule: rule.label(i),
                action: rule.action.clone(),
                rng,
            });
        }
        None
    }

    fn selects(&self, index: usize, sel: &Selector, call: u64, subject: Subject<'_>) -> bool {
        match sel {
            Selector::All => true,
            Selector::Nth(n) => call == *n,
            Selector::PaymentId(id) => subject.payment_id == Some(id.as_str()),
            Selector::InvoicePrefix(p) => {
                subject.invoice.is_some_and(|i| i.starts_with(p.as_str()))
            }
            Selector::Fraction(p) => {
                let key = match subject.payment_id.or(subject.invoice) {
                    Some(s) => hash_str(self.seed ^ mix(index as u64 + 1), s),
                    None => mix(self.seed ^ mix(index as u64 + 1) ^ call),
                };
                // top 53 bits → uniform in [0, 1)
                ((key >> 11) as f64 / (1u64 << 53) as f64) < *p
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(text: &str) -> Script {
        Script::new(ScriptSpec::from_toml(text).unwrap(), 1)
    }

    #[test]
    fn toml_scripts_parse_every_action() {
        let s = ScriptSpec::from_toml(
            r#"
            seed = 9
            [[rule]]
            op = "execute"
            select = { fraction = 0.5 }
            action = { fail = { code = "2003" } }
            [[rule]]
            op = "create"
            action = { fail = { http = 503 } }
            [[rule]]
            op = "status"
            action = { fail = "reset" }
            [[rule]]
            op = "execute"
            select = { payment_id = "TR1" }
            action = { timeout = { complete = true, hang_ms = 10 } }
            [[rule]]
            op = "create"
            select = { invoice_prefix = "X" }
            action = "cancel"
            [[rule]]
            op = "webhook"
            action = { duplicate = { copies = 2, spacing_ms = 5 } }
            times = 3
            [[rule]]
            op = "webhook"
            action = "drop"
            [[rule]]
            op = "webhook"
            action = { reorder = { hold_ms = 100 } }
            [[rule]]
            op = "webhook"
            action = { forge = "cert_url_spoof" }
            [[rule]]
            op = "redirect"
            action = { forge = { redirect_status = "cancel" } }
            [[rule]]
            op = "grant"
            select = { nth = 2 }
            action = { delay = { log_normal = { median_ms = 5.0, sigma = 1.0 } } }
            "#,
        )
        .unwrap();
        assert_eq!(s.seed, Some(9));
        assert_eq!(s.rules.len(), 11);
        assert_eq!(
            s.rules[5].action,
            Action::Duplicate {
                copies: 2,
                spacing_ms: 5
            }
        );
        assert_eq!(
            s.rules[9].action,
            Action::Forge(Forgery::RedirectStatus("cancel".into()))
        );
    }

    #[test]
    fn nonsense_rules_are_refused_with_a_reason() {
        let bad = [
            ("op = \"execute\"\naction = \"drop\"", "does not apply"),
            (
                "op = \"webhook\"\naction = { fail = { code = \"2003\" } }",
                "does not apply",
            ),
            ("op = \"status\"\naction = \"cancel\"", "does not apply"),
            (
                "op = \"execute\"\naction = { fail = { code = \"7777\" } }",
                "unknown bKash code",
            ),
            (
                "op = \"execute\"\naction = { fail = { http = 200 } }",
                "not an error status",
            ),
            (
                "op = \"execute\"\nselect = { fraction = 1.5 }\naction = \"cancel\"",
                "within 0..=1",
            ),
            (
                "op = \"redirect\"\naction = { forge = { redirect_status = \"paid\" } }",
                "success|failure|cancel",
            ),
            (
                "op = \"execute\"\naction = { fail = { code = \"0000\" } }",
                "not a failure code",
            ),
            (
                "op = \"execute\"\nselct = { nth = 2 }\naction = \"cancel\"",
                "does not parse",
            ),
            (
                "op = \"execute\"\naction = { timeout = { complete = true, hang = 10 } }",
                "does not parse",
            ),
            ("op = \"teleport\"\naction = \"drop\"", "does not parse"),
        ];
        for (rule, why) in bad {
            let err = ScriptSpec::from_toml(&format!("[[rule]]\n{rule}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(why), "{rule}: {err}");
        }
        // a misspelt table is refused, not read as an empty script; the alias works
        let misspelt = "[[rulez]]\nop = \"execute\"\naction = \"cancel\"";
        assert!(ScriptSpec::from_toml(misspelt).is_err());
        let alias = ScriptSpec::from_toml(&misspelt.replace("rulez", "rules")).unwrap();
        assert_eq!(alias.rules.len(), 1);
    }

    #[test]
    fn first_matching_rule_wins_and_times_is_a_budget() {
        let s = script(
            r#"
            [[rule]]
            name = "twice"
            op = "execute"
            action = { fail = { code = "2003" } }
            times = 2
            [[rule]]
            name = "then"
            op = "execute"
            action = "cancel"
            "#,
        );
        let names: Vec<_> = (0..4)
            .map(|_| {
                s.decide(Operation::Execute, Subject::default())
                    .unwrap()
                    .rule
            })
            .collect();
        assert_eq!(names, ["twice", "twice", "then", "then"]);
        assert!(s.decide(Operation::Create, Subject::default()).is_none());
        assert_eq!(
            s.fired(),
            vec![("twice".to_string(), 2), ("then".to_string(), 2)]
        );
    }

    #[test]
    fn nth_picks_exactly_one_call() {
        let s = script(
            "[[rule]]\nop = \"status\"\nselect = { nth = 3 }\naction = { fail = \"reset\" }",
        );
        let hits: Vec<bool> = (0..5)
            .map(|_| s.decide(Operation::Status, Subject::default()).is_some())
            .collect();
        assert_eq!(hits, [false, false, true, false, false]);
    }

    #[test]
    fn fractions_are_stable_per_payment_and_close_to_p() {
        let text = "seed = 3\n[[rule]]\nop = \"execute\"\nselect = { fraction = 0.25 }\naction = \"cancel\"";
        let a = script(text);
        let b = script(text);
        let ids: Vec<String> = (0..4000).map(|i| format!("TR{i}")).collect();
        let pick = |s: &Script, id: &str| {
            s.decide(
                Operation::Execute,
                Subject {
                    payment_id: Some(id),
                    invoice: None,
                },
            )
            .is_some()
        };
        let first: Vec<bool> = ids.iter().map(|id| pick(&a, id)).collect();
        // the other script sees the payments in reverse order: same choices
        let mut second: Vec<bool> = ids.iter().rev().map(|id| pick(&b, id)).collect();
        second.reverse();
        assert_eq!(first, second);
        let n = first.iter().filter(|x| **x).count();
        assert!((850..1150).contains(&n), "{n} of 4000 picked for p=0.25");
        // another seed picks other payments
        let c = script(&text.replace("seed = 3", "seed = 4"));
        let third: Vec<bool> = ids.iter().map(|id| pick(&c, id)).collect();
        assert_ne!(first, third);
    }

    #[test]
    fn latencies_follow_their_distribution_and_are_seeded() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        assert_eq!(Latency::Ms(40).sample(&mut rng), Duration::from_millis(40));
        for _ in 0..100 {
            let d = Latency::Uniform([10, 20]).sample(&mut rng).as_millis();
            assert!((10..=20).contains(&d));
        }
        let mean: f64 = (0..2000)
            .map(|_| {
                Latency::Exponential { mean_ms: 50.0 }
                    .sample(&mut rng)
                    .as_millis() as f64
            })
            .sum::<f64>()
            / 2000.0;
        assert!((40.0..60.0).contains(&mean), "mean {mean}");
        let mut r1 = ChaCha8Rng::seed_from_u64(5);
        let mut r2 = ChaCha8Rng::seed_from_u64(5);
        let d = Latency::LogNormal {
            median_ms: 20.0,
            sigma: 1.0,
        };
        assert_eq!(d.sample(&mut r1), d.sample(&mut r2));
    }
}
