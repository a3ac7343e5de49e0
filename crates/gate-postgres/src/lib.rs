//! Over 600 lines: the PostgreSQL adapter's port methods in one place (statements in schema.rs,
//! rows in codec.rs, TLS in tls.rs).
//!
//! `PostgresStore`: the [`IdempotencyStore`] and [`InFlightIndex`] on PostgreSQL (feature
//! `postgres`), for teams whose business tables already live there (RDS, Aurora): the commit of
//! the record and the business row is a plain local transaction.
//!
//! Driver: `tokio-postgres` (the maintained async driver of the rust-postgres project, no macros
//! that need a database at build time) with the `deadpool-postgres` pool.
//!
//! Tables, in one schema (default `gate`; created by the versioned migrations the adapter ships,
//! [`PostgresStore::migrate`], recorded in `gate_schema_migrations`): `idempotency` (primary key
//! `pk`, the partial index `idempotency_in_flight` on `(inflight_shard, created_at_ms, pk) WHERE
//! inflight_shard IS NOT NULL` behind the view `in_flight`, the partial index
//! `idempotency_multi_effect` behind the view `multi_effect`), `business_rows` (primary key
//! `source_event`), `natural_keys` (primary key `pk`) and the operators' `audit_history`
//! (`operator.rs`, with the scans an operator makes). PostgreSQL has no TTL: an expired row
//! stays and counts as absent for the reserve, as DynamoDB's lazily deleted items do, until the
//! purge deletes it ([`Purge::purge_expired`](gate::store::Purge::purge_expired), run by the
//! reconciler's schedule; never an `in_flight` record nor a pending routing). TLS: [`tls`].
//!
//! (Past 600 lines: one `impl` of the store port, one operation per method, each with the
//! snapshot-race loop its statement needs; splitting it would scatter the port.)
//!
//! Units, never mixed: `expires_at_s` is **epoch seconds**; `lease_until_ms`, `created_at_ms`,
//! `updated_at_ms` and `booked_at_ms` are **epoch milliseconds**.
//!
//! ## One statement per operation
//!
//! Every operation is one SQL statement (one round trip once the statement is prepared on its
//! connection), so one implicit transaction under the server's isolation level (READ COMMITTED
//! by default: a concurrent write to the same row is waited for and the `WHERE` re-checked on the
//! newest version, so every fence holds):
//!
//! * reserve: `INSERT .. ON CONFLICT (pk) DO UPDATE .. WHERE <expired with nothing left to do>`,
//!   and, in the same statement, the record there when nothing was written (the reserve's
//!   `ALL_OLD`);
//! * commit: the fenced `UPDATE` of the record and the `INSERT` of the business row, as
//!   data-modifying CTEs of one statement: all or nothing;
//! * guard: the natural-key row's `INSERT .. ON CONFLICT DO UPDATE .. WHERE <ours or expired>`
//!   and its holder, in one statement;
//! * reserve with the guard (a new event's step 2, `reserve_guard.rs`): the two above as
//!   data-modifying CTEs of one statement, the guard fed by the reserve's `RETURNING` (written
//!   only where the reserve wrote);
//! * take-over, finish: the conditional `UPDATE`, and the record there when it did not apply.
//!
//! The record returned beside a write that did not apply is read from the statement's snapshot,
//! which a write committed concurrently (after the snapshot, before the conflict check) is not
//! in. When that row contradicts the outcome (it would have met the condition), the statement is
//! run again, with a new snapshot: only under such a race is an operation two round trips.
//!
//! ## A write that landed and lost its answer
//!
//! A statement whose answer is lost (connection reset after the server committed, a failover, no
//! answer within the attempt timeout) is retried on a new connection, as are serialization
//! failures and deadlocks ([`RETRY_BACKOFF_MS`]); every retry recognises its own landed write,
//! as on DynamoDB: the reserve finds its own reservation (same lease token), the take-over its own
//! lease, the commit the record committed by the same holder with the same effect id, the finish
//! the record finished by the same holder; release, routed and the effect-id append change
//! nothing the second time.
#![warn(missing_docs)]

mod codec;
mod config;
mod errors;
mod operator;
mod release;
mod reserve_guard;
mod schema;
pub mod tls;

use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Object, Pool};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use config::same_timeout;
pub use config::{connection_string_parses, PostgresConfig};
pub use errors::{names_insufficient_privilege, RETRY_BACKOFF_MS};
pub use operator::SCAN_PAGE_ROWS;
pub use schema::{check_schema_name, Migration, MIGRATIONS, MIGRATIONS_TABLE};
pub use tls::{Roots, SslMode};

use codec::{
    business_row_from_row, in_flight_entry_from_row, labels_to_json, record_from_row, RecordParams,
};
use errors::{backoff, describe, is_unique_violation, names_statement_mode, Failure, Verdict};
use gate::store::cursor::{decode_cursor, encode_cursor};
use schema::{Sql, Statements};

use gate::store::budget;

use gate::clock::ms_to_s;
use gate::record::{BusinessRow, IdempotencyRecord, NaturalKey, RecordStatus, RowColumns};
use gate::store::{
    BusinessRows, CommitOutcome, FinishGuard, FinishOutcome, GuardOutcome, IdempotencyStore,
    InFlightIndex, InFlightPage, Purge, PurgeCount, Reservation, ReserveAndGuard, StoreError,
    TakeOver, UnreadableEntry,
};

/// How often a statement whose result contradicts its snapshot (a concurrent write, see the
/// module docs) is run again before the operation fails as [`StoreError::Unavailable`].
const SNAPSHOT_RACE_ATTEMPTS: usize = 4;

/// The idempotency table, the business rows and the natural keys on PostgreSQL, through a pool.
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    schema: String,
    sql: std::sync::Arc<Statements>,
    attempt_timeout: Option<Duration>,
    /// `BEGIN` and the `SET LOCAL`s sent ahead of each statement (see [`PostgresConfig`]).
    settings: Option<std::sync::Arc<str>>,
    /// The statement timeout those settings give, **milliseconds** ([`Self::check_session`]).
    statement_timeout_ms: Option<u128>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.schema)
            .field("pool", &self.pool.status())
            .finish_non_exhaustive()
    }
}

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

    /// Applies the migrations ([`MIGRATIONS`]) not yet applied to the store's schema, creating
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
    async fn query(
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
    async fn attempt(
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

    fn err(op: &str, failure: Failure) -> StoreError {
        failure.into_store_error(op)
    }

    /// The event key holding the natural-key row `nk_pk`, read with a new snapshot.
    async fn natural_key_holder(&self, nk_pk: &str) -> Result<Option<String>, StoreError> {
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
async fn run_statement(
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
fn pool_error(e: &deadpool_postgres::PoolError) -> String {
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

fn count(row: &Row, column: &str) -> Result<i64, StoreError> {
    row.try_get(column)
        .map_err(|e| StoreError::corrupt(format!("column {column}: {e}"), e))
}

fn first(rows: &[Row], op: &str) -> Result<Row, StoreError> {
    rows.first()
        .cloned()
        .ok_or_else(|| StoreError::Corrupt(format!("{op}: the statement returned no row").into()))
}

#[async_trait]
impl IdempotencyStore for PostgresStore {
    /// One statement: `INSERT .. ON CONFLICT (pk) DO UPDATE .. WHERE expires_at_s < :now_s AND
    /// status <> 'in_flight' AND NOT route_pending`, returning the record there when nothing
    /// was written. That record is [`Reservation::Reserved`] when it is this very reservation
    /// (the retry of a landed reserve), else [`Reservation::Conflict`].
    async fn reserve(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> Result<Reservation, StoreError> {
        // What DynamoDB refuses, every store refuses (`gate::store::limits`).
        gate::store::limits::check_record(record).map_err(StoreError::Refused)?;
        let values = RecordParams::new(record);
        let now_s = ms_to_s(now_ms);
        let mut params: Vec<&(dyn ToSql + Sync)> = values.params(record).to_vec();
        params.push(&now_s);
        for _ in 0..SNAPSHOT_RACE_ATTEMPTS {
            let rows = self
                .query("reserve", &self.sql.reserve, &params)
                .await
                .map_err(|f| Self::err("reserve", f))?;
            let row = first(&rows, "reserve")?;
            if count(&row, "written")? > 0 {
                return Ok(Reservation::Reserved);
            }
            match record_from_row(&row)? {
                Some(existing) if existing.is_same_reservation(record) => {
                    return Ok(Reservation::Reserved)
                }
                // Replaceable in this snapshot, yet not replaced: a concurrent reserve won.
                Some(existing) if existing.is_expired(now_ms) && !existing.has_work() => {}
                Some(existing) => return Ok(Reservation::Conflict(Box::new(existing))),
                // Inserted by a concurrent reserve after this statement's snapshot.
                None => {}
            }
        }
        Err(StoreError::Unavailable(
            format!(
                "reserve of {}: the record changed under {SNAPSHOT_RACE_ATTEMPTS} attempts",
                record.pk
            )
            .into(),
        ))
    }

    /// With a natural key: the reserve and, where it wrote, the guard as one statement
    /// (`reserve_guard.rs`): a new event's step 2 and guard in one round trip, a duplicate in
    /// one. Without: the reserve alone.
    async fn reserve_with_guard(
        &self,
        record: &IdempotencyRecord,
        natural_key: Option<&NaturalKey>,
        now_ms: i64,
    ) -> Result<ReserveAndGuard, StoreError> {
        match natural_key {
            Some(key) => self.reserve_and_guard(record, key, now_ms).await,
            None => Ok(ReserveAndGuard {
                reservation: self.reserve(record, now_ms).await?,
                guard: None,
            }),
        }
    }

    /// One conditional `UPDATE` (`(status = 'in_flight' OR route_pending) AND lease_owner =
    /// :old AND (lease_until_ms IS NULL OR lease_until_ms < :now)`), returning the record as it
    /// is now, or as it is when the update did not apply: [`TakeOver::Taken`] if it already
    /// carries our lease (a retry of a landed take-over), else [`TakeOver::Refused`].
    async fn take_over(
        &self,
        pk: &str,
        old_owner: &str,
        new_owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<TakeOver, StoreError> {
        let rows = self
            .query(
                "take_over",
                &self.sql.take_over,
                &[&pk, &old_owner, &new_owner, &lease_until_ms, &now_ms],
            )
            .await
            .map_err(|f| Self::err("take_over", f))?;
        let Some(row) = rows.first() else {
            return Ok(TakeOver::Refused);
        };
        let taken: bool = row
            .try_get("taken")
            .map_err(|e| StoreError::corrupt(format!("column taken: {e}"), e))?;
        let Some(record) = record_from_row(row)? else {
            return Ok(TakeOver::Refused);
        };
        let ours = record.has_work()
            && record.lease_owner.as_deref() == Some(new_owner)
            && record.lease_until_ms == Some(lease_until_ms);
        Ok(if taken || ours {
            TakeOver::Taken(Box::new(record))
        } else {
            TakeOver::Refused
        })
    }

    /// One statement, one transaction: the record's fenced `UPDATE` (`status = 'in_flight' AND
    /// lease_owner = :owner`) and the business row's `INSERT`. A business row that outlived its
    /// record aborts the whole statement (a unique violation): [`StoreError::Corrupt`], nothing
    /// written. When the update did not apply: the record committed by `owner` with `effect_id`
    /// is [`CommitOutcome::Committed`] (the retry of a landed commit), no record is
    /// [`StoreError::Corrupt`], anything else [`CommitOutcome::Refused`].
    async fn commit(
        &self,
        pk: &str,
        owner: &str,
        effect_id: &str,
        booking: &BusinessRow,
        now_ms: i64,
    ) -> Result<CommitOutcome, StoreError> {
        // The fixed `business_rows` columns hold no label, but the store refuses what DynamoDB
        // built with the neutral names refuses (the consumer's pre-check reads the same names:
        // `IdempotencyStore::row_columns`: the neutral names).
        gate::store::limits::check_row(booking, &self.row_columns())
            .map_err(StoreError::Refused)?;
        let row_labels = labels_to_json(&booking.labels);
        let params: [&(dyn ToSql + Sync); 7] = [
            &pk,
            &owner,
            &effect_id,
            &now_ms,
            &booking.source_event,
            &row_labels,
            &booking.written_at_ms,
        ];
        for _ in 0..SNAPSHOT_RACE_ATTEMPTS {
            let rows = match self.query("commit", &self.sql.commit, &params).await {
                Ok(rows) => rows,
                Err(Failure::Db(e)) if is_unique_violation(&e, "business_rows_pkey") => {
                    let existing = self.business_row(&booking.source_event).await?;
                    return Err(StoreError::Corrupt(
                        format!(
                            "a business row for {} already exists with effect id {}",
                            booking.source_event,
                            existing.map_or_else(|| "?".to_string(), |b| b.effect_id)
                        )
                        .into(),
                    ));
                }
                Err(f) => return Err(Self::err("commit", f)),
            };
            let row = first(&rows, "commit")?;
            if count(&row, "committed")? > 0 {
                return Ok(CommitOutcome::Committed);
            }
            let Some(record) = record_from_row(&row)? else {
                match self.get(pk).await? {
                    Some(_) => continue,
                    None => {
                        return Err(StoreError::Corrupt(
                            format!("no record {pk} to commit").into(),
                        ))
                    }
                }
            };
            if record.status == RecordStatus::Committed
                && record.lease_owner.as_deref() == Some(owner)
                && record.effect_id.as_deref() == Some(effect_id)
            {
                return Ok(CommitOutcome::Committed);
            }
            if record.status == RecordStatus::InFlight
                && record.lease_owner.as_deref() == Some(owner)
            {
                // The fence held on this snapshot: the record changed after it. Again.
                continue;
            }
            return Ok(CommitOutcome::Refused(Box::new(record)));
        }
        Err(StoreError::Unavailable(
            format!("commit of {pk}: the record changed under {SNAPSHOT_RACE_ATTEMPTS} attempts")
                .into(),
        ))
    }

    /// One statement: the natural-key row's `INSERT .. ON CONFLICT DO UPDATE` written when
    /// absent, held by `event_key` or expired (`expires_at_s < now`, epoch seconds); otherwise
    /// the holder, read in the same statement (or, when another event key's row was committed
    /// after the statement's snapshot, by a new one).
    async fn guard(
        &self,
        record: &IdempotencyRecord,
        natural_key: &NaturalKey,
        now_ms: i64,
    ) -> Result<GuardOutcome, StoreError> {
        let event_key = record.event_key.as_str();
        let nk_pk =
            gate::store::limits::guard_pk(record, natural_key).map_err(StoreError::Refused)?;
        let labels = labels_to_json(&natural_key.labels);
        let now_s = ms_to_s(now_ms);
        let params: [&(dyn ToSql + Sync); 5] = [
            &nk_pk,
            &event_key,
            &labels,
            &natural_key.expires_at_s,
            &now_s,
        ];
        let rows = self
            .query("guard", &self.sql.guard, &params)
            .await
            .map_err(|f| Self::err("guard", f))?;
        let row = first(&rows, "guard")?;
        self.guard_answer(&row, &nk_pk, event_key).await
    }

    /// One conditional `UPDATE` setting `lease_until_ms = 0` on `(status = 'in_flight' OR
    /// route_pending) AND lease_owner = :owner`; a record that does not match is left alone.
    async fn release_lease(&self, pk: &str, owner: &str, now_ms: i64) -> Result<(), StoreError> {
        self.query("release_lease", &self.sql.release, &[&pk, &owner, &now_ms])
            .await
            .map_err(|f| Self::err("release_lease", f))?;
        Ok(())
    }

    /// One conditional `UPDATE` setting `lease_until_ms` on `status = 'in_flight' AND
    /// lease_owner = :owner` (the commit's fence) and a lease not released (`lease_until_ms IS
    /// DISTINCT FROM 0`: a NULL lease is not a released one); `Ok(false)` when it did not apply.
    /// A retry of
    /// an extension that landed meets the same condition and writes the same values.
    async fn extend_lease(
        &self,
        pk: &str,
        owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let rows = self
            .query(
                "extend_lease",
                &self.sql.extend,
                &[&pk, &owner, &lease_until_ms, &now_ms],
            )
            .await
            .map_err(|f| Self::err("extend_lease", f))?;
        Ok(!rows.is_empty())
    }

    /// One conditional `UPDATE` on `status = 'in_flight' AND lease_owner = :owner` (and no
    /// effect id for [`FinishGuard::LeaseAndNoEffect`]), returning the record there when it did
    /// not apply: finished by `owner` as `status` with its routing pending is
    /// [`FinishOutcome::Finished`] (a retry of a landed finish), else
    /// [`FinishOutcome::Refused`].
    async fn finish(
        &self,
        pk: &str,
        owner: &str,
        status: RecordStatus,
        error: &str,
        item: &[u8],
        guard: FinishGuard,
        now_ms: i64,
    ) -> Result<FinishOutcome, StoreError> {
        let no_effect = guard == FinishGuard::LeaseAndNoEffect;
        let status_text = status.as_str();
        let params: [&(dyn ToSql + Sync); 7] = [
            &pk,
            &owner,
            &status_text,
            &error,
            &item,
            &now_ms,
            &no_effect,
        ];
        for _ in 0..SNAPSHOT_RACE_ATTEMPTS {
            let rows = self
                .query("finish", &self.sql.finish, &params)
                .await
                .map_err(|f| Self::err("finish", f))?;
            let row = first(&rows, "finish")?;
            if count(&row, "finished")? > 0 {
                return Ok(FinishOutcome::Finished);
            }
            let Some(record) = record_from_row(&row)? else {
                return Ok(FinishOutcome::Refused(None));
            };
            let held = record.status == RecordStatus::InFlight
                && record.lease_owner.as_deref() == Some(owner);
            if record.status == status
                && record.route_pending
                && record.lease_owner.as_deref() == Some(owner)
            {
                return Ok(FinishOutcome::Finished);
            }
            let guarded = !no_effect || record.effect_ids.is_empty();
            if held && guarded {
                // The condition held on this snapshot: the record changed after it. Again.
                continue;
            }
            return Ok(FinishOutcome::Refused(Some(Box::new(record))));
        }
        Err(StoreError::Unavailable(
            format!("finish of {pk}: the record changed under {SNAPSHOT_RACE_ATTEMPTS} attempts")
                .into(),
        ))
    }

    /// One statement: the finish and the natural key's release (`release.rs`).
    async fn finish_without_effect(
        &self,
        record: &IdempotencyRecord,
        owner: &str,
        status: RecordStatus,
        error: &str,
        item: &[u8],
        natural_key: &NaturalKey,
        now_ms: i64,
    ) -> Result<FinishOutcome, StoreError> {
        self.finish_releasing(record, owner, status, error, item, natural_key, now_ms)
            .await
    }

    /// One conditional `UPDATE` on `route_pending AND lease_owner = :owner`, clearing the mark,
    /// the manual item, the lease and the in-flight shard; `Ok(false)` when it did not apply.
    async fn routed(&self, pk: &str, owner: &str, now_ms: i64) -> Result<bool, StoreError> {
        let rows = self
            .query("routed", &self.sql.routed, &[&pk, &owner, &now_ms])
            .await
            .map_err(|f| Self::err("routed", f))?;
        Ok(!rows.is_empty())
    }

    /// One `UPDATE` appending `effect_id` to `effect_ids` unless present (a record with two or more
    /// is in the partial index `idempotency_multi_effect`), returning the record after it.
    async fn record_effect_id(
        &self,
        pk: &str,
        effect_id: &str,
        now_ms: i64,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let rows = self
            .query(
                "record_effect_id",
                &self.sql.record_effect_id,
                &[&pk, &effect_id, &now_ms],
            )
            .await
            .map_err(|f| Self::err("record_effect_id", f))?;
        match rows.first() {
            Some(row) => record_from_row(row),
            None => Ok(None),
        }
    }

    /// One `SELECT` by primary key.
    async fn get(&self, pk: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        let rows = self
            .query("get", &self.sql.get, &[&pk])
            .await
            .map_err(|f| Self::err("get", f))?;
        match rows.first() {
            Some(row) => record_from_row(row),
            None => Ok(None),
        }
    }

    /// [`RowColumns::NEUTRAL`]: `business_rows` has fixed columns (`source_event`, `effect_id`,
    /// `booked_at_ms`, the labels in one JSON column) whatever the integration names, so its
    /// labels are refused under the neutral names, as the memory store built by default refuses
    /// them.
    fn row_columns(&self) -> RowColumns {
        RowColumns::NEUTRAL
    }
}

#[async_trait]
impl BusinessRows for PostgresStore {
    /// One `SELECT` of `business_rows` by primary key.
    async fn business_row(&self, source_event: &str) -> Result<Option<BusinessRow>, StoreError> {
        let rows = self
            .query("booking", &self.sql.booking, &[&source_event])
            .await
            .map_err(|f| Self::err("booking", f))?;
        rows.first().map(business_row_from_row).transpose()
    }
}

#[async_trait]
impl Purge for PostgresStore {
    /// Two batched `DELETE`s (each one statement): up to `limit` records with `expires_at_s <
    /// now` (epoch seconds) that are not `in_flight` and have no routing pending (through the
    /// partial index `idempotency_purgeable`), and up to `limit` natural-key rows with
    /// `expires_at_s < now`. Rows locked by another transaction are skipped.
    async fn purge_expired(
        &self,
        now_ms: i64,
        limit: usize,
    ) -> Result<Option<PurgeCount>, StoreError> {
        let now_s = ms_to_s(now_ms);
        let limit = i64::try_from(limit.max(1)).unwrap_or(i64::MAX);
        let mut deleted = [0; 2];
        for (n, sql) in [&self.sql.purge_records, &self.sql.purge_natural_keys]
            .into_iter()
            .enumerate()
        {
            deleted[n] = self
                .query("purge_expired", sql, &[&now_s, &limit])
                .await
                .map_err(|f| Self::err("purge_expired", f))?
                .len();
        }
        Ok(Some(PurgeCount {
            records: deleted[0],
            natural_keys: deleted[1],
        }))
    }
}

#[async_trait]
impl InFlightIndex for PostgresStore {
    /// `SELECT count(*)` of the view `multi_effect` (the partial index `idempotency_multi_effect`).
    async fn multi_effect_keys(&self) -> Result<usize, StoreError> {
        let rows = self
            .query("multi_effect_keys", &self.sql.multi_effect_keys, &[])
            .await
            .map_err(|f| Self::err("multi_effect_keys", f))?;
        let n = count(&first(&rows, "multi_effect_keys")?, "count")?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// One `SELECT` of the view `in_flight` (the partial index `idempotency_in_flight`):
    /// `inflight_shard = :shard AND created_at_ms < :before` (epoch ms), ordered by
    /// `(created_at_ms, pk)` after the cursor, `limit + 1` rows to know whether a page follows.
    /// The index is consistent with the table (unlike a GSI).
    async fn stale_in_flight(
        &self,
        shard: &str,
        created_before_ms: i64,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<InFlightPage, StoreError> {
        let (after_ms, after_pk) = match cursor.as_deref() {
            Some(c) => decode_cursor(c)?,
            None => (i64::MIN, String::new()),
        };
        let limit = limit.max(1);
        let fetch = i64::try_from(limit).unwrap_or(i64::MAX - 1) + 1;
        let rows = self
            .query(
                "stale_in_flight",
                &self.sql.stale_in_flight,
                &[&shard, &created_before_ms, &after_ms, &after_pk, &fetch],
            )
            .await
            .map_err(|f| Self::err("stale_in_flight", f))?;
        let more = rows.len() > limit;
        let mut page = InFlightPage::default();
        let mut last = None;
        for row in rows.iter().take(limit) {
            let pk: Option<String> = row.try_get("pk").ok();
            let created: Option<i64> = row.try_get("created_at_ms").ok();
            if let (Some(pk), Some(created)) = (&pk, created) {
                last = Some(encode_cursor(created, pk));
            }
            match in_flight_entry_from_row(row) {
                Ok(entry) => page.entries.push(entry),
                Err(e) => page.unreadable.push(UnreadableEntry {
                    pk,
                    created_at_ms: created,
                    error: e.to_string(),
                }),
            }
        }
        page.cursor = if more { last } else { None };
        Ok(page)
    }
}
