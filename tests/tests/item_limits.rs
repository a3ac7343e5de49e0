//! An event whose record the store would refuse (a label named like a store attribute, an item
//! over DynamoDB's item limit) is rejected before its reserve with a typed reason and reaches a
//! person once, acknowledged: never a retry loop, never a side effect.
//! `cargo test -p gate --features testkit --test item_limits`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use gate::clock::ManualClock;
use gate::consumer::{Gate, GateConfig, Invocation, RecordOutcome};
use gate::effect::{CallOutcome, Effect, LookupOutcome};
use gate::integration::Held;
use gate::manual::{ManualReason, MemoryManualQueue};
use gate::record::{BusinessRow, IdempotencyRecord, Labels, NaturalKey, RecordStatus};
use gate::store::memory::MemoryStore;
use gate::{Event, Integration, Parsed, Rejection};
use gate_testkit::sqs_event;
use serde_json::Value;

const T0: i64 = 1_893_916_800_000;

/// Bodies `{"id", "label", "size"}`: an event labelled `label` with `size` bytes of text; with
/// `row_label`, the business row adds that label. Counts its calls.
#[derive(Default)]
struct Labelled {
    row_label: Option<&'static str>,
    /// The text the label repeats `size` times (default `"x"`).
    fill: Option<&'static str>,
    /// With `Some(n)`, the event's natural key is `n` bytes long.
    natural_key_bytes: Option<usize>,
    /// With `Some(id)`, the effect id every call answers.
    effect_id: Option<&'static str>,
    calls: AtomicUsize,
}

#[async_trait]
impl Integration for Labelled {
    fn operation(&self) -> &str {
        "label-test"
    }

    fn parse(&self, body: &str, _now_ms: i64) -> Parsed {
        let Ok(v) = serde_json::from_str::<Value>(body) else {
            return Parsed::Rejected(Rejection {
                code: "not_json",
                detail: "not JSON".into(),
                ended: false,
            });
        };
        let id = v["id"].as_str().unwrap_or_default().to_string();
        let label = v["label"].as_str().unwrap_or_default().to_string();
        let size = v["size"].as_u64().unwrap_or(1) as usize;
        Parsed::Event(Event {
            key_material: id.clone(),
            business_fields: v.clone(),
            request: body.as_bytes().to_vec(),
            labels: Labels::from([(label, self.fill.unwrap_or("x").repeat(size))]),
            ends_at_ms: None,
            subject: id,
        })
    }

    async fn call(&self, held: &Held<'_>) -> CallOutcome {
        let record = held.record();
        self.calls.fetch_add(1, Ordering::SeqCst);
        CallOutcome::Done(Effect {
            effect_id: self
                .effect_id
                .map_or_else(|| format!("E-{}", &record.event_key[..8]), str::to_string),
            subject: None,
        })
    }

    fn business_row(
        &self,
        record: &IdempotencyRecord,
        effect_id: &str,
        now_ms: i64,
    ) -> BusinessRow {
        let mut row = BusinessRow::for_record(record, effect_id, now_ms);
        if let Some(name) = self.row_label {
            row.labels.insert(name.to_string(), "x".into());
        }
        row
    }

    fn natural_key(&self, _record: &IdempotencyRecord, _now_ms: i64) -> Option<NaturalKey> {
        self.natural_key_bytes.map(|n| NaturalKey {
            key: "k".repeat(n),
            labels: Labels::new(),
            expires_at_s: T0 / 1000 + 86_400,
        })
    }

    fn lookup_by_key(&self) -> Option<&dyn gate::Lookup> {
        Some(self)
    }
}

#[async_trait]
impl gate::Lookup for Labelled {
    async fn lookup(&self, _held: &Held<'_>) -> LookupOutcome {
        LookupOutcome::NotFound
    }
}

struct World {
    gate: Gate,
    store: Arc<MemoryStore>,
    manual: Arc<MemoryManualQueue>,
    integration: Arc<Labelled>,
}

fn world(integration: Labelled) -> World {
    let store = Arc::new(MemoryStore::new());
    let manual = Arc::new(MemoryManualQueue::new());
    let integration = Arc::new(integration);
    let gate = Gate {
        config: GateConfig::new("limits"),
        store: store.clone(),
        integration: integration.clone(),
        manual: manual.clone(),
        clock: Arc::new(ManualClock::new(T0)),
    };
    World {
        gate,
        store,
        manual,
        integration,
    }
}

/// Delivers `body` twice, in two invocations; the two outcomes.
async fn twice(w: &World, body: &str) -> Vec<RecordOutcome> {
    let mut outcomes = Vec::new();
    for n in 0..2 {
        let invocation = Invocation {
            request_id: format!("inv-{n}"),
            deadline_ms: T0 + 60_000,
        };
        let report = w
            .gate
            .handle_batch(sqs_event(&[(&format!("m-{n}"), body)]), &invocation)
            .await;
        assert!(
            report.response.batch_item_failures.is_empty(),
            "acknowledged"
        );
        outcomes.push(report.records[0].outcome.clone());
    }
    outcomes
}

fn rejected_code(outcome: &RecordOutcome) -> &'static str {
    match outcome {
        RecordOutcome::Rejected(r) => r.code,
        other => panic!("not rejected: {other:?}"),
    }
}

/// Only routing records: no record of the event itself was ever written.
fn no_event_record(store: &MemoryStore) {
    assert!(store
        .records()
        .iter()
        .all(|r| r.status == RecordStatus::Manual && r.labels.values().all(String::is_empty)));
}

#[tokio::test]
async fn a_label_named_like_a_store_attribute_is_rejected_once() {
    let w = world(Labelled::default());
    let body = r#"{"id":"e-1","label":"status","size":3}"#;
    let outcomes = twice(&w, body).await;
    assert_eq!(rejected_code(&outcomes[0]), "label_reserved");
    assert_eq!(rejected_code(&outcomes[1]), "label_reserved");
    let items = w.manual.items();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].reason, ManualReason::Rejected);
    assert_eq!(
        items[0].detail,
        "label_reserved: label \"status\" is named like one of the store's own attributes"
    );
    assert_eq!(items[0].original_body, body);
    assert_eq!(w.integration.calls.load(Ordering::SeqCst), 0);
    no_event_record(&w.store);
}

/// Labels of 150,000 bytes leave no room for the manual item a routing would store (up to
/// 261,120 bytes) under the 400,000-byte limit: rejected. 100,000 bytes fit and commit.
#[tokio::test]
async fn an_event_too_large_for_its_later_states_is_rejected_once() {
    let w = world(Labelled::default());
    let body = r#"{"id":"e-2","label":"note","size":150000}"#;
    let outcomes = twice(&w, body).await;
    assert_eq!(rejected_code(&outcomes[0]), "item_too_large");
    assert_eq!(rejected_code(&outcomes[1]), "item_too_large");
    let items = w.manual.items();
    assert_eq!(items.len(), 1, "{items:?}");
    assert!(
        items[0]
            .detail
            .starts_with("item_too_large: the item takes "),
        "{}",
        items[0].detail
    );
    assert!(items[0]
        .detail
        .ends_with("over the store's item limit of 400000 bytes"));
    no_event_record(&w.store);

    let w = world(Labelled::default());
    let outcomes = twice(&w, r#"{"id":"e-3","label":"note","size":100000}"#).await;
    assert!(
        matches!(outcomes[0], RecordOutcome::Committed { .. }),
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes[1],
        RecordOutcome::Duplicate(RecordStatus::Committed)
    );
    assert!(w.manual.items().is_empty());
}

/// A business row the store would refuse is seen before the reserve, not after the side effect.
#[tokio::test]
async fn a_reserved_label_on_the_business_row_is_rejected_before_any_call() {
    let w = world(Labelled {
        row_label: Some("booked_at"),
        ..Labelled::default()
    });
    let outcomes = twice(&w, r#"{"id":"e-4","label":"job","size":3}"#).await;
    assert_eq!(rejected_code(&outcomes[0]), "label_reserved");
    assert_eq!(w.manual.items().len(), 1);
    assert_eq!(w.integration.calls.load(Ordering::SeqCst), 0);
    assert!(w.store.business_rows().is_empty());
}

/// A body of `bytes` bytes exactly: `{"id", "label", "size": 1}` padded with JSON whitespace.
fn body_of(id: &str, bytes: usize) -> String {
    let base = format!(r#"{{"id":"{id}","label":"note","size":1}}"#);
    format!(
        "{}{}}}",
        &base[..base.len() - 1],
        " ".repeat(bytes - base.len())
    )
}

/// An integration with no body limit of its own, and notifications of 450 KB and 1,000 KB (SQS
/// carries up to 1 MiB): the stored request alone is over DynamoDB's 400 KB item, so the core's
/// check rejects the event before the reserve (`item_too_large`), on every delivery, with no side
/// effect; exactly one manual item, cut to the manual queue's message limit and saying so (the
/// whole body's size and SHA-256); the only record is the routing record, under the item limit.
#[tokio::test]
async fn notifications_of_450_kb_and_1000_kb_are_rejected_before_the_reserve() {
    use gate::store::limits::{record_bytes_at_most, record_item_bytes, MAX_ITEM_BYTES};
    for bytes in [450_000, 1_000_000] {
        let w = world(Labelled::default());
        let body = body_of("e-5", bytes);
        assert_eq!(body.len(), bytes);
        let outcomes = twice(&w, &body).await;
        for outcome in &outcomes {
            let RecordOutcome::Rejected(r) = outcome else {
                panic!("{bytes}: {outcome:?}")
            };
            assert_eq!(r.code, "item_too_large");
            assert!(
                r.detail
                    .ends_with("over the store's item limit of 400000 bytes"),
                "{}",
                r.detail
            );
            // The record the gate would have reserved: its size as DynamoDB counts it is what
            // the rejection reports.
            let taken: usize = r
                .detail
                .trim_start_matches("the item takes ")
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert!(taken > bytes && taken > MAX_ITEM_BYTES, "{taken}");
        }
        assert_eq!(w.integration.calls.load(Ordering::SeqCst), 0);
        let items = w.manual.items();
        assert_eq!(items.len(), 1, "{items:?}");
        assert_eq!(items[0].reason, ManualReason::Rejected);
        assert!(items[0].detail.starts_with("item_too_large: "));
        let cut = items[0]
            .original_body_cut
            .clone()
            .expect("cut, and says so");
        assert_eq!(cut.bytes, bytes);
        assert_eq!(cut.sha256, gate::keys::sha256_hex(body.as_bytes()));
        assert!(body.starts_with(&items[0].original_body));
        assert!(items[0].to_json().len() <= gate::manual::MAX_ITEM_JSON_BYTES);
        no_event_record(&w.store);
        let records = w.store.records();
        assert_eq!(records.len(), 1, "the routing record only");
        assert!(record_item_bytes(&records[0]) < MAX_ITEM_BYTES);
        assert!(record_bytes_at_most(&records[0]) < MAX_ITEM_BYTES);
    }
}

/// A record takes at most `MAX_EFFECT_IDS` distinct effect ids: a further one is not added (the
/// record is returned as it is), so the set cannot grow the item past the limit.
#[tokio::test]
async fn a_record_keeps_at_most_max_effect_ids() {
    use gate::store::limits::MAX_EFFECT_IDS;
    use gate::store::IdempotencyStore;
    let w = world(Labelled::default());
    let outcomes = twice(&w, r#"{"id":"e-6","label":"note","size":1}"#).await;
    assert!(matches!(outcomes[0], RecordOutcome::Committed { .. }));
    let pk = w.store.records()[0].pk.clone();
    // The committed effect id is the first.
    assert_eq!(w.store.records()[0].effect_ids.len(), 1);
    for i in 0..MAX_EFFECT_IDS + 4 {
        let after = w
            .store
            .record_effect_id(&pk, &format!("E-{i:03}"), T0)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(after.effect_ids.len(), (i + 2).min(MAX_EFFECT_IDS));
    }
    let kept = w.store.records()[0].effect_ids.clone();
    assert_eq!(kept.len(), 16);
    assert!(kept.contains("E-000") && kept.contains("E-014") && !kept.contains("E-015"));
}

/// Labels are sized in UTF-8 bytes, not characters: 75,000 `é` (150,000 bytes) are as large as
/// 150,000 `x`, and rejected the same way.
#[tokio::test]
async fn labels_are_sized_in_bytes_not_characters() {
    let w = world(Labelled {
        fill: Some("é"),
        ..Labelled::default()
    });
    let outcomes = twice(&w, r#"{"id":"e-u","label":"note","size":75000}"#).await;
    assert_eq!(rejected_code(&outcomes[0]), "item_too_large");
    assert_eq!(w.manual.items().len(), 1);
    assert_eq!(w.integration.calls.load(Ordering::SeqCst), 0);
    no_event_record(&w.store);
}

/// A natural key whose item's `pk` would be longer than DynamoDB's 2,048-byte partition key
/// (AWS, DynamoDB quotas: "partition key value: 2048 bytes") is refused every time by the commit,
/// after the side effect: rejected before the reserve instead (`key_too_long`), no call. A key
/// whose `pk` is exactly 2,048 bytes commits.
#[tokio::test]
async fn a_natural_key_longer_than_a_partition_key_is_rejected_before_any_call() {
    let prefix = "limits#nk#".len();
    let w = world(Labelled {
        natural_key_bytes: Some(2049 - prefix),
        ..Labelled::default()
    });
    let outcomes = twice(&w, r#"{"id":"e-nk","label":"job","size":3}"#).await;
    assert_eq!(rejected_code(&outcomes[0]), "key_too_long");
    assert_eq!(rejected_code(&outcomes[1]), "key_too_long");
    let items = w.manual.items();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(
        items[0].detail,
        "key_too_long: a key of the item takes 2049 bytes, over the store's partition key limit of 2048 bytes"
    );
    assert_eq!(w.integration.calls.load(Ordering::SeqCst), 0);
    assert!(w.store.business_rows().is_empty());
    no_event_record(&w.store);

    let w = world(Labelled {
        natural_key_bytes: Some(2048 - prefix),
        ..Labelled::default()
    });
    let outcomes = twice(&w, r#"{"id":"e-nk2","label":"job","size":3}"#).await;
    assert!(
        matches!(outcomes[0], RecordOutcome::Committed { .. }),
        "{outcomes:?}"
    );
}

/// An empty effect id cannot be stored (DynamoDB refuses an empty string in a string set, the
/// record's `effect_ids`: a `ValidationException` at the commit, every time): the effect is made,
/// so the record goes to a person (`server_answer_invalid`), never committed, no business row.
#[tokio::test]
async fn an_empty_effect_id_goes_to_a_person_not_to_the_commit() {
    let w = world(Labelled {
        effect_id: Some(""),
        ..Labelled::default()
    });
    let invocation = Invocation {
        request_id: "inv-e".into(),
        deadline_ms: T0 + 60_000,
    };
    let report = w
        .gate
        .handle_batch(
            sqs_event(&[("m-e", r#"{"id":"e-empty","label":"job","size":3}"#)]),
            &invocation,
        )
        .await;
    assert!(report.response.batch_item_failures.is_empty());
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Manual(ManualReason::ServerAnswerInvalid)
    );
    assert_eq!(w.integration.calls.load(Ordering::SeqCst), 1);
    assert!(w.store.business_rows().is_empty());
    let items = w.manual.items();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].reason, ManualReason::ServerAnswerInvalid);
    assert!(w
        .store
        .records()
        .iter()
        .all(|r| r.status != RecordStatus::Committed && r.effect_ids.is_empty()));
}
