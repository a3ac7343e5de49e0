//! Choosing the replay's idempotency store: the embedded memory store, DynamoDB at an endpoint
//! (a moto server for local runs, or real DynamoDB with the caller's credentials), or PostgreSQL
//! at a connection string (a fresh schema per run).
//! Each lays the business row out as truck-slot's bookings table (`truck_slot::booking::BOOKING_COLUMNS`).

use std::sync::Arc;

use aws_config::BehaviorVersion;
use gate::store::memory::MemoryStore;
use gate::store::Store;
use gate_dynamo::{create_tables, DynamoStore};
use gate_postgres::PostgresStore;

/// The integration name every replay, simulation and benchmark of the simulator keys its records
/// under (the record key prefix).
pub const INTEGRATION: &str = "ect-delta-slots";

/// Which store a replay uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreKind {
    /// In-memory, the embedded default.
    Memory,
    /// DynamoDB at `--endpoint` (fresh tables are created for the run).
    Dynamodb,
    /// PostgreSQL at `--database-url` (a fresh schema is created and migrated for the run).
    Postgres,
}

/// The connections of the replay's PostgreSQL pool: the replay's consumer handles records
/// concurrently (at most this many statements at once; more wait for a free connection).
pub const REPLAY_POOL_SIZE: usize = 8;

/// The memory store laid out as truck-slot's functions lay out the TMS booking
/// ([`truck_slot::booking::BOOKING_COLUMNS`]): every replay, simulation and benchmark of the
/// truck-slot path builds its memory store here.
pub fn memory_store() -> MemoryStore {
    MemoryStore::new().with_row_columns(truck_slot::booking::BOOKING_COLUMNS)
}

/// The DynamoDB store over `idempotency_table` and `business_table` laid out as truck-slot's
/// functions lay out the TMS booking ([`truck_slot::booking::BOOKING_COLUMNS`]): every replay
/// and benchmark of the truck-slot path on DynamoDB builds its store here.
pub fn dynamo_store(
    client: aws_sdk_dynamodb::Client,
    idempotency_table: impl Into<String>,
    business_table: impl Into<String>,
) -> DynamoStore {
    DynamoStore::new(client, idempotency_table, business_table)
        .with_row_columns(truck_slot::booking::BOOKING_COLUMNS)
}

/// Builds the store. For DynamoDB, creates a fresh pair of tables named
/// `gate-replay-{n}-idempotency` / `-bookings` (`n` = epoch ms) at `endpoint`; without explicit
/// AWS credentials in the environment, moto's dummy credentials and `eu-west-1` are used.
///
/// # Errors
/// A message if DynamoDB cannot be reached or the tables cannot be created.
pub async fn build(kind: StoreKind, endpoint: Option<&str>) -> Result<Arc<dyn Store>, String> {
    build_at(kind, endpoint, None).await
}

/// [`build`], and for PostgreSQL at `database_url` (a libpq connection string or URL, secret:
/// never printed): a fresh schema `gate_replay_{n}` (`n` = epoch ms), migrated, left in place.
///
/// # Errors
/// A message if the store cannot be reached or its tables cannot be created, or PostgreSQL is
/// chosen without a `database_url`.
pub async fn build_at(
    kind: StoreKind,
    endpoint: Option<&str>,
    database_url: Option<&str>,
) -> Result<Arc<dyn Store>, String> {
    match kind {
        StoreKind::Memory => Ok(Arc::new(memory_store())),
        StoreKind::Postgres => {
            let url = database_url.ok_or("--store postgres needs --database-url")?;
            let stamp = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0);
            let config = gate_postgres::PostgresConfig::new(url, REPLAY_POOL_SIZE)
                .with_schema(format!("gate_replay_{stamp}"));
            let store = PostgresStore::with_config(&config).map_err(|e| e.to_string())?;
            store
                .migrate()
                .await
                .map_err(|e| format!("cannot create the replay schema: {e}"))?;
            Ok(Arc::new(store))
        }
        StoreKind::Dynamodb => {
            let mut loader = aws_config::defaults(BehaviorVersion::latest());
            if let Some(url) = endpoint {
                loader = loader.endpoint_url(url);
            }
            if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
                loader = loader.credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                    "test", "test", None, None, "replay",
                ));
            }
            if std::env::var_os("AWS_REGION").is_none()
                && std::env::var_os("AWS_DEFAULT_REGION").is_none()
            {
                loader = loader.region(aws_config::Region::new("eu-west-1"));
            }
            let client = aws_sdk_dynamodb::Client::new(&loader.load().await);
            let stamp = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0);
            let idempotency = format!("gate-replay-{stamp}-idempotency");
            let bookings = format!("gate-replay-{stamp}-bookings");
            create_tables(&client, &idempotency, &bookings)
                .await
                .map_err(|e| format!("cannot create the replay tables: {e}"))?;
            Ok(Arc::new(dynamo_store(client, idempotency, bookings)))
        }
    }
}
