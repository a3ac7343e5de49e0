//! The moto the tests run on serialises conditional writes per item, as DynamoDB does.
//!
//! Plain `moto_server` serves requests on threads and moto checks a condition and writes the item
//! without a lock, so two concurrent `PutItem`s with `attribute_not_exists(pk)` on one key can both
//! succeed (seen with two copies of one message in one batch). `scripts/with-moto.sh` therefore
//! runs moto through `scripts/moto_serial.py` (one request at a time). This test is what says so:
//! run it against plain moto (`MOTO_SERVER=.venv/bin/moto_server scripts/with-moto.sh cargo test
//! -p integration-tests --test moto_serialises`) and it fails now and then, as the race allows.
//!
//! Run with `scripts/with-moto.sh cargo test -p integration-tests` (or `make test`).

use aws_sdk_dynamodb::types::AttributeValue;
use integration_tests::{dynamo_client, fresh_tables};

/// Keys raced, one after the other.
const KEYS: usize = 40;
/// Concurrent conditional puts per key.
const WRITERS: usize = 16;

/// For each of 40 keys, 16 concurrent `PutItem`s with `attribute_not_exists(pk)` through the Rust
/// SDK: exactly one succeeds, the other 15 fail with `ConditionalCheckFailedException`, and the
/// stored item is the winner's.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn concurrent_conditional_puts_on_one_key_succeed_exactly_once() {
    let client = dynamo_client().await;
    let (table, _) = fresh_tables(&client, "serial").await;
    for k in 0..KEYS {
        let pk = format!("race#{k}");
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(WRITERS));
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (client, table, pk, barrier) =
                    (client.clone(), table.clone(), pk.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    let put = client
                        .put_item()
                        .table_name(&table)
                        .item("pk", AttributeValue::S(pk))
                        .item("writer", AttributeValue::N(w.to_string()))
                        .condition_expression("attribute_not_exists(pk)")
                        .send()
                        .await;
                    match put {
                        Ok(_) => Some(w),
                        Err(e) => {
                            let e = e.into_service_error();
                            assert!(
                                e.is_conditional_check_failed_exception(),
                                "writer {w}: {e:?}"
                            );
                            None
                        }
                    }
                })
            })
            .collect();
        let mut winners = Vec::new();
        for writer in writers {
            if let Some(w) = writer.await.expect("writer task") {
                winners.push(w);
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "key {pk}: {} of {WRITERS} conditional puts succeeded: {winners:?}",
            winners.len()
        );
        let stored = client
            .get_item()
            .table_name(&table)
            .key("pk", AttributeValue::S(pk.clone()))
            .consistent_read(true)
            .send()
            .await
            .expect("GetItem");
        let writer = stored
            .item()
            .and_then(|i| i.get("writer"))
            .and_then(|v| v.as_n().ok())
            .cloned();
        assert_eq!(writer, Some(winners[0].to_string()), "key {pk}");
    }
}
