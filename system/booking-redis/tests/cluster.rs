//! The ledger, coordination and the persistence check on a three-shard Redis
//! Cluster (`RedisCluster::shared`: the one `SELLOUT_REDIS_CLUSTER` names,
//! else a private one): sales whose hash tags land on different shards run
//! at once, each sale's keys stay in its one slot on its one node (so no
//! script or call crosses slots), scripts come back after a node lost them,
//! and every primary's persistence is read.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/redis_server.rs"]
mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use booking::coordination::{Coordination, keys};
use booking::ledger::{Admission, Ledger, Step};
use booking::{CandidateHash, Level, PaymentId, RequestToken, SaleId};
use booking_redis::persistence::{self, Persistence, Refusal};
use booking_redis::{ConnectError, RedisCoordination, RedisLedger};
use support::{RedisCluster, command, unique_prefix};

fn level(s: &str) -> Level {
    Level::parse(s).unwrap()
}

/// The hash tag of a key: what `{…}` holds.
fn tag(key: &str) -> &str {
    key.split_once('{').unwrap().1.split_once('}').unwrap().0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sales_on_every_shard_admit_at_once_and_keep_their_keys_in_their_slot() {
    let cluster = RedisCluster::shared();
    let sales: Vec<SaleId> = cluster
        .sales_on_every_shard("spread")
        .iter()
        .map(|s| SaleId::parse(s).unwrap())
        .collect();
    let prefix = unique_prefix("spread");
    let ledger = Arc::new(
        RedisLedger::connect(&cluster.url(), 16, &prefix)
            .await
            .unwrap(),
    );
    let candidates: Vec<CandidateHash> = (0..60)
        .map(|i| CandidateHash::of(&format!("c{i}")))
        .collect();
    for sale in &sales {
        ledger.reset(sale, &[(level("a"), 20)]).await.unwrap();
        assert_eq!(ledger.load_candidates(sale, &candidates).await.unwrap(), 60);
        ledger.set_open(sale, true).await.unwrap();
    }
    // every candidate tries every sale at once
    let tasks: Vec<_> = sales
        .iter()
        .flat_map(|sale| {
            candidates.iter().enumerate().map(|(i, c)| {
                let (l, s, c) = (ledger.clone(), sale.clone(), c.clone());
                tokio::spawn(async move {
                    let t = RequestToken::parse(&format!("t{i}")).unwrap();
                    (
                        s.clone(),
                        c.clone(),
                        l.admit(&s, &c, &level("a"), &t, 1).await.unwrap(),
                    )
                })
            })
        })
        .collect();
    let mut admitted: Vec<(SaleId, CandidateHash)> = Vec::new();
    for task in tasks {
        let (sale, c, answer) = task.await.unwrap();
        match answer {
            Admission::Admitted { .. } => admitted.push((sale, c)),
            Admission::LevelFull => {}
            other => panic!("{sale}: unexpected {other:?}"),
        }
    }
    for sale in &sales {
        assert_eq!(
            admitted.iter().filter(|(s, _)| s == sale).count(),
            20,
            "{sale}"
        );
        let counters = ledger.counters(sale).await.unwrap();
        assert_eq!(counters.levels[0].count, 20, "{sale}");
        // every other step of one hold, on each shard
        let (_, c) = admitted.iter().find(|(s, _)| s == sale).unwrap();
        let i: usize = candidates.iter().position(|x| x == c).unwrap();
        let t = RequestToken::parse(&format!("t{i}")).unwrap();
        let p = PaymentId::parse(&format!("P-{sale}")).unwrap();
        let attached = ledger.attach_payment(sale, c, &t, &p, 9).await.unwrap();
        assert_eq!(attached, Step::Done);
        assert_eq!(ledger.stale_held(sale, 9, 10).await.unwrap().len(), 1);
        assert_eq!(ledger.extend(sale, c, &p, 19).await.unwrap(), Step::Done);
        assert_eq!(ledger.mark_paid(sale, c, &p).await.unwrap(), Step::Done);
        assert_eq!(ledger.paid(sale, c).await.unwrap(), Some(p.clone()));
        assert_eq!(ledger.stale_pending(sale, 1, 100).await.unwrap().len(), 19);
        let (_, other) = admitted.iter().filter(|(s, _)| s == sale).nth(1).unwrap();
        let j = candidates.iter().position(|x| x == other).unwrap();
        let u = RequestToken::parse(&format!("t{j}")).unwrap();
        assert_eq!(
            ledger.undo_admission(sale, other, &u).await.unwrap(),
            Step::Done
        );
        assert_eq!(ledger.counters(sale).await.unwrap().levels[0].count, 19);
    }

    // each primary holds exactly the keys of the sale whose tag it owns, all
    // in that tag's slot
    for (addr, sale) in cluster.primaries().iter().zip(&sales) {
        let keys = cluster.keys_on(addr, &prefix);
        assert!(!keys.is_empty(), "{addr} holds none of {sale}'s keys");
        let tags: BTreeSet<&str> = keys.iter().map(|k| tag(k)).collect();
        assert_eq!(
            tags,
            BTreeSet::from([format!("sale:{sale}").as_str()]),
            "{addr}"
        );
        let slot = cluster.slot(&format!("{{sale:{sale}}}"));
        for key in &keys {
            assert_eq!(cluster.slot(key), slot, "{key}");
        }
    }
}

#[tokio::test]
async fn scripts_come_back_after_the_node_of_a_sale_flushed_them() {
    let cluster = RedisCluster::shared();
    let sale = SaleId::parse(&cluster.sales_on_every_shard("flush")[1]).unwrap();
    let ledger = RedisLedger::connect(&cluster.url(), 4, &unique_prefix("flush"))
        .await
        .unwrap();
    let c = CandidateHash::of("x");
    ledger.reset(&sale, &[(level("a"), 1)]).await.unwrap();
    ledger
        .load_candidates(&sale, std::slice::from_ref(&c))
        .await
        .unwrap();
    let owner = cluster.owner(cluster.slot(&format!("{{sale:{sale}}}")));
    command(&owner, &["SCRIPT", "FLUSH"]).unwrap();
    ledger.set_open(&sale, true).await.unwrap();
    assert_eq!(
        ledger
            .admit(
                &sale,
                &c,
                &level("a"),
                &RequestToken::parse("t").unwrap(),
                1
            )
            .await
            .unwrap(),
        Admission::Admitted { count: 1 }
    );
}

#[tokio::test]
async fn coordination_keys_of_several_sales_and_the_gateway_live_on_their_own_nodes() {
    let cluster = RedisCluster::shared();
    let prefix = unique_prefix("coord");
    let c = RedisCoordination::connect(&cluster.url(), 8).await.unwrap();
    let sales: Vec<SaleId> = cluster
        .sales_on_every_shard("coord")
        .iter()
        .map(|s| SaleId::parse(s).unwrap())
        .collect();
    let ttl = Duration::from_secs(30);
    let mut written = Vec::new();
    for sale in &sales {
        let pay = PaymentId::parse("P1").unwrap();
        let lock = keys::execute_lock(&prefix, sale, &pay);
        assert!(c.try_lock(&lock, "me", ttl).await.unwrap());
        assert!(!c.try_lock(&lock, "you", ttl).await.unwrap());
        assert!(c.extend_lock(&lock, "me", ttl * 2).await.unwrap());
        assert!(!c.unlock(&lock, "you").await.unwrap());
        assert!(c.unlock(&lock, "me").await.unwrap());
        let latch = keys::closed_latch(&prefix, sale);
        assert!(c.set_once(&latch, "1", None).await.unwrap());
        assert!(!c.set_once(&latch, "2", None).await.unwrap());
        let copy = keys::booking_copy(&prefix, sale, &pay);
        c.set(&copy, "{}", Some(ttl)).await.unwrap();
        assert_eq!(c.get(&copy).await.unwrap().as_deref(), Some("{}"));
        let leader = keys::reconciler_lock(&prefix, sale);
        assert!(c.try_lock(&leader, "me", ttl).await.unwrap());
        written.extend([latch, copy, leader]);
    }
    let token = keys::gateway_token(&prefix);
    c.set(&token, "tok", Some(ttl)).await.unwrap();
    assert_eq!(c.get(&token).await.unwrap().as_deref(), Some("tok"));
    assert!(c.delete(&token).await.unwrap());
    c.set(&token, "tok", Some(ttl)).await.unwrap();
    written.push(token);
    // every key where its tag's slot is served, and nowhere else
    for key in &written {
        let owner = cluster.owner(cluster.slot(key));
        for addr in cluster.primaries() {
            let here = cluster.keys_on(addr, key).contains(key);
            assert_eq!(here, *addr == owner, "{key} on {addr}");
        }
    }
}

#[tokio::test]
async fn the_persistence_of_every_primary_is_read() {
    let cluster = RedisCluster::shared();
    let found = persistence::read(&cluster.url()).await.unwrap();
    // the test clusters keep nothing (private: --appendonly no; setup's too)
    assert_eq!(
        found,
        Persistence {
            appendonly: false,
            appendfsync: "everysec".to_owned(),
            save: String::new(),
        }
    );
    assert_eq!(
        persistence::check(&found, true),
        Err(Refusal::NoAppendOnly {
            save: String::new()
        })
    );
}

#[tokio::test]
async fn the_pool_warms_cluster_connections_and_refuses_a_url_without_a_node() {
    let cluster = RedisCluster::shared();
    let ledger = RedisLedger::connect(&cluster.url(), 4, &unique_prefix("warm"))
        .await
        .unwrap();
    assert_eq!(ledger.warm(4).await, 4);
    let refused = RedisLedger::connect("redis+cluster://", 4, "p").await;
    assert!(matches!(refused, Err(ConnectError::Url(_))), "{refused:?}");
    let refused = RedisLedger::connect("redis+cluster://127.0.0.1:1/2", 4, "p").await;
    assert!(matches!(refused, Err(ConnectError::Url(_))), "{refused:?}");
}
