//! The audit history on DynamoDB ([`AuditLog`] for [`DynamoStore`]): the list attribute
//! `history` of the record's item, each line a map `{at: N (epoch ms), who: S, action: S,
//! detail: S}`; the layout is in `super::codec`, with the rest of the item.

use async_trait::async_trait;
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::AttributeValue;

use super::codec::{audit_entry_from_value, audit_entry_to_value};
use crate::DynamoStore;
use gate::store::audit::{AuditEntry, AuditLog};
use gate::store::{limits, StoreError};

/// The store's own mapping (`crate::map_sdk_error`): a `ValidationException`
/// (a history that would take the item over 400 KB) is permanent, never "unavailable".
fn store_error<E, R>(op: &str, err: aws_sdk_dynamodb::error::SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    crate::map_sdk_error(op, err)
}

/// `history` is a list of maps `{at: N (epoch ms), who: S, action: S, detail: S}`.
#[async_trait]
impl AuditLog for DynamoStore {
    /// One `UpdateItem`: `SET history = list_append(if_not_exists(history, []), [entry])` on
    /// condition `attribute_exists(pk)` and fewer than [`limits::MAX_HISTORY_ENTRIES`] lines
    /// (a refused condition returns the old item, which tells the two apart). Not
    /// idempotent: the SDK's retry of an append that landed appends the line twice (an audit
    /// line too many, never one too few).
    async fn append_history(&self, pk: &str, entry: &AuditEntry) -> Result<(), StoreError> {
        let result = self
            .client()
            .update_item()
            .table_name(self.idempotency_table())
            .key("pk", AttributeValue::S(pk.to_string()))
            .update_expression("SET history = list_append(if_not_exists(history, :empty), :entry)")
            .condition_expression(
                "attribute_exists(pk) AND (attribute_not_exists(history) OR size(history) < :max)",
            )
            .expression_attribute_values(":empty", AttributeValue::L(Vec::new()))
            .expression_attribute_values(
                ":entry",
                AttributeValue::L(vec![audit_entry_to_value(&entry.bounded())]),
            )
            .expression_attribute_values(
                ":max",
                AttributeValue::N(limits::MAX_HISTORY_ENTRIES.to_string()),
            )
            .return_values_on_condition_check_failure(
                aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld,
            )
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(err) => match err.as_service_error() {
                Some(
                    aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(e),
                ) => match e.item() {
                    Some(_) => Err(StoreError::Refused(limits::ItemRefusal::HistoryFull {
                        limit: limits::MAX_HISTORY_ENTRIES,
                    })),
                    None => Err(StoreError::Corrupt(format!("no record {pk} to audit").into())),
                },
                _ => Err(store_error("history (UpdateItem)", err)),
            },
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
            Some(_) => Err(StoreError::Corrupt(
                format!("{pk}: history is not a list").into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::error::{ErrorMetadata, SdkError};
    use aws_sdk_dynamodb::operation::update_item::UpdateItemError;

    use super::*;

    /// An append the service refuses as invalid (the item would pass 400 KB) is not
    /// transient; a throttled one is.
    #[test]
    fn a_refused_history_append_is_not_transient() {
        let error = |code: &str| {
            let meta = ErrorMetadata::builder()
                .code(code)
                .message("Item size to update has exceeded the maximum allowed size")
                .build();
            SdkError::service_error(UpdateItemError::generic(meta), ())
        };
        let e = store_error("history (UpdateItem)", error("ValidationException"));
        assert!(matches!(e, StoreError::Invalid(_)), "{e:?}");
        assert!(!e.is_transient());
        let e = store_error(
            "history (UpdateItem)",
            error("ProvisionedThroughputExceededException"),
        );
        assert!(e.is_transient(), "{e:?}");
    }
}
