//! `DynamoStore` and `SqsManualQueue` against moto: the store conformance suite, the stored item
//! shape, the error mapping, and the request count of the gate's happy path and of a duplicate.
//!
//! Run with `scripts/with-moto.sh cargo test -p integration-tests` (or `make test`).

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use gate::clock::{ms_to_s, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation, RecordOutcome};
use gate::manual::{ManualItem, ManualQueue, ManualReason, MemoryManualQueue};
use gate::record::RecordStatus;
use gate::signals::collect_store_signals;
use gate::store::BusinessRows;
use gate::store::{
    CommitOutcome, IdempotencyStore, InFlightEntry, InFlightIndex, Reservation, StoreError,
};
use gate_dynamo::sqs::SqsManualQueue;
use gate_dynamo::{
    record_from_item, record_to_item, DynamoStore, INFLIGHT_INDEX, INFLIGHT_PROJECTED_ATTRIBUTES,
};
use gate_testkit::conformance::{sample_record, NOW_MS};
use integration_tests::{
    dynamo_client, dynamo_client_with, fresh_queue, fresh_store, fresh_store_with,
    put_unreadable_in_flight, sqs_client, sqs_event, CallRecorder,
};
use truck_slot::terminal::{CallOutcome, Effect, LookupOutcome, SlotTerminal};

// The store conformance suite, one test per case (the list lives once, in `gate_testkit::conformance`),
// each case on fresh tables, plus every case in turn on one table pair.
gate_testkit::store_conformance_tests!(case => Arc::new(fresh_store(case).await));

// The operator's port (gatectl's scans and audit history) on the same tables.
mod operator {
    use super::*;
    gate_testkit::operator_store_conformance_tests!(case => Arc::new(fresh_store(case).await));
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

/// What the `InFlight` index returns to whoever may query it (the metrics role): the keys and
/// `INFLIGHT_PROJECTED_ATTRIBUTES`, exactly, and so never the stored claim request with its PIN.
#[tokio::test]
async fn the_in_flight_index_holds_no_claim_request() {
    let store = fresh_store("projection").await;
    let r = sample_record("projection", "one", "owner-a", NOW_MS);
    assert_eq!(
        store.reserve(&r, NOW_MS).await.unwrap(),
        Reservation::Reserved
    );
    let shard = r
        .inflight_shard
        .clone()
        .expect("an in_flight record has a shard");
    let out = store
        .client()
        .query()
        .table_name(store.idempotency_table())
        .index_name(INFLIGHT_INDEX)
        .key_condition_expression("inflight_shard = :shard")
        .expression_attribute_values(":shard", AttributeValue::S(shard))
        .send()
        .await
        .expect("Query InFlight");
    let items = out.items();
    assert_eq!(items.len(), 1);
    let mut names: Vec<&str> = items[0].keys().map(String::as_str).collect();
    names.sort_unstable();
    let mut expected: Vec<&str> = INFLIGHT_PROJECTED_ATTRIBUTES.to_vec();
    expected.extend(["pk", "inflight_shard", "created_at"]);
    expected.sort_unstable();
    assert_eq!(names, expected);
    assert!(!items[0].contains_key("request"));
}

/// An `InFlight` item this code did not write (here: an unknown `status`) does not block its
/// shard: the page still gives the readable entry behind it, the bad item comes back apart with
/// its `pk` and `created_at`, and the store signals count it (it is stuck work nobody finishes).
#[tokio::test]
async fn an_unreadable_in_flight_item_does_not_block_its_shard() {
    let store = fresh_store("unreadable").await;
    let good = sample_record("unreadable", "good", "owner-a", NOW_MS - 20 * 60_000);
    assert_eq!(
        store.reserve(&good, NOW_MS - 20 * 60_000).await.unwrap(),
        Reservation::Reserved
    );
    let shard = good.inflight_shard.clone().expect("shard");
    let bad_created = NOW_MS - 30 * 60_000;
    put_unreadable_in_flight(&store, "unreadable#bad", &shard, bad_created).await;

    let page = store
        .stale_in_flight(&shard, NOW_MS, None, 10)
        .await
        .expect("the page reads despite the bad item");
    assert_eq!(page.entries, vec![InFlightEntry::from(&good)]);
    assert_eq!(page.unreadable.len(), 1);
    assert_eq!(page.unreadable[0].pk.as_deref(), Some("unreadable#bad"));
    assert_eq!(page.unreadable[0].created_at_ms, Some(bad_created));

    let signals = collect_store_signals(&store, NOW_MS)
        .await
        .expect("signals");
    assert_eq!(signals.oldest_in_flight_age_s, 30 * 60);
    assert_eq!(signals.in_flight_older_than_10m, 2);
}

/// The stored attributes and their types and units, before and after the commit.
#[tokio::test]
async fn stored_item_shape_and_units() {
    let store = fresh_store("shape").await;
    let r = sample_record("shape", "one", "owner-a", NOW_MS);
    assert_eq!(
        store.reserve(&r, NOW_MS).await.unwrap(),
        Reservation::Reserved
    );

    let item = raw_item(&store, &r.pk).await;
    assert_eq!(item["status"], AttributeValue::S("in_flight".into()));
    assert_eq!(
        item["expires_at"],
        AttributeValue::N(r.expires_at_s.to_string())
    );
    assert_eq!(
        r.expires_at_s,
        ms_to_s(NOW_MS) + 21 * 24 * 3600,
        "epoch seconds: the sample record's 21-day TTL"
    );
    assert_eq!(
        item["lease_until"],
        AttributeValue::N((NOW_MS + 30_000).to_string())
    );
    assert_eq!(item["created_at"], AttributeValue::N(NOW_MS.to_string()));
    assert!(matches!(&item["request"], AttributeValue::B(b) if b.as_ref() == r.request.as_slice()));
    assert_eq!(
        item["inflight_shard"],
        AttributeValue::S(r.inflight_shard.clone().unwrap())
    );
    assert!(!item.contains_key("effect_ids"), "no empty set stored");
    assert_eq!(record_from_item(&item).unwrap(), r);
    assert_eq!(record_to_item(&r), item);

    let booking = gate::record::BusinessRow::for_record(&r, "SLOT-1", NOW_MS + 5);
    let out = store
        .commit(
            &r.pk,
            r.lease_owner.as_deref().unwrap(),
            "SLOT-1",
            &booking,
            NOW_MS + 5,
        )
        .await
        .unwrap();
    assert!(matches!(out, CommitOutcome::Committed));
    let item = raw_item(&store, &r.pk).await;
    assert_eq!(item["status"], AttributeValue::S("committed".into()));
    assert_eq!(item["effect_id"], AttributeValue::S("SLOT-1".into()));
    assert_eq!(
        item["effect_ids"],
        AttributeValue::Ss(vec!["SLOT-1".into()])
    );
    for gone in ["inflight_shard", "lease_until", "request"] {
        assert!(!item.contains_key(gone), "{gone} must be removed on commit");
    }
    // The committer stays as the record's last holder: the retry of a commit recognises it.
    assert_eq!(
        item["lease_owner"],
        AttributeValue::S(r.lease_owner.clone().unwrap())
    );
    let b = store
        .client()
        .get_item()
        .table_name(store.business_table())
        .key("source_event", AttributeValue::S(r.event_key.clone()))
        .send()
        .await
        .unwrap()
        .item()
        .cloned()
        .unwrap();
    // A store built without an integration's names lays the row out with the neutral ones
    // (`RowColumns::NEUTRAL`; truck-slot's own are tested in row_columns.rs).
    assert_eq!(b["written_at"], AttributeValue::N((NOW_MS + 5).to_string()));
    assert_eq!(b["effect_id"], AttributeValue::S("SLOT-1".into()));
    assert!(!b.contains_key("slot_id") && !b.contains_key("booked_at"));
    assert_eq!(b["container"], AttributeValue::S("CSQU3054383".into()));

    let ttl = store
        .client()
        .describe_time_to_live()
        .table_name(store.idempotency_table())
        .send()
        .await
        .unwrap();
    let ttl = ttl.time_to_live_description().unwrap();
    assert_eq!(ttl.attribute_name(), Some("expires_at"));
}

/// An item that cannot be read as a record is `Corrupt`, on `get` and on a reserve conflict.
#[tokio::test]
async fn unreadable_item_is_corrupt() {
    let store = fresh_store("corrupt").await;
    let r = sample_record("corrupt", "one", "owner-a", NOW_MS);
    let mut item = record_to_item(&r);
    item.insert("status".into(), AttributeValue::S("pending".into()));
    store
        .client()
        .put_item()
        .table_name(store.idempotency_table())
        .set_item(Some(item))
        .send()
        .await
        .unwrap();
    assert!(matches!(
        store.get(&r.pk).await,
        Err(StoreError::Corrupt(_))
    ));
    assert!(matches!(
        store.reserve(&r, NOW_MS).await,
        Err(StoreError::Corrupt(_))
    ));
}

/// A missing table is a transient `Unavailable`, not a panic or `Corrupt`.
#[tokio::test]
async fn missing_table_is_unavailable() {
    let store = DynamoStore::new(dynamo_client().await, "no-such-table", "no-such-bookings");
    let r = sample_record("missing", "one", "owner-a", NOW_MS);
    let err = store.reserve(&r, NOW_MS).await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    let err = store.get(&r.pk).await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
}

/// A `ValidationException` (here: the table's key is not `pk`, so every request names a key that
/// does not match the schema) is the permanent `Invalid`, never the transient `Unavailable` that
/// would retry the message until its dead-letter queue as if DynamoDB were down. moto raises it
/// as DynamoDB does; the item-size case is refused by the codec before any request
/// (`StoreError::Refused`), and the mapping of the service's own answer is unit-tested in
/// `gate_dynamo::errors`.
#[tokio::test]
async fn a_validation_exception_is_permanent_not_unavailable() {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    let client = dynamo_client().await;
    let table = integration_tests::unique("wrong-key");
    client
        .create_table()
        .table_name(&table)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .expect("CreateTable");
    let store = DynamoStore::new(client, table.clone(), table);
    let r = sample_record("wrong-key", "one", "owner-a", NOW_MS);
    let err = store.reserve(&r, NOW_MS).await.unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    assert!(!err.is_transient());
    let err = store.get(&r.pk).await.unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
}

/// A terminal that always issues the same slot.
struct FixedSlot;

#[async_trait]
impl SlotTerminal for FixedSlot {
    async fn claim(&self, _op_key: &str, _request: &[u8]) -> CallOutcome {
        CallOutcome::Done(Effect {
            effect_id: "ECT-SLOT-0001".into(),
            subject: Some("CSQU3054383".into()),
        })
    }

    async fn lookup(&self, _op_key: &str, _request: &[u8]) -> LookupOutcome {
        LookupOutcome::NotFound
    }
}

/// Through the gate on DynamoDB: a new event costs exactly two `PutItem`s (the reserve, the
/// natural key's guard) and one `TransactWriteItems` (commit); a duplicate exactly one `PutItem`.
#[tokio::test]
async fn gate_request_count_new_event_and_duplicate() {
    let recorder = CallRecorder::new();
    let client = dynamo_client_with(recorder.clone()).await;
    let store = Arc::new(fresh_store_with(client, "count").await);
    let config = GateConfig::new("ect-count");
    let gate = Gate {
        config,
        store: store.clone(),
        integration: Arc::new(truck_slot::TruckSlot::new(
            Arc::new(FixedSlot),
            vec!["ECT-DELTA".to_string()],
        )),
        manual: Arc::new(MemoryManualQueue::new()),
        // 2025-06-09T04:00:00Z; the window below is 08:00-10:00 the same day.
        clock: Arc::new(ManualClock::new(NOW_MS)),
    };
    let invocation = Invocation {
        request_id: "req-1".into(),
        deadline_ms: NOW_MS + 60_000,
    };
    let body = serde_json::json!({
        "notificationId": "PCS-2025-06-09-000123",
        "equipment_number": "CSQU3054383",
        "preferred_window": {"start": "2025-06-09T08:00:00Z", "end": "2025-06-09T10:00:00Z"},
        "terminal": "ECT-DELTA",
        "pin": "4711"
    })
    .to_string();

    recorder.clear();
    let report = gate
        .handle_batch(sqs_event(&[("m1", &body)]), &invocation)
        .await;
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Committed {
            effect_id: "ECT-SLOT-0001".into(),
        }
    );
    assert!(report.response.batch_item_failures.is_empty());
    assert_eq!(
        recorder.calls(),
        vec!["PutItem", "PutItem", "TransactWriteItems"]
    );

    recorder.clear();
    let report = gate
        .handle_batch(sqs_event(&[("m2", &body)]), &invocation)
        .await;
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Duplicate(RecordStatus::Committed)
    );
    assert_eq!(recorder.calls(), vec!["PutItem"]);

    let event_key = report.records[0].event_key.clone().unwrap();
    let booking = store.business_row(&event_key).await.unwrap().unwrap();
    assert_eq!(booking.effect_id, "ECT-SLOT-0001");
    assert_eq!(booking.label("container"), "CSQU3054383");
    let record = store
        .get(&format!("ect-count#{event_key}"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, RecordStatus::Committed);
}

/// Data minimisation, read raw from moto: a record the gate committed holds no
/// `request` attribute (the claim body with the release PIN), nor does one it finished as
/// `manual` (a terminal without key support), nor a poison body's routing record (its stored item
/// held the original body); a record still `in_flight` holds it.
#[tokio::test]
async fn finished_records_on_dynamodb_hold_no_request() {
    let store = Arc::new(fresh_store("minimise").await);
    let gate = Gate {
        config: GateConfig::new("ect-min"),
        store: store.clone(),
        integration: Arc::new(truck_slot::TruckSlot::new(
            Arc::new(FixedSlot),
            vec!["ECT-DELTA".to_string()],
        )),
        manual: Arc::new(MemoryManualQueue::new()),
        clock: Arc::new(ManualClock::new(NOW_MS)),
    };
    let invocation = Invocation {
        request_id: "req-1".into(),
        deadline_ms: NOW_MS + 60_000,
    };
    let body = |id: &str| {
        serde_json::json!({
            "notificationId": id,
            "equipment_number": "CSQU3054383",
            "preferred_window": {"start": "2025-06-09T08:00:00Z", "end": "2025-06-09T10:00:00Z"},
            "terminal": "ECT-DELTA",
            "pin": "PIN-XYZZY-7731"
        })
        .to_string()
    };
    let committed = body("PCS-MIN-1");
    let report = gate
        .handle_batch(sqs_event(&[("m1", &committed)]), &invocation)
        .await;
    assert!(matches!(
        report.records[0].outcome,
        RecordOutcome::Committed { .. }
    ));
    let pk = format!("ect-min#{}", report.records[0].event_key.clone().unwrap());
    let item = raw_item(&store, &pk).await;
    assert_eq!(item["status"], AttributeValue::S("committed".into()));
    assert!(!item.contains_key("request"), "{:?}", item.keys());
    assert!(store.get(&pk).await.unwrap().unwrap().request.is_empty());

    let mut no_key = gate.clone();
    no_key.config.server_supports_idempotency_key = false;
    let manual = body("PCS-MIN-2");
    let report = no_key
        .handle_batch(sqs_event(&[("m2", &manual)]), &invocation)
        .await;
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Manual(ManualReason::NoIdempotencySupport)
    );
    let pk = format!("ect-min#{}", report.records[0].event_key.clone().unwrap());
    let item = raw_item(&store, &pk).await;
    assert_eq!(item["status"], AttributeValue::S("manual".into()));
    assert!(!item.contains_key("request"), "{:?}", item.keys());

    let poison = body("PCS-MIN-3").replace("ECT-DELTA", "PIN-XYZZY-7731");
    let report = gate
        .handle_batch(sqs_event(&[("m3", &poison)]), &invocation)
        .await;
    assert!(matches!(
        report.records[0].outcome,
        RecordOutcome::Rejected(_)
    ));
    let route = format!("ect-min#{}", truck_slot::keys::rejected_route_key(&poison));
    let item = raw_item(&store, &route).await;
    assert_eq!(item["status"], AttributeValue::S("manual".into()));
    assert!(!item.contains_key("request"), "{:?}", item.keys());

    // Still in_flight (reserved, not yet claimed): the request is there for the resumer.
    let held = sample_record("minimise", "held", "owner-a", NOW_MS);
    store.reserve(&held, NOW_MS).await.unwrap();
    let item = raw_item(&store, &held.pk).await;
    assert!(
        matches!(&item["request"], AttributeValue::B(b) if b.as_ref() == held.request.as_slice())
    );
}

/// A body that SQS accepts but whose JSON-escaped form is twice its size (200 KiB of `"`):
/// through the gate on DynamoDB and SQS, its routing record is written (DynamoDB's 400 KB item
/// limit), one manual message is sent (SQS's 256 KiB limit), saying the body was cut and giving
/// the full body's size and SHA-256, and the delivery is acknowledged as rejected, no retry.
#[tokio::test]
async fn an_oversized_body_is_routed_on_dynamodb_and_sqs() {
    let store = Arc::new(fresh_store("oversized").await);
    let sqs = sqs_client().await;
    let url = fresh_queue(&sqs, "manual-oversized").await;
    let gate = Gate {
        config: GateConfig::new("ect-oversized"),
        store: store.clone(),
        integration: Arc::new(truck_slot::TruckSlot::new(
            Arc::new(FixedSlot),
            vec!["ECT-DELTA".to_string()],
        )),
        manual: Arc::new(SqsManualQueue::new(sqs.clone(), url.clone())),
        clock: Arc::new(ManualClock::new(NOW_MS)),
    };
    let invocation = Invocation {
        request_id: "req-big".into(),
        deadline_ms: NOW_MS + 60_000,
    };
    let body = "\"".repeat(200 * 1024);
    let report = gate
        .handle_batch(sqs_event(&[("m-big", &body)]), &invocation)
        .await;
    assert!(
        matches!(report.records[0].outcome, RecordOutcome::Rejected(_)),
        "{:?}",
        report.records[0].outcome
    );
    assert!(report.response.batch_item_failures.is_empty());

    let out = sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    let messages = out.messages();
    assert_eq!(messages.len(), 1);
    let text = messages[0].body().unwrap();
    assert!(text.len() <= gate::manual::MAX_ITEM_JSON_BYTES);
    let v: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(v["reason"], "rejected");
    assert_eq!(v["original_body_truncated"], true);
    assert_eq!(v["original_body_bytes"], 200 * 1024);
    assert_eq!(
        v["original_body_sha256"],
        truck_slot::keys::sha256_hex(body.as_bytes()).as_str()
    );

    // The routing record is stored and done.
    let route_key = truck_slot::keys::rejected_route_key(&body);
    let record = store
        .get(&format!("ect-oversized#{route_key}"))
        .await
        .unwrap()
        .expect("the routing record");
    assert_eq!(record.status, RecordStatus::Manual);
}

/// `SqsManualQueue` sends the JSON body and the `reason` message attribute.
#[tokio::test]
async fn sqs_manual_queue_sends_body_and_reason_attribute() {
    let client = sqs_client().await;
    let url = fresh_queue(&client, "manual").await;
    let queue = SqsManualQueue::new(client.clone(), url.clone());
    let original = r#"{"notificationId":"N-1","pin":"4711"}"#;
    queue
        .send(ManualItem {
            reason: ManualReason::Mismatch,
            detail: "same event key, other fingerprint".into(),
            original_body: original.into(),
            event_key: Some("ab".repeat(32)),
            message_id: "m-42".into(),
            original_body_cut: None,
        })
        .await
        .unwrap();

    let out = client
        .receive_message()
        .queue_url(&url)
        .message_attribute_names("All")
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    let messages = out.messages();
    assert_eq!(messages.len(), 1);
    let body: serde_json::Value = serde_json::from_str(messages[0].body().unwrap()).unwrap();
    assert_eq!(body["reason"], "mismatch");
    assert_eq!(body["detail"], "same event key, other fingerprint");
    assert_eq!(body["original_body"], original);
    assert_eq!(body["event_key"], "ab".repeat(32));
    assert_eq!(body["message_id"], "m-42");
    let reason = &messages[0].message_attributes().unwrap()["reason"];
    assert_eq!(reason.data_type(), "String");
    assert_eq!(reason.string_value(), Some("mismatch"));
}

/// A send that SQS refuses is a `ManualQueueError` (the record is retried), not a panic.
#[tokio::test]
async fn sqs_manual_queue_error_is_reported() {
    let client = sqs_client().await;
    let url = format!(
        "{}/123456789012/no-such-queue",
        integration_tests::moto_endpoint()
    );
    let queue = SqsManualQueue::new(client, url);
    let item = ManualItem {
        reason: ManualReason::Rejected,
        detail: "not_json".into(),
        original_body: "{".into(),
        event_key: None,
        message_id: "m-1".into(),
        original_body_cut: None,
    };
    assert!(queue.send(item).await.is_err());
}
