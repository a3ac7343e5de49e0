//! Hostile-review attacks on the business row's columns named by the integration, on
//! DynamoDB (moto): an older row whose label is named like a new column reads
//! through the operator's read port; column names that are DynamoDB reserved words or hold
//! `.`/`#` commit (the row's condition names its key through an expression attribute name),
//! refuse a second row for the same event, and read back.

use aws_sdk_dynamodb::types::AttributeValue;
use gate::record::{BusinessRow, Labels, RowColumns};
use gate::store::BusinessRows;
use gate::store::{CommitOutcome, IdempotencyStore, Reservation, StoreError};
use gate_lambda::store::open_operator_store;
use gate_testkit::conformance::{sample_record, NOW_MS};
use integration_tests::{
    dynamo_client, fresh_store_with_columns, sdk_config, unique, wiring_config,
};

/// A row the previous release wrote under the legacy names with a label `written_at` (a
/// string; the previous release did not reserve that name) reads under the neutral names: the
/// legacy time, the label kept. Before the fix it read as `Corrupt` ("written_at is not of type
/// N"), so gatectl could not show the event's row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_row_with_a_label_named_written_at_reads_through_the_read_port() {
    let (config, _, bookings) = wiring_config(&unique("break-rows-old")).await;
    let s = |v: &str| AttributeValue::S(v.to_string());
    dynamo_client()
        .await
        .put_item()
        .table_name(&bookings)
        .item("source_event", s("ev-old"))
        .item("slot_id", s("E-old"))
        .item("booked_at", AttributeValue::N("1749441600000".into()))
        .item("written_at", s("2025-06-09T04:00:00Z"))
        .send()
        .await
        .expect("put the old row");
    let port = open_operator_store(
        &config.lambda.store,
        &sdk_config().await,
        RowColumns::NEUTRAL,
    )
    .await
    .expect("the read port");
    let row = port
        .business_row("ev-old")
        .await
        .expect("an older row reads")
        .expect("the row");
    assert_eq!(row.effect_id, "E-old");
    assert_eq!(row.written_at_ms, 1_749_441_600_000);
    assert_eq!(
        row.labels,
        Labels::from([("written_at".to_string(), "2025-06-09T04:00:00Z".to_string())])
    );
}

/// Reserved words (`name`, `status`) and punctuation (`.`, `#`) as column names, the key's
/// too: the commit writes the row under them, a second commit of the event is refused by the
/// row's condition, and the row reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserved_words_and_punctuation_as_column_names_commit_and_read_back() {
    let columns = RowColumns {
        event_key: "name",
        effect_id: "status.id",
        written_at: "#size",
    };
    let name = unique("break-rows-words");
    let (store, bookings) = fresh_store_with_columns(&name, columns).await;
    let r = sample_record(&name, "words", "owner-a", NOW_MS);
    assert_eq!(
        store.reserve(&r, NOW_MS).await.expect("reserve"),
        Reservation::Reserved
    );
    let row = BusinessRow {
        source_event: r.event_key.clone(),
        effect_id: "E-1".into(),
        labels: Labels::from([("size".to_string(), "XL".to_string())]),
        written_at_ms: NOW_MS + 1,
    };
    let outcome = store
        .commit(&r.pk, "owner-a", "E-1", &row, NOW_MS + 1)
        .await
        .expect("commit");
    assert_eq!(outcome, CommitOutcome::Committed);
    let item = store
        .client()
        .get_item()
        .table_name(&bookings)
        .key("name", AttributeValue::S(r.event_key.clone()))
        .consistent_read(true)
        .send()
        .await
        .expect("get")
        .item()
        .cloned()
        .expect("the row");
    assert_eq!(item["status.id"], AttributeValue::S("E-1".into()));
    assert_eq!(item["#size"], AttributeValue::N((NOW_MS + 1).to_string()));
    assert_eq!(
        store.business_row(&r.event_key).await.expect("read"),
        Some(row.clone())
    );

    // A second record naming the same event key (the row's own condition is the fence): a row
    // already there is never overwritten.
    let mut r2 = sample_record(&name, "words", "owner-b", NOW_MS);
    r2.pk = format!("{}-second", r.pk);
    assert_eq!(
        store.reserve(&r2, NOW_MS).await.expect("reserve"),
        Reservation::Reserved
    );
    let other = BusinessRow {
        effect_id: "E-2".into(),
        ..row.clone()
    };
    let second = store
        .commit(&r2.pk, "owner-b", "E-2", &other, NOW_MS + 2)
        .await;
    assert!(matches!(second, Err(StoreError::Corrupt(_))), "{second:?}");
    assert_eq!(
        store.business_row(&r.event_key).await.expect("read"),
        Some(row)
    );
}
