//! A delivery's way through the gate: a new event, its duplicates (committed or in flight), an
//! expired lease taken over, the same message twice in one batch, and the deadline.

use gate::clock::Clock;
use gate::consumer::{Invocation, RecordOutcome};
use gate::record::RecordStatus;
use gate::store::{BusinessRows, IdempotencyStore};
use truck_slot::keys::{event_key_of, operation_key, SLOT_CLAIM};
use truck_slot::terminal::CallOutcome;

use super::world::{body, event, failures, invocation, pk, world, T0};

#[tokio::test]
async fn a_new_event_is_claimed_once_and_committed_with_its_booking() {
    let w = world().await;
    let b = body("N-1", "CSQU3054383");
    let report = w
        .gate
        .handle_batch(event(&[("m1", &b)]), &invocation(&w, "inv-1"))
        .await;
    assert!(failures(&report).is_empty());
    let slot = w.core.slots()[0].effect_id.clone();
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Committed {
            effect_id: slot.clone(),
        }
    );
    let record = w
        .store
        .get(&pk("N-1", "CSQU3054383"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, RecordStatus::Committed);
    assert_eq!(record.effect_id.as_deref(), Some(slot.as_str()));
    assert_eq!(record.inflight_shard, None);
    assert_eq!(record.lease_until_ms, None);
    // The committer stays as the last holder (the batch's first record's lease token), and the
    // claim request with its PIN is gone.
    assert_eq!(record.lease_owner.as_deref(), Some("inv-1#0"));
    assert!(record.request.is_empty());
    let booking = w
        .store
        .business_row(&record.event_key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(booking.effect_id, slot);
    assert_eq!(booking.label("container"), "CSQU3054383");
    // The key the terminal saw is the operation key of the event key.
    let claims = w.recording.claims.lock().unwrap().clone();
    assert_eq!(claims.len(), 1);
    assert_eq!(
        claims[0].0,
        operation_key(&event_key_of("N-1", "CSQU3054383"), SLOT_CLAIM)
    );
    assert_eq!(w.core.slots_issued(), 1);
    assert_eq!(
        w.core.slots()[0].idempotency_key.as_deref(),
        Some(claims[0].0.as_str())
    );
}

#[tokio::test]
async fn a_duplicate_of_a_committed_record_is_acknowledged_without_a_claim() {
    let w = world().await;
    let b = body("N-1", "CSQU3054383");
    w.gate
        .handle_batch(event(&[("m1", &b)]), &invocation(&w, "inv-1"))
        .await;
    w.clock.advance_ms(60_000);
    let report = w
        .gate
        .handle_batch(event(&[("m2", &b)]), &invocation(&w, "inv-2"))
        .await;
    assert!(failures(&report).is_empty());
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Duplicate(RecordStatus::Committed)
    );
    assert_eq!(w.recording.claims.lock().unwrap().len(), 1);
    assert_eq!(w.core.slots_issued(), 1);
    assert_eq!(w.store.business_rows().len(), 1);
}

#[tokio::test]
async fn a_duplicate_while_in_flight_with_a_live_lease_is_acknowledged() {
    let w = world().await;
    let b = body("N-1", "CSQU3054383");
    // Another worker reserved it and is still working on it (slow, or dead with a live lease).
    let n = truck_slot::notification::parse_notification(&b, T0, &["ECT-DELTA".into()]).unwrap();
    let keys = truck_slot::derive_keys(&n).unwrap();
    let other = Invocation {
        request_id: "inv-other".into(),
        deadline_ms: T0 + 20_000,
    };
    let record =
        w.gate
            .config
            .new_record(&truck_slot::event(&n).expect("event"), &keys, &other, T0);
    w.store.reserve(&record, T0).await.unwrap();
    w.clock.advance_ms(5_000);
    let report = w
        .gate
        .handle_batch(event(&[("m2", &b)]), &invocation(&w, "inv-2"))
        .await;
    assert!(failures(&report).is_empty());
    assert_eq!(report.records[0].outcome, RecordOutcome::DuplicateInFlight);
    assert_eq!(w.recording.claims.lock().unwrap().len(), 0, "no claim");
    let after = w
        .store
        .get(&pk("N-1", "CSQU3054383"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.lease_owner.as_deref(), Some("inv-other"));
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_and_resumed_from_the_stored_request() {
    let w = world().await;
    let b = body("N-1", "CSQU3054383");
    // A worker reserved and claimed, then died before the commit.
    let keys = {
        let n =
            truck_slot::notification::parse_notification(&b, T0, &["ECT-DELTA".into()]).unwrap();
        truck_slot::derive_keys(&n).unwrap()
    };
    let n = truck_slot::notification::parse_notification(&b, T0, &["ECT-DELTA".into()]).unwrap();
    let dead = Invocation {
        request_id: "inv-dead".into(),
        deadline_ms: T0 + 30_000,
    };
    let record = w
        .gate
        .config
        .new_record(&truck_slot::event(&n).expect("event"), &keys, &dead, T0);
    w.store.reserve(&record, T0).await.unwrap();
    let first = w
        .gate
        .integration
        .call(&gate::Held::for_tests(&record))
        .await;
    let CallOutcome::Done(first_slot) = first else {
        panic!("claim failed: {first:?}")
    };
    // The message comes back after the visibility timeout, past the lease.
    w.clock.advance_ms(180_000);
    let report = w
        .gate
        .handle_batch(event(&[("m1", &b)]), &invocation(&w, "inv-2"))
        .await;
    assert!(failures(&report).is_empty());
    assert!(report.records[0].took_over);
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Committed {
            effect_id: first_slot.effect_id.clone(),
        }
    );
    // The same key and the same bytes went out twice; the terminal made one slot.
    let claims = w.recording.claims.lock().unwrap().clone();
    assert_eq!(claims.len(), 2);
    assert_eq!(claims[0], claims[1]);
    assert_eq!(w.core.slots_issued(), 1);
    assert_eq!(w.store.business_rows().len(), 1);
}

#[tokio::test]
async fn the_same_message_id_twice_in_one_batch_makes_one_slot() {
    let w = world().await;
    let b = body("N-1", "CSQU3054383");
    let report = w
        .gate
        .handle_batch(event(&[("m1", &b), ("m1", &b)]), &invocation(&w, "inv-1"))
        .await;
    assert!(failures(&report).is_empty());
    let committed = report
        .records
        .iter()
        .filter(|r| matches!(r.outcome, RecordOutcome::Committed { .. }))
        .count();
    assert_eq!(committed, 1);
    assert_eq!(
        report
            .records
            .iter()
            .filter(|r| r.outcome.is_duplicate())
            .count(),
        1
    );
    assert_eq!(w.core.slots_issued(), 1);
    assert_eq!(w.store.business_rows().len(), 1);
}

#[tokio::test]
async fn no_record_is_started_near_the_deadline() {
    let w = world().await;
    let a = body("N-1", "CSQU3054383");
    let c = body("N-2", "MWCU6059784");
    let near = Invocation {
        request_id: "inv-1".into(),
        deadline_ms: w.clock.now_ms() + 5_000,
    };
    let report = w
        .gate
        .handle_batch(event(&[("m1", &a), ("m2", &c)]), &near)
        .await;
    assert_eq!(failures(&report), vec!["m1".to_string(), "m2".to_string()]);
    assert!(report
        .records
        .iter()
        .all(|r| r.outcome == RecordOutcome::NotStarted));
    assert_eq!(w.core.slots_issued(), 0);
    assert!(w.store.records().is_empty());
}
