//! Counters: calls per operation, refusals per code, scripted firings, grants,
//! payer actions and webhook deliveries. Served as Prometheus text at `/metrics`
//! and as JSON at `/__mock/stats`; every label set is drawn from a closed enum,
//! so the JSON view can enumerate them without keeping a second copy.

use std::sync::OnceLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde_json::{Map, Value, json};

use crate::codes::Code;
use crate::script::Operation;

/// What happened to one webhook delivery attempt or message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Delivery {
    /// A subscriber answered 2xx.
    Delivered,
    /// One attempt failed (non-2xx, timeout, refused); a retry may follow.
    AttemptFailed,
    /// Every retry failed; SNS gives the message up.
    GivenUp,
    /// A script dropped it.
    Dropped,
    /// A forgery was sent.
    Forged,
    /// No confirmed subscription: nothing sent.
    Unconfirmed,
}

impl Delivery {
    const ALL: [Delivery; 6] = [
        Delivery::Delivered,
        Delivery::AttemptFailed,
        Delivery::GivenUp,
        Delivery::Dropped,
        Delivery::Forged,
        Delivery::Unconfirmed,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Delivery::Delivered => "delivered",
            Delivery::AttemptFailed => "attempt_failed",
            Delivery::GivenUp => "given_up",
            Delivery::Dropped => "dropped",
            Delivery::Forged => "forged",
            Delivery::Unconfirmed => "unconfirmed",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabel {
    op: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusedLabel {
    op: &'static str,
    code: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabel {
    action: &'static str,
}

/// The gateway's counters.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    calls: Family<OpLabel, Counter>,
    refused: Family<RefusedLabel, Counter>,
    scripted: Family<OpLabel, Counter>,
    grants: Counter,
    executed: Counter,
    payer: Family<ActionLabel, Counter>,
    webhooks: Family<OutcomeLabel, Counter>,
    /// Each operation's `calls` counter, fetched from the family on first use
    /// (a counter shares its value with the family's): no lock or hash per call.
    /// Filled lazily so the exposition lists only operations seen, as before.
    calls_by_op: [OnceLock<Counter>; Operation::ALL.len()],
    /// The same for payer actions: pay, cancel, fail.
    payer_by_action: [OnceLock<Counter>; 3],
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut registry = Registry::with_prefix("mock_gateway");
        let calls = Family::<OpLabel, Counter>::default();
        let refused = Family::<RefusedLabel, Counter>::default();
        let scripted = Family::<OpLabel, Counter>::default();
        let grants = Counter::default();
        let executed = Counter::default();
        let payer = Family::<ActionLabel, Counter>::default();
        let webhooks = Family::<OutcomeLabel, Counter>::default();
        registry.register("calls", "Calls per operation", calls.clone());
        registry.register(
            "refused",
            "Non-0000 answers per operation and code",
            refused.clone(),
        );
        registry.register(
            "scripted",
            "Calls a script rule decided, per operation",
            scripted.clone(),
        );
        registry.register(
            "grants",
            "Tokens granted (the rate-limited allowance spent)",
            grants.clone(),
        );
        registry.register(
            "executed",
            "Payments completed by execute",
            executed.clone(),
        );
        registry.register(
            "payer_actions",
            "Payer actions on the checkout page",
            payer.clone(),
        );
        registry.register(
            "webhook_deliveries",
            "Webhook deliveries by outcome",
            webhooks.clone(),
        );
        Metrics {
            registry,
            calls,
            refused,
            scripted,
            grants,
            executed,
            payer,
            webhooks,
            calls_by_op: Default::default(),
            payer_by_action: Default::default(),
        }
    }
}

impl Metrics {
    /// Counts a call.
    pub fn call(&self, op: Operation) {
        let label = || OpLabel { op: op.as_str() };
        match self.calls_by_op.get(op.index()) {
            Some(slot) => slot
                .get_or_init(|| self.calls.get_or_create(&label()).clone())
                .inc(),
            None => self.calls.get_or_create(&label()).inc(),
        };
    }

    /// Counts a refusal.
    pub fn refused(&self, op: Operation, code: Code) {
        self.refused
            .get_or_create(&RefusedLabel {
                op: op.as_str(),
                code: code.as_str(),
            })
            .inc();
    }

    /// Counts a scripted decision.
    pub fn scripted(&self, op: Operation) {
        self.scripted
            .get_or_create(&OpLabel { op: op.as_str() })
            .inc();
    }

    /// Counts a grant.
    pub fn granted(&self) {
        self.grants.inc();
    }

    /// Counts a completed execute.
    pub fn executed(&self) {
        self.executed.inc();
    }

    /// Counts a payer action.
    pub fn payer(&self, action: crate::payments::PayerAction) {
        let (i, action) = match action {
            crate::payments::PayerAction::Pay => (0, "pay"),
            crate::payments::PayerAction::Cancel => (1, "cancel"),
            crate::payments::PayerAction::Fail => (2, "fail"),
        };
        self.payer_by_action[i]
            .get_or_init(|| self.payer.get_or_create(&ActionLabel { action }).clone())
            .inc();
    }

    /// Counts a webhook outcome.
    pub fn webhook(&self, d: Delivery) {
        self.webhooks
            .get_or_create(&OutcomeLabel {
                outcome: d.as_str(),
            })
            .inc();
    }

    /// Prometheus text exposition.
    pub fn prometheus(&self) -> String {
        let mut out = String::new();
        // writing into a String cannot fail
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// The same counters as JSON, zeros left out.
    pub fn json(&self) -> Value {
        let mut calls = Map::new();
        let mut scripted = Map::new();
        let mut refused = Map::new();
        for op in Operation::ALL {
            let label = OpLabel { op: op.as_str() };
            let n = self.calls.get_or_create(&label).get();
            if n > 0 {
                calls.insert(op.as_str().into(), n.into());
            }
            let s = self.scripted.get_or_create(&label).get();
            if s > 0 {
                scripted.insert(op.as_str().into(), s.into());
            }
            let mut by_code = Map::new();
            for code in Code::ALL {
                let r = self
                    .refused
                    .get_or_create(&RefusedLabel {
                        op: op.as_str(),
                        code: code.as_str(),
                    })
                    .get();
                if r > 0 {
                    by_code.insert(code.as_str().into(), r.into());
                }
            }
            if !by_code.is_empty() {
                refused.insert(op.as_str().into(), Value::Object(by_code));
            }
        }
        let mut payer = Map::new();
        for action in ["pay", "cancel", "fail"] {
            let n = self.payer.get_or_create(&ActionLabel { action }).get();
            if n > 0 {
                payer.insert(action.into(), n.into());
            }
        }
        let mut webhooks = Map::new();
        for d in Delivery::ALL {
            let n = self
                .webhooks
                .get_or_create(&OutcomeLabel {
                    outcome: d.as_str(),
                })
                .get();
            if n > 0 {
                webhooks.insert(d.as_str().into(), n.into());
            }
        }
        json!({
            "calls": calls,
            "refused": refused,
            "scripted": scripted,
            "grants": self.grants.get(),
            "executed": self.executed.get(),
            "payer_actions": payer,
            "webhooks": webhooks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_prometheus_show_the_same_counts() {
        let m = Metrics::default();
        m.call(Operation::Execute);
        m.call(Operation::Execute);
        m.refused(Operation::Execute, Code::ExecutionAlreadyCompleted);
        m.granted();
        m.webhook(Delivery::Delivered);
        let j = m.json();
        assert_eq!(j["calls"]["execute"], 2);
        assert_eq!(j["refused"]["execute"]["2117"], 1);
        assert_eq!(j["grants"], 1);
        assert_eq!(j["webhooks"]["delivered"], 1);
        assert!(j["calls"].get("create").is_none());
        let text = m.prometheus();
        assert!(
            text.contains("mock_gateway_calls_total{op=\"execute\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("mock_gateway_refused_total{op=\"execute\",code=\"2117\"} 1"),
            "{text}"
        );
        assert!(text.contains("mock_gateway_grants_total 1"), "{text}");
    }
}
