//! The reconciler's cases on the memory store and on DynamoDB (moto), from one set of cases.

use std::sync::Arc;

use gate::store::memory::MemoryStore;
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
    let memory = replay::run(&scenario, ReplayOptions::gated())
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

/// An `InFlight` item this code did not write (an unknown `status`), older than a stranded record
/// of the same shard: the reconciler skips and counts it, and still finishes the record behind it.
#[tokio::test]
async fn an_unreadable_index_item_does_not_stop_the_reconciler() {
    use gate::clock::Clock;
    use gate::record::RecordStatus;

    let store = fresh_store("rec-unreadable").await;
    let raw = store.clone();
    let w = World::new(Arc::new(store), &unique("unreadable")).await;
    let body = World::body("R-U", "CSQU3054383");
    let record = w.strand(&body, "inv-dead", w.clock.now_ms() + 30_000).await;
    integration_tests::put_unreadable_in_flight(
        &raw,
        &format!("{}#bad", w.integration),
        record.inflight_shard.as_deref().expect("shard"),
        record.created_at_ms - 60_000,
    )
    .await;
    w.clock.advance_ms(180_000);
    let report = w
        .gate
        .reconcile(
            w.store.as_ref(),
            &World::reconciler_config(),
            &w.reconciler_invocation("rec-u"),
        )
        .await;
    assert_eq!(report.unreadable, 1, "{report:?}");
    assert_eq!(report.reconciled, 1, "{report:?}");
    let after = w.store.get(&record.pk).await.unwrap().unwrap();
    assert_eq!(after.status, RecordStatus::Committed);
}
