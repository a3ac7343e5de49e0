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
//! (Over 600 lines: one short test per edge, kept in one file so the edges are read together.)

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

// --- identifiers that look alike, numbers that collapse (issue 13, item 7) ------------------------

#[tokio::test]
async fn a_notification_id_with_a_trailing_space_is_refused() {
    let item = assert_rejected(
        Some(&with("notificationId", Value::from("PCS-77 "))),
        "surrounding_whitespace",
    )
    .await;
    assert!(item.detail.contains("notificationId"), "{}", item.detail);
    assert_rejected(
        Some(&with("notificationId", Value::from(" PCS-77"))),
        "surrounding_whitespace",
    )
    .await;
}

#[tokio::test]
async fn a_notification_id_with_an_invisible_character_is_refused() {
    for (value, code_point) in [
        ("PCS-77\u{200b}", "U+200B"),
        ("PCS-77\u{feff}", "U+FEFF"),
        ("PCS\u{2060}-77", "U+2060"),
        ("PCS-\u{202e}77", "U+202E"),
        ("PCS-\u{2066}77\u{2069}", "U+2066"),
        ("PCS-7\u{ad}7", "U+00AD"),
        ("PCS-77\u{fe0f}", "U+FE0F"),
        ("PCS\u{a0}77", "U+00A0"),
        ("PCS-77\u{3000}", "U+3000"),
    ] {
        let item = assert_rejected(
            Some(&with("notificationId", Value::from(value))),
            "invisible_character",
        )
        .await;
        assert!(
            item.detail.contains(code_point),
            "{value:?}: {}",
            item.detail
        );
    }
    // In the other identifiers too.
    assert_rejected(
        Some(&with(
            "equipment_number",
            Value::from("CSQU3054383\u{200b}"),
        )),
        "invisible_character",
    )
    .await;
    assert_rejected(
        Some(&with("terminal", Value::from("ECT-DELTA\u{200d}"))),
        "invisible_character",
    )
    .await;
}

#[tokio::test]
async fn a_notification_id_not_in_nfc_is_refused() {
    // "é" as "e" + U+0301 (decomposed); the precomposed U+00E9 is NFC and passes.
    let item = assert_rejected(
        Some(&with(
            "notificationId",
            Value::from("PCS-Caf\u{65}\u{301}-77"),
        )),
        "not_nfc",
    )
    .await;
    assert!(item.detail.contains("notificationId"), "{}", item.detail);
    // U+212B ANGSTROM SIGN is not NFC either (it is U+00C5 in NFC).
    assert_rejected(
        Some(&with("notificationId", Value::from("PCS-\u{212b}-77"))),
        "not_nfc",
    )
    .await;
}

/// The issue's three bodies for one container: one event (one record, one slot, one booking) and
/// two rejections, not three slots.
#[tokio::test]
async fn look_alike_ids_make_one_event_and_two_rejections() {
    let (w, terminal) = scripted_world(|_| {
        json(
            201,
            json!({"slot_id": "S-77", "equipment_number": CONTAINER}),
        )
    })
    .await;
    let ids = ["PCS-77", "PCS-77 ", "PCS-77\u{200b}"];
    let mut outcomes = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let body = with("notificationId", Value::from(*id));
        let report = w
            .gate
            .handle_batch(
                event(&format!("m-{i}"), Some(&body)),
                &invocation(&w, "inv-1"),
            )
            .await;
        outcomes.push(report.records[0].outcome.clone());
    }
    assert!(
        matches!(outcomes[0], RecordOutcome::Committed { .. }),
        "{outcomes:?}"
    );
    let codes: Vec<&str> = outcomes[1..]
        .iter()
        .map(|o| match o {
            RecordOutcome::Rejected(r) => r.code(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(codes, ["surrounding_whitespace", "invisible_character"]);
    assert_eq!(terminal.seen().len(), 1, "one claim");
    assert_eq!(w.store.business_rows().len(), 1, "one booking");
    let items = w.manual.items();
    assert_eq!(items.len(), 2);
    assert!(items.iter().all(|i| i.reason == ManualReason::Rejected));
}

#[tokio::test]
async fn integers_beyond_2_pow_53_are_refused_not_collapsed() {
    // 2^53 + 1 and 2^53 canonicalise to the same double: refused, each with its reason.
    for n in [
        "9007199254740993",
        "9007199254740992",
        "-9007199254740993",
        "1e16",
    ] {
        let body = good()
            .to_string()
            .replace("\"pin\"", &format!("\"gross_mass_kg\":{n},\"pin\""));
        assert!(body.contains(n));
        let item = assert_rejected(Some(&body), "number_out_of_range").await;
        assert!(item.detail.contains("RFC 7493"), "{}", item.detail);
    }
    // 2^53 - 1 is exact: accepted (not rejected).
    let body = good()
        .to_string()
        .replace("\"pin\"", "\"gross_mass_kg\":9007199254740991,\"pin\"");
    let w = world(Arc::new(Untouched::default()));
    let report = w
        .gate
        .handle_batch(event("m-1", Some(&body)), &invocation(&w, "inv-1"))
        .await;
    assert!(
        !matches!(report.records[0].outcome, RecordOutcome::Rejected(_)),
        "{:?}",
        report.records[0].outcome
    );
}

#[tokio::test]
async fn numbers_more_precise_than_a_double_are_refused_not_collapsed() {
    for n in ["0.10000000000000001", "25000.0000000000000001", "1e-400"] {
        let body = good()
            .to_string()
            .replace("\"pin\"", &format!("\"gross_mass_kg\":{n},\"pin\""));
        assert_rejected(Some(&body), "number_not_exact").await;
    }
}

/// A reason never quotes body text: a PIN in the terminal field, or as a duplicated key, does
/// not reach the reason (which is logged) nor the manual item's detail.
#[tokio::test]
async fn reasons_quote_no_body_text() {
    let pin = "RLS-104233";
    let item = assert_rejected(
        Some(&with("terminal", Value::from(pin))),
        "unknown_terminal",
    )
    .await;
    assert!(!item.detail.contains(pin), "{}", item.detail);
    let body = good()
        .to_string()
        .replacen('{', &format!("{{\"{pin}\":1,\"{pin}\":2,"), 1);
    let item = assert_rejected(Some(&body), "duplicate_key").await;
    assert!(!item.detail.contains(pin), "{}", item.detail);
    assert!(item.original_body.contains(pin), "the person gets the body");
}

// --- terminal answers -------------------------------------------------------------------------

/// Runs one good notification against a terminal answering `answer` to every claim; asserts the
/// record is retried (transient): in `batchItemFailures`, still `in_flight` with its lease
/// released, nothing in the manual queue, no booking.
async fn assert_transient_answer(answer: Answer) -> String {
    let (w, terminal) = scripted_world(move |_| answer.clone()).await;
    let body = good().to_string();
    let report = w
        .gate
        .handle_batch(event("m-1", Some(&body)), &invocation(&w, "inv-1"))
        .await;
    let RecordOutcome::Retry(why) = &report.records[0].outcome else {
        panic!("expected a retry, got {:?}", report.records[0].outcome);
    };
    assert_eq!(failures(&report), vec!["m-1".to_string()]);
    let record = w
        .store
        .get(&record_pk(INTEGRATION, &event_key_of("PCS-1", CONTAINER)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, RecordStatus::InFlight);
    assert!(!record.lease_is_live(w.clock.now_ms()), "lease released");
    assert!(w.manual.items().is_empty());
    assert!(w.store.business_rows().is_empty());
    assert_eq!(terminal.seen().len(), 1);
    why.clone()
}

#[tokio::test]
async fn an_answer_that_is_not_json_is_transient() {
    let why = assert_transient_answer(raw(201, "<html>Slot booked!</html>")).await;
    assert!(why.contains("not JSON"), "{why}");
}

#[tokio::test]
async fn an_answer_without_a_slot_id_is_transient() {
    let why = assert_transient_answer(json(201, json!({"status": "booked"}))).await;
    assert!(why.contains("no slot_id"), "{why}");
    let why = assert_transient_answer(json(200, json!({"slot_id": null}))).await;
    assert!(why.contains("no slot_id"), "{why}");
    let why = assert_transient_answer(json(201, json!({"slot_id": 42}))).await;
    assert!(why.contains("not a string"), "{why}");
}

#[tokio::test]
async fn an_empty_slot_id_is_transient() {
    let why = assert_transient_answer(json(201, json!({"slot_id": ""}))).await;
    assert!(why.contains("empty slot_id"), "{why}");
    let why = assert_transient_answer(json(201, json!({"slot_id": "   "}))).await;
    assert!(why.contains("empty slot_id"), "{why}");
}

/// A slot id outside the terminal's declared format (the strict default: letters, digits and
/// `-_.:`, at most 64 characters), or one that quotes the PIN (hex of it fits the format), is
/// refused (issue 25): the slot exists under the key and every retry replays it, so the record is
/// `failed` and a person gets it at once, told the id only by its keyed digest; the id is never
/// logged, stored or booked.
#[tokio::test]
async fn a_slot_id_outside_the_format_goes_to_a_person_unquoted() {
    for (id, why) in [
        (
            "S".repeat(MAX_SLOT_ID_CHARS + 1),
            "longer than the gate keeps",
        ),
        ("S".repeat(65), "outside the format"),
        (
            "S-1\n{\"level\":\"ERROR\"}".to_string(),
            "outside printable ASCII",
        ),
        ("SLOT-UmxzLTEwNDIzMw==".to_string(), "outside the format"),
        ("RLS&minus;104233".to_string(), "outside the format"),
        (
            format!("SLOT-{}", hex::encode("Rls-104233")),
            "quotes a secret",
        ),
    ] {
        let (w, _terminal) = scripted_world(move |_| {
            json(201, json!({"slot_id": id, "equipment_number": CONTAINER}))
        })
        .await;
        let body = good().to_string();
        let report = w
            .gate
            .handle_batch(event("m-1", Some(&body)), &invocation(&w, "inv-1"))
            .await;
        assert_eq!(
            report.records[0].outcome,
            RecordOutcome::Manual(ManualReason::ServerAnswerInvalid),
            "{why}"
        );
        assert!(failures(&report).is_empty(), "acknowledged");
        let record = w
            .store
            .get(&record_pk(INTEGRATION, &event_key_of("PCS-1", CONTAINER)))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(record.status, RecordStatus::Failed);
        assert!(record.effect_id.is_none() && record.effect_ids.is_empty());
        assert!(w.store.business_rows().is_empty());
        let items = w.manual.items();
        assert_eq!(items.len(), 1);
        let detail = &items[0].detail;
        assert!(detail.contains(why), "{detail}");
        assert!(detail.contains("keyed SHA-256 of the id"), "{detail}");
        assert!(detail.contains("gatectl lookup"), "{detail}");
        assert!(!detail.contains("SSSS") && !detail.contains("SLOT-") && !detail.contains('\n'));
        assert_eq!(record.error.as_deref(), Some(detail.as_str()));
    }
}

#[tokio::test]
async fn an_answer_for_another_container_is_routed_as_invalid() {
    let (w, _terminal) = scripted_world(|_| {
        json(
            201,
            json!({"slot_id": "S-OTHER", "equipment_number": "MSKU1234565"}),
        )
    })
    .await;
    let body = good().to_string();
    let report = w
        .gate
        .handle_batch(event("m-1", Some(&body)), &invocation(&w, "inv-1"))
        .await;
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Manual(ManualReason::ServerAnswerInvalid)
    );
    assert!(failures(&report).is_empty(), "permanent: acknowledged");
    let record = w
        .store
        .get(&record_pk(INTEGRATION, &event_key_of("PCS-1", CONTAINER)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, RecordStatus::Failed);
    assert!(
        record.effect_ids.contains("S-OTHER"),
        "the slot made is kept"
    );
    assert!(
        w.store.business_rows().is_empty(),
        "no booking for a wrong slot"
    );
    let items = w.manual.items();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].reason, ManualReason::ServerAnswerInvalid);
    assert_eq!(items[0].original_body, body);
    // The answered container is the terminal's text: named by its keyed digest only.
    assert!(
        !items[0].detail.contains("MSKU1234565")
            && items[0].detail.contains("another subject (keyed SHA-256"),
        "{}",
        items[0].detail
    );
    // A redelivery is a duplicate of the failed record: no second claim.
    let again = w
        .gate
        .handle_batch(event("m-2", Some(&body)), &invocation(&w, "inv-2"))
        .await;
    assert_eq!(
        again.records[0].outcome,
        RecordOutcome::Duplicate(RecordStatus::Failed)
    );
}

#[tokio::test]
async fn an_unreadable_container_in_the_answer_is_routed_as_invalid() {
    let (w, _terminal) = scripted_world(|_| {
        json(
            201,
            json!({"slot_id": "S-1", "equipment_number": "CSQU3054383\u{0}"}),
        )
    })
    .await;
    let report = w
        .gate
        .handle_batch(
            event("m-1", Some(&good().to_string())),
            &invocation(&w, "inv-1"),
        )
        .await;
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Manual(ManualReason::ServerAnswerInvalid)
    );
    let detail = &w.manual.items()[0].detail;
    assert!(!detail.contains('\u{0}'), "{detail:?}");
}

/// A terminal that answers garbage forever: every redelivery asks again with the same key and the
/// same bytes (never a new key), the reconciler's re-send under that key is transient too, and
/// once the key's retention has passed a person gets the record, told that whether the effect
/// happened is unknown (a slot may exist). Bounded, not silent.
#[tokio::test]
async fn garbage_forever_is_bounded_and_ends_with_a_person() {
    let (w, terminal) = scripted_world(|seen| {
        if seen.method == "POST" {
            raw(201, "OK")
        } else {
            raw(200, "OK")
        }
    })
    .await;
    // A window two days ahead, so it is still open when the message is redriven a day later.
    let body = with(
        "preferred_window",
        json!({"start": "2026-06-03T08:00:00Z", "end": "2026-06-03T10:00:00Z"}),
    );
    // SQS redelivers up to maxReceiveCount (5 by default), then the message is in the DLQ.
    for delivery in 0..5 {
        w.clock.advance_ms(180_000);
        let report = w
            .gate
            .handle_batch(
                event("m-1", Some(&body)),
                &invocation(&w, &format!("inv-{delivery}")),
            )
            .await;
        assert!(
            matches!(report.records[0].outcome, RecordOutcome::Retry(_)),
            "{:?}",
            report.records[0].outcome
        );
    }
    let claims: Vec<Seen> = terminal
        .seen()
        .into_iter()
        .filter(|s| s.method == "POST")
        .collect();
    assert_eq!(claims.len(), 5);
    for c in &claims {
        assert_eq!(
            c.header("idempotency-key"),
            claims[0].header("idempotency-key")
        );
        assert_eq!(c.body, claims[0].body);
    }
    // The reconciler, within the retention: it re-sends the stored bytes under the same key (the
    // server's replay is the lookup, `gate::decision`); the answer is unreadable again: transient.
    let config = ReconcilerConfig::default();
    w.clock.advance_ms(600_000);
    let run = w
        .gate
        .reconcile(w.store.as_ref(), &config, &invocation(&w, "rec-1"))
        .await;
    assert_eq!(run.transient, 1, "{run:?}");
    assert_eq!(run.manual, 0, "{run:?}");
    let claims: Vec<Seen> = terminal
        .seen()
        .into_iter()
        .filter(|s| s.method == "POST")
        .collect();
    assert_eq!(
        claims.len(),
        6,
        "five deliveries and the reconciler's re-send"
    );
    assert_eq!(
        claims[5].header("idempotency-key"),
        claims[0].header("idempotency-key")
    );
    assert_eq!(claims[5].body, claims[0].body);
    // Past the retention (24 h minus the 1 h margin): a person gets it.
    w.clock.set_ms(T0 + 23 * 3_600_000 + 600_000);
    let run = w
        .gate
        .reconcile(w.store.as_ref(), &config, &invocation(&w, "rec-2"))
        .await;
    assert_eq!(run.manual, 1, "{run:?}");
    let pk = record_pk(INTEGRATION, &event_key_of("PCS-1", CONTAINER));
    let record = w.store.get(&pk).await.unwrap().unwrap();
    assert_eq!(record.status, RecordStatus::Manual);
    let items = w.manual.items();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].reason, ManualReason::PastKeyRetention);
    assert!(
        items[0].detail.contains("happened is unknown"),
        "{}",
        items[0].detail
    );
    // The message redriven from the DLQ later is a duplicate: no claim under a forgotten key.
    let redriven = w
        .gate
        .handle_batch(event("m-1", Some(&body)), &invocation(&w, "inv-late"))
        .await;
    assert_eq!(
        redriven.records[0].outcome,
        RecordOutcome::Duplicate(RecordStatus::Manual)
    );
    let posts = terminal
        .seen()
        .into_iter()
        .filter(|s| s.method == "POST")
        .count();
    assert_eq!(posts, 6, "no claim after the retention");
}
