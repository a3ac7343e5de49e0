//! Items of the idempotency table in the legacy layout (written before the neutral vocabulary:
//! `slot_id`, `slot_ids`) on DynamoDB (moto): read, committed over, marked and
//! counted as the new layout is. `scripts/with-moto.sh cargo test -p integration-tests --test
//! dynamodb_legacy`.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use gate::record::{BusinessRow, IdempotencyRecord, RecordStatus};
use gate::store::{CommitOutcome, IdempotencyStore, InFlightIndex};
use gate_dynamo::{
    record_to_item, DynamoStore, EFFECT_ID, EFFECT_IDS, LEGACY_EFFECT_ID, LEGACY_EFFECT_IDS,
};
use gate_testkit::conformance::{sample_record, NOW_MS};
use integration_tests::fresh_store;

/// Puts `r` as an older gate wrote it: its ids under the legacy names.
async fn put_legacy(store: &DynamoStore, r: &IdempotencyRecord) {
    let mut item = record_to_item(r);
    if let Some(id) = item.remove(EFFECT_ID) {
        item.insert(LEGACY_EFFECT_ID.to_string(), id);
    }
    if let Some(ids) = item.remove(EFFECT_IDS) {
        item.insert(LEGACY_EFFECT_IDS.to_string(), ids);
    }
    store
        .client()
        .put_item()
        .table_name(store.idempotency_table())
        .set_item(Some(item))
        .send()
        .await
        .expect("PutItem");
}

async fn raw_item(store: &DynamoStore, pk: &str) -> HashMap<String, AttributeValue> {
    store
        .client()
        .get_item()
        .table_name(store.idempotency_table())
        .key("pk", AttributeValue::S(pk.to_string()))
        .consistent_read(true)
        .send()
        .await
        .expect("GetItem")
        .item()
        .cloned()
        .expect("item")
}

#[tokio::test]
async fn a_legacy_item_is_read_committed_over_and_counted() {
    let store = fresh_store("legacy-layout").await;

    // In flight, an id already recorded under the legacy name by a holder that lost its lease:
    // the commit of that id passes the "only our effect" condition, another id's does not.
    let mut held = sample_record("legacy", "held", "owner-a", NOW_MS);
    held.effect_ids = ["S-RECORDED".to_string()].into();
    put_legacy(&store, &held).await;
    assert_eq!(store.get(&held.pk).await.expect("get"), Some(held.clone()));

    // A second id recorded by the new code beside the legacy set: two distinct ids, marked.
    let after = store
        .record_effect_id(&held.pk, "S-SECOND", NOW_MS + 1)
        .await
        .expect("record_effect_id")
        .expect("record");
    assert_eq!(
        after.effect_ids,
        ["S-RECORDED".to_string(), "S-SECOND".to_string()].into()
    );
    assert_eq!(store.multi_effect_keys().await.expect("multi"), 1);

    let row = BusinessRow::for_record(&held, "S-RECORDED", NOW_MS + 5);
    assert!(matches!(
        store
            .commit(&held.pk, "owner-a", "S-RECORDED", &row, NOW_MS + 5)
            .await
            .expect("commit"),
        CommitOutcome::Committed
    ));
    let committed = store.get(&held.pk).await.expect("get").expect("record");
    assert_eq!(committed.status, RecordStatus::Committed);
    assert_eq!(committed.effect_id.as_deref(), Some("S-RECORDED"));
    let item = raw_item(&store, &held.pk).await;
    assert!(
        !item.contains_key(LEGACY_EFFECT_ID),
        "the commit removes the legacy id"
    );
    assert_eq!(item[EFFECT_ID], AttributeValue::S("S-RECORDED".into()));

    // A committed legacy item reads as committed with its id.
    let mut done = sample_record("legacy", "done", "owner-b", NOW_MS);
    done.status = RecordStatus::Committed;
    done.effect_id = Some("S-DONE".into());
    done.effect_ids = ["S-DONE".to_string()].into();
    done.lease_until_ms = None;
    done.inflight_shard = None;
    put_legacy(&store, &done).await;
    assert_eq!(store.get(&done.pk).await.expect("get"), Some(done));
}
