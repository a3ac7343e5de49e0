//! The field faults as regression tests with the right values, on the memory store and on
//! DynamoDB (moto): a write that landed and lost its answer, a holder that lost its lease while
//! its claim was in transit, a record that must outlive its event. The cases are written once in
//! `integration_tests::field_cases`.
//!
//! Run with `scripts/with-moto.sh cargo test -p integration-tests --test field_faults`.

use std::sync::Arc;
use std::time::Duration;

use gate::store::memory::MemoryStore;
use gate::store::Store;
use integration_tests::fault_proxy::{store_via, FaultProxy};
use integration_tests::field_cases::{self, LostAnswers};
use integration_tests::{moto_endpoint, unique};

fn memory() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new())
}

#[tokio::test]
async fn lost_reserve_answer_on_memory() {
    let store = Arc::new(LostAnswers::new(memory(), &["reserve"], 1));
    field_cases::a_reserve_whose_answer_was_lost_commits_at_once(store.clone(), "lost-mem").await;
    assert_eq!(*store.retried.lock().unwrap(), ["reserve"]);
}

/// Every write of the consumer path retried after it landed (reserve, commit): still one
/// claim, one commit, no duplicate.
#[tokio::test]
async fn every_consumer_write_retried_on_memory() {
    let store = Arc::new(LostAnswers::new(
        memory(),
        &[
            "reserve",
            "take_over",
            "commit",
            "finish",
            "routed",
            "release_lease",
            "extend_lease",
            "record_effect_id",
        ],
        usize::MAX,
    ));
    field_cases::a_reserve_whose_answer_was_lost_commits_at_once(store.clone(), "all-mem").await;
    assert_eq!(*store.retried.lock().unwrap(), ["reserve", "commit"]);
}

/// The first field fault's input, through a fault proxy in front of moto: the first reserve `PutItem` is
/// applied and its answer held 4 s, past the SDK's 3 s attempt timeout; the SDK's retry meets its
/// own item in `ConditionalCheckFailedException`.
#[tokio::test]
async fn lost_reserve_answer_on_dynamodb() {
    let (proxy, endpoint) =
        FaultProxy::start(&moto_endpoint(), "PutItem", 1, Duration::from_secs(4)).await;
    let store = store_via(&endpoint, "lost-ddb").await;
    let integration = unique("lost");
    field_cases::a_reserve_whose_answer_was_lost_commits_at_once(Arc::new(store), &integration)
        .await;
    let seen: Vec<String> = proxy
        .seen()
        .into_iter()
        .filter(|op| op == "PutItem" || op == "TransactWriteItems")
        .collect();
    assert_eq!(
        seen,
        ["PutItem", "PutItem", "PutItem", "TransactWriteItems"],
        "the reserve was sent twice (the SDK's retry), then the guard, then the commit"
    );
}

/// The commit's `TransactWriteItems` applied and its answer held past the attempt timeout: the
/// retry (same `ClientRequestToken`; moto ignores it and cancels on the record's condition) is
/// recognised as our own commit.
#[tokio::test]
async fn lost_commit_answer_on_dynamodb() {
    let (proxy, endpoint) = FaultProxy::start(
        &moto_endpoint(),
        "TransactWriteItems",
        1,
        Duration::from_secs(4),
    )
    .await;
    let store = store_via(&endpoint, "lostc-ddb").await;
    let integration = unique("lostc");
    field_cases::a_reserve_whose_answer_was_lost_commits_at_once(Arc::new(store), &integration)
        .await;
    let commits = proxy
        .seen()
        .into_iter()
        .filter(|op| op == "TransactWriteItems")
        .count();
    assert_eq!(commits, 2, "the commit was sent twice");
}

#[tokio::test]
async fn lease_lost_in_transit_on_memory() {
    field_cases::a_holder_that_lost_its_lease_never_commits(|name| async move {
        (memory(), name.to_string())
    })
    .await;
}

#[tokio::test]
async fn lease_lost_in_transit_on_dynamodb() {
    field_cases::a_holder_that_lost_its_lease_never_commits(|name| async move {
        let store: Arc<dyn Store> = Arc::new(integration_tests::fresh_store(name).await);
        (store, unique(name))
    })
    .await;
}

#[tokio::test]
async fn record_outlives_its_event_on_memory() {
    field_cases::a_record_outlives_its_event(memory(), "outlive-mem").await;
}

#[tokio::test]
async fn record_outlives_its_event_on_dynamodb() {
    let store = integration_tests::fresh_store("outlive").await;
    field_cases::a_record_outlives_its_event(Arc::new(store), &unique("outlive")).await;
}
