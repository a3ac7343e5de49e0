//! Item 3: the commit's cancellation reasons read by item, not by position. The conformance
//! suite runs on DynamoDB (moto) in the usual item order in `tests/tests/dynamodb.rs`; here the
//! whole suite, with its case where each condition of the commit fails alone and together, runs
//! on a store that builds the transaction's items in reverse order, and must give the same
//! outcomes.

use std::sync::Arc;

use gate::store::Store;

use integration_tests::{fresh_store, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_conformance_suite_passes_with_the_commit_items_reversed() {
    let store: Arc<dyn Store> =
        Arc::new(fresh_store("reversed").await.with_commit_items_reversed());
    gate_testkit::conformance::run_all(store, &unique("reversed")).await;
}

#[tokio::test]
async fn each_commit_condition_alone_and_together_with_the_items_reversed() {
    let store: Arc<dyn Store> = Arc::new(
        fresh_store("cc-reversed")
            .await
            .with_commit_items_reversed(),
    );
    gate_testkit::conformance::commit_conditions_alone_and_together(store, &unique("cc-reversed"))
        .await;
}
