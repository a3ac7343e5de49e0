//! A server without lookup by key (a payments API such as Stripe's), said in the trait
//! (no `Integration::lookup_by_key`), through the consumer and the reconciler on the memory
//! adapters: inside the claim horizon the stored request is re-sent under the same key and the
//! server's replay is committed; past it, or after the event's end, a person gets the record,
//! told that whether the effect happened is unknown. The lookup is never called.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_lambda_events::event::sqs::SqsMessage;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation, RecordOutcome};
use gate::effect::{CallOutcome, Effect};
use gate::integration::{Event, Held, Integration, Parsed, Rejection};
use gate::manual::{ManualReason, MemoryManualQueue};
use gate::reconciler::ReconcilerConfig;
use gate::record::{IdempotencyRecord, Labels, RecordStatus};
use gate::store::memory::MemoryStore;
use gate::store::IdempotencyStore;
use gate_testkit::reserve_stranded;

/// 2026-06-01T06:00:00Z, epoch ms.
const T0: i64 = 1_780_293_600_000;
const HOUR: i64 = 3_600_000;

/// A charge server that honours `Idempotency-Key` (a repeat of a key replays the first charge)
/// and has no lookup by key.
#[derive(Default)]
struct Charges {
    by_key: Mutex<HashMap<String, String>>,
    calls: AtomicUsize,
    lookups: AtomicUsize,
}

impl Charges {
    /// The first request under `op_key` reached the server: it made a charge.
    fn charged(&self, op_key: &str) -> String {
        let mut by_key = self.by_key.lock().unwrap();
        let n = by_key.len() + 1;
        by_key
            .entry(op_key.to_string())
            .or_insert_with(|| format!("ch_{n}"))
            .clone()
    }

    fn charges(&self) -> usize {
        self.by_key.lock().unwrap().len()
    }
}

/// Bodies `{"invoice": "...", "ends_at_ms": N}`; the event's end kept in label `event_end`.
struct Payments(Arc<Charges>);

#[async_trait]
impl Integration for Payments {
    fn operation(&self) -> &str {
        "charge"
    }

    fn parse(&self, body: &str, now_ms: i64) -> Parsed {
        let value: serde_json::Value = serde_json::from_str(body).unwrap();
        let end = value["ends_at_ms"].as_i64();
        let event = Event {
            key_material: value["invoice"].as_str().unwrap().to_string(),
            business_fields: value.clone(),
            request: body.as_bytes().to_vec(),
            labels: Labels::from([(
                "event_end".to_string(),
                end.map(|e| e.to_string()).unwrap_or_default(),
            )]),
            ends_at_ms: end,
            subject: String::new(),
        };
        match end {
            Some(end) if end <= now_ms => Parsed::Ended(
                event,
                Rejection {
                    code: "event_ended",
                    detail: "event_ended: the invoice's due time has passed".into(),
                    ended: true,
                },
            ),
            _ => Parsed::Event(event),
        }
    }

    async fn call(&self, held: &Held<'_>) -> CallOutcome {
        self.0.calls.fetch_add(1, Ordering::SeqCst);
        CallOutcome::Done(Effect {
            effect_id: self.0.charged(&held.record().op_key),
            subject: None,
        })
    }

    fn ends_at_ms(&self, record: &IdempotencyRecord) -> Option<i64> {
        record.label("event_end").parse().ok()
    }
}

struct World {
    gate: Gate,
    store: Arc<MemoryStore>,
    manual: Arc<MemoryManualQueue>,
    clock: Arc<ManualClock>,
    server: Arc<Charges>,
}

fn world() -> World {
    let store = Arc::new(MemoryStore::new());
    let manual = Arc::new(MemoryManualQueue::new());
    let clock = Arc::new(ManualClock::new(T0));
    let server = Arc::new(Charges::default());
    World {
        gate: Gate {
            config: GateConfig::new("pay"),
            store: store.clone(),
            integration: Arc::new(Payments(server.clone())),
            manual: manual.clone(),
            clock: clock.clone(),
        },
        store,
        manual,
        clock,
        server,
    }
}

fn body(ends_at_ms: Option<i64>) -> String {
    serde_json::json!({"invoice": "INV-1", "amount": 4200, "ends_at_ms": ends_at_ms}).to_string()
}

/// Reserved at T0 by a worker whose lease ended a second later (it died); `charged`: its
/// request had reached the server.
async fn strand(w: &World, body: &str, charged: bool) -> IdempotencyRecord {
    let dead = Invocation {
        request_id: "inv-dead#0".into(),
        deadline_ms: T0 + 1_000,
    };
    let record = reserve_stranded(&w.gate, w.store.as_ref(), body, &dead, T0).await;
    if charged {
        w.server.charged(&record.op_key);
    }
    record
}

fn reconciler(w: &World) -> Invocation {
    Invocation {
        request_id: "rec-1".into(),
        deadline_ms: w.clock.now_ms() + 60_000,
    }
}

#[tokio::test]
async fn inside_the_horizon_the_reconciler_resends_and_commits_the_servers_replay() {
    let w = world();
    let record = strand(&w, &body(None), true).await;
    w.clock.advance_ms(180_000);
    let report = w
        .gate
        .reconcile(
            w.store.as_ref(),
            &ReconcilerConfig::default(),
            &reconciler(&w),
        )
        .await;
    assert_eq!(report.reconciled, 1, "{report:?}");
    assert_eq!(report.found_by_lookup, 0);
    let after = w.store.get(&record.pk).await.unwrap().unwrap();
    assert_eq!(after.status, RecordStatus::Committed);
    assert_eq!(after.effect_id.as_deref(), Some("ch_1"));
    assert_eq!(w.server.calls.load(Ordering::SeqCst), 1, "one re-send");
    assert_eq!(w.server.charges(), 1, "the replay made no second charge");
    assert_eq!(w.server.lookups.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn past_the_horizon_a_person_is_told_the_effect_is_unknown() {
    let w = world();
    let record = strand(&w, &body(None), true).await;
    w.clock.advance_ms(23 * HOUR);
    let report = w
        .gate
        .reconcile(
            w.store.as_ref(),
            &ReconcilerConfig::default(),
            &reconciler(&w),
        )
        .await;
    assert_eq!(report.manual, 1, "{report:?}");
    assert_eq!(w.server.calls.load(Ordering::SeqCst), 0, "never sent again");
    assert_eq!(
        w.server.lookups.load(Ordering::SeqCst),
        0,
        "no lookup to ask"
    );
    let after = w.store.get(&record.pk).await.unwrap().unwrap();
    assert_eq!(after.status, RecordStatus::Manual);
    let items = w.manual.items();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].reason, ManualReason::PastKeyRetention);
    assert_eq!(
        items[0].detail,
        format!(
            "in_flight for 82800 s, past the claim horizon (82800 s: the server's key retention \
             minus a margin); the server has no lookup by key: whether the effect under \
             Idempotency-Key {} happened is unknown; ask the server before making it by hand (a \
             new call could make a second effect)",
            record.op_key
        )
    );
    assert_eq!(after.error.as_deref(), Some(items[0].detail.as_str()));
}

#[tokio::test]
async fn a_redelivery_after_the_events_end_goes_to_a_person_unsent() {
    let w = world();
    let end = T0 + 600_000;
    let b = body(Some(end));
    let record = strand(&w, &b, false).await;
    w.clock.advance_ms(1_200_000);
    let mut message = SqsMessage::default();
    message.message_id = Some("m-2".into());
    message.body = Some(b);
    let report = w
        .gate
        .handle_record(
            message,
            &Invocation {
                request_id: "inv-2#0".into(),
                deadline_ms: w.clock.now_ms() + 60_000,
            },
        )
        .await;
    assert!(report.took_over);
    assert_eq!(
        report.outcome,
        RecordOutcome::Manual(ManualReason::EventEnded)
    );
    assert_eq!(w.server.calls.load(Ordering::SeqCst), 0);
    assert_eq!(w.server.lookups.load(Ordering::SeqCst), 0);
    let items = w.manual.items();
    assert_eq!(items.len(), 1);
    assert_eq!(
        items[0].detail,
        format!(
            "in_flight when its event ended (2026-06-01T06:10:00Z); the server has no lookup by \
             key: whether the effect under Idempotency-Key {} happened is unknown, and nothing \
             is sent after the event's end; ask the server",
            record.op_key
        )
    );
}
