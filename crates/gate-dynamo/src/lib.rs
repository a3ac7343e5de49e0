//! `gate-dynamo`: the exactly-once gate's store on DynamoDB ([`DynamoStore`], with its indexes
//! [`DynamoIndex`]) and the SQS manual queue ([`sqs`]). Depends on `gate` (the ports) and the
//! AWS SDK (`aws-sdk-dynamodb`, `aws-sdk-sqs`); feature `testkit`: the hooks the conformance
//! suite of `gate-testkit` drives.
//!
//! Two tables: the idempotency table (partition key `pk` (S), the sparse GSI `InFlight` on
//! `inflight_shard` (S) and `created_at` (N), projecting only [`INFLIGHT_PROJECTED_ATTRIBUTES`],
//! never the request with its secrets, TTL on `expires_at`); the business table, its columns
//! named by the integration ([`RowColumns`], [`DynamoStore::with_row_columns`]; by default
//! partition key `source_event` (S), `effect_id`, `written_at`). Units, never mixed:
//! `expires_at` is **epoch seconds** (the TTL attribute); `lease_until`, `created_at`,
//! `updated_at` and the business row's time are **epoch milliseconds**.
//!
//! Modules: `idempotency` (the store port, one call per operation, a write that lost its answer
//! recognised), `commit`, `guard`, `release`, `reads`, `index`, `audit`, `codec` and `schema`
//! (the items and their conditions), `errors`, `lost_answer` (one resend after a lost answer),
//! `canary` ([`DynamoStore::verify_conditional_writes`], the cold-start check that the backend
//! honours conditions), `replication` and [`sqs`].
#![warn(missing_docs)]

mod audit;
mod canary;
mod codec;
mod commit;
mod errors;
mod guard;
mod idempotency;
mod index;
mod lost_answer;
mod reads;
mod release;
mod replication;
mod schema;
pub mod sqs;

use std::collections::HashMap;

use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;

pub use canary::{ConditionalWritesError, CANARY_PK_PREFIX};
use codec::{num, s};
pub use codec::{record_from_item, record_to_item, row_from_item, row_to_item, RECORD_ATTRIBUTES};
pub use commit::commit_request_token;
pub(crate) use errors::map_sdk_error;
pub use errors::TRANSACTION_CONFLICT_BACKOFF_MS;
pub use index::DynamoIndex;
use lost_answer::send_resending;
pub use replication::{
    check_table, replication_of, Replication, ReplicationError, LEGACY_GLOBAL_TABLE_VERSION,
};
use schema::RESERVE_CONDITION;
pub use schema::{
    create_tables, create_tables_for, EFFECT_ID, EFFECT_IDS, INFLIGHT_INDEX,
    INFLIGHT_PROJECTED_ATTRIBUTES, LEGACY_EFFECT_ID, LEGACY_EFFECT_IDS, MULTI_EFFECT_ATTRIBUTE,
    MULTI_EFFECT_INDEX, MULTI_EFFECT_MARK, ROUTE_PENDING_MARK,
};

use gate::clock::ms_to_s;
use gate::record::{IdempotencyRecord, RecordStatus, RowColumns};
use gate::store::StoreError;

/// The idempotency table and the business table on DynamoDB.
///
/// Build the [`Client`] once per cold start, with the SDK's retry configuration (throttling and
/// transient errors are retried there, not here).
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    idempotency_table: String,
    bookings_table: String,
    index: DynamoIndex,
    /// The business row's column names (the integration's).
    columns: RowColumns,
    /// Build the commit transaction's items in reverse order (tests of the classification of
    /// its cancellations, which must not depend on the order).
    reverse_commit_items: bool,
}

impl DynamoStore {
    /// A store on `idempotency_table` (partition key `pk`, GSI `InFlight`, TTL `expires_at` in
    /// epoch seconds) and `bookings_table`, through `client`, the business row's columns named
    /// [`RowColumns::NEUTRAL`] (partition key `source_event`) until
    /// [`DynamoStore::with_row_columns`] names them.
    pub fn new(
        client: Client,
        idempotency_table: impl Into<String>,
        bookings_table: impl Into<String>,
    ) -> Self {
        let idempotency_table = idempotency_table.into();
        Self {
            index: DynamoIndex::new(client.clone(), idempotency_table.clone()),
            client,
            idempotency_table,
            bookings_table: bookings_table.into(),
            columns: RowColumns::NEUTRAL,
            reverse_commit_items: false,
        }
    }

    /// The same store with the business row's columns named `columns` (the integration's,
    /// [`gate::integration::Integration::row_columns`]; the Lambda wiring and gatectl pass
    /// them): the commit writes the row under these names and the business table's key is
    /// `columns.event_key`. A row written under [`RowColumns::LEGACY`] still reads.
    pub fn with_row_columns(mut self, columns: RowColumns) -> Self {
        self.columns = columns;
        self
    }

    /// The same store, building the commit transaction's items in reverse order (the booking,
    /// then the record): a cancellation's reasons are read through the item
    /// they belong to, so every outcome must be the same as in the usual order. For tests.
    #[cfg(feature = "testkit")]
    pub fn with_commit_items_reversed(mut self) -> Self {
        self.reverse_commit_items = true;
        self
    }

    /// The idempotency table's name.
    pub fn idempotency_table(&self) -> &str {
        &self.idempotency_table
    }

    /// The business table's name.
    pub fn business_table(&self) -> &str {
        &self.bookings_table
    }

    /// The read side of the same table: its `InFlight` and [`MULTI_EFFECT_INDEX`] indexes.
    pub fn index(&self) -> &DynamoIndex {
        &self.index
    }

    /// The DynamoDB client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Marks `pk` as holding two or more distinct effect ids ([`MULTI_EFFECT_ATTRIBUTE`] `= "1"`, the sparse GSI
    /// [`MULTI_EFFECT_INDEX`]). Idempotent.
    async fn mark_multi_effect(&self, pk: &str) -> Result<(), StoreError> {
        let request = self
            .client
            .update_item()
            .table_name(&self.idempotency_table)
            .key("pk", s(pk))
            .update_expression(format!("SET {MULTI_EFFECT_ATTRIBUTE} = :one"))
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_values(":one", s(MULTI_EFFECT_MARK));
        send_resending("multi-effect mark (UpdateItem)", || request.clone().send())
            .await
            .map_err(|err| map_sdk_error("multi-effect mark (UpdateItem)", err))?;
        Ok(())
    }

    async fn put_reserve(
        &self,
        item: &HashMap<String, AttributeValue>,
        now_ms: i64,
    ) -> Result<Option<Option<IdempotencyRecord>>, StoreError> {
        let request = self
            .client
            .put_item()
            .table_name(&self.idempotency_table)
            .set_item(Some(item.clone()))
            .condition_expression(RESERVE_CONDITION)
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":in_flight", s(RecordStatus::InFlight.as_str()))
            .expression_attribute_values(":now_s", num(ms_to_s(now_ms)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        let result = send_resending("reserve (PutItem)", || request.clone().send()).await;
        match result {
            Ok(_) => Ok(None),
            Err(err) => match err.as_service_error() {
                Some(PutItemError::ConditionalCheckFailedException(e)) => {
                    Ok(Some(e.item().map(record_from_item).transpose()?))
                }
                _ => Err(map_sdk_error("reserve (PutItem)", err)),
            },
        }
    }
}
