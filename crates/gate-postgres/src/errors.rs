//! What a PostgreSQL error means to the store: retried here (a serialization failure, a
//! deadlock, a lost connection), or a [`StoreError`] for the caller.
//!
//! SQLSTATE codes from the PostgreSQL documentation, Appendix A "PostgreSQL Error Codes".

use std::time::Duration;

use tokio_postgres::error::SqlState;

use gate::store::{Cause, StoreError};

/// Sleeps in **milliseconds** before each retry of a statement that failed with a serialization
/// failure (`40001`), a deadlock (`40P01`) or a lost connection: at most four attempts in all,
/// then [`StoreError::TransactionConflict`] (serialization, deadlock) or
/// [`StoreError::Unavailable`] (connection). Every statement of the store recognises its own
/// landed write, so a retry after a lost answer is safe.
pub const RETRY_BACKOFF_MS: [u64; 3] = [20, 40, 80];

/// A failed attempt: the driver's error, or the pool's.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The server or the connection failed the statement.
    Db(tokio_postgres::Error),
    /// No connection from the pool (timed out, or could not connect): the driver's error text
    /// and the pool's error itself.
    Pool(String, deadpool_postgres::PoolError),
    /// No answer within the attempt timeout: the outcome is unknown (the statement may have
    /// committed), the connection is not reused.
    Timeout(Duration),
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::Db(e)
    }
}

/// How to handle a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A serialization failure or deadlock: retry the statement (a new transaction).
    RetryConflict,
    /// The connection broke (reset, server restart, failover) or can no longer write (a
    /// demoted primary): the connection is dropped for good and the statement retried on a new
    /// one.
    RetryConnection,
    /// Not retried here.
    Fail,
}

/// PgBouncer's refusal of a transaction block in `pool_mode = statement` (its error text).
const STATEMENT_MODE: &str = "transaction blocks not allowed in statement mode";

/// Whether `text` (a failure's [`Failure::summary`]) is PgBouncer in statement mode refusing the
/// transaction that carries the store's per-transaction timeouts.
pub(crate) fn names_statement_mode(text: &str) -> bool {
    text.contains(STATEMENT_MODE)
}

/// The SQLSTATE of a database error, if the server sent one.
pub(crate) fn sqlstate(e: &tokio_postgres::Error) -> Option<&SqlState> {
    e.code()
}

impl Failure {
    pub(crate) fn verdict(&self) -> Verdict {
        match self {
            Self::Pool(..) | Self::Timeout(_) => Verdict::RetryConnection,
            Self::Db(e) => match sqlstate(e) {
                Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE => Verdict::RetryConflict,
                Some(c) if *c == SqlState::T_R_DEADLOCK_DETECTED => Verdict::RetryConflict,
                // The server is shutting down or restarting (a failover), refuses connections
                // for the moment, or this session can no longer write (25006: after a failover a
                // pooled connection to the demoted writer answers reads and refuses every
                // write): the next attempt gets a new connection, checked writable.
                Some(c)
                    if *c == SqlState::READ_ONLY_SQL_TRANSACTION
                        || *c == SqlState::ADMIN_SHUTDOWN
                        || *c == SqlState::CRASH_SHUTDOWN
                        || *c == SqlState::CANNOT_CONNECT_NOW
                        || c.code().starts_with("08") =>
                {
                    Verdict::RetryConnection
                }
                Some(_) => Verdict::Fail,
                // No SQLSTATE: the connection closed, or an I/O error on it.
                None if e.is_closed() || is_io(e) => Verdict::RetryConnection,
                None => Verdict::Fail,
            },
        }
    }

    /// Whether the failure says the server itself no longer serves this pool's writes, so every
    /// idle connection to it is as stale as this one: 25006 (a demoted writer: each session left
    /// on it answers reads and refuses writes) and 57P01-57P03 (shutting down, crashed, not
    /// accepting connections). A reset or an I/O error says so only of its own connection.
    pub(crate) fn server_gone(&self) -> bool {
        let Self::Db(e) = self else { return false };
        sqlstate(e).is_some_and(|c| {
            *c == SqlState::READ_ONLY_SQL_TRANSACTION
                || *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
        })
    }

    /// The [`StoreError`] for this failure of operation `op`, after the retries.
    pub(crate) fn into_store_error(self, op: &str) -> StoreError {
        match self {
            Self::Pool(text, e) => {
                StoreError::unavailable(format!("{op}: no connection: {text}"), e)
            }
            Self::Timeout(t) => StoreError::Unavailable(
                format!(
                    "{op}: no answer within {} ms, outcome unknown",
                    t.as_millis()
                )
                .into(),
            ),
            Self::Db(e) => map_db_error(op, e),
        }
    }

    /// A one-line description for a log line (no parameter values).
    pub(crate) fn summary(&self) -> String {
        match self {
            Self::Pool(text, _) => format!("no connection: {text}"),
            Self::Timeout(t) => format!("no answer within {} ms", t.as_millis()),
            Self::Db(e) => describe(e),
        }
    }
}

fn is_io(e: &tokio_postgres::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<std::io::Error>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// Maps a driver error of operation `op` to a [`StoreError`] whose cause keeps `e` as its
/// source; every one is transient (the event is redelivered) except none: a schema that is
/// missing or wrong is fixed by running the migrations, after which the redelivery succeeds.
pub(crate) fn map_db_error(op: &str, e: tokio_postgres::Error) -> StoreError {
    let (detail, code) = (describe(&e), sqlstate(&e).cloned());
    let cause = |message: String| Cause::with_source(message, e);
    match code.as_ref() {
        Some(c)
            if *c == SqlState::T_R_SERIALIZATION_FAILURE
                || *c == SqlState::T_R_DEADLOCK_DETECTED =>
        {
            StoreError::TransactionConflict(cause(format!(
                "{op}: {detail} after {} attempts",
                RETRY_BACKOFF_MS.len() + 1
            )))
        }
        Some(c) if *c == SqlState::QUERY_CANCELED => StoreError::Unavailable(cause(format!(
            "{op}: statement timeout (statement_timeout) reached: {detail}"
        ))),
        Some(c) if *c == SqlState::LOCK_NOT_AVAILABLE => StoreError::Unavailable(cause(format!(
            "{op}: lock wait timeout (lock_timeout) reached: {detail}"
        ))),
        Some(c) if *c == SqlState::TOO_MANY_CONNECTIONS => {
            StoreError::Throttled(cause(format!("{op}: {detail}")))
        }
        Some(c) if *c == SqlState::UNDEFINED_TABLE => StoreError::Unavailable(cause(format!(
            "{op}: {detail} (run the migrations: PostgresStore::migrate)"
        ))),
        Some(c) if *c == SqlState::INSUFFICIENT_PRIVILEGE => {
            StoreError::Unavailable(cause(format!(
                "{op}: {detail} (the connection string's role lacks a grant on the schema or a \
             relation)"
            )))
        }
        _ => StoreError::Unavailable(cause(format!("{op}: {detail}"))),
    }
}

/// The error's text with its SQLSTATE (the driver's `Display` of a server error is only
/// "db error"). Never a parameter value: the server's message names constraints and columns.
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({}): {}", db.severity(), db.code().code(), db.message()),
        None => match std::error::Error::source(e) {
            Some(source) => format!("{e}: {source}"),
            None => e.to_string(),
        },
    }
}

/// SQLSTATE `42501` `insufficient_privilege` as [`describe`] renders it in a store error's text.
const INSUFFICIENT_PRIVILEGE: &str = "(42501):";

/// Whether a store error's text (its `Display`, as the adapter renders the server's error) is
/// PostgreSQL's refusal of a privilege, SQLSTATE `42501` `insufficient_privilege` (PostgreSQL
/// documentation, Appendix A): a missing `GRANT` (on the database, the schema or a relation),
/// not an outage. `gatectl` exits with its permission code on it, as on DynamoDB's
/// `AccessDenied`.
pub fn names_insufficient_privilege(text: &str) -> bool {
    text.contains(INSUFFICIENT_PRIVILEGE)
}

/// Whether `e` is a unique violation of constraint `constraint`.
pub(crate) fn is_unique_violation(e: &tokio_postgres::Error, constraint: &str) -> bool {
    e.as_db_error().is_some_and(|db| {
        *db.code() == SqlState::UNIQUE_VIOLATION && db.constraint() == Some(constraint)
    })
}

/// The sleep before retry number `attempt` (0-based), `None` when the retries are spent.
pub(crate) fn backoff(attempt: usize) -> Option<Duration> {
    RETRY_BACKOFF_MS
        .get(attempt)
        .map(|ms| Duration::from_millis(*ms))
}
