//! The pool and the connections of [`PostgresStore`]: connecting, the migrations, the session
//! check, and one statement's round trip with its retries on a new connection.

use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use crate::config::same_timeout;

use crate::errors::{backoff, describe, names_statement_mode, Failure, Verdict};
use crate::schema::{Sql, Statements};

use gate::store::budget;

use gate::store::StoreError;

use crate::config::PostgresConfig;
use crate::schema::{self, check_schema_name};
use crate::PostgresStore;

impl PostgresStore {
    /// A store on `url` (a libpq connection string or URL, secret) with `pool_size`
    /// connections and the defaults of [`PostgresConfig::new`]. Connects lazily: the first
    /// operation (or [`PostgresStore::migrate`]) opens the first connection.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for a connection string or schema name that does not parse (a
    /// configuration error; the message never holds the string).
    pub fn connect(url: &str, pool_size: usize) -> Result<Self, StoreError> {
        Self::with_config(&PostgresConfig::new(url, pool_size))
    }

    /// A store with `config` (see [`PostgresStore::connect`]).
    ///
    /// # Errors
    /// As [`PostgresStore::connect`].
    pub fn with_config(config: &PostgresConfig) -> Result<Self, StoreError> {
        check_schema_name(&config.schema)?;
        let pool = config.pool()?;
        Ok(Self {
            pool,
            schema: config.schema.clone(),
            sql: std::sync::Arc::new(Statements::new(&config.schema)),
            attempt_timeout: config.statement_timeout.map(|t| t + Duration::from_secs(2)),
            settings: config.transaction_settings().map(std::sync::Arc::from),
            statement_timeout_ms: config.statement_timeout.map(|t| t.as_millis()),
        })
    }

    /// Applies the migrations ([`MIGRATIONS`](crate::MIGRATIONS)) not yet applied to the store's schema, creating
    /// the schema if needed, in one transaction under an advisory lock (several processes may
    /// run it at once, e.g. every consumer at its cold start). Returns the versions applied now.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the server cannot be reached or a migration fails
    /// (nothing of it is applied then).
    pub async fn migrate(&self) -> Result<Vec<i32>, StoreError> {
        let mut client = self.pool.get().await.map_err(|e| {
            StoreError::Unavailable(format!("migrate: no connection: {}", pool_error(&e)).into())
        })?;
        schema::migrate(&mut client, &self.schema)
            .await
            .map_err(|f| f.into_store_error("migrate"))
    }

    /// The cold-start check of the session the store's statements get: with per-transaction
    /// timeouts, the transaction that carries them reaches the statement (a pooler in statement
    /// mode refuses the transaction; one that handed the statement to another server connection
    /// would show another `statement_timeout`). Run once, before anything is consumed. Each
    /// connection is checked writable when it is opened, so a read-only server is never
    /// reached here. `Ok(false)` when the server could not be reached (logged at WARN: an outage
    /// or a failover during a cold start is no configuration error; the first operation reports
    /// it and is retried).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] naming the pooler setting to change.
    pub async fn check_session(&self) -> Result<bool, StoreError> {
        let probe = Sql::probe();
        let rows = match self.query("check_session", &probe, &[]).await {
            Ok(rows) => rows,
            Err(f) if names_statement_mode(&f.summary()) => {
                return Err(StoreError::Unavailable(
                    "PostgreSQL: the pooler refuses transaction blocks (PgBouncer pool_mode = \
                     statement), and the store runs each statement in a transaction carrying its \
                     timeouts (SET LOCAL): set pool_mode = transaction (or session), or \
                     DATABASE_SESSION_TIMEOUTS=false with the timeouts set on the role"
                        .to_string()
                        .into(),
                ));
            }
            Err(f) => {
                tracing::warn!(error = %f.summary(), "PostgreSQL session not checked at start");
                return Ok(false);
            }
        };
        let row = first(&rows, "check_session")?;
        let seen: String = row.try_get("statement_timeout").map_err(|e| {
            StoreError::corrupt(format!("check_session: column statement_timeout: {e}"), e)
        })?;
        match self.statement_timeout_ms.map(|ms| format!("{ms}ms")) {
            Some(expected) if !same_timeout(&seen, &expected) => Err(StoreError::Unavailable(
                format!(
                    "PostgreSQL: the statement ran with statement_timeout = {seen}, not its \
                     transaction's {expected}: a pooler handed it to another server connection \
                     (PgBouncer: set pool_mode = transaction or session)"
                )
                .into(),
            )),
            _ => Ok(true),
        }
    }

    /// The schema of the store's tables.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The connection pool (for operators' queries and tests).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Runs one statement, with the retries of the module docs: a serialization failure, a
    /// deadlock or a lost (or read-only) connection is retried after [`RETRY_BACKOFF_MS`] while
    /// the invocation's budget lasts ([`gate::store::budget`]); anything else, or the last
    /// failure, is returned.
    pub(crate) async fn query(
        &self,
        op: &'static str,
        sql: &Sql,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Failure> {
        let mut attempt = 0;
        loop {
            let failure = match self.attempt(sql, params).await {
                Ok(rows) => return Ok(rows),
                Err(f) => f,
            };
            let verdict = failure.verdict();
            let in_budget = |sleep: Duration| budget::remaining().is_none_or(|left| left > sleep);
            match (verdict, backoff(attempt)) {
                (Verdict::Fail, _) | (_, None) => return Err(failure),
                (_, Some(sleep)) if !in_budget(sleep) => return Err(failure),
                (_, Some(sleep)) => {
                    tracing::warn!(
                        op,
                        attempt = attempt + 1,
                        error = %failure.summary(),
                        "PostgreSQL statement retried"
                    );
                    tokio::time::sleep(sleep).await;
                    attempt += 1;
                }
            }
        }
    }

    /// One attempt of `sql`: a connection from the pool and the statement, within the attempt
    /// timeout and the invocation's budget, whichever ends first. A connection that broke, can
    /// no longer write or did not answer in time is taken out of the pool for good.
    pub(crate) async fn attempt(
        &self,
        sql: &Sql,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Failure> {
        let limit = match (self.attempt_timeout, budget::remaining()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if limit == Some(Duration::ZERO) {
            return Err(Failure::Timeout(Duration::ZERO));
        }
        let started = tokio::time::Instant::now();
        let get = self.pool.get();
        let client = match limit {
            None => get.await,
            Some(limit) => tokio::time::timeout(limit, get).await.map_err(|_| {
                budget::mark_stalled();
                Failure::Timeout(limit)
            })?,
        }
        .map_err(|e| Failure::Pool(pool_error(&e), e))?;
        let typed: Vec<(&(dyn ToSql + Sync), Type)> = params
            .iter()
            .zip(sql.types)
            .map(|(p, t)| (*p, t.clone()))
            .collect();
        let run = run_statement(&client, &sql.text, &typed, self.settings.as_deref());
        let result = match limit.map(|l| l.saturating_sub(started.elapsed())) {
            None => run.await.map_err(Failure::Db),
            Some(left) => match tokio::time::timeout(left, run).await {
                Ok(result) => result.map_err(Failure::Db),
                Err(_) => {
                    budget::mark_stalled();
                    Err(Failure::Timeout(limit.unwrap_or(left)))
                }
            },
        };
        if let Err(failure) = &result {
            if failure.verdict() == Verdict::RetryConnection {
                drop(Object::take(client));
            }
            // Every idle connection may be on the same demoted or stopping server, and nothing
            // tells which: the next attempt must not spend itself on another of them.
            if failure.server_gone() {
                self.pool.retain(|_, _| false);
            }
        }
        result
    }

    pub(crate) fn err(op: &str, failure: Failure) -> StoreError {
        failure.into_store_error(op)
    }

    /// The event key holding the natural-key row `nk_pk`, read with a new snapshot.
    pub(crate) async fn natural_key_holder(
        &self,
        nk_pk: &str,
    ) -> Result<Option<String>, StoreError> {
        let rows = self
            .query("natural key", &self.sql.natural_key_holder, &[&nk_pk])
            .await
            .map_err(|f| Self::err("natural key", f))?;
        Ok(rows.first().map(|r| r.get::<_, String>(0)))
    }
}

/// `sql` with its typed `params` as the unnamed statement (one round trip; no named statement
/// outlives it). With `settings` (`BEGIN; SET LOCAL ..`) the statement runs in a transaction of
/// its own, opened and committed in the same round trip: the driver pipelines requests polled
/// together, in the order polled. A statement that failed leaves the transaction aborted and the
/// `COMMIT` rolls it back.
pub(crate) async fn run_statement(
    client: &tokio_postgres::Client,
    sql: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
    settings: Option<&str>,
) -> Result<Vec<Row>, tokio_postgres::Error> {
    let Some(settings) = settings else {
        return client.query_typed(sql, params).await;
    };
    let (begun, rows, ended) = futures::join!(
        client.batch_execute(settings),
        client.query_typed(sql, params),
        client.batch_execute("COMMIT"),
    );
    // The server's own error first: a pooler that refused the transaction closes the
    // connection, and the statement behind it only sees it closed.
    match (begun, rows, ended) {
        (Ok(()), Ok(rows), Ok(())) => Ok(rows),
        (Err(e), _, _) if e.as_db_error().is_some() => Err(e),
        (_, Err(e), _) | (Err(e), Ok(_), _) | (Ok(()), Ok(_), Err(e)) => Err(e),
    }
}

/// The pool's error as text; a refused server certificate says what to check.
pub(crate) fn pool_error(e: &deadpool_postgres::PoolError) -> String {
    let text = match e {
        deadpool_postgres::PoolError::Backend(db) => describe(db),
        other => other.to_string(),
    };
    if text.contains("invalid peer certificate") {
        format!(
            "{text} (the sslmode checks the server's certificate: name the CA bundle that \
             signed it with DATABASE_CA_BUNDLE or sslrootcert, for RDS the global-bundle.pem, \
             and connect to a host name the certificate names)"
        )
    } else {
        text
    }
}

pub(crate) fn count(row: &Row, column: &str) -> Result<i64, StoreError> {
    row.try_get(column)
        .map_err(|e| StoreError::corrupt(format!("column {column}: {e}"), e))
}

pub(crate) fn first(rows: &[Row], op: &str) -> Result<Row, StoreError> {
    rows.first()
        .cloned()
        .ok_or_else(|| StoreError::Corrupt(format!("{op}: the statement returned no row").into()))
}
