//! The reconciler's cases on the memory store and on DynamoDB (moto), from one set of cases.

use std::sync::Arc;

use gate::memory::MemoryStore;
use integration_tests::reconciler_cases::{run_all, World};
use integration_tests::{fresh_store, unique};

#[tokio::test]
async fn reconciler_cases_on_the_memory_store() {
    run_all(|name| async move { World::new(Arc::new(MemoryStore::new()), name).await }).await;
}

#[tokio::test]
async fn reconciler_cases_on_dynamodb() {
    run_all(|name| async move {
        let store = fresh_store(&format!("rec-{name}")).await;
        World::new(Arc::new(store), &unique(name)).await
    })
    .await;
}
