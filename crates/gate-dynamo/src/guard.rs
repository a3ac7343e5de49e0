//! The guard of signal 4 on DynamoDB: the natural-key item put before the call
//! ([`gate::store::IdempotencyStore::guard`]), one conditional `PutItem`.

use std::collections::HashMap;

use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;

use super::codec::{num, s};
use super::errors::map_sdk_error;
use super::lost_answer::send_resending;
use super::schema::GUARD_CONDITION;
use super::DynamoStore;
use gate::clock::ms_to_s;
use gate::record::{IdempotencyRecord, NaturalKey};
use gate::store::{GuardOutcome, StoreError};

impl DynamoStore {
    /// [`gate::store::IdempotencyStore::guard`] on DynamoDB: see the trait method's docs in
    /// `mod.rs`.
    pub(super) async fn put_guard(
        &self,
        record: &IdempotencyRecord,
        natural_key: &NaturalKey,
        now_ms: i64,
    ) -> Result<GuardOutcome, StoreError> {
        let event_key = record.event_key.as_str();
        let nk_pk =
            gate::store::limits::guard_pk(record, natural_key).map_err(StoreError::Refused)?;
        let mut item = HashMap::from([
            ("pk".to_string(), s(&nk_pk)),
            ("event_key".to_string(), s(event_key)),
            ("expires_at".to_string(), num(natural_key.expires_at_s)),
        ]);
        for (name, value) in &natural_key.labels {
            item.entry(name.clone()).or_insert_with(|| s(value));
        }
        let request = self
            .client
            .put_item()
            .table_name(&self.idempotency_table)
            .set_item(Some(item))
            .condition_expression(GUARD_CONDITION)
            .expression_attribute_values(":event_key", s(event_key))
            .expression_attribute_values(":now_s", num(ms_to_s(now_ms)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        // A lost answer is sent once more: its failed condition then names our own event key.
        let result = send_resending("guard (PutItem)", || request.clone().send()).await;
        let old = match result {
            Ok(_) => return Ok(GuardOutcome::Held),
            Err(err) => match err.as_service_error() {
                Some(PutItemError::ConditionalCheckFailedException(e)) => e.item().cloned(),
                _ => return Err(map_sdk_error("guard (PutItem)", err)),
            },
        };
        let holder = match old {
            Some(old) => old.get("event_key").and_then(|v| v.as_s().ok()).cloned(),
            None => self.natural_key_holder(&nk_pk).await?,
        };
        match holder {
            Some(holder) if holder != event_key => Ok(GuardOutcome::Collision {
                other_event_key: holder,
            }),
            Some(_) => Ok(GuardOutcome::Held),
            None => Err(StoreError::Corrupt(
                format!("natural-key item {nk_pk}: the condition failed but it names no event key")
                    .into(),
            )),
        }
    }
}
