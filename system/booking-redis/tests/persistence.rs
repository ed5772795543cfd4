//! Reading a real server's persistence and checking it: private servers
//! started without an append-only file (refused for a production sale),
//! with one fsynced every second (accepted with its warning) or always
//! (accepted), with `CONFIG` disabled as managed servers do, and gone. And
//! what the append-only file is for: a server killed with SIGKILL comes back
//! with every acknowledged write.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/redis_server.rs"]
mod support;

use booking_redis::persistence::{Persistence, ReadError, Refusal, Warning, check, read};
use support::RedisServer;

#[tokio::test]
async fn a_server_without_an_append_only_file_is_refused_for_production() {
    let server = RedisServer::start();
    let found = read(&server.url()).await.unwrap();
    assert_eq!(
        found,
        Persistence {
            appendonly: false,
            appendfsync: "everysec".to_owned(),
            save: String::new(),
        }
    );
    assert_eq!(
        check(&found, true),
        Err(Refusal::NoAppendOnly {
            save: String::new()
        })
    );
    assert_eq!(
        check(&found, false),
        Ok(vec![Warning::NotForProduction(Refusal::NoAppendOnly {
            save: String::new()
        })])
    );
}

#[tokio::test]
async fn snapshots_alone_are_refused_for_production() {
    let server = RedisServer::start_with(&["--save", "60 1"]);
    let found = read(&server.url()).await.unwrap();
    assert!(!found.appendonly);
    assert_eq!(found.save, "60 1");
    assert_eq!(
        check(&found, true),
        Err(Refusal::NoAppendOnly {
            save: "60 1".to_owned()
        })
    );
}

#[tokio::test]
async fn an_append_only_file_fsynced_every_second_is_accepted_with_its_warning() {
    let server = RedisServer::start_with(&["--appendonly", "yes"]);
    let found = read(&server.url()).await.unwrap();
    assert!(found.appendonly);
    assert_eq!(found.appendfsync, "everysec", "Redis's default");
    assert_eq!(check(&found, true), Ok(vec![Warning::EverySec]));
}

#[tokio::test]
async fn an_append_only_file_fsynced_always_is_accepted() {
    let server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let found = read(&server.url()).await.unwrap();
    assert!(found.appendonly);
    assert_eq!(found.appendfsync, "always");
    assert_eq!(check(&found, true), Ok(vec![]));
}

#[tokio::test]
async fn an_append_only_file_the_kernel_flushes_is_refused_for_production() {
    let server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "no"]);
    let found = read(&server.url()).await.unwrap();
    assert_eq!(check(&found, true), Err(Refusal::FsyncNo));
}

#[tokio::test]
async fn a_server_with_config_disabled_says_how_to_declare_persistence_out_of_band() {
    let server = RedisServer::start_with(&["--rename-command", "CONFIG", ""]);
    let e = read(&server.url()).await.unwrap_err();
    assert!(
        matches!(&e, ReadError::ConfigUnavailable { setting, .. } if setting == "appendonly"),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("stack.redis_persistence = \"out_of_band\""),
        "{e}"
    );
}

#[tokio::test]
async fn a_server_that_is_gone_is_unavailable_not_unconfigured() {
    let mut server = RedisServer::start();
    server.kill();
    assert!(matches!(
        read(&server.url()).await,
        Err(ReadError::Unavailable(_))
    ));
    assert!(matches!(
        read("http://not-redis").await,
        Err(ReadError::Url(_))
    ));
}

#[tokio::test]
async fn an_append_only_server_killed_comes_back_with_every_acknowledged_write() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    for i in 0..100 {
        redis::cmd("RPUSH")
            .arg("acknowledged")
            .arg(i)
            .query_async::<()>(&mut conn)
            .await
            .unwrap();
    }
    drop(conn);
    server.restart(); // SIGKILL, then the same arguments and directory
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let back: Vec<u32> = redis::cmd("LRANGE")
        .arg("acknowledged")
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(back, (0..100).collect::<Vec<_>>());
}
