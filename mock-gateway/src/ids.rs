//! Deterministic ID material: the same seed gives the same IDs in the same order.

/// SplitMix64's finaliser: a fast, well-mixed, stable 64-bit hash step.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Hashes a string under a seed.
pub fn hash_str(seed: u64, s: &str) -> u64 {
    s.bytes().fold(mix(seed), |h, b| mix(h ^ u64::from(b)))
}

/// `n` in upper-case base 36, left-padded with zeros to `width` (high digits dropped).
pub fn base36(mut n: u64, width: usize) -> String {
    const DIGITS: &[u8; 36] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let mut out = String::with_capacity(width);
    let mut digits = vec![b'0'; width];
    for slot in digits.iter_mut().rev() {
        *slot = DIGITS[(n % 36) as usize];
        n /= 36;
    }
    out.extend(digits.into_iter().map(char::from));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base36_pads_and_mix_spreads() {
        assert_eq!(base36(35, 3), "00Z");
        assert_eq!(base36(36, 2), "10");
        assert_ne!(mix(1), mix(2));
        assert_eq!(hash_str(1, "a"), hash_str(1, "a"));
        assert_ne!(hash_str(1, "a"), hash_str(2, "a"));
    }
}
