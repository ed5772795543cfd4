//! The Redis ledger keeps two indexes beside the holds: pending holds by
//! admission time, held holds by deadline. The reconciler and the TTL
//! safety net trust what `stale_pending` and `stale_held` hand them, so an
//! index that disagrees with the hold it lists is a corrupt ledger (an
//! alarm), never a hold released before its time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/redis_server.rs"]
mod redis_server;

use std::sync::atomic::{AtomicU32, Ordering};

use booking::ledger::{Ledger, LedgerError, Step};
use booking::{CandidateHash, Level, PaymentId, RequestToken, SaleId};
use booking_redis::RedisLedger;
use redis_server::RedisServer;

fn sale() -> SaleId {
    SaleId::parse("launch").unwrap()
}

async fn ledger(server: &RedisServer) -> RedisLedger {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let prefix = format!("idx-{}", NEXT.fetch_add(1, Ordering::Relaxed));
    RedisLedger::connect(&server.url(), 4, &prefix)
        .await
        .unwrap()
}

/// Sets `who`'s score in the sale's `index` (`pending` or `held`) behind
/// the ledger's back.
async fn rescore(
    server: &RedisServer,
    l: &RedisLedger,
    index: &str,
    who: &CandidateHash,
    score: u64,
) {
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(format!("{}:{{sale:launch}}:{index}", l.key_prefix()))
        .arg(score)
        .arg(who.as_str())
        .query_async(&mut conn)
        .await
        .unwrap();
}

fn corrupt_naming(
    r: Result<Vec<(CandidateHash, booking::ledger::Hold)>, LedgerError>,
    who: &CandidateHash,
) {
    match r {
        Err(LedgerError::Corrupt(m)) => assert!(m.contains(who.as_str()), "{m}"),
        other => panic!("not corrupt: {other:?}"),
    }
}

#[tokio::test]
async fn an_index_that_disagrees_with_the_hold_it_lists_is_corrupt() {
    let server = RedisServer::start();
    let l = ledger(&server).await;
    let (x, y) = (CandidateHash::of("x"), CandidateHash::of("y"));
    let a = Level::parse("a").unwrap();
    l.reset(&sale(), &[(a.clone(), 2)]).await.unwrap();
    l.load_candidates(&sale(), &[x.clone(), y.clone()])
        .await
        .unwrap();
    l.set_open(&sale(), true).await.unwrap();
    let t = RequestToken::parse("t").unwrap();
    l.admit(&sale(), &x, &a, &t, 100).await.unwrap();
    l.admit(&sale(), &y, &a, &t, 100).await.unwrap();
    let step = l
        .attach_payment(&sale(), &y, &t, &PaymentId::parse("P").unwrap(), 1_000)
        .await
        .unwrap();
    assert_eq!(step, Step::Done);

    // as indexed, nothing is stale at 50 (admitted at 100) or 500 (deadline 1000)
    assert!(l.stale_pending(&sale(), 50, 10).await.unwrap().is_empty());
    assert!(l.stale_held(&sale(), 500, 10).await.unwrap().is_empty());

    // the indexes now say earlier than the holds do
    rescore(&server, &l, "pending", &x, 1).await;
    rescore(&server, &l, "held", &y, 1).await;
    corrupt_naming(l.stale_pending(&sale(), 50, 10).await, &x);
    corrupt_naming(l.stale_held(&sale(), 500, 10).await, &y);
    // and at or after the holds' own times they are listed as they are
    rescore(&server, &l, "pending", &x, 100).await;
    rescore(&server, &l, "held", &y, 1_000).await;
    assert_eq!(l.stale_pending(&sale(), 100, 10).await.unwrap().len(), 1);
    assert_eq!(l.stale_held(&sale(), 1_000, 10).await.unwrap().len(), 1);
}
