//! The audit history on DynamoDB ([`AuditLog`] for [`DynamoStore`]): the list attribute
//! `history` of the record's item, each line a map `{at: N (epoch ms), who: S, action: S,
//! detail: S}`; the layout is in `super::codec`, with the rest of the item.

use async_trait::async_trait;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_dynamodb::types::AttributeValue;

use super::codec::{audit_entry_from_value, audit_entry_to_value};
use crate::store::audit::{AuditEntry, AuditLog};
use crate::store::dynamo::DynamoStore;
use crate::store::StoreError;

fn store_error<E: ProvideErrorMetadata + std::error::Error + 'static, R: std::fmt::Debug>(
    op: &str,
    err: aws_sdk_dynamodb::error::SdkError<E, R>,
) -> StoreError {
    StoreError::Unavailable(format!("{op}: {}", DisplayErrorContext(&err)))
}

/// `history` is a list of maps `{at: N (epoch ms), who: S, action: S, detail: S}`.
#[async_trait]
impl AuditLog for DynamoStore {
    /// One `UpdateItem`: `SET history = list_append(if_not_exists(history, []), [entry])` on
    /// condition `attribute_exists(pk)`. Not idempotent: the SDK's retry of an append that
    /// landed appends the line twice (an audit line too many, never one too few).
    async fn append_history(&self, pk: &str, entry: &AuditEntry) -> Result<(), StoreError> {
        let result = self
            .client()
            .update_item()
            .table_name(self.idempotency_table())
            .key("pk", AttributeValue::S(pk.to_string()))
            .update_expression("SET history = list_append(if_not_exists(history, :empty), :entry)")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_values(":empty", AttributeValue::L(Vec::new()))
            .expression_attribute_values(
                ":entry",
                AttributeValue::L(vec![audit_entry_to_value(entry)]),
            )
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(err)
                if err
                    .as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                Err(StoreError::Corrupt(format!("no record {pk} to audit")))
            }
            Err(err) => Err(store_error("history (UpdateItem)", err)),
        }
    }

    /// One consistent `GetItem` of `history` only (`ProjectionExpression`).
    async fn history(&self, pk: &str) -> Result<Vec<AuditEntry>, StoreError> {
        let out = self
            .client()
            .get_item()
            .table_name(self.idempotency_table())
            .key("pk", AttributeValue::S(pk.to_string()))
            .projection_expression("history")
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("history (GetItem)", e))?;
        match out.item().and_then(|i| i.get("history")) {
            None => Ok(Vec::new()),
            Some(AttributeValue::L(entries)) => {
                entries.iter().map(audit_entry_from_value).collect()
            }
            Some(_) => Err(StoreError::Corrupt(format!("{pk}: history is not a list"))),
        }
    }
}
