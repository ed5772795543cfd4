//! The bug zoo's switches as the CLI and configuration files see them, and
//! the coordination key names every process (and a Redis Cluster) shares.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use booking::coordination::keys;
use booking::{Bug, Bugs, Level, PaymentId, SaleId};

#[test]
fn every_bug_displays_as_its_switch_name_and_parses_back() {
    for bug in Bug::ALL {
        let shown = bug.to_string();
        assert_eq!(shown, bug.name());
        assert_eq!(Bug::parse(&shown), Some(bug), "{shown}");
    }
    assert_eq!(Bug::PaidKeepsTtl.to_string(), "paid_keeps_ttl");
    assert_eq!(
        format!("--bug {}", Bug::RedisWithoutPersistence),
        "--bug redis_without_persistence"
    );
}

#[test]
fn no_bugs_is_empty_and_lists_nothing() {
    let none = Bugs::none();
    assert!(none.is_empty());
    assert_eq!(none.iter().count(), 0);
    assert_eq!(none, Bugs::of([]));
    for bug in Bug::ALL {
        assert!(!none.on(bug), "{bug}");
    }
}

#[test]
fn switched_on_bugs_are_not_empty_and_listed_in_order() {
    let some = Bugs::of([
        Bug::EmailBeforePaid,
        Bug::SmallRedisPool,
        Bug::UnguardedUndo,
    ]);
    assert!(!some.is_empty());
    assert_eq!(
        some.iter().collect::<Vec<_>>(),
        vec![
            Bug::SmallRedisPool,
            Bug::UnguardedUndo,
            Bug::EmailBeforePaid
        ],
        "in the table's order, whatever order they were named in"
    );
    let all = Bugs::of(Bug::ALL);
    assert_eq!(all.iter().collect::<Vec<_>>(), Bug::ALL.to_vec());
}

#[test]
fn settings_without_bugs_leave_the_switches_out_of_their_json() {
    let json = serde_json::to_value(booking::Settings::default()).unwrap();
    assert!(json.get("bugs").is_none(), "{json}");
    let with = booking::Settings {
        bugs: Bugs::of([Bug::UnguardedUndo]),
        ..booking::Settings::default()
    };
    let json = serde_json::to_value(&with).unwrap();
    assert_eq!(json["bugs"], serde_json::json!(["unguarded_undo"]));
}

fn sale(s: &str) -> SaleId {
    SaleId::parse(s).unwrap()
}

fn pay(s: &str) -> PaymentId {
    PaymentId::parse(s).unwrap()
}

#[test]
fn every_key_has_its_exact_name() {
    let s = sale("launch");
    let p = pay("TR1");
    let gold = Level::parse("gold").unwrap();
    assert_eq!(keys::booking_copy("p", &s, &p), "p:{sale:launch}:copy:TR1");
    assert_eq!(
        keys::execute_lock("p", &s, &p),
        "p:{sale:launch}:execute-lock:TR1"
    );
    assert_eq!(
        keys::email_retry("p", &s, &p),
        "p:{sale:launch}:email-retry:TR1"
    );
    assert_eq!(
        keys::reconciler_lock("p", &s),
        "p:{sale:launch}:reconciler-lock"
    );
    assert_eq!(
        keys::status_throttle("p", &s),
        "p:{sale:launch}:status:throttle"
    );
    assert_eq!(
        keys::level_full_latch("p", &s, &gold),
        "p:{sale:launch}:status:full:gold"
    );
    assert_eq!(keys::closed_latch("p", &s), "p:{sale:launch}:status:closed");
    assert_eq!(keys::ttl_sweep_lock("p", &s), "p:{sale:launch}:ttl_sweep");
    assert_eq!(keys::reset_at("p", &s), "p:{sale:launch}:reset_at_ms");
    assert_eq!(
        keys::stream_lease("p", &s, "expiry"),
        "p:{sale:launch}:stream:expiry:lease"
    );
    assert_eq!(
        keys::stream_checkpoint("p", &s, "expiry"),
        "p:{sale:launch}:stream:expiry:checkpoint"
    );
    assert_eq!(keys::gateway_token("p"), "p:{gateway}:token");
    assert_eq!(keys::gateway_token_lock("p"), "p:{gateway}:token-lock");
}

/// Every key a sale uses, for one prefix.
fn sale_keys(prefix: &str, s: &SaleId, p: &PaymentId) -> Vec<String> {
    let gold = Level::parse("gold").unwrap();
    vec![
        keys::booking_copy(prefix, s, p),
        keys::execute_lock(prefix, s, p),
        keys::email_retry(prefix, s, p),
        keys::reconciler_lock(prefix, s),
        keys::status_throttle(prefix, s),
        keys::level_full_latch(prefix, s, &gold),
        keys::closed_latch(prefix, s),
        keys::ttl_sweep_lock(prefix, s),
        keys::reset_at(prefix, s),
        keys::stream_lease(prefix, s, "expiry"),
        keys::stream_checkpoint(prefix, s, "expiry"),
        keys::stream_lease(prefix, s, "sync"),
        keys::stream_checkpoint(prefix, s, "sync"),
    ]
}

#[test]
fn every_sale_key_is_in_the_sales_cluster_slot() {
    let s = sale("launch-2");
    for k in sale_keys("dep", &s, &pay("TR9")) {
        assert!(k.starts_with("dep:{sale:launch-2}:"), "{k}");
        // the hash tag is the first {...}: one slot for the whole sale
        let tag = &k[k.find('{').unwrap() + 1..k.find('}').unwrap()];
        assert_eq!(tag, "sale:launch-2", "{k}");
    }
    for k in [keys::gateway_token("dep"), keys::gateway_token_lock("dep")] {
        let tag = &k[k.find('{').unwrap() + 1..k.find('}').unwrap()];
        assert_eq!(tag, "gateway", "{k}");
    }
}

#[test]
fn keys_of_different_purposes_sales_payments_and_prefixes_never_collide() {
    let a = sale_keys("p", &sale("a"), &pay("P1"));
    let b = sale_keys("p", &sale("b"), &pay("P1"));
    let c = sale_keys("p", &sale("a"), &pay("P2"));
    let d = sale_keys("q", &sale("a"), &pay("P1"));
    let mut all: Vec<String> = Vec::new();
    all.extend(a.iter().cloned());
    all.extend(b);
    all.extend(d);
    all.push(keys::gateway_token("p"));
    all.push(keys::gateway_token_lock("p"));
    all.push(keys::gateway_token("q"));
    all.push(keys::gateway_token_lock("q"));
    let distinct: BTreeSet<&String> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "{all:#?}");
    // the per-payment keys differ by payment; the others do not depend on it
    for (x, y) in a.iter().zip(&c) {
        let per_payment = x.contains("P1");
        assert_eq!(x != y, per_payment, "{x} / {y}");
    }
}
