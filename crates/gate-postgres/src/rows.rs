//! The business rows, the purge of expired rows and the in-flight index on PostgreSQL: the
//! ports beside the idempotency store, each one statement.

use async_trait::async_trait;

use crate::codec::{business_row_from_row, in_flight_entry_from_row};
use gate::store::cursor::{decode_cursor, encode_cursor};

use gate::clock::ms_to_s;
use gate::record::BusinessRow;
use gate::store::{
    BusinessRows, InFlightIndex, InFlightPage, Purge, PurgeCount, StoreError, UnreadableEntry,
};

use crate::connection::{count, first};
use crate::PostgresStore;

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
