//! Signed candidates in a rehearsal (`candidate_auth = true` in the profile,
//! or `scenarios rehearse --candidate-auth`): the fleet's instances require
//! candidate tokens (`[candidate_auth]`, HS256 with a secret of the run's
//! own), and the load generator, standing in for the login front door,
//! signs each candidate's token and sends it as `Authorization: Bearer`.
//!
//! - The secret: `SELLOUT_CANDIDATE_AUTH_SECRET` when set (a `--target`
//!   deployment's, or several generator processes sharing one), else 32
//!   random bytes drawn once per process, written into the instances'
//!   configuration ([`server_config`]).
//! - The tokens: pre-signed at setup, one per arrival
//!   ([`CandidateTokens::presign`], `exp` = setup + 15 min), so the hot path
//!   only copies a string; a token that would expire before its request
//!   could go out (a run longer than the tokens' life) is signed when sent
//!   instead ([`CandidateTokens::token`]). The cost of both, and of the
//!   server's verification, is measured by `cargo run --release -p
//!   booking-api --example candidate_auth_cost`.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use booking_api::candidate_auth::{CandidateSigner, unix_now};
use booking_server::candidate_auth_config::CandidateAuthConfig;
use tokio::time::Instant;

use crate::load::Arrival;
use crate::profile::Profile;

/// The variable a rehearsal reads its HS256 secret from, when set.
pub const SECRET_ENV: &str = "SELLOUT_CANDIDATE_AUTH_SECRET";
/// A pre-signed token is used only while it has at least this long to live
/// (the server allows [`booking_api::candidate_auth::LEEWAY`] on top).
pub const PRESIGNED_MARGIN: Duration = Duration::from_secs(60);

/// The run's HS256 secret: [`SECRET_ENV`], else 32 random bytes (hex),
/// the same for the whole process.
pub fn rehearsal_secret() -> String {
    static SECRET: OnceLock<String> = OnceLock::new();
    if let Ok(s) = std::env::var(SECRET_ENV)
        && !s.is_empty()
    {
        return s;
    }
    SECRET
        .get_or_init(|| {
            rand::random::<[u8; 32]>()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        })
        .clone()
}

/// The instances' `[candidate_auth]`, when the profile asks for it.
pub fn server_config(profile: &Profile) -> Option<CandidateAuthConfig> {
    profile
        .candidate_auth
        .then(|| CandidateAuthConfig::hs256_inline(rehearsal_secret()))
}

/// The load's signer ([`crate::load::LoadConfig::candidate_tokens`]); two
/// are equal when they are the same signer.
#[derive(Debug, Clone)]
pub struct TokenSigner(pub Arc<CandidateSigner>);

impl PartialEq for TokenSigner {
    fn eq(&self, other: &TokenSigner) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for TokenSigner {}

/// The load's signer, when the profile asks for it.
pub fn signer(profile: &Profile) -> Result<Option<TokenSigner>, String> {
    if !profile.candidate_auth {
        return Ok(None);
    }
    CandidateSigner::hs256(rehearsal_secret().as_bytes())
        .map(|s| Some(TokenSigner(Arc::new(s))))
        .map_err(|e| format!("{SECRET_ENV}: {e}"))
}

/// Every arrival's token, signed ahead.
#[derive(Debug)]
pub struct CandidateTokens {
    signer: Arc<CandidateSigner>,
    presigned: Vec<String>,
    /// Pre-signed tokens are used until then.
    fresh_until: Instant,
    /// Tokens signed when sent (after `fresh_until`).
    signed_late: std::sync::atomic::AtomicU64,
}

impl CandidateTokens {
    /// Signs a token for each arrival's candidate, now.
    pub fn presign(signer: TokenSigner, arrivals: &[Arrival]) -> CandidateTokens {
        let TokenSigner(signer) = signer;
        let now = unix_now();
        let presigned = arrivals
            .iter()
            .map(|a| signer.sign(&a.candidate, now).unwrap_or_default())
            .collect();
        let fresh_until = Instant::now() + signer.ttl().saturating_sub(PRESIGNED_MARGIN);
        CandidateTokens {
            signer,
            presigned,
            fresh_until,
            signed_late: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Arrival `index`'s token: the pre-signed one while it is fresh, else
    /// one signed now.
    pub fn token(&self, index: usize, candidate: &str) -> Cow<'_, str> {
        match self.presigned.get(index) {
            Some(t) if !t.is_empty() && Instant::now() < self.fresh_until => Cow::Borrowed(t),
            _ => {
                self.signed_late
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Cow::Owned(self.signer.sign(candidate, unix_now()).unwrap_or_default())
            }
        }
    }

    /// Tokens signed when sent rather than ahead.
    pub fn signed_late(&self) -> u64 {
        self.signed_late.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use booking_api::candidate_auth::{AuthKeys, AuthSettings, CandidateAuth};

    fn arrival(candidate: &str) -> Arrival {
        Arrival {
            at: Duration::ZERO,
            candidate: candidate.into(),
            level: "gold".into(),
            payer: crate::load::PayerKind::PayNow,
            phase: crate::load::Phase::Rush,
            retry_if_busy: false,
        }
    }

    #[test]
    fn the_profile_turns_it_on_for_the_fleet_and_the_load_alike() {
        let mut profile = Profile::default();
        assert!(server_config(&profile).is_none());
        assert!(signer(&profile).unwrap().is_none());
        profile.candidate_auth = true;
        let config = server_config(&profile).unwrap();
        let secret = config.secret.clone().unwrap();
        assert_eq!(secret.len(), 64, "32 random bytes in hex");
        assert_eq!(rehearsal_secret(), secret, "one secret per process");
        // what the load signs, the fleet's verifier accepts
        let auth = config.verifier().unwrap();
        let tokens = CandidateTokens::presign(
            signer(&profile).unwrap().unwrap(),
            &[arrival("c-1"), arrival("c-2")],
        );
        assert_eq!(
            auth.verify(&tokens.token(0, "c-1"), "c-1", unix_now()),
            Ok(())
        );
        assert_eq!(
            auth.verify(&tokens.token(1, "c-2"), "c-2", unix_now()),
            Ok(())
        );
        assert!(
            auth.verify(&tokens.token(0, "c-1"), "c-2", unix_now())
                .is_err()
        );
        assert_eq!(tokens.signed_late(), 0, "pre-signed tokens were used");
        // past the pre-signed tokens' freshness, a token is signed when sent
        let stale = CandidateTokens {
            fresh_until: Instant::now(),
            ..CandidateTokens::presign(signer(&profile).unwrap().unwrap(), &[arrival("c-1")])
        };
        let late = stale.token(0, "c-1");
        assert_eq!(stale.signed_late(), 1);
        assert_eq!(auth.verify(&late, "c-1", unix_now()), Ok(()));
        // a verifier with another secret refuses them
        let other = CandidateAuth::new(&AuthSettings {
            keys: AuthKeys::Hs256 {
                secret: vec![b'z'; 32],
            },
            issuer: None,
            audience: None,
        })
        .unwrap();
        assert!(other.verify(&late, "c-1", unix_now()).is_err());
    }
}
