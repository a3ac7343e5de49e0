//! What goes to a person instead of the terminal: a mismatch, a poison body, a terminal without
//! key support, the terminal's own key mismatch, a window that already ended.

use gate::consumer::RecordOutcome;
use gate::manual::ManualReason;
use gate::record::RecordStatus;
use gate::store::IdempotencyStore;
use sim::terminal::TerminalConfig;
use truck_slot::keys::{event_key_of, operation_key, SLOT_CLAIM};

use super::world::{body, event, failures, invocation, pk, world, world_with, T0};

#[tokio::test]
async fn a_mismatch_is_routed_to_manual_and_never_claimed() {
    let w = world().await;
    let b = body("N-1", "CSQU3054383");
    w.gate
        .handle_batch(event(&[("m1", &b)]), &invocation(&w, "inv-1"))
        .await;
    let other = b.replace("10:00:00Z", "11:00:00Z");
    let report = w
        .gate
        .handle_batch(event(&[("m2", &other)]), &invocation(&w, "inv-2"))
        .await;
    assert!(failures(&report).is_empty());
    assert_eq!(report.records[0].outcome, RecordOutcome::Mismatch);
    let items = w.manual.items();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].reason, ManualReason::Mismatch);
    assert_eq!(items[0].original_body, other);
    assert_eq!(items[0].message_id, "m2");
    assert_eq!(w.core.slots_issued(), 1);
    let record = w
        .store
        .get(&pk("N-1", "CSQU3054383"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, RecordStatus::Committed);
}

#[tokio::test]
async fn a_poison_body_between_two_valid_ones_is_routed_and_not_retried() {
    let w = world().await;
    let a = body("N-1", "CSQU3054383");
    let c = body("N-2", "MWCU6059784");
    let report = w
        .gate
        .handle_batch(
            event(&[("m1", &a), ("m2", "{bad"), ("m3", &c)]),
            &invocation(&w, "inv-1"),
        )
        .await;
    assert!(failures(&report).is_empty(), "nothing is retried");
    assert!(matches!(
        report.records[0].outcome,
        RecordOutcome::Committed { .. }
    ));
    assert!(matches!(
        report.records[1].outcome,
        RecordOutcome::Rejected(ref r) if r.code == "not_json"
    ));
    assert!(matches!(
        report.records[2].outcome,
        RecordOutcome::Committed { .. }
    ));
    let items = w.manual.items();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].reason, ManualReason::Rejected);
    assert!(
        items[0].detail.starts_with("not_json"),
        "{}",
        items[0].detail
    );
    assert_eq!(items[0].original_body, "{bad");
    assert_eq!(items[0].message_id, "m2");
    assert_eq!(w.core.slots_issued(), 2);
    assert_eq!(w.store.business_rows().len(), 2);
}

#[tokio::test]
async fn a_terminal_without_key_support_routes_to_manual() {
    let w = world_with(
        TerminalConfig {
            supports_idempotency_key: false,
            ..TerminalConfig::default()
        },
        false,
    )
    .await;
    let b = body("N-1", "CSQU3054383");
    let report = w
        .gate
        .handle_batch(event(&[("m1", &b)]), &invocation(&w, "inv-1"))
        .await;
    assert!(failures(&report).is_empty());
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Manual(ManualReason::NoIdempotencySupport)
    );
    assert_eq!(w.core.slots_issued(), 0, "never claimed");
    let record = w
        .store
        .get(&pk("N-1", "CSQU3054383"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, RecordStatus::Manual);
    let items = w.manual.items();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].reason, ManualReason::NoIdempotencySupport);
    assert_eq!(
        items[0].event_key.as_deref(),
        Some(event_key_of("N-1", "CSQU3054383").as_str())
    );
    // A redelivery is a duplicate of the manual record, not a second routing.
    let again = w
        .gate
        .handle_batch(event(&[("m2", &b)]), &invocation(&w, "inv-2"))
        .await;
    assert_eq!(
        again.records[0].outcome,
        RecordOutcome::Duplicate(RecordStatus::Manual)
    );
    assert_eq!(w.manual.items().len(), 1);
}

#[tokio::test]
async fn a_terminal_key_mismatch_fails_the_record_and_routes_it() {
    let w = world().await;
    let b = body("N-1", "CSQU3054383");
    // Someone used our operation key with another body first.
    let key = operation_key(&event_key_of("N-1", "CSQU3054383"), SLOT_CLAIM);
    let other = br#"{"equipment_number":"CSQU3054383","pin":"X","window_end":"2026-06-01T12:00:00Z","window_start":"2026-06-01T11:00:00Z"}"#;
    w.core
        .handle("POST", "/slots", None, Some(&key), other)
        .await;
    let report = w
        .gate
        .handle_batch(event(&[("m1", &b)]), &invocation(&w, "inv-1"))
        .await;
    assert!(failures(&report).is_empty());
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Manual(ManualReason::ServerKeyMismatch)
    );
    let record = w
        .store
        .get(&pk("N-1", "CSQU3054383"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, RecordStatus::Failed);
    assert!(record.error.unwrap().contains("key reused"));
    assert_eq!(w.store.business_rows().len(), 0);
}

#[tokio::test]
async fn a_window_that_already_ended_is_routed_not_claimed() {
    let w = world().await;
    w.clock.set_ms(T0 + 24 * 3_600_000);
    let b = body("N-1", "CSQU3054383");
    let report = w
        .gate
        .handle_batch(event(&[("m1", &b)]), &invocation(&w, "inv-1"))
        .await;
    assert!(failures(&report).is_empty());
    assert_eq!(w.manual.items()[0].reason, ManualReason::EventEnded);
    assert_eq!(w.core.slots_issued(), 0);
}
