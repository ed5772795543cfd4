//! What signed candidates (`candidate_auth`) cost: signing one token (the
//! load generator, standing in for the login front door) and verifying one
//! (the server, on every `POST /bookings`), on one thread, and what share of
//! one core each takes at the rehearsal's 2,000 bookings/s.
//!
//! ```text
//! cargo run --release -p booking-api --example candidate_auth_cost
//! ```
//!
//! Measured with the crate's own code ([`CandidateSigner::sign`],
//! [`CandidateAuth::verify`]: header decode, signature, claims, the
//! candidate compared as hashes), a distinct candidate per token, after a
//! warm-up. Each figure is the thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`
//! through `/proc/thread-self/schedstat`) per operation, so other load on
//! a shared machine does not inflate it; the wall-clock figure is printed
//! beside it. HS256 is what a rehearsal uses; RS256 and EdDSA are what a
//! real login front door would likely sign with (the server only verifies
//! those). `BENCH_OPS` sets the operations per measurement (default
//! 20,000; RS256 signing does a tenth of it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use booking_api::candidate_auth::{
    AuthAlgorithm, AuthKeys, AuthSettings, CandidateAuth, CandidateSigner, unix_now,
};
use jsonwebtoken::{Algorithm, EncodingKey, Header};

/// The rehearsal's headline rate.
const RATE: f64 = 2_000.0;
const SECRET: &[u8] = b"a-rehearsal-secret-of-at-least-32-bytes!";
const RSA_PRIVATE: &str = include_str!("../tests/fixtures/jwt/rsa.pem");
const RSA_PUBLIC: &str = include_str!("../tests/fixtures/jwt/rsa.pub");
const ED_PRIVATE: &str = include_str!("../tests/fixtures/jwt/ed.pem");
const ED_PUBLIC: &str = include_str!("../tests/fixtures/jwt/ed.pub");

/// This thread's CPU time so far (`/proc/thread-self/schedstat`, ns).
fn thread_cpu() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_nanos)
}

/// Runs `op` `n` times; (CPU µs per op, wall µs per op).
fn measure(n: usize, mut op: impl FnMut(usize)) -> (f64, f64) {
    for i in 0..n / 10 {
        op(i);
    }
    let (cpu0, wall0) = (thread_cpu(), Instant::now());
    for i in 0..n {
        op(i);
    }
    let (cpu, wall) = (thread_cpu() - cpu0, wall0.elapsed());
    let per = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
    (per(cpu), per(wall))
}

fn row(what: &str, (cpu_us, wall_us): (f64, f64)) {
    let share = cpu_us * RATE / 1e6 * 100.0;
    println!("| {what} | {cpu_us:.2} | {wall_us:.2} | {share:.2} % |");
}

fn verifier(keys: AuthKeys) -> CandidateAuth {
    CandidateAuth::new(&AuthSettings {
        keys,
        issuer: None,
        audience: None,
    })
    .unwrap()
}

fn main() {
    let n: usize = std::env::var("BENCH_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let now = unix_now();
    let candidates: Vec<String> = (0..n).map(|i| format!("candidate-{i:07}")).collect();
    println!("candidate tokens: {n} ops per figure, CPU time of one thread");
    println!();
    println!("| operation | CPU µs/op | wall µs/op | one core at 2,000/s |");
    println!("|---|---|---|---|");

    // the rehearsal's generator: HS256, signed ahead or when sent
    let signer = CandidateSigner::hs256(SECRET).unwrap();
    row(
        "sign HS256 (generator)",
        measure(n, |i| {
            std::hint::black_box(signer.sign(&candidates[i % n], now).unwrap());
        }),
    );
    let hs_tokens: Vec<String> = candidates
        .iter()
        .map(|c| signer.sign(c, now).unwrap())
        .collect();
    row(
        "pre-signed: `Bearer <token>` header (generator)",
        measure(n, |i| {
            std::hint::black_box(format!("Bearer {}", hs_tokens[i % n]));
        }),
    );

    // the server, on every POST /bookings
    let hs = verifier(AuthKeys::Hs256 {
        secret: SECRET.to_vec(),
    });
    row(
        "verify HS256 (server)",
        measure(n, |i| {
            hs.verify(&hs_tokens[i % n], &candidates[i % n], now)
                .unwrap();
        }),
    );

    let claims = |c: &str| serde_json::json!({"sub": c, "exp": now + 900, "iat": now});
    let rsa_key = EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap();
    let rsa_sign_n = (n / 10).max(100);
    row(
        "sign RS256 (a login front door; 2048-bit)",
        measure(rsa_sign_n, |i| {
            let c = &candidates[i % n];
            std::hint::black_box(
                jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims(c), &rsa_key).unwrap(),
            );
        }),
    );
    let rs_tokens: Vec<String> = candidates
        .iter()
        .take(rsa_sign_n)
        .map(|c| {
            jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims(c), &rsa_key).unwrap()
        })
        .collect();
    let rs = verifier(AuthKeys::Pem {
        algorithm: AuthAlgorithm::RS256,
        pems: vec![RSA_PUBLIC.into()],
    });
    row(
        "verify RS256 (server)",
        measure(n, |i| {
            let k = i % rs_tokens.len();
            rs.verify(&rs_tokens[k], &candidates[k], now).unwrap();
        }),
    );

    let ed_key = EncodingKey::from_ed_pem(ED_PRIVATE.as_bytes()).unwrap();
    let ed_tokens: Vec<String> = candidates
        .iter()
        .map(|c| jsonwebtoken::encode(&Header::new(Algorithm::EdDSA), &claims(c), &ed_key).unwrap())
        .collect();
    let ed = verifier(AuthKeys::Pem {
        algorithm: AuthAlgorithm::EdDSA,
        pems: vec![ED_PUBLIC.into()],
    });
    row(
        "verify EdDSA (server)",
        measure(n, |i| {
            ed.verify(&ed_tokens[i % n], &candidates[i % n], now)
                .unwrap();
        }),
    );
    println!();
    println!(
        "share of one core = CPU µs/op × 2,000/s; the server's whole budget at 2,000 bookings/s \
         is 2 cores (see `just bench-bookings` for what a booking costs)"
    );
}
