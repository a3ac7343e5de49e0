//! The `InFlight` and multi-effect (`MULTI_EFFECT_INDEX`) indexes on DynamoDB: the read side of
//! the store the reconciler and the metrics function query ([`InFlightIndex`]). [`DynamoIndex`] needs only the idempotency
//! table's name, so the metrics function reads the indexes without building a whole store. The
//! operator's reads ([`RecordScan`]: the multi-effect keys, the table's `Scan`) are here too, for
//! the index and the store, so that no caller builds a DynamoDB request of its own.

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;

use super::codec::{
    decode_cursor, encode_cursor, in_flight_entry_from_item, num, opt_n, opt_s, record_from_item, s,
};
use super::errors::map_sdk_error;
use super::schema::{
    INFLIGHT_INDEX, MULTI_EFFECT_ATTRIBUTE, MULTI_EFFECT_INDEX, MULTI_EFFECT_MARK,
};
use super::DynamoStore;
use gate::record::IdempotencyRecord;
use gate::store::{InFlightIndex, InFlightPage, StoreError, UnreadableEntry};
use gate::store::{Purge, RecordScan};

/// The idempotency table's sparse indexes `InFlight` and multi-effect (`MULTI_EFFECT_INDEX`), read
/// through `client`.
#[derive(Debug, Clone)]
pub struct DynamoIndex {
    client: Client,
    table: String,
}

impl DynamoIndex {
    /// The indexes of `idempotency_table` (GSIs `InFlight` and multi-effect (`MULTI_EFFECT_INDEX`)), through `client`.
    pub fn new(client: Client, idempotency_table: impl Into<String>) -> Self {
        Self {
            client,
            table: idempotency_table.into(),
        }
    }
}

#[async_trait]
impl InFlightIndex for DynamoIndex {
    /// `Query` of the sparse GSI multi-effect (`MULTI_EFFECT_INDEX`) (`multi_effect = "1"`, `Select=COUNT`), paginated.
    async fn multi_effect_keys(&self) -> Result<usize, StoreError> {
        let mut total = 0usize;
        let mut start = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(MULTI_EFFECT_INDEX)
                .key_condition_expression(format!("{MULTI_EFFECT_ATTRIBUTE} = :one"))
                .expression_attribute_values(":one", s(MULTI_EFFECT_MARK))
                .select(aws_sdk_dynamodb::types::Select::Count)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|err| map_sdk_error("multi_effect_keys (Query)", err))?;
            total += usize::try_from(out.count()).unwrap_or(0);
            match out.last_evaluated_key() {
                Some(key) if !key.is_empty() => start = Some(key.clone()),
                _ => return Ok(total),
            }
        }
    }

    /// One `Query` of the GSI `InFlight`: `inflight_shard = :shard AND created_at < :before` (epoch
    /// ms), oldest first, `Limit = limit` (at least 1). An item that does not read as an
    /// [`gate::store::InFlightEntry`] goes to `unreadable` instead of failing the page. The cursor
    /// is the `LastEvaluatedKey` as JSON. The GSI is eventually consistent: a record that just left
    /// `in_flight` may still show (the reconciler's take-over is conditional anyway).
    async fn stale_in_flight(
        &self,
        shard: &str,
        created_before_ms: i64,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<InFlightPage, StoreError> {
        let start_key = cursor.as_deref().map(decode_cursor).transpose()?;
        let limit = i32::try_from(limit.max(1)).unwrap_or(i32::MAX);
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(INFLIGHT_INDEX)
            .key_condition_expression("inflight_shard = :shard AND created_at < :before")
            .expression_attribute_values(":shard", s(shard))
            .expression_attribute_values(":before", num(created_before_ms))
            .scan_index_forward(true)
            .limit(limit)
            .set_exclusive_start_key(start_key)
            .send()
            .await
            .map_err(|e| map_sdk_error("stale_in_flight (Query)", e))?;
        let mut entries = Vec::new();
        let mut unreadable = Vec::new();
        for item in out.items() {
            match in_flight_entry_from_item(item) {
                Ok(entry) => entries.push(entry),
                Err(e) => unreadable.push(UnreadableEntry {
                    pk: opt_s(item, "pk").ok().flatten(),
                    created_at_ms: opt_n(item, "created_at").ok().flatten(),
                    error: e.to_string(),
                }),
            }
        }
        let cursor = out.last_evaluated_key().map(encode_cursor).transpose()?;
        Ok(InFlightPage {
            entries,
            unreadable,
            cursor,
        })
    }
}

/// The operator's reads ([`RecordScan`]): the multi-effect GSI's `Query` and the table's `Scan`.
#[async_trait]
impl RecordScan for DynamoIndex {
    /// The keys (`pk`) of every record of the sparse multi-effect GSI ([`MULTI_EFFECT_INDEX`]:
    /// two or more distinct effect ids), all pages of its `Query`. The GSI is eventually
    /// consistent: read each record again before acting on it.
    async fn multi_effect_pks(&self) -> Result<Vec<String>, StoreError> {
        let mut pks = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(MULTI_EFFECT_INDEX)
                .key_condition_expression(format!("{MULTI_EFFECT_ATTRIBUTE} = :one"))
                .expression_attribute_values(":one", s(MULTI_EFFECT_MARK))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|err| map_sdk_error("multi_effect_pks (Query)", err))?;
            pks.extend(
                out.items()
                    .iter()
                    .filter_map(|i| opt_s(i, "pk").ok().flatten()),
            );
            match out.last_evaluated_key() {
                Some(key) if !key.is_empty() => start = Some(key.clone()),
                _ => return Ok(pks),
            }
        }
    }

    /// Every record of the idempotency table (a consistent `Scan`, all pages), or with `label`
    /// only those whose label attribute `name` is `value` (a filter: the whole table is still
    /// read and paid for). Natural-key items and anything else that is not a record are
    /// skipped. `scanned` is told how many items each page read (a progress bar).
    async fn scan_records(
        &self,
        label: Option<(&str, &str)>,
        scanned: &mut (dyn FnMut(u64) + Send),
    ) -> Result<Vec<IdempotencyRecord>, StoreError> {
        let mut found = Vec::new();
        let mut start = None;
        loop {
            let mut req = self
                .client
                .scan()
                .table_name(&self.table)
                .consistent_read(true)
                .set_exclusive_start_key(start);
            if let Some((name, value)) = label {
                req = req
                    .filter_expression("#a = :v")
                    .expression_attribute_names("#a", name)
                    .expression_attribute_values(":v", s(value));
            }
            let out = req
                .send()
                .await
                .map_err(|err| map_sdk_error("scan_records (Scan)", err))?;
            scanned(u64::try_from(out.scanned_count()).unwrap_or(0));
            found.extend(out.items().iter().filter_map(|i| record_from_item(i).ok()));
            match out.last_evaluated_key() {
                Some(key) if !key.is_empty() => start = Some(key.clone()),
                _ => return Ok(found),
            }
        }
    }
}

/// The store scans its own table ([`DynamoIndex`] on the same client and table).
#[async_trait]
impl RecordScan for DynamoStore {
    async fn scan_records(
        &self,
        label: Option<(&str, &str)>,
        scanned: &mut (dyn FnMut(u64) + Send),
    ) -> Result<Vec<IdempotencyRecord>, StoreError> {
        self.index().scan_records(label, scanned).await
    }

    async fn multi_effect_pks(&self) -> Result<Vec<String>, StoreError> {
        self.index().multi_effect_pks().await
    }
}

/// No purge: DynamoDB deletes expired items itself, by the table's TTL on `expires_at`
/// ([`Purge`]'s default, `Ok(None)`).
impl Purge for DynamoStore {}
