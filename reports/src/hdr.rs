//! Latency histograms in a report: HDR histograms of microseconds, kept in
//! `report.json` as the base64 of the `hdrhistogram` crate's compressed V2
//! serialization (the encoding of HdrHistogram's own histogram logs), and
//! the percentiles read from them.
//!
//! The load engine records into [`histogram`]s and turns them into
//! [`TransactionFigures`] with [`figures`]; `reports merge` decodes the
//! shards' histograms, adds them ([`add`]) and calls the same [`figures`],
//! so a merged report's percentiles are computed exactly as a single run's.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer as _, V2DeflateSerializer};

use crate::model::TransactionFigures;

/// The slowest latency a histogram keeps apart, µs (an hour); slower ones
/// are recorded as this.
pub const LATENCY_US_MAX: u64 = 3_600_000_000;
/// Significant figures the histograms keep.
pub const SIGNIFICANT_FIGURES: u8 = 3;

/// Why a histogram in a report could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HdrError {
    /// Not base64.
    #[error("not base64: {0}")]
    Base64(String),
    /// Not a V2 histogram.
    #[error("not an HDR histogram (V2): {0}")]
    Decode(String),
    /// Two histograms could not be added.
    #[error("adding histograms: {0}")]
    Add(String),
}

/// An empty latency histogram (µs): 1 µs .. 1 h at 3 significant figures.
pub fn histogram() -> Histogram<u64> {
    // a valid bound; fall back to an auto-resizing histogram rather than
    // fail if the library disagrees
    Histogram::new_with_bounds(1, LATENCY_US_MAX, SIGNIFICANT_FIGURES)
        .or_else(|_| Histogram::new(SIGNIFICANT_FIGURES))
        .unwrap_or_else(|_| unreachable!("3 significant figures are valid"))
}

/// `h` as base64 of its compressed V2 serialization.
pub fn encode(h: &Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    // writing into a Vec fails only for a histogram the V2 format cannot
    // hold (none of ours): an empty string then, which decodes as an error
    match V2DeflateSerializer::new().serialize(h, &mut bytes) {
        Ok(_) => STANDARD.encode(&bytes),
        Err(_) => String::new(),
    }
}

/// The histogram [`encode`] wrote (V2, compressed or not).
pub fn decode(text: &str) -> Result<Histogram<u64>, HdrError> {
    let bytes = STANDARD
        .decode(text.trim())
        .map_err(|e| HdrError::Base64(e.to_string()))?;
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| HdrError::Decode(format!("{e:?}")))
}

/// The sum of `parts` (an empty histogram for none), resizing if one holds
/// values past the usual bound.
pub fn add<'a>(
    parts: impl IntoIterator<Item = &'a Histogram<u64>>,
) -> Result<Histogram<u64>, HdrError> {
    let mut all = histogram();
    all.auto(true);
    for h in parts {
        all.add(h).map_err(|e| HdrError::Add(format!("{e:?}")))?;
    }
    Ok(all)
}

/// The report's figures of a histogram (µs) as milliseconds, the histogram
/// itself kept ([`encode`]d) so that shards' figures can be merged.
pub fn figures(name: &str, h: &Histogram<u64>, errors: u64) -> TransactionFigures {
    let ms = |us: u64| us as f64 / 1_000.0;
    if h.is_empty() {
        return TransactionFigures {
            name: name.to_owned(),
            errors,
            hdr: Some(encode(h)),
            ..TransactionFigures::default()
        };
    }
    TransactionFigures {
        name: name.to_owned(),
        count: h.len(),
        errors,
        mean_ms: h.mean() / 1_000.0,
        p50_ms: ms(h.value_at_quantile(0.50)),
        p90_ms: ms(h.value_at_quantile(0.90)),
        p99_ms: ms(h.value_at_quantile(0.99)),
        p999_ms: ms(h.value_at_quantile(0.999)),
        max_ms: ms(h.max()),
        hdr: Some(encode(h)),
    }
}

/// The 50th and 99th percentiles of `h`, ms (0 when empty): a timeline
/// sample's latency.
pub fn p50_p99_ms(h: &Histogram<u64>) -> (f64, f64) {
    if h.is_empty() {
        return (0.0, 0.0);
    }
    let q = |q: f64| h.value_at_quantile(q) as f64 / 1_000.0;
    (q(0.50), q(0.99))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_histogram_survives_its_encoding() {
        let mut h = histogram();
        for v in [1u64, 10, 100, 1_000, 12_345, 1_000_000, LATENCY_US_MAX] {
            h.record_n(v, v % 7 + 1).unwrap();
        }
        let text = encode(&h);
        assert!(!text.is_empty());
        let back = decode(&text).unwrap();
        assert_eq!(back, h);
        assert_eq!(figures("x", &back, 0), figures("x", &h, 0));
        let empty = decode(&encode(&histogram())).unwrap();
        assert!(empty.is_empty());
    }

    #[test]
    fn what_is_not_a_histogram_is_refused() {
        assert!(matches!(decode("not base64 !"), Err(HdrError::Base64(_))));
        assert!(matches!(
            decode("aGVsbG8gd29ybGQ="),
            Err(HdrError::Decode(_))
        ));
        assert!(matches!(decode(""), Err(HdrError::Decode(_))));
    }

    #[test]
    fn figures_are_milliseconds_of_microseconds() {
        let mut h = histogram();
        for ms in 1..=100u64 {
            h.record(ms * 1_000).unwrap();
        }
        let f = figures("booking", &h, 3);
        assert_eq!((f.count, f.errors), (100, 3));
        assert!((f.p50_ms - 50.0).abs() < 0.1, "{f:?}");
        assert!((f.p99_ms - 99.0).abs() < 0.1, "{f:?}");
        assert!((f.max_ms - 100.0).abs() < 0.1, "{f:?}");
        let (p50, p99) = p50_p99_ms(&h);
        assert_eq!((p50, p99), (f.p50_ms, f.p99_ms));
        assert_eq!(p50_p99_ms(&histogram()), (0.0, 0.0));
    }
}
