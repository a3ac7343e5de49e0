//! The moto the tests run on serialises conditional writes per item, as DynamoDB does.
//!
//! Plain `moto_server` serves requests on threads and moto checks a condition and writes the item
//! without a lock, so two concurrent `PutItem`s with `attribute_not_exists(pk)` on one key can both
//! succeed (seen with two copies of one message in one batch). `scripts/with-moto.sh` therefore
//! runs moto through `scripts/moto-serial.py` (DynamoDB requests one at a time). This test is what says so:
//! run it against plain moto (`MOTO_SERVER=.venv/bin/moto_server scripts/with-moto.sh cargo test
//! -p integration-tests --test moto_serialises`) and it fails (two or more winners on most keys).
//!
//! The race window is moto's time between reading the item and writing it, most of it parsing the
//! condition expression; with a plain `attribute_not_exists(pk)` it is so short that plain moto
//! loses the race only now and then. The condition here says exactly that, written as a long
//! disjunction of the same test (3,947 characters, under DynamoDB's 4 KB expression limit), so
//! that an unserialised server fails this test on nearly every run.
//!
//! Run with `scripts/with-moto.sh cargo test -p integration-tests` (or `make test`).

use aws_sdk_dynamodb::types::AttributeValue;
use integration_tests::{dynamo_client, fresh_tables};

/// Keys raced, one after the other.
const KEYS: usize = 10;
/// Concurrent conditional puts per key.
const WRITERS: usize = 16;

/// `attribute_not_exists(pk) AND (attribute_not_exists(pk) OR ... 140 times)`: the same
/// condition as `attribute_not_exists(pk)`, slow for moto to parse (see the module docs).
fn condition() -> String {
    let clauses = vec!["attribute_not_exists(pk)"; 140].join(" OR ");
    format!("attribute_not_exists(pk) AND ({clauses})")
}

/// For each of 10 keys, 16 concurrent `PutItem`s conditional on the key being absent, through the
/// Rust SDK: exactly one succeeds, the other 15 fail with `ConditionalCheckFailedException`, and
/// the stored item is the winner's.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn concurrent_conditional_puts_on_one_key_succeed_exactly_once() {
    let condition = condition();
    assert!(condition.len() <= 4096, "DynamoDB's expression limit");
    let client = dynamo_client().await;
    let (table, _) = fresh_tables(&client, "serial").await;
    for k in 0..KEYS {
        let pk = format!("race#{k}");
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(WRITERS));
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (client, table, pk, barrier, condition) = (
                    client.clone(),
                    table.clone(),
                    pk.clone(),
                    barrier.clone(),
                    condition.clone(),
                );
                tokio::spawn(async move {
                    barrier.wait().await;
                    let put = client
                        .put_item()
                        .table_name(&table)
                        .item("pk", AttributeValue::S(pk))
                        .item("writer", AttributeValue::N(w.to_string()))
                        .condition_expression(condition)
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
