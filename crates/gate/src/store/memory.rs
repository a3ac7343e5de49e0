//! `MemoryStore`: an in-memory [`IdempotencyStore`] and [`InFlightIndex`] that behaves as the DynamoDB one does, for the
//! embedded default, tests and deterministic simulation. The same conformance suite runs against
//! both. It refuses what DynamoDB refuses ([`crate::store::limits`]): a label named like a store
//! attribute, and a write that would make an item larger than DynamoDB's item limit.
//!
//! Its audit histories are in `audit`, the operator's scans ([`crate::store::RecordScan`]) in
//! `scan`. Its index reads ([`InFlightIndex`]) are answered from indexes kept on every write, as
//! DynamoDB keeps its sparse GSIs (`index`), so they cost O(answer), not O(table).

mod audit;
mod index;
mod scan;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;

use crate::record::{BusinessRow, IdempotencyRecord, NaturalKey, RecordStatus, RowColumns};
use crate::store::limits::{self, ItemRefusal};
use crate::store::{
    BusinessRows, CommitOutcome, FinishGuard, FinishOutcome, GuardOutcome, IdempotencyStore,
    InFlightIndex, InFlightPage, Reservation, StoreError, TakeOver,
};

#[derive(Default)]
struct Tables {
    records: BTreeMap<String, IdempotencyRecord>,
    bookings: HashMap<String, BusinessRow>,
    /// Natural-key items (the guards): [`natural_key_pk`] to the event key that holds it and
    /// the item's TTL, epoch seconds.
    natural_keys: HashMap<String, (String, i64)>,
    /// `InFlight` and the multi-effect index (`store::dynamo::MULTI_EFFECT_INDEX`), as the records are now ([`Tables::reindex`] after each write).
    index: index::Indexes,
}

impl Tables {
    /// Brings the indexes up to date with record `pk` after a write of it. Every write of a
    /// record calls it (a property test compares the indexes with a full scan).
    fn reindex(&mut self, pk: &str) {
        self.index.reindex(pk, self.records.get(pk));
    }
}

/// An in-memory idempotency table and business table. Every method is atomic (one lock), as
/// DynamoDB's conditional writes and transactions are. Expired records stay stored (like
/// DynamoDB, whose TTL deletes lazily) and count as absent for `reserve` once they have no work
/// left (an expired `in_flight` record is a conflict, taken over with its history).
#[derive(Default)]
pub struct MemoryStore {
    tables: Mutex<Tables>,
    calls: AtomicU64,
    /// Each record's audit history (`crate::store::audit::AuditLog`).
    pub(crate) audit: audit::AuditTable,
    /// The business row's column names, refused as label names as DynamoDB's layout needs.
    columns: RowColumns,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("calls", &self.calls)
            .finish_non_exhaustive()
    }
}

impl MemoryStore {
    /// An empty store, the business row's columns named [`RowColumns::NEUTRAL`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The same store with the business row's columns named `columns` (the integration's,
    /// [`crate::integration::Integration::row_columns`]): a row label named like one of them is
    /// refused, as the DynamoDB store built with the same names refuses it.
    pub fn with_row_columns(mut self, columns: RowColumns) -> Self {
        self.columns = columns;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every record, ordered by `pk`.
    pub fn records(&self) -> Vec<IdempotencyRecord> {
        self.lock().records.values().cloned().collect()
    }

    /// Whether a record `pk` is stored (expired or not), without copying the table.
    pub(crate) fn has_record(&self, pk: &str) -> bool {
        self.lock().records.contains_key(pk)
    }

    /// Every business row, in no particular order.
    pub fn business_rows(&self) -> Vec<BusinessRow> {
        self.lock().bookings.values().cloned().collect()
    }

    /// How many store operations ran (each one DynamoDB call in the real store), including these
    /// inspection calls.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Overwrites a record as is, with no condition: for tests that need a particular state
    /// (e.g. an expired record, a stranded lease).
    pub fn put_raw(&self, record: IdempotencyRecord) {
        let mut t = self.lock();
        let pk = record.pk.clone();
        t.records.insert(pk.clone(), record);
        t.reindex(&pk);
    }
}

fn refused(refusal: ItemRefusal) -> StoreError {
    StoreError::Refused(refusal)
}

/// What DynamoDB refuses of an update: the record as it would be after it over the item limit.
fn fits(record: &IdempotencyRecord) -> Result<(), StoreError> {
    let bytes = limits::record_item_bytes(record);
    if bytes > limits::MAX_ITEM_BYTES {
        return Err(refused(ItemRefusal::TooLarge {
            bytes,
            limit: limits::MAX_ITEM_BYTES,
        }));
    }
    Ok(())
}

/// [`IdempotencyStore::finish`] under the store's lock, and whether it wrote (`false` for a
/// refusal, and for the retry of a finish that landed).
#[allow(clippy::too_many_arguments)]
fn finish_locked(
    t: &mut Tables,
    pk: &str,
    owner: &str,
    status: RecordStatus,
    error: &str,
    item: &[u8],
    guard: FinishGuard,
    now_ms: i64,
) -> Result<(FinishOutcome, bool), StoreError> {
    let Some(r) = t.records.get_mut(pk) else {
        return Ok((FinishOutcome::Refused(None), false));
    };
    let held = r.status == RecordStatus::InFlight && r.lease_owner.as_deref() == Some(owner);
    let guarded = match guard {
        FinishGuard::Lease => true,
        FinishGuard::LeaseAndNoEffect => r.effect_ids.is_empty(),
    };
    if !(held && guarded) {
        if r.status == status && r.route_pending && r.lease_owner.as_deref() == Some(owner) {
            return Ok((FinishOutcome::Finished, false));
        }
        return Ok((FinishOutcome::Refused(Some(Box::new(r.clone()))), false));
    }
    let mut after = r.clone();
    after.status = status;
    after.error = Some(error.to_string());
    after.request = item.to_vec();
    after.route_pending = true;
    after.updated_at_ms = now_ms;
    fits(&after)?;
    *r = after;
    t.reindex(pk);
    Ok((FinishOutcome::Finished, true))
}

#[async_trait]
impl IdempotencyStore for MemoryStore {
    async fn reserve(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> Result<Reservation, StoreError> {
        limits::check_record(record).map_err(refused)?;
        let mut t = self.lock();
        match t.records.get(&record.pk) {
            Some(existing) if existing.is_same_reservation(record) => Ok(Reservation::Reserved),
            Some(existing) if !existing.is_expired(now_ms) || existing.has_work() => {
                Ok(Reservation::Conflict(Box::new(existing.clone())))
            }
            _ => {
                t.records.insert(record.pk.clone(), record.clone());
                t.reindex(&record.pk);
                // A new item, as DynamoDB's PutItem writes it: without the old one's history.
                self.audit
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&record.pk);
                Ok(Reservation::Reserved)
            }
        }
    }

    async fn take_over(
        &self,
        pk: &str,
        old_owner: &str,
        new_owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<TakeOver, StoreError> {
        let mut t = self.lock();
        let Some(r) = t.records.get_mut(pk) else {
            return Ok(TakeOver::Refused);
        };
        if r.has_work()
            && r.lease_owner.as_deref() == Some(new_owner)
            && r.lease_until_ms == Some(lease_until_ms)
        {
            return Ok(TakeOver::Taken(Box::new(r.clone())));
        }
        let expired_lease = r.lease_until_ms.is_none_or(|until| until < now_ms);
        if !r.has_work() || r.lease_owner.as_deref() != Some(old_owner) || !expired_lease {
            return Ok(TakeOver::Refused);
        }
        r.lease_owner = Some(new_owner.to_string());
        r.lease_until_ms = Some(lease_until_ms);
        r.updated_at_ms = now_ms;
        let taken = TakeOver::Taken(Box::new(r.clone()));
        t.reindex(pk);
        Ok(taken)
    }

    async fn commit(
        &self,
        pk: &str,
        owner: &str,
        effect_id: &str,
        booking: &BusinessRow,
        now_ms: i64,
    ) -> Result<CommitOutcome, StoreError> {
        limits::check_row(booking, &self.columns).map_err(refused)?;
        let mut t = self.lock();
        let Some(r) = t.records.get(pk) else {
            return Err(StoreError::Corrupt(
                format!("no record {pk} to commit").into(),
            ));
        };
        if r.status != RecordStatus::InFlight || r.lease_owner.as_deref() != Some(owner) {
            if r.status == RecordStatus::Committed
                && r.lease_owner.as_deref() == Some(owner)
                && r.effect_id.as_deref() == Some(effect_id)
            {
                return Ok(CommitOutcome::Committed);
            }
            return Ok(CommitOutcome::Refused(Box::new(r.clone())));
        }
        let mut after = r.clone();
        after.effect_id = Some(effect_id.to_string());
        after.effect_ids.insert(effect_id.to_string());
        after.request = Vec::new();
        fits(&after)?;
        if let Some(existing) = t.bookings.get(&booking.source_event) {
            // The booking's condition failed: the whole transaction is cancelled. This happens
            // only when a booking outlived its record (expired and re-reserved).
            return Err(StoreError::Corrupt(
                format!(
                    "a business row for {} already exists with effect id {}",
                    booking.source_event, existing.effect_id
                )
                .into(),
            ));
        }
        t.bookings
            .insert(booking.source_event.clone(), booking.clone());
        let r = t
            .records
            .get_mut(pk)
            .ok_or_else(|| StoreError::Corrupt(format!("no record {pk}").into()))?;
        r.status = RecordStatus::Committed;
        r.effect_id = Some(effect_id.to_string());
        r.effect_ids.insert(effect_id.to_string());
        r.lease_until_ms = None;
        r.inflight_shard = None;
        r.request = Vec::new();
        r.updated_at_ms = now_ms;
        t.reindex(pk);
        Ok(CommitOutcome::Committed)
    }

    async fn guard(
        &self,
        record: &IdempotencyRecord,
        natural_key: &NaturalKey,
        now_ms: i64,
    ) -> Result<GuardOutcome, StoreError> {
        let event_key = record.event_key.as_str();
        let nk = limits::guard_pk(record, natural_key).map_err(refused)?;
        let mut t = self.lock();
        if let Some((holder, expires_at_s)) = t.natural_keys.get(&nk) {
            // `attribute_not_exists(pk) OR event_key = :event_key OR expires_at < :now_s`.
            if holder != event_key && *expires_at_s >= crate::clock::ms_to_s(now_ms) {
                return Ok(GuardOutcome::Collision {
                    other_event_key: holder.clone(),
                });
            }
        }
        t.natural_keys
            .insert(nk, (event_key.to_string(), natural_key.expires_at_s));
        Ok(GuardOutcome::Held)
    }

    async fn release_lease(&self, pk: &str, owner: &str, now_ms: i64) -> Result<(), StoreError> {
        let mut t = self.lock();
        if let Some(r) = t.records.get_mut(pk) {
            if r.has_work() && r.lease_owner.as_deref() == Some(owner) {
                r.lease_until_ms = Some(0);
                r.updated_at_ms = now_ms;
            }
        }
        t.reindex(pk);
        Ok(())
    }

    async fn extend_lease(
        &self,
        pk: &str,
        owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let mut t = self.lock();
        let Some(r) = t.records.get_mut(pk) else {
            return Ok(false);
        };
        if r.status != RecordStatus::InFlight
            || r.lease_owner.as_deref() != Some(owner)
            || r.lease_until_ms == Some(0)
        {
            return Ok(false);
        }
        r.lease_until_ms = Some(lease_until_ms);
        r.updated_at_ms = now_ms;
        t.reindex(pk);
        Ok(true)
    }

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
        let mut t = self.lock();
        let (outcome, _) = finish_locked(&mut t, pk, owner, status, error, item, guard, now_ms)?;
        Ok(outcome)
    }

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
        let mut t = self.lock();
        let (outcome, applied) = finish_locked(
            &mut t,
            &record.pk,
            owner,
            status,
            error,
            item,
            FinishGuard::Lease,
            now_ms,
        )?;
        let no_effect = t
            .records
            .get(&record.pk)
            .is_some_and(|r| r.effect_ids.is_empty());
        // A key the store would refuse was never stored: nothing to release.
        if let (true, true, Ok(nk)) = (applied, no_effect, limits::guard_pk(record, natural_key)) {
            if let Some((holder, expires_at_s)) = t.natural_keys.get_mut(&nk) {
                if *holder == record.event_key {
                    *expires_at_s = crate::clock::ms_to_s(now_ms) - 1;
                }
            }
        }
        Ok(outcome)
    }

    async fn routed(&self, pk: &str, owner: &str, now_ms: i64) -> Result<bool, StoreError> {
        let mut t = self.lock();
        match t.records.get_mut(pk) {
            Some(r) if r.route_pending && r.lease_owner.as_deref() == Some(owner) => {
                r.route_pending = false;
                r.request = Vec::new();
                r.lease_until_ms = None;
                r.inflight_shard = None;
                r.updated_at_ms = now_ms;
                t.reindex(pk);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn record_effect_id(
        &self,
        pk: &str,
        effect_id: &str,
        now_ms: i64,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let mut t = self.lock();
        match t.records.get_mut(pk) {
            Some(r) => {
                let mut after = r.clone();
                // At most MAX_EFFECT_IDS distinct ids (crate::store::limits), as every adapter.
                if after.effect_ids.len() < crate::store::limits::MAX_EFFECT_IDS {
                    after.effect_ids.insert(effect_id.to_string());
                }
                after.updated_at_ms = now_ms;
                fits(&after)?;
                *r = after;
                let after = r.clone();
                t.reindex(pk);
                Ok(Some(after))
            }
            None => Ok(None),
        }
    }

    async fn get(&self, pk: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        Ok(self.lock().records.get(pk).cloned())
    }

    fn row_columns(&self) -> RowColumns {
        self.columns
    }
}

#[async_trait]
impl BusinessRows for MemoryStore {
    async fn business_row(&self, source_event: &str) -> Result<Option<BusinessRow>, StoreError> {
        Ok(self.lock().bookings.get(source_event).cloned())
    }
}

#[async_trait]
impl InFlightIndex for MemoryStore {
    async fn multi_effect_keys(&self) -> Result<usize, StoreError> {
        Ok(self.lock().index.multi_effect_count())
    }

    async fn stale_in_flight(
        &self,
        shard: &str,
        created_before_ms: i64,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<InFlightPage, StoreError> {
        let t = self.lock();
        t.index
            .stale_in_flight(&t.records, shard, created_before_ms, cursor, limit)
    }
}
