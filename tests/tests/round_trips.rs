//! Round trips counted, not estimated: every DynamoDB request the gate sends on the consumer path,
//! recorded by an SDK interceptor ([`CallRecorder`], retries included) against moto; the terminal
//! is an in-process fake. The reconciler's path is in module `reconciler`; PostgreSQL's in module
//! `postgres`: a new event is **2** round trips (reserve with guard, commit), a duplicate **1**.
//!
//! | path | case | DynamoDB requests |
//! | --- | --- | --- |
//! | consumer (`Gate::handle_batch`) | new event | `PutItem` (reserve), `PutItem` (the natural key's guard, before the call), `TransactWriteItems` (commit: record and business row) |
//! | consumer, an integration with no natural key (payments, job-client) | new event | `PutItem` (reserve), `TransactWriteItems` (commit): no guard |
//! | consumer | duplicate of a finished event | `PutItem` (conflict, the old item comes back through `ALL_OLD`) |
//! | consumer | duplicate while the first is in flight (live lease) | `PutItem` |
//! | consumer | same key, other fingerprint (mismatch), first delivery | `PutItem` (conflict), `PutItem` + `UpdateItem` (its routing record: reserve, then `manual`; the manual queue is SQS) |
//! | consumer | the same mismatch delivered again | `PutItem` (conflict), `PutItem` (the routing record's conflict) |
//! | consumer | a second event key for a natural key another holds (signal 4) | `PutItem` (reserve), `PutItem` (the guard, refused with its holder), `UpdateItem` x 2 (`manual`, then routed; the manual queue is SQS); never called |
//! | consumer | redelivery of a stranded record (expired lease) | `PutItem`, `UpdateItem` (take-over), `PutItem` (its own guard again), `TransactWriteItems` |
//!
//! Run with `scripts/with-postgres.sh scripts/with-moto.sh cargo test -p integration-tests --test
//! round_trips`.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation, RecordOutcome};
use gate::manual::{ManualReason, MemoryManualQueue};
use gate::reconciler::ReconcilerConfig;
use gate::record::{inflight_shard, IdempotencyRecord, RecordStatus};
use gate::store::{
    CommitOutcome, IdempotencyStore, InFlightIndex, InFlightPage, Reservation, StoreError, TakeOver,
};
use gate_dynamo::DynamoStore;
use gate_testkit::{AfterRead, RacedIndex};
use integration_tests::{
    dynamo_client, dynamo_client_with, fresh_store_with, sqs_event, CallRecorder,
};
use truck_slot::derive_keys;
use truck_slot::notification::parse_notification;
use truck_slot::terminal::{CallOutcome, Effect, LookupOutcome, SlotTerminal};

// The stores bench's counting proxy, compiled in here: one reading of the wire for the bench's
// figures and this test's counts. (The bench's own unit tests of it run here too.)
#[allow(dead_code)]
#[path = "../../bench/src/pg_wire.rs"]
mod pg_wire;

#[path = "round_trips/postgres.rs"]
mod postgres;

/// 2026-06-01T06:00:00Z; the windows below are 08:00-10:00 the same day.
const T0: i64 = 1_780_293_600_000;

/// A terminal that issues one slot per operation key (and finds it again on lookup), in process:
/// no DynamoDB calls of its own.
#[derive(Default)]
struct KeyedTerminal {
    slots: std::sync::Mutex<BTreeMap<String, String>>,
}

impl KeyedTerminal {
    fn slot_for(&self, op_key: &str) -> Effect {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let n = slots.len() + 1;
        let effect_id = slots
            .entry(op_key.to_string())
            .or_insert_with(|| format!("ECTD-{n:06}"))
            .clone();
        Effect {
            effect_id,
            subject: None,
        }
    }
}

#[async_trait]
impl SlotTerminal for KeyedTerminal {
    async fn claim(&self, op_key: &str, _request: &[u8]) -> CallOutcome {
        CallOutcome::Done(self.slot_for(op_key))
    }

    async fn lookup(&self, op_key: &str, _request: &[u8]) -> LookupOutcome {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        match slots.get(op_key) {
            Some(effect_id) => LookupOutcome::Found(Effect {
                effect_id: effect_id.clone(),
                subject: None,
            }),
            None => LookupOutcome::NotFound,
        }
    }
}

/// The world of one test: a gate over a `DynamoStore` whose client records its requests, and a
/// second, unrecorded store on the same tables ("someone else").
struct World {
    gate: Gate,
    /// The read side of the gate's table (what the reconciler pages).
    index: Arc<dyn InFlightIndex>,
    recorder: CallRecorder,
    clock: Arc<ManualClock>,
    other: DynamoStore,
}

impl World {
    async fn new(name: &str) -> Self {
        let recorder = CallRecorder::new();
        let store = fresh_store_with(dynamo_client_with(recorder.clone()).await, name).await;
        let other = DynamoStore::new(
            dynamo_client().await,
            store.idempotency_table(),
            store.business_table(),
        );
        let clock = Arc::new(ManualClock::new(T0));
        let store = Arc::new(store);
        let gate = Gate {
            config: GateConfig::new(format!("rt-{name}")),
            store: store.clone(),
            integration: Arc::new(truck_slot::TruckSlot::new(
                Arc::new(KeyedTerminal::default()),
                vec!["ECT-DELTA".to_string()],
            )),
            manual: Arc::new(MemoryManualQueue::new()),
            clock: clock.clone(),
        };
        recorder.clear();
        Self {
            gate,
            index: store,
            recorder,
            clock,
            other,
        }
    }

    fn invocation(&self, request_id: &str) -> Invocation {
        Invocation {
            request_id: request_id.to_string(),
            deadline_ms: self.clock.now_ms() + 60_000,
        }
    }

    /// The record a consumer that died after its reserve would have left: `in_flight`, created
    /// `age_ms` ago, its lease expired `age_ms - 30 s` ago. Written through the unrecorded store.
    async fn strand(&self, id: &str, container: &str, age_ms: i64) -> IdempotencyRecord {
        let created = self.clock.now_ms() - age_ms;
        let n = parse_notification(&body(id, container, 4711), created, &["ECT-DELTA".into()])
            .expect("body parses");
        let keys = derive_keys(&n).expect("keys");
        let dead = Invocation {
            request_id: format!("dead-{id}"),
            deadline_ms: created,
        };
        let record = self.gate.config.new_record(
            &truck_slot::event(&n).expect("event"),
            &keys,
            &dead,
            created,
        );
        assert_eq!(
            self.other.reserve(&record, created).await.expect("reserve"),
            Reservation::Reserved
        );
        record
    }

    /// The operation names recorded since the last call, then forgets them.
    fn take_calls(&self) -> Vec<String> {
        let calls = self.recorder.calls();
        self.recorder.clear();
        calls
    }
}

fn body(id: &str, container: &str, pin: u32) -> String {
    serde_json::json!({
        "notificationId": id,
        "equipment_number": container,
        "preferred_window": {"start": "2026-06-01T08:00:00Z", "end": "2026-06-01T10:00:00Z"},
        "terminal": "ECT-DELTA",
        "pin": pin.to_string(),
    })
    .to_string()
}

fn count(calls: &[String], op: &str) -> usize {
    calls.iter().filter(|c| c.as_str() == op).count()
}

fn without_queries(calls: &[String]) -> Vec<String> {
    calls.iter().filter(|c| *c != "Query").cloned().collect()
}

/// Containers with valid ISO 6346 check digits.
const CONTAINERS: [&str; 4] = ["CSQU3054383", "MWCU6059784", "ABCD1234560", "MSCU1234566"];

/// A valid ISO 6346 equipment number of its own for event `n`: events for one container and one
/// window under different notificationIds are a natural-key collision (signal 4), which these
/// cost counts are not about.
fn container(n: usize) -> String {
    let first_ten = format!("GTEU{:06}", n % 1_000_000);
    let check = truck_slot::iso6346::check_digit(&first_ten).unwrap();
    format!("{first_ten}{check}")
}

#[tokio::test]
async fn consumer_new_event_costs_three_calls_and_a_duplicate_one() {
    let w = World::new("consumer").await;
    let inv = w.invocation("req-1");
    let b = body("PCS-1", CONTAINERS[0], 4711);

    let report = w.gate.handle_batch(sqs_event(&[("m1", &b)]), &inv).await;
    assert!(matches!(
        report.records[0].outcome,
        RecordOutcome::Committed { .. }
    ));
    assert_eq!(w.take_calls(), ["PutItem", "PutItem", "TransactWriteItems"]);

    // A redelivery (another SQS message id, the same body) of the committed event.
    let report = w.gate.handle_batch(sqs_event(&[("m2", &b)]), &inv).await;
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Duplicate(RecordStatus::Committed)
    );
    assert_eq!(w.take_calls(), ["PutItem"]);

    // The same event key with another business field (PIN): a mismatch. The conflict costs the
    // one reserve; routing it to a person exactly once costs its routing record (reserve, then
    // `manual` after the send). A redelivery of the same mismatch finds that record: two reserves.
    let other = body("PCS-1", CONTAINERS[0], 9999);
    let report = w
        .gate
        .handle_batch(sqs_event(&[("m3", &other)]), &inv)
        .await;
    assert_eq!(report.records[0].outcome, RecordOutcome::Mismatch);
    assert_eq!(w.take_calls(), ["PutItem", "PutItem", "UpdateItem"]);
    let report = w
        .gate
        .handle_batch(sqs_event(&[("m4", &other)]), &inv)
        .await;
    assert!(report.records[0].outcome.acknowledged(), "{report:?}");
    assert_eq!(w.take_calls(), ["PutItem", "PutItem"]);
}

/// Signal 4 costs one `PutItem` per new event (the guard, before the call); a collision costs
/// the refused guard (the other event key comes back with `ALL_OLD`, from DynamoDB and moto
/// alike; a `GetItem` reads it only if the answer carries none) and the routing to a person,
/// and no call: no second slot.
#[tokio::test]
async fn a_natural_key_collision_goes_to_a_person_without_a_call() {
    let w = World::new("collision").await;
    let inv = w.invocation("req-1");
    let first = body("PCS-NK-1", CONTAINERS[0], 4711);
    let report = w
        .gate
        .handle_batch(sqs_event(&[("m1", &first)]), &inv)
        .await;
    assert!(matches!(
        report.records[0].outcome,
        RecordOutcome::Committed { .. }
    ));
    assert_eq!(w.take_calls(), ["PutItem", "PutItem", "TransactWriteItems"]);
    // The same container and window under a new notificationId.
    let second = body("PCS-NK-2", CONTAINERS[0], 4711);
    let report = w
        .gate
        .handle_batch(sqs_event(&[("m2", &second)]), &inv)
        .await;
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Manual(ManualReason::NaturalKeyCollision)
    );
    let calls = w.take_calls();
    let without_get: Vec<&String> = calls.iter().filter(|c| *c != "GetItem").collect();
    assert_eq!(
        without_get,
        ["PutItem", "PutItem", "UpdateItem", "UpdateItem"],
        "{calls:?}"
    );
    assert!(count(&calls, "GetItem") <= 1, "{calls:?}");
    let second_key = truck_slot::keys::event_key_of("PCS-NK-2", CONTAINERS[0]);
    let pk = format!("rt-collision#{second_key}");
    let stored = w.other.get(&pk).await.expect("get").expect("record");
    assert_eq!(stored.status, RecordStatus::Manual);
    assert!(
        stored.effect_ids.is_empty(),
        "the second event key was called"
    );
    // Its redelivery is a duplicate of the manual record: one `PutItem`.
    let report = w
        .gate
        .handle_batch(sqs_event(&[("m3", &second)]), &inv)
        .await;
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Duplicate(RecordStatus::Manual)
    );
    assert_eq!(w.take_calls(), ["PutItem"]);
}

/// An integration with no natural key (as payments and job-client) has no guard: a new event is
/// the reserve and the commit, two requests, and a duplicate one.
struct Unguarded;

#[async_trait]
impl gate::Integration for Unguarded {
    fn operation(&self) -> &str {
        "charge"
    }

    fn parse(&self, body: &str, _now_ms: i64) -> gate::Parsed {
        gate::Parsed::Event(gate::Event {
            key_material: format!("invoice:{body}"),
            business_fields: serde_json::json!({ "invoice": body }),
            request: body.as_bytes().to_vec(),
            labels: Default::default(),
            ends_at_ms: None,
            subject: body.to_string(),
        })
    }

    async fn call(&self, held: &gate::Held<'_>) -> CallOutcome {
        CallOutcome::Done(Effect {
            effect_id: format!("ch_{}", &held.record().event_key[..8]),
            subject: None,
        })
    }
}

#[tokio::test]
async fn without_a_natural_key_a_new_event_costs_two_calls_and_a_duplicate_one() {
    let mut w = World::new("unguarded").await;
    w.gate.integration = Arc::new(Unguarded);
    let inv = w.invocation("req-1");
    let report = w
        .gate
        .handle_batch(sqs_event(&[("m1", "INV-1")]), &inv)
        .await;
    assert!(
        matches!(report.records[0].outcome, RecordOutcome::Committed { .. }),
        "{report:?}"
    );
    assert_eq!(w.take_calls(), ["PutItem", "TransactWriteItems"]);
    let report = w
        .gate
        .handle_batch(sqs_event(&[("m2", "INV-1")]), &inv)
        .await;
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Duplicate(RecordStatus::Committed)
    );
    assert_eq!(w.take_calls(), ["PutItem"]);
}

#[tokio::test]
async fn consumer_batch_of_ten_costs_three_calls_per_new_event_and_one_per_duplicate() {
    let w = World::new("batch").await;
    let inv = w.invocation("req-1");
    let bodies: Vec<String> = (0..8)
        .map(|i| body(&format!("PCS-B-{i}"), &container(i), 4711))
        .collect();
    // Eight new events and two redeliveries of the first two, in one batch of ten. A duplicate in
    // the same batch races its original: whichever reserves second sees a live lease (in flight)
    // or a committed record, one `PutItem` either way.
    let mut records: Vec<(String, &str)> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| (format!("m{i}"), b.as_str()))
        .collect();
    records.push(("m8".into(), bodies[0].as_str()));
    records.push(("m9".into(), bodies[1].as_str()));
    let records: Vec<(&str, &str)> = records.iter().map(|(m, b)| (m.as_str(), *b)).collect();
    let report = w.gate.handle_batch(sqs_event(&records), &inv).await;
    let committed = report
        .records
        .iter()
        .filter(|r| matches!(r.outcome, RecordOutcome::Committed { .. }))
        .count();
    let duplicates = report
        .records
        .iter()
        .filter(|r| r.outcome.is_duplicate())
        .count();
    assert_eq!((committed, duplicates), (8, 2), "{:?}", report.records);
    let calls = w.take_calls();
    assert_eq!(count(&calls, "PutItem"), 10 + 8, "{calls:?}");
    assert_eq!(count(&calls, "TransactWriteItems"), 8, "{calls:?}");
    assert_eq!(calls.len(), 26, "{calls:?}");
}

#[tokio::test]
async fn consumer_duplicate_in_flight_costs_one_call() {
    let w = World::new("inflight").await;
    let b = body("PCS-2", CONTAINERS[1], 4711);
    // A first delivery reserved and is still working (live lease): only its reserve exists.
    let n = parse_notification(&b, T0, &["ECT-DELTA".into()]).expect("parses");
    let keys = derive_keys(&n).expect("keys");
    let first = w.invocation("req-first");
    let record =
        w.gate
            .config
            .new_record(&truck_slot::event(&n).expect("event"), &keys, &first, T0);
    assert_eq!(
        w.other.reserve(&record, T0).await.expect("reserve"),
        Reservation::Reserved
    );
    let report = w
        .gate
        .handle_batch(sqs_event(&[("m2", &b)]), &w.invocation("req-second"))
        .await;
    assert_eq!(report.records[0].outcome, RecordOutcome::DuplicateInFlight);
    assert_eq!(w.take_calls(), ["PutItem"]);
}

#[tokio::test]
async fn consumer_redelivery_of_a_stranded_record_takes_over_in_four_calls() {
    let w = World::new("takeover").await;
    let record = w.strand("PCS-3", CONTAINERS[2], 5 * 60_000).await;
    let b = body("PCS-3", CONTAINERS[2], 4711);
    let report = w
        .gate
        .handle_batch(sqs_event(&[("m2", &b)]), &w.invocation("req-2"))
        .await;
    assert!(report.records[0].took_over);
    assert!(matches!(
        report.records[0].outcome,
        RecordOutcome::Committed { .. }
    ));
    assert_eq!(
        w.take_calls(),
        ["PutItem", "UpdateItem", "PutItem", "TransactWriteItems"]
    );
    let stored = w.other.get(&record.pk).await.expect("get").expect("record");
    assert_eq!(stored.status, RecordStatus::Committed);
}

#[path = "round_trips/reconciler.rs"]
mod reconciler;
