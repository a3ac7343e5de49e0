//! `gate-postgres`: the exactly-once gate's store on PostgreSQL ([`PostgresStore`]: the
//! [`IdempotencyStore`](gate::store::IdempotencyStore) and
//! [`InFlightIndex`](gate::store::InFlightIndex) with the business rows, the operators' ports and
//! the purge), for teams whose business tables already live there (RDS, Aurora): the commit of
//! the record and the business row is one local transaction. Depends on `gate` (the ports),
//! `tokio-postgres` with the `deadpool-postgres` pool and `rustls`; no features.
//!
//! Tables, in one schema (default `gate`, created by the versioned migrations,
//! [`PostgresStore::migrate`]): `idempotency` (with the partial indexes behind the views
//! `in_flight` and `multi_effect`), `business_rows`, `natural_keys` and `audit_history`.
//! PostgreSQL has no TTL: an expired row counts as absent for the reserve until the purge
//! ([`Purge::purge_expired`](gate::store::Purge::purge_expired)) deletes it. Units, never mixed:
//! `expires_at_s` is **epoch seconds**; `*_at_ms` and `lease_until_ms` **epoch milliseconds**.
//!
//! Modules: `config` ([`PostgresConfig`]), `connection` (the pool, one statement's round trip
//! and its retries), `idempotency` (the store port, one statement per operation),
//! `reserve_guard`, `release`, `rows` (business rows, purge, in-flight index), `operator` (the
//! audit and the operators' scans), `schema` (statements, [`MIGRATIONS`]), `codec` (rows to
//! records), `errors` (SQLSTATEs to [`StoreError`](gate::store::StoreError)) and [`tls`].
#![warn(missing_docs)]

mod codec;
mod config;
mod connection;
mod errors;
mod idempotency;
mod operator;
mod release;
mod reserve_guard;
mod rows;
mod schema;
pub mod tls;

use std::time::Duration;

use deadpool_postgres::Pool;

pub use config::{connection_string_parses, PostgresConfig};
use connection::{count, first};
pub use errors::{names_insufficient_privilege, RETRY_BACKOFF_MS};
pub use operator::SCAN_PAGE_ROWS;
pub use schema::{check_schema_name, Migration, MIGRATIONS, MIGRATIONS_TABLE};
pub use tls::{Roots, SslMode};

use schema::Statements;

/// How often a statement whose result contradicts its snapshot (a concurrent write, see the
/// `idempotency` module) is run again before the operation fails as
/// [`StoreError::Unavailable`](gate::store::StoreError::Unavailable).
pub(crate) const SNAPSHOT_RACE_ATTEMPTS: usize = 4;

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
