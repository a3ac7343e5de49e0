//! Conformance cases of the operator's port ([`OperatorStore`]: [`gate::store::RecordScan`]
//! and [`gate::store::audit::AuditLog`]): what gatectl reads and writes besides the gate's own
//! path. They run on every adapter beside the store cases
//! ([`crate::operator_store_conformance_tests!`]); tables may be shared, so each case looks only
//! at the keys of its own `prefix`.

use super::*;
use gate::store::audit::AuditEntry;
use gate::store::limits::{self, ItemRefusal};
use gate::store::OperatorStore;

/// The records of run `prefix` among `records`.
fn own(records: Vec<IdempotencyRecord>, prefix: &str) -> Vec<IdempotencyRecord> {
    let mut mine: Vec<IdempotencyRecord> = records
        .into_iter()
        .filter(|r| r.pk.starts_with(&format!("{prefix}#")))
        .collect();
    mine.sort_by(|a, b| a.pk.cmp(&b.pk));
    mine
}

/// A sample record of run `prefix` whose `container` label is `container`.
fn labelled(prefix: &str, name: &str, container: &str) -> IdempotencyRecord {
    let mut r = sample_record(prefix, name, "owner-a", NOW_MS);
    r.labels.insert("container".into(), container.into());
    r
}

/// `scan_records`: without a label, every record of the run exactly as stored (committed and
/// `in_flight` alike) and never a natural-key item; with a label, only the records whose label
/// has that value. The progress counts add up to at least the records found.
pub async fn scan_records_finds_every_record_and_filters_on_a_label(
    store: Arc<dyn OperatorStore>,
    prefix: &str,
) {
    let wanted = format!("SCAN{}", &event_key(prefix, "container")[..8]).to_uppercase();
    let a = labelled(prefix, "scan-a", &wanted);
    let b = labelled(prefix, "scan-b", &wanted);
    let other = labelled(prefix, "scan-other", "OTHER0000001");
    for r in [&a, &b, &other] {
        must_reserve(store.as_ref(), r, NOW_MS).await;
    }
    // The guard writes the natural-key item the scan must skip.
    store
        .guard(&a, &sample_natural_key(&a, NOW_MS), NOW_MS)
        .await
        .expect("guard");
    let row = BusinessRow::for_record(&a, "EFFECT-SCAN", NOW_MS);
    let out = store
        .commit(&a.pk, "owner-a", "EFFECT-SCAN", &row, NOW_MS)
        .await
        .expect("commit");
    assert_eq!(out, CommitOutcome::Committed);
    let a = must_get(store.as_ref(), &a.pk).await;

    let mut read = 0u64;
    let all = store
        .scan_records(None, &mut |n| read += n)
        .await
        .expect("scan");
    let mut expected = vec![a.clone(), b.clone(), other.clone()];
    expected.sort_by(|x, y| x.pk.cmp(&y.pk));
    let found = own(all, prefix);
    assert_eq!(found, expected, "every record of the run, as stored");
    assert!(read >= 3, "progress told {read} items for 3 records");
    assert!(
        !found.iter().any(|r| r.pk.contains("#nk#")),
        "a natural-key item read as a record"
    );

    let filtered = store
        .scan_records(Some(("container", &wanted)), &mut |_| {})
        .await
        .expect("scan with a label");
    let mut expected = vec![a, b];
    expected.sort_by(|x, y| x.pk.cmp(&y.pk));
    assert_eq!(own(filtered, prefix), expected, "only the label's records");
    let none = store
        .scan_records(Some(("container", "NOSUCH000000")), &mut |_| {})
        .await
        .expect("scan with a label");
    assert!(own(none, prefix).is_empty());
}

/// `multi_effect_pks`: a record holding two distinct effect ids is listed, one holding a single
/// id (recorded twice) is not, and both are counted as `multi_effect_keys` counts them.
pub async fn multi_effect_pks_lists_the_records_with_two_effect_ids(
    store: Arc<dyn OperatorStore>,
    prefix: &str,
) {
    let two = sample_record(prefix, "multi-two", "owner-a", NOW_MS);
    let one = sample_record(prefix, "multi-one", "owner-a", NOW_MS);
    for r in [&two, &one] {
        must_reserve(store.as_ref(), r, NOW_MS).await;
    }
    for (pk, id) in [
        (&two.pk, "EFFECT-1"),
        (&two.pk, "EFFECT-2"),
        (&one.pk, "EFFECT-3"),
        (&one.pk, "EFFECT-3"),
    ] {
        store
            .record_effect_id(pk, id, NOW_MS)
            .await
            .expect("record_effect_id");
    }
    let pks: Vec<String> = store
        .multi_effect_pks()
        .await
        .expect("multi_effect_pks")
        .into_iter()
        .filter(|pk| pk.starts_with(&format!("{prefix}#")))
        .collect();
    assert_eq!(pks, vec![two.pk.clone()]);
    assert!(store.multi_effect_keys().await.expect("count") >= 1);
}

/// The audit history: an append to no record is refused (the history never creates one); lines
/// come back oldest first, cut to their bounds ([`AuditEntry::bounded`]); another record's
/// history is apart; past [`limits::MAX_HISTORY_ENTRIES`] lines an append is refused and the
/// history unchanged.
pub async fn audit_history_appends_in_order_within_its_bounds(
    store: Arc<dyn OperatorStore>,
    prefix: &str,
) {
    let line = |n: usize, detail: String| AuditEntry {
        at_ms: NOW_MS + i64::try_from(n).unwrap_or(0),
        who: "gatectl:alice".into(),
        action: "finish".into(),
        detail,
    };
    let missing = format!("{prefix}#{}", event_key(prefix, "audit-missing"));
    match store.append_history(&missing, &line(0, "x".into())).await {
        Err(StoreError::Corrupt(_)) => {}
        other => panic!("an append to no record: {other:?}"),
    }
    assert!(store.history(&missing).await.expect("history").is_empty());
    assert!(store.get(&missing).await.expect("get").is_none(), "created");

    let r = sample_record(prefix, "audit", "owner-a", NOW_MS);
    let quiet = sample_record(prefix, "audit-quiet", "owner-a", NOW_MS);
    for rec in [&r, &quiet] {
        must_reserve(store.as_ref(), rec, NOW_MS).await;
    }
    let long = "é".repeat(limits::MAX_AUDIT_DETAIL_BYTES);
    let first = line(0, long);
    let second = line(1, "committed effect EFFECT-1 (found at the server)".into());
    store.append_history(&r.pk, &first).await.expect("append");
    store.append_history(&r.pk, &second).await.expect("append");
    let history = store.history(&r.pk).await.expect("history");
    assert_eq!(history, vec![first.bounded(), second.bounded()]);
    assert!(history[0].detail.len() <= limits::MAX_AUDIT_DETAIL_BYTES);
    assert!(store.history(&quiet.pk).await.expect("history").is_empty());
    assert_eq!(must_get(store.as_ref(), &r.pk).await, r, "the record kept");

    for n in 2..limits::MAX_HISTORY_ENTRIES {
        store
            .append_history(&r.pk, &line(n, format!("line {n}")))
            .await
            .expect("append below the limit");
    }
    match store
        .append_history(&r.pk, &line(99, "one too many".into()))
        .await
    {
        Err(StoreError::Refused(ItemRefusal::HistoryFull { limit })) => {
            assert_eq!(limit, limits::MAX_HISTORY_ENTRIES)
        }
        other => panic!("an append past the limit: {other:?}"),
    }
    let history = store.history(&r.pk).await.expect("history");
    assert_eq!(history.len(), limits::MAX_HISTORY_ENTRIES);
    assert_eq!(history[2].detail, "line 2");
}

/// A reserve that replaces an expired finished record starts a new record with an empty history,
/// as DynamoDB's `PutItem` writes a new item: the old life's lines are not the new one's.
pub async fn a_new_reservation_starts_an_empty_history(
    store: Arc<dyn OperatorStore>,
    prefix: &str,
) {
    let old = sample_record(prefix, "audit-renew", "owner-a", NOW_MS);
    must_reserve(store.as_ref(), &old, NOW_MS).await;
    let row = BusinessRow::for_record(&old, "EFFECT-OLD", NOW_MS);
    let out = store
        .commit(&old.pk, "owner-a", "EFFECT-OLD", &row, NOW_MS)
        .await
        .expect("commit");
    assert_eq!(out, CommitOutcome::Committed);
    let entry = AuditEntry {
        at_ms: NOW_MS,
        who: "gatectl:alice".into(),
        action: "finish".into(),
        detail: "old life".into(),
    };
    store.append_history(&old.pk, &entry).await.expect("append");
    let later = NOW_MS + (TTL_S + 60) * 1000;
    let new = sample_record(prefix, "audit-renew", "owner-b", later);
    must_reserve(store.as_ref(), &new, later).await;
    assert!(
        store.history(&new.pk).await.expect("history").is_empty(),
        "the new record inherited the old one's history"
    );
    store.append_history(&new.pk, &entry).await.expect("append");
    assert_eq!(store.history(&new.pk).await.expect("history"), vec![entry]);
}
