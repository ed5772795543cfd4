//! `booking provision --stack redis` and `build` read the Redis server's
//! persistence: a production sale refuses a server that does not keep what
//! it acknowledged, a rehearsal is warned, `out_of_band` skips the read.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../booking-redis/tests/support/redis_server.rs"]
mod redis_server;

use booking_server::config::{Environment, PersistenceCheck, StackConfig};
use booking_server::{BuildError, ServerConfig, StackKind};
use redis_server::RedisServer;

fn config(redis: &RedisServer, environment: Environment) -> ServerConfig {
    ServerConfig {
        stack: StackConfig {
            kind: StackKind::Redis,
            redis_url: redis.url(),
            redis_pool_size: 4,
            ..StackConfig::default()
        },
        environment,
        key_prefix: format!("prov-{:08x}", rand::random::<u32>()),
        ..ServerConfig::default()
    }
}

#[tokio::test]
async fn a_production_sale_refuses_a_server_without_an_append_only_file() {
    let redis = RedisServer::start();
    let c = config(&redis, Environment::Production);
    let refused = booking_server::provision(&c, false).await.unwrap_err();
    let text = refused.to_string();
    assert!(text.contains("appendonly"), "{text}");
    // the server refuses to start on it too
    match booking_server::build(&c, "http://127.0.0.1:1").await {
        Err(BuildError::Persistence(why)) => assert!(why.contains("appendonly"), "{why}"),
        other => panic!("built on a server without persistence: {other:?}"),
    }
}

#[tokio::test]
async fn everysec_is_accepted_with_a_warning_naming_what_it_can_lose() {
    let redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "everysec"]);
    let done = booking_server::provision(&config(&redis, Environment::Production), false)
        .await
        .unwrap();
    assert!(done.aws.is_none());
    let r = done.redis.expect("the redis report");
    let p = r.persistence.expect("read from the server");
    assert!(p.appendonly);
    assert_eq!(p.appendfsync, "everysec");
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert!(r.warnings[0].contains("second"), "{:?}", r.warnings);
}

#[tokio::test]
async fn always_is_accepted_without_warnings() {
    let redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let done = booking_server::provision(&config(&redis, Environment::Production), false)
        .await
        .unwrap();
    assert!(done.redis.unwrap().warnings.is_empty());
}

#[tokio::test]
async fn a_rehearsal_is_warned_not_refused() {
    let redis = RedisServer::start();
    let done = booking_server::provision(&config(&redis, Environment::Rehearsal), false)
        .await
        .unwrap();
    let r = done.redis.unwrap();
    assert!(!r.persistence.unwrap().appendonly);
    assert!(
        r.warnings.iter().any(|w| w.contains("appendonly")),
        "{:?}",
        r.warnings
    );
}

#[tokio::test]
async fn out_of_band_skips_the_read_and_says_so() {
    let redis = RedisServer::start();
    let mut c = config(&redis, Environment::Production);
    c.stack.redis_persistence = PersistenceCheck::OutOfBand;
    let done = booking_server::provision(&c, false).await.unwrap();
    let r = done.redis.unwrap();
    assert!(r.persistence.is_none());
    assert!(r.warnings[0].contains("out of band"), "{:?}", r.warnings);
}
