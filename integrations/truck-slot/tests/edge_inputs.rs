//! Bad input at every edge, through the real consumer handler: each gets a typed reason and a
//! route, never a panic and never a retry loop.
//!
//! * Bodies that can never succeed are routed to the manual queue with their reason code and the
//!   original body, and acknowledged (not in `batchItemFailures`); the terminal is never called.
//! * Terminal answers: a `2xx` without a slot id is transient (the slot may exist under the
//!   key: the same key is asked again, never a new one), bounded by SQS's `maxReceiveCount` for
//!   the message and by the key's retention for the record, after which a person gets it; a slot
//!   id outside the terminal's format or quoting the PIN, and an answer for another container, are
//!   permanent (`terminal_answer_invalid`).
//!
//! Bodies are here; look-alike identifiers and numbers in module `identifiers`, terminal answers
//! in module `answers`.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use aws_lambda_events::event::sqs::SqsEvent;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{BatchReport, Gate, GateConfig, Invocation, RecordOutcome};
use gate::manual::{ManualItem, ManualReason, MemoryManualQueue};
use gate::reconciler::ReconcilerConfig;
use gate::record::{record_pk, RecordStatus};
use gate::store::memory::MemoryStore;
use gate::store::IdempotencyStore;
use serde_json::{json, Value};
use support::{json, raw, Answer, Seen};
use truck_slot::keys::event_key_of;
use truck_slot::notification::{
    MAX_BODY_BYTES, MAX_EQUIPMENT_NUMBER_CHARS, MAX_NOTIFICATION_ID_CHARS, MAX_PIN_CHARS,
    MAX_TERMINAL_CHARS,
};
use truck_slot::terminal::{
    CallOutcome, HttpTerminal, HttpTerminalConfig, LookupOutcome, SlotTerminal, MAX_SLOT_ID_CHARS,
};

/// 2026-06-01T06:00:00Z, before every window used here.
const T0: i64 = 1_780_293_600_000;
const INTEGRATION: &str = "edge";
const CONTAINER: &str = "CSQU3054383";

/// A terminal that must not be called: counts calls and answers transient.
#[derive(Default)]
struct Untouched {
    calls: AtomicUsize,
}

#[async_trait]
impl SlotTerminal for Untouched {
    async fn claim(&self, _op_key: &str, _request: &[u8]) -> CallOutcome {
        self.calls.fetch_add(1, Ordering::SeqCst);
        CallOutcome::Transient("must not be called".into())
    }
    async fn lookup(&self, _op_key: &str, _request: &[u8]) -> LookupOutcome {
        self.calls.fetch_add(1, Ordering::SeqCst);
        LookupOutcome::Transient("must not be called".into())
    }
}

struct World {
    gate: Gate,
    store: Arc<MemoryStore>,
    manual: Arc<MemoryManualQueue>,
    clock: Arc<ManualClock>,
}

fn world(terminal: Arc<dyn SlotTerminal>) -> World {
    let clock = Arc::new(ManualClock::new(T0));
    let store = Arc::new(MemoryStore::new());
    let manual = Arc::new(MemoryManualQueue::new());
    let gate = Gate {
        config: GateConfig::new(INTEGRATION),
        store: store.clone(),
        integration: Arc::new(truck_slot::TruckSlot::new(
            terminal,
            vec!["ECT-DELTA".into()],
        )),
        manual: manual.clone(),
        clock: clock.clone(),
    };
    World {
        gate,
        store,
        manual,
        clock,
    }
}

async fn scripted_world(
    script: impl Fn(&Seen) -> Answer + Send + Sync + 'static,
) -> (World, support::Scripted) {
    let terminal = support::spawn(script).await;
    let http = HttpTerminal::new(HttpTerminalConfig::new(terminal.base_url.clone())).unwrap();
    (world(Arc::new(http)), terminal)
}

fn good() -> Value {
    json!({
        "notificationId": "PCS-1",
        "equipment_number": CONTAINER,
        "preferred_window": {"start": "2026-06-01T08:00:00Z", "end": "2026-06-01T10:00:00Z"},
        "terminal": "ECT-DELTA",
        "pin": "RLS-104233"
    })
}

fn with(field: &str, value: Value) -> String {
    let mut v = good();
    v[field] = value;
    v.to_string()
}

/// One record; `None` for a record without a body.
fn event(message_id: &str, body: Option<&str>) -> SqsEvent {
    let mut event = gate_testkit::sqs_event(&[(message_id, body.unwrap_or_default())]);
    event.records[0].body = body.map(str::to_string);
    event
}

fn invocation(w: &World, id: &str) -> Invocation {
    Invocation {
        request_id: id.into(),
        deadline_ms: w.clock.now_ms() + 30_000,
    }
}

fn failures(report: &BatchReport) -> Vec<String> {
    report
        .response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

/// Sends `body` as one record through a gate whose terminal must not be called; asserts it was
/// rejected with `code`, acknowledged, and routed to the manual queue with its original body.
async fn assert_rejected(body: Option<&str>, code: &str) -> ManualItem {
    let untouched = Arc::new(Untouched::default());
    let w = world(untouched.clone());
    let report = w
        .gate
        .handle_batch(event("m-1", body), &invocation(&w, "inv-1"))
        .await;
    let outcome = &report.records[0].outcome;
    let RecordOutcome::Rejected(reason) = outcome else {
        panic!("expected a rejection with {code}, got {outcome:?}");
    };
    assert_eq!(reason.code(), code, "{reason}");
    assert!(failures(&report).is_empty(), "acknowledged, not retried");
    assert_eq!(untouched.calls.load(Ordering::SeqCst), 0, "terminal called");
    // At most the routing record that makes the routing happen once, finished: no claim record.
    for record in w.store.records() {
        assert_eq!(record.status, RecordStatus::Manual, "{record:?}");
        assert!(record.effect_ids.is_empty());
    }
    let items = w.manual.items();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].reason, ManualReason::Rejected);
    let body = body.unwrap_or("");
    match &items[0].original_body_cut {
        // Whole, when its JSON fits the manual queue's message limit.
        None => assert_eq!(items[0].original_body, body),
        // Else a prefix, with the full size and SHA-256 to find the rest by.
        Some(cut) => {
            assert!(body.starts_with(&items[0].original_body));
            assert_eq!(cut.bytes, body.len());
            assert_eq!(cut.sha256, truck_slot::keys::sha256_hex(body.as_bytes()));
        }
    }
    assert!(
        items[0].detail.starts_with(&format!("{code}: ")),
        "{}",
        items[0].detail
    );
    assert_eq!(items[0].message_id, "m-1");
    items[0].clone()
}

// --- bodies -----------------------------------------------------------------------------------

#[tokio::test]
async fn an_oversized_body_is_routed_whole_or_cut_to_fit() {
    let body = with("padding", Value::from("x".repeat(MAX_BODY_BYTES)));
    let item = assert_rejected(Some(&body), "body_too_large").await;
    assert!(item.detail.contains(&MAX_BODY_BYTES.to_string()));
    assert_eq!(item.original_body_cut, None, "64 KiB fits whole");
    // SQS's own maximum (256 KiB) does not fit a 256 KiB manual message with its envelope: cut.
    let sqs_max = with("padding", Value::from("x".repeat(256 * 1024 - 300)));
    let item = assert_rejected(Some(&sqs_max), "body_too_large").await;
    assert!(item.original_body_cut.is_some());
    assert!(item.to_json().len() <= gate::manual::MAX_ITEM_JSON_BYTES);
}

/// A body of `bytes` bytes exactly: the good notification padded with spaces before its last
/// brace (JSON whitespace), so only its size is wrong.
fn body_of(bytes: usize) -> String {
    let base = good().to_string();
    let pad = bytes - base.len();
    format!("{}{}}}", &base[..base.len() - 1], " ".repeat(pad))
}

/// SQS carries messages of up to 1 MiB (since August 2025); a DynamoDB item holds at most
/// 400 KB. Notifications of 450 KB and 1,000 KB: rejected by their size before the reserve
/// (`body_too_large`, the integration's 64 KiB), acknowledged on every delivery, exactly one
/// manual item, which says it is cut (full size and SHA-256 of the whole body) because the body
/// does not fit a manual-queue message; the only record is the routing record, under the item
/// limit.
#[tokio::test]
async fn notifications_of_450_kb_and_1000_kb_are_rejected_before_the_reserve() {
    for bytes in [450_000, 1_000_000] {
        let body = body_of(bytes);
        assert_eq!(body.len(), bytes);
        let untouched = Arc::new(Untouched::default());
        let w = world(untouched.clone());
        for n in 0..2 {
            let report = w
                .gate
                .handle_batch(
                    event(&format!("m-{n}"), Some(&body)),
                    &invocation(&w, &format!("inv-{n}")),
                )
                .await;
            let RecordOutcome::Rejected(reason) = &report.records[0].outcome else {
                panic!("{bytes}: {:?}", report.records[0].outcome);
            };
            assert_eq!(reason.code(), "body_too_large");
            assert_eq!(
                reason.detail,
                format!("body has {bytes} bytes, more than the limit of {MAX_BODY_BYTES}")
            );
            assert!(failures(&report).is_empty(), "acknowledged");
        }
        assert_eq!(untouched.calls.load(Ordering::SeqCst), 0);
        let items = w.manual.items();
        assert_eq!(items.len(), 1, "one case for two deliveries");
        let cut = items[0]
            .original_body_cut
            .clone()
            .expect("cut, and says so");
        assert_eq!(cut.bytes, bytes);
        assert_eq!(cut.sha256, truck_slot::keys::sha256_hex(body.as_bytes()));
        assert!(body.starts_with(&items[0].original_body));
        let json = items[0].to_json();
        assert!(json.len() <= gate::manual::MAX_ITEM_JSON_BYTES);
        let message: Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(message["original_body_truncated"], true);
        assert_eq!(message["original_body_bytes"], bytes);
        let records = w.store.records();
        assert_eq!(records.len(), 1, "the routing record only");
        assert_eq!(records[0].status, RecordStatus::Manual);
        assert!(
            gate::store::limits::record_item_bytes(&records[0])
                < gate::store::limits::MAX_ITEM_BYTES
        );
    }
}

#[tokio::test]
async fn oversized_fields_are_refused() {
    for (field, limit) in [
        ("notificationId", MAX_NOTIFICATION_ID_CHARS),
        ("pin", MAX_PIN_CHARS),
        ("terminal", MAX_TERMINAL_CHARS),
        ("equipment_number", MAX_EQUIPMENT_NUMBER_CHARS),
    ] {
        let body = with(field, Value::from("A".repeat(limit + 1)));
        let item = assert_rejected(Some(&body), "field_too_long").await;
        assert!(item.detail.contains(field), "{}", item.detail);
    }
}

#[tokio::test]
async fn control_characters_in_fields_are_refused() {
    for (field, value) in [
        ("notificationId", "PCS-1\u{0}"),
        ("notificationId", "PCS-1\nforged log line"),
        ("terminal", "ECT-DELTA\r"),
        ("pin", "RLS\u{1b}[2J"),
        ("equipment_number", "CSQU\t3054383"),
    ] {
        let body = with(field, Value::from(value));
        let item = assert_rejected(Some(&body), "control_character").await;
        assert!(item.detail.contains(field), "{}", item.detail);
    }
}

#[tokio::test]
async fn replacement_characters_from_non_utf8_senders_are_refused() {
    let body = with("notificationId", Value::from("PCS-\u{fffd}\u{fffd}-1"));
    assert_rejected(Some(&body), "replacement_character").await;
    let body = with("pin", Value::from("RLS-\u{fffd}"));
    assert_rejected(Some(&body), "replacement_character").await;
}

#[tokio::test]
async fn lone_surrogates_and_bad_escapes_are_not_json() {
    for escape in [r"\ud800", r"\udfff", r"\ud800\u0041", r"\x41", r"\u12"] {
        let body = good()
            .to_string()
            .replace("\"PCS-1\"", &format!("\"PCS-{escape}\""));
        assert!(body.contains(escape));
        let item = assert_rejected(Some(&body), "not_json").await;
        assert!(!item.detail.is_empty());
        // A lone surrogate is named as one, with the escape, not as a broken hex escape.
        let lone = escape.starts_with(r"\ud");
        assert_eq!(
            item.detail.contains(&format!(
                "lone surrogate {}",
                escape.get(..6).unwrap_or(escape)
            )),
            lone,
            "{escape}: {}",
            item.detail
        );
        assert!(
            !item.detail.contains("end of hex escape"),
            "{}",
            item.detail
        );
    }
    // No body at all, and bodies that are JSON but not an object.
    assert_rejected(None, "not_json").await;
    assert_rejected(Some("\"just a string\""), "not_json").await;
    assert_rejected(Some("[1,2]"), "not_json").await;
}

#[tokio::test]
async fn numbers_where_strings_belong_are_refused() {
    for field in ["notificationId", "equipment_number", "terminal", "pin"] {
        let body = with(field, Value::from(3054383));
        let item = assert_rejected(Some(&body), "wrong_type").await;
        assert!(item.detail.contains(field), "{}", item.detail);
    }
    let body = with(
        "preferred_window",
        json!({"start": 1780300800, "end": "2026-06-01T10:00:00Z"}),
    );
    assert_rejected(Some(&body), "wrong_type").await;
    assert_rejected(
        Some(&with("preferred_window", json!("08:00-10:00"))),
        "wrong_type",
    )
    .await;
}

#[tokio::test]
async fn duplicate_keys_are_refused() {
    // serde_json would keep the last PIN silently; another reader might take the first.
    let body = good()
        .to_string()
        .replacen("\"pin\":", "\"pin\":\"0000\",\"pin\":", 1);
    let item = assert_rejected(Some(&body), "duplicate_key").await;
    assert!(item.detail.contains("\"pin\""), "{}", item.detail);
    assert!(!item.detail.contains("0000"), "{}", item.detail);
    let nested =
        good()
            .to_string()
            .replacen("\"end\":", "\"end\":\"2026-06-01T09:00:00Z\",\"end\":", 1);
    assert_rejected(Some(&nested), "duplicate_key").await;
}

#[tokio::test]
async fn a_window_years_away_is_refused() {
    let body = with(
        "preferred_window",
        json!({"start": "2029-06-01T08:00:00Z", "end": "2029-06-01T10:00:00Z"}),
    );
    let item = assert_rejected(Some(&body), "window_too_far_ahead").await;
    assert!(
        item.detail.contains("2029-06-01T10:00:00Z"),
        "{}",
        item.detail
    );
}

#[path = "edge_inputs/answers.rs"]
mod answers;

#[path = "edge_inputs/identifiers.rs"]
mod identifiers;
