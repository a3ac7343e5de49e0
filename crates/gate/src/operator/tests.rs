//! The operator's writes on the memory store: refusals, finish, cancel, history, next step.

use std::sync::Arc;

use super::*;
use crate::clock::{Clock, ManualClock};
use crate::consumer::derive_keys;
use crate::gate::GateConfig;
use crate::integration::{Event, Integration, Parsed};
use crate::manual::MemoryManualQueue;
use crate::reconciler::ReconcilerConfig;
use crate::record::Labels;
use crate::store::memory::MemoryStore;
use crate::store::BusinessRows;
use crate::store::{limits, IdempotencyStore, Reservation};
use async_trait::async_trait;

/// 2026-06-01T06:00:00Z.
const T0: i64 = 1_780_293_600_000;

/// An integration with the truck-slot path's labels whose side effect the operator's writes
/// never call.
struct Unreachable;

#[async_trait]
impl Integration for Unreachable {
    fn operation(&self) -> &str {
        "slot-claim"
    }

    fn parse(&self, body: &str, _now_ms: i64) -> Parsed {
        Parsed::Event(Event {
            key_material: "N-1:CSQU3054383".into(),
            business_fields: serde_json::from_str(body).unwrap(),
            request: br#"{"pin":"4711"}"#.to_vec(),
            labels: Labels::from([
                ("container".to_string(), "CSQU3054383".to_string()),
                ("terminal".to_string(), "ECT-DELTA".to_string()),
                (
                    "window_start".to_string(),
                    "2026-06-01T08:00:00Z".to_string(),
                ),
                ("window_end".to_string(), "2026-06-01T10:00:00Z".to_string()),
            ]),
            ends_at_ms: Some(1_780_308_000_000),
            subject: "CSQU3054383".into(),
        })
    }

    async fn call(&self, _held: &Held<'_>) -> CallOutcome {
        CallOutcome::Transient("not called".into())
    }

    fn ends_at_ms(&self, record: &IdempotencyRecord) -> Option<i64> {
        chrono::DateTime::parse_from_rfc3339(record.label("window_end"))
            .ok()
            .map(|t| t.timestamp_millis())
    }

    fn subject(&self, record: &IdempotencyRecord) -> String {
        record.label("container").to_string()
    }

    fn lookup_by_key(&self) -> Option<&dyn crate::integration::Lookup> {
        Some(self)
    }
}

#[async_trait]
impl crate::integration::Lookup for Unreachable {
    async fn lookup(&self, _held: &Held<'_>) -> LookupOutcome {
        LookupOutcome::Transient("not called".into())
    }
}

struct World {
    gate: Gate,
    store: Arc<MemoryStore>,
    manual: Arc<MemoryManualQueue>,
    clock: Arc<ManualClock>,
}

fn world() -> World {
    let store = Arc::new(MemoryStore::new());
    let manual = Arc::new(MemoryManualQueue::new());
    let clock = Arc::new(ManualClock::new(T0));
    World {
        gate: Gate {
            config: GateConfig::new("it"),
            store: store.clone(),
            integration: Arc::new(Unreachable),
            manual: manual.clone(),
            clock: clock.clone(),
        },
        store,
        manual,
        clock,
    }
}

/// Reserved by `owner` at T0 with a lease until `deadline_ms`.
async fn strand(w: &World, owner: &str, deadline_ms: i64) -> IdempotencyRecord {
    let body = r#"{"notificationId":"N-1","equipment_number":"CSQU3054383","preferred_window":{"start":"2026-06-01T08:00:00Z","end":"2026-06-01T10:00:00Z"},"terminal":"ECT-DELTA","pin":"4711"}"#;
    let Parsed::Event(n) = Unreachable.parse(body, T0) else {
        panic!("parse")
    };
    let keys = derive_keys(&n, "slot-claim").unwrap();
    let inv = Invocation {
        request_id: owner.into(),
        deadline_ms,
    };
    let mut record = w.gate.config.new_record(&n, &keys, &inv, T0);
    record.lease_until_ms = Some(deadline_ms);
    assert_eq!(
        w.store.reserve(&record, T0).await.unwrap(),
        Reservation::Reserved
    );
    record
}

fn operator(w: &World) -> Invocation {
    Invocation {
        request_id: "gatectl:alice#1".into(),
        deadline_ms: w.clock.now_ms() + OPERATOR_LEASE_MS,
    }
}

#[tokio::test]
async fn a_live_lease_refuses_and_names_its_holder_and_end() {
    let w = world();
    let record = strand(&w, "inv-1#0", T0 + 120_000).await;
    w.clock.advance_ms(20_000);
    let err = w
        .gate
        .operator_finish(
            &record,
            Effect {
                effect_id: "S-1".into(),
                subject: None,
            },
            &operator(&w),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        OperatorError::Refused(Refusal::LeaseLive {
            holder: "inv-1#0".into(),
            until: "2026-06-01T06:02:00Z".into(),
            left_s: 100,
        })
    );
    assert_eq!(w.store.get(&record.pk).await.unwrap().unwrap(), record);
}

#[tokio::test]
async fn finish_commits_the_given_effect_fenced_by_the_operators_lease() {
    let w = world();
    let record = strand(&w, "inv-1#0", T0 + 1_000).await;
    w.clock.advance_ms(60_000);
    let outcome = w
        .gate
        .operator_finish(
            &record,
            Effect {
                effect_id: "S-1".into(),
                subject: None,
            },
            &operator(&w),
        )
        .await
        .unwrap();
    assert_eq!(
        outcome,
        RecordOutcome::Committed {
            effect_id: "S-1".into(),
        }
    );
    let after = w.store.get(&record.pk).await.unwrap().unwrap();
    assert_eq!(after.status, RecordStatus::Committed);
    assert_eq!(after.lease_owner.as_deref(), Some("gatectl:alice#1"));
    assert_eq!(
        w.store
            .business_row(&record.event_key)
            .await
            .unwrap()
            .unwrap()
            .effect_id,
        "S-1"
    );
    // Committed now: a second finish is refused with the status.
    let again = w
        .gate
        .operator_finish(
            &after,
            Effect {
                effect_id: "S-2".into(),
                subject: None,
            },
            &operator(&w),
        )
        .await
        .unwrap_err();
    assert_eq!(
        again.to_string(),
        "the record is committed, not in_flight: nothing to finish"
    );
}

#[tokio::test]
async fn cancel_routes_the_claim_request_to_a_person_and_refuses_a_recorded_effect() {
    let w = world();
    let record = strand(&w, "inv-1#0", T0 + 1_000).await;
    w.clock.advance_ms(60_000);
    let outcome = w
        .gate
        .operator_cancel(&record, "cancelled by gatectl:alice: dup", &operator(&w))
        .await
        .unwrap();
    assert_eq!(outcome, RecordOutcome::Manual(ManualReason::Cancelled));
    let after = w.store.get(&record.pk).await.unwrap().unwrap();
    assert_eq!(after.status, RecordStatus::Failed);
    assert_eq!(
        after.error.as_deref(),
        Some("cancelled by gatectl:alice: dup")
    );
    assert!(after.inflight_shard.is_none() && !after.route_pending && after.request.is_empty());
    let items = w.manual.items();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].reason, ManualReason::Cancelled);
    assert_eq!(items[0].original_body.as_bytes(), record.request.as_slice());
    assert_eq!(
        items[0].event_key.as_deref(),
        Some(record.event_key.as_str())
    );

    let w = world();
    let record = strand(&w, "inv-1#0", T0 + 1_000).await;
    let with_effect = w
        .store
        .record_effect_id(&record.pk, "S-9", T0)
        .await
        .unwrap()
        .unwrap();
    w.clock.advance_ms(60_000);
    let err = w
        .gate
        .operator_cancel(&with_effect, "x", &operator(&w))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        OperatorError::Refused(Refusal::EffectRecorded {
            effect_ids: vec!["S-9".into()]
        })
    );
    assert!(w.manual.items().is_empty());
    // Nor is a finish with another effect than the recorded one.
    let err = w
        .gate
        .operator_finish(
            &with_effect,
            Effect {
                effect_id: "S-1".into(),
                subject: None,
            },
            &operator(&w),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the server returned effect id(s) [\"S-9\"] for this record, not S-1: finish it with \
         one of those (or --from-server)"
    );
    assert_eq!(
        w.store.get(&with_effect.pk).await.unwrap().unwrap(),
        with_effect
    );
}

#[tokio::test]
async fn the_history_is_appended_to_an_existing_record_only() {
    let w = world();
    let record = strand(&w, "inv-1#0", T0 + 1_000).await;
    let entry = |n: i64| AuditEntry {
        at_ms: T0 + n,
        who: "gatectl:alice".into(),
        action: "finish".into(),
        detail: format!("line {n}"),
    };
    w.store.append_history(&record.pk, &entry(1)).await.unwrap();
    w.store.append_history(&record.pk, &entry(2)).await.unwrap();
    assert_eq!(
        w.store.history(&record.pk).await.unwrap(),
        vec![entry(1), entry(2)]
    );
    assert!(matches!(
        w.store.append_history("it#none", &entry(3)).await,
        Err(StoreError::Corrupt(_))
    ));
    assert!(w.store.history("it#none").await.unwrap().is_empty());
}

/// A history holds at most `MAX_HISTORY_ENTRIES` lines, each cut to its field limits, so a
/// record's audit trail cannot grow its item past DynamoDB's limit.
#[tokio::test]
async fn the_history_is_bounded_in_lines_and_in_bytes() {
    let w = world();
    let record = strand(&w, "inv-1#0", T0 + 1_000).await;
    let long = AuditEntry {
        at_ms: T0,
        who: "w".repeat(500),
        action: "a".repeat(500),
        detail: "é".repeat(500),
    };
    for _ in 0..limits::MAX_HISTORY_ENTRIES {
        w.store.append_history(&record.pk, &long).await.unwrap();
    }
    assert_eq!(
        w.store.append_history(&record.pk, &long).await,
        Err(StoreError::Refused(limits::ItemRefusal::HistoryFull {
            limit: 20
        }))
    );
    let history = w.store.history(&record.pk).await.unwrap();
    assert_eq!(history.len(), 20);
    assert_eq!(history[0].who.len(), 64);
    assert_eq!(history[0].action.len(), 16);
    // 128 two-byte characters: cut at a character boundary.
    assert_eq!(history[0].detail, "é".repeat(128));
}

#[tokio::test]
async fn the_next_step_says_what_the_gate_will_do() {
    let w = world();
    let config = ReconcilerConfig::default();
    let record = strand(&w, "inv-1#0", T0 + 1_000).await;
    // The lease ended a second after the reserve; 40 s later the next sweep takes it.
    w.clock.advance_ms(40_000);
    let now = w.clock.now_ms();
    assert_eq!(
        w.gate.next_step(&record, &config, now),
        "the reconciler takes it over at its next sweep (every 15 s), sends the stored \
         request under its Idempotency-Key and commits the answer (if the \
         first send reached the server, its replay of the first answer is the lookup: no \
         second effect)"
    );
    let live = IdempotencyRecord {
        lease_until_ms: Some(now + 5_000),
        ..record.clone()
    };
    assert_eq!(
        w.gate.next_step(&live, &config, now),
        "its holder inv-1#0 works on it until 2026-06-01T06:00:45Z"
    );
    // The gate's one horizon (23 h by default): past it, looked up, never sent.
    let old = T0 + w.gate.config.claim_horizon_ms;
    assert_eq!(
        w.gate.next_step(&record, &config, old),
        "the reconciler takes it over at its next sweep (every 15 s), looks the effect up \
         under its Idempotency-Key and commits it, never sends it again; finding none, routes \
         it to a person (past_key_retention: 23 h old, past the claim horizon of 23 h, the \
         server may have forgotten the key); if the lookup fails, routes it to a person \
         (past_key_retention: 23 h old, past the claim horizon of 23 h, the server may have \
         forgotten the key)"
    );
    // After the event's end (10:00), before the horizon: looked up; a failed lookup is
    // tried again at the next run.
    let ended = T0 + 5 * 3_600_000;
    assert_eq!(
        w.gate.next_step(&record, &config, ended),
        "the reconciler takes it over at its next sweep (every 15 s), looks the effect up \
         under its Idempotency-Key and commits it, never sends it again; finding none, routes \
         it to a person (event_ended: the event ended at 2026-06-01T10:00:00Z); if the \
         lookup fails, tries again later"
    );
}
