//! Property: the strict body parser never panics and classifies every input, and the consumer
//! acknowledges every body it can never accept (routed to the manual queue once), whatever the
//! bytes: arbitrary strings, arbitrary JSON values, and valid bodies with one field replaced by an
//! arbitrary JSON value.

use std::sync::Arc;

use async_trait::async_trait;
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use gate::clock::ManualClock;
use gate::consumer::{Gate, GateConfig, Invocation, RecordOutcome};
use gate::manual::{ManualReason, MemoryManualQueue};
use gate::store::memory::MemoryStore;
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use truck_slot::derive_keys;
use truck_slot::notification::{parse_notification, RejectReason};
use truck_slot::terminal::{CallOutcome, Effect, LookupOutcome, SlotTerminal};

/// 2025-06-09T04:00:00Z.
const NOW: i64 = 1_749_441_600_000;

fn terminals() -> Vec<String> {
    vec!["ECT-DELTA".to_string()]
}

fn good() -> Value {
    json!({
        "notificationId": "PCS-1",
        "equipment_number": "CSQU3054383",
        "preferred_window": {"start": "2025-06-09T08:00:00Z", "end": "2025-06-09T10:00:00Z"},
        "terminal": "ECT-DELTA",
        "pin": "4711"
    })
}

/// Any JSON value, nested a few levels.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e300f64..1e300).prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        "[A-Z]{4}[0-9]{7}".prop_map(Value::String),
        "20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-5][0-9](Z|[+-][01][0-9]:[0-5][0-9])"
            .prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("notificationId".to_string()),
                    Just("equipment_number".to_string()),
                    Just("preferred_window".to_string()),
                    Just("start".to_string()),
                    Just("end".to_string()),
                    Just("terminal".to_string()),
                    Just("pin".to_string()),
                    any::<String>(),
                ],
                inner,
                0..7
            )
            .prop_map(|m| Value::Object(m.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

/// Every reason has a short, stable snake_case code and a message.
fn assert_classified(result: &Result<truck_slot::notification::Notification, RejectReason>) {
    match result {
        Ok(n) => {
            let keys = derive_keys(n).expect("a parsed notification always has keys");
            assert_eq!(keys.event_key.len(), 64);
            assert_eq!(keys.fingerprint.len(), 64);
            assert!(n.preferred_window.start < n.preferred_window.end);
        }
        Err(reason) => {
            let code = reason.code();
            assert!(
                !code.is_empty() && code.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{code}"
            );
            assert!(!reason.to_string().is_empty());
        }
    }
}

/// A terminal that answers every claim with a slot.
struct Always;

#[async_trait]
impl SlotTerminal for Always {
    async fn claim(&self, _op_key: &str, _request: &[u8]) -> CallOutcome {
        CallOutcome::Done(Effect {
            effect_id: "S-1".into(),
            subject: None,
        })
    }

    async fn lookup(&self, _op_key: &str, _request: &[u8]) -> LookupOutcome {
        LookupOutcome::NotFound
    }
}

/// Sends `body` twice (two deliveries) through a gate; asserts nothing is retried and a body the
/// parser rejects reaches the manual queue exactly once.
fn through_the_gate(body: &str) {
    let store = Arc::new(MemoryStore::new());
    let manual = Arc::new(MemoryManualQueue::new());
    let gate = Gate {
        config: GateConfig::new("prop"),
        store: store.clone(),
        integration: Arc::new(truck_slot::TruckSlot::new(Arc::new(Always), terminals())),
        manual: manual.clone(),
        clock: Arc::new(ManualClock::new(NOW)),
    };
    let invocation = Invocation {
        request_id: "inv-1".into(),
        deadline_ms: NOW + 60_000,
    };
    let mut event = SqsEvent::default();
    for id in ["m-1", "m-2"] {
        let mut m = SqsMessage::default();
        m.message_id = Some(id.into());
        m.body = Some(body.to_string());
        event.records.push(m);
    }
    let report = futures::executor::block_on(gate.handle_batch(event, &invocation));
    assert!(
        report.response.batch_item_failures.is_empty(),
        "{:?}",
        report.records
    );
    let parsed = parse_notification(body, NOW, &terminals());
    let rejected = manual
        .items()
        .iter()
        .filter(|i| matches!(i.reason, ManualReason::Rejected | ManualReason::EventEnded))
        .count();
    match parsed {
        Ok(_) => {
            assert_eq!(rejected, 0);
            assert!(report.records.iter().all(|r| matches!(
                r.outcome,
                RecordOutcome::Committed { .. }
                    | RecordOutcome::Duplicate(_)
                    | RecordOutcome::DuplicateInFlight
            )));
        }
        Err(_) => {
            assert_eq!(rejected, 1, "routed once, not once per delivery");
            assert!(report
                .records
                .iter()
                .all(|r| matches!(r.outcome, RecordOutcome::Rejected(_))));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_strings_are_classified(body in any::<String>()) {
        assert_classified(&parse_notification(&body, NOW, &terminals()));
    }

    #[test]
    fn arbitrary_json_values_are_classified(value in any_json()) {
        let body = value.to_string();
        assert_classified(&parse_notification(&body, NOW, &terminals()));
    }

    #[test]
    fn a_good_body_with_one_field_replaced_is_classified(
        field in prop_oneof![
            Just("notificationId"), Just("equipment_number"), Just("preferred_window"),
            Just("terminal"), Just("pin"), Just("extra"),
        ],
        value in any_json(),
        now_offset_h in -48i64..48,
    ) {
        let mut body = good();
        body[field] = value;
        let now = NOW + now_offset_h * 3_600_000;
        assert_classified(&parse_notification(&body.to_string(), now, &terminals()));
    }

    #[test]
    fn a_window_with_arbitrary_bounds_is_classified(start in any_json(), end in any_json()) {
        let mut body = good();
        body["preferred_window"] = json!({"start": start, "end": end});
        assert_classified(&parse_notification(&body.to_string(), NOW, &terminals()));
    }

    #[test]
    fn the_gate_acknowledges_every_body_and_routes_a_rejected_one_once(
        body in prop_oneof![
            any::<String>(),
            any_json().prop_map(|v| v.to_string()),
            (any_json(), prop_oneof![Just("pin"), Just("terminal"), Just("equipment_number")])
                .prop_map(|(v, f)| { let mut b = good(); b[f] = v; b.to_string() }),
        ],
    ) {
        through_the_gate(&body);
    }
}

#[test]
fn the_good_body_passes_the_gate() {
    through_the_gate(&good().to_string());
}
