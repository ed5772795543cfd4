//! Randomness behind a trait, beside [`crate::Clock`]: request tokens and lock
//! owner tokens come from an [`Entropy`] the caller is given, so a simulator
//! on a paused runtime can run the real code and get the same sale from the
//! same seed.
//!
//! [`OsEntropy`] (the thread-local generator, seeded by the OS) is what a
//! server uses; [`SeededEntropy`] (ChaCha8 from a seed) is what the
//! simulator and tests use.

use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::ids::RequestToken;

/// Where a component draws its random numbers.
pub trait Entropy: Send + Sync + std::fmt::Debug {
    /// 128 random bits.
    fn next_u128(&self) -> u128;
}

/// A fresh request token: 128 bits in hex (always a valid token).
pub fn request_token(entropy: &dyn Entropy) -> RequestToken {
    let hex = format!("{:032x}", entropy.next_u128());
    match RequestToken::parse(&hex) {
        Ok(token) => token,
        // 32 hex digits are a valid token by construction
        Err(e) => unreachable!("32 hex digits refused as a request token: {e}"),
    }
}

/// A fresh lock owner token: 128 bits in hex.
pub fn owner_token(entropy: &dyn Entropy) -> String {
    format!("{:032x}", entropy.next_u128())
}

/// The operating system's randomness, through the thread-local generator.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsEntropy;

impl Entropy for OsEntropy {
    fn next_u128(&self) -> u128 {
        rand::random()
    }
}

/// A seeded generator: the same seed gives the same numbers in the same
/// order.
#[derive(Debug)]
pub struct SeededEntropy(Mutex<ChaCha8Rng>);

impl SeededEntropy {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> SeededEntropy {
        SeededEntropy(Mutex::new(ChaCha8Rng::seed_from_u64(seed)))
    }
}

impl Entropy for SeededEntropy {
    fn next_u128(&self) -> u128 {
        self.0.lock().r#gen()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_tokens() {
        let (a, b) = (SeededEntropy::new(7), SeededEntropy::new(7));
        let first = request_token(&a);
        assert_eq!(first, request_token(&b));
        assert_ne!(first, request_token(&a), "a second draw differs");
        assert_ne!(owner_token(&SeededEntropy::new(8)), owner_token(&b));
    }

    #[test]
    fn os_tokens_are_32_hex_digits_and_differ() {
        let t = request_token(&OsEntropy);
        assert_eq!(t.as_str().len(), 32);
        assert!(t.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(owner_token(&OsEntropy), owner_token(&OsEntropy));
    }
}
