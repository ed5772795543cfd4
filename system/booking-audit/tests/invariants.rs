//! Each invariant on a snapshot that keeps it and on one that breaks it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use booking::ledger::{Counters, Hold, HoldState, LevelCount};
use booking::notify::{Alert, Confirmation};
use booking::queue::QueueDepth;
use booking::records::{BookingRecord, ConfirmPath, Throttles};
use booking::{CandidateHash, Level, PaymentId, RequestToken, SaleId, StatusDocument};
use booking_audit::invariants::*;
use booking_audit::{
    BackOfficeRow, CurrentStatus, GatewayPayment, GatewayState, GatewayTruth, LandedStatus,
    LedgerMark, SaleSnapshot, Verdict, audit,
};

const T0: u64 = 1_800_000_000_000;
const HOLD_MS: u64 = 600_000;

fn sale() -> SaleId {
    SaleId::parse("s").unwrap()
}
fn gold() -> Level {
    Level::parse("gold").unwrap()
}
fn c(n: u32) -> CandidateHash {
    CandidateHash::of(&format!("c{n}"))
}
fn p(n: u32) -> PaymentId {
    PaymentId::parse(&format!("P{n}")).unwrap()
}
fn held(n: u32) -> BookingRecord {
    BookingRecord::held(c(n), sale(), gold(), p(n), T0, T0 + HOLD_MS)
}
fn paid(n: u32) -> BookingRecord {
    held(n).into_paid(ConfirmPath::Callback, T0 + 1_000)
}
fn email(n: u32) -> Confirmation {
    Confirmation {
        sale: sale(),
        candidate: c(n),
        level: gold(),
        payment_id: p(n),
        trx_id: None,
        recovered: false,
    }
}
fn payment(n: u32, state: GatewayState, who: Option<u32>) -> GatewayPayment {
    GatewayPayment {
        payment_id: format!("P{n}"),
        state,
        candidate: who.map(c),
        app_key: "k".into(),
        amount_poisha: 1_500,
        merchant_invoice_number: format!("s-{}-{T0}", c(n)),
        created_ms: Some(T0),
        executed_ms: (state == GatewayState::Completed).then_some(T0 + 1_000),
    }
}
fn held_hold(n: u32) -> Hold {
    Hold {
        level: gold(),
        token: RequestToken::parse(&format!("r-{n}")).unwrap(),
        state: HoldState::Held {
            payment_id: p(n),
            deadline_ms: T0 + HOLD_MS,
        },
    }
}
fn document(open: bool, count: u32, at: u64) -> StatusDocument {
    StatusDocument::from_counters(
        &sale(),
        &Counters {
            open,
            levels: vec![LevelCount {
                level: gold(),
                cap: 3,
                count,
                peak: count,
            }],
            paid: 0,
        },
        at,
    )
}
fn row(n: u32) -> BackOfficeRow {
    BackOfficeRow {
        payment_id: format!("P{n}"),
        candidate: c(n).to_string(),
        level: "gold".into(),
        paid_by: "callback".into(),
        email_sent: false,
    }
}

/// A deployment's audit mid-sale: candidate 1 paid, candidate 2 holds a
/// seat; every part read.
fn live() -> SaleSnapshot {
    let mut s = SaleSnapshot::empty(sale());
    s.open = true;
    s.levels = vec![LevelCount {
        level: gold(),
        cap: 3,
        count: 2,
        peak: 2,
    }];
    s.records = vec![paid(1), held(2)];
    s.ledger_marks = Some(BTreeMap::from([
        (
            c(1),
            LedgerMark {
                paid: Some(p(1)),
                hold: None,
            },
        ),
        (
            c(2),
            LedgerMark {
                paid: None,
                hold: Some(held_hold(2)),
            },
        ),
    ]));
    s.queue = Some(QueueDepth::default());
    s.dead_letters = Some(Vec::new());
    s.throttles = Some(Throttles::default());
    s.emails = vec![email(1)];
    s.status = Some(CurrentStatus {
        document: Some(document(true, 2, T0 + 2_000)),
    });
    s.landed = Some(LandedStatus {
        documents: vec![
            (T0 + 1_000, document(true, 1, T0 + 1_000)),
            (T0 + 2_000, document(true, 2, T0 + 2_000)),
        ],
        unreadable_at_ms: Vec::new(),
    });
    s.gateway = Some(GatewayTruth {
        payments: vec![
            payment(1, GatewayState::Completed, None),
            payment(2, GatewayState::Initiated, None),
        ],
        grants_in_window: Some(BTreeMap::from([("k".to_owned(), 1)])),
    });
    s.hold_ms = HOLD_MS;
    s.back_office = Some(Ok(vec![row(1)]));
    s
}

/// The virtual-time sale at quiescence: two seats, both paid.
fn settled() -> SaleSnapshot {
    let mut s = SaleSnapshot::empty(sale());
    s.settled = true;
    s.levels = vec![LevelCount {
        level: gold(),
        cap: 2,
        count: 2,
        peak: 2,
    }];
    s.records = vec![paid(1), paid(2)];
    s.ledger_marks = Some(
        [1, 2]
            .map(|n| {
                (
                    c(n),
                    LedgerMark {
                        paid: Some(p(n)),
                        hold: None,
                    },
                )
            })
            .into_iter()
            .collect(),
    );
    s.emails = vec![email(1), email(2)];
    s.alerts = Some(Vec::new());
    s.landed = Some(LandedStatus::default());
    s.gateway = Some(GatewayTruth {
        payments: vec![
            payment(1, GatewayState::Completed, Some(1)),
            payment(2, GatewayState::Completed, Some(2)),
        ],
        grants_in_window: None,
    });
    s.hold_ms = HOLD_MS;
    s
}

fn failed(s: &SaleSnapshot) -> Vec<String> {
    audit(s)
        .into_iter()
        .filter(|v| !v.passed)
        .map(|v| v.name)
        .collect()
}

fn names(vs: &[Verdict]) -> Vec<&str> {
    vs.iter().map(|v| v.name.as_str()).collect()
}

#[test]
fn the_clean_snapshots_pass_every_invariant_that_applies() {
    let all = audit(&live());
    assert!(failed(&live()).is_empty(), "{all:#?}");
    assert_eq!(
        names(&all),
        [
            ADMISSIONS_WITHIN_CAP,
            QUEUE_DRAINED,
            LEDGER_MATCHES_RECORDS,
            ONE_BOOKING_PER_CANDIDATE,
            NO_THROTTLING,
            DEAD_LETTER_QUEUE_EMPTY,
            ONE_EMAIL_PER_PAID,
            STATUS_MATCHES_COUNTERS,
            STATUS_NEVER_SHOWED_FULL_LEVEL_OPEN,
            STATUS_WRITES_IN_READ_ORDER,
            PAID_IN_BACK_OFFICE,
            GATEWAY_COMPLETED_HAVE_PAID_BOOKING,
            PAID_BOOKINGS_COMPLETED_AT_GATEWAY,
            ONE_TOKEN_GRANT,
            NO_PAYMENT_EXECUTED_AFTER_DEADLINE,
        ]
    );
    let all = audit(&settled());
    assert!(failed(&settled()).is_empty(), "{all:#?}");
    assert_eq!(
        names(&all),
        [
            ADMISSIONS_WITHIN_CAP,
            COUNT_IS_PAID,
            LEDGER_MATCHES_RECORDS,
            ONE_BOOKING_PER_CANDIDATE,
            ONE_EMAIL_PER_PAID,
            STATUS_NEVER_SHOWED_FULL_LEVEL_OPEN,
            STATUS_WRITES_IN_READ_ORDER,
            GATEWAY_COMPLETED_HAVE_PAID_BOOKING,
            PAID_BOOKINGS_COMPLETED_AT_GATEWAY,
            NO_PAYMENT_EXECUTED_AFTER_DEADLINE,
            NO_PAID_AFTER_RELEASE,
            NO_HELD_LEFT,
        ]
    );
    assert!(audit(&SaleSnapshot::empty(sale())).iter().all(|v| v.passed));
}

#[test]
fn admissions_within_cap_counts_the_seats_over() {
    let mut s = live();
    s.levels[0].count = 5;
    let v = admissions_within_cap(&s);
    assert!(!v.passed);
    assert_eq!(v.figure, 2.0);
    assert!(v.detail.contains("gold: 5 of 3"), "{}", v.detail);
    s.levels[0].count = 3;
    assert!(admissions_within_cap(&s).passed, "at the cap is within it");
}

#[test]
fn count_is_paid_needs_each_level_to_count_its_paid_bookings() {
    assert!(count_is_paid(&settled()).passed);
    let mut s = settled();
    s.levels[0].count = 1;
    let v = count_is_paid(&s);
    assert!(!v.passed && v.detail.contains("counted 1, PAID 2"), "{v:?}");
    // a HELD record is not a PAID one
    let mut s = settled();
    s.records[1] = held(2);
    assert!(!count_is_paid(&s).passed);
    // only a settled sale is held to it
    assert!(!names(&audit(&live())).contains(&COUNT_IS_PAID));
}

#[test]
fn queue_drained_fails_on_any_message_left() {
    let mut s = live();
    s.queue = Some(QueueDepth {
        visible: 1,
        in_flight: 2,
    });
    let v = queue_drained(&s);
    assert!(!v.passed);
    assert_eq!(v.figure, 3.0);
    assert_eq!(failed(&s), [QUEUE_DRAINED]);
}

#[test]
fn ledger_matches_records_live_compares_counts_with_held_and_paid_records() {
    assert!(ledger_matches_records(&live()).passed);
    // a PAID record lost
    let mut s = live();
    s.records.remove(0);
    let v = ledger_matches_records(&s);
    assert!(!v.passed);
    assert_eq!(v.figure, 1.0);
    assert!(
        v.detail.contains("ledger 2, records 1 held + 0 paid"),
        "{}",
        v.detail
    );
    // a record in a level the ledger does not have
    let mut s = live();
    let mut other = held(3);
    other.level = Level::parse("silver").unwrap();
    s.records.push(other);
    assert!(!ledger_matches_records(&s).passed);
}

#[test]
fn ledger_matches_records_settled_compares_paid_marks_and_finds_seats_held() {
    assert!(ledger_matches_records(&settled()).passed);
    // a paid mark with no PAID record
    let mut s = settled();
    s.records.pop();
    assert!(!ledger_matches_records(&s).passed);
    // a PAID record with no paid mark
    let mut s = settled();
    s.ledger_marks.as_mut().unwrap().remove(&c(2));
    let v = ledger_matches_records(&s);
    assert!(!v.passed && v.detail.contains("with no paid mark"), "{v:?}");
    // a paid mark of another payment
    let mut s = settled();
    s.ledger_marks
        .as_mut()
        .unwrap()
        .get_mut(&c(2))
        .unwrap()
        .paid = Some(p(9));
    assert!(!ledger_matches_records(&s).passed);
    // a seat still held
    let mut s = settled();
    s.ledger_marks.as_mut().unwrap().insert(
        c(3),
        LedgerMark {
            paid: None,
            hold: Some(held_hold(3)),
        },
    );
    let v = ledger_matches_records(&s);
    assert!(
        !v.passed && v.detail.contains("still holds a seat"),
        "{v:?}"
    );
}

#[test]
fn one_booking_per_candidate_finds_records_the_ledger_disowns() {
    assert!(one_booking_per_candidate(&live()).passed);
    // a record the ledger knows nothing of
    let mut s = live();
    s.records.push(held(3));
    let v = one_booking_per_candidate(&s);
    assert!(!v.passed && v.detail.contains("ledger None"), "{v:?}");
    // a record of another payment than the ledger's hold
    let mut s = live();
    s.records[1].payment_id = p(7);
    assert!(!one_booking_per_candidate(&s).passed);
    // a hold at another level
    let mut s = live();
    s.ledger_marks
        .as_mut()
        .unwrap()
        .get_mut(&c(2))
        .unwrap()
        .hold
        .as_mut()
        .unwrap()
        .level = Level::parse("silver").unwrap();
    assert!(!one_booking_per_candidate(&s).passed);
}

#[test]
fn one_booking_per_candidate_finds_candidates_paying_or_emailed_twice() {
    assert!(one_booking_per_candidate(&settled()).passed);
    // emailed for two payments
    let mut s = live();
    s.emails.push(Confirmation {
        payment_id: p(8),
        ..email(1)
    });
    let v = one_booking_per_candidate(&s);
    assert!(
        !v.passed && v.detail.contains("emailed for 2 payments"),
        "{v:?}"
    );
    // another sale's emails are not this sale's
    let mut s = live();
    s.emails.push(Confirmation {
        payment_id: p(8),
        sale: SaleId::parse("other").unwrap(),
        ..email(1)
    });
    assert!(one_booking_per_candidate(&s).passed);
    // completed twice at the gateway
    let mut s = settled();
    s.gateway
        .as_mut()
        .unwrap()
        .payments
        .push(payment(9, GatewayState::Completed, Some(1)));
    let v = one_booking_per_candidate(&s);
    assert!(!v.passed && v.detail.contains("paid 2 times"), "{v:?}");
}

#[test]
fn no_throttling_counts_reads_and_writes() {
    let mut s = live();
    s.throttles = Some(Throttles {
        reads: 1,
        writes: 2,
    });
    let v = no_throttling(&s);
    assert!(!v.passed);
    assert_eq!(v.figure, 3.0);
    assert_eq!(failed(&s), [NO_THROTTLING]);
}

#[test]
fn dead_letter_queue_empty_fails_on_a_dead_letter() {
    let mut s = live();
    s.dead_letters = Some(vec![("ab12".into(), "dedup".into())]);
    let v = dead_letter_queue_empty(&s);
    assert!(
        !v.passed && v.detail.contains("group ab12 dedup dedup"),
        "{v:?}"
    );
    assert_eq!(failed(&s), [DEAD_LETTER_QUEUE_EMPTY]);
}

#[test]
fn one_email_per_paid_fails_on_none_two_or_one_for_an_unpaid_booking() {
    assert!(one_email_per_paid(&live()).passed);
    let mut s = live();
    s.emails.clear();
    assert!(!one_email_per_paid(&s).passed, "none");
    let mut s = live();
    s.emails.push(email(1));
    assert_eq!(failed(&s), [ONE_EMAIL_PER_PAID], "two");
    let mut s = live();
    s.emails.push(email(2));
    let v = one_email_per_paid(&s);
    assert!(!v.passed && v.detail.contains("no PAID record"), "{v:?}");
}

#[test]
fn one_email_per_paid_allows_a_repeat_only_per_send_the_sweep_recovered() {
    let recovered = Confirmation {
        recovered: true,
        ..email(1)
    };
    // the winner's send (outcome unknown) and the sweep's: allowed
    let mut s = live();
    s.emails.push(recovered.clone());
    let v = one_email_per_paid(&s);
    assert!(v.passed, "{v:?}");
    assert!(
        v.detail.contains("1 recovered") && v.detail.contains("1 repeats"),
        "{v:?}"
    );
    // the sweep's send alone: one email
    let mut s = live();
    s.emails.retain(|e| e.payment_id != recovered.payment_id);
    s.emails.push(recovered.clone());
    assert!(one_email_per_paid(&s).passed);
    // two recovered sends, each after an unknown outcome: two repeats
    let mut s = live();
    s.emails.push(recovered.clone());
    s.emails.push(recovered.clone());
    let v = one_email_per_paid(&s);
    assert!(v.passed && v.detail.contains("2 repeats"), "{v:?}");
    // a repeat that is not the sweep's is no unknown outcome's repeat
    let mut s = live();
    s.emails.push(recovered);
    s.emails.push(email(1));
    let v = one_email_per_paid(&s);
    assert!(
        !v.passed && v.detail.contains("3 emails (1 recovered)"),
        "{v:?}"
    );
}

#[test]
fn status_matches_counters_compares_the_document_with_the_ledger() {
    assert!(status_matches_counters(&live()).passed);
    for doc in [
        None,
        Some(document(true, 1, T0)),
        Some(document(false, 2, T0)),
        Some(StatusDocument {
            sale: SaleId::parse("other").unwrap(),
            ..document(true, 2, T0)
        }),
    ] {
        let mut s = live();
        s.status = Some(CurrentStatus { document: doc });
        assert_eq!(failed(&s), [STATUS_MATCHES_COUNTERS], "{:?}", s.status);
    }
}

#[test]
fn status_never_showed_full_level_open_fails_on_a_full_level_open_or_garbage() {
    let mut s = live();
    let mut forged = document(true, 3, T0 + 3_000);
    forged.levels[0].state = booking::status::LevelState::Open;
    s.landed
        .as_mut()
        .unwrap()
        .documents
        .push((T0 + 3_000, forged));
    assert_eq!(failed(&s), [STATUS_NEVER_SHOWED_FULL_LEVEL_OPEN]);
    let mut s = live();
    s.landed.as_mut().unwrap().unreadable_at_ms.push(T0 + 5);
    let v = status_never_showed_full_level_open(&s);
    assert!(!v.passed && v.detail.contains("unreadable"), "{v:?}");
}

#[test]
fn status_writes_in_read_order_fails_when_an_older_read_lands_last() {
    let mut s = live();
    s.landed
        .as_mut()
        .unwrap()
        .documents
        .push((T0 + 3_000, document(true, 1, T0 + 500)));
    assert_eq!(failed(&s), [STATUS_WRITES_IN_READ_ORDER]);
}

#[test]
fn paid_in_back_office_needs_every_paid_record_and_nothing_else() {
    assert!(paid_in_back_office(&live()).passed);
    let mut s = live();
    s.back_office = Some(Ok(Vec::new()));
    assert_eq!(failed(&s), [PAID_IN_BACK_OFFICE], "missing");
    let mut s = live();
    s.back_office = Some(Ok(vec![row(1), row(9)]));
    assert!(!paid_in_back_office(&s).passed, "a stray row");
    let mut s = live();
    s.back_office = Some(Ok(vec![BackOfficeRow {
        email_sent: true,
        ..row(1)
    }]));
    assert!(!paid_in_back_office(&s).passed, "the email flag too");
    let mut s = live();
    s.back_office = Some(Err("back office unreachable: refused".into()));
    let v = paid_in_back_office(&s);
    assert!(!v.passed && v.detail.contains("unreachable"), "{v:?}");
}

#[test]
fn gateway_completed_have_paid_booking_finds_lost_paid_bookings() {
    // live: completed, the booking only HELD
    let mut s = live();
    s.gateway.as_mut().unwrap().payments[1].state = GatewayState::Completed;
    let v = gateway_completed_have_paid_booking(&s);
    assert!(
        !v.passed && v.detail.contains("P2: completed, no PAID booking"),
        "{v:?}"
    );
    // settled: the payer is named too
    let mut s = settled();
    s.records.pop();
    let v = gateway_completed_have_paid_booking(&s);
    assert!(
        !v.passed && v.detail.contains("completed, not PAID"),
        "{v:?}"
    );
    let mut s = settled();
    s.gateway.as_mut().unwrap().payments[1].candidate = Some(c(5));
    assert!(
        !gateway_completed_have_paid_booking(&s).passed,
        "PAID for another"
    );
}

#[test]
fn paid_bookings_completed_at_gateway_finds_paid_without_money() {
    let mut s = live();
    s.gateway.as_mut().unwrap().payments[0].state = GatewayState::Authorized;
    let v = paid_bookings_completed_at_gateway(&s);
    assert!(
        !v.passed && v.detail.contains("P1: PAID, not completed"),
        "{v:?}"
    );
    let mut s = live();
    s.gateway.as_mut().unwrap().payments.clear();
    assert!(!paid_bookings_completed_at_gateway(&s).passed);
}

#[test]
fn one_token_grant_fails_on_a_second_grant_for_an_app_key() {
    let mut s = live();
    s.gateway
        .as_mut()
        .unwrap()
        .grants_in_window
        .as_mut()
        .unwrap()
        .insert("k".into(), 2);
    assert_eq!(failed(&s), [ONE_TOKEN_GRANT]);
    // a gateway that grants no tokens is not judged
    let mut s = live();
    s.gateway.as_mut().unwrap().grants_in_window = None;
    assert!(!names(&audit(&s)).contains(&ONE_TOKEN_GRANT));
}

#[test]
fn executes_after_the_deadline_are_found_with_or_without_a_record() {
    let executed = |n: u32, at: u64| GatewayPayment {
        executed_ms: Some(at),
        ..payment(n, GatewayState::Completed, None)
    };
    let deadline = T0 + HOLD_MS;
    let truth = GatewayTruth {
        payments: vec![
            // at the slack's edge
            executed(1, deadline + EXECUTE_STAMP_SLACK_MS),
            // late against its record
            executed(2, deadline + EXECUTE_STAMP_SLACK_MS + 1),
            // no record (released): held to created + hold
            executed(3, T0 + 5_000 + 1_000),
            // never executed
            payment(4, GatewayState::Initiated, None),
        ],
        grants_in_window: None,
    };
    let records = [paid(1), paid(2)];
    let late = executed_after_deadline(&truth, &records, 5_000);
    assert_eq!(late.len(), 2, "{late:?}");
    assert!(late[0].starts_with("P2: executed 251 ms"), "{late:?}");
    assert!(late[1].starts_with("P3: executed 1000 ms"), "{late:?}");
    // a longer hold makes the released one on time
    assert_eq!(executed_after_deadline(&truth, &records, 6_000).len(), 1);

    let mut s = live();
    s.gateway.as_mut().unwrap().payments[0].executed_ms = Some(deadline + 10_000);
    assert_eq!(failed(&s), [NO_PAYMENT_EXECUTED_AFTER_DEADLINE]);
}

#[test]
fn no_paid_after_release_fails_on_its_alert_only() {
    let alert = |kind: &str| Alert {
        kind: kind.into(),
        detail: "x".into(),
        candidate: None,
        payment_id: None,
    };
    let mut s = settled();
    s.alerts = Some(vec![alert("extensions_exhausted")]);
    assert!(no_paid_after_release(&s).passed);
    s.alerts = Some(vec![alert("paid_after_release")]);
    assert_eq!(failed(&s), [NO_PAID_AFTER_RELEASE]);
}

#[test]
fn no_held_left_fails_on_a_held_record() {
    let mut s = settled();
    s.records.push(held(3));
    let v = no_held_left(&s);
    assert!(!v.passed && v.detail.contains("HELD P3"), "{v:?}");
    assert!(!names(&audit(&live())).contains(&NO_HELD_LEFT));
}

#[test]
fn the_sim_names_are_of_invariants_the_audit_runs() {
    let ran = audit(&settled());
    for (audit_name, _) in SIM_NAMES {
        assert!(names(&ran).contains(&audit_name), "{audit_name}");
    }
}
