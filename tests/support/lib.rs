//! Shared helpers for the integration tests: SDK clients for the moto server at `MOTO_ENDPOINT`,
//! uniquely named tables and queues; the test kit's SQS event builder and call recorder
//! (`gate_testkit`) re-exported.
//!
//! Run the tests with `make test` or `scripts/with-moto.sh cargo test -p integration-tests`: the
//! script starts moto on a free loopback port and sets `MOTO_ENDPOINT`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use aws_config::retry::RetryConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::{Credentials, Intercept};
use gate_dynamo::{create_tables, DynamoStore};

/// The region the tests use against moto.
pub const REGION: &str = "eu-west-1";

/// The moto endpoint from `MOTO_ENDPOINT` (e.g. `http://127.0.0.1:5123`).
///
/// # Panics
/// When `MOTO_ENDPOINT` is unset or empty, with a message saying how to run the tests.
pub fn moto_endpoint() -> String {
    match std::env::var("MOTO_ENDPOINT") {
        Ok(v) if !v.trim().is_empty() => v,
        _ => panic!(
            "MOTO_ENDPOINT is not set: the integration tests need a moto server. Run `make test`, \
             or `scripts/with-moto.sh cargo test -p integration-tests` (it starts moto from \
             .venv/bin/moto_server on a free loopback port and sets MOTO_ENDPOINT)."
        ),
    }
}

/// An SDK configuration for moto: the endpoint, region `eu-west-1`, dummy static credentials and
/// the standard retry mode with 3 attempts (as the functions configure it).
pub async fn sdk_config() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(moto_endpoint())
        .region(Region::new(REGION))
        .credentials_provider(Credentials::new("test", "test", None, None, "moto"))
        .retry_config(RetryConfig::standard().with_max_attempts(3))
        .load()
        .await
}

/// A DynamoDB client for moto.
pub async fn dynamo_client() -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::new(&sdk_config().await)
}

/// A DynamoDB client for moto with `interceptor` attached.
pub async fn dynamo_client_with(interceptor: impl Intercept + 'static) -> aws_sdk_dynamodb::Client {
    let config = aws_sdk_dynamodb::config::Builder::from(&sdk_config().await)
        .interceptor(interceptor)
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

/// An SQS client for moto.
pub async fn sqs_client() -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::new(&sdk_config().await)
}

/// A name unique to this process and call: `{base}-{pid}-{millis}-{n}` (valid for tables and
/// queues).
pub fn unique(base: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{base}-{}-{millis}-{n}", std::process::id())
}

/// Creates a fresh pair of tables (idempotency with GSI `InFlight` and TTL, bookings) named after
/// `base`; returns `(idempotency_table, bookings_table)`.
///
/// # Panics
/// When moto refuses.
pub async fn fresh_tables(client: &aws_sdk_dynamodb::Client, base: &str) -> (String, String) {
    let name = unique(base);
    let idempotency = format!("{name}-idem");
    let bookings = format!("{name}-book");
    create_tables(client, &idempotency, &bookings)
        .await
        .unwrap_or_else(|e| panic!("create tables {idempotency}, {bookings}: {e}"));
    (idempotency, bookings)
}

/// A `DynamoStore` on fresh tables (named after `base`, made unique) whose business table is
/// keyed by `columns`' key and whose rows are written under `columns`; with the business
/// table's name.
pub async fn fresh_store_with_columns(
    base: &str,
    columns: gate::record::RowColumns,
) -> (DynamoStore, String) {
    let client = dynamo_client().await;
    let name = unique(base);
    let (idempotency, bookings) = (format!("{name}-idem"), format!("{name}-book"));
    gate_dynamo::create_tables_for(&client, &idempotency, &bookings, &columns)
        .await
        .unwrap_or_else(|e| panic!("create tables {idempotency}, {bookings}: {e}"));
    let store = DynamoStore::new(client, idempotency, bookings.clone()).with_row_columns(columns);
    (store, bookings)
}

/// The test server's connection string, `GATE_TEST_DATABASE_URL` (`scripts/with-postgres.sh`
/// starts a throwaway PostgreSQL and sets it; `make test` does).
///
/// # Panics
/// When it is not set: a store test that passes without its database proves nothing.
pub fn database_url() -> String {
    std::env::var("GATE_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!("set GATE_TEST_DATABASE_URL (scripts/with-postgres.sh starts a server)")
    })
}

/// The Lambda wiring's configuration of fresh DynamoDB tables (named after `base`, which is
/// also the integration's name), as the functions read it; with the tables' names.
pub async fn wiring_config(base: &str) -> (gate_lambda::Config<()>, String, String) {
    let (idempotency, bookings) = fresh_tables(&dynamo_client().await, base).await;
    let config = gate_lambda::Config::<()>::from_env(gate_lambda::fixed_env(&[
        ("INTEGRATION_NAME", base),
        (
            "MANUAL_QUEUE_URL",
            "https://sqs.eu-west-1.amazonaws.com/1/manual",
        ),
        ("IDEMPOTENCY_TABLE", idempotency.as_str()),
        ("BOOKINGS_TABLE", bookings.as_str()),
        ("VERIFY_CONDITIONAL_WRITES", "false"),
    ]))
    .expect("configuration");
    (config, idempotency, bookings)
}

/// A `DynamoStore` on fresh tables, through `client`.
pub async fn fresh_store_with(client: aws_sdk_dynamodb::Client, base: &str) -> DynamoStore {
    let (idempotency, bookings) = fresh_tables(&client, base).await;
    DynamoStore::new(client, idempotency, bookings)
}

/// A `DynamoStore` on fresh tables.
pub async fn fresh_store(base: &str) -> DynamoStore {
    fresh_store_with(dynamo_client().await, base).await
}

/// Creates a fresh SQS queue named after `base`; returns its URL.
///
/// # Panics
/// When moto refuses.
pub async fn fresh_queue(client: &aws_sdk_sqs::Client, base: &str) -> String {
    let name = unique(base);
    let out = client
        .create_queue()
        .queue_name(&name)
        .send()
        .await
        .unwrap_or_else(|e| panic!("create queue {name}: {e:?}"));
    out.queue_url()
        .unwrap_or_else(|| panic!("create queue {name}: no URL"))
        .to_string()
}

pub use gate_testkit::{sqs_event, CallRecorder};

pub mod fault_proxy;
pub mod field_cases;
pub mod http_cut_proxy;
pub mod lambda_env;
pub mod lambda_watch;
pub mod pg_cluster;
pub mod pg_failover;
pub mod pg_fault_proxy;
pub mod pg_proxy;
pub mod pgbouncer;
pub mod probe;
pub mod reconciler_cases;
pub mod same_request_id;
pub mod signals_cases;
pub mod sqs_feed;
pub mod token_double;

/// Writes an `InFlight` index item this code could not have written (status `"exploded"`) into
/// `store`'s idempotency table: `pk`, shard `shard`, `created_at` epoch **milliseconds**.
pub async fn put_unreadable_in_flight(
    store: &DynamoStore,
    pk: &str,
    shard: &str,
    created_at_ms: i64,
) {
    use aws_sdk_dynamodb::types::AttributeValue;
    store
        .client()
        .put_item()
        .table_name(store.idempotency_table())
        .item("pk", AttributeValue::S(pk.to_string()))
        .item("inflight_shard", AttributeValue::S(shard.to_string()))
        .item("created_at", AttributeValue::N(created_at_ms.to_string()))
        .item("status", AttributeValue::S("exploded".into()))
        .send()
        .await
        .expect("PutItem");
}
