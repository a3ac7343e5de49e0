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

#[tokio::test]
async fn the_incident_replays_through_dynamodb_with_the_same_figures() {
    use sim::replay::{self, HandlerKind, ReplayOptions};
    use sim::scenario::Scenario;
    use sim::stores::{self, StoreKind};

    let endpoint = integration_tests::moto_endpoint();
    let scenario = Scenario::load("monday-2025-06-09").unwrap();
    let store = stores::build(StoreKind::Dynamodb, Some(&endpoint))
        .await
        .unwrap();
    let dynamo = replay::run(
        &scenario,
        ReplayOptions {
            handler: HandlerKind::Gated,
            store: Some(store),
        },
    )
    .await
    .unwrap();
    let memory = replay::run(
        &scenario,
        ReplayOptions {
            handler: HandlerKind::Gated,
            store: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(dynamo.slots_issued, 39);
    assert_eq!(dynamo.tms_bookings, 39);
    assert_eq!(dynamo.still_in_flight, 0);
    assert_eq!(
        serde_json::to_value(&dynamo).unwrap(),
        serde_json::to_value(&memory).unwrap(),
        "DynamoDB and the memory store give the same report"
    );
}
