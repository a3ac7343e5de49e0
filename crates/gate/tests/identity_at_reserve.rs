//! The identity taken at reserve is the identity used to the end (Powertools
//! TypeScript #5715 and #5705, Python #1093: an idempotency layer that computed its key or its
//! payload hash again after the reserve, from an event that had changed meanwhile).
//!
//! The integration here reads its operation name and its natural key from something that changes
//! on every call (shared by every process, as a reloaded configuration would be), and its
//! redeliveries carry a non-key field (`note`) that differs from copy to copy. Right: every call,
//! lookup, commit, release and routing uses the partition key, the operation key, the fingerprint
//! and the request bytes of the reserve (stored on the record), never computed again from a later
//! event; after the commit, a routing and a reconciliation the record still holds the reserve's
//! fingerprint, and an identical redelivery to a fresh process is a duplicate, never a mismatch.
//! On the memory adapters; the store side of the rule is the conformance case
//! `the_reserved_identity_survives_every_write`, run on every store.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_lambda_events::event::sqs::SqsMessage;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation, RecordOutcome};
use gate::effect::{CallOutcome, Effect, LookupOutcome};
use gate::integration::{Event, Held, Integration, Parsed, Rejection};
use gate::keys;
use gate::manual::{ManualReason, MemoryManualQueue};
use gate::reconciler::ReconcilerConfig;
use gate::record::{record_pk, IdempotencyRecord, Labels, NaturalKey, RecordStatus};
use gate::store::memory::MemoryStore;
use gate::store::BusinessRows;
use gate::store::IdempotencyStore;
use serde_json::json;

/// 2026-06-01T06:00:00Z, epoch ms.
const T0: i64 = 1_780_293_600_000;
const HOUR: i64 = 3_600_000;
const INTEGRATION: &str = "orders";
/// The operation names the integration answers in turn, one per call of `operation()`.
const OPERATIONS: [&str; 3] = ["charge", "charge-v2", "charge-v3"];

/// How the server answers the next call.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The effect is made (or replayed under its key) and answered.
    Effect,
    /// The effect is made, its answer is lost: the call is transient.
    EffectAnswerLost,
    /// Nothing is made: transient.
    Unavailable,
    /// A permanent refusal (4xx).
    Refused,
}

/// A server that honours `Idempotency-Key`: the first request under a key makes the effect, a
/// repeat replays it. It keeps every request it received (key and bytes) and every lookup.
struct Server {
    mode: Mutex<Mode>,
    by_key: Mutex<HashMap<String, String>>,
    calls: Mutex<Vec<(String, Vec<u8>)>>,
    lookups: Mutex<Vec<String>>,
}

impl Server {
    fn new() -> Self {
        Self {
            mode: Mutex::new(Mode::Effect),
            by_key: Mutex::new(HashMap::new()),
            calls: Mutex::new(Vec::new()),
            lookups: Mutex::new(Vec::new()),
        }
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn effect(&self, op_key: &str) -> String {
        let mut by_key = self.by_key.lock().unwrap();
        let n = by_key.len() + 1;
        by_key
            .entry(op_key.to_string())
            .or_insert_with(|| format!("E-{n}"))
            .clone()
    }

    fn effects(&self) -> usize {
        self.by_key.lock().unwrap().len()
    }

    fn calls(&self) -> Vec<(String, Vec<u8>)> {
        self.calls.lock().unwrap().clone()
    }
}

/// Bodies `{"order": "O-1", "amount": 4200, "note": "...", "ends_at_ms": N|null}`: the key
/// material is the order, the business fields the order and the amount (the note is a non-key
/// field: in the request bytes and a label, not fingerprinted).
struct Drifting {
    server: Arc<Server>,
    /// Shared by every process: each `operation()` and `natural_key()` call reads it and moves it.
    generation: Arc<AtomicUsize>,
}

#[async_trait]
impl Integration for Drifting {
    fn operation(&self) -> &str {
        OPERATIONS[self.generation.fetch_add(1, Ordering::SeqCst) % OPERATIONS.len()]
    }

    fn parse(&self, body: &str, now_ms: i64) -> Parsed {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(body) else {
            return Parsed::Rejected(Rejection {
                code: "not_json",
                detail: "not JSON".into(),
                ended: false,
            });
        };
        let order = value["order"].as_str().unwrap_or_default().to_string();
        let end = value["ends_at_ms"].as_i64();
        let event = Event {
            key_material: order.clone(),
            business_fields: json!({"order": order, "amount": value["amount"]}),
            request: body.as_bytes().to_vec(),
            labels: Labels::from([
                ("order".to_string(), order.clone()),
                (
                    "note".to_string(),
                    value["note"].as_str().unwrap_or_default().to_string(),
                ),
                (
                    "event_end".to_string(),
                    end.map(|e| e.to_string()).unwrap_or_default(),
                ),
            ]),
            ends_at_ms: end,
            subject: order,
        };
        match end {
            Some(end) if end <= now_ms => Parsed::Ended(
                event,
                Rejection {
                    code: "event_ended",
                    detail: "event_ended: the order's deadline has passed".into(),
                    ended: true,
                },
            ),
            _ => Parsed::Event(event),
        }
    }

    async fn call(&self, held: &Held<'_>) -> CallOutcome {
        let record = held.record();
        self.server
            .calls
            .lock()
            .unwrap()
            .push((record.op_key.clone(), record.request.clone()));
        // The server answers for the order of the request it received.
        let asked: serde_json::Value = serde_json::from_slice(&record.request).unwrap_or_default();
        let subject = asked["order"].as_str().map(str::to_string);
        let mode = *self.server.mode.lock().unwrap();
        match mode {
            Mode::Effect => CallOutcome::Done(Effect {
                effect_id: self.server.effect(&record.op_key),
                subject,
            }),
            Mode::EffectAnswerLost => {
                self.server.effect(&record.op_key);
                CallOutcome::Transient("the answer was lost".into())
            }
            Mode::Unavailable => CallOutcome::Transient("503".into()),
            Mode::Refused => CallOutcome::Permanent {
                status: 400,
                detail: "400: amount refused".into(),
            },
        }
    }

    fn ends_at_ms(&self, record: &IdempotencyRecord) -> Option<i64> {
        record.label("event_end").parse().ok()
    }

    fn subject(&self, record: &IdempotencyRecord) -> String {
        record.label("order").to_string()
    }

    fn natural_key(&self, record: &IdempotencyRecord, now_ms: i64) -> Option<NaturalKey> {
        let generation = self.generation.fetch_add(1, Ordering::SeqCst);
        Some(NaturalKey {
            key: format!("{}#{generation}", record.label("order")),
            labels: Labels::new(),
            expires_at_s: now_ms / 1000 + 86_400,
        })
    }

    fn lookup_by_key(&self) -> Option<&dyn gate::Lookup> {
        Some(self)
    }
}

#[async_trait]
impl gate::Lookup for Drifting {
    async fn lookup(&self, held: &Held<'_>) -> LookupOutcome {
        let op_key = held.record().op_key.clone();
        self.server.lookups.lock().unwrap().push(op_key.clone());
        match self.server.by_key.lock().unwrap().get(&op_key) {
            Some(id) => LookupOutcome::Found(Effect {
                effect_id: id.clone(),
                subject: None,
            }),
            None => LookupOutcome::NotFound,
        }
    }
}

/// The tables, the queue, the clock and the server every process shares.
struct World {
    store: Arc<MemoryStore>,
    manual: Arc<MemoryManualQueue>,
    clock: Arc<ManualClock>,
    server: Arc<Server>,
    generation: Arc<AtomicUsize>,
    invocations: AtomicUsize,
}

impl World {
    fn new() -> Self {
        Self {
            store: Arc::new(MemoryStore::new()),
            manual: Arc::new(MemoryManualQueue::new()),
            clock: Arc::new(ManualClock::new(T0)),
            server: Arc::new(Server::new()),
            generation: Arc::new(AtomicUsize::new(0)),
            invocations: AtomicUsize::new(0),
        }
    }

    /// A fresh process (a cold start): its own gate and integration over the shared world.
    fn process(&self) -> Gate {
        Gate {
            config: GateConfig::new(INTEGRATION),
            store: self.store.clone(),
            integration: Arc::new(Drifting {
                server: self.server.clone(),
                generation: self.generation.clone(),
            }),
            manual: self.manual.clone(),
            clock: self.clock.clone(),
        }
    }

    fn invocation(&self) -> Invocation {
        let n = self.invocations.fetch_add(1, Ordering::SeqCst);
        Invocation::new(&format!("req-{n}"), self.clock.now_ms() + 60_000)
    }

    /// `body` delivered to a fresh process.
    async fn deliver(&self, body: &str) -> RecordOutcome {
        let mut message = SqsMessage::default();
        let n = self.invocations.load(Ordering::SeqCst);
        message.message_id = Some(format!("m-{n}"));
        message.body = Some(body.to_string());
        self.process()
            .handle_record(message, &self.invocation().for_record(0))
            .await
            .outcome
    }

    async fn reconcile(&self) -> gate::reconciler::ReconcileReport {
        self.process()
            .reconcile(
                self.store.as_ref(),
                &ReconcilerConfig::default(),
                &self.invocation(),
            )
            .await
    }

    async fn record(&self, reserved: &Reserved) -> IdempotencyRecord {
        self.store.get(&reserved.pk).await.unwrap().unwrap()
    }
}

fn body(amount: i64, note: &str, ends_at_ms: Option<i64>) -> String {
    json!({"order": "O-1", "amount": amount, "note": note, "ends_at_ms": ends_at_ms}).to_string()
}

/// What the reserve of order `O-1` with `amount` fixes, computed here from the rule (not read
/// from the gate): `pk = "orders#{sha256(O-1)}"`, the operation key of the operation name the
/// reserving process read first (`OPERATIONS[0]`: nothing read it before), the fingerprint of
/// the order and the amount.
struct Reserved {
    pk: String,
    op_key: String,
    fingerprint: String,
}

fn reserved(amount: i64) -> Reserved {
    let event_key = keys::event_key_of_material("O-1");
    Reserved {
        pk: record_pk(INTEGRATION, &event_key),
        op_key: keys::operation_key(&event_key, OPERATIONS[0]),
        fingerprint: keys::fingerprint_of(&json!({"order": "O-1", "amount": amount})).unwrap(),
    }
}

fn assert_reserved_identity(record: &IdempotencyRecord, r: &Reserved) {
    assert_eq!(record.pk, r.pk);
    assert_eq!(record.op_key, r.op_key, "the operation key of the reserve");
    assert_eq!(
        record.fingerprint, r.fingerprint,
        "the fingerprint of the reserve"
    );
}

#[tokio::test]
async fn a_commit_keeps_the_reserved_identity_and_a_fresh_process_sees_a_duplicate() {
    let w = World::new();
    let first = body(4200, "first copy", None);
    let outcome = w.deliver(&first).await;
    assert!(
        matches!(&outcome, RecordOutcome::Committed { effect_id, .. } if effect_id == "E-1"),
        "{outcome:?}"
    );
    let r = reserved(4200);
    let record = w.record(&r).await;
    assert_eq!(record.status, RecordStatus::Committed);
    assert_reserved_identity(&record, &r);
    assert_eq!(
        w.server.calls(),
        vec![(r.op_key.clone(), first.into_bytes())]
    );
    let booking = w
        .store
        .business_row(&record.event_key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(booking.effect_id, "E-1");

    // The operation name has moved on since; an identical copy to a fresh process.
    let again = w.deliver(&body(4200, "first copy", None)).await;
    assert_eq!(again, RecordOutcome::Duplicate(RecordStatus::Committed));
    assert_eq!(w.server.effects(), 1);
    assert_eq!(w.server.calls().len(), 1, "a duplicate never calls");
    assert!(w.manual.items().is_empty(), "{:?}", w.manual.items());
    assert_reserved_identity(&w.record(&r).await, &r);
}

#[tokio::test]
async fn a_release_then_a_redelivery_with_another_note_resumes_the_reserved_request() {
    let w = World::new();
    let first = body(4200, "first copy", None);
    w.server.set(Mode::Unavailable);
    let outcome = w.deliver(&first).await;
    assert!(matches!(outcome, RecordOutcome::Retry(_)), "{outcome:?}");
    let r = reserved(4200);
    let released = w.record(&r).await;
    assert_eq!(released.status, RecordStatus::InFlight);
    assert_eq!(released.lease_until_ms, Some(0), "the lease was released");
    assert_reserved_identity(&released, &r);
    assert_eq!(released.request, first.as_bytes());

    // The redelivery: same business fields, another note; its process reads another operation
    // name. It takes the released record over and sends what the reserve stored.
    w.server.set(Mode::Effect);
    let outcome = w.deliver(&body(4200, "second copy", None)).await;
    assert!(
        matches!(&outcome, RecordOutcome::Committed { effect_id, .. } if effect_id == "E-1"),
        "{outcome:?}"
    );
    let calls = w.server.calls();
    assert_eq!(
        calls,
        vec![
            (r.op_key.clone(), first.clone().into_bytes()),
            (r.op_key.clone(), first.into_bytes())
        ],
        "both sends: the reserve's key and the reserve's bytes"
    );
    let record = w.record(&r).await;
    assert_eq!(record.status, RecordStatus::Committed);
    assert_reserved_identity(&record, &r);
    assert_eq!(record.label("note"), "first copy", "the reserve's labels");
    assert_eq!(w.server.effects(), 1);

    let again = w.deliver(&body(4200, "second copy", None)).await;
    assert_eq!(again, RecordOutcome::Duplicate(RecordStatus::Committed));
}

#[tokio::test]
async fn a_routing_keeps_the_fingerprint_and_a_fresh_process_sees_a_duplicate() {
    let w = World::new();
    w.server.set(Mode::Refused);
    let outcome = w.deliver(&body(4200, "first copy", None)).await;
    assert_eq!(outcome, RecordOutcome::Manual(ManualReason::ServerRejected));
    let r = reserved(4200);
    let record = w.record(&r).await;
    assert_eq!(record.status, RecordStatus::Failed);
    assert!(!record.route_pending, "the routing was confirmed");
    assert_reserved_identity(&record, &r);

    let again = w.deliver(&body(4200, "first copy", None)).await;
    assert_eq!(again, RecordOutcome::Duplicate(RecordStatus::Failed));
    let items = w.manual.items();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(
        items[0].event_key.as_deref(),
        Some(record.event_key.as_str())
    );
    assert_eq!(w.server.calls().len(), 1);
}

#[tokio::test]
async fn the_reconciler_resends_under_the_reserved_key_and_a_fresh_process_sees_a_duplicate() {
    let w = World::new();
    let first = body(4200, "first copy", None);
    w.server.set(Mode::EffectAnswerLost);
    let outcome = w.deliver(&first).await;
    assert!(matches!(outcome, RecordOutcome::Retry(_)), "{outcome:?}");
    assert_eq!(
        w.server.effects(),
        1,
        "the effect was made, its answer lost"
    );

    w.server.set(Mode::Effect);
    w.clock.advance_ms(180_000);
    let report = w.reconcile().await;
    assert_eq!(report.reconciled, 1, "{report:?}");
    let r = reserved(4200);
    let record = w.record(&r).await;
    assert_eq!(record.status, RecordStatus::Committed);
    assert_eq!(record.effect_id.as_deref(), Some("E-1"));
    assert_reserved_identity(&record, &r);
    assert!(
        w.server
            .calls()
            .iter()
            .all(|(key, bytes)| *key == r.op_key && *bytes == first.as_bytes()),
        "{:?}",
        w.server.calls()
    );
    assert_eq!(
        w.server.effects(),
        1,
        "the re-send was answered by the replay"
    );

    let again = w.deliver(&first).await;
    assert_eq!(again, RecordOutcome::Duplicate(RecordStatus::Committed));
    assert!(w.manual.items().is_empty(), "{:?}", w.manual.items());
}

#[tokio::test]
async fn past_the_horizon_the_lookup_uses_the_reserved_key_and_the_routing_keeps_the_fingerprint() {
    let w = World::new();
    w.server.set(Mode::Unavailable);
    let outcome = w.deliver(&body(4200, "first copy", None)).await;
    assert!(matches!(outcome, RecordOutcome::Retry(_)), "{outcome:?}");

    w.clock.advance_ms(23 * HOUR + 1);
    let report = w.reconcile().await;
    assert_eq!(report.manual, 1, "{report:?}");
    let r = reserved(4200);
    assert_eq!(*w.server.lookups.lock().unwrap(), vec![r.op_key.clone()]);
    let record = w.record(&r).await;
    assert_eq!(record.status, RecordStatus::Manual);
    assert_reserved_identity(&record, &r);

    let again = w.deliver(&body(4200, "first copy", None)).await;
    assert_eq!(again, RecordOutcome::Duplicate(RecordStatus::Manual));
    let items = w.manual.items();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].reason, ManualReason::PastKeyRetention);
}

#[tokio::test]
async fn an_ended_event_keeps_its_fingerprint_on_its_routing_record() {
    let w = World::new();
    let ended = body(4200, "first copy", Some(T0 - HOUR));
    let outcome = w.deliver(&ended).await;
    assert!(
        matches!(&outcome, RecordOutcome::Rejected(reason) if reason.code == "event_ended"),
        "{outcome:?}"
    );
    let r = reserved(4200);
    let record = w.record(&r).await;
    assert_eq!(record.status, RecordStatus::Manual);
    assert_eq!(record.pk, r.pk);
    assert_eq!(record.fingerprint, r.fingerprint, "the event's fingerprint");
    assert_eq!(
        record.op_key,
        keys::operation_key(&record.event_key, keys::MANUAL_ROUTE),
        "a routing record's one operation is the send"
    );

    let again = w.deliver(&ended).await;
    assert_eq!(again, RecordOutcome::Duplicate(RecordStatus::Manual));
    // Another amount under the same order is a mismatch: the fingerprint is compared.
    let other = w.deliver(&body(9900, "first copy", Some(T0 - HOUR))).await;
    assert_eq!(other, RecordOutcome::Mismatch);
    let reasons: Vec<ManualReason> = w.manual.items().iter().map(|i| i.reason).collect();
    assert_eq!(
        reasons,
        vec![ManualReason::EventEnded, ManualReason::Mismatch]
    );
    assert!(w.server.calls().is_empty(), "an ended event is never sent");
}
