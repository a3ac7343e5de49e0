//! Step 4 on DynamoDB: the commit transaction (`TransactWriteItems`), its items with their roles,
//! its `ClientRequestToken`s, and what each answer means.
//!
//! A connection failure the SDK hands over unretried (a `GOAWAY`, an incomplete message, a dead
//! keep-alive connection: `lost_answer.rs`) is first sent once more as it was, same items and
//! same token, so DynamoDB replays the first request's answer. Any error that still leaves the
//! outcome unknown (a timeout, a 5xx, the connection failing again) is settled by the same read:
//! our own commit is [`CommitOutcome::Committed`], anything else the error as it was.

use std::time::Duration;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};

use super::codec::{num, record_from_item, row_effect_id, row_to_item, s};
use super::errors::{
    classify_cancellation, map_sdk_error, Cancelled, ItemRole, THROTTLING_CODES,
    TRANSACTION_CONFLICT_BACKOFF_MS,
};
use super::lost_answer::send_resending;
use super::schema::{HELD_CONDITION, NO_EFFECT_ID_RECORDED};
use super::DynamoStore;
use gate::record::{BusinessRow, RecordStatus};
use gate::store::{settle_unknown_commit, CommitOutcome, StoreError, UnknownCommit};

/// The commit transaction's items and, index by index, what each one is.
pub(super) struct CommitTransaction {
    pub items: Vec<TransactWriteItem>,
    pub roles: Vec<ItemRole>,
}

/// What varies between the commit's attempts: each variant is another request, so each has its
/// own `ClientRequestToken`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Variant {
    /// Without the condition that no other effect id is recorded (the second transaction when a
    /// holder that lost its lease recorded one).
    other_effects: bool,
    /// How many attempts were cancelled (or refused as a token mismatch) before this one.
    resend: u32,
}

impl Variant {
    fn suffix(&self) -> String {
        let mut suffix = String::new();
        if self.other_effects {
            suffix.push_str("\nother-slots");
        }
        if self.resend > 0 {
            suffix.push_str(&format!("\nresend-{}", self.resend));
        }
        suffix
    }
}

impl DynamoStore {
    /// The commit transaction's items: the record's update (fenced by `owner`; with
    /// `only_our_effect`, also `attribute_not_exists(effect_ids) OR contains(effect_ids, :effect_id)`)
    /// and the booking's put; in that order, or reversed when the store was built so (tests of
    /// the classification).
    pub(super) fn commit_transaction(
        &self,
        pk: &str,
        owner: &str,
        effect_id: &str,
        booking: &BusinessRow,
        now_ms: i64,
        only_our_effect: bool,
    ) -> Result<CommitTransaction, StoreError> {
        let build_error = |e: aws_sdk_dynamodb::error::BuildError| {
            StoreError::unavailable(format!("commit of {pk}: {e}"), e)
        };
        let condition = if only_our_effect {
            format!(
                "{HELD_CONDITION} AND ({NO_EFFECT_ID_RECORDED} OR contains(effect_ids, :effect_id) \
                 OR contains(slot_ids, :effect_id))"
            )
        } else {
            HELD_CONDITION.to_string()
        };
        let update = Update::builder()
            .table_name(&self.idempotency_table)
            .key("pk", s(pk))
            .update_expression(
                "SET #status = :committed, effect_id = :effect_id, updated_at = :now_ms \
                 ADD effect_ids :effect_set \
                 REMOVE inflight_shard, lease_until, #request, slot_id",
            )
            .condition_expression(condition)
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#request", "request")
            .expression_attribute_values(":committed", s(RecordStatus::Committed.as_str()))
            .expression_attribute_values(":in_flight", s(RecordStatus::InFlight.as_str()))
            .expression_attribute_values(":owner", s(owner))
            .expression_attribute_values(":effect_id", s(effect_id))
            .expression_attribute_values(
                ":effect_set",
                AttributeValue::Ss(vec![effect_id.to_string()]),
            )
            .expression_attribute_values(":now_ms", num(now_ms))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(build_error)?;
        let put = Put::builder()
            .table_name(&self.bookings_table)
            .set_item(Some(row_to_item(booking, &self.columns)))
            .condition_expression("attribute_not_exists(#row_key)")
            .expression_attribute_names("#row_key", self.columns.event_key)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(build_error)?;
        let mut tx = CommitTransaction {
            items: vec![
                TransactWriteItem::builder().update(update).build(),
                TransactWriteItem::builder().put(put).build(),
            ],
            roles: vec![ItemRole::Record, ItemRole::Booking],
        };
        if self.reverse_commit_items {
            tx.items.reverse();
            tx.roles.reverse();
        }
        Ok(tx)
    }

    /// [`gate::store::IdempotencyStore::commit`] on DynamoDB: see the trait method's docs in
    /// `mod.rs` and this module's docs for the tokens.
    pub(super) async fn commit_in_transaction(
        &self,
        pk: &str,
        owner: &str,
        effect_id: &str,
        booking: &BusinessRow,
        now_ms: i64,
    ) -> Result<CommitOutcome, StoreError> {
        // First with the condition that no other effect id is recorded: the common case, one
        // request. A record holding another effect id (recorded by a holder that lost its lease)
        // is committed by a second transaction without it, then marked `multi_effect`: a
        // transaction cannot count a set, and the distinct-effect signal must see the key.
        let mut variant = Variant {
            other_effects: false,
            resend: 0,
        };
        let mut resent_after_mismatch = false;
        let mut backoff = TRANSACTION_CONFLICT_BACKOFF_MS.iter();
        loop {
            let tx = self.commit_transaction(
                pk,
                owner,
                effect_id,
                booking,
                now_ms,
                !variant.other_effects,
            )?;
            let token = commit_request_token_of(pk, owner, effect_id, &variant);
            // A connection failure is sent once more as it was (same items, same token):
            // DynamoDB answers it as the first request, or its cancellation carries our commit.
            let request = self
                .client
                .transact_write_items()
                .set_transact_items(Some(tx.items))
                .client_request_token(&token);
            let result =
                send_resending("commit (TransactWriteItems)", || request.clone().send()).await;
            let err = match result {
                Ok(_) => {
                    if variant.other_effects {
                        self.mark_multi_effect(pk).await?;
                    }
                    return Ok(CommitOutcome::Committed);
                }
                Err(err) => err,
            };
            let cancelled = match err.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(e)) => {
                    classify_cancellation(&tx.roles, e.cancellation_reasons())
                }
                Some(TransactWriteItemsError::IdempotentParameterMismatchException(_)) => {
                    // Our token names an earlier request with other parameters: ours, built
                    // again. Whether it committed, the record says.
                    match settle_unknown_commit(self, pk, owner, effect_id).await? {
                        UnknownCommit::Ours => {
                            if variant.other_effects {
                                self.mark_multi_effect(pk).await?;
                            }
                            return Ok(CommitOutcome::Committed);
                        }
                        UnknownCommit::StillHeld if !resent_after_mismatch => {
                            // The earlier request did not commit: send ours under a new token.
                            resent_after_mismatch = true;
                            variant.resend += 1;
                            continue;
                        }
                        UnknownCommit::StillHeld => {
                            return Err(StoreError::Unavailable(
                                format!(
                                "commit of {pk}: IdempotentParameterMismatch twice, record still \
                                 in flight"
                            )
                                .into(),
                            ))
                        }
                        UnknownCommit::Refused(record) => {
                            return Ok(CommitOutcome::Refused(record))
                        }
                    }
                }
                _ => {
                    // The outcome is unknown (a timeout, a 5xx, a dropped connection) unless
                    // the service refused the request outright.
                    if is_refused_outright(&err) {
                        return Err(map_sdk_error("commit (TransactWriteItems)", err));
                    }
                    let error = map_sdk_error("commit (TransactWriteItems)", err);
                    return match settle_unknown_commit(self, pk, owner, effect_id).await {
                        Ok(UnknownCommit::Ours) => {
                            if variant.other_effects {
                                self.mark_multi_effect(pk).await?;
                            }
                            Ok(CommitOutcome::Committed)
                        }
                        _ => Err(error),
                    };
                }
            };
            match cancelled {
                Cancelled::NotInFlight { item } => {
                    let record = match item {
                        Some(item) => record_from_item(&item)?,
                        // Only if the service left the old item out of the reason.
                        None => self.get_record(pk).await?,
                    };
                    if record.is_committed_by(owner, effect_id) {
                        // Our own commit, met by a retry: the distinct-effect mark is idempotent
                        // and may not have been written if the first answer was lost.
                        if record.effect_ids.len() > 1 {
                            self.mark_multi_effect(pk).await?;
                        }
                        return Ok(CommitOutcome::Committed);
                    }
                    let ours = record.status == RecordStatus::InFlight
                        && record.lease_owner.as_deref() == Some(owner);
                    if ours && !variant.other_effects && !record.effect_ids.contains(effect_id) {
                        variant.other_effects = true;
                        variant.resend += 1;
                        continue;
                    }
                    return Ok(CommitOutcome::Refused(Box::new(record)));
                }
                Cancelled::BookingExists(old) => {
                    let existing_effect = old
                        .as_ref()
                        .and_then(|item| row_effect_id(item, &self.columns));
                    return Err(StoreError::Corrupt(
                        format!(
                            "a business row for {} already exists with effect id {}",
                            booking.source_event,
                            existing_effect.as_deref().unwrap_or("?")
                        )
                        .into(),
                    ));
                }
                Cancelled::Conflict => match backoff.next() {
                    Some(ms) => {
                        tokio::time::sleep(Duration::from_millis(*ms)).await;
                        variant.resend += 1;
                    }
                    None => {
                        return Err(StoreError::TransactionConflict(
                            format!(
                                "commit of {pk}: TransactionConflict after {} attempts",
                                TRANSACTION_CONFLICT_BACKOFF_MS.len() + 1
                            )
                            .into(),
                        ))
                    }
                },
                Cancelled::Throttled(codes) => {
                    return Err(StoreError::Throttled(
                        format!("commit of {pk}: {codes}").into(),
                    ))
                }
                Cancelled::Invalid(codes) => {
                    return Err(StoreError::Invalid(
                        format!("commit of {pk} cancelled: {codes}").into(),
                    ))
                }
                Cancelled::Other(codes) => {
                    return Err(StoreError::Unavailable(
                        format!("commit of {pk} cancelled: {codes}").into(),
                    ))
                }
            }
        }
    }

    /// One consistent read of a record that must exist.
    async fn get_record(&self, pk: &str) -> Result<gate::record::IdempotencyRecord, StoreError> {
        use gate::store::IdempotencyStore;
        self.get(pk)
            .await?
            .ok_or_else(|| StoreError::Corrupt(format!("no record {pk} to commit").into()))
    }
}

/// Whether a `TransactWriteItems` error means the service refused the request without running
/// it (throttling, validation, a missing table, a request the client could not build): then
/// nothing can have been written and no read is needed. Everything else (timeouts, dispatch and
/// response failures, 5xx) leaves the outcome unknown.
fn is_refused_outright<R>(
    err: &aws_sdk_dynamodb::error::SdkError<TransactWriteItemsError, R>,
) -> bool {
    use aws_sdk_dynamodb::error::SdkError;
    match err {
        SdkError::ConstructionFailure(_) => true,
        SdkError::ServiceError(_) => {
            let code = err.code().unwrap_or_default();
            THROTTLING_CODES.contains(&code)
                || matches!(
                    code,
                    "ValidationException"
                        | "ResourceNotFoundException"
                        | "AccessDeniedException"
                        | "UnrecognizedClientException"
                        | "TransactionConflictException"
                )
        }
        _ => false,
    }
}

/// The `ClientRequestToken` of the first attempt of the commit of `pk` by `owner` with
/// `effect_id`: the first 32 hex characters of SHA-256 over the three (a token is 1 to 36
/// characters, AWS `TransactWriteItems`). The SDK's retry of that attempt carries the same token
/// and bytes, so DynamoDB answers it as the first request for 10 minutes; another owner or effect
/// gets another token; every later attempt of the same commit has a token of its own.
///
/// Tokens, as DynamoDB applies them:
///
/// A `ClientRequestToken` makes a retry of the same request within 10 minutes of the first one's
/// completion answer as the first one; the same token with other parameters within those 10
/// minutes is `IdempotentParameterMismatchException`; after them the token is new (AWS,
/// `TransactWriteItems`, "ClientRequestToken"). So:
///
/// * the SDK's retry of one attempt sends the same bytes under the same token: replayed;
/// * every attempt this module makes after a cancellation (a `TransactionConflict`, the
///   variant over another recorded effect id) gets a token of
///   its own ([`commit_request_token`] with the attempt's variant): a cancellation wrote nothing,
///   and a replay of it would only repeat it;
/// * a holder that commits again with the items built again (a later `updated_at`, maps in
///   another order) meets its first token: `IdempotentParameterMismatchException` within 10
///   minutes, a new request after them. The mismatch is "outcome unknown": one consistent read
///   ([`settle_unknown_commit`]) finds our own commit (committed), the record still ours (not
///   landed: the transaction is sent once more under a fresh token) or someone else's state
///   (refused). After 10 minutes the request runs again and its cancellation carries our own
///   commit: committed.
pub fn commit_request_token(pk: &str, owner: &str, effect_id: &str) -> String {
    commit_request_token_of(
        pk,
        owner,
        effect_id,
        &Variant {
            other_effects: false,
            resend: 0,
        },
    )
}

fn commit_request_token_of(pk: &str, owner: &str, effect_id: &str, variant: &Variant) -> String {
    let mut digest = gate::keys::sha256_hex(
        format!("{pk}\n{owner}\n{effect_id}{}", variant.suffix()).as_bytes(),
    );
    digest.truncate(32);
    digest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_attempt_has_its_own_token_and_the_first_is_stable() {
        let first = commit_request_token("ect#ab", "req-1#0", "S1");
        assert_eq!(first.len(), 32);
        assert_eq!(first, commit_request_token("ect#ab", "req-1#0", "S1"));
        assert_ne!(first, commit_request_token("ect#ab", "req-2#0", "S1"));
        assert_ne!(first, commit_request_token("ect#ab", "req-1#0", "S2"));
        let mut seen = std::collections::BTreeSet::from([first]);
        for other_effects in [false, true] {
            for resend in 0..3 {
                let v = Variant {
                    other_effects,
                    resend,
                };
                if v.suffix().is_empty() {
                    continue;
                }
                assert!(
                    seen.insert(commit_request_token_of("ect#ab", "req-1#0", "S1", &v)),
                    "{v:?}"
                );
            }
        }
    }
}
