//! Conformance cases of what an item may hold ([`gate::store::limits`]): a store refuses a label
//! named like one of its own attributes and an item over DynamoDB's item limit, with
//! [`StoreError::Refused`] and nothing written, so the memory store refuses what DynamoDB refuses.

use super::*;
use gate::store::limits::{
    check_new_event, record_item_bytes, ItemRefusal, MAX_ITEM_BYTES, RESERVED_NAMES,
};
use gate::store::GuardOutcome;

/// A reserve whose record has a label named like a store attribute (each of
/// [`RESERVED_NAMES`]: `pk`, `status`, `effect_id`, `history`, `source_event`, ...) or with an
/// empty name is refused with [`ItemRefusal::ReservedLabel`] (the name) or
/// [`ItemRefusal::EmptyLabelName`], and nothing is stored. A name that differs only in case
/// (`Status`) is the integration's own: reserved and read back with its value.
pub async fn reserved_label_names_are_refused(store: Arc<dyn Store>, prefix: &str) {
    for name in RESERVED_NAMES {
        let mut r = sample_record(prefix, &format!("label-{name}"), "w1#0", NOW_MS);
        r.labels.insert(name.to_string(), "label value".to_string());
        let out = store.reserve(&r, NOW_MS).await;
        assert_eq!(
            out,
            Err(StoreError::Refused(ItemRefusal::ReservedLabel {
                name: name.to_string()
            })),
            "label {name}"
        );
        assert_eq!(store.get(&r.pk).await.expect("get"), None, "label {name}");
    }
    let mut r = sample_record(prefix, "label-empty", "w1#0", NOW_MS);
    r.labels.insert(String::new(), "label value".to_string());
    assert_eq!(
        store.reserve(&r, NOW_MS).await,
        Err(StoreError::Refused(ItemRefusal::EmptyLabelName))
    );
    assert_eq!(store.get(&r.pk).await.expect("get"), None);

    let mut r = sample_record(prefix, "label-case", "w1#0", NOW_MS);
    r.labels
        .insert("Status".to_string(), "label value".to_string());
    must_reserve(store.as_ref(), &r, NOW_MS).await;
    let stored = must_get(store.as_ref(), &r.pk).await;
    assert_eq!(stored.label("Status"), "label value");
    assert_eq!(stored, r);
}

/// A record of exactly [`MAX_ITEM_BYTES`] (400,000 bytes as DynamoDB counts names and values;
/// padded with a label, which every backend counts as its UTF-8 length) is reserved and read back
/// whole; one byte more is refused with [`ItemRefusal::TooLarge`] `{bytes: 400_001, limit:
/// 400_000}` and nothing is stored. A two-byte character counts two bytes.
pub async fn items_over_the_size_limit_are_refused(store: Arc<dyn Store>, prefix: &str) {
    let padded = |name: &str, extra: usize| {
        let mut r = sample_record(prefix, name, "w1#0", NOW_MS);
        r.labels.insert("padding".to_string(), String::new());
        let room = MAX_ITEM_BYTES - record_item_bytes(&r);
        r.labels
            .insert("padding".to_string(), "x".repeat(room + extra));
        r
    };
    let at_limit = padded("size-at-limit", 0);
    assert_eq!(record_item_bytes(&at_limit), 400_000);
    must_reserve(store.as_ref(), &at_limit, NOW_MS).await;
    assert_eq!(must_get(store.as_ref(), &at_limit.pk).await, at_limit);

    let over = padded("size-over", 1);
    assert_eq!(
        store.reserve(&over, NOW_MS).await,
        Err(StoreError::Refused(ItemRefusal::TooLarge {
            bytes: 400_001,
            limit: 400_000
        }))
    );
    assert_eq!(store.get(&over.pk).await.expect("get"), None);

    // The last ASCII byte of the padding replaced by a two-byte character: 400,001 bytes.
    let mut wide = padded("size-wide", 0);
    if let Some(padding) = wide.labels.get_mut("padding") {
        padding.pop();
        padding.push('\u{e9}');
    }
    assert_eq!(
        store.reserve(&wide, NOW_MS).await,
        Err(StoreError::Refused(ItemRefusal::TooLarge {
            bytes: 400_001,
            limit: 400_000
        }))
    );
    assert_eq!(store.get(&wide.pk).await.expect("get"), None);
}

/// A commit whose business row has a label named like a store attribute (`booked_at`, a legacy
/// name of the row's time, read on rows an older gate wrote), or a
/// guard whose natural-key item has one (`expires_at`), is refused with
/// [`ItemRefusal::ReservedLabel`] before anything is written: the record stays `in_flight` under
/// its holder, no row and no natural-key item exist. The same writes with the integration's own
/// labels then succeed.
pub async fn commit_and_guard_refuse_reserved_labels(store: Arc<dyn Store>, prefix: &str) {
    let r = sample_record(prefix, "commit-labels", "w1#0", NOW_MS);
    must_reserve(store.as_ref(), &r, NOW_MS).await;
    let owner = "w1#0";
    let row = BusinessRow::for_record(&r, "EFFECT-1", NOW_MS + 1);

    let mut bad_row = row.clone();
    bad_row
        .labels
        .insert("booked_at".to_string(), "yesterday".to_string());
    let out = store
        .commit(&r.pk, owner, "EFFECT-1", &bad_row, NOW_MS + 1)
        .await;
    assert_eq!(
        out,
        Err(StoreError::Refused(ItemRefusal::ReservedLabel {
            name: "booked_at".to_string()
        }))
    );

    let mut bad_key = sample_natural_key(&r, NOW_MS + 1);
    bad_key
        .labels
        .insert("expires_at".to_string(), "never".to_string());
    let out = store.guard(&r, &bad_key, NOW_MS + 1).await;
    assert_eq!(
        out,
        Err(StoreError::Refused(ItemRefusal::ReservedLabel {
            name: "expires_at".to_string()
        }))
    );
    assert_eq!(must_get(store.as_ref(), &r.pk).await, r, "nothing written");
    assert_eq!(
        store.business_row(&r.event_key).await.expect("booking"),
        None
    );
    // No natural-key item was written: another event key for the same event still holds it.
    let mut other = sample_record(prefix, "commit-labels-other", "w2#0", NOW_MS);
    other.labels = r.labels.clone();
    let key = sample_natural_key(&other, NOW_MS + 1);
    assert_eq!(
        store.guard(&other, &key, NOW_MS + 1).await,
        Ok(GuardOutcome::Held)
    );

    let out = store
        .commit(&r.pk, owner, "EFFECT-1", &row, NOW_MS + 1)
        .await
        .expect("commit");
    assert_eq!(out, CommitOutcome::Committed);
    assert_eq!(
        store.business_row(&r.event_key).await.expect("booking"),
        Some(row)
    );
}

/// A commit whose business row has a label named like one of the row's own columns as this
/// store lays them out ([`IdempotencyStore::row_columns`]: by default `source_event`,
/// `effect_id`, `written_at`; an integration's own names when the store was built with them) is
/// refused with [`ItemRefusal::ReservedLabel`] before anything is written: a label `written_at`
/// would overwrite the row's time. The consumer's pre-check ([`check_new_event`] with the same
/// names) refuses the same row. The row without it is committed and read back whole.
pub async fn commit_refuses_a_label_named_like_a_row_column(store: Arc<dyn Store>, prefix: &str) {
    let r = sample_record(prefix, "row-column-labels", "w1#0", NOW_MS);
    must_reserve(store.as_ref(), &r, NOW_MS).await;
    let row = BusinessRow::for_record(&r, "EFFECT-1", NOW_MS + 1);
    let columns = store.row_columns();
    for name in columns.names() {
        let mut bad = row.clone();
        bad.labels
            .insert(name.to_string(), "label value".to_string());
        let refused = ItemRefusal::ReservedLabel {
            name: name.to_string(),
        };
        assert_eq!(
            check_new_event(&r, &bad, None, &columns),
            Err(refused.clone()),
            "pre-check, label {name}"
        );
        assert_eq!(
            store
                .commit(&r.pk, "w1#0", "EFFECT-1", &bad, NOW_MS + 1)
                .await,
            Err(StoreError::Refused(refused)),
            "label {name}"
        );
        assert_eq!(must_get(store.as_ref(), &r.pk).await, r, "label {name}");
        assert_eq!(
            store.business_row(&r.event_key).await.expect("booking"),
            None
        );
    }
    assert_eq!(
        store
            .commit(&r.pk, "w1#0", "EFFECT-1", &row, NOW_MS + 1)
            .await
            .expect("commit"),
        CommitOutcome::Committed
    );
    assert_eq!(
        store.business_row(&r.event_key).await.expect("booking"),
        Some(row)
    );
}

/// A record holds at most [`gate::store::limits::MAX_EFFECT_IDS`] distinct effect ids: a further
/// one is not added and the record is returned as it is (a known id is still idempotent), so the
/// set cannot grow the item past DynamoDB's limit.
pub async fn record_effect_id_keeps_at_most_max_effect_ids(store: Arc<dyn Store>, prefix: &str) {
    use gate::store::limits::MAX_EFFECT_IDS;
    let r = sample_record(prefix, "max-ids", "owner-a", NOW_MS);
    must_reserve(store.as_ref(), &r, NOW_MS).await;
    for i in 0..MAX_EFFECT_IDS + 2 {
        let after = store
            .record_effect_id(&r.pk, &format!("E-{i:03}"), NOW_MS + 1)
            .await
            .expect("record_effect_id")
            .expect("the record");
        assert_eq!(
            after.effect_ids.len(),
            (i + 1).min(MAX_EFFECT_IDS),
            "id {i}"
        );
    }
    let again = store
        .record_effect_id(&r.pk, "E-000", NOW_MS + 2)
        .await
        .expect("record_effect_id")
        .expect("the record");
    assert_eq!(again.effect_ids.len(), MAX_EFFECT_IDS);
    let kept = must_get(store.as_ref(), &r.pk).await.effect_ids;
    assert_eq!(kept.len(), MAX_EFFECT_IDS);
    assert!(kept.contains("E-015") && !kept.contains("E-016") && !kept.contains("E-017"));
}
