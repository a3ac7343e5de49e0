//! The metrics function against DynamoDB and CloudWatch (moto): the store signals read from the
//! sparse GSIs and published with PutMetricData; and the same on PostgreSQL (`STORE=postgres`:
//! the partial indexes through the views, the read side built by the metrics function's own
//! wiring), which needs `GATE_TEST_DATABASE_URL` too (`scripts/with-postgres.sh
//! scripts/with-moto.sh cargo test -p integration-tests --test signals`; `make test`).

use std::sync::Arc;

use gate_lambda::{build_metrics_index, fixed_env, MetricsConfig};
use gate_postgres::{PostgresConfig, PostgresStore};
use integration_tests::signals_cases::store_signals_are_read_and_published;
use integration_tests::{fresh_store, sdk_config, unique};

#[tokio::test]
async fn store_signals_are_read_from_the_indexes_and_published() {
    let store = Arc::new(fresh_store("signals").await);
    let integration = unique("signals");
    store_signals_are_read_and_published(store.clone(), store.as_ref(), &integration).await;
}

/// `STORE=postgres`: the metrics function's configuration needs no `IDEMPOTENCY_TABLE`, its
/// wiring builds the PostgreSQL read side on `DATABASE_SCHEMA`, and the signals are those of
/// the records the store wrote there.
#[tokio::test]
async fn on_postgres_the_signals_are_read_from_the_partial_indexes_and_published() {
    let url = integration_tests::database_url();
    let schema = format!("signals_{}", std::process::id());
    let store = PostgresStore::with_config(
        &PostgresConfig::new(url.as_str(), 2).with_schema(schema.clone()),
    )
    .expect("store");
    store.migrate().await.expect("migrate");
    let integration = unique("pg-signals");
    let config = MetricsConfig::from_env(
        fixed_env(&[
            ("STORE", "postgres"),
            ("DATABASE_URL", url.as_str()),
            ("DATABASE_SCHEMA", schema.as_str()),
            ("INTEGRATION_NAME", integration.as_str()),
        ]),
        None,
    )
    .expect("configuration without IDEMPOTENCY_TABLE");
    assert!(config.postgres.is_some());
    let index = build_metrics_index(&config, &sdk_config().await)
        .await
        .expect("the PostgreSQL read side");
    store_signals_are_read_and_published(Arc::new(store), index.as_ref(), &integration).await;
}
