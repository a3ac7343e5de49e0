//! The store's consistent reads, the business row it reads back and the in-flight index it
//! answers through [`DynamoIndex`](crate::DynamoIndex).

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;

use crate::codec::s;
use crate::lost_answer::send_resending;

use gate::record::BusinessRow;
use gate::store::{BusinessRows, InFlightIndex, InFlightPage, StoreError};

use std::collections::HashMap;

use crate::{map_sdk_error, row_from_item, DynamoStore};

#[async_trait]
impl BusinessRows for DynamoStore {
    /// One consistent `GetItem` on the bookings table.
    async fn business_row(&self, source_event: &str) -> Result<Option<BusinessRow>, StoreError> {
        self.consistent_get(
            &self.bookings_table,
            self.columns.event_key,
            source_event,
            "booking (GetItem)",
        )
        .await?
        .as_ref()
        .map(|item| row_from_item(item, &self.columns))
        .transpose()
    }
}

/// The store reads its own indexes ([`DynamoIndex`](crate::DynamoIndex) on the same client and table).
#[async_trait]
impl InFlightIndex for DynamoStore {
    async fn multi_effect_keys(&self) -> Result<usize, StoreError> {
        self.index.multi_effect_keys().await
    }

    async fn stale_in_flight(
        &self,
        shard: &str,
        created_before_ms: i64,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<InFlightPage, StoreError> {
        self.index
            .stale_in_flight(shard, created_before_ms, cursor, limit)
            .await
    }
}

impl DynamoStore {
    /// One consistent `GetItem` of the item whose key attribute `key` is `value` in `table`.
    pub(crate) async fn consistent_get(
        &self,
        table: &str,
        key: &str,
        value: &str,
        op: &str,
    ) -> Result<Option<HashMap<String, AttributeValue>>, StoreError> {
        let request = self
            .client
            .get_item()
            .table_name(table)
            .key(key, s(value))
            .consistent_read(true);
        let out = send_resending(op, || request.clone().send())
            .await
            .map_err(|e| map_sdk_error(op, e))?;
        Ok(out.item().cloned())
    }

    /// The event key a natural-key item holds (one consistent `GetItem`), `None` if it has none.
    pub(crate) async fn natural_key_holder(
        &self,
        nk_pk: &str,
    ) -> Result<Option<String>, StoreError> {
        let item = self
            .consistent_get(
                &self.idempotency_table,
                "pk",
                nk_pk,
                "natural key (GetItem)",
            )
            .await?;
        Ok(item
            .as_ref()
            .and_then(|i| i.get("event_key"))
            .and_then(|v| v.as_s().ok())
            .cloned())
    }
}
