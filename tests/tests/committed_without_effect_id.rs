//! A record `committed` without its effect id (written by an older version, or edited by hand),
//! on the memory adapters: every copy of its event is acknowledged as a duplicate and never sent
//! (the effect may exist), a person is told once per event key
//! (`committed_without_effect_id`), each copy is counted (`Duplicates` and
//! `CommittedWithoutEffectId`), and the key blocks nothing: other events proceed, the reconciler
//! leaves the record alone.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use aws_lambda_events::event::sqs::SqsMessage;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation, RecordOutcome, RecordReport};
use gate::effect::{CallOutcome, Effect, LookupOutcome};
use gate::integration::{Event, Held, Integration, Parsed};
use gate::manual::{ManualReason, MemoryManualQueue};
use gate::reconciler::ReconcilerConfig;
use gate::record::{inflight_shard, IdempotencyRecord, Labels, RecordStatus};
use gate::signals::{metric, Counts};
use gate::store::memory::MemoryStore;
use gate::store::IdempotencyStore;
use gate_testkit::reserve_stranded;

/// 2026-06-01T06:00:00Z, epoch ms.
const T0: i64 = 1_780_293_600_000;

/// A server that makes one effect per call, `fx_{n}`, counting calls and lookups.
#[derive(Default)]
struct Server {
    calls: AtomicUsize,
    lookups: AtomicUsize,
}

/// Bodies `{"order": "...", "qty": n}`: the order is the key material.
struct Orders(Arc<Server>);

#[async_trait]
impl Integration for Orders {
    fn operation(&self) -> &str {
        "place"
    }

    fn parse(&self, body: &str, _now_ms: i64) -> Parsed {
        let value: serde_json::Value = serde_json::from_str(body).unwrap();
        Parsed::Event(Event {
            key_material: value["order"].as_str().unwrap().to_string(),
            business_fields: value.clone(),
            request: body.as_bytes().to_vec(),
            labels: Labels::new(),
            ends_at_ms: None,
            subject: String::new(),
        })
    }

    async fn call(&self, _held: &Held<'_>) -> CallOutcome {
        let n = self.0.calls.fetch_add(1, Ordering::SeqCst) + 1;
        CallOutcome::Done(Effect {
            effect_id: format!("fx_{n}"),
            subject: None,
        })
    }

    fn lookup_by_key(&self) -> Option<&dyn gate::Lookup> {
        Some(self)
    }
}

#[async_trait]
impl gate::Lookup for Orders {
    async fn lookup(&self, _held: &Held<'_>) -> LookupOutcome {
        self.0.lookups.fetch_add(1, Ordering::SeqCst);
        LookupOutcome::NotFound
    }
}

struct World {
    gate: Gate,
    store: Arc<MemoryStore>,
    manual: Arc<MemoryManualQueue>,
    clock: Arc<ManualClock>,
    server: Arc<Server>,
}

fn world() -> World {
    let store = Arc::new(MemoryStore::new());
    let manual = Arc::new(MemoryManualQueue::new());
    let clock = Arc::new(ManualClock::new(T0));
    let server = Arc::new(Server::default());
    World {
        gate: Gate {
            config: GateConfig::new("orders"),
            store: store.clone(),
            integration: Arc::new(Orders(server.clone())),
            manual: manual.clone(),
            clock: clock.clone(),
        },
        store,
        manual,
        clock,
        server,
    }
}

fn body(order: &str) -> String {
    serde_json::json!({"order": order, "qty": 3}).to_string()
}

/// The record of `order`'s body as an older version (or a hand edit) left it: `committed`,
/// no effect id, no `in_flight` index entry unless `indexed`.
async fn committed_without_effect_id(w: &World, order: &str, indexed: bool) -> IdempotencyRecord {
    let worker = Invocation {
        request_id: "inv-old#0".into(),
        deadline_ms: T0 + 1_000,
    };
    let mut record = reserve_stranded(&w.gate, w.store.as_ref(), &body(order), &worker, T0).await;
    record.status = RecordStatus::Committed;
    record.effect_id = None;
    record.inflight_shard = indexed.then(|| inflight_shard(&record.event_key));
    w.store.put_raw(record.clone());
    record
}

async fn deliver(w: &World, message_id: &str, body: &str) -> RecordReport {
    let mut message = SqsMessage::default();
    message.message_id = Some(message_id.into());
    message.body = Some(body.into());
    w.gate
        .handle_record(
            message,
            &Invocation {
                request_id: format!("inv-{message_id}#0"),
                deadline_ms: w.clock.now_ms() + 60_000,
            },
        )
        .await
}

#[tokio::test]
async fn every_copy_is_a_duplicate_a_person_is_told_once_and_the_key_blocks_nothing() {
    let w = world();
    let record = committed_without_effect_id(&w, "ORD-1", false).await;

    w.clock.advance_ms(60_000);
    let first = deliver(&w, "m-1", &body("ORD-1")).await;
    w.clock.advance_ms(60_000);
    let second = deliver(&w, "m-2", &body("ORD-1")).await;
    for report in [&first, &second] {
        assert_eq!(report.outcome, RecordOutcome::DuplicateWithoutEffectId);
        assert!(report.outcome.acknowledged(), "never retried");
        assert!(report.outcome.is_duplicate());
        assert!(!report.took_over);
        assert_eq!(report.outcome.code(), "Duplicate");
        assert_eq!(report.outcome.detail(), "committed_without_effect_id");
    }
    assert_eq!(w.server.calls.load(Ordering::SeqCst), 0, "never sent");
    assert_eq!(w.server.lookups.load(Ordering::SeqCst), 0);

    let items = w.manual.items();
    assert_eq!(items.len(), 1, "told once per event key: {items:?}");
    let item = &items[0];
    assert_eq!(item.reason, ManualReason::CommittedWithoutEffectId);
    assert_eq!(item.event_key.as_deref(), Some(record.event_key.as_str()));
    assert_eq!(item.message_id, "m-1");
    assert_eq!(item.original_body, body("ORD-1"));
    assert_eq!(
        item.detail,
        format!(
            "event key {} is committed without its effect id (last written at {T0} epoch ms; \
             effect ids the server returned: none recorded); its copies are acknowledged as \
             duplicates and not sent. Ask the server which effect it holds under \
             Idempotency-Key {}, then write that effect id onto the record, or make the effect \
             by hand if there is none",
            record.event_key, record.op_key
        )
    );

    let counts = Counts::of_records(&[first, second]);
    assert_eq!(counts.received, 2);
    assert_eq!(counts.duplicates, 2, "both are conflicts on reserve");
    assert_eq!(counts.committed_without_effect_id, 2, "each copy counted");
    assert_eq!(counts.manual, 0);
    assert_eq!(counts.transient_failures, 0);
    assert!(counts
        .counters()
        .contains(&(metric::COMMITTED_WITHOUT_EFFECT_ID, 2)));

    // The gate never rewrites the record.
    let after = w.store.get(&record.pk).await.unwrap().unwrap();
    assert_eq!(after.status, RecordStatus::Committed);
    assert_eq!(after.effect_id, None);
    assert_eq!(after.updated_at_ms, T0);

    // Another event proceeds as ever; its copy is a plain duplicate, told to nobody.
    let other = deliver(&w, "m-3", &body("ORD-2")).await;
    assert_eq!(
        other.outcome,
        RecordOutcome::Committed {
            effect_id: "fx_1".into()
        }
    );
    let again = deliver(&w, "m-4", &body("ORD-2")).await;
    assert_eq!(
        again.outcome,
        RecordOutcome::Duplicate(RecordStatus::Committed)
    );
    assert_eq!(w.server.calls.load(Ordering::SeqCst), 1);
    assert_eq!(w.manual.items().len(), 1);
}

/// The effect ids the server returned (kept in `effect_ids`) are what a person needs: named.
#[tokio::test]
async fn the_item_names_the_effect_ids_the_record_kept() {
    let w = world();
    let mut record = committed_without_effect_id(&w, "ORD-1", false).await;
    record.effect_ids = ["fx_7".to_string(), "fx_9".to_string()].into();
    w.store.put_raw(record.clone());
    let report = deliver(&w, "m-1", &body("ORD-1")).await;
    assert_eq!(report.outcome, RecordOutcome::DuplicateWithoutEffectId);
    let items = w.manual.items();
    assert_eq!(items.len(), 1);
    assert!(
        items[0]
            .detail
            .contains("effect ids the server returned: fx_7, fx_9)"),
        "{}",
        items[0].detail
    );
}

/// A copy with another body is a mismatch, as for any record: the fingerprint decides first.
#[tokio::test]
async fn another_body_is_still_a_mismatch() {
    let w = world();
    committed_without_effect_id(&w, "ORD-1", false).await;
    let changed = serde_json::json!({"order": "ORD-1", "qty": 4}).to_string();
    let report = deliver(&w, "m-1", &changed).await;
    assert_eq!(report.outcome, RecordOutcome::Mismatch);
    let items = w.manual.items();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].reason, ManualReason::Mismatch);
    assert_eq!(w.server.calls.load(Ordering::SeqCst), 0);
}

/// The reconciler does not choke on such a record, even one a hand edit left in the `in_flight`
/// index: the take-over is refused (the record has no work), nothing is sent, nothing rewritten.
#[tokio::test]
async fn the_reconciler_leaves_it_alone() {
    let w = world();
    let record = committed_without_effect_id(&w, "ORD-1", true).await;
    w.clock.advance_ms(600_000);
    let report = w
        .gate
        .reconcile(
            w.store.as_ref(),
            &ReconcilerConfig::default(),
            &Invocation {
                request_id: "rec-1".into(),
                deadline_ms: w.clock.now_ms() + 60_000,
            },
        )
        .await;
    assert_eq!(report.reconciled, 0, "{report:?}");
    assert_eq!(report.manual, 0, "{report:?}");
    assert_eq!(report.transient, 0, "{report:?}");
    assert_eq!(w.server.calls.load(Ordering::SeqCst), 0);
    assert_eq!(w.server.lookups.load(Ordering::SeqCst), 0);
    let after = w.store.get(&record.pk).await.unwrap().unwrap();
    assert_eq!(after.status, RecordStatus::Committed);
    assert_eq!(after.effect_id, None);
    println!("reconciler on a committed record left in the index: {report:?}");
}
