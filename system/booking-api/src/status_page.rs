//! `GET /status`: the static status page ([`STATUS_PAGE`], one HTML file
//! with its CSS and JavaScript inline) that reads `status.json` beside it
//! (a relative URL, so the same file works from the booking server and from
//! S3, where `booking provision` uploads it next to the document) every
//! couple of seconds.
//!
//! What the page shows is decided by [`shown`], and the page's own
//! JavaScript function `judge` is the same rule (the browser tests check the
//! two agree on a table of documents):
//!
//! - the counts decide as well as the flags: a level whose seats are all
//!   taken shows full even if the document says open (the article's rule,
//!   [`StatusDocument::shows_full_level_open`]), and every level of a closed
//!   sale shows closed;
//! - a closed sale with no seat taken has not opened yet;
//! - a document written more than [`STALE_AFTER`] ago is shown stale, with
//!   its age.

use std::time::Duration;

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use booking::Level;
use booking::settings::STATUS_THROTTLE;
use booking::status::{LevelState, StatusDocument};

/// The page, served at `GET /status` and uploaded by `booking provision`.
pub const STATUS_PAGE: &str = include_str!("../assets/status.html");

/// The page's `Content-Type`.
pub const STATUS_PAGE_CONTENT_TYPE: &str = "text/html; charset=utf-8";

/// A document older than this is shown stale: five throttle windows. The
/// writers refresh the document every window while a server runs, so a
/// document this old means no writer is running (or the CDN serves an old
/// copy). The page's `STALE_AFTER_MS` is this in milliseconds.
pub const STALE_AFTER: Duration = STATUS_THROTTLE.saturating_mul(5);

/// The sale's state on the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaleShown {
    /// Admissions open.
    Open,
    /// Closed after seats were taken.
    Closed,
    /// Closed with no seat taken: not opened yet.
    NotYetOpen,
}

/// One level on the page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelShown {
    /// Level.
    pub level: Level,
    /// Seats in it.
    pub cap: u32,
    /// `cap - taken`, never below zero (from the counts, not the document's
    /// `left`).
    pub left: u32,
    /// Open, full or closed.
    pub state: LevelState,
}

/// Everything the page decides about one document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    /// The sale's state.
    pub sale: SaleShown,
    /// Whether the document is older than [`STALE_AFTER`].
    pub stale: bool,
    /// How old the document is (zero for one from a clock ahead of ours).
    pub age_ms: u64,
    /// Per level, in the document's order.
    pub levels: Vec<LevelShown>,
}

/// What the page shows for `doc` read at `now_ms` (the page's `judge`).
pub fn shown(doc: &StatusDocument, now_ms: u64) -> Shown {
    let levels = doc
        .levels
        .iter()
        .map(|l| LevelShown {
            level: l.level.clone(),
            cap: l.cap,
            left: l.cap.saturating_sub(l.taken),
            // the counts decide closed and full; a level they say is open
            // shows what the document says (a full flag is believed)
            state: match LevelState::from_counts(doc.open, l.taken, l.cap) {
                LevelState::Open => l.state,
                by_counts => by_counts,
            },
        })
        .collect();
    let sale = if doc.open {
        SaleShown::Open
    } else if doc.levels.iter().all(|l| l.taken == 0) {
        SaleShown::NotYetOpen
    } else {
        SaleShown::Closed
    };
    let age_ms = now_ms.saturating_sub(doc.generated_at_ms);
    Shown {
        sale,
        stale: u128::from(age_ms) > STALE_AFTER.as_millis(),
        age_ms,
        levels,
    }
}

/// `GET /status`: the page.
pub(crate) async fn status_page() -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(STATUS_PAGE_CONTENT_TYPE),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        STATUS_PAGE,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use booking::SaleId;
    use booking::ledger::{Counters, LevelCount};

    fn doc(open: bool, levels: &[(&str, u32, u32)], at: u64) -> StatusDocument {
        let counters = Counters {
            open,
            levels: levels
                .iter()
                .map(|(l, cap, count)| LevelCount {
                    level: Level::parse(l).unwrap(),
                    cap: *cap,
                    count: *count,
                    peak: *count,
                })
                .collect(),
            paid: 0,
        };
        StatusDocument::from_counters(&SaleId::parse("launch").unwrap(), &counters, at)
    }

    fn states(s: &Shown) -> Vec<LevelState> {
        s.levels.iter().map(|l| l.state).collect()
    }

    #[test]
    fn a_written_document_is_shown_as_written() {
        let d = doc(true, &[("a", 3, 1), ("b", 2, 2)], 1_000);
        let s = shown(&d, 1_500);
        assert_eq!(s.sale, SaleShown::Open);
        assert_eq!(states(&s), [LevelState::Open, LevelState::Full]);
        assert_eq!(s.levels[0].left, 2);
        assert!(!s.stale);
        assert_eq!(s.age_ms, 500);
        for (l, from_doc) in s.levels.iter().zip(&d.levels) {
            assert_eq!(l.state, from_doc.state);
        }
    }

    #[test]
    fn a_forged_open_level_with_every_seat_taken_is_shown_full() {
        let mut d = doc(true, &[("a", 2, 2), ("b", 2, 5)], 0);
        for l in &mut d.levels {
            l.state = LevelState::Open;
            l.left = 1;
        }
        assert_eq!(
            d.shows_full_level_open().len(),
            2,
            "the document's own check agrees"
        );
        let s = shown(&d, 0);
        assert_eq!(states(&s), [LevelState::Full, LevelState::Full]);
        assert_eq!(s.levels[1].left, 0, "left comes from the counts");
    }

    #[test]
    fn every_level_of_a_closed_sale_is_closed() {
        let mut d = doc(false, &[("a", 2, 1), ("b", 2, 0)], 0);
        d.levels[0].state = LevelState::Open;
        let s = shown(&d, 0);
        assert_eq!(s.sale, SaleShown::Closed);
        assert_eq!(states(&s), [LevelState::Closed, LevelState::Closed]);
        assert_eq!(
            shown(&doc(false, &[("a", 2, 0)], 0), 0).sale,
            SaleShown::NotYetOpen
        );
    }

    #[test]
    fn a_level_the_document_calls_full_stays_full() {
        let mut d = doc(true, &[("a", 2, 1)], 0);
        d.levels[0].state = LevelState::Full;
        assert_eq!(states(&shown(&d, 0)), [LevelState::Full]);
    }

    #[test]
    fn a_document_older_than_the_bound_is_stale() {
        let bound = u64::try_from(STALE_AFTER.as_millis()).unwrap();
        assert_eq!(bound, 10_000);
        let d = doc(true, &[("a", 1, 0)], 50_000);
        assert!(!shown(&d, 50_000 + bound).stale);
        let s = shown(&d, 50_001 + bound);
        assert!(s.stale);
        assert_eq!(s.age_ms, bound + 1);
        let ahead = shown(&d, 10);
        assert!(!ahead.stale);
        assert_eq!(ahead.age_ms, 0);
    }

    #[test]
    fn the_page_carries_the_same_bound_and_reads_status_json_beside_it() {
        let bound = STALE_AFTER.as_millis();
        assert!(
            STATUS_PAGE.contains(&format!("const STALE_AFTER_MS = {bound};")),
            "the page's bound is STALE_AFTER"
        );
        assert!(
            STATUS_PAGE.contains(r#"fetch("status.json")"#),
            "relative URL"
        );
        assert!(STATUS_PAGE.contains(r#"name="viewport""#));
        assert!(STATUS_PAGE.contains(r#"aria-live="polite""#));
        assert!(STATUS_PAGE.contains("<h1>") && STATUS_PAGE.contains("<h2"));
        assert!(!STATUS_PAGE.contains("http://") && !STATUS_PAGE.contains("https://"));
    }
}
