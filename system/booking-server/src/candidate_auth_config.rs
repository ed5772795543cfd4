//! `[candidate_auth]`: signed candidates (off unless the section is there).
//! With it, `POST /bookings` needs `Authorization: Bearer <JWT>` whose `sub`
//! is the request's candidate ([`booking_api::candidate_auth`] has the rule).
//!
//! ```toml
//! [candidate_auth]
//! algorithm = "HS256"                 # or "RS256", "EdDSA"
//! secret_env = "SELLOUT_CANDIDATE_SECRET"   # HS256: the variable holding the secret
//! # secret_file = "/run/secrets/candidate-jwt"  # … or a file (trailing newline ignored)
//! # secret = "..."                    # … or inline (rehearsals and tests)
//! # public_keys_pem = ["-----BEGIN PUBLIC KEY-----\n..."]   # RS256 / EdDSA, inline
//! # public_key_files = ["/etc/sellout/login.pub"]            # RS256 / EdDSA, files
//! # jwks_file = "/etc/sellout/login-jwks.json"               # a JWKS: `kid` picks the key
//! issuer = "https://login.example"    # optional: `iss` must match
//! audience = "sellout"                # optional: `aud` must match
//! ```
//!
//! Exactly one source of keys: a secret (one of `secret`, `secret_file`,
//! `secret_env`) for HS256, PEM public keys for RS256 and EdDSA, or a JWKS
//! file (whose keys carry their own algorithm; `algorithm` is then
//! ignored). Everything is read and checked when the configuration is
//! validated, so the server refuses to start on an HS256 secret shorter than
//! 32 bytes, a PEM key or a JWKS file that does not parse, or a variable
//! that is not set.

use std::path::PathBuf;
use std::sync::Arc;

use booking_api::candidate_auth::{AuthAlgorithm, AuthKeys, AuthSettings, CandidateAuth};
use serde::{Deserialize, Serialize};

/// `[candidate_auth]`.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CandidateAuthConfig {
    /// `HS256` (the default), `RS256` or `EdDSA`.
    pub algorithm: Option<AuthAlgorithm>,
    /// The HS256 secret, inline (rehearsals and tests; prefer the two below).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// A file holding the HS256 secret (one trailing newline ignored).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<PathBuf>,
    /// The environment variable holding the HS256 secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_env: Option<String>,
    /// RS256 or EdDSA public keys, PEM text.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub public_keys_pem: Vec<String>,
    /// RS256 or EdDSA public keys, PEM files.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub public_key_files: Vec<PathBuf>,
    /// A JWKS document's file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwks_file: Option<PathBuf>,
    /// When set, `iss` must be exactly this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// When set, `aud` must be (or contain) this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
}

impl std::fmt::Debug for CandidateAuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CandidateAuthConfig")
            .field("algorithm", &self.algorithm)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("secret_file", &self.secret_file)
            .field("secret_env", &self.secret_env)
            .field("public_keys_pem", &self.public_keys_pem.len())
            .field("public_key_files", &self.public_key_files)
            .field("jwks_file", &self.jwks_file)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish()
    }
}

/// Why `[candidate_auth]` cannot make a verifier; the message names the
/// setting (`candidate_auth.<name>`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("candidate_auth.{0}")]
pub struct CandidateAuthError(String);

fn read(path: &std::path::Path, setting: &str) -> Result<String, CandidateAuthError> {
    std::fs::read_to_string(path)
        .map_err(|e| CandidateAuthError(format!("{setting}: reading {}: {e}", path.display())))
}

impl CandidateAuthConfig {
    /// HS256 with an inline secret (what a rehearsal writes).
    pub fn hs256_inline(secret: String) -> CandidateAuthConfig {
        CandidateAuthConfig {
            algorithm: Some(AuthAlgorithm::HS256),
            secret: Some(secret),
            ..CandidateAuthConfig::default()
        }
    }

    /// The keys, read from wherever they are.
    pub fn settings(&self) -> Result<AuthSettings, CandidateAuthError> {
        let bad = |m: &str| Err(CandidateAuthError(m.to_owned()));
        let secrets = [
            self.secret.is_some(),
            self.secret_file.is_some(),
            self.secret_env.is_some(),
        ]
        .iter()
        .filter(|s| **s)
        .count();
        let pems = !self.public_keys_pem.is_empty() || !self.public_key_files.is_empty();
        let jwks = self.jwks_file.is_some();
        let sources = usize::from(secrets > 0) + usize::from(pems) + usize::from(jwks);
        if sources != 1 || secrets > 1 {
            return bad(
                "secret: give exactly one source of keys: one of secret, secret_file, secret_env \
                 (HS256), or public_keys_pem / public_key_files (RS256, EdDSA), or jwks_file",
            );
        }
        let algorithm = self.algorithm.unwrap_or(AuthAlgorithm::HS256);
        let keys = if secrets == 1 {
            if algorithm != AuthAlgorithm::HS256 {
                return bad("algorithm: a secret is for HS256; RS256 and EdDSA take public keys");
            }
            let secret = match (&self.secret, &self.secret_file, &self.secret_env) {
                (Some(s), _, _) => s.clone(),
                (_, Some(path), _) => {
                    let text = read(path, "secret_file")?;
                    let text = text.strip_suffix('\n').unwrap_or(&text);
                    text.strip_suffix('\r').unwrap_or(text).to_owned()
                }
                (_, _, Some(var)) => std::env::var(var).map_err(|e| {
                    CandidateAuthError(format!("secret_env: the variable {var}: {e}"))
                })?,
                _ => return bad("secret: none given"),
            };
            AuthKeys::Hs256 {
                secret: secret.into_bytes(),
            }
        } else if pems {
            let mut texts = self.public_keys_pem.clone();
            for path in &self.public_key_files {
                texts.push(read(path, "public_key_files")?);
            }
            AuthKeys::Pem {
                algorithm,
                pems: texts,
            }
        } else {
            let path = self
                .jwks_file
                .as_deref()
                .unwrap_or(std::path::Path::new(""));
            AuthKeys::Jwks {
                json: read(path, "jwks_file")?,
            }
        };
        Ok(AuthSettings {
            keys,
            issuer: self.issuer.clone(),
            audience: self.audience.clone(),
        })
    }

    /// The verifier, or why not (a short secret, a key that does not parse):
    /// run by [`crate::config::ServerConfig::validate`], so the server
    /// refuses to start on it.
    pub fn verifier(&self) -> Result<CandidateAuth, CandidateAuthError> {
        CandidateAuth::new(&self.settings()?).map_err(|e| CandidateAuthError(e.to_string()))
    }
}

/// The verifier `config` asks for (`None`: `candidate_auth` is off).
pub fn verifier_of(
    config: Option<&CandidateAuthConfig>,
) -> Result<Option<Arc<CandidateAuth>>, CandidateAuthError> {
    config.map(|c| c.verifier().map(Arc::new)).transpose()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::config::ServerConfig;

    const ED_PUBLIC: &str = include_str!("../../booking-api/tests/fixtures/jwt/ed.pub");

    fn temp(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "sellout-candidate-auth-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn the_section_reads_from_toml_and_is_off_by_default() {
        assert_eq!(ServerConfig::default().candidate_auth, None);
        let c = ServerConfig::from_toml(
            "[candidate_auth]\nalgorithm = \"HS256\"\nsecret = \"0123456789abcdef0123456789abcdef\"\nissuer = \"login\"\n",
        )
        .unwrap();
        let auth = c.candidate_auth.as_ref().unwrap();
        assert_eq!(auth.algorithm, Some(AuthAlgorithm::HS256));
        assert_eq!(auth.issuer.as_deref(), Some("login"));
        assert!(c.validate().is_ok());
        assert!(
            !format!("{auth:?}").contains("0123456789abcdef"),
            "Debug hides the secret"
        );
        assert!(ServerConfig::from_toml("[candidate_auth]\nsecrett = \"x\"\n").is_err());
    }

    #[test]
    fn a_short_secret_is_refused_naming_the_setting() {
        let c = ServerConfig {
            candidate_auth: Some(CandidateAuthConfig::hs256_inline("too short".into())),
            ..ServerConfig::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("candidate_auth.secret"), "{e}");
        assert!(e.contains("32 bytes"), "{e}");
        let path = temp("secret", "0123456789abcdef0123456789abcdef\n");
        let file = CandidateAuthConfig {
            secret_file: Some(path),
            ..CandidateAuthConfig::default()
        };
        assert!(
            file.verifier().is_ok(),
            "32 bytes and a newline: the newline is not counted"
        );
        let short = CandidateAuthConfig {
            secret_file: Some(temp("secret", "0123456789abcdef0123456789abcde\n")),
            ..CandidateAuthConfig::default()
        };
        assert!(
            short
                .verifier()
                .unwrap_err()
                .to_string()
                .contains("at least 32")
        );
    }

    #[test]
    fn a_secret_from_an_unset_variable_is_refused() {
        let c = CandidateAuthConfig {
            secret_env: Some("SELLOUT_TEST_CANDIDATE_SECRET_NEVER_SET".into()),
            ..CandidateAuthConfig::default()
        };
        let e = c.verifier().unwrap_err().to_string();
        assert!(e.starts_with("candidate_auth.secret_env"), "{e}");
    }

    #[test]
    fn a_jwks_file_that_does_not_parse_is_refused_at_start() {
        let mut c = ServerConfig {
            candidate_auth: Some(CandidateAuthConfig {
                jwks_file: Some(temp("jwks.json", "{\"keys\": [")),
                ..CandidateAuthConfig::default()
            }),
            ..ServerConfig::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("candidate_auth.jwks_file"), "{e}");
        c.candidate_auth = Some(CandidateAuthConfig {
            jwks_file: Some(PathBuf::from("/nonexistent/jwks.json")),
            ..CandidateAuthConfig::default()
        });
        assert!(c.validate().unwrap_err().to_string().contains("jwks_file"));
        let good = r#"{"keys":[{"kty":"OKP","crv":"Ed25519","x":"Zvsf0s_sz0E_JolKbFok-WWcyVFMQDvvh-ob1ouEtbA","kid":"k1"}]}"#;
        c.candidate_auth = Some(CandidateAuthConfig {
            jwks_file: Some(temp("jwks.json", good)),
            ..CandidateAuthConfig::default()
        });
        assert!(c.validate().is_ok());
    }

    #[test]
    fn keys_come_from_exactly_one_source_of_the_right_kind() {
        let both = CandidateAuthConfig {
            secret: Some("0123456789abcdef0123456789abcdef".into()),
            public_keys_pem: vec![ED_PUBLIC.into()],
            algorithm: Some(AuthAlgorithm::EdDSA),
            ..CandidateAuthConfig::default()
        };
        assert!(both.verifier().is_err());
        assert!(
            CandidateAuthConfig::default().verifier().is_err(),
            "no key at all"
        );
        let ed = CandidateAuthConfig {
            algorithm: Some(AuthAlgorithm::EdDSA),
            public_key_files: vec![temp("ed.pub", ED_PUBLIC)],
            ..CandidateAuthConfig::default()
        };
        assert!(ed.verifier().is_ok());
        let rsa_reading_ed = CandidateAuthConfig {
            algorithm: Some(AuthAlgorithm::RS256),
            public_keys_pem: vec![
                "-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----\n".into(),
            ],
            ..CandidateAuthConfig::default()
        };
        let e = rsa_reading_ed.verifier().unwrap_err().to_string();
        assert!(e.starts_with("candidate_auth.public_keys[0]"), "{e}");
        let secret_for_rsa = CandidateAuthConfig {
            algorithm: Some(AuthAlgorithm::RS256),
            secret: Some("0123456789abcdef0123456789abcdef".into()),
            ..CandidateAuthConfig::default()
        };
        assert!(
            secret_for_rsa
                .verifier()
                .unwrap_err()
                .to_string()
                .contains("algorithm")
        );
    }
}
