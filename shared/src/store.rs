//! The `IdempotencyStore` port: the idempotency table and the TMS bookings table, as DynamoDB
//! offers them (conditional writes, one transaction for the commit).

use async_trait::async_trait;

use crate::record::{IdempotencyRecord, RecordStatus, TmsBooking};

/// The result of step 2, the reserve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// The key was absent or expired; the record is now stored as given.
    Reserved,
    /// The key is taken by a live (not expired) record, returned in the same call.
    Conflict(Box<IdempotencyRecord>),
}

/// The result of a take-over of an expired lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeOver {
    /// The lease is ours; the record as it is now.
    Taken(Box<IdempotencyRecord>),
    /// Someone else holds a live lease, took it first, or the record left `in_flight`.
    Refused,
}

/// The result of step 4, the commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitOutcome {
    /// The record is `committed` with our slot and the TMS booking is written. (No record is
    /// returned: DynamoDB's `TransactWriteItems` returns none, and a partial one would mislead.)
    Committed,
    /// The record was no longer `in_flight`: someone else finished it. The record as it is.
    NotInFlight(Box<IdempotencyRecord>),
}

/// What the `InFlight` index holds of one `in_flight` record: enough to choose a record and take
/// its lease over, and deliberately not the stored claim request (it holds the release PIN) nor
/// the business fields. On DynamoDB the index projects only these attributes
/// ([`crate::dynamo::INFLIGHT_PROJECTED_ATTRIBUTES`]), so the metrics function, which may query the
/// index, cannot read a PIN; whoever takes the lease over gets the whole record from the
/// take-over itself (`ReturnValues=ALL_NEW`), with no extra read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlightEntry {
    /// `"{integration}#{event_key}"`.
    pub pk: String,
    /// The event key (64 hex characters).
    pub event_key: String,
    /// The state as the index last saw it (the index is eventually consistent: a record that just
    /// left `in_flight` may still show, so every take-over is conditional).
    pub status: RecordStatus,
    /// Who held the lease, as the index last saw it.
    pub lease_owner: Option<String>,
    /// Until when that lease held, epoch **milliseconds**.
    pub lease_until_ms: Option<i64>,
    /// Creation time, epoch **milliseconds** (the index's sort key).
    pub created_at_ms: i64,
    /// TTL, epoch **seconds**.
    pub expires_at_s: i64,
}

impl InFlightEntry {
    /// Whether the record's TTL has passed at `now_ms` (epoch ms), as [`IdempotencyRecord::is_expired`].
    pub fn is_expired(&self, now_ms: i64) -> bool {
        self.expires_at_s < crate::clock::ms_to_s(now_ms)
    }

    /// Whether someone holds a live lease at `now_ms` (epoch ms): `now <= lease_until`.
    pub fn lease_is_live(&self, now_ms: i64) -> bool {
        self.lease_until_ms.is_some_and(|until| now_ms <= until)
    }
}

impl From<&IdempotencyRecord> for InFlightEntry {
    fn from(record: &IdempotencyRecord) -> Self {
        Self {
            pk: record.pk.clone(),
            event_key: record.event_key.clone(),
            status: record.status,
            lease_owner: record.lease_owner.clone(),
            lease_until_ms: record.lease_until_ms,
            created_at_ms: record.created_at_ms,
            expires_at_s: record.expires_at_s,
        }
    }
}

/// An index item that could not be read as an [`InFlightEntry`] (an attribute missing or of the
/// wrong type: written by something other than this code). Kept apart so that one such item does
/// not block the rest of its shard, and still counted by the signals: it is `in_flight` work that
/// nothing will finish, exactly what the oldest-`in_flight` alarm is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableEntry {
    /// The item's `pk`, when readable.
    pub pk: Option<String>,
    /// Its `created_at` (the index's sort key), epoch **milliseconds**, when readable.
    pub created_at_ms: Option<i64>,
    /// Why it could not be read.
    pub error: String,
}

/// One page of stale `in_flight` records, as the `InFlight` index holds them.
#[derive(Debug, Clone, Default)]
pub struct InFlightPage {
    /// The entries of this page, oldest first.
    pub entries: Vec<InFlightEntry>,
    /// Index items of this page that could not be read (none from a store this code wrote).
    pub unreadable: Vec<UnreadableEntry>,
    /// Pass back to get the next page; `None` on the last page.
    pub cursor: Option<String>,
}

/// A store failure. All but [`StoreError::Corrupt`] are transient: the record goes into
/// `batchItemFailures` and SQS redelivers it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Throttled after the SDK's own retries.
    #[error("store throttled: {0}")]
    Throttled(String),
    /// A transaction conflicted after our retries.
    #[error("transaction conflict: {0}")]
    TransactionConflict(String),
    /// Network, service or other transient error.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A stored item cannot be read as a record: needs a person.
    #[error("corrupt record: {0}")]
    Corrupt(String),
}

/// The idempotency table and the TMS bookings table.
///
/// Times are epoch **milliseconds** (`now_ms`, `lease_until_ms`); implementations convert to
/// epoch seconds for `expires_at` themselves.
#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// Reserves `record.pk` with `record` (status `in_flight`, a lease): succeeds only when the key
    /// is absent or expired (`attribute_not_exists(pk) OR expires_at < :now`); otherwise returns
    /// the existing record in the same call.
    async fn reserve(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> Result<Reservation, StoreError>;

    /// Takes the lease of an `in_flight` record from `old_owner` whose lease has expired
    /// (`lease_until < now`), setting `new_owner` until `lease_until_ms`. Conditional: refused if
    /// the owner changed, the lease is live or the record left `in_flight`.
    async fn take_over(
        &self,
        pk: &str,
        old_owner: &str,
        new_owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<TakeOver, StoreError>;

    /// Step 4: atomically sets the record to `committed` with `slot_id` (adding it to `slot_ids`,
    /// removing the lease, `inflight_shard` and the stored `request`, which holds the PIN and is
    /// never sent again) on condition `status = in_flight`, and writes `booking` on condition
    /// that no booking exists for its event.
    async fn commit(
        &self,
        pk: &str,
        slot_id: &str,
        booking: &TmsBooking,
        now_ms: i64,
    ) -> Result<CommitOutcome, StoreError>;

    /// Ends `owner`'s lease early (after a transient failure) so a redelivery can take over at
    /// once; the record stays `in_flight`. A no-op if `owner` no longer holds it.
    async fn release_lease(&self, pk: &str, owner: &str, now_ms: i64) -> Result<(), StoreError>;

    /// Ends an `in_flight` record held by `owner` as `failed` or `manual` with `error`, removing
    /// the lease, `inflight_shard` and the stored `request` (the PIN, or a routing record's item
    /// with the original body). Returns `false` if the record was no longer `in_flight` under
    /// `owner`.
    async fn finish(
        &self,
        pk: &str,
        owner: &str,
        status: RecordStatus,
        error: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError>;

    /// Adds `slot_id` to the record's `slot_ids` (`ADD slot_ids`), whatever its state, and
    /// returns how many distinct slot ids the record now holds (0 if there is no record). A record
    /// with two or more is marked `multi_slot` (the sparse GSI `MultiSlot`), so the distinct-slot
    /// signal finds it without a scan ([`IdempotencyStore::multi_slot_keys`]).
    async fn record_slot_id(
        &self,
        pk: &str,
        slot_id: &str,
        now_ms: i64,
    ) -> Result<usize, StoreError>;

    /// How many records hold two or more distinct slot ids (the distinct-slot signal; healthy: 0).
    async fn multi_slot_keys(&self) -> Result<usize, StoreError>;

    /// `in_flight` records of one `InFlight` shard (`"00"`..`"15"`) created before
    /// `created_before_ms` (epoch ms), oldest first, at most `limit` per page.
    async fn stale_in_flight(
        &self,
        shard: &str,
        created_before_ms: i64,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<InFlightPage, StoreError>;

    /// Reads one record (expired or not).
    async fn get(&self, pk: &str) -> Result<Option<IdempotencyRecord>, StoreError>;

    /// Reads the TMS booking of an event key.
    async fn booking(&self, source_event: &str) -> Result<Option<TmsBooking>, StoreError>;
}
