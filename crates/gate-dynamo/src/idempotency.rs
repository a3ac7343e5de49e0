//! [`IdempotencyStore`] on DynamoDB, one call per operation: `reserve` is one `PutItem` (a
//! conflict comes back in the same call through `ReturnValuesOnConditionCheckFailure=ALL_OLD`;
//! only if the service leaves the old item out of the error does a consistent `GetItem`
//! follow); `commit` is one `TransactWriteItems` (`commit.rs`: retried on
//! `TransactionConflict`, and once after a token mismatch whose record is still ours; a
//! consistent `GetItem` only when its outcome is unknown); `guard` is one `PutItem` (its holder
//! through `ALL_OLD`, the same way); every other operation is one call.
//!
//! Retries of throttling and transient errors belong to the SDK's retry configuration where the
//! client is built (e.g. `RetryConfig::standard().with_max_attempts(..)`); this module retries
//! nothing by hand except a cancelled commit transaction (see `commit.rs`).

use async_trait::async_trait;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};

use crate::codec::{num, s};
use crate::errors::{condition_failure_item, is_update_condition_failure};
use crate::lost_answer::send_resending;
use crate::schema::{
    EXTEND_CONDITION, HELD_CONDITION, NO_EFFECT_ID_RECORDED, RELEASE_CONDITION, TAKE_OVER_CONDITION,
};

use gate::record::{BusinessRow, IdempotencyRecord, NaturalKey, RecordStatus, RowColumns};
use gate::store::{
    CommitOutcome, FinishGuard, FinishOutcome, GuardOutcome, IdempotencyStore, Reservation,
    StoreError, TakeOver,
};

use crate::codec;
use crate::{map_sdk_error, record_from_item, DynamoStore, ROUTE_PENDING_MARK};

/// A write that landed and lost its answer: the SDK retries a request whose answer did not
/// arrive (a timeout, a dropped connection), and the retry can meet the write it repeats. Some
/// connection failures the SDK hands over without a retry (an HTTP/2 `GOAWAY`, an incomplete
/// message, a keep-alive connection dead after a freeze): this adapter sends every request once
/// more after one of them (`lost_answer.rs`), never reading it as "nothing happened". Every
/// conditional write here recognises itself:
///
/// * reserve (`PutItem`): the retry's failed condition returns our own item (same lease owner, a
///   token unique per acquisition): reserved;
/// * take-over (`UpdateItem`): the old item returned on the failed condition already carries our
///   lease: taken;
/// * commit (`TransactWriteItems`): an explicit `ClientRequestToken`
///   ([`commit_request_token`](crate::commit_request_token)) makes DynamoDB answer the SDK's
///   retry within 10 minutes as the first request; where it does not (moto, or after 10
///   minutes) the cancellation returns the record committed by us with our effect: committed; a
///   commit built again under the same token within 10 minutes
///   (`IdempotentParameterMismatchException`) or whose answer never came is settled by one
///   consistent read ([`gate::store::settle_unknown_commit`]);
/// * finish (`UpdateItem`): the old item is already finished by us with its routing pending;
/// * release, routed, the effect-id `ADD` and the `multi_effect` mark: a retry meets the same
///   condition (release) or changes nothing (a set `ADD`, a `SET` of the same value, a confirmed
///   routing whose second confirmation is refused and ignored).
#[async_trait]
impl IdempotencyStore for DynamoStore {
    /// One `PutItem` with [`IdempotencyStore::reserve`]'s condition (`:now_s` in epoch seconds)
    /// and `ALL_OLD` on a failed condition. Only when the old item is missing from the error does
    /// a consistent `GetItem` follow (two calls); if the record vanished in between (TTL
    /// deletion), the put is tried once more. When the SDK retries a `PutItem` whose write landed
    /// (its answer lost or late), the retry's failed condition returns our own item: that is
    /// [`Reservation::Reserved`] ([`IdempotencyRecord::is_same_reservation`]).
    async fn reserve(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> Result<Reservation, StoreError> {
        let item = codec::checked_record_item(record)?;
        for _ in 0..2 {
            match self.put_reserve(&item, now_ms).await? {
                None => return Ok(Reservation::Reserved),
                Some(Some(existing)) if existing.is_same_reservation(record) => {
                    return Ok(Reservation::Reserved)
                }
                Some(Some(existing)) => return Ok(Reservation::Conflict(Box::new(existing))),
                Some(None) => {
                    if let Some(existing) = self.get(&record.pk).await? {
                        if existing.is_same_reservation(record) {
                            return Ok(Reservation::Reserved);
                        }
                        return Ok(Reservation::Conflict(Box::new(existing)));
                    }
                }
            }
        }
        Err(StoreError::Unavailable(
            format!(
                "reserve of {}: the condition failed but the record is gone",
                record.pk
            )
            .into(),
        ))
    }

    /// One conditional `UpdateItem` (`ReturnValues=ALL_NEW`, `ALL_OLD` on a failed condition):
    /// `(status = in_flight OR route_pending) AND lease_owner = :old AND lease_until < :now`
    /// (epoch ms; a missing `lease_until` counts as expired). A failed condition, including a
    /// missing record, is [`TakeOver::Refused`], unless the old item already carries our lease
    /// (`new_owner`, `lease_until_ms`): the SDK's retry of a take-over that landed, which is
    /// [`TakeOver::Taken`] with that item.
    async fn take_over(
        &self,
        pk: &str,
        old_owner: &str,
        new_owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<TakeOver, StoreError> {
        let request = self
            .client
            .update_item()
            .table_name(&self.idempotency_table)
            .key("pk", s(pk))
            .update_expression(
                "SET lease_owner = :new_owner, lease_until = :lease_until, updated_at = :now_ms",
            )
            .condition_expression(TAKE_OVER_CONDITION)
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":in_flight", s(RecordStatus::InFlight.as_str()))
            .expression_attribute_values(":old_owner", s(old_owner))
            .expression_attribute_values(":new_owner", s(new_owner))
            .expression_attribute_values(":lease_until", num(lease_until_ms))
            .expression_attribute_values(":now_ms", num(now_ms))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        let result = send_resending("take_over (UpdateItem)", || request.clone().send()).await;
        match result {
            Ok(out) => match out.attributes() {
                Some(item) => Ok(TakeOver::Taken(Box::new(record_from_item(item)?))),
                None => Err(StoreError::Corrupt(
                    format!("take-over of {pk}: no attributes returned").into(),
                )),
            },
            Err(err) if is_update_condition_failure(&err) => {
                match condition_failure_item(&err)
                    .map(record_from_item)
                    .transpose()?
                {
                    Some(old)
                        if old.has_work()
                            && old.lease_owner.as_deref() == Some(new_owner)
                            && old.lease_until_ms == Some(lease_until_ms) =>
                    {
                        Ok(TakeOver::Taken(Box::new(old)))
                    }
                    _ => Ok(TakeOver::Refused),
                }
            }
            Err(err) => Err(map_sdk_error("take_over (UpdateItem)", err)),
        }
    }

    /// One `TransactWriteItems` (`commit.rs`) of two items: the record's update (condition
    /// `status = in_flight AND lease_owner = :owner`, `ALL_OLD` on failure) and the booking's put
    /// (condition `attribute_not_exists` of its key, [`RowColumns::event_key`]), under a `ClientRequestToken` derived
    /// from the record, the owner, the effect and the attempt ([`commit_request_token`](crate::commit_request_token)): DynamoDB
    /// answers the SDK's retry of an attempt within 10 minutes as the first request (AWS,
    /// `TransactWriteItems`, "ClientRequestToken"). 4 write units (2 per item up to 1 KB). The
    /// natural key is not in it: its guard was put before the call ([`IdempotencyStore::guard`]).
    ///
    /// The cancellation reasons are read through the item each belongs to, whatever the items'
    /// order, and the record's refusal wins: the record's `ConditionalCheckFailed` is
    /// [`CommitOutcome::Refused`] with the old item from the reason (a consistent `GetItem` only
    /// if the reason has none; no record at all is [`StoreError::Corrupt`]), or
    /// [`CommitOutcome::Committed`] when that item is our own commit (committed by `owner` with
    /// `effect_id`: a retry that met its own write); then any `TransactionConflict` is retried after
    /// [`TRANSACTION_CONFLICT_BACKOFF_MS`](crate::TRANSACTION_CONFLICT_BACKOFF_MS) under a new token, then
    /// [`StoreError::TransactionConflict`]; throttling is [`StoreError::Throttled`]; the booking's
    /// refusal is [`StoreError::Corrupt`] (a booking outlived its record).
    ///
    /// `IdempotentParameterMismatchException` (this commit built again within 10 minutes of an
    /// earlier one under the same token) and an answer that never came are settled by one
    /// consistent `GetItem` ([`gate::store::settle_unknown_commit`]): our own commit is
    /// committed, a record still ours after a mismatch is sent once more under a new token, any
    /// other record is refused (mismatch) or the error stands (lost answer).
    ///
    /// The first transaction also requires that no other effect id is recorded
    /// (`attribute_not_exists(effect_ids) OR contains(effect_ids, :effect_id)`). When a holder that
    /// lost its lease recorded another one, that condition cancels it and a second transaction
    /// commits without it, followed by the `multi_effect` mark (an `UpdateItem`), so the
    /// distinct-effect signal counts the key: three requests, only in that case.
    async fn commit(
        &self,
        pk: &str,
        owner: &str,
        effect_id: &str,
        booking: &BusinessRow,
        now_ms: i64,
    ) -> Result<CommitOutcome, StoreError> {
        // What DynamoDB would drop or refuse is refused before any request (`store::limits`).
        gate::store::limits::check_row(booking, &self.columns).map_err(StoreError::Refused)?;
        self.commit_in_transaction(pk, owner, effect_id, booking, now_ms)
            .await
    }

    /// One conditional `PutItem` (`guard.rs`) of the natural-key item
    /// ([`gate::store::natural_key_pk`]: `pk`, `event_key`,
    /// `expires_at`, the key's labels) on condition `attribute_not_exists(pk) OR event_key =
    /// :event_key OR expires_at < :now_s` (epoch seconds), `ALL_OLD` on a failed condition: 1
    /// write unit (the item is under 1 KB), no index. A failed condition whose old item names
    /// our event key (a race with our own retry) is [`GuardOutcome::Held`]; another event key is
    /// [`GuardOutcome::Collision`]. Only when the old item is missing from the error does a
    /// consistent `GetItem` follow.
    async fn guard(
        &self,
        record: &IdempotencyRecord,
        natural_key: &NaturalKey,
        now_ms: i64,
    ) -> Result<GuardOutcome, StoreError> {
        self.put_guard(record, natural_key, now_ms).await
    }

    /// One conditional `UpdateItem` setting `lease_until = 0` (epoch ms) on condition
    /// `(status = in_flight OR route_pending) AND lease_owner = :owner`; a failed condition is
    /// `Ok(())`. A retry of a release that landed meets the same condition and writes the same.
    async fn release_lease(&self, pk: &str, owner: &str, now_ms: i64) -> Result<(), StoreError> {
        let request = self
            .client
            .update_item()
            .table_name(&self.idempotency_table)
            .key("pk", s(pk))
            .update_expression("SET lease_until = :zero, updated_at = :now_ms")
            .condition_expression(RELEASE_CONDITION)
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":in_flight", s(RecordStatus::InFlight.as_str()))
            .expression_attribute_values(":owner", s(owner))
            .expression_attribute_values(":zero", num(0))
            .expression_attribute_values(":now_ms", num(now_ms));
        let result = send_resending("release_lease (UpdateItem)", || request.clone().send()).await;
        match result {
            Ok(_) => Ok(()),
            Err(err) if is_update_condition_failure(&err) => Ok(()),
            Err(err) => Err(map_sdk_error("release_lease (UpdateItem)", err)),
        }
    }

    /// One conditional `UpdateItem` setting `lease_until = :until` (epoch ms) on condition
    /// `status = in_flight AND lease_owner = :owner` (the commit's fence) and a lease not
    /// released (`lease_until <> 0`); a failed condition is `Ok(false)`. 1 write unit on the table and 1 on `InFlight` (`lease_until` is projected);
    /// only when the lease left is short. A retry of an extension that landed meets the same
    /// condition (our token) and writes the same values: `Ok(true)`.
    async fn extend_lease(
        &self,
        pk: &str,
        owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let request = self
            .client
            .update_item()
            .table_name(&self.idempotency_table)
            .key("pk", s(pk))
            .update_expression("SET lease_until = :until, updated_at = :now_ms")
            .condition_expression(EXTEND_CONDITION)
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":in_flight", s(RecordStatus::InFlight.as_str()))
            .expression_attribute_values(":owner", s(owner))
            .expression_attribute_values(":released", num(0))
            .expression_attribute_values(":until", num(lease_until_ms))
            .expression_attribute_values(":now_ms", num(now_ms));
        let result = send_resending("extend_lease (UpdateItem)", || request.clone().send()).await;
        match result {
            Ok(_) => Ok(true),
            Err(err) if is_update_condition_failure(&err) => Ok(false),
            Err(err) => Err(map_sdk_error("extend_lease (UpdateItem)", err)),
        }
    }

    /// One conditional `UpdateItem` on `status = in_flight AND lease_owner = :owner` (and
    /// `attribute_not_exists(effect_ids)` for [`FinishGuard::LeaseAndNoEffect`]), `ALL_OLD` on a
    /// failed condition: sets `status`, `error`, `request` (the manual item) and
    /// `route_pending`, keeps the lease and `inflight_shard`. A failed condition whose old item
    /// is already finished by `owner` as `status` with its routing pending is the SDK's retry of
    /// a finish that landed: [`FinishOutcome::Finished`].
    async fn finish(
        &self,
        pk: &str,
        owner: &str,
        status: RecordStatus,
        error: &str,
        item: &[u8],
        guard: FinishGuard,
        now_ms: i64,
    ) -> Result<FinishOutcome, StoreError> {
        let condition = match guard {
            FinishGuard::Lease => HELD_CONDITION.to_string(),
            FinishGuard::LeaseAndNoEffect => {
                format!("{HELD_CONDITION} AND {NO_EFFECT_ID_RECORDED}")
            }
        };
        let request = self
            .client
            .update_item()
            .table_name(&self.idempotency_table)
            .key("pk", s(pk))
            .update_expression(
                "SET #status = :status, #error = :error, #request = :item, \
                 route_pending = :pending, updated_at = :now_ms",
            )
            .condition_expression(condition)
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
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        let result = send_resending("finish (UpdateItem)", || request.clone().send()).await;
        match result {
            Ok(_) => Ok(FinishOutcome::Finished),
            Err(err) if is_update_condition_failure(&err) => {
                let old = condition_failure_item(&err)
                    .map(record_from_item)
                    .transpose()?;
                Ok(match old {
                    Some(old)
                        if old.status == status
                            && old.route_pending
                            && old.lease_owner.as_deref() == Some(owner) =>
                    {
                        FinishOutcome::Finished
                    }
                    old => FinishOutcome::Refused(old.map(Box::new)),
                })
            }
            Err(err) => Err(map_sdk_error("finish (UpdateItem)", err)),
        }
    }

    /// One `TransactWriteItems`: the finish and the natural key's release (`release.rs`).
    async fn finish_without_effect(
        &self,
        record: &IdempotencyRecord,
        owner: &str,
        status: RecordStatus,
        error: &str,
        item: &[u8],
        natural_key: &NaturalKey,
        now_ms: i64,
    ) -> Result<FinishOutcome, StoreError> {
        self.finish_releasing(record, owner, status, error, item, natural_key, now_ms)
            .await
    }

    /// One conditional `UpdateItem` on `route_pending AND lease_owner = :owner`: removes
    /// `route_pending`, `request`, `lease_until` and `inflight_shard` (keeps `lease_owner` as the
    /// last holder). A failed condition is `Ok(false)`.
    async fn routed(&self, pk: &str, owner: &str, now_ms: i64) -> Result<bool, StoreError> {
        let request = self
            .client
            .update_item()
            .table_name(&self.idempotency_table)
            .key("pk", s(pk))
            .update_expression(
                "SET updated_at = :now_ms \
                 REMOVE route_pending, #request, lease_until, inflight_shard",
            )
            .condition_expression("attribute_exists(route_pending) AND lease_owner = :owner")
            .expression_attribute_names("#request", "request")
            .expression_attribute_values(":owner", s(owner))
            .expression_attribute_values(":now_ms", num(now_ms));
        let result = send_resending("routed (UpdateItem)", || request.clone().send()).await;
        match result {
            Ok(_) => Ok(true),
            Err(err) if is_update_condition_failure(&err) => Ok(false),
            Err(err) => Err(map_sdk_error("routed (UpdateItem)", err)),
        }
    }

    /// One `UpdateItem` (`ADD effect_ids`, `ReturnValues=ALL_NEW`); when the set then holds two
    /// or more ids, a second `UpdateItem` sets [`MULTI_EFFECT_ATTRIBUTE`](crate::MULTI_EFFECT_ATTRIBUTE) `= "1"` (the sparse GSI [`MULTI_EFFECT_INDEX`](crate::MULTI_EFFECT_INDEX)).
    /// A set that already holds [`gate::store::limits::MAX_EFFECT_IDS`] ids takes no new one
    /// (the condition returns the record as it is).
    /// This path runs only when the server returned another effect id than the committed one.
    async fn record_effect_id(
        &self,
        pk: &str,
        effect_id: &str,
        now_ms: i64,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let request = self
            .client
            .update_item()
            .table_name(&self.idempotency_table)
            .key("pk", s(pk))
            .update_expression("ADD effect_ids :effect_set SET updated_at = :now_ms")
            // The bound counts `effect_ids`; an item of the legacy layout holds `slot_ids`
            // besides, and an id in either set is already recorded.
            .condition_expression(
                "attribute_exists(pk) AND (attribute_not_exists(effect_ids) \
                 OR size(effect_ids) < :max_ids OR contains(effect_ids, :effect_id) \
                 OR contains(slot_ids, :effect_id))",
            )
            .expression_attribute_values(
                ":effect_set",
                AttributeValue::Ss(vec![effect_id.to_string()]),
            )
            .expression_attribute_values(":effect_id", s(effect_id))
            .expression_attribute_values(
                ":max_ids",
                num(gate::store::limits::MAX_EFFECT_IDS as i64),
            )
            .expression_attribute_values(":now_ms", num(now_ms))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            // ALL_NEW, not UPDATED_NEW: an ADD of an id already in the set changes nothing, and
            // then UPDATED_NEW may leave `effect_ids` out (moto does).
            .return_values(ReturnValue::AllNew);
        let result =
            send_resending("record_effect_id (UpdateItem)", || request.clone().send()).await;
        let out = match result {
            Ok(out) => out,
            // The set is full (MAX_EFFECT_IDS distinct ids): the record as it is, the id not added.
            Err(err) if is_update_condition_failure(&err) => {
                return condition_failure_item(&err)
                    .map(record_from_item)
                    .transpose()
            }
            Err(err) => return Err(map_sdk_error("record_effect_id (UpdateItem)", err)),
        };
        let Some(record) = out.attributes().map(record_from_item).transpose()? else {
            return Err(StoreError::Corrupt(
                format!("record_effect_id of {pk}: no attributes returned").into(),
            ));
        };
        if record.effect_ids.len() > 1 {
            self.mark_multi_effect(pk).await?;
        }
        Ok(Some(record))
    }

    /// One consistent `GetItem` on the idempotency table.
    async fn get(&self, pk: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.consistent_get(&self.idempotency_table, "pk", pk, "get (GetItem)")
            .await?
            .as_ref()
            .map(record_from_item)
            .transpose()
    }

    fn row_columns(&self) -> RowColumns {
        self.columns
    }
}
