//! Signed candidates end to end, on the embedded stack behind the real
//! listener (`booking_server::serve`) with the mock gateway on loopback:
//! with `[candidate_auth]` on, a booking with no token, another candidate's
//! token, an expired one or a forged one is answered `401` with
//! `WWW-Authenticate`, and nothing changes (the ledger's counts, the
//! candidate's record, the gateway calls); the refusals are counted by
//! reason on `/metrics`; the candidate's own token books (raw id or hash).
//! Without the section, a booking needs no token (the default is off).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use booking::{CandidateHash, Level, SaleId};
use booking_api::candidate_auth::{CandidateSigner, unix_now};
use booking_server::candidate_auth_config::CandidateAuthConfig;
use booking_server::config::{LevelConfig, ServerConfig};
use booking_server::ops;
use serde_json::{Value, json};

const SECRET: &str = "a-rehearsal-secret-of-at-least-32-bytes!";

struct Harness {
    base: String,
    http: reqwest::Client,
    server: Arc<booking_server::Server>,
    _mock: mock_gateway::Running,
    spawned: booking_server::Spawned,
}

impl Harness {
    async fn start(auth: Option<CandidateAuthConfig>) -> Harness {
        let mock = mock_gateway::start_local(
            mock_gateway::Config::default(),
            mock_gateway::ScriptSpec::default(),
        )
        .await
        .unwrap();
        let mut config = ServerConfig {
            sale: SaleId::parse("signed").unwrap(),
            levels: vec![LevelConfig {
                level: Level::parse("gold").unwrap(),
                cap: 5,
                price: "500.00".into(),
            }],
            candidate_auth: auth,
            ..ServerConfig::default()
        };
        config.gateway.base_url = mock.url.clone();
        config.validate().unwrap();
        let spawned = booking_server::Spawned::start(config).await.unwrap();
        let server = spawned.server.clone();
        ops::reset(&server).await.unwrap();
        ops::load_candidates(&server, ["alice", "bob", "mallory"])
            .await
            .unwrap();
        ops::open(&server).await.unwrap();
        Harness {
            base: spawned.public.clone(),
            http: reqwest::Client::new(),
            server,
            _mock: mock,
            spawned,
        }
    }

    /// `POST /bookings` for `candidate`, with `Authorization: <auth>` if given.
    async fn book(&self, candidate: &str, auth: Option<String>) -> (u16, Option<String>, Value) {
        let mut r = self
            .http
            .post(format!("{}/bookings", self.base))
            .json(&json!({"candidate": candidate, "level": "gold"}));
        if let Some(a) = auth {
            r = r.header("authorization", a);
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        let challenge = resp
            .headers()
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap().to_owned());
        (status, challenge, resp.json().await.unwrap_or(Value::Null))
    }

    async fn metrics(&self) -> String {
        common::get_text(&self.http, format!("{}/metrics", self.base)).await
    }

    /// Seats counted in the ledger.
    async fn taken(&self) -> u32 {
        let stack = &self.server.stack;
        let c = stack.ledger.counters(&stack.sale).await.unwrap();
        c.levels.iter().map(|l| l.count).sum()
    }

    async fn has_record(&self, who: &str) -> bool {
        self.server
            .stack
            .records
            .get(&CandidateHash::of(who), true)
            .await
            .unwrap()
            .is_some()
    }

    async fn stop(self) {
        self.spawned.stop().await.expect("server stops");
    }
}

fn bearer(token: &str) -> Option<String> {
    Some(format!("Bearer {token}"))
}

#[tokio::test]
async fn bad_tokens_get_401_and_change_nothing_and_the_candidates_own_token_books() {
    let h = Harness::start(Some(CandidateAuthConfig::hs256_inline(SECRET.into()))).await;
    let signer = CandidateSigner::hs256(SECRET.as_bytes()).unwrap();
    let now = unix_now();
    let alice = signer.sign("alice", now).unwrap();
    let mallory = signer.sign("mallory", now).unwrap();
    let expired = signer.sign("alice", now - 3_600).unwrap();
    let forged = CandidateSigner::hs256(b"not-the-server-secret-but-32-bytes-long")
        .unwrap()
        .sign("alice", now)
        .unwrap();

    // mallory tries to hold a seat in alice's name, every way she can
    let attempts = [
        ("missing", None),
        ("wrong_subject", bearer(&mallory)),
        ("expired", bearer(&expired)),
        ("bad_signature", bearer(&forged)),
        ("malformed", Some(format!("Basic {alice}"))),
        ("malformed", bearer("not.a.jwt")),
    ];
    for (reason, auth) in &attempts {
        let (status, challenge, body) = h.book("alice", auth.clone()).await;
        assert_eq!(status, 401, "{reason}: {body}");
        assert_eq!(body["error"], "unauthorized", "{reason}");
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
        let challenge = challenge.expect("WWW-Authenticate on a 401");
        assert!(challenge.starts_with("Bearer"), "{challenge}");
        if *reason != "missing" {
            assert_eq!(challenge, "Bearer error=\"invalid_token\"");
        }
    }
    // mallory's token names mallory, not alice's hash either
    let (status, _, _) = h
        .book(CandidateHash::of("alice").as_str(), bearer(&mallory))
        .await;
    assert_eq!(status, 401);

    // nothing changed: no seat, no record, no payment created
    assert_eq!(h.taken().await, 0);
    assert!(!h.has_record("alice").await);
    let metrics = h.metrics().await;
    assert!(
        !metrics.contains("booking_gateway_calls_total{op=\"create\"}"),
        "no payment was created:\n{metrics}"
    );
    for (reason, n) in [
        ("missing", 1),
        ("wrong_subject", 2),
        ("expired", 1),
        ("bad_signature", 1),
        ("malformed", 2),
    ] {
        let line = format!("booking_candidate_auth_refusals_total{{reason=\"{reason}\"}} {n}");
        assert!(metrics.contains(&line), "{line} missing from\n{metrics}");
    }
    assert!(metrics.contains("booking_admissions_total{outcome=\"unauthorized\"} 7"));

    // alice, with her own token, is not locked out
    let (status, _, body) = h.book("alice", bearer(&alice)).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["outcome"], "admitted");
    assert_eq!(h.taken().await, 1);
    assert!(h.has_record("alice").await);
    // the same candidate named by hash, with the same token
    let (status, _, body) = h
        .book(CandidateHash::of("alice").as_str(), bearer(&alice))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["outcome"], "already_holding");
    // and her token still does not book for bob
    let (status, _, _) = h.book("bob", bearer(&alice)).await;
    assert_eq!(status, 401);
    assert_eq!(h.taken().await, 1);
    assert!(!h.has_record("bob").await);
    h.stop().await;
}

#[tokio::test]
async fn without_the_section_no_token_is_needed() {
    let h = Harness::start(None).await;
    let (status, challenge, body) = h.book("bob", None).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(challenge, None);
    assert!(
        !h.metrics()
            .await
            .contains("booking_candidate_auth_refusals_total{")
    );
    h.stop().await;
}
