//! The store as configured ([`StoreConfig`]), built in one place for every function: the write
//! path and the read side for the consumer and the reconciler ([`build_store`], with the
//! cold-start checks: DynamoDB's conditional writes, PostgreSQL's connection string and
//! migrations), the read side alone for the metrics function ([`build_index`]), and the store an
//! operator's tool opens ([`open_operator_store`]), chosen in the same place (`open`).

use std::sync::Arc;

use aws_config::SdkConfig;
use lambda_runtime::Error;

use gate::clock::{Clock, SystemClock};
use gate::record::RowColumns;
use gate::store::{IdempotencyStore, InFlightIndex, OperatorStore, Purge};
use gate_dynamo::{DynamoIndex, DynamoStore};

use super::config::{MetricsConfig, StoreConfig};
use super::store_config::PostgresSettings;

/// The write path, the read side and the purge of expired rows of one store (the purge does
/// nothing on DynamoDB, whose TTL deletes expired items).
pub type Stores = (
    Arc<dyn IdempotencyStore>,
    Arc<dyn InFlightIndex>,
    Arc<dyn Purge>,
);

/// The store of `config` with the SDK configuration `aws`, once per cold start, the business
/// row's columns named `columns` (the integration's, [`gate::Integration::row_columns`]; a
/// DynamoDB table only: PostgreSQL keeps its fixed `business_rows` columns): the write path
/// and the read side of its idempotency table (`InFlight`, the multi-effect index (`store::dynamo::MULTI_EFFECT_INDEX`): what the reconciler
/// pages), and its purge of expired rows (the reconciler's schedule runs it). DynamoDB: unless `VERIFY_CONDITIONAL_WRITES=false`, checks that both tables live in
/// one Region ([`verify_single_region`]: a global table is refused) and that conditional writes
/// are honoured ([`verify_conditional_writes`]) before anything is consumed. PostgreSQL: reads
/// the connection string (from Secrets Manager by ARN, or `DATABASE_URL` locally) and applies
/// the migrations when `DATABASE_RUN_MIGRATIONS=true`. Before either, checks that none of
/// `label_names` (the integration's, [`gate::Integration::label_names`]) is named like one of
/// the opened store's columns ([`IdempotencyStore::row_columns`]: DynamoDB the integration's,
/// PostgreSQL the neutral ones), which every commit would refuse.
///
/// # Errors
/// The check failed or could not run; the secret could not be read or holds no connection
/// string; the migrations failed; `columns` cannot lay out an item ([`RowColumns::validate`]);
/// a label is named like a column ([`RowColumns::validate_labels`]). Each message names its
/// variable and never holds the connection string.
pub async fn build_store(
    config: &StoreConfig,
    aws: &SdkConfig,
    columns: RowColumns,
    label_names: &[&str],
) -> Result<Stores, Error> {
    let opened = open(config, aws, columns).await?;
    let store_columns = match &opened {
        Opened::DynamoDb(store) => store.row_columns(),
        #[cfg(feature = "postgres")]
        Opened::Postgres(store) => store.row_columns(),
    };
    store_columns
        .validate_labels(label_names)
        .map_err(|e| Error::from(format!("the integration's label_names: {e}")))?;
    match opened {
        Opened::DynamoDb(store) => {
            let verify = matches!(
                config,
                StoreConfig::DynamoDb {
                    verify_conditional_writes: true,
                    ..
                }
            );
            if verify {
                verify_single_region(&store).await?;
                verify_conditional_writes(&store, SystemClock.now_ms()).await?;
            } else {
                tracing::warn!(
                    "VERIFY_CONDITIONAL_WRITES=false: the cold-start checks (tables in one \
                     Region, conditional writes refused) are skipped"
                );
            }
            let index = Arc::new(store.index().clone());
            let store = Arc::new(store);
            Ok((store.clone(), index, store))
        }
        #[cfg(feature = "postgres")]
        Opened::Postgres(store) => {
            if matches!(config, StoreConfig::Postgres(s) if s.run_migrations) {
                let applied = store
                    .migrate()
                    .await
                    .map_err(|e| Error::from(format!("DATABASE_RUN_MIGRATIONS: {e}")))?;
                tracing::info!(?applied, schema = store.schema(), "migrations applied");
            }
            let checked = store
                .check_session()
                .await
                .map_err(|e| Error::from(format!("DATABASE_URL: {e}")))?;
            tracing::info!(checked, "PostgreSQL session checked at start");
            let store = Arc::new(store);
            Ok((store.clone(), store.clone(), store))
        }
    }
}

/// The store of `config` as an operator's tool (gatectl) uses it: the same adapter, tables or
/// database the functions of the stack use ([`StoreConfig`], chosen as for [`build_store`]),
/// with the operator's reads and the audit history ([`OperatorStore`]), the business row's
/// columns named `columns` (the integration's, as the functions name them). Runs neither the
/// cold-start conditional-write check (it writes a canary item) nor the migrations (the
/// functions' cold start or a deployment runs them).
///
/// # Errors
/// PostgreSQL: the secret could not be read or holds no connection string, the CA bundle or the
/// schema name is refused; each message names its variable and never holds the connection
/// string. `columns` cannot lay out an item ([`RowColumns::validate`]).
pub async fn open_operator_store(
    config: &StoreConfig,
    aws: &SdkConfig,
    columns: RowColumns,
) -> Result<Arc<dyn OperatorStore>, Error> {
    Ok(match open(config, aws, columns).await? {
        Opened::DynamoDb(store) => Arc::new(store),
        #[cfg(feature = "postgres")]
        Opened::Postgres(store) => Arc::new(store),
    })
}

/// A store as `config` selects it, connected (lazily: no request sent yet), nothing checked.
enum Opened {
    DynamoDb(DynamoStore),
    #[cfg(feature = "postgres")]
    Postgres(gate_postgres::PostgresStore),
}

/// The one place the adapter is chosen from [`StoreConfig`], and where a DynamoDB store
/// learns the business row's `columns`.
async fn open(config: &StoreConfig, aws: &SdkConfig, columns: RowColumns) -> Result<Opened, Error> {
    columns
        .validate()
        .map_err(|e| Error::from(format!("the integration's row_columns: {e}")))?;
    match config {
        StoreConfig::DynamoDb {
            idempotency_table,
            business_table,
            ..
        } => Ok(Opened::DynamoDb(
            DynamoStore::new(
                aws_sdk_dynamodb::Client::new(aws),
                idempotency_table.clone(),
                business_table.clone(),
            )
            .with_row_columns(columns),
        )),
        StoreConfig::Postgres(settings) => open_postgres(settings, aws).await,
    }
}

/// The first cold-start check behind `VERIFY_CONDITIONAL_WRITES`: neither of `store`'s tables is a
/// DynamoDB global table, in which a condition is checked in one Region only (eventual
/// consistency) or transactions are refused (strong consistency)
/// ([`DynamoStore::verify_single_region`], `gate_dynamo::replication`).
///
/// # Errors
/// A table is a global table, or `DescribeTable` failed; one line starting with the variable's
/// name.
pub async fn verify_single_region(store: &DynamoStore) -> Result<(), Error> {
    store
        .verify_single_region()
        .await
        .map_err(|e| Error::from(format!("VERIFY_CONDITIONAL_WRITES: {e}")))?;
    tracing::info!("both tables live in one Region (cold-start check)");
    Ok(())
}

/// The cold-start check behind `VERIFY_CONDITIONAL_WRITES`: two conditional writes on a canary
/// key of `store`'s idempotency table ([`DynamoStore::verify_conditional_writes`]), with a
/// random (UUID v4) nonce per execution environment, at `now_ms` (epoch milliseconds). The
/// canary's deletion is best effort (it expires within the hour).
///
/// # Errors
/// The second write was not refused (the store ignores conditions: the function must not
/// consume anything), or the check could not run; the message starts with the variable's name.
pub async fn verify_conditional_writes(store: &DynamoStore, now_ms: i64) -> Result<(), Error> {
    let nonce = uuid::Uuid::new_v4().to_string();
    store
        .verify_conditional_writes(&nonce, now_ms)
        .await
        .map_err(|e| Error::from(format!("VERIFY_CONDITIONAL_WRITES: {e}")))?;
    tracing::info!(nonce, "conditional writes are honoured (cold-start check)");
    Ok(())
}

/// The PostgreSQL store of `settings`, its connection string read (see [`build_store`]); no
/// migration run.
#[cfg(feature = "postgres")]
async fn open_postgres(settings: &PostgresSettings, aws: &SdkConfig) -> Result<Opened, Error> {
    use super::secrets::{fetch_secret, SecretString};
    use super::store_config::{database_url_parses, DatabaseUrl};
    use gate_postgres::{PostgresConfig, PostgresStore};

    let url = match &settings.url {
        DatabaseUrl::SecretArn(arn) => {
            let client = aws_sdk_secretsmanager::Client::new(aws);
            fetch_secret(&client, arn, |text| {
                let text = text.trim();
                if database_url_parses(text) {
                    Ok(SecretString::new(text))
                } else {
                    Err("not a libpq connection string or postgresql:// URL")
                }
            })
            .await
            .map_err(|e| Error::from(format!("DATABASE_URL_SECRET_ARN: {e}")))?
        }
        DatabaseUrl::Local(url) => url.clone(),
    };
    let mut config =
        PostgresConfig::new(url.expose(), settings.pool_size).with_schema(settings.schema.clone());
    config.ca_bundle = settings.ca_bundle.clone();
    if !settings.session_timeouts {
        config.statement_timeout = None;
        config.lock_timeout = None;
    }
    let variable = match settings.url {
        DatabaseUrl::SecretArn(_) => "DATABASE_URL_SECRET_ARN",
        DatabaseUrl::Local(_) => "DATABASE_URL",
    };
    let store =
        PostgresStore::with_config(&config).map_err(|e| Error::from(format!("{variable}: {e}")))?;
    tracing::info!(
        sslmode = config.ssl_mode().map(|m| m.as_str()).unwrap_or("?"),
        ca_bundle = ?config.ca_bundle,
        pool_size = config.pool_size,
        "PostgreSQL store"
    );
    // Several invocations at once (Lambda Managed Instances) share the pool: with fewer
    // connections than invocations they wait for each other's (within their budgets).
    let at_once = super::concurrency::invocations_at_once(|k| std::env::var(k).ok());
    if config.pool_size < at_once as usize {
        tracing::warn!(
            pool_size = config.pool_size,
            invocations_at_once = at_once,
            "DATABASE_POOL_SIZE is below AWS_LAMBDA_MAX_CONCURRENCY: concurrent invocations \
             wait for each other's connections"
        );
    }
    Ok(Opened::Postgres(store))
}

/// Without the feature `postgres` the configuration refuses `STORE=postgres`; this is the
/// same refusal should a configuration be built by hand.
#[cfg(not(feature = "postgres"))]
async fn open_postgres(_settings: &PostgresSettings, _aws: &SdkConfig) -> Result<Opened, Error> {
    Err("STORE: `postgres` is not built into this function (the gate's feature `postgres`)".into())
}

/// The read side only of the idempotency table `idempotency_table` (the metrics function reads
/// its indexes, nothing else).
pub fn build_index(idempotency_table: &str, aws: &SdkConfig) -> Arc<dyn InFlightIndex> {
    Arc::new(DynamoIndex::new(
        aws_sdk_dynamodb::Client::new(aws),
        idempotency_table.to_string(),
    ))
}

/// The metrics function's read side: DynamoDB's indexes of `config.idempotency_table`, or, with
/// `STORE=postgres`, the PostgreSQL store's partial indexes (through the views `in_flight` and
/// `multi_effect`; no migration is run by the metrics function, whatever
/// `DATABASE_RUN_MIGRATIONS` says: the consumer's cold start or an operator runs them).
///
/// # Errors
/// As [`build_store`] for PostgreSQL (the secret, the connection string, the CA bundle).
pub async fn build_metrics_index(
    config: &MetricsConfig,
    aws: &SdkConfig,
) -> Result<Arc<dyn InFlightIndex>, Error> {
    match &config.postgres {
        None => Ok(build_index(&config.idempotency_table, aws)),
        // `open_postgres` runs no migration.
        Some(settings) => match open_postgres(settings, aws).await? {
            Opened::DynamoDb(store) => Ok(Arc::new(store.index().clone())),
            #[cfg(feature = "postgres")]
            Opened::Postgres(store) => Ok(Arc::new(store)),
        },
    }
}
