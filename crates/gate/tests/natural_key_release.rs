//! A natural key is released when its record ends without an effect, so the corrected event is
//! not a collision: end to end through the consumer (and the operator's cancel) on the memory
//! adapters. A declaration service keys its events by declaration and version (a correction is
//! a new version: a new event key) and declares the declaration as the natural key (one
//! declaration, one effect). The first version is refused (`400`), declined (`402`) or cancelled
//! by an operator; its correction then proceeds and is committed. A record that may hold
//! something at the server (a key reused, `422`) or that committed keeps its key: the next
//! version goes to a person as a collision. The store side is the conformance case
//! `finish_without_effect_releases_the_natural_key`, run on every store.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_lambda_events::event::sqs::SqsMessage;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation, RecordOutcome};
use gate::effect::{CallOutcome, Effect};
use gate::integration::{Event, Held, Integration, Parsed, Rejection};
use gate::manual::{ManualReason, MemoryManualQueue};
use gate::record::{natural_key_expires_at_s, IdempotencyRecord, Labels, NaturalKey, RecordStatus};
use gate::store::memory::MemoryStore;
use serde_json::json;

/// 2026-06-01T06:00:00Z, epoch ms.
const T0: i64 = 1_780_293_600_000;

/// What the declaration service answers for an amount (the test's script of the server).
fn answer(amount: i64, effect: &str) -> CallOutcome {
    match amount {
        a if a < 0 => CallOutcome::Permanent {
            status: 400,
            detail: "400: the amount is negative".into(),
        },
        402 => CallOutcome::Declined {
            status: 402,
            detail: "402: declined".into(),
        },
        422 => CallOutcome::KeyMismatch("422: the key was used with another body".into()),
        503 => CallOutcome::Transient("503".into()),
        _ => CallOutcome::Done(Effect {
            effect_id: effect.to_string(),
            subject: None,
        }),
    }
}

/// Bodies `{"declaration": "D-1", "version": 1, "amount": 100}`.
struct Declarations {
    /// Every call the server received: the declaration and version.
    calls: Mutex<Vec<String>>,
}

#[async_trait]
impl Integration for Declarations {
    fn operation(&self) -> &str {
        "declare"
    }

    fn parse(&self, body: &str, _now_ms: i64) -> Parsed {
        let value: serde_json::Value = match serde_json::from_str(body) {
            Ok(v) => v,
            Err(_) => {
                return Parsed::Rejected(Rejection {
                    code: "not_json",
                    detail: "not JSON".into(),
                    ended: false,
                })
            }
        };
        let declaration = value["declaration"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let version = value["version"].as_i64().unwrap_or_default();
        Parsed::Event(Event {
            key_material: format!("{declaration}#{version}"),
            business_fields: json!({
                "declaration": declaration,
                "version": version,
                "amount": value["amount"],
            }),
            request: body.as_bytes().to_vec(),
            labels: Labels::from([("declaration".to_string(), declaration.clone())]),
            ends_at_ms: None,
            subject: declaration,
        })
    }

    async fn call(&self, held: &Held<'_>) -> CallOutcome {
        let asked: serde_json::Value =
            serde_json::from_slice(&held.record().request).unwrap_or_default();
        let name = format!(
            "{}#{}",
            asked["declaration"].as_str().unwrap_or_default(),
            asked["version"]
        );
        let mut calls = self.calls.lock().unwrap();
        calls.push(name.clone());
        answer(
            asked["amount"].as_i64().unwrap_or_default(),
            &format!("DEC-{name}"),
        )
    }

    fn subject(&self, record: &IdempotencyRecord) -> String {
        record.label("declaration").to_string()
    }

    fn natural_key(&self, record: &IdempotencyRecord, now_ms: i64) -> Option<NaturalKey> {
        let declaration = record.label("declaration").to_string();
        Some(NaturalKey {
            key: declaration.clone(),
            labels: Labels::from([("declaration".to_string(), declaration)]),
            expires_at_s: natural_key_expires_at_s(None, now_ms),
        })
    }
}

struct World {
    gate: Gate,
    store: Arc<MemoryStore>,
    manual: Arc<MemoryManualQueue>,
    clock: Arc<ManualClock>,
    integration: Arc<Declarations>,
    deliveries: AtomicUsize,
}

impl World {
    fn new() -> Self {
        let store = Arc::new(MemoryStore::new());
        let manual = Arc::new(MemoryManualQueue::new());
        let clock = Arc::new(ManualClock::new(T0));
        let integration = Arc::new(Declarations {
            calls: Mutex::new(Vec::new()),
        });
        let gate = Gate {
            config: GateConfig::new("customs"),
            store: store.clone(),
            integration: integration.clone(),
            manual: manual.clone(),
            clock: clock.clone(),
        };
        Self {
            gate,
            store,
            manual,
            clock,
            integration,
            deliveries: AtomicUsize::new(0),
        }
    }

    async fn deliver(&self, declaration: &str, version: i64, amount: i64) -> RecordOutcome {
        let n = self.deliveries.fetch_add(1, Ordering::SeqCst);
        let mut message = SqsMessage::default();
        message.message_id = Some(format!("m-{n}"));
        message.body = Some(
            json!({"declaration": declaration, "version": version, "amount": amount}).to_string(),
        );
        let invocation = Invocation::new(&format!("req-{n}"), self.clock.now_ms() + 60_000);
        self.gate
            .handle_record(message, &invocation.for_record(0))
            .await
            .outcome
    }

    fn calls(&self) -> Vec<String> {
        self.integration.calls.lock().unwrap().clone()
    }

    fn manual_reasons(&self) -> Vec<ManualReason> {
        self.manual.items().iter().map(|i| i.reason).collect()
    }
}

#[tokio::test]
async fn a_refused_or_declined_event_releases_its_natural_key_for_the_corrected_one() {
    for (first_amount, reason) in [
        (-5, ManualReason::ServerRejected),
        (402, ManualReason::Declined),
    ] {
        let w = World::new();
        assert_eq!(
            w.deliver("D-1", 1, first_amount).await,
            RecordOutcome::Manual(reason)
        );
        w.clock.advance_ms(60_000);
        // The corrected event: another event key, the same declaration.
        assert_eq!(
            w.deliver("D-1", 2, 100).await,
            RecordOutcome::Committed {
                effect_id: "DEC-D-1#2".into()
            },
            "{reason:?}"
        );
        assert_eq!(w.calls(), ["D-1#1", "D-1#2"]);
        assert_eq!(w.manual_reasons(), [reason], "no collision for a person");
        // The committed correction holds the key: a third version is a collision, not called.
        w.clock.advance_ms(60_000);
        assert_eq!(
            w.deliver("D-1", 3, 100).await,
            RecordOutcome::Manual(ManualReason::NaturalKeyCollision)
        );
        assert_eq!(w.calls().len(), 2);
    }
}

#[tokio::test]
async fn a_cancelled_record_releases_its_natural_key_for_the_corrected_one() {
    let w = World::new();
    // The server is unavailable: the record stays in flight, holding the key.
    assert!(matches!(
        w.deliver("D-7", 1, 503).await,
        RecordOutcome::Retry(_)
    ));
    w.clock.advance_ms(60_000);
    // While it holds the key, a correction is a collision (held by a record that may still call).
    assert_eq!(
        w.deliver("D-7", 2, 100).await,
        RecordOutcome::Manual(ManualReason::NaturalKeyCollision)
    );
    let first = w
        .store
        .records()
        .into_iter()
        .find(|r| r.status == RecordStatus::InFlight)
        .expect("the first version in flight");
    let operator = Invocation::new("gatectl:alice", w.clock.now_ms() + 60_000);
    let cancelled = w
        .gate
        .operator_cancel(&first, "wrong amount, re-sent as version 3", &operator)
        .await
        .expect("cancel");
    assert_eq!(cancelled, RecordOutcome::Manual(ManualReason::Cancelled));
    w.clock.advance_ms(60_000);
    assert_eq!(
        w.deliver("D-7", 3, 100).await,
        RecordOutcome::Committed {
            effect_id: "DEC-D-7#3".into()
        }
    );
    assert_eq!(w.calls(), ["D-7#1", "D-7#3"]);
}

#[tokio::test]
async fn a_key_reused_at_the_server_keeps_its_natural_key() {
    let w = World::new();
    assert_eq!(
        w.deliver("D-9", 1, 422).await,
        RecordOutcome::Manual(ManualReason::ServerKeyMismatch)
    );
    w.clock.advance_ms(60_000);
    assert_eq!(
        w.deliver("D-9", 2, 100).await,
        RecordOutcome::Manual(ManualReason::NaturalKeyCollision),
        "something may be held at the server under the first key: a person decides"
    );
    assert_eq!(w.calls(), ["D-9#1"]);
}
