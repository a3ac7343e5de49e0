//! Unit tests of the item codec: the layout of records, rows and audit lines pinned.

use super::*;

fn record() -> IdempotencyRecord {
    IdempotencyRecord {
        pk: "ect#ab".into(),
        event_key: "ab".into(),
        status: RecordStatus::InFlight,
        fingerprint: "f".into(),
        request: b"{\"pin\":\"4711\"}".to_vec(),
        op_key: "op".into(),
        lease_owner: Some("req-1".into()),
        lease_until_ms: Some(1_749_441_630_000),
        created_at_ms: 1_749_441_600_000,
        updated_at_ms: 1_749_441_600_000,
        expires_at_s: 1_750_651_200,
        effect_id: None,
        effect_ids: BTreeSet::new(),
        inflight_shard: Some("11".into()),
        error: None,
        route_pending: false,
        labels: Labels::from([
            ("container".to_string(), "CSQU3054383".to_string()),
            ("terminal".to_string(), "ECT-DELTA".to_string()),
            (
                "window_start".to_string(),
                "2025-06-09T08:00:00Z".to_string(),
            ),
            ("window_end".to_string(), "2025-06-09T10:00:00Z".to_string()),
        ]),
    }
}

#[test]
fn record_round_trips_with_units() {
    let r = record();
    let item = record_to_item(&r);
    assert_eq!(item["expires_at"], AttributeValue::N("1750651200".into()));
    assert_eq!(
        item["lease_until"],
        AttributeValue::N("1749441630000".into())
    );
    assert!(matches!(item["request"], AttributeValue::B(_)));
    assert!(!item.contains_key("effect_ids"));
    assert!(!item.contains_key("error"));
    assert_eq!(record_from_item(&item).unwrap(), r);

    let mut full = r;
    full.status = RecordStatus::Committed;
    full.effect_id = Some("S1".into());
    full.effect_ids = ["S1".to_string(), "S2".to_string()].into();
    full.error = Some("e".into());
    full.lease_owner = None;
    full.lease_until_ms = None;
    full.inflight_shard = None;
    let item = record_to_item(&full);
    assert!(matches!(&item["effect_ids"], AttributeValue::Ss(v) if v.len() == 2));
    assert_eq!(item["effect_id"], s("S1"));
    for legacy in [LEGACY_EFFECT_ID, LEGACY_EFFECT_IDS] {
        assert!(!item.contains_key(legacy), "{legacy} is never written");
    }
    assert_eq!(record_from_item(&item).unwrap(), full);
}

/// An item in the legacy layout (`slot_id`, `slot_ids`) reads as the same record;
/// one a newer gate added an id to (`effect_ids` beside legacy `slot_ids`) holds both ids.
#[test]
fn an_item_in_the_layout_before_the_rename_reads_the_same() {
    let mut committed = record();
    committed.status = RecordStatus::Committed;
    committed.effect_id = Some("S1".into());
    committed.effect_ids = ["S1".to_string()].into();
    committed.lease_until_ms = None;
    committed.inflight_shard = None;
    let mut old = record_to_item(&committed);
    let id = old.remove(EFFECT_ID).unwrap();
    let ids = old.remove(EFFECT_IDS).unwrap();
    old.insert("slot_id".into(), id);
    old.insert("slot_ids".into(), ids);
    let read = record_from_item(&old).unwrap();
    assert_eq!(read, committed, "no label named slot_id or slot_ids either");

    // A second id recorded by a newer gate on the old item: the union, read once each.
    old.insert(
        EFFECT_IDS.into(),
        AttributeValue::Ss(vec!["S2".into(), "S1".into()]),
    );
    let read = record_from_item(&old).unwrap();
    assert_eq!(read.effect_ids, ["S1".to_string(), "S2".to_string()].into());
    assert_eq!(read.effect_id.as_deref(), Some("S1"));

    // The new name wins over the old when both are present (a commit removes the old one).
    old.insert(EFFECT_ID.into(), s("S2"));
    assert_eq!(
        record_from_item(&old).unwrap().effect_id.as_deref(),
        Some("S2")
    );

    old.insert(LEGACY_EFFECT_IDS.into(), s("not a set"));
    assert!(matches!(
        record_from_item(&old),
        Err(StoreError::Corrupt(_))
    ));
}

#[test]
fn a_business_row_round_trips_under_the_neutral_names() {
    let row = BusinessRow::for_record(&record(), "S1", 1_749_441_600_000);
    let item = row_to_item(&row, &RowColumns::NEUTRAL);
    let mut names: Vec<&str> = item.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "container",
            "effect_id",
            "source_event",
            "terminal",
            "window_end",
            "window_start",
            "written_at"
        ]
    );
    assert_eq!(item["effect_id"], s("S1"));
    assert_eq!(item["source_event"], s("ab"));
    assert_eq!(
        item["written_at"],
        AttributeValue::N("1749441600000".into())
    );
    assert_eq!(row_from_item(&item, &RowColumns::NEUTRAL).unwrap(), row);
}

/// An integration's own layout: its names are written, nothing under the neutral or
/// legacy names, and the item reads back the same row with the same layout.
#[test]
fn a_business_row_round_trips_under_an_integrations_names() {
    let columns = RowColumns {
        event_key: "invoice_event",
        effect_id: "charge_id",
        written_at: "charged_at",
    };
    let row = BusinessRow::for_record(&record(), "ch_1", 1_749_441_600_000);
    let item = row_to_item(&row, &columns);
    assert_eq!(item["invoice_event"], s("ab"));
    assert_eq!(item["charge_id"], s("ch_1"));
    assert_eq!(
        item["charged_at"],
        AttributeValue::N("1749441600000".into())
    );
    for other in RowColumns::NEUTRAL
        .names()
        .into_iter()
        .chain(LEGACY.names())
    {
        assert!(!item.contains_key(other), "{other} is not written");
    }
    assert_eq!(item.len(), 3 + row.labels.len());
    assert_eq!(row_from_item(&item, &columns).unwrap(), row);
    // Read with another layout, the key is missing: corrupt, never a guess.
    assert!(matches!(
        row_from_item(&item, &RowColumns::NEUTRAL),
        Err(StoreError::Corrupt(_))
    ));
}

const LEGACY: RowColumns = RowColumns::LEGACY;

/// The legacy layout (the deployed bookings tables' names, which an integration may keep)
/// writes exactly those names and reads back.
#[test]
fn the_legacy_layout_writes_the_deployed_names() {
    assert_eq!(
        LEGACY.names(),
        ["source_event", LEGACY_EFFECT_ID, "booked_at"]
    );
    let row = BusinessRow::for_record(&record(), "S1", 1_749_441_600_000);
    let item = row_to_item(&row, &LEGACY);
    assert_eq!(item["source_event"], s("ab"));
    assert_eq!(item[LEGACY_EFFECT_ID], s("S1"));
    assert_eq!(item["booked_at"], AttributeValue::N("1749441600000".into()));
    assert!(!item.contains_key("effect_id") && !item.contains_key("written_at"));
    assert_eq!(row_from_item(&item, &LEGACY).unwrap(), row);
}

/// A row in the legacy layout ([`RowColumns::LEGACY`]) reads the same under the neutral
/// names and under an integration's own, with no label named after a legacy column; the
/// configured name wins when both are present.
#[test]
fn a_row_written_by_an_older_gate_reads_under_any_names() {
    let row = BusinessRow::for_record(&record(), "S1", 1_749_441_600_000);
    let old = row_to_item(&row, &LEGACY);
    let custom = RowColumns {
        event_key: "source_event",
        effect_id: "charge_id",
        written_at: "charged_at",
    };
    for columns in [RowColumns::NEUTRAL, custom] {
        assert_eq!(row_from_item(&old, &columns).unwrap(), row, "{columns:?}");
    }
    let mut both = old.clone();
    both.insert("effect_id".into(), s("S2"));
    both.insert("written_at".into(), num(7));
    let read = row_from_item(&both, &RowColumns::NEUTRAL).unwrap();
    assert_eq!((read.effect_id.as_str(), read.written_at_ms), ("S2", 7));
    assert_eq!(read.labels, row.labels);

    // A row with neither layout's effect id: corrupt, naming the configured column.
    let mut neither = old;
    neither.remove(LEGACY.effect_id);
    assert!(matches!(
        row_from_item(&neither, &RowColumns::NEUTRAL),
        Err(StoreError::Corrupt(m)) if m.message().contains("effect_id")
    ));
}

#[test]
fn unreadable_items_are_corrupt() {
    let mut item = record_to_item(&record());
    item.insert("status".into(), s("pending"));
    assert!(matches!(
        record_from_item(&item),
        Err(StoreError::Corrupt(_))
    ));
    let mut item = record_to_item(&record());
    item.insert("created_at".into(), s("yesterday"));
    assert!(matches!(
        record_from_item(&item),
        Err(StoreError::Corrupt(_))
    ));
    let mut item = record_to_item(&record());
    item.remove("fingerprint");
    assert!(matches!(
        record_from_item(&item),
        Err(StoreError::Corrupt(_))
    ));
}

#[test]
fn cursor_round_trips() {
    let key = HashMap::from([
        ("pk".to_string(), s("ect#ab")),
        ("inflight_shard".to_string(), s("07")),
        ("created_at".to_string(), num(42)),
    ]);
    let c = encode_cursor(&key).unwrap();
    assert_eq!(decode_cursor(&c).unwrap(), key);
    assert!(matches!(decode_cursor("nope"), Err(StoreError::Corrupt(_))));
}
