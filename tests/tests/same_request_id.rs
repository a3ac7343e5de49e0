//! Two executions of the reconciler with one Lambda request id, one after the
//! other (the first killed after its call) and at once, on the memory store and on DynamoDB
//! (moto). The race at once leans on DynamoDB serialising concurrent conditional writes on one
//! item; on a backend whose probe does not show that, the case says so and claims nothing.

use std::sync::Arc;

use gate::store::memory::MemoryStore;
use integration_tests::probe::{self, Guarantee};
use integration_tests::reconciler_cases::World;
use integration_tests::same_request_id::{
    at_once_neither_takes_the_others_lease, killed_after_its_call_then_run_again,
};
use integration_tests::{fresh_store, unique};

async fn memory(name: &str) -> World {
    World::new(Arc::new(MemoryStore::new()), name).await
}

async fn dynamodb(name: &str) -> World {
    let store = fresh_store(&format!("same-{name}")).await;
    World::new(Arc::new(store), &unique(name)).await
}

#[tokio::test]
async fn one_after_the_other_on_the_memory_store() {
    killed_after_its_call_then_run_again(&memory("seq").await).await;
}

#[tokio::test]
async fn at_once_on_the_memory_store() {
    at_once_neither_takes_the_others_lease(&memory("once").await).await;
}

#[tokio::test]
async fn one_after_the_other_on_dynamodb() {
    killed_after_its_call_then_run_again(&dynamodb("seq").await).await;
}

#[tokio::test]
async fn at_once_on_dynamodb() {
    if !probe::moto().await.proves(
        Guarantee::ConditionalWritesSerialised,
        "the memory store case above and the simulation's reconciler_same_request_id_twice",
    ) {
        return;
    }
    at_once_neither_takes_the_others_lease(&dynamodb("once").await).await;
}
