//! The finish of a record that ends without an effect, releasing its natural key in the same
//! write ([`gate::store::IdempotencyStore::finish_without_effect`]): one `TransactWriteItems` of
//! two updates, the record's finish (fenced by the lease, and no effect id recorded) and the
//! natural-key item's `expires_at` moved to the second before now (only while the item names the
//! record's event key). An update, not a delete: the functions' roles write the idempotency table
//! with `PutItem` and `UpdateItem` only, and the TTL deletes the item. Either condition failing
//! cancels both (AWS, `TransactWriteItems`); then, from the reasons in the items' order:
//!
//! * the record's: the retry of a finish that landed (its answer lost, the request sent once
//!   more, `lost_answer.rs`) meets it finished by this holder: finished; a record still ours that
//!   holds an effect id is finished alone (the key stays held); anything else is refused;
//! * the item's alone (absent, or another event key's since it expired): finished alone;
//! * a `TransactionConflict`: sent again after the commit's backoff.

use std::time::Duration;

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
    Update,
};

use super::codec::{num, record_from_item, s};
use super::errors::{map_sdk_error, THROTTLING_CODES, TRANSACTION_CONFLICT_BACKOFF_MS};
use super::lost_answer::send_resending;
use super::schema::{HELD_CONDITION, NO_EFFECT_ID_RECORDED, ROUTE_PENDING_MARK};
use super::DynamoStore;
use gate::clock::ms_to_s;
use gate::record::{IdempotencyRecord, NaturalKey, RecordStatus};
use gate::store::{FinishGuard, FinishOutcome, IdempotencyStore, StoreError};

const OP: &str = "finish and release (TransactWriteItems)";
const CONDITION_FAILED: &str = "ConditionalCheckFailed";

impl DynamoStore {
    /// [`IdempotencyStore::finish_without_effect`] on DynamoDB: see the module docs.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn finish_releasing(
        &self,
        record: &IdempotencyRecord,
        owner: &str,
        status: RecordStatus,
        error: &str,
        item: &[u8],
        natural_key: &NaturalKey,
        now_ms: i64,
    ) -> Result<FinishOutcome, StoreError> {
        let plain = || {
            self.finish(
                &record.pk,
                owner,
                status,
                error,
                item,
                FinishGuard::Lease,
                now_ms,
            )
        };
        // A key the store refuses was never stored: nothing to release.
        let Ok(nk_pk) = gate::store::limits::guard_pk(record, natural_key) else {
            return plain().await;
        };
        let items =
            self.finish_release_items(record, owner, status, error, item, &nk_pk, now_ms)?;
        let mut backoff = TRANSACTION_CONFLICT_BACKOFF_MS.iter();
        loop {
            let request = self
                .client
                .transact_write_items()
                .set_transact_items(Some(items.clone()));
            let err = match send_resending(OP, || request.clone().send()).await {
                Ok(_) => return Ok(FinishOutcome::Finished),
                Err(err) => err,
            };
            let reasons = match err.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(e)) => {
                    e.cancellation_reasons().to_vec()
                }
                _ => return Err(map_sdk_error(OP, err)),
            };
            let code = |i: usize| reasons.get(i).and_then(CancellationReason::code);
            if code(0) == Some(CONDITION_FAILED) {
                let old = match reasons[0].item() {
                    Some(old) => Some(record_from_item(old)?),
                    None => self.get(&record.pk).await?,
                };
                let ours = |r: &IdempotencyRecord| r.lease_owner.as_deref() == Some(owner);
                return match old {
                    Some(old) if old.status == status && old.route_pending && ours(&old) => {
                        Ok(FinishOutcome::Finished)
                    }
                    // Ours, with an effect id recorded: an effect exists, the key stays held.
                    Some(old) if old.status == RecordStatus::InFlight && ours(&old) => {
                        plain().await
                    }
                    old => Ok(FinishOutcome::Refused(old.map(Box::new))),
                };
            }
            let codes: Vec<&str> = (0..reasons.len()).filter_map(code).collect();
            if codes.contains(&"TransactionConflict") {
                match backoff.next() {
                    Some(ms) => {
                        tokio::time::sleep(Duration::from_millis(*ms)).await;
                        continue;
                    }
                    None => {
                        return Err(StoreError::TransactionConflict(
                            format!(
                                "finish of {}: TransactionConflict after {} attempts",
                                record.pk,
                                TRANSACTION_CONFLICT_BACKOFF_MS.len() + 1
                            )
                            .into(),
                        ))
                    }
                }
            }
            let text = codes.join(", ");
            if codes.iter().any(|c| THROTTLING_CODES.contains(c)) {
                return Err(StoreError::Throttled(
                    format!("finish of {}: {text}", record.pk).into(),
                ));
            }
            if codes.contains(&"ValidationError") {
                return Err(StoreError::Invalid(
                    format!("finish of {} cancelled: {text}", record.pk).into(),
                ));
            }
            if code(1) == Some(CONDITION_FAILED) {
                // The item is absent or another event key's: nothing of ours to release.
                return plain().await;
            }
            return Err(StoreError::Unavailable(
                format!("finish of {} cancelled: [{text}]", record.pk).into(),
            ));
        }
    }

    /// The two updates: the record's finish as [`IdempotencyStore::finish`] writes it (on
    /// condition [`HELD_CONDITION`] and [`NO_EFFECT_ID_RECORDED`], `ALL_OLD` on a failure), and
    /// the natural-key item `nk_pk`'s `expires_at` set to the second before `now_ms`'s, on
    /// condition `event_key = :event_key` (which an absent item fails, so none is created).
    #[allow(clippy::too_many_arguments)]
    fn finish_release_items(
        &self,
        record: &IdempotencyRecord,
        owner: &str,
        status: RecordStatus,
        error: &str,
        item: &[u8],
        nk_pk: &str,
        now_ms: i64,
    ) -> Result<Vec<TransactWriteItem>, StoreError> {
        let build_error = |e: aws_sdk_dynamodb::error::BuildError| {
            StoreError::unavailable(format!("finish of {}", record.pk), e)
        };
        let finish = Update::builder()
            .table_name(&self.idempotency_table)
            .key("pk", s(&record.pk))
            .update_expression(
                "SET #status = :status, #error = :error, #request = :item, \
                 route_pending = :pending, updated_at = :now_ms",
            )
            .condition_expression(format!("{HELD_CONDITION} AND {NO_EFFECT_ID_RECORDED}"))
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#request", "request")
            .expression_attribute_names("#error", "error")
            .expression_attribute_values(":in_flight", s(RecordStatus::InFlight.as_str()))
            .expression_attribute_values(":owner", s(owner))
            .expression_attribute_values(":status", s(status.as_str()))
            .expression_attribute_values(":error", s(error))
            .expression_attribute_values(":item", AttributeValue::B(Blob::new(item.to_vec())))
            .expression_attribute_values(":pending", s(ROUTE_PENDING_MARK))
            .expression_attribute_values(":now_ms", num(now_ms))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(build_error)?;
        let release = Update::builder()
            .table_name(&self.idempotency_table)
            .key("pk", s(nk_pk))
            .update_expression("SET expires_at = :released")
            .condition_expression("event_key = :event_key")
            .expression_attribute_values(":released", num(ms_to_s(now_ms) - 1))
            .expression_attribute_values(":event_key", s(&record.event_key))
            .build()
            .map_err(build_error)?;
        Ok(vec![
            TransactWriteItem::builder().update(finish).build(),
            TransactWriteItem::builder().update(release).build(),
        ])
    }
}
