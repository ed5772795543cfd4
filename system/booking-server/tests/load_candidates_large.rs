//! A candidate list longer than one `/ops/load-candidates` request may be
//! (the article's 40,000 hashes are 2.6 MB as text; the server takes 2 MiB
//! a request): the server refuses the whole list in one body with 413 and
//! loads none of it, and `booking load-candidates FILE` sends it in
//! several requests and loads every entry, once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use booking::CandidateHash;
use booking_server::config::ServerConfig;
use booking_server::ops::LOAD_BODY_BYTES_MAX;
use serde_json::Value;

const TOKEN: &str = "load-test-token-0123";

/// Runs `booking load-candidates FILE` against `base`; its printed report.
fn cli_load(base: &str, file: &std::path::Path) -> (bool, Value) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_booking"))
        .args([
            "--server",
            base,
            "--token",
            TOKEN,
            "--confirm",
            "launch",
            "load-candidates",
        ])
        .arg(file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    (
        out.status.success(),
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_longer_than_a_request_loads_whole_through_the_cli_and_never_half() {
    let spawned = booking_server::Spawned::start(ServerConfig {
        admin_token: Some(TOKEN.into()),
        ..ServerConfig::default()
    })
    .await
    .unwrap();
    // the ops steps go to the admin listener
    let base = spawned.admin.clone();
    let http = reqwest::Client::new();
    let reset = http
        .post(format!("{base}/ops/reset"))
        .bearer_auth(TOKEN)
        .header("x-confirm-sale", "launch")
        .send()
        .await
        .unwrap();
    assert_eq!(reset.status().as_u16(), 200);

    // 50,000 hashes: 3.25 MB as text, about 1.6 requests' worth
    let n = 50_000;
    let text: String = (0..n)
        .map(|i| format!("{}\n", CandidateHash::of(&format!("large-{i}")).as_str()))
        .collect();
    assert!(text.len() > LOAD_BODY_BYTES_MAX, "{} bytes", text.len());

    let whole = http
        .post(format!("{base}/ops/load-candidates"))
        .bearer_auth(TOKEN)
        .header("x-confirm-sale", "launch")
        .body(text.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(whole.status().as_u16(), 413, "one body over the limit");

    let file = std::env::temp_dir().join(format!(
        "sellout-load-candidates-{:016x}.txt",
        rand::random::<u64>()
    ));
    std::fs::write(&file, format!("# {n} candidates\n{text}")).unwrap();
    let (ok, report) = tokio::task::spawn_blocking({
        let (base, file) = (base.clone(), file.clone());
        move || cli_load(&base, &file)
    })
    .await
    .unwrap();
    assert!(ok, "{report}");
    // the refused body loaded nothing: every entry is new to the CLI's load
    assert_eq!(report["read"].as_u64(), Some(n), "{report}");
    assert_eq!(report["added"].as_u64(), Some(n), "{report}");

    let (ok, again) = tokio::task::spawn_blocking({
        let (base, file) = (base.clone(), file.clone());
        move || cli_load(&base, &file)
    })
    .await
    .unwrap();
    assert!(ok, "{again}");
    assert_eq!(
        (again["read"].as_u64(), again["added"].as_u64()),
        (Some(n), Some(0)),
        "{again}"
    );

    let _ = std::fs::remove_file(&file);
    spawned.stop().await.expect("server stops");
}
