//! The status document as the audit and the page read it: the problems
//! found in landed documents, level lookup, the writer's key names.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use booking::ledger::LevelCount;
use booking::status::{LevelState, dirty_key, landed_problems, writer_lock_key};
use booking::{Counters, Level, SaleId, StatusDocument};

fn sale() -> SaleId {
    SaleId::parse("launch").unwrap()
}

fn level(s: &str) -> Level {
    Level::parse(s).unwrap()
}

fn doc(open: bool, levels: &[(&str, u32, u32)], at_ms: u64) -> StatusDocument {
    let counters = Counters {
        open,
        levels: levels
            .iter()
            .map(|(l, cap, count)| LevelCount {
                level: level(l),
                cap: *cap,
                count: *count,
                peak: *count,
            })
            .collect(),
        paid: 0,
    };
    StatusDocument::from_counters(&sale(), &counters, at_ms)
}

#[test]
fn clean_landed_documents_have_no_problems() {
    let landed = vec![
        (10, doc(true, &[("gold", 2, 1)], 5)),
        (20, doc(true, &[("gold", 2, 2)], 5)),
        (30, doc(false, &[("gold", 2, 2)], 9)),
    ];
    assert_eq!(landed_problems(&landed), (vec![], vec![]));
    assert_eq!(landed_problems(&[]), (vec![], vec![]));
}

#[test]
fn a_forged_open_level_is_reported_with_when_and_its_counts() {
    let mut forged = doc(true, &[("gold", 2, 1), ("silver", 3, 3)], 5);
    forged.levels[1].state = LevelState::Open;
    let landed = vec![(10, doc(true, &[("gold", 2, 1)], 4)), (17, forged)];
    let (shown_open, unordered) = landed_problems(&landed);
    assert_eq!(shown_open, vec!["at 17: silver open with 3/3".to_string()]);
    assert!(unordered.is_empty());
}

#[test]
fn a_write_from_an_older_read_is_reported_with_both_reads() {
    let landed = vec![
        (10, doc(true, &[("gold", 2, 1)], 100)),
        (11, doc(true, &[("gold", 2, 2)], 200)),
        (12, doc(true, &[("gold", 2, 1)], 150)),
        (13, doc(true, &[("gold", 2, 2)], 200)),
    ];
    let (shown_open, unordered) = landed_problems(&landed);
    assert!(shown_open.is_empty());
    assert_eq!(
        unordered,
        vec!["write 2: read at 150, after a write read at 200".to_string()]
    );
}

#[test]
fn a_level_is_found_by_name_and_only_if_the_sale_has_it() {
    let d = doc(true, &[("gold", 2, 1), ("silver", 5, 4)], 0);
    assert_eq!(d.level(&level("silver")).unwrap().cap, 5);
    assert_eq!(d.level(&level("gold")).unwrap().cap, 2);
    assert_eq!(d.level(&level("bronze")), None);
}

#[test]
fn the_writer_keys_have_their_exact_names() {
    assert_eq!(
        writer_lock_key("p", &sale()),
        "p:{sale:launch}:status:throttle:writer-lock"
    );
    assert_eq!(
        dirty_key("p", &sale()),
        "p:{sale:launch}:status:throttle:dirty"
    );
}
