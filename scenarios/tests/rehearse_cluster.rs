//! A short rehearsal of three sales at once on a three-shard Redis Cluster:
//! the `ci` profile, scaled down to three sales' worth on a shared debug
//! machine (30 arrivals/s each, one instance each, a pool of 32), on the
//! Redis stack with `stack.redis_url = "redis+cluster://…"`, each sale's hash
//! tag on a different shard. Every invariant and the audit pass for every
//! sale (a `CROSSSLOT` or any other Redis error would show as server errors,
//! a lost message, a booking without its record), and every key the fleets
//! wrote lives in its tag's slot on the node that serves it, each shard
//! holding one sale.
//!
//! The cluster is `SELLOUT_REDIS_CLUSTER`'s (`scripts/test` points it at the
//! one `scripts/setup` starts), else a private one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../system/booking-redis/tests/support/redis_server.rs"]
mod redis_server;

use redis_server::RedisCluster;
use scenarios::{Profile, Progress, rehearse};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_sales_on_three_shards_rehearse_green_at_once() {
    let cluster = RedisCluster::shared();
    // sale ids of this run only (a named cluster keeps earlier runs' keys)
    let stem = format!("c{:08x}", rand::random::<u32>());
    let sales = cluster.sales_on_every_shard(&stem);
    let out = std::env::temp_dir().join(format!("rehearse-cluster-{stem}"));
    let profiles: Vec<Profile> = sales
        .iter()
        .enumerate()
        .map(|(i, sale)| {
            let sets = [
                format!("out={:?}", out.display().to_string()),
                format!("sale={sale:?}"),
                format!("seed={}", 7 + i),
                "instances=1".to_owned(),
                "stack.kind=\"redis\"".to_owned(),
                format!("stack.redis_url={:?}", cluster.url()),
                "stack.redis_pool_size=32".to_owned(),
                "load.rate=30.0".to_owned(),
                "load.late_rate=10.0".to_owned(),
                "load.users=24".to_owned(),
                "load.payer_users=12".to_owned(),
                "thresholds.rush_rate_min=25.0".to_owned(),
            ];
            Profile::load(Some("ci"), &sets).unwrap()
        })
        .collect();
    let (a, b, c) = tokio::join!(
        rehearse(&profiles[0], Progress::Quiet),
        rehearse(&profiles[1], Progress::Quiet),
        rehearse(&profiles[2], Progress::Quiet),
    );
    for (sale, outcome) in sales.iter().zip([a, b, c]) {
        let report = outcome.unwrap().report;
        let failed: Vec<_> = report.failed().collect();
        assert!(failed.is_empty(), "{sale} failed: {failed:#?}");
        assert!(report.passed, "{sale}");
        let names: Vec<&str> = report.invariants.iter().map(|i| i.name.as_str()).collect();
        for judged in [
            "server_error_pct",
            "ledger_matches_records",
            "queue_drained",
        ] {
            assert!(names.contains(&judged), "{sale}: {judged} not judged");
        }
    }

    // every key of every rehearsal on this cluster where its tag's slot is
    // served; each of this run's sales on its own shard
    let by_tag = cluster.keys_by_tag("rehearse-");
    for (sale, addr) in sales.iter().zip(cluster.primaries()) {
        let tag = format!("sale:{sale}");
        assert!(by_tag.get(&tag).is_some_and(|n| *n > 0), "{sale}: no keys");
        assert_eq!(cluster.owner(cluster.slot(&format!("{{{tag}}}"))), *addr);
    }
    let _ = std::fs::remove_dir_all(&out);
}
