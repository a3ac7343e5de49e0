//! The consumer's cases one by one, through the real handler, the memory store and the terminal
//! simulator over HTTP on loopback.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_lambda_events::event::sqs::SqsEvent;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation, RecordOutcome};
use gate::manual::{ManualReason, MemoryManualQueue};
use gate::record::{record_pk, RecordStatus};
use gate::store::memory::MemoryStore;
use gate::store::IdempotencyStore;
use serde_json::json;
use sim::terminal::{self, TerminalConfig, TerminalCore};
use truck_slot::keys::{event_key_of, operation_key, SLOT_CLAIM};
use truck_slot::terminal::{
    CallOutcome, HttpTerminal, HttpTerminalConfig, LookupOutcome, SlotTerminal,
};

/// 2026-06-01T06:00:00Z, before every window used here.
const T0: i64 = 1_780_293_600_000;
const INTEGRATION: &str = "test";

/// Records every claim the gate sends: (Idempotency-Key, body bytes).
struct Recording {
    inner: HttpTerminal,
    claims: Mutex<Vec<(String, Vec<u8>)>>,
}

#[async_trait]
impl SlotTerminal for Recording {
    async fn claim(&self, op_key: &str, request: &[u8]) -> CallOutcome {
        self.claims
            .lock()
            .unwrap()
            .push((op_key.to_string(), request.to_vec()));
        self.inner.claim(op_key, request).await
    }
    async fn lookup(&self, op_key: &str, request: &[u8]) -> LookupOutcome {
        self.inner.lookup(op_key, request).await
    }
}

struct World {
    gate: Gate,
    store: Arc<MemoryStore>,
    manual: Arc<MemoryManualQueue>,
    clock: Arc<ManualClock>,
    core: Arc<TerminalCore>,
    recording: Arc<Recording>,
}

async fn world_with(terminal_config: TerminalConfig, supports_key: bool) -> World {
    let clock = Arc::new(ManualClock::new(T0));
    let core = TerminalCore::new(terminal_config, clock.clone() as Arc<dyn Clock>);
    let (addr, _server) = terminal::spawn(core.clone()).await.unwrap();
    let http = HttpTerminal::new(HttpTerminalConfig::new(format!("http://{addr}"))).unwrap();
    let recording = Arc::new(Recording {
        inner: http,
        claims: Mutex::new(Vec::new()),
    });
    let store = Arc::new(MemoryStore::new());
    let manual = Arc::new(MemoryManualQueue::new());
    let mut config = GateConfig::new(INTEGRATION);
    config.server_supports_idempotency_key = supports_key;
    let gate = Gate {
        config,
        store: store.clone(),
        integration: Arc::new(truck_slot::TruckSlot::new(
            recording.clone(),
            vec!["ECT-DELTA".to_string()],
        )),
        manual: manual.clone(),
        clock: clock.clone(),
    };
    World {
        gate,
        store,
        manual,
        clock,
        core,
        recording,
    }
}

async fn world() -> World {
    world_with(TerminalConfig::default(), true).await
}

fn body(id: &str, container: &str) -> String {
    json!({
        "notificationId": id,
        "equipment_number": container,
        "preferred_window": {"start": "2026-06-01T08:00:00Z", "end": "2026-06-01T10:00:00Z"},
        "terminal": "ECT-DELTA",
        "pin": "RLS-104233",
        "gross_mass_kg": 25000
    })
    .to_string()
}

fn event(records: &[(&str, &str)]) -> SqsEvent {
    gate_testkit::sqs_event(records)
}

fn invocation(w: &World, id: &str) -> Invocation {
    Invocation {
        request_id: id.into(),
        deadline_ms: w.clock.now_ms() + 30_000,
    }
}

fn pk(id: &str, container: &str) -> String {
    record_pk(INTEGRATION, &event_key_of(id, container))
}

fn failures(report: &gate::consumer::BatchReport) -> Vec<String> {
    report
        .response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

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
async fn a_503_is_a_batch_item_failure_and_the_redelivery_sends_the_same_key_and_bytes() {
    let w = world().await;
    w.core.fail_next_posts(1);
    let b = body("N-1", "CSQU3054383");
    let first = w
        .gate
        .handle_batch(event(&[("m1", &b)]), &invocation(&w, "inv-1"))
        .await;
    assert_eq!(failures(&first), vec!["m1".to_string()]);
    assert!(matches!(first.records[0].outcome, RecordOutcome::Retry(_)));
    let record = w
        .store
        .get(&pk("N-1", "CSQU3054383"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, RecordStatus::InFlight);
    assert!(!record.lease_is_live(w.clock.now_ms()), "lease released");
    assert_eq!(w.core.slots_issued(), 0);
    // SQS redelivers after the visibility timeout.
    w.clock.advance_ms(180_000);
    let second = w
        .gate
        .handle_batch(event(&[("m1", &b)]), &invocation(&w, "inv-2"))
        .await;
    assert!(failures(&second).is_empty());
    assert!(matches!(
        second.records[0].outcome,
        RecordOutcome::Committed { .. }
    ));
    let claims = w.recording.claims.lock().unwrap().clone();
    assert_eq!(claims.len(), 2);
    assert_eq!(claims[0].0, claims[1].0, "same Idempotency-Key");
    assert_eq!(claims[0].1, claims[1].1, "byte-identical body");
    assert_eq!(w.core.slots_issued(), 1);
    assert_eq!(w.store.business_rows().len(), 1);
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

#[tokio::test]
async fn a_lost_response_is_retried_and_commits_the_slot_made_the_first_time() {
    let w = world().await;
    w.core.lose_next_responses(1);
    let b = body("N-1", "CSQU3054383");
    let first = w
        .gate
        .handle_batch(event(&[("m1", &b)]), &invocation(&w, "inv-1"))
        .await;
    assert_eq!(failures(&first), vec!["m1".to_string()]);
    assert_eq!(w.core.slots_issued(), 1, "the slot was made");
    w.clock.advance_ms(180_000);
    let second = w
        .gate
        .handle_batch(event(&[("m1", &b)]), &invocation(&w, "inv-2"))
        .await;
    let slot = w.core.slots()[0].effect_id.clone();
    assert_eq!(
        second.records[0].outcome,
        RecordOutcome::Committed { effect_id: slot }
    );
    assert_eq!(w.core.slots_issued(), 1);
}

/// A terminal whose claim takes so long that the lease expires, another holder takes the record
/// over and finishes it as `manual` (as the reconciler does past the key's retention), and then
/// answers with a slot.
struct FinishedMeanwhile {
    store: Arc<MemoryStore>,
    clock: Arc<ManualClock>,
    pk: String,
    owner: String,
}

#[async_trait]
impl SlotTerminal for FinishedMeanwhile {
    async fn claim(&self, _op_key: &str, _request: &[u8]) -> CallOutcome {
        self.clock.advance_ms(10 * 60_000);
        let now = self.clock.now_ms();
        let taken = self
            .store
            .take_over(&self.pk, &self.owner, "rec-1", now + 60_000, now)
            .await
            .unwrap();
        assert!(matches!(taken, gate::store::TakeOver::Taken(_)));
        let finished = self
            .store
            .finish(
                &self.pk,
                "rec-1",
                RecordStatus::Manual,
                "past the terminal's key retention",
                b"{}",
                gate::store::FinishGuard::LeaseAndNoEffect,
                now,
            )
            .await
            .unwrap();
        assert_eq!(finished, gate::store::FinishOutcome::Finished);
        assert!(self.store.routed(&self.pk, "rec-1", now).await.unwrap());
        CallOutcome::Done(truck_slot::terminal::Effect {
            effect_id: "ECT-LATE-0001".into(),
            subject: Some("CSQU3054383".into()),
        })
    }
    async fn lookup(&self, _op_key: &str, _request: &[u8]) -> LookupOutcome {
        LookupOutcome::NotFound
    }
}

/// A slot that arrives for a record another holder already finished as `manual` is not
/// acknowledged silently: nothing would book it. Its id is kept in `effect_ids`, no TMS booking is
/// written, and a person gets it once (reason `unbooked_slot`), also when the message comes back.
#[tokio::test]
async fn a_slot_for_a_record_finished_meanwhile_goes_to_a_person_once() {
    let mut w = world().await;
    let pk = pk("PCS-LATE", "CSQU3054383");
    w.gate.integration = Arc::new(truck_slot::TruckSlot::new(
        Arc::new(FinishedMeanwhile {
            store: w.store.clone(),
            clock: w.clock.clone(),
            pk: pk.clone(),
            // The lease token of the batch's first record.
            owner: "inv-1#0".into(),
        }),
        vec!["ECT-DELTA".to_string()],
    ));
    let b = body("PCS-LATE", "CSQU3054383");
    let report = w
        .gate
        .handle_batch(event(&[("m-1", &b)]), &invocation(&w, "inv-1"))
        .await;
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Manual(ManualReason::UnrecordedEffect)
    );
    assert!(failures(&report).is_empty());
    let record = w.store.get(&pk).await.unwrap().unwrap();
    assert_eq!(record.status, RecordStatus::Manual);
    assert!(record.effect_ids.contains("ECT-LATE-0001"));
    assert_eq!(w.store.business_row(&record.event_key).await.unwrap(), None);
    let items = w.manual.items();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].reason, ManualReason::UnrecordedEffect);
    assert!(
        items[0].detail.contains("ECT-LATE-0001"),
        "{}",
        items[0].detail
    );
    assert_eq!(
        items[0].event_key.as_deref(),
        Some(record.event_key.as_str())
    );

    // The message comes back: a duplicate of the finished record, no second item.
    let again = w
        .gate
        .handle_batch(event(&[("m-1", &b)]), &invocation(&w, "inv-2"))
        .await;
    assert_eq!(
        again.records[0].outcome,
        RecordOutcome::Duplicate(RecordStatus::Manual)
    );
    assert_eq!(w.manual.items().len(), 1);
}
