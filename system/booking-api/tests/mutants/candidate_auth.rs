//! Signed candidates (`candidate_auth`) as a client and an operator see them:
//! `POST /bookings` on a router with candidate tokens required (401 bodies,
//! challenges, `/metrics`, nothing held), and the verifier's and signer's
//! public rules (key rotation, a JWKS of one key, the shortest secret, the
//! messages a refusal and a bad key carry).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use booking_api::bookings::ApiState;
use booking_api::candidate_auth::{
    AuthAlgorithm, AuthKeys, AuthRefusal, AuthSettings, CandidateAuth, CandidateSigner, unix_now,
};
use common::{TestStack, hash};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use tokio::net::TcpListener;

const NOW: u64 = 1_800_000_000;
const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef-test";
const ED_PRIVATE: &str = include_str!("../fixtures/jwt/ed.pem");
const ED_PUBLIC: &str = include_str!("../fixtures/jwt/ed.pub");
const ED2_PRIVATE: &str = include_str!("../fixtures/jwt/ed2.pem");
const ED2_PUBLIC: &str = include_str!("../fixtures/jwt/ed2.pub");
/// ed.pub's raw key (base64url), for a JWKS.
const ED_X: &str = "Zvsf0s_sz0E_JolKbFok-WWcyVFMQDvvh-ob1ouEtbA";

fn settings(keys: AuthKeys) -> AuthSettings {
    AuthSettings {
        keys,
        issuer: None,
        audience: None,
    }
}

fn hs256() -> CandidateAuth {
    CandidateAuth::new(&settings(AuthKeys::Hs256 {
        secret: SECRET.to_vec(),
    }))
    .unwrap()
}

fn ed_token(private: &str, kid: Option<&str>) -> String {
    let mut h = Header::new(Algorithm::EdDSA);
    h.kid = kid.map(str::to_owned);
    let key = EncodingKey::from_ed_pem(private.as_bytes()).unwrap();
    encode(&h, &json!({"sub": "c-1", "exp": NOW + 60}), &key).unwrap()
}

/// The API with candidate tokens required (HS256 with [`SECRET`]), served
/// beside the test stack's own: its base URL.
async fn api_with_auth(t: &TestStack) -> String {
    let state = ApiState::new().with_candidate_auth(Some(Arc::new(hs256())));
    let router = booking_api::router_with(t.stack.clone(), Arc::new(state));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    url
}

/// `POST <url>/bookings` for `candidate` at gold, with `token` if any.
async fn book(
    t: &TestStack,
    url: &str,
    candidate: &str,
    token: Option<&str>,
) -> (u16, Value, HeaderMap) {
    let mut r = t
        .http
        .post(format!("{url}/bookings"))
        .json(&json!({"candidate": candidate, "level": "gold"}));
    if let Some(token) = token {
        r = r.bearer_auth(token);
    }
    common::read(r.send().await.unwrap()).await
}

async fn metrics(t: &TestStack, url: &str) -> String {
    let r = t.http.get(format!("{url}/metrics")).send().await.unwrap();
    r.text().await.unwrap()
}

#[tokio::test]
async fn without_a_token_a_booking_is_401_and_nothing_is_held() {
    let t = TestStack::start().await;
    let url = api_with_auth(&t).await;
    let (status, body, headers) = book(&t, &url, "c-1", None).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"], "unauthorized");
    assert_eq!(
        body["message"],
        "a candidate token is required: Authorization: Bearer <token from the login>"
    );
    assert_eq!(headers["www-authenticate"], "Bearer");
    assert!(!headers.contains_key("retry-after"));
    assert_eq!(t.taken("gold").await, 0);
    assert!(t.drain_queue().await.is_empty());
    assert!(t.mock.app.gateway.payments().is_empty(), "no payment made");
    let m = metrics(&t, &url).await;
    for line in [
        r#"booking_candidate_auth_refusals_total{reason="missing"} 1"#,
        r#"booking_admissions_total{outcome="unauthorized"} 1"#,
    ] {
        assert!(m.contains(line), "{line} missing from\n{m}");
    }
    t.stop().await;
}

#[tokio::test]
async fn a_token_for_the_candidate_books_and_anothers_is_refused() {
    let t = TestStack::start().await;
    let url = api_with_auth(&t).await;
    let signer = CandidateSigner::hs256(SECRET).unwrap();
    let now = unix_now();

    let mine = signer.sign("c-1", now).unwrap();
    let (status, body, _) = book(&t, &url, "c-1", Some(&mine)).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["candidate_hash"], hash("c-1").as_str());

    let theirs = signer.sign("c-3", now).unwrap();
    let (status, body, headers) = book(&t, &url, "c-2", Some(&theirs)).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"], "unauthorized");
    assert_eq!(
        body["message"],
        "the candidate token is for another candidate"
    );
    assert_eq!(
        headers["www-authenticate"],
        "Bearer error=\"invalid_token\""
    );
    assert_eq!(t.taken("gold").await, 1, "only c-1 holds a seat");
    let m = metrics(&t, &url).await;
    assert!(
        m.contains(r#"booking_candidate_auth_refusals_total{reason="wrong_subject"} 1"#),
        "{m}"
    );
    t.stop().await;
}

#[tokio::test]
async fn a_token_expired_by_the_system_clock_is_refused() {
    let t = TestStack::start().await;
    let url = api_with_auth(&t).await;
    // issued and expired in November 2023
    let old = CandidateSigner::hs256(SECRET)
        .unwrap()
        .sign("c-1", 1_700_000_000)
        .unwrap();
    let (status, body, _) = book(&t, &url, "c-1", Some(&old)).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        body["message"],
        "the candidate token has expired: log in again"
    );
    assert_eq!(t.taken("gold").await, 0);
    let m = metrics(&t, &url).await;
    assert!(
        m.contains(r#"booking_candidate_auth_refusals_total{reason="expired"} 1"#),
        "{m}"
    );
    t.stop().await;
}

#[test]
fn every_refusal_says_why_in_its_own_words() {
    let messages: std::collections::BTreeSet<&str> =
        AuthRefusal::ALL.iter().map(|r| r.message()).collect();
    assert_eq!(messages.len(), AuthRefusal::ALL.len(), "{messages:?}");
    for m in messages {
        assert!(m.contains("token"), "{m:?}");
    }
}

#[test]
fn the_state_tells_whether_tokens_are_required() {
    assert!(ApiState::new().candidate_auth().is_none());
    let on = ApiState::new().with_candidate_auth(Some(Arc::new(hs256())));
    assert!(on.candidate_auth().is_some());
}

#[test]
fn any_of_several_pem_keys_verifies_a_token() {
    let rotated = CandidateAuth::new(&settings(AuthKeys::Pem {
        algorithm: AuthAlgorithm::EdDSA,
        pems: vec![ED2_PUBLIC.into(), ED_PUBLIC.into()],
    }))
    .unwrap();
    // the first key does not verify it, the second does
    assert_eq!(
        rotated.verify(&ed_token(ED_PRIVATE, None), "c-1", NOW),
        Ok(())
    );
    assert_eq!(
        rotated.verify(&ed_token(ED2_PRIVATE, None), "c-1", NOW),
        Ok(())
    );
    let one = CandidateAuth::new(&settings(AuthKeys::Pem {
        algorithm: AuthAlgorithm::EdDSA,
        pems: vec![ED2_PUBLIC.into()],
    }))
    .unwrap();
    assert_eq!(
        one.verify(&ed_token(ED_PRIVATE, None), "c-1", NOW),
        Err(AuthRefusal::BadSignature)
    );
}

#[test]
fn a_jwks_of_one_key_takes_tokens_without_kid() {
    for key in [
        json!({"kty": "OKP", "crv": "Ed25519", "x": ED_X}),
        json!({"kty": "OKP", "crv": "Ed25519", "x": ED_X, "kid": "k1"}),
    ] {
        let auth = CandidateAuth::new(&settings(AuthKeys::Jwks {
            json: json!({ "keys": [key] }).to_string(),
        }))
        .unwrap_or_else(|e| panic!("{key}: {e}"));
        assert_eq!(
            auth.verify(&ed_token(ED_PRIVATE, None), "c-1", NOW),
            Ok(()),
            "{key}"
        );
        assert_eq!(
            auth.verify(&ed_token(ED2_PRIVATE, None), "c-1", NOW),
            Err(AuthRefusal::BadSignature),
            "{key}"
        );
    }
}

#[test]
fn a_secret_of_exactly_32_bytes_signs_tokens_living_15_minutes() {
    let secret = [7u8; 32];
    let signer = CandidateSigner::hs256(&secret).unwrap();
    assert_eq!(signer.ttl(), Duration::from_secs(15 * 60));
    let auth = CandidateAuth::new(&settings(AuthKeys::Hs256 {
        secret: secret.to_vec(),
    }))
    .unwrap();
    let token = signer.sign("c-1", NOW).unwrap();
    assert_eq!(auth.verify(&token, "c-1", NOW + 15 * 60), Ok(()));
    assert!(CandidateSigner::hs256(&[7u8; 31]).is_err());
}

#[test]
fn a_key_that_does_not_parse_names_its_algorithm() {
    assert_eq!(AuthAlgorithm::HS256.as_str(), "HS256");
    assert_eq!(AuthAlgorithm::RS256.as_str(), "RS256");
    assert_eq!(AuthAlgorithm::EdDSA.as_str(), "EdDSA");
    for (algorithm, name) in [
        (AuthAlgorithm::RS256, "RS256"),
        (AuthAlgorithm::EdDSA, "EdDSA"),
    ] {
        let err = CandidateAuth::new(&settings(AuthKeys::Pem {
            algorithm,
            pems: vec!["not a key".into()],
        }))
        .unwrap_err()
        .to_string();
        let want = format!("public_keys[0]: not a {name} public key in PEM");
        assert!(err.starts_with(&want), "{err}");
    }
}
