//! The `InFlight` and `MultiEffect` indexes on DynamoDB: the read side of the store the reconciler
//! and the metrics function query ([`InFlightIndex`]). [`DynamoIndex`] needs only the idempotency
//! table's name, so the metrics function reads the indexes without building a whole store.

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;

use super::codec::{decode_cursor, encode_cursor, in_flight_entry_from_item, num, opt_n, opt_s, s};
use super::errors::map_sdk_error;
use super::schema::{INFLIGHT_INDEX, MULTI_EFFECT_INDEX, MULTI_EFFECT_MARK};
use crate::store::{InFlightIndex, InFlightPage, StoreError, UnreadableEntry};

/// The idempotency table's sparse indexes `InFlight` and `MultiEffect`, read through `client`.
#[derive(Debug, Clone)]
pub struct DynamoIndex {
    client: Client,
    table: String,
}

impl DynamoIndex {
    /// The indexes of `idempotency_table` (GSIs `InFlight` and `MultiEffect`), through `client`.
    pub fn new(client: Client, idempotency_table: impl Into<String>) -> Self {
        Self {
            client,
            table: idempotency_table.into(),
        }
    }
}

#[async_trait]
impl InFlightIndex for DynamoIndex {
    /// `Query` of the sparse GSI `MultiEffect` (`multi_effect = "1"`, `Select=COUNT`), paginated.
    async fn multi_effect_keys(&self) -> Result<usize, StoreError> {
        let mut total = 0usize;
        let mut start = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(MULTI_EFFECT_INDEX)
                .key_condition_expression("multi_slot = :one")
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

    /// One `Query` of the GSI `InFlight`: `inflight_shard = :shard AND created_at < :before`
    /// (epoch ms), oldest first, `Limit = limit` (at least 1). An item that does not read as an
    /// [`InFlightEntry`] goes to `unreadable` instead of failing the page. The cursor is the
    /// `LastEvaluatedKey` as JSON. The GSI is eventually consistent: a record that just left
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
