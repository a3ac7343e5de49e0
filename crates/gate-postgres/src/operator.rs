//! The operator's port on PostgreSQL: the scans ([`RecordScan`]: `idempotency` by keyset pages,
//! the view `multi_effect`) and the audit history ([`AuditLog`]: the table `audit_history`,
//! `migrations/0004_audit_history.sql`). The statements are in `schema.rs` with the others.

use async_trait::async_trait;

use super::codec::record_from_row;
use super::{count, first, PostgresStore};
use gate::record::IdempotencyRecord;
use gate::store::audit::{AuditEntry, AuditLog};
use gate::store::RecordScan;
use gate::store::{limits, StoreError};

/// Records read per page of [`RecordScan::scan_records`] (one `SELECT` each).
pub const SCAN_PAGE_ROWS: i64 = 500;

#[async_trait]
impl RecordScan for PostgresStore {
    /// `SELECT`s of `idempotency` in pages of [`SCAN_PAGE_ROWS`] ordered by `pk` (keyset
    /// pagination on the primary key, each page its own snapshot), with `label` the condition
    /// `labels ->> name = value`. The natural keys live in their own table, so every row is a
    /// record; a row that does not read as one is skipped. `scanned` is told the rows each page
    /// returned (the server's filter reads more; it does not say how many).
    async fn scan_records(
        &self,
        label: Option<(&str, &str)>,
        scanned: &mut (dyn FnMut(u64) + Send),
    ) -> Result<Vec<IdempotencyRecord>, StoreError> {
        let (name, value) = match label {
            Some((n, v)) => (Some(n), Some(v)),
            None => (None, None),
        };
        let mut found = Vec::new();
        let mut after = String::new();
        loop {
            let rows = self
                .query(
                    "scan_records",
                    &self.sql.scan_records,
                    &[&after, &name, &value, &SCAN_PAGE_ROWS],
                )
                .await
                .map_err(|f| Self::err("scan_records", f))?;
            scanned(u64::try_from(rows.len()).unwrap_or(0));
            let Some(last) = rows.last() else {
                return Ok(found);
            };
            after = last
                .try_get("pk")
                .map_err(|e| StoreError::corrupt(format!("scan_records: column pk: {e}"), e))?;
            let full = i64::try_from(rows.len()).unwrap_or(i64::MAX) >= SCAN_PAGE_ROWS;
            found.extend(
                rows.iter()
                    .filter_map(|r| record_from_row(r).ok().flatten()),
            );
            if !full {
                return Ok(found);
            }
        }
    }

    /// One `SELECT` of the view `multi_effect` (the partial index `idempotency_multi_effect`),
    /// ordered by `pk`. The index is consistent with the table.
    async fn multi_effect_pks(&self) -> Result<Vec<String>, StoreError> {
        let rows = self
            .query("multi_effect_pks", &self.sql.multi_effect_pks, &[])
            .await
            .map_err(|f| Self::err("multi_effect_pks", f))?;
        rows.iter()
            .map(|r| {
                r.try_get("pk").map_err(|e| {
                    StoreError::corrupt(format!("multi_effect_pks: column pk: {e}"), e)
                })
            })
            .collect()
    }
}

#[async_trait]
impl AuditLog for PostgresStore {
    /// One statement: the record's row (locked `FOR KEY SHARE` against the purge), its present
    /// life's lines counted, and the line inserted when fewer than
    /// [`limits::MAX_HISTORY_ENTRIES`]. Two appends at the same moment may both see room and
    /// pass the limit by one line each (the limit bounds DynamoDB's item size; a table row has
    /// no such bound). Not idempotent, as on DynamoDB: a retry after a lost answer may write the
    /// line twice (an audit line too many, never one too few).
    async fn append_history(&self, pk: &str, entry: &AuditEntry) -> Result<(), StoreError> {
        let e = entry.bounded();
        let max = i64::try_from(limits::MAX_HISTORY_ENTRIES).unwrap_or(i64::MAX);
        let rows = self
            .query(
                "append_history",
                &self.sql.append_history,
                &[&pk, &e.at_ms, &e.who, &e.action, &e.detail, &max],
            )
            .await
            .map_err(|f| Self::err("append_history", f))?;
        let row = first(&rows, "append_history")?;
        if count(&row, "added")? > 0 {
            Ok(())
        } else if count(&row, "found")? == 0 {
            Err(StoreError::Corrupt(
                format!("no record {pk} to audit").into(),
            ))
        } else {
            Err(StoreError::Refused(limits::ItemRefusal::HistoryFull {
                limit: limits::MAX_HISTORY_ENTRIES,
            }))
        }
    }

    /// One `SELECT` of the record's present life's lines, oldest first.
    async fn history(&self, pk: &str) -> Result<Vec<AuditEntry>, StoreError> {
        let rows = self
            .query("history", &self.sql.history, &[&pk])
            .await
            .map_err(|f| Self::err("history", f))?;
        rows.iter()
            .map(|r| {
                let col = |e: tokio_postgres::Error| {
                    StoreError::corrupt(format!("history of {pk}: {e}"), e)
                };
                Ok(AuditEntry {
                    at_ms: r.try_get("at_ms").map_err(col)?,
                    who: r.try_get("who").map_err(col)?,
                    action: r.try_get("action").map_err(col)?,
                    detail: r.try_get("detail").map_err(col)?,
                })
            })
            .collect()
    }
}
