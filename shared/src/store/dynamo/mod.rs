//! `DynamoStore`: the [`IdempotencyStore`] on DynamoDB (feature `aws`).
//!
//! Two tables:
//!
//! * the idempotency table, partition key `pk` (S), with the sparse GSI `InFlight` (partition key
//!   `inflight_shard` (S), sort key `created_at` (N), projection `INCLUDE`
//!   [`INFLIGHT_PROJECTED_ATTRIBUTES`], never the claim request with its PIN) and TTL on
//!   `expires_at`;
//! * the TMS bookings table, partition key `source_event` (S).
//!
//! Units, never mixed: `expires_at` is **epoch seconds** (the TTL attribute, compared with
//! `ms_to_s(now_ms)` in the reserve condition); `lease_until`, `created_at`, `updated_at` and
//! `booked_at` are **epoch milliseconds**.
//!
//! Calls per operation: `reserve` is one `PutItem` (a conflict comes back in the same call through
//! `ReturnValuesOnConditionCheckFailure=ALL_OLD`; only if the service leaves the old item out of the
//! error does a consistent `GetItem` follow); `commit` is one `TransactWriteItems` (retried here
//! only on `TransactionConflict`); every other operation is one call.
//!
//! Retries of throttling and transient errors belong to the SDK's retry configuration where the
//! client is built (e.g. `RetryConfig::standard().with_max_attempts(..)`); this module retries
//! nothing by hand except a cancelled commit transaction whose reason is `TransactionConflict`.
//!
//! ## A write that landed and lost its answer
//!
//! The SDK retries a request whose answer did not arrive (a timeout, a dropped connection), and
//! the retry can meet the write it repeats. Every conditional write here recognises itself:
//!
//! * reserve (`PutItem`): the retry's failed condition returns our own item (same lease owner, a
//!   token unique per acquisition): reserved;
//! * take-over (`UpdateItem`): the old item returned on the failed condition already carries our
//!   lease: taken;
//! * commit (`TransactWriteItems`): an explicit `ClientRequestToken` ([`commit_request_token`])
//!   makes DynamoDB answer a retry within 10 minutes as the first request; where it does not (or
//!   after 10 minutes) the cancellation returns the record committed by us with our slot:
//!   committed;
//! * finish (`UpdateItem`): the old item is already finished by us with its routing pending;
//! * release, routed, the slot-id `ADD` and the `multi_slot` mark: a retry meets the same
//!   condition (release) or changes nothing (a set `ADD`, a `SET` of the same value, a confirmed
//!   routing whose second confirmation is refused and ignored).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, CancellationReason, GlobalSecondaryIndex,
    KeySchemaElement, KeyType, Projection, ProjectionType, Put, ReturnValue,
    ReturnValuesOnConditionCheckFailure, ScalarAttributeType, TimeToLiveSpecification,
    TimeToLiveStatus, TransactWriteItem, Update,
};
use aws_sdk_dynamodb::Client;
use serde::{Deserialize, Serialize};

use crate::clock::ms_to_s;
use crate::record::{IdempotencyRecord, RecordStatus, TmsBooking};
use crate::store::{
    natural_key_expires_at_s, natural_key_pk, CommitOutcome, FinishGuard, FinishOutcome,
    IdempotencyStore, InFlightEntry, InFlightPage, Reservation, StoreError, TakeOver,
    UnreadableEntry,
};

/// The name of the sparse GSI over `in_flight` records: partition key `inflight_shard`, sort key
/// `created_at` (epoch ms), projection `INCLUDE` [`INFLIGHT_PROJECTED_ATTRIBUTES`].
pub const INFLIGHT_INDEX: &str = "InFlight";

/// The non-key attributes the `InFlight` index projects (`ProjectionType: INCLUDE`; the keys `pk`,
/// `inflight_shard` and `created_at` come with every index item): what an [`InFlightEntry`] needs
/// and nothing more. Not `request` (the claim body with the release PIN), not the business fields:
/// the metrics function queries this index, and a role that may read the index reads everything it
/// projects. `template.yaml` lists the same names (a test compares them).
pub const INFLIGHT_PROJECTED_ATTRIBUTES: [&str; 5] = [
    "event_key",
    "status",
    "lease_owner",
    "lease_until",
    "expires_at",
];

/// The sparse GSI of records holding two or more distinct slot ids: partition key `multi_slot`
/// (present, `"1"`, only on such records), projection `KEYS_ONLY`.
pub const MULTI_SLOT_INDEX: &str = "MultiSlot";

/// The value of `multi_slot` on a marked record.
pub const MULTI_SLOT_MARK: &str = "1";

/// Sleeps in **milliseconds** before each retry of a commit transaction cancelled with
/// `TransactionConflict`: at most four attempts in all, then [`StoreError::TransactionConflict`].
pub const TRANSACTION_CONFLICT_BACKOFF_MS: [u64; 3] = [20, 40, 80];

/// Error codes (service error codes and `CancellationReason` codes) that mean throttling.
const THROTTLING_CODES: &[&str] = &[
    "ThrottlingException",
    "Throttling",
    "ThrottlingError",
    "ProvisionedThroughputExceededException",
    "ProvisionedThroughputExceeded",
    "RequestLimitExceeded",
];

/// The value of `route_pending` on a record whose routing to a person is not yet confirmed.
pub const ROUTE_PENDING_MARK: &str = "1";

/// Absent, or expired with nothing left to do: an expired `in_flight` record (or pending routing)
/// is a conflict, taken over with its history.
const RESERVE_CONDITION: &str = "attribute_not_exists(pk) OR (expires_at < :now_s \
     AND #status <> :in_flight AND attribute_not_exists(route_pending))";
/// Work left (`in_flight` or a pending routing), held by `:old_owner`, lease expired.
const TAKE_OVER_CONDITION: &str = "(#status = :in_flight OR attribute_exists(route_pending)) \
     AND lease_owner = :old_owner \
     AND (attribute_not_exists(lease_until) OR lease_until < :now_ms)";
/// Work left, held by `:owner` (the lease fence of a release).
const RELEASE_CONDITION: &str =
    "(#status = :in_flight OR attribute_exists(route_pending)) AND lease_owner = :owner";
/// `in_flight`, held by `:owner` (the lease fence of a commit and a finish).
const HELD_CONDITION: &str = "#status = :in_flight AND lease_owner = :owner";

/// The idempotency table and the TMS bookings table on DynamoDB.
///
/// Build the [`Client`] once per cold start, with the SDK's retry configuration (throttling and
/// transient errors are retried there, not here).
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    idempotency_table: String,
    bookings_table: String,
}

impl DynamoStore {
    /// A store on `idempotency_table` (partition key `pk`, GSI `InFlight`, TTL `expires_at` in
    /// epoch seconds) and `bookings_table` (partition key `source_event`), through `client`.
    pub fn new(
        client: Client,
        idempotency_table: impl Into<String>,
        bookings_table: impl Into<String>,
    ) -> Self {
        Self {
            client,
            idempotency_table: idempotency_table.into(),
            bookings_table: bookings_table.into(),
        }
    }

    /// The idempotency table's name.
    pub fn idempotency_table(&self) -> &str {
        &self.idempotency_table
    }

    /// The TMS bookings table's name.
    pub fn bookings_table(&self) -> &str {
        &self.bookings_table
    }

    /// The DynamoDB client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The commit transaction's items: the record's update (fenced by `owner`; with
    /// `only_our_slot`, also `attribute_not_exists(slot_ids) OR contains(slot_ids, :slot_id)`),
    /// the booking's put and, with `natural_key`, the natural-key item's put (signal 4).
    #[allow(clippy::too_many_arguments)]
    fn commit_items(
        &self,
        pk: &str,
        owner: &str,
        slot_id: &str,
        booking: &TmsBooking,
        now_ms: i64,
        only_our_slot: bool,
        natural_key: bool,
    ) -> Result<Vec<TransactWriteItem>, StoreError> {
        let condition = if only_our_slot {
            format!(
                "{HELD_CONDITION} AND (attribute_not_exists(slot_ids) OR contains(slot_ids, \
                 :slot_id))"
            )
        } else {
            HELD_CONDITION.to_string()
        };
        let update = Update::builder()
            .table_name(&self.idempotency_table)
            .key("pk", s(pk))
            .update_expression(
                "SET #status = :committed, slot_id = :slot_id, updated_at = :now_ms \
                 ADD slot_ids :slot_set \
                 REMOVE inflight_shard, lease_until, #request",
            )
            .condition_expression(condition)
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#request", "request")
            .expression_attribute_values(":committed", s(RecordStatus::Committed.as_str()))
            .expression_attribute_values(":in_flight", s(RecordStatus::InFlight.as_str()))
            .expression_attribute_values(":owner", s(owner))
            .expression_attribute_values(":slot_id", s(slot_id))
            .expression_attribute_values(":slot_set", AttributeValue::Ss(vec![slot_id.to_string()]))
            .expression_attribute_values(":now_ms", num(now_ms))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| StoreError::Unavailable(format!("commit of {pk}: {e}")))?;
        let put = Put::builder()
            .table_name(&self.bookings_table)
            .set_item(Some(booking_to_item(booking)))
            .condition_expression("attribute_not_exists(source_event)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| StoreError::Unavailable(format!("commit of {pk}: {e}")))?;
        let mut items = vec![
            TransactWriteItem::builder().update(update).build(),
            TransactWriteItem::builder().put(put).build(),
        ];
        if natural_key {
            // Signal 4: item 2, the natural-key item, held by the first event key committed for
            // this container and window.
            let natural_key = Put::builder()
                .table_name(&self.idempotency_table)
                .item("pk", s(&natural_key_pk(pk, booking)))
                .item("event_key", s(&booking.source_event))
                .item("container", s(&booking.container))
                .item("window_start", s(&booking.window_start))
                .item("expires_at", num(natural_key_expires_at_s(booking, now_ms)))
                .condition_expression("attribute_not_exists(pk) OR event_key = :event_key")
                .expression_attribute_values(":event_key", s(&booking.source_event))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .build()
                .map_err(|e| StoreError::Unavailable(format!("commit of {pk}: {e}")))?;
            items.push(TransactWriteItem::builder().put(natural_key).build());
        }
        Ok(items)
    }

    /// Marks `pk` as holding two or more distinct slot ids (`multi_slot = "1"`, the sparse GSI
    /// `MultiSlot`). Idempotent.
    async fn mark_multi_slot(&self, pk: &str) -> Result<(), StoreError> {
        self.client
            .update_item()
            .table_name(&self.idempotency_table)
            .key("pk", s(pk))
            .update_expression("SET multi_slot = :one")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_values(":one", s(MULTI_SLOT_MARK))
            .send()
            .await
            .map_err(|err| map_sdk_error("multi_slot mark (UpdateItem)", err))?;
        Ok(())
    }

    async fn put_reserve(
        &self,
        item: &HashMap<String, AttributeValue>,
        now_ms: i64,
    ) -> Result<Option<Option<IdempotencyRecord>>, StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.idempotency_table)
            .set_item(Some(item.clone()))
            .condition_expression(RESERVE_CONDITION)
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":in_flight", s(RecordStatus::InFlight.as_str()))
            .expression_attribute_values(":now_s", num(ms_to_s(now_ms)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
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
        let item = record_to_item(record);
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
        Err(StoreError::Unavailable(format!(
            "reserve of {}: the condition failed but the record is gone",
            record.pk
        )))
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
        let result = self
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
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(out) => match out.attributes() {
                Some(item) => Ok(TakeOver::Taken(Box::new(record_from_item(item)?))),
                None => Err(StoreError::Corrupt(format!(
                    "take-over of {pk}: no attributes returned"
                ))),
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

    /// One `TransactWriteItems`: the record's update (condition `status = in_flight AND
    /// lease_owner = :owner`, `ALL_OLD` on failure), the booking's put (condition
    /// `attribute_not_exists(source_event)`) and the natural-key item's put
    /// ([`natural_key_pk`]: `event_key`, `container`, `window_start`, `expires_at`; condition
    /// `attribute_not_exists(pk) OR event_key = :event_key`, `ALL_OLD` on failure), with a
    /// `ClientRequestToken` derived from the record,
    /// the owner and the slot ([`commit_request_token`]): DynamoDB treats a retry with the same
    /// token within 10 minutes as the same request and answers it as the first (AWS,
    /// `TransactWriteItems`, "ClientRequestToken"); our own `TransactionConflict` retries reuse it.
    ///
    /// The cancellation reasons are read item by item: the record's `ConditionalCheckFailed` is
    /// [`CommitOutcome::Refused`] with the old item from the reason (a consistent `GetItem`
    /// only if the reason has none; no record at all is [`StoreError::Corrupt`]), or
    /// [`CommitOutcome::Committed`] when that item is our own commit (committed by `owner` with
    /// `slot_id`: a retry that met its own write where the token did not answer it); the
    /// booking's alone is [`StoreError::Corrupt`] (a booking outlived its record); the natural-key
    /// item's alone is a collision: the transaction is retried once without that item, under its
    /// own token, and answers [`CommitOutcome::CommittedCollision`] with the event key from the
    /// cancellation's old item (a consistent `GetItem` of it only if the reason carries none);
    /// `TransactionConflict` is retried after [`TRANSACTION_CONFLICT_BACKOFF_MS`], then
    /// [`StoreError::TransactionConflict`]; throttling is [`StoreError::Throttled`].
    ///
    /// The first transaction also requires that no other slot id is recorded
    /// (`attribute_not_exists(slot_ids) OR contains(slot_ids, :slot_id)`). When a holder that
    /// lost its lease recorded another one, that condition cancels it and a second transaction
    /// commits without it, followed by the `multi_slot` mark (an `UpdateItem`), so the
    /// distinct-slot signal counts the key: three requests, only in that case.
    async fn commit(
        &self,
        pk: &str,
        owner: &str,
        slot_id: &str,
        booking: &TmsBooking,
        now_ms: i64,
    ) -> Result<CommitOutcome, StoreError> {
        // First with the condition that no other slot id is recorded: the common case, one
        // request. A record holding another slot id (recorded by a holder that lost its lease)
        // is committed by a second transaction without it, then marked `multi_slot`: a
        // transaction cannot count a set, and the distinct-slot signal must see the key.
        //
        // The natural-key item rides in the same transaction; when only its condition cancels
        // it (another event key committed this container and window), the transaction is
        // retried once without it and the collision is reported.
        let mut other_slots = false;
        let mut collision: Option<String> = None;
        let mut items = self.commit_items(pk, owner, slot_id, booking, now_ms, true, true)?;
        let mut token = commit_request_token(pk, owner, slot_id);
        // A token names one request: each variant of the transaction has its own.
        let token_for = |other_slots: bool, natural_key: bool| {
            let owner = if other_slots {
                format!("{owner}+")
            } else {
                owner.to_string()
            };
            let slot = if natural_key {
                slot_id.to_string()
            } else {
                format!("{slot_id}\nwithout-nk")
            };
            commit_request_token(pk, &owner, &slot)
        };
        let committed = |collision: &Option<String>| match collision {
            Some(other_event_key) => CommitOutcome::CommittedCollision {
                other_event_key: other_event_key.clone(),
            },
            None => CommitOutcome::Committed,
        };
        let own = |r: &IdempotencyRecord| {
            r.status == RecordStatus::Committed
                && r.lease_owner.as_deref() == Some(owner)
                && r.slot_id.as_deref() == Some(slot_id)
        };
        let mut backoff = TRANSACTION_CONFLICT_BACKOFF_MS.iter();
        loop {
            let result = self
                .client
                .transact_write_items()
                .set_transact_items(Some(items.clone()))
                .client_request_token(&token)
                .send()
                .await;
            let err = match result {
                Ok(_) if other_slots => {
                    self.mark_multi_slot(pk).await?;
                    return Ok(committed(&collision));
                }
                Ok(_) => return Ok(committed(&collision)),
                Err(err) => err,
            };
            let cancelled = match err.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(e)) => {
                    classify_cancellation(e.cancellation_reasons())
                }
                _ => return Err(map_sdk_error("commit (TransactWriteItems)", err)),
            };
            match cancelled {
                Cancelled::NotInFlight(item) => {
                    let record = match item {
                        Some(item) => record_from_item(&item)?,
                        None => match self.get(pk).await? {
                            Some(record) => record,
                            None => {
                                return Err(StoreError::Corrupt(format!(
                                    "no record {pk} to commit"
                                )))
                            }
                        },
                    };
                    if own(&record) {
                        return Ok(committed(&collision));
                    }
                    let ours = record.status == RecordStatus::InFlight
                        && record.lease_owner.as_deref() == Some(owner);
                    if ours && !other_slots && !record.slot_ids.contains(slot_id) {
                        other_slots = true;
                        let natural_key = collision.is_none();
                        items = self.commit_items(
                            pk,
                            owner,
                            slot_id,
                            booking,
                            now_ms,
                            false,
                            natural_key,
                        )?;
                        token = token_for(other_slots, natural_key);
                        continue;
                    }
                    return Ok(CommitOutcome::Refused(Box::new(record)));
                }
                Cancelled::BookingExists(existing_slot) => {
                    return Err(StoreError::Corrupt(format!(
                        "a TMS booking for {} already exists with slot {}",
                        booking.source_event,
                        existing_slot.as_deref().unwrap_or("?")
                    )))
                }
                Cancelled::NaturalKeyTaken(item) if collision.is_none() => {
                    // Another event key holds the natural key: retry once without the item.
                    let other = match item.as_ref().and_then(|i| i.get("event_key")) {
                        Some(v) => v.as_s().ok().cloned(),
                        // Only on a collision, never per event.
                        None => {
                            self.natural_key_holder(&natural_key_pk(pk, booking))
                                .await?
                        }
                    };
                    collision = Some(other.unwrap_or_else(|| "unknown".to_string()));
                    items = self.commit_items(
                        pk,
                        owner,
                        slot_id,
                        booking,
                        now_ms,
                        !other_slots,
                        false,
                    )?;
                    token = token_for(other_slots, false);
                }
                Cancelled::NaturalKeyTaken(_) => {
                    return Err(StoreError::Unavailable(format!(
                        "commit of {pk}: the natural-key condition failed on the retry without it"
                    )))
                }
                Cancelled::Conflict => match backoff.next() {
                    Some(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
                    None => {
                        return Err(StoreError::TransactionConflict(format!(
                            "commit of {pk}: TransactionConflict after {} attempts",
                            TRANSACTION_CONFLICT_BACKOFF_MS.len() + 1
                        )))
                    }
                },
                Cancelled::Throttled(codes) => {
                    return Err(StoreError::Throttled(format!("commit of {pk}: {codes}")))
                }
                Cancelled::Other(codes) => {
                    return Err(StoreError::Unavailable(format!(
                        "commit of {pk} cancelled: {codes}"
                    )))
                }
            }
        }
    }

    /// One conditional `UpdateItem` setting `lease_until = 0` (epoch ms) on condition
    /// `(status = in_flight OR route_pending) AND lease_owner = :owner`; a failed condition is
    /// `Ok(())`. A retry of a release that landed meets the same condition and writes the same.
    async fn release_lease(&self, pk: &str, owner: &str, now_ms: i64) -> Result<(), StoreError> {
        let result = self
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
            .expression_attribute_values(":now_ms", num(now_ms))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(err) if is_update_condition_failure(&err) => Ok(()),
            Err(err) => Err(map_sdk_error("release_lease (UpdateItem)", err)),
        }
    }

    /// One conditional `UpdateItem` on `status = in_flight AND lease_owner = :owner` (and
    /// `attribute_not_exists(slot_ids)` for [`FinishGuard::LeaseAndNoSlot`]), `ALL_OLD` on a
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
            FinishGuard::LeaseAndNoSlot => {
                format!("{HELD_CONDITION} AND attribute_not_exists(slot_ids)")
            }
        };
        let result = self
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
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
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

    /// One conditional `UpdateItem` on `route_pending AND lease_owner = :owner`: removes
    /// `route_pending`, `request`, `lease_until` and `inflight_shard` (keeps `lease_owner` as the
    /// last holder). A failed condition is `Ok(false)`.
    async fn routed(&self, pk: &str, owner: &str, now_ms: i64) -> Result<bool, StoreError> {
        let result = self
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
            .expression_attribute_values(":now_ms", num(now_ms))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(err) if is_update_condition_failure(&err) => Ok(false),
            Err(err) => Err(map_sdk_error("routed (UpdateItem)", err)),
        }
    }

    /// One `UpdateItem` (`ADD slot_ids`, `ReturnValues=ALL_NEW`); when the set then holds two
    /// or more ids, a second `UpdateItem` sets `multi_slot = "1"` (the sparse GSI `MultiSlot`).
    /// This path runs only when the terminal returned another slot id than the committed one.
    async fn record_slot_id(
        &self,
        pk: &str,
        slot_id: &str,
        now_ms: i64,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.idempotency_table)
            .key("pk", s(pk))
            .update_expression("ADD slot_ids :slot_set SET updated_at = :now_ms")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_values(":slot_set", AttributeValue::Ss(vec![slot_id.to_string()]))
            .expression_attribute_values(":now_ms", num(now_ms))
            // ALL_NEW, not UPDATED_NEW: an ADD of an id already in the set changes nothing, and
            // then UPDATED_NEW may leave `slot_ids` out (moto does).
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        let out = match result {
            Ok(out) => out,
            Err(err) if is_update_condition_failure(&err) => return Ok(None),
            Err(err) => return Err(map_sdk_error("record_slot_id (UpdateItem)", err)),
        };
        let Some(record) = out.attributes().map(record_from_item).transpose()? else {
            return Err(StoreError::Corrupt(format!(
                "record_slot_id of {pk}: no attributes returned"
            )));
        };
        if record.slot_ids.len() > 1 {
            self.mark_multi_slot(pk).await?;
        }
        Ok(Some(record))
    }

    /// `Query` of the sparse GSI `MultiSlot` (`multi_slot = "1"`, `Select=COUNT`), paginated.
    async fn multi_slot_keys(&self) -> Result<usize, StoreError> {
        let mut total = 0usize;
        let mut start = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.idempotency_table)
                .index_name(MULTI_SLOT_INDEX)
                .key_condition_expression("multi_slot = :one")
                .expression_attribute_values(":one", s(MULTI_SLOT_MARK))
                .select(aws_sdk_dynamodb::types::Select::Count)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|err| map_sdk_error("multi_slot_keys (Query)", err))?;
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
            .table_name(&self.idempotency_table)
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

    /// One consistent `GetItem` on the idempotency table.
    async fn get(&self, pk: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.consistent_get(&self.idempotency_table, "pk", pk, "get (GetItem)")
            .await?
            .as_ref()
            .map(record_from_item)
            .transpose()
    }

    /// One consistent `GetItem` on the bookings table.
    async fn booking(&self, source_event: &str) -> Result<Option<TmsBooking>, StoreError> {
        self.consistent_get(
            &self.bookings_table,
            "source_event",
            source_event,
            "booking (GetItem)",
        )
        .await?
        .as_ref()
        .map(booking_from_item)
        .transpose()
    }
}

impl DynamoStore {
    /// One consistent `GetItem` of the item whose key attribute `key` is `value` in `table`.
    async fn consistent_get(
        &self,
        table: &str,
        key: &str,
        value: &str,
        op: &str,
    ) -> Result<Option<HashMap<String, AttributeValue>>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(table)
            .key(key, s(value))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| map_sdk_error(op, e))?;
        Ok(out.item().cloned())
    }

    /// The event key a natural-key item holds (one consistent `GetItem`), `None` if it has none.
    async fn natural_key_holder(&self, nk_pk: &str) -> Result<Option<String>, StoreError> {
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

/// What a cancelled commit transaction means, from its `CancellationReasons` (item 0: the
/// record's update, item 1: the booking's put, item 2: the natural-key item's put).
enum Cancelled {
    NotInFlight(Option<HashMap<String, AttributeValue>>),
    BookingExists(Option<String>),
    NaturalKeyTaken(Option<HashMap<String, AttributeValue>>),
    Conflict,
    Throttled(String),
    Other(String),
}

fn classify_cancellation(reasons: &[CancellationReason]) -> Cancelled {
    let code = |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
    let codes = reasons
        .iter()
        .map(|r| r.code().unwrap_or("None"))
        .collect::<Vec<_>>()
        .join(", ");
    if code(0) == "ConditionalCheckFailed" {
        return Cancelled::NotInFlight(reasons.first().and_then(|r| r.item()).cloned());
    }
    if reasons
        .iter()
        .any(|r| r.code() == Some("TransactionConflict"))
    {
        return Cancelled::Conflict;
    }
    if reasons
        .iter()
        .any(|r| r.code().is_some_and(|c| THROTTLING_CODES.contains(&c)))
    {
        return Cancelled::Throttled(codes);
    }
    if code(1) == "ConditionalCheckFailed" {
        let slot = reasons
            .get(1)
            .and_then(|r| r.item())
            .and_then(|item| item.get("slot_id"))
            .and_then(|v| v.as_s().ok())
            .cloned();
        return Cancelled::BookingExists(slot);
    }
    if code(2) == "ConditionalCheckFailed" {
        return Cancelled::NaturalKeyTaken(reasons.get(2).and_then(|r| r.item()).cloned());
    }
    Cancelled::Other(format!("[{codes}]"))
}

/// The old item a failed `UpdateItem` condition returned (`ReturnValuesOnConditionCheckFailure
/// = ALL_OLD`), if any.
fn condition_failure_item<R>(
    err: &SdkError<UpdateItemError, R>,
) -> Option<&HashMap<String, AttributeValue>> {
    match err.as_service_error() {
        Some(UpdateItemError::ConditionalCheckFailedException(e)) => e.item(),
        _ => None,
    }
}

/// The `ClientRequestToken` of the commit of `pk` by `owner` with `slot_id`: the first 32 hex
/// characters of SHA-256 over the three (the token may be 1 to 36 characters, AWS
/// `TransactWriteItems`). The same commit retried gets the same token, so DynamoDB answers the
/// retry as the first request for 10 minutes; another owner or slot gets another token.
pub fn commit_request_token(pk: &str, owner: &str, slot_id: &str) -> String {
    let mut digest = crate::keys::sha256_hex(format!("{pk}\n{owner}\n{slot_id}").as_bytes());
    digest.truncate(32);
    digest
}

fn is_update_condition_failure<R>(err: &SdkError<UpdateItemError, R>) -> bool {
    matches!(
        err.as_service_error(),
        Some(UpdateItemError::ConditionalCheckFailedException(_))
    )
}

/// Maps an SDK error (after the SDK's own retries) to a [`StoreError`]: throttling codes to
/// `Throttled`, `TransactionConflictException` to `TransactionConflict`, everything else
/// (service, dispatch, timeout, response errors) to `Unavailable`.
fn map_sdk_error<E, R>(op: &str, err: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let code = err.code().map(str::to_string);
    let detail = format!("{op}: {}", DisplayErrorContext(&err));
    match code.as_deref() {
        Some(c) if THROTTLING_CODES.contains(&c) => StoreError::Throttled(detail),
        Some("TransactionConflictException") => StoreError::TransactionConflict(detail),
        _ => StoreError::Unavailable(detail),
    }
}

/// The `ExclusiveStartKey` of the `InFlight` GSI (table key + index key), as the opaque cursor.
#[derive(Serialize, Deserialize)]
struct Cursor {
    pk: String,
    inflight_shard: String,
    /// Epoch ms, as DynamoDB's number string.
    created_at: String,
}

fn encode_cursor(key: &HashMap<String, AttributeValue>) -> Result<String, StoreError> {
    let cursor = Cursor {
        pk: req_s(key, "pk")?,
        inflight_shard: req_s(key, "inflight_shard")?,
        created_at: req_n(key, "created_at")?.to_string(),
    };
    serde_json::to_string(&cursor).map_err(|e| StoreError::Corrupt(format!("cursor: {e}")))
}

fn decode_cursor(cursor: &str) -> Result<HashMap<String, AttributeValue>, StoreError> {
    let c: Cursor = serde_json::from_str(cursor)
        .map_err(|e| StoreError::Corrupt(format!("invalid stale_in_flight cursor: {e}")))?;
    Ok(HashMap::from([
        ("pk".to_string(), s(&c.pk)),
        ("inflight_shard".to_string(), s(&c.inflight_shard)),
        ("created_at".to_string(), AttributeValue::N(c.created_at)),
    ]))
}

/// An idempotency record as a DynamoDB item. Optional fields that are `None` (and an empty
/// `slot_ids`: DynamoDB has no empty sets) are left out. `expires_at` is epoch **seconds**;
/// `lease_until`, `created_at`, `updated_at` are epoch **milliseconds**; `request` is binary.
pub fn record_to_item(record: &IdempotencyRecord) -> HashMap<String, AttributeValue> {
    let mut item = HashMap::from([
        ("pk".to_string(), s(&record.pk)),
        ("event_key".to_string(), s(&record.event_key)),
        ("status".to_string(), s(record.status.as_str())),
        ("fingerprint".to_string(), s(&record.fingerprint)),
        ("op_key".to_string(), s(&record.op_key)),
        ("created_at".to_string(), num(record.created_at_ms)),
        ("updated_at".to_string(), num(record.updated_at_ms)),
        ("expires_at".to_string(), num(record.expires_at_s)),
        ("container".to_string(), s(&record.container)),
        ("terminal".to_string(), s(&record.terminal)),
        ("window_start".to_string(), s(&record.window_start)),
        ("window_end".to_string(), s(&record.window_end)),
    ]);
    let optional = [
        ("lease_owner", record.lease_owner.as_deref().map(s)),
        ("lease_until", record.lease_until_ms.map(num)),
        ("slot_id", record.slot_id.as_deref().map(s)),
        ("inflight_shard", record.inflight_shard.as_deref().map(s)),
        ("error", record.error.as_deref().map(s)),
        (
            "request",
            (!record.request.is_empty())
                .then(|| AttributeValue::B(Blob::new(record.request.clone()))),
        ),
        (
            "route_pending",
            record.route_pending.then(|| s(ROUTE_PENDING_MARK)),
        ),
        (
            "slot_ids",
            (!record.slot_ids.is_empty())
                .then(|| AttributeValue::Ss(record.slot_ids.iter().cloned().collect())),
        ),
    ];
    for (name, value) in optional {
        if let Some(value) = value {
            item.insert(name.to_string(), value);
        }
    }
    item
}

/// Reads an idempotency record from a DynamoDB item (the inverse of [`record_to_item`]).
///
/// # Errors
/// [`StoreError::Corrupt`] when a required attribute is missing, an attribute has the wrong type,
/// a number is not an `i64`, or `status` is not one of `in_flight|committed|failed|manual`.
pub fn record_from_item(
    item: &HashMap<String, AttributeValue>,
) -> Result<IdempotencyRecord, StoreError> {
    let pk = req_s(item, "pk")?;
    let status_raw = req_s(item, "status")?;
    let status = RecordStatus::parse(&status_raw)
        .ok_or_else(|| StoreError::Corrupt(format!("{pk}: unknown status {status_raw:?}")))?;
    let request = match item.get("request") {
        Some(AttributeValue::B(blob)) => blob.as_ref().to_vec(),
        Some(_) => return Err(corrupt_type(item, "request", "B")),
        // Removed once the record leaves `in_flight` (data minimisation: it holds the PIN).
        None => Vec::new(),
    };
    let slot_ids = match item.get("slot_ids") {
        Some(AttributeValue::Ss(ids)) => ids.iter().cloned().collect(),
        Some(_) => return Err(corrupt_type(item, "slot_ids", "SS")),
        None => BTreeSet::new(),
    };
    Ok(IdempotencyRecord {
        event_key: req_s(item, "event_key")?,
        status,
        fingerprint: req_s(item, "fingerprint")?,
        request,
        op_key: req_s(item, "op_key")?,
        lease_owner: opt_s(item, "lease_owner")?,
        lease_until_ms: opt_n(item, "lease_until")?,
        created_at_ms: req_n(item, "created_at")?,
        updated_at_ms: req_n(item, "updated_at")?,
        expires_at_s: req_n(item, "expires_at")?,
        slot_id: opt_s(item, "slot_id")?,
        slot_ids,
        inflight_shard: opt_s(item, "inflight_shard")?,
        error: opt_s(item, "error")?,
        route_pending: match item.get("route_pending") {
            None => false,
            Some(AttributeValue::S(_)) => true,
            Some(_) => return Err(corrupt_type(item, "route_pending", "S")),
        },
        container: req_s(item, "container")?,
        terminal: req_s(item, "terminal")?,
        window_start: req_s(item, "window_start")?,
        window_end: req_s(item, "window_end")?,
        pk,
    })
}

/// An item of the `InFlight` index (its keys plus [`INFLIGHT_PROJECTED_ATTRIBUTES`]) as an
/// [`InFlightEntry`]. A full table item reads as well.
///
/// # Errors
/// [`StoreError::Corrupt`] when an attribute is missing or of the wrong type.
fn in_flight_entry_from_item(
    item: &HashMap<String, AttributeValue>,
) -> Result<InFlightEntry, StoreError> {
    let pk = req_s(item, "pk")?;
    let status_raw = req_s(item, "status")?;
    let status = RecordStatus::parse(&status_raw)
        .ok_or_else(|| StoreError::Corrupt(format!("{pk}: unknown status {status_raw:?}")))?;
    Ok(InFlightEntry {
        event_key: req_s(item, "event_key")?,
        status,
        lease_owner: opt_s(item, "lease_owner")?,
        lease_until_ms: opt_n(item, "lease_until")?,
        created_at_ms: req_n(item, "created_at")?,
        expires_at_s: req_n(item, "expires_at")?,
        pk,
    })
}

/// A TMS booking as a DynamoDB item; `booked_at` is epoch **milliseconds**.
pub fn booking_to_item(booking: &TmsBooking) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("source_event".to_string(), s(&booking.source_event)),
        ("container".to_string(), s(&booking.container)),
        ("slot_id".to_string(), s(&booking.slot_id)),
        ("terminal".to_string(), s(&booking.terminal)),
        ("window_start".to_string(), s(&booking.window_start)),
        ("window_end".to_string(), s(&booking.window_end)),
        ("booked_at".to_string(), num(booking.booked_at_ms)),
    ])
}

/// Reads a TMS booking from a DynamoDB item (the inverse of [`booking_to_item`]).
///
/// # Errors
/// [`StoreError::Corrupt`] when an attribute is missing or has the wrong type.
pub fn booking_from_item(item: &HashMap<String, AttributeValue>) -> Result<TmsBooking, StoreError> {
    Ok(TmsBooking {
        source_event: req_s(item, "source_event")?,
        container: req_s(item, "container")?,
        slot_id: req_s(item, "slot_id")?,
        terminal: req_s(item, "terminal")?,
        window_start: req_s(item, "window_start")?,
        window_end: req_s(item, "window_end")?,
        booked_at_ms: req_n(item, "booked_at")?,
    })
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_string())
}

fn num(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn item_name(item: &HashMap<String, AttributeValue>) -> String {
    ["pk", "source_event"]
        .iter()
        .find_map(|k| item.get(*k).and_then(|v| v.as_s().ok()).cloned())
        .unwrap_or_else(|| "item".to_string())
}

fn missing(item: &HashMap<String, AttributeValue>, name: &str) -> StoreError {
    StoreError::Corrupt(format!("{}: attribute {name} missing", item_name(item)))
}

fn corrupt_type(item: &HashMap<String, AttributeValue>, name: &str, want: &str) -> StoreError {
    StoreError::Corrupt(format!(
        "{}: attribute {name} is not of type {want}",
        item_name(item)
    ))
}

fn opt_s(item: &HashMap<String, AttributeValue>, name: &str) -> Result<Option<String>, StoreError> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::S(v)) => Ok(Some(v.clone())),
        Some(_) => Err(corrupt_type(item, name, "S")),
    }
}

fn req_s(item: &HashMap<String, AttributeValue>, name: &str) -> Result<String, StoreError> {
    opt_s(item, name)?.ok_or_else(|| missing(item, name))
}

fn opt_n(item: &HashMap<String, AttributeValue>, name: &str) -> Result<Option<i64>, StoreError> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::N(v)) => v.parse::<i64>().map(Some).map_err(|_| {
            StoreError::Corrupt(format!(
                "{}: attribute {name} = {v:?} is not an integer",
                item_name(item)
            ))
        }),
        Some(_) => Err(corrupt_type(item, name, "N")),
    }
}

fn req_n(item: &HashMap<String, AttributeValue>, name: &str) -> Result<i64, StoreError> {
    opt_n(item, name)?.ok_or_else(|| missing(item, name))
}

/// Creates the two tables as `template.yaml` defines them, for tests and local runs:
/// `idempotency_table` (partition key `pk` S, GSI `InFlight` on `inflight_shard` S /
/// `created_at` N with projection `INCLUDE` [`INFLIGHT_PROJECTED_ATTRIBUTES`]; GSI `MultiSlot` on
/// `multi_slot` S, `KEYS_ONLY`; TTL on `expires_at` in epoch seconds) and
/// `bookings_table` (partition key `source_event` S), both PAY_PER_REQUEST. Tables that already
/// exist are kept; TTL is enabled if it is not.
///
/// # Errors
/// [`StoreError::Unavailable`] (or `Throttled`) when a call fails.
pub async fn create_tables(
    client: &Client,
    idempotency_table: &str,
    bookings_table: &str,
) -> Result<(), StoreError> {
    let build = |e: aws_sdk_dynamodb::error::BuildError| StoreError::Unavailable(e.to_string());
    let attr = |name: &str, t: ScalarAttributeType| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(t)
            .build()
            .map_err(build)
    };
    let key = |name: &str, t: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(t)
            .build()
            .map_err(build)
    };
    let gsi = GlobalSecondaryIndex::builder()
        .index_name(INFLIGHT_INDEX)
        .key_schema(key("inflight_shard", KeyType::Hash)?)
        .key_schema(key("created_at", KeyType::Range)?)
        .projection(
            Projection::builder()
                .projection_type(ProjectionType::Include)
                .set_non_key_attributes(Some(
                    INFLIGHT_PROJECTED_ATTRIBUTES
                        .iter()
                        .map(|a| (*a).to_owned())
                        .collect(),
                ))
                .build(),
        )
        .build()
        .map_err(build)?;
    let multi_slot = GlobalSecondaryIndex::builder()
        .index_name(MULTI_SLOT_INDEX)
        .key_schema(key("multi_slot", KeyType::Hash)?)
        .projection(
            Projection::builder()
                .projection_type(ProjectionType::KeysOnly)
                .build(),
        )
        .build()
        .map_err(build)?;
    let created = client
        .create_table()
        .table_name(idempotency_table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attr("pk", ScalarAttributeType::S)?)
        .attribute_definitions(attr("inflight_shard", ScalarAttributeType::S)?)
        .attribute_definitions(attr("created_at", ScalarAttributeType::N)?)
        .attribute_definitions(attr("multi_slot", ScalarAttributeType::S)?)
        .key_schema(key("pk", KeyType::Hash)?)
        .global_secondary_indexes(gsi)
        .global_secondary_indexes(multi_slot)
        .send()
        .await;
    ignore_existing(created, "create_tables (idempotency)")?;
    let created = client
        .create_table()
        .table_name(bookings_table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attr("source_event", ScalarAttributeType::S)?)
        .key_schema(key("source_event", KeyType::Hash)?)
        .send()
        .await;
    ignore_existing(created, "create_tables (bookings)")?;

    use aws_sdk_dynamodb::client::Waiters;
    for table in [idempotency_table, bookings_table] {
        client
            .wait_until_table_exists()
            .table_name(table)
            .wait(Duration::from_secs(300))
            .await
            .map_err(|e| {
                StoreError::Unavailable(format!(
                    "table {table} not active: {}",
                    DisplayErrorContext(&e)
                ))
            })?;
    }

    let ttl = client
        .describe_time_to_live()
        .table_name(idempotency_table)
        .send()
        .await
        .map_err(|e| map_sdk_error("create_tables (DescribeTimeToLive)", e))?;
    let enabled = ttl
        .time_to_live_description()
        .and_then(|d| d.time_to_live_status())
        .is_some_and(|s| matches!(s, TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling));
    if !enabled {
        client
            .update_time_to_live()
            .table_name(idempotency_table)
            .time_to_live_specification(
                TimeToLiveSpecification::builder()
                    .attribute_name("expires_at")
                    .enabled(true)
                    .build()
                    .map_err(build)?,
            )
            .send()
            .await
            .map_err(|e| map_sdk_error("create_tables (UpdateTimeToLive)", e))?;
    }
    Ok(())
}

fn ignore_existing<T, E, R>(result: Result<T, SdkError<E, R>>, op: &str) -> Result<(), StoreError>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match result {
        Ok(_) => Ok(()),
        Err(err) if err.code() == Some("ResourceInUseException") => Ok(()),
        Err(err) => Err(map_sdk_error(op, err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> IdempotencyRecord {
        IdempotencyRecord {
            pk: "ect#ab".into(),
            event_key: "ab".into(),
            status: RecordStatus::InFlight,
            fingerprint: "f".into(),
            request: b"{\"pin\":\"4711\"}".to_vec(),
            op_key: "op".into(),
            lease_owner: Some("req-1".into()),
            lease_until_ms: Some(1_749_441_630_000),
            created_at_ms: 1_749_441_600_000,
            updated_at_ms: 1_749_441_600_000,
            expires_at_s: 1_750_651_200,
            slot_id: None,
            slot_ids: BTreeSet::new(),
            inflight_shard: Some("11".into()),
            error: None,
            route_pending: false,
            container: "CSQU3054383".into(),
            terminal: "ECT-DELTA".into(),
            window_start: "2025-06-09T08:00:00Z".into(),
            window_end: "2025-06-09T10:00:00Z".into(),
        }
    }

    #[test]
    fn record_round_trips_with_units() {
        let r = record();
        let item = record_to_item(&r);
        assert_eq!(item["expires_at"], AttributeValue::N("1750651200".into()));
        assert_eq!(
            item["lease_until"],
            AttributeValue::N("1749441630000".into())
        );
        assert!(matches!(item["request"], AttributeValue::B(_)));
        assert!(!item.contains_key("slot_ids"));
        assert!(!item.contains_key("error"));
        assert_eq!(record_from_item(&item).unwrap(), r);

        let mut full = r;
        full.status = RecordStatus::Committed;
        full.slot_id = Some("S1".into());
        full.slot_ids = ["S1".to_string(), "S2".to_string()].into();
        full.error = Some("e".into());
        full.lease_owner = None;
        full.lease_until_ms = None;
        full.inflight_shard = None;
        let item = record_to_item(&full);
        assert!(matches!(&item["slot_ids"], AttributeValue::Ss(v) if v.len() == 2));
        assert_eq!(record_from_item(&item).unwrap(), full);
    }

    #[test]
    fn unreadable_items_are_corrupt() {
        let mut item = record_to_item(&record());
        item.insert("status".into(), s("pending"));
        assert!(matches!(
            record_from_item(&item),
            Err(StoreError::Corrupt(_))
        ));
        let mut item = record_to_item(&record());
        item.insert("created_at".into(), s("yesterday"));
        assert!(matches!(
            record_from_item(&item),
            Err(StoreError::Corrupt(_))
        ));
        let mut item = record_to_item(&record());
        item.remove("fingerprint");
        assert!(matches!(
            record_from_item(&item),
            Err(StoreError::Corrupt(_))
        ));
    }

    #[test]
    fn cursor_round_trips() {
        let key = HashMap::from([
            ("pk".to_string(), s("ect#ab")),
            ("inflight_shard".to_string(), s("07")),
            ("created_at".to_string(), num(42)),
        ]);
        let c = encode_cursor(&key).unwrap();
        assert_eq!(decode_cursor(&c).unwrap(), key);
        assert!(matches!(decode_cursor("nope"), Err(StoreError::Corrupt(_))));
    }

    #[test]
    fn cancellation_reasons_are_read_item_by_item() {
        let reason = |code: &str| CancellationReason::builder().code(code).build();
        let ccf_record = CancellationReason::builder()
            .code("ConditionalCheckFailed")
            .item("pk", s("x"))
            .build();
        assert!(matches!(
            classify_cancellation(&[ccf_record, reason("None")]),
            Cancelled::NotInFlight(Some(_))
        ));
        assert!(matches!(
            classify_cancellation(&[
                reason("ConditionalCheckFailed"),
                reason("ConditionalCheckFailed")
            ]),
            Cancelled::NotInFlight(None)
        ));
        assert!(matches!(
            classify_cancellation(&[reason("None"), reason("ConditionalCheckFailed")]),
            Cancelled::BookingExists(None)
        ));
        assert!(matches!(
            classify_cancellation(&[reason("TransactionConflict"), reason("None")]),
            Cancelled::Conflict
        ));
        assert!(matches!(
            classify_cancellation(&[reason("None"), reason("ThrottlingError")]),
            Cancelled::Throttled(_)
        ));
        assert!(matches!(
            classify_cancellation(&[reason("ValidationError"), reason("None")]),
            Cancelled::Other(_)
        ));
    }
}
