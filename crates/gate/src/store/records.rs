//! The operator's read port ([`RecordScan`]): what an operator's tool (gatectl) reads of the
//! idempotency table beyond one record by key and the `InFlight` pages, so that it never builds a
//! request of a backend itself: every record (a full scan, optionally filtered on one label, with
//! progress), and the keys of the records holding two or more distinct effect ids; and the purge of
//! expired rows ([`Purge`]) the reconciler's schedule runs on a store without TTL. With the write
//! path, the read side and the audit history they make an [`OperatorStore`].
//!
//! Its adapters are beside the stores: DynamoDB's `Scan` and the multi-effect GSI's `Query`
//! (`dynamo/index.rs`), PostgreSQL's `SELECT`s of `idempotency` and the view `multi_effect`
//! (`postgres/mod.rs`), and the memory store's maps (`memory.rs`).

use async_trait::async_trait;

use crate::record::{BusinessRow, IdempotencyRecord};
use crate::store::audit::AuditLog;
use crate::store::{Store, StoreError};

/// The reads over many records an operator makes by hand: slow (a whole table), never on the
/// gate's hot path.
#[async_trait]
pub trait RecordScan: Send + Sync {
    /// Every record of the idempotency table (expired or not), or with `label` only those whose
    /// label `name` is `value` (on DynamoDB a filter: the whole table is still read and paid
    /// for). Natural-key items and anything else that is not a record are skipped; so is an item
    /// that cannot be read as a record. `scanned` is told, after each page, how many items the
    /// page read (a progress bar); the counts add up to the items read, skipped ones included.
    /// No order is promised.
    ///
    /// # Errors
    /// [`StoreError`] of the scan (its text names the denied action, if any).
    async fn scan_records(
        &self,
        label: Option<(&str, &str)>,
        scanned: &mut (dyn FnMut(u64) + Send),
    ) -> Result<Vec<IdempotencyRecord>, StoreError>;

    /// The keys (`pk`) of every record holding two or more distinct effect ids (the records
    /// [`crate::store::InFlightIndex::multi_effect_keys`] counts). An index may lag the table
    /// (DynamoDB's GSI is eventually consistent): read each record again before acting on it.
    ///
    /// # Errors
    /// [`StoreError`] of the read.
    async fn multi_effect_pks(&self) -> Result<Vec<String>, StoreError>;
}

/// The business table read back by event key: what an operator's tool shows beside a record
/// (`gatectl show`) and what the tests check a commit wrote; the consumer and the reconciler
/// never read it (the commit writes it in the same transaction as the record).
#[async_trait]
pub trait BusinessRows: Send + Sync {
    /// Reads the business row (the TMS booking on the truck-slot path) of the event key
    /// `source_event` (64 hex characters), `None` if there is none.
    ///
    /// # Errors
    /// [`StoreError`] of the read; [`StoreError::Corrupt`] for a row that cannot be read.
    async fn business_row(&self, source_event: &str) -> Result<Option<BusinessRow>, StoreError>;
}

/// The purge of expired rows, for a store whose database has no TTL (PostgreSQL): run by the
/// reconciler's scheduled invocation after its pass ([`crate::Gate::purge_expired`]), never by
/// the consumer.
#[async_trait]
pub trait Purge: Send + Sync {
    /// Deletes up to `limit` records whose TTL has passed at `now_ms` (epoch ms; `expires_at <
    /// now` in epoch seconds, as [`IdempotencyRecord::is_expired`]) **and** that have nothing
    /// left to do (not `in_flight`, no routing pending: exactly the records a reserve may
    /// replace), and up to `limit` expired natural-key rows. Such a record has outlived the
    /// event it guards by the key TTL already (`expires_at = max(now, event end) + ttl`), and an
    /// `in_flight` record or a pending routing is never deleted, expired or not: the reconciler
    /// finishes it first.
    ///
    /// `Ok(None)` (the default): this store needs no purge (DynamoDB deletes expired items
    /// itself, by its TTL on `expires_at`; the memory store lives as long as its process).
    ///
    /// # Errors
    /// [`StoreError`] of the deletes (the next run tries again).
    async fn purge_expired(
        &self,
        now_ms: i64,
        limit: usize,
    ) -> Result<Option<PurgeCount>, StoreError> {
        let _ = (now_ms, limit);
        Ok(None)
    }
}

/// What one [`Purge::purge_expired`] call deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PurgeCount {
    /// Expired idempotency records with nothing left to do.
    pub records: usize,
    /// Expired natural-key rows.
    pub natural_keys: usize,
}

/// What an operator's tool and the purge need of a store: the write path and the read side
/// ([`Store`]), the scans ([`RecordScan`]), the audit history ([`AuditLog`]) and the purge
/// ([`Purge`]) of the same tables, as the DynamoDB, PostgreSQL and memory adapters provide them
/// (checked by the conformance cases `crate::conformance::operator`).
pub trait OperatorStore: Store + RecordScan + AuditLog + Purge {}

impl<T: Store + RecordScan + AuditLog + Purge + ?Sized> OperatorStore for T {}
