//! The gate's own CPU work per event, without I/O: `cargo bench -p truck-slot --bench slot_cpu`.
//!
//! Each step of a new event on the consumer path, then the whole of it:
//!
//! * `parse`: the strict body parser (`parse_notification`), ISO 6346 check included;
//! * `iso6346`: the equipment number alone (normalise + check digit);
//! * `event_key`, `operation_key`, `fingerprint` (RFC 8785 canonical JSON + SHA-256),
//!   `request_bytes` (the canonical claim body), and both through the `serde_json_canonicalizer`
//!   crate over the whole object (`*_via_canonicalizer_crate`), for comparison;
//! * `new_record`: the record step 2 reserves;
//! * `record_to_item` / `record_from_item`: the record to and from DynamoDB attribute values
//!   (feature `aws`; the benches turn it on through the package's dev-dependency on itself);
//! * `row_to_item`: the TMS booking of the commit;
//! * `total_new_event`: everything the gate computes for a new event: parse, keys, record, record
//!   item, booking item; `total_duplicate`: parse, keys, record, record item, and reading the old
//!   item that `ALL_OLD` returns.
//!
//! Target: under 20 µs per event in total. These are measurements, never assertions.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use gate::clock::ManualClock;
use gate::consumer::{Gate, GateConfig, Invocation};
use gate::manual::MemoryManualQueue;
use gate::record::RecordStatus;
use gate::store::memory::MemoryStore;
use gate_dynamo::{record_from_item, record_to_item, row_to_item};
use truck_slot::derive_keys;
use truck_slot::iso6346::EquipmentNumber;
use truck_slot::keys::{self, SLOT_CLAIM};
use truck_slot::notification::parse_notification;
use truck_slot::terminal::{CallOutcome, LookupOutcome, SlotTerminal};

/// 2025-06-09T04:00:00Z; the window below is 08:00-10:00 the same day.
const NOW_MS: i64 = 1_749_441_600_000;

/// A realistic notification body (the shape of `events/`), with a few extra business fields that
/// the fingerprint covers.
const BODY: &str = r#"{"notificationId":"PCS-2025-06-09-000123","equipment_number":"CSQU 305438-3","preferred_window":{"start":"2025-06-09T08:00:00Z","end":"2025-06-09T12:00:00+02:00"},"terminal":"ECT-DELTA","pin":"4711-8812","gross_mass_kg":25000,"carrier":"Van Dam Transport","vessel":{"name":"MSC OSCAR","voyage":"FL523W"},"reefer":false}"#;

/// A terminal that is never called: the benches stop before I/O.
struct NoTerminal;

#[async_trait::async_trait]
impl SlotTerminal for NoTerminal {
    async fn claim(&self, _op_key: &str, _request: &[u8]) -> CallOutcome {
        CallOutcome::Transient("not in a benchmark".into())
    }

    async fn lookup(&self, _op_key: &str, _request: &[u8]) -> LookupOutcome {
        LookupOutcome::NotFound
    }
}

fn gate() -> Gate {
    Gate {
        config: GateConfig::new("ect-delta-slots"),
        store: Arc::new(MemoryStore::new()),
        integration: Arc::new(truck_slot::TruckSlot::new(
            Arc::new(NoTerminal),
            vec!["ECT-DELTA".to_string()],
        )),
        manual: Arc::new(MemoryManualQueue::new()),
        clock: Arc::new(ManualClock::new(NOW_MS)),
    }
}

fn invocation() -> Invocation {
    Invocation {
        request_id: "8f2b5d1e-3c4a-4b7e-9a61-2f0c5e7d9b13".into(),
        deadline_ms: NOW_MS + 60_000,
    }
}

fn steps(c: &mut Criterion) {
    let terminals = vec!["ECT-DELTA".to_string()];
    let gate = gate();
    let invocation = invocation();
    let n = parse_notification(BODY, NOW_MS, &terminals).expect("the bench body parses");
    let k = derive_keys(&n).expect("keys");
    let record = gate.config.new_record(
        &truck_slot::event(&n).expect("event"),
        &k,
        &invocation,
        NOW_MS,
    );
    let mut committed = record.clone();
    committed.status = RecordStatus::Committed;
    committed.effect_id = Some("ECTD-000123".into());
    committed.effect_ids = ["ECTD-000123".to_string()].into();
    committed.lease_owner = None;
    committed.lease_until_ms = None;
    committed.inflight_shard = None;
    let committed_item = record_to_item(&committed);

    let mut g = c.benchmark_group("gate_cpu");
    g.bench_function("parse", |b| {
        b.iter(|| parse_notification(black_box(BODY), NOW_MS, &terminals))
    });
    g.bench_function("iso6346", |b| {
        b.iter(|| EquipmentNumber::parse(black_box("CSQU 305438-3")))
    });
    g.bench_function("event_key", |b| b.iter(|| keys::event_key(black_box(&n))));
    g.bench_function("operation_key", |b| {
        b.iter(|| keys::operation_key(black_box(&k.event_key), SLOT_CLAIM))
    });
    g.bench_function("fingerprint", |b| {
        b.iter(|| keys::fingerprint(black_box(&n)))
    });
    g.bench_function("request_bytes", |b| {
        b.iter(|| keys::claim_request(black_box(&n)))
    });
    // The canonicaliser crate over the whole object, kept as the reference the two above are
    // measured against: same bytes, see the unit test in keys.rs.
    let fields: serde_json::Value = serde_json::from_str(BODY).expect("the bench body is JSON");
    g.bench_function("fingerprint_via_canonicalizer_crate", |b| {
        b.iter(|| {
            serde_json_canonicalizer::to_vec(black_box(&fields)).map(|v| keys::sha256_hex(&v))
        })
    });
    let request = serde_json::json!({
        "equipment_number": n.equipment_number.as_str(),
        "window_start": n.preferred_window.start_rfc3339(),
        "window_end": n.preferred_window.end_rfc3339(),
        "pin": n.pin.expose(),
    });
    g.bench_function("request_bytes_via_canonicalizer_crate", |b| {
        b.iter(|| serde_json_canonicalizer::to_vec(black_box(&request)))
    });
    g.bench_function("new_record", |b| {
        b.iter(|| {
            gate.config.new_record(
                black_box(&truck_slot::event(&n).expect("event")),
                &k,
                &invocation,
                NOW_MS,
            )
        })
    });
    g.bench_function("record_to_item", |b| {
        b.iter(|| record_to_item(black_box(&record)))
    });
    g.bench_function("record_from_item", |b| {
        b.iter(|| record_from_item(black_box(&committed_item)))
    });
    g.bench_function("row_to_item", |b| {
        b.iter(|| {
            row_to_item(
                &gate::record::BusinessRow::for_record(black_box(&record), "ECTD-1", NOW_MS),
                &truck_slot::booking::BOOKING_COLUMNS,
            )
        })
    });

    g.bench_function("total_new_event", |b| {
        b.iter(|| {
            let n = parse_notification(black_box(BODY), NOW_MS, &terminals).expect("parses");
            let k = derive_keys(&n).expect("keys");
            let record = gate.config.new_record(
                &truck_slot::event(&n).expect("event"),
                &k,
                &invocation,
                NOW_MS,
            );
            let item = record_to_item(&record);
            let booking = row_to_item(
                &gate::record::BusinessRow::for_record(&record, "ECTD-1", NOW_MS),
                &truck_slot::booking::BOOKING_COLUMNS,
            );
            (item, booking)
        })
    });
    g.bench_function("total_duplicate", |b| {
        b.iter(|| {
            let n = parse_notification(black_box(BODY), NOW_MS, &terminals).expect("parses");
            let k = derive_keys(&n).expect("keys");
            let record = gate.config.new_record(
                &truck_slot::event(&n).expect("event"),
                &k,
                &invocation,
                NOW_MS,
            );
            let item = record_to_item(&record);
            let old = record_from_item(black_box(&committed_item)).expect("reads");
            (item, old.fingerprint == k.fingerprint)
        })
    });
    g.finish();
}

criterion_group!(benches, steps);
criterion_main!(benches);
