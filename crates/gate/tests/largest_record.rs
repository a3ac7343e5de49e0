//! The largest record the gate can write stays under DynamoDB's 400 KB item limit, as DynamoDB
//! counts an item (attribute names plus values; AWS, DynamoDB Developer Guide, "Item sizes and
//! formats"): for any labels and any event the consumer's check admits ([`check_new_event`]),
//! with the stored request at the largest the check admits for those labels, then grown to every
//! later state's largest at once: the manual item of a routing, the longest lease token, the
//! `error` text at [`MAX_ERROR_BYTES`], the effect id and [`MAX_EFFECT_IDS`] distinct effect ids of
//! [`MAX_EFFECT_ID_BYTES`], both marks, and a full audit history ([`MAX_HISTORY_ENTRIES`] lines
//! at their longest). `cargo test -p gate --test largest_record`.

use std::collections::BTreeSet;

use gate::manual::MAX_ITEM_JSON_BYTES;
use gate::operator::AuditEntry;
use gate::record::{
    inflight_shard, record_pk, BusinessRow, IdempotencyRecord, Labels, RecordStatus,
};
use gate::store::audit::history_bytes;
use gate::store::limits::{
    check_new_event, multi_mark_bytes, record_item_bytes, MAX_AUDIT_ACTION_BYTES,
    MAX_AUDIT_DETAIL_BYTES, MAX_AUDIT_WHO_BYTES, MAX_EFFECT_IDS, MAX_EFFECT_ID_BYTES,
    MAX_ERROR_BYTES, MAX_HISTORY_ENTRIES, MAX_ITEM_BYTES, MAX_LEASE_OWNER_BYTES,
};
use proptest::prelude::*;

/// An epoch-ms value with 19 significant digits: the most bytes a number attribute takes.
const WIDEST_NUMBER: i64 = 9_223_372_036_854_775_807;

/// A record as the consumer reserves it, with a request of `request_bytes` bytes.
fn reserved(
    integration: &str,
    labels: &Labels,
    lease_owner: &str,
    request_bytes: usize,
) -> IdempotencyRecord {
    let event_key = "ab".repeat(32);
    IdempotencyRecord {
        pk: record_pk(integration, &event_key),
        event_key: event_key.clone(),
        status: RecordStatus::InFlight,
        fingerprint: "cd".repeat(32),
        request: vec![b'x'; request_bytes],
        op_key: "ef".repeat(32),
        lease_owner: Some(lease_owner.to_string()),
        lease_until_ms: Some(1_893_916_830_123),
        created_at_ms: 1_893_916_800_123,
        updated_at_ms: 1_893_916_800_123,
        expires_at_s: 1_895_731_200,
        effect_id: None,
        effect_ids: BTreeSet::new(),
        inflight_shard: Some(inflight_shard(&event_key)),
        error: None,
        route_pending: false,
        labels: labels.clone(),
    }
}

fn admitted(record: &IdempotencyRecord) -> bool {
    let row = BusinessRow::for_record(record, "", record.created_at_ms);
    check_new_event(record, &row, None, &gate::record::RowColumns::NEUTRAL).is_ok()
}

/// The longest request the check admits for the record `at(len)`, if any (a binary search: the
/// check is monotone in the request's length).
fn longest_request(at: impl Fn(usize) -> IdempotencyRecord) -> Option<usize> {
    if !admitted(&at(0)) {
        return None;
    }
    let (mut ok, mut too_long) = (0, MAX_ITEM_BYTES + 1);
    while too_long - ok > 1 {
        let mid = (ok + too_long) / 2;
        if admitted(&at(mid)) {
            ok = mid;
        } else {
            too_long = mid;
        }
    }
    Some(ok)
}

/// `record` in every later state's largest at once (module docs), with its full history.
fn grown(record: &IdempotencyRecord) -> (IdempotencyRecord, Vec<AuditEntry>) {
    let mut r = record.clone();
    r.request = vec![b'x'; r.request.len().max(MAX_ITEM_JSON_BYTES)];
    r.lease_owner = Some("o".repeat(MAX_LEASE_OWNER_BYTES));
    r.lease_until_ms = Some(WIDEST_NUMBER);
    r.updated_at_ms = WIDEST_NUMBER;
    r.error = Some("e".repeat(MAX_ERROR_BYTES));
    r.effect_id = Some("S".repeat(MAX_EFFECT_ID_BYTES));
    r.effect_ids = (0..MAX_EFFECT_IDS)
        .map(|i| format!("{i:0width$}", width = MAX_EFFECT_ID_BYTES))
        .collect();
    r.route_pending = true;
    let line = AuditEntry {
        at_ms: WIDEST_NUMBER,
        who: "w".repeat(MAX_AUDIT_WHO_BYTES * 2),
        action: "a".repeat(MAX_AUDIT_ACTION_BYTES * 2),
        detail: "d".repeat(MAX_AUDIT_DETAIL_BYTES * 2),
    }
    .bounded();
    (r, vec![line; MAX_HISTORY_ENTRIES])
}

fn label_strategy() -> impl Strategy<Value = Labels> {
    prop::collection::btree_map("l_[a-z]{0,40}", (0usize..120_000, any::<bool>()), 0..6).prop_map(
        |m| {
            m.into_iter()
                .map(|(name, (len, wide))| {
                    // Two-byte characters count twice, as in DynamoDB (UTF-8 length).
                    let value = if wide {
                        "é".repeat(len / 2)
                    } else {
                        "v".repeat(len)
                    };
                    (name, value)
                })
                .collect()
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    #[test]
    fn the_largest_record_the_gate_can_write_stays_under_400_kb(
        integration in "[a-z][a-z0-9-]{0,31}",
        labels in label_strategy(),
        owner_len in 1usize..=MAX_LEASE_OWNER_BYTES,
    ) {
        let owner = "o".repeat(owner_len);
        let at = |len| reserved(&integration, &labels, &owner, len);
        let Some(longest) = longest_request(at) else {
            // The labels alone leave no room: the event is rejected before its reserve.
            return Ok(());
        };
        let (record, history) = grown(&at(longest));
        let bytes = record_item_bytes(&record) + multi_mark_bytes() + history_bytes(&history);
        prop_assert!(bytes <= MAX_ITEM_BYTES, "{bytes} bytes (request {longest})");
    }
}

/// The proof's extremes are real: with no labels the check admits a request within a few
/// kilobytes of the limit, and that record grown still fits.
#[test]
fn with_no_labels_the_request_reaches_near_the_limit() {
    let at = |len| reserved("truck-slot", &Labels::new(), "o", len);
    let longest = longest_request(at).unwrap();
    assert!(longest > MAX_ITEM_BYTES - 20_000, "{longest}");
    let (record, history) = grown(&at(longest));
    assert_eq!(history.len(), MAX_HISTORY_ENTRIES);
    assert_eq!(history[0].detail.len(), MAX_AUDIT_DETAIL_BYTES);
    let bytes = record_item_bytes(&record) + multi_mark_bytes() + history_bytes(&history);
    assert!(bytes <= MAX_ITEM_BYTES, "{bytes}");
    // And a request one byte longer is refused before the reserve.
    assert!(!admitted(&at(longest + 1)));
}
