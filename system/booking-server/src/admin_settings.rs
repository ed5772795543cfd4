//! Who may reach the `/ops/` routes, and where: the admin listener's
//! address and the bearer tokens it accepts, resolved from the settings
//! (`admin_listen`, `admin_token`, `admin_token_previous`,
//! `admin_token_file`, and the `SELLOUT_ADMIN_TOKEN` variable through
//! `--admin-token`), and the rules that keep a deployment closed by default:
//!
//! - the admin routes are served on their own listener, `admin_listen`,
//!   on loopback by default ([`ADMIN_LISTEN_DEFAULT`]); the public listener
//!   does not serve them;
//! - an admin listener on any other address needs a token: the server
//!   refuses to start without one, naming `admin_token`;
//! - at most [`ADMIN_TOKENS_MAX`] tokens are accepted at once (the current
//!   one and, while it is rotated, the previous one), each at least
//!   [`ADMIN_TOKEN_MIN_LEN`] bytes of printable ASCII;
//! - in production, `reset`, `load-candidates` and `close` need the sale's
//!   id in the [`CONFIRM_HEADER`] header (`booking --confirm SALE`).
//!
//! The `booking` CLI and `scenarios rehearse --target-config` read the same
//! file to find the admin address and token ([`AdminSettings::client`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

/// The admin listener's address when none is given: loopback, so with
/// nothing configured no admin route is reachable from another machine.
pub const ADMIN_LISTEN_DEFAULT: &str = "127.0.0.1:8081";
/// Tokens accepted at once: the current one and the previous one while a
/// rotation is under way.
pub const ADMIN_TOKENS_MAX: usize = 2;
/// The shortest token accepted: 16 bytes (a 128-bit random token in hex is
/// 32).
pub const ADMIN_TOKEN_MIN_LEN: usize = 16;
/// The header a production `reset`, `load-candidates` or `close` carries,
/// naming the sale it is meant for.
pub const CONFIRM_HEADER: &str = "x-confirm-sale";

/// Why the admin settings were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminSettingsError {
    /// An admin listener off loopback with no token.
    #[error(
        "admin_listen = {0} is not a loopback address: set admin_token (or admin_token_file, or \
         SELLOUT_ADMIN_TOKEN) so that the /ops/ routes need a bearer token, or listen on \
         127.0.0.1"
    )]
    TokenRequired(SocketAddr),
    /// The token file could not be read.
    #[error("admin_token_file {path}: {why}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// A token is too short or holds a character a header cannot carry.
    #[error(
        "{setting}: an admin token is at least {ADMIN_TOKEN_MIN_LEN} bytes of printable ASCII \
         with no space (got {len} bytes)"
    )]
    Weak {
        /// Which setting gave it.
        setting: &'static str,
        /// Its length.
        len: usize,
    },
    /// More tokens than a rotation needs.
    #[error(
        "{0} admin tokens configured (admin_token, admin_token_previous, admin_token_file): at \
         most {ADMIN_TOKENS_MAX} are accepted at once"
    )]
    TooMany(usize),
    /// The admin listener would share the public one's address.
    #[error(
        "admin_listen = {0} is the public listen address: the admin routes need a listener of their own"
    )]
    SameAsPublic(SocketAddr),
}

/// The admin settings as configured (a part of the server's settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminSettings<'a> {
    /// `admin_listen`.
    pub listen: SocketAddr,
    /// The public `listen`.
    pub public: SocketAddr,
    /// `admin_token` (or `--admin-token`, `SELLOUT_ADMIN_TOKEN`).
    pub token: Option<&'a str>,
    /// `admin_token_previous`: still accepted while the current one is
    /// rolled out.
    pub previous: Option<&'a str>,
    /// `admin_token_file`: one token per line (blank lines and `#`
    /// comments skipped), the current one first.
    pub file: Option<&'a Path>,
}

/// The tokens the admin listener accepts, current first. Its `Debug` shows
/// how many, never the tokens.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct AdminTokens(Vec<String>);

impl std::fmt::Debug for AdminTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AdminTokens({} configured)", self.0.len())
    }
}

impl AdminTokens {
    /// Tokens given directly (tests, tools).
    pub fn of<I: IntoIterator<Item = S>, S: Into<String>>(tokens: I) -> AdminTokens {
        AdminTokens(tokens.into_iter().map(Into::into).collect())
    }

    /// No token configured: the routes answer without one (loopback only).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The token a client sends: the current one.
    pub fn current(&self) -> Option<&str> {
        self.0.first().map(String::as_str)
    }

    /// Whether `given` is one of them, in time independent of where it
    /// differs.
    pub fn accepts(&self, given: &str) -> bool {
        // every token compared, so the time does not tell which matched
        self.0.iter().fold(false, |ok, t| {
            ok | constant_time_eq(t.as_bytes(), given.as_bytes())
        })
    }
}

/// Equal bytes, compared in time that depends only on the lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn check_token(setting: &'static str, t: &str) -> Result<(), AdminSettingsError> {
    if t.len() < ADMIN_TOKEN_MIN_LEN || !t.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(AdminSettingsError::Weak {
            setting,
            len: t.len(),
        });
    }
    Ok(())
}

impl AdminSettings<'_> {
    /// The tokens, from every source, checked; and the listener's address
    /// checked against them: what `validate` and `serve` call.
    pub fn resolve(&self) -> Result<AdminTokens, AdminSettingsError> {
        if self.listen == self.public && self.listen.port() != 0 {
            return Err(AdminSettingsError::SameAsPublic(self.listen));
        }
        let mut tokens = Vec::new();
        for (setting, t) in [
            ("admin_token", self.token),
            ("admin_token_previous", self.previous),
        ] {
            if let Some(t) = t {
                check_token(setting, t)?;
                tokens.push(t.to_owned());
            }
        }
        if let Some(path) = self.file {
            let text = std::fs::read_to_string(path).map_err(|e| AdminSettingsError::File {
                path: path.to_owned(),
                why: e.to_string(),
            })?;
            for line in text.lines().map(str::trim) {
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                check_token("admin_token_file", line)?;
                tokens.push(line.to_owned());
            }
        }
        tokens.dedup();
        if tokens.len() > ADMIN_TOKENS_MAX {
            return Err(AdminSettingsError::TooMany(tokens.len()));
        }
        if tokens.is_empty() && !self.listen.ip().is_loopback() {
            return Err(AdminSettingsError::TokenRequired(self.listen));
        }
        Ok(AdminTokens(tokens))
    }

    /// Where a client on this machine reaches the admin listener, and the
    /// token it sends: `http://<admin_listen>` (an unspecified address,
    /// `0.0.0.0` or `::`, is reached on loopback).
    pub fn client(&self) -> Result<(String, Option<String>), AdminSettingsError> {
        let tokens = self.resolve()?;
        Ok((admin_url(self.listen), tokens.current().map(str::to_owned)))
    }
}

/// The base URL a client on this machine reaches `addr` at.
pub fn admin_url(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}", SocketAddr::new(ip, addr.port()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const GOOD: &str = "0123456789abcdef0123";
    const NEXT: &str = "fedcba9876543210fedc";

    fn settings(listen: &str) -> AdminSettings<'static> {
        AdminSettings {
            listen: listen.parse().unwrap(),
            public: "127.0.0.1:8080".parse().unwrap(),
            token: None,
            previous: None,
            file: None,
        }
    }

    #[test]
    fn off_loopback_a_token_is_required_and_named() {
        assert!(settings("127.0.0.1:8081").resolve().unwrap().is_empty());
        assert!(settings("[::1]:8081").resolve().unwrap().is_empty());
        for open in ["0.0.0.0:8081", "10.0.0.5:8081", "[::]:8081"] {
            let err = settings(open).resolve().unwrap_err();
            assert_eq!(
                err,
                AdminSettingsError::TokenRequired(open.parse().unwrap())
            );
            assert!(err.to_string().contains("admin_token"), "{err}");
        }
        let with = AdminSettings {
            token: Some(GOOD),
            ..settings("0.0.0.0:8081")
        };
        assert_eq!(with.resolve().unwrap().current(), Some(GOOD));
    }

    #[test]
    fn weak_tokens_and_a_shared_port_are_refused() {
        let short = AdminSettings {
            token: Some("s3cret"),
            ..settings("127.0.0.1:8081")
        };
        assert!(matches!(
            short.resolve().unwrap_err(),
            AdminSettingsError::Weak {
                setting: "admin_token",
                len: 6
            }
        ));
        let spaced = AdminSettings {
            previous: Some("0123456789 abcdef"),
            ..settings("127.0.0.1:8081")
        };
        assert!(matches!(
            spaced.resolve().unwrap_err(),
            AdminSettingsError::Weak {
                setting: "admin_token_previous",
                ..
            }
        ));
        assert_eq!(
            settings("127.0.0.1:8080").resolve().unwrap_err(),
            AdminSettingsError::SameAsPublic("127.0.0.1:8080".parse().unwrap())
        );
        // port 0 on both: each gets a port of its own
        let mut any = settings("127.0.0.1:0");
        any.public = "127.0.0.1:0".parse().unwrap();
        assert!(any.resolve().is_ok());
    }

    #[test]
    fn two_tokens_rotate_from_a_file_and_a_third_is_refused() {
        let dir = std::env::temp_dir().join(format!("admin-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokens");
        std::fs::write(&path, format!("# current first\n{NEXT}\n\n{GOOD}\n")).unwrap();
        let s = AdminSettings {
            file: Some(&path),
            ..settings("0.0.0.0:8081")
        };
        let tokens = s.resolve().unwrap();
        assert_eq!(tokens.current(), Some(NEXT));
        assert!(tokens.accepts(NEXT) && tokens.accepts(GOOD));
        assert!(!tokens.accepts("fedcba9876543210fedd"));
        assert!(!tokens.accepts(""));
        assert_eq!(
            s.client().unwrap(),
            ("http://127.0.0.1:8081".to_owned(), Some(NEXT.to_owned()))
        );
        let three = AdminSettings {
            token: Some("another-token-0123456"),
            file: Some(&path),
            ..settings("0.0.0.0:8081")
        };
        assert_eq!(three.resolve().unwrap_err(), AdminSettingsError::TooMany(3));
        let missing = AdminSettings {
            file: Some(Path::new("/nonexistent/tokens")),
            ..settings("127.0.0.1:8081")
        };
        assert!(
            missing
                .resolve()
                .unwrap_err()
                .to_string()
                .contains("admin_token_file")
        );
        assert!(format!("{tokens:?}").contains("2 configured"));
        assert!(!format!("{tokens:?}").contains(GOOD));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
