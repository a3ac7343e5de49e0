//! Item 4: a plain write that meets a running transaction. The reserve `PutItem` or a take-over
//! `UpdateItem` answered `TransactionConflictException`, and the commit cancelled
//! `[None, TransactionConflict]`: nothing was written, so the record is a batch item
//! failure (SQS redelivers it), never a duplicate, never counted in the duplicate ratio, never
//! routed to a person; the redelivery commits it with the one slot.

use std::sync::Arc;

use gate::consumer::RecordOutcome;
use gate::signals::Counts;
use gate::store::Store;
use integration_tests::fault_proxy::{store_via_with, Fault, FaultProxy};
use integration_tests::{moto_endpoint, unique};

use crate::World;

const CONFLICT: &str = "TransactionConflictException";

/// The commit's cancellation when a plain write of another client holds the booking's item.
fn commit_conflict() -> Fault {
    Fault::Cancel(vec!["None", "TransactionConflict"])
}

fn assert_retried(report: &gate::consumer::BatchReport, message_id: &str) {
    assert!(
        matches!(report.records[0].outcome, RecordOutcome::Retry(_)),
        "{:?}",
        report.records[0].outcome
    );
    let failures: Vec<&str> = report
        .response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(failures, [message_id]);
}

/// The reserve meets a running transaction: retried; the redelivery commits.
#[tokio::test]
async fn a_reserve_that_meets_a_running_transaction_is_retried() {
    let (proxy, endpoint) = FaultProxy::plain(&moto_endpoint()).await;
    let store = Arc::new(store_via_with(&endpoint, "conflict-reserve", 4).await);
    let world = World::new(store.clone(), &unique("conflict-reserve"));
    proxy.inject("PutItem", 1, Fault::Refuse(CONFLICT));
    let first = world.deliver("m-1", "inv-1").await;
    assert_retried(&first, "m-1");
    assert_eq!(
        world.core.slots_issued(),
        0,
        "no side effect before the reserve"
    );
    let second = world.deliver("m-1", "inv-2").await;
    assert!(matches!(
        second.records[0].outcome,
        RecordOutcome::Committed { .. }
    ));
    assert_outcome(&world, store.as_ref(), &[first, second]).await;
}

/// The commit is cancelled by a running transaction on every one of the store's attempts, then
/// the take-over of the redelivery meets one: retried twice; the third delivery takes the record
/// over, gets the same slot back from the terminal under the same key and commits it.
#[tokio::test]
async fn a_commit_and_a_take_over_that_meet_running_transactions_are_retried() {
    let (proxy, endpoint) = FaultProxy::plain(&moto_endpoint()).await;
    let store = Arc::new(store_via_with(&endpoint, "conflict-commit", 4).await);
    let world = World::new(store.clone(), &unique("conflict-commit"));
    let attempts = gate_dynamo::TRANSACTION_CONFLICT_BACKOFF_MS.len() + 1;
    proxy.inject("TransactWriteItems", attempts, commit_conflict());
    let first = world.deliver("m-1", "inv-1").await;
    assert_retried(&first, "m-1");
    assert_eq!(proxy.count("TransactWriteItems"), attempts);
    // The released lease is taken over by the redelivery: that write meets a transaction too.
    proxy.inject("UpdateItem", 1, Fault::Refuse(CONFLICT));
    let second = world.deliver("m-1", "inv-2").await;
    assert_retried(&second, "m-1");
    let third = world.deliver("m-1", "inv-3").await;
    assert!(
        matches!(third.records[0].outcome, RecordOutcome::Committed { .. }),
        "{:?}",
        third.records[0].outcome
    );
    assert!(third.records[0].took_over);
    assert_outcome(&world, store.as_ref(), &[first, second, third]).await;
}

/// One cancellation `[None, TransactionConflict]` (record, booking): the store retries the transaction
/// itself (a new token) and the first delivery commits.
#[tokio::test]
async fn one_commit_conflict_is_retried_by_the_store() {
    let (proxy, endpoint) = FaultProxy::plain(&moto_endpoint()).await;
    let store = Arc::new(store_via_with(&endpoint, "conflict-once", 4).await);
    let world = World::new(store.clone(), &unique("conflict-once"));
    proxy.inject("TransactWriteItems", 1, commit_conflict());
    let report = world.deliver("m-1", "inv-1").await;
    assert!(matches!(
        report.records[0].outcome,
        RecordOutcome::Committed { .. }
    ));
    assert_eq!(
        proxy.answers("TransactWriteItems"),
        [Err("TransactionCanceledException".to_string()), Ok(200)]
    );
    let tokens: Vec<Option<String>> = proxy
        .exchanges()
        .into_iter()
        .filter(|x| x.operation == "TransactWriteItems")
        .map(|x| {
            serde_json::from_slice::<serde_json::Value>(&x.request)
                .ok()
                .and_then(|v| v.get("ClientRequestToken")?.as_str().map(str::to_string))
        })
        .collect();
    assert_eq!(tokens.len(), 2);
    assert!(tokens[0].is_some() && tokens[1].is_some());
    assert_ne!(
        tokens[0], tokens[1],
        "each attempt after a cancellation has its own token"
    );
    assert_outcome(&world, store.as_ref(), &[report]).await;
}

/// Over all deliveries: one slot, committed with its booking; no duplicate counted, no manual
/// item, nothing but transient failures before the commit.
async fn assert_outcome(world: &World, store: &dyn Store, reports: &[gate::consumer::BatchReport]) {
    assert_eq!(world.core.slots_issued(), 1, "one slot");
    let records: Vec<_> = reports.iter().flat_map(|r| r.records.clone()).collect();
    let counts = Counts::of_records(&records);
    assert_eq!(counts.duplicates, 0, "{counts:?}");
    assert_eq!(counts.committed, 1, "{counts:?}");
    assert_eq!(counts.manual, 0, "{counts:?}");
    assert_eq!(
        counts.transient_failures,
        reports.len() as u64 - 1,
        "{counts:?}"
    );
    assert!(world.manual.items().is_empty(), "never routed to a person");
    let event_key = records[0].event_key.clone().expect("event key");
    let slot = world.core.slots()[0].effect_id.clone();
    assert_eq!(
        store
            .business_row(&event_key)
            .await
            .expect("booking")
            .map(|b| b.effect_id),
        Some(slot)
    );
}
