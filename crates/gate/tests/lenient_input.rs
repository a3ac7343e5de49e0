//! The consumer's lenient read of hostile SQS events: records with missing
//! fields, fields of the wrong type, a body that is not a string, duplicate `messageId`s, an
//! empty `Records`, a 1 MiB record. Nothing is lost: every record is processed, acknowledged with
//! a manual item, or a batch item failure; never silently acknowledged.
//! `cargo test -p gate --test lenient_input`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use gate::clock::ManualClock;
use gate::consumer::{Gate, GateConfig, Invocation, RecordOutcome, SqsInput, UNREADABLE_RECORD};
use gate::effect::{CallOutcome, Effect, LookupOutcome};
use gate::integration::Held;
use gate::manual::{ManualReason, MemoryManualQueue};
use gate::record::Labels;
use gate::store::memory::MemoryStore;
use gate::{Event, Integration, Parsed, Rejection};
use serde_json::{json, Value};

const T0: i64 = 1_893_916_800_000;

/// Bodies `{"id": ...}` are events keyed by `id`; anything else is rejected `not_json`.
#[derive(Default)]
struct Ids {
    calls: AtomicUsize,
}

#[async_trait]
impl Integration for Ids {
    fn operation(&self) -> &str {
        "lenient-test"
    }

    fn parse(&self, body: &str, _now_ms: i64) -> Parsed {
        match serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|v| v["id"].as_str().map(str::to_string))
        {
            Some(id) => Parsed::Event(Event {
                key_material: id.clone(),
                business_fields: json!({ "id": id }),
                request: body.as_bytes().to_vec(),
                labels: Labels::new(),
                ends_at_ms: None,
                subject: id,
            }),
            None => Parsed::Rejected(Rejection {
                code: "not_json",
                detail: "not an event".into(),
                ended: false,
            }),
        }
    }

    async fn call(&self, held: &Held<'_>) -> CallOutcome {
        self.calls.fetch_add(1, Ordering::SeqCst);
        CallOutcome::Done(Effect {
            effect_id: format!("E-{}", &held.record().event_key[..8]),
            subject: None,
        })
    }

    fn lookup_by_key(&self) -> Option<&dyn gate::Lookup> {
        Some(self)
    }
}

#[async_trait]
impl gate::Lookup for Ids {
    async fn lookup(&self, _held: &Held<'_>) -> LookupOutcome {
        LookupOutcome::NotFound
    }
}

fn record(id: &str, body: Value) -> Value {
    json!({
        "messageId": id,
        "receiptHandle": format!("rh-{id}"),
        "body": body,
        "attributes": {"ApproximateReceiveCount": "1"},
        "messageAttributes": {},
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:eu-west-1:000000000000:q",
        "awsRegion": "eu-west-1"
    })
}

fn gate() -> (Gate, Arc<MemoryManualQueue>, Arc<Ids>) {
    let manual = Arc::new(MemoryManualQueue::new());
    let integration = Arc::new(Ids::default());
    let gate = Gate {
        config: GateConfig::new("lenient"),
        store: Arc::new(MemoryStore::new()),
        integration: integration.clone(),
        manual: manual.clone(),
        clock: Arc::new(ManualClock::new(T0)),
    };
    (gate, manual, integration)
}

fn invocation() -> Invocation {
    Invocation {
        request_id: "inv-1".into(),
        deadline_ms: T0 + 60_000,
    }
}

/// A batch of every kind of record: each is reported once, processed or acknowledged with a
/// manual item; none is a batch item failure (nothing here is transient), none silently dropped.
#[tokio::test]
async fn every_record_of_a_hostile_batch_is_accounted_for() {
    let (gate, manual, integration) = gate();
    let mut wrong_types = record("m-types", json!(r#"{"id":"e-2"}"#));
    wrong_types["attributes"] = json!("SECRET");
    wrong_types["receiptHandle"] = json!(42);
    let missing_fields = json!({"messageId": "m-bare"});
    let big = "x".repeat(1024 * 1024);
    let event = json!({"Records": [
        record("m-ok", json!(r#"{"id":"e-1"}"#)),
        wrong_types,
        record("m-obj", json!({"id": "e-3"})),
        missing_fields,
        record("m-dup", json!(r#"{"id":"e-4"}"#)),
        record("m-dup", json!({"not": "a string"})),
        record("m-big", json!({ "pad": big })),
    ]});
    let input = SqsInput::from_value(event);
    assert_eq!(input.whole_event_error, None);
    assert_eq!(input.records.len(), 3, "m-ok, m-bare, m-dup");
    assert_eq!(input.unreadable.len(), 4);
    let report = gate.handle_input(input, &invocation()).await;

    assert!(
        report.response.batch_item_failures.is_empty(),
        "{:?}",
        report.response.batch_item_failures
    );
    let outcomes: Vec<(&str, &RecordOutcome)> = report
        .records
        .iter()
        .map(|r| (r.message_id.as_str(), &r.outcome))
        .collect();
    assert_eq!(outcomes.len(), 7, "{outcomes:?}");
    let committed: HashSet<&str> = outcomes
        .iter()
        .filter(|(_, o)| matches!(o, RecordOutcome::Committed { .. }))
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(committed, HashSet::from(["m-ok", "m-dup"]));
    assert_eq!(integration.calls.load(Ordering::SeqCst), 2);
    for (id, outcome) in &outcomes {
        if committed.contains(id) && matches!(outcome, RecordOutcome::Committed { .. }) {
            continue;
        }
        let RecordOutcome::Rejected(r) = outcome else {
            panic!("{id}: {outcome:?}");
        };
        let want = if *id == "m-bare" {
            "not_json"
        } else {
            UNREADABLE_RECORD
        };
        assert_eq!(r.code, want, "{id}");
    }
    // One manual item per rejected record (m-bare's empty body; the four unreadable ones, each
    // with its own original body), each naming its message.
    let items = manual.items();
    let mut ids: Vec<&str> = items.iter().map(|i| i.message_id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["m-bare", "m-big", "m-dup", "m-obj", "m-types"]);
    assert!(items.iter().all(|i| i.reason == ManualReason::Rejected));
    let types = items.iter().find(|i| i.message_id == "m-types").unwrap();
    assert_eq!(types.original_body, r#"{"id":"e-2"}"#);
    assert!(!types.detail.contains("SECRET"), "{}", types.detail);
    // The 1 MiB record is kept cut, and says so.
    let big_item = items.iter().find(|i| i.message_id == "m-big").unwrap();
    let cut = big_item.original_body_cut.as_ref().expect("cut");
    assert!(cut.bytes > 1024 * 1024, "{}", cut.bytes);
}

/// An empty `Records` is an empty answer: no failure, nothing routed.
#[tokio::test]
async fn an_empty_batch_is_an_empty_answer() {
    let (gate, manual, _) = gate();
    let input = SqsInput::from_value(json!({"Records": []}));
    assert_eq!(input.whole_event_error, None);
    let report = gate.handle_input(input, &invocation()).await;
    assert!(report.records.is_empty());
    assert!(report.response.batch_item_failures.is_empty());
    assert!(manual.items().is_empty());
}

/// A record without a usable `messageId` (missing, empty, a number) cannot be named in
/// `batchItemFailures`: the whole event fails (SQS retries it, then its dead-letter queue),
/// never a silent acknowledgement.
#[test]
fn a_record_without_a_usable_message_id_fails_the_whole_event() {
    for bad in [
        json!({"body": 1}),
        json!({"messageId": "", "body": 1}),
        json!({"messageId": 7, "body": 1}),
        json!("SECRET"),
    ] {
        let input =
            SqsInput::from_value(json!({"Records": [record("m-ok", json!("{}")), bad.clone()]}));
        let why = input.whole_event_error.unwrap_or_else(|| panic!("{bad}"));
        assert_eq!(
            why,
            "the SQS record at position 1 has no readable `messageId`"
        );
    }
}
