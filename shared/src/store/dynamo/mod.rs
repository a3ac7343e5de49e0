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

mod codec;
mod errors;
mod index;
mod schema;

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeValue, Put, ReturnValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
    Update,
};
use aws_sdk_dynamodb::Client;

pub use codec::{
    booking_from_item, booking_to_item, record_from_item, record_to_item, RECORD_ATTRIBUTES,
};
use codec::{num, s};
pub use errors::TRANSACTION_CONFLICT_BACKOFF_MS;
use errors::{
    classify_cancellation, condition_failure_item, is_update_condition_failure, map_sdk_error,
    Cancelled,
};
pub use index::DynamoIndex;
pub use schema::{
    create_tables, INFLIGHT_INDEX, INFLIGHT_PROJECTED_ATTRIBUTES, MULTI_SLOT_INDEX,
    MULTI_SLOT_MARK, ROUTE_PENDING_MARK,
};
use schema::{HELD_CONDITION, RELEASE_CONDITION, RESERVE_CONDITION, TAKE_OVER_CONDITION};

use crate::clock::ms_to_s;
use crate::record::{BusinessRow, IdempotencyRecord, NaturalKey, RecordStatus};
use crate::store::{
    natural_key_pk, CommitOutcome, FinishGuard, FinishOutcome, IdempotencyStore, InFlightIndex,
    InFlightPage, Reservation, StoreError, TakeOver,
};

/// The idempotency table and the TMS bookings table on DynamoDB.
///
/// Build the [`Client`] once per cold start, with the SDK's retry configuration (throttling and
/// transient errors are retried there, not here).
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    idempotency_table: String,
    bookings_table: String,
    index: DynamoIndex,
}

impl DynamoStore {
    /// A store on `idempotency_table` (partition key `pk`, GSI `InFlight`, TTL `expires_at` in
    /// epoch seconds) and `bookings_table` (partition key `source_event`), through `client`.
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

    /// The read side of the same table: its `InFlight` and `MultiSlot` indexes.
    pub fn index(&self) -> &DynamoIndex {
        &self.index
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
        booking: &BusinessRow,
        now_ms: i64,
        only_our_slot: bool,
        natural_key: Option<&NaturalKey>,
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
        if let Some(key) = natural_key {
            // Signal 4: item 2, the natural-key item, held by the first event key committed for
            // this natural key (on the truck-slot path: this container and window).
            let mut item = HashMap::from([
                (
                    "pk".to_string(),
                    s(&natural_key_pk(pk, &booking.source_event, key)),
                ),
                ("event_key".to_string(), s(&booking.source_event)),
                ("expires_at".to_string(), num(key.expires_at_s)),
            ]);
            for (name, value) in &key.labels {
                item.entry(name.clone()).or_insert_with(|| s(value));
            }
            let natural_key = Put::builder()
                .table_name(&self.idempotency_table)
                .set_item(Some(item))
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
        booking: &BusinessRow,
        natural_key: Option<&NaturalKey>,
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
        crate::store::limits::check_commit(pk, booking, natural_key)
            .map_err(StoreError::Refused)?;
        let mut other_slots = false;
        let mut collision: Option<String> = None;
        let mut items =
            self.commit_items(pk, owner, slot_id, booking, now_ms, true, natural_key)?;
        let mut token = commit_request_token(pk, owner, slot_id);
        // A token names one request: each variant of the transaction has its own.
        let token_for = |other_slots: bool, with_nk: bool| {
            let owner = if other_slots {
                format!("{owner}+")
            } else {
                owner.to_string()
            };
            let slot = if with_nk {
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
                        let with_nk = collision.is_none();
                        items = self.commit_items(
                            pk,
                            owner,
                            slot_id,
                            booking,
                            now_ms,
                            false,
                            natural_key.filter(|_| with_nk),
                        )?;
                        token = token_for(other_slots, with_nk);
                        continue;
                    }
                    return Ok(CommitOutcome::Refused(Box::new(record)));
                }
                Cancelled::BookingExists(existing_slot) => {
                    return Err(StoreError::Corrupt(format!(
                        "a business row for {} already exists with effect id {}",
                        booking.source_event,
                        existing_slot.as_deref().unwrap_or("?")
                    )))
                }
                Cancelled::NaturalKeyTaken(item)
                    if collision.is_none() && natural_key.is_some() =>
                {
                    // Another event key holds the natural key: retry once without the item.
                    let other = match item.as_ref().and_then(|i| i.get("event_key")) {
                        Some(v) => v.as_s().ok().cloned(),
                        // Only on a collision, never per event.
                        None => match natural_key {
                            Some(key) => {
                                self.natural_key_holder(&natural_key_pk(
                                    pk,
                                    &booking.source_event,
                                    key,
                                ))
                                .await?
                            }
                            None => None,
                        },
                    };
                    collision = Some(other.unwrap_or_else(|| "unknown".to_string()));
                    items =
                        self.commit_items(pk, owner, slot_id, booking, now_ms, !other_slots, None)?;
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

    /// One consistent `GetItem` on the idempotency table.
    async fn get(&self, pk: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.consistent_get(&self.idempotency_table, "pk", pk, "get (GetItem)")
            .await?
            .as_ref()
            .map(record_from_item)
            .transpose()
    }

    /// One consistent `GetItem` on the bookings table.
    async fn booking(&self, source_event: &str) -> Result<Option<BusinessRow>, StoreError> {
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

/// The store reads its own indexes ([`DynamoIndex`] on the same client and table).
#[async_trait]
impl InFlightIndex for DynamoStore {
    async fn multi_slot_keys(&self) -> Result<usize, StoreError> {
        self.index.multi_slot_keys().await
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

/// The `ClientRequestToken` of the commit of `pk` by `owner` with `slot_id`: the first 32 hex
/// characters of SHA-256 over the three (the token may be 1 to 36 characters, AWS
/// `TransactWriteItems`). The same commit retried gets the same token, so DynamoDB answers the
/// retry as the first request for 10 minutes; another owner or slot gets another token.
pub fn commit_request_token(pk: &str, owner: &str, slot_id: &str) -> String {
    let mut digest = crate::keys::sha256_hex(format!("{pk}\n{owner}\n{slot_id}").as_bytes());
    digest.truncate(32);
    digest
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use aws_sdk_dynamodb::types::CancellationReason;

    use super::codec::{decode_cursor, encode_cursor};
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
            labels: crate::record::Labels::from([
                ("container".to_string(), "CSQU3054383".to_string()),
                ("terminal".to_string(), "ECT-DELTA".to_string()),
                (
                    "window_start".to_string(),
                    "2025-06-09T08:00:00Z".to_string(),
                ),
                ("window_end".to_string(), "2025-06-09T10:00:00Z".to_string()),
            ]),
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
