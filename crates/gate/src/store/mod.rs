//! The store port: the idempotency table and the business table, as DynamoDB offers them
//! (conditional writes, one transaction for the commit), split by caller:
//!
//! * [`IdempotencyStore`]: the write path of one record (the consumer and the reconciler);
//! * [`InFlightIndex`]: the read side over many records (the reconciler and the metrics function);
//! * [`RecordScan`], [`audit::AuditLog`] and [`Purge`]: what an operator's tool and the
//!   scheduled purge need besides (`records`: a full scan, the multi-effect keys, the purge of
//!   expired rows; [`audit`]: the audit history), together with the above an [`OperatorStore`].
//!
//! Adapters: [`memory::MemoryStore`] (tests, the simulator), `dynamo::DynamoStore` /
//! `gate_dynamo::DynamoIndex` (feature `aws`) and `postgres::PostgresStore` (feature `postgres`).
//! What an item may hold (reserved label names, DynamoDB's item size limit) is written once for
//! every adapter: [`limits`].

pub mod audit;
pub mod budget;
pub mod cursor;
mod error;
pub mod limits;
pub mod memory;
mod records;
mod unknown_commit;

pub use error::{Cause, StoreError};
pub use records::{BusinessRows, OperatorStore, Purge, PurgeCount, RecordScan};
pub use unknown_commit::{settle_unknown_commit, UnknownCommit};

use async_trait::async_trait;

use crate::record::{BusinessRow, IdempotencyRecord, NaturalKey, RecordStatus, RowColumns};

/// The result of step 2, the reserve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// The key was absent, or held an expired finished record; the record is now stored as
    /// given. Also the answer when the key already holds this very reservation (same lease
    /// owner, see [`IdempotencyRecord::is_same_reservation`]): the client's retry of a reserve
    /// whose write landed but whose answer was lost.
    Reserved,
    /// The key is taken by a live (not expired) record, returned in the same call.
    Conflict(Box<IdempotencyRecord>),
}

/// The result of a take-over of an expired lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeOver {
    /// The lease is ours; the record as it is now. Also the answer when the record already
    /// carries our lease (the retry of a take-over whose write landed).
    Taken(Box<IdempotencyRecord>),
    /// Someone else holds a live lease, took it first, or the record has nothing left to do
    /// (neither `in_flight` nor [`IdempotencyRecord::route_pending`]).
    Refused,
}

/// The result of step 4, the commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitOutcome {
    /// The record is `committed` with our effect id and the business row is written. (No record is
    /// returned: DynamoDB's `TransactWriteItems` returns none, and a partial one would mislead.)
    /// Also the answer when the record is already committed by this very holder with this very
    /// effect (the retry of a commit whose transaction landed but whose answer was lost).
    Committed,
    /// The commit was refused: the record is no longer `in_flight`, or it is `in_flight` under
    /// another holder's lease (ours was taken over). The record as it is; nothing was written.
    Refused(Box<IdempotencyRecord>),
}

/// The `pk` of the natural-key item (the guard, [`IdempotencyStore::guard`]) of the record
/// `record_pk` (`"{integration}#{event_key}"`, `event_key` its suffix):
/// `"{integration}#nk#{natural key}"` (on the truck-slot path
/// `"{integration}#nk#{subject}#{window start}"`). It holds the first event key that
/// was about to call for that natural key, so a second event key for the same event goes to a
/// person before it calls (a natural-key collision, signal 4).
pub fn natural_key_pk(record_pk: &str, event_key: &str, natural_key: &NaturalKey) -> String {
    let integration = record_pk
        .strip_suffix(event_key)
        .and_then(|p| p.strip_suffix('#'))
        .unwrap_or(record_pk);
    format!("{integration}#nk#{}", natural_key.key)
}

/// The result of [`IdempotencyStore::guard`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuardOutcome {
    /// The natural-key item holds our event key: written now, or already ours (the retry of a
    /// guard whose write landed, a redelivery, the reconciler resuming a record that crashed:
    /// the same event key is the same holder). The effect may be called.
    Held,
    /// Another event key holds the natural key (two event keys for one event: a broken key
    /// derivation, or an event re-sent under a new notificationId). The effect must not be
    /// called; the record goes to a person with both event keys.
    Collision {
        /// The event key that holds the natural key (64 hex characters).
        other_event_key: String,
    },
}

/// The result of [`IdempotencyStore::reserve_with_guard`]: the reserve's, and the guard's where
/// the reserve reserved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReserveAndGuard {
    /// What the reserve answered, as [`IdempotencyStore::reserve`] would.
    pub reservation: Reservation,
    /// `None` when no natural key was given or the reserve answered
    /// [`Reservation::Conflict`] (nothing of the guard was written); otherwise what
    /// [`IdempotencyStore::guard`] answered right after the reserve, its error included (the
    /// record is reserved either way: its lease is the caller's).
    pub guard: Option<Result<GuardOutcome, StoreError>>,
}

/// [`IdempotencyStore::reserve_with_guard`] as two calls: `store.reserve`, then, only when it
/// answered [`Reservation::Reserved`] and a natural key is given, `store.guard` with the same
/// `now_ms` (epoch ms). The port method's default, and what an adapter that merges the two falls
/// back to when it cannot.
///
/// # Errors
/// The reserve's error (then no guard was asked for).
pub async fn reserve_then_guard<S: IdempotencyStore + ?Sized>(
    store: &S,
    record: &IdempotencyRecord,
    natural_key: Option<&NaturalKey>,
    now_ms: i64,
) -> Result<ReserveAndGuard, StoreError> {
    let reservation = store.reserve(record, now_ms).await?;
    let guard = match (&reservation, natural_key) {
        (Reservation::Reserved, Some(key)) => Some(store.guard(record, key, now_ms).await),
        _ => None,
    };
    Ok(ReserveAndGuard { reservation, guard })
}

/// The result of [`IdempotencyStore::finish`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishOutcome {
    /// The record is finished as asked, its routing pending (also the answer to the retry of a
    /// finish whose write landed).
    Finished,
    /// Refused: the record is not `in_flight` under this holder (lease lost, or finished by
    /// someone else), or it holds an effect id and the finish asked for none. The record as it is,
    /// `None` if there is none.
    Refused(Option<Box<IdempotencyRecord>>),
}

/// A guard on [`IdempotencyStore::finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishGuard {
    /// Only the lease: `status = in_flight AND lease_owner = :owner`.
    Lease,
    /// The lease, and no effect id recorded (`attribute_not_exists(effect_ids)`): for routing a
    /// record to a person because no effect exists (past the key's retention). A holder that lost
    /// its lease while its claim was in transit records the effect it got
    /// ([`IdempotencyStore::record_effect_id`]); such a record must be committed, not routed.
    LeaseAndNoEffect,
}

/// What the `InFlight` index holds of one `in_flight` record: enough to choose a record and take
/// its lease over, and deliberately not the stored request (it may hold secrets) nor the business
/// fields. On DynamoDB the index projects only these attributes
/// (`gate_dynamo::INFLIGHT_PROJECTED_ATTRIBUTES`), so the metrics function, which may
/// query the index, cannot read a secret of the request; whoever takes the lease over gets the
/// whole record from the take-over itself (`ReturnValues=ALL_NEW`), with no extra read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlightEntry {
    /// `"{integration}#{event_key}"`.
    pub pk: String,
    /// The event key (64 hex characters).
    pub event_key: String,
    /// The state as the index last saw it (the index is eventually consistent: a record that just
    /// left `in_flight` may still show, so every take-over is conditional). Anything but
    /// `in_flight` here is a routing to a person whose send is not confirmed
    /// ([`IdempotencyRecord::route_pending`]): only those keep their shard once finished.
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
    /// Pass back to get the next page; `None` on the last page. A position in the index's
    /// order, not a record: the next page starts after it even when its record has left the
    /// index meanwhile (the reconciler commits a page's records before it asks for the next),
    /// as DynamoDB's `ExclusiveStartKey` does (conformance case
    /// `stale_in_flight_cursor_outlives_its_record`).
    pub cursor: Option<String>,
}

/// The write path of the idempotency table and the business table: what the consumer and the
/// reconciler do to one record (reserve, take over, commit, release, finish, confirm a routing,
/// record an effect id) and the one consistent read they act on (`get`). The read side over many
/// records is [`InFlightIndex`]; the business rows an operator reads back, [`BusinessRows`].
///
/// A wrapper (a fault injector in a test, a delay in a benchmark) implements this trait alone and
/// passes the index on untouched.
///
/// Times are epoch **milliseconds** (`now_ms`, `lease_until_ms`); implementations convert to
/// epoch seconds for `expires_at` themselves.
#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// Reserves `record.pk` with `record` (status `in_flight` with a lease, or a routing record
    /// born `manual` with [`IdempotencyRecord::route_pending`]): succeeds only when the key is
    /// absent or holds an expired record that has nothing left to do (`attribute_not_exists(pk)
    /// OR (expires_at < :now_s AND status <> in_flight AND attribute_not_exists(route_pending))`);
    /// otherwise returns the existing record in the same call. An expired `in_flight` record is
    /// a conflict: whoever meets it takes it over with its history (creation time, operation key,
    /// stored request), so the claim horizon still applies to it.
    ///
    /// A conflict with this very reservation ([`IdempotencyRecord::is_same_reservation`]) is
    /// [`Reservation::Reserved`]: the retry of a write that landed.
    async fn reserve(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> Result<Reservation, StoreError>;

    /// Step 2 and, where it reserved, the guard of signal 4 for the new record: exactly
    /// [`IdempotencyStore::reserve`] of `record`, then, only when that answered
    /// [`Reservation::Reserved`] (a new key, an expired record with nothing left to do replaced,
    /// or the retry of this very reservation) and `natural_key` is given,
    /// [`IdempotencyStore::guard`] of `record` and `natural_key` at the same `now_ms` (epoch
    /// ms). A conflict writes no guard and returns the existing record, as the reserve does.
    ///
    /// The default makes the two calls ([`reserve_then_guard`]): two round trips for a new event,
    /// one for a duplicate. An adapter may write both in one request when the outcome is the
    /// same in every case, a lost answer included (PostgreSQL: one statement, so a new event is
    /// one round trip here and one at the commit). A wrapper that forwards the port to an inner
    /// store forwards this method too, or the inner store's merge is lost.
    ///
    /// # Errors
    /// As the reserve's; once the reserve answered, a failure of the guard is
    /// [`ReserveAndGuard::guard`]'s, not this call's.
    async fn reserve_with_guard(
        &self,
        record: &IdempotencyRecord,
        natural_key: Option<&NaturalKey>,
        now_ms: i64,
    ) -> Result<ReserveAndGuard, StoreError> {
        reserve_then_guard(self, record, natural_key, now_ms).await
    }

    /// Takes the lease of a record that still has work (`in_flight`, or a routing whose send is
    /// not confirmed: [`IdempotencyRecord::route_pending`]) from `old_owner` whose lease has
    /// expired (`lease_until < now`), setting `new_owner` until `lease_until_ms`. Conditional:
    /// refused if the owner changed, the lease is live or the record has nothing left to do. A
    /// refusal that finds `new_owner` already holding the lease is [`TakeOver::Taken`] (the retry
    /// of a take-over that landed). `new_owner` must be unique per acquisition (a lease token).
    async fn take_over(
        &self,
        pk: &str,
        old_owner: &str,
        new_owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<TakeOver, StoreError>;

    /// Step 4: atomically sets the record to `committed` with `effect_id` (adding it to `effect_ids`,
    /// removing `lease_until`, `inflight_shard` and the stored request, keeping `lease_owner` as
    /// the committer) on condition `status = in_flight AND lease_owner = :owner` (fenced: a holder
    /// whose lease was taken over cannot commit), and writes the business row `row` on
    /// condition that no row exists for its event. A refusal that finds the record committed by
    /// `owner` with `effect_id` is [`CommitOutcome::Committed`] (the retry of a commit that landed).
    /// `effect_id` is the id the side effect returned.
    ///
    async fn commit(
        &self,
        pk: &str,
        owner: &str,
        effect_id: &str,
        row: &BusinessRow,
        now_ms: i64,
    ) -> Result<CommitOutcome, StoreError>;

    /// The guard of signal 4, before any call: puts the natural-key item ([`natural_key_pk`] of
    /// `record_pk`: `event_key`, the key's labels, its `expires_at`) on condition
    /// `attribute_not_exists(pk) OR event_key = :event_key OR expires_at < :now_s` and returns
    /// the holder in the same call when another event key holds it (`ALL_OLD`).
    ///
    /// The holder is the event key, not the lease: a redelivery, a take-over or the reconciler
    /// resuming the same event key after a crash meets its own guard ([`GuardOutcome::Held`]);
    /// a retried write that landed does too. The guard stays with its first event key until it
    /// expires (the event's end plus the key TTL), whatever that event became (`committed`,
    /// `failed` or `manual`: a `manual` one may hold an effect nobody knows of), so every other
    /// event key for the same natural key goes to a person; unless its record ends without an
    /// effect ([`IdempotencyStore::finish_without_effect`] releases it).
    ///
    /// Not fenced by the lease: it writes only the event key's own claim on the natural key, the
    /// same whoever of its holders writes it. It needs no transaction with the reserve (on
    /// PostgreSQL [`IdempotencyStore::reserve_with_guard`] writes both in one statement for a
    /// new event, on DynamoDB they are two requests): nothing is called before it answers
    /// [`GuardOutcome::Held`], a crash between the reserve and the guard leaves an `in_flight`
    /// record whose next holder puts the guard again, and a duplicate (which never calls) does
    /// not pay for it.
    ///
    /// `record` is the held record the guard is for (its `pk` and `event_key`; its lease owner
    /// only names the writer, for fault injection and logs).
    async fn guard(
        &self,
        record: &IdempotencyRecord,
        natural_key: &NaturalKey,
        now_ms: i64,
    ) -> Result<GuardOutcome, StoreError>;

    /// Ends `owner`'s lease early (after a transient failure) so a redelivery can take over at
    /// once (`lease_until = 0`); the record keeps its state (`in_flight`, or a pending routing).
    /// Conditional on `lease_owner = :owner` and work left: a no-op if `owner` no longer holds
    /// it. Idempotent by nature: a retry of a release that landed meets the same condition.
    async fn release_lease(&self, pk: &str, owner: &str, now_ms: i64) -> Result<(), StoreError>;

    /// Moves `owner`'s lease on an `in_flight` record to `lease_until_ms` (epoch ms), before a
    /// server call the lease left would not cover (`Gate::lease_for_call`). Fenced like the
    /// commit: conditional on `status = in_flight AND lease_owner = :owner`, so a holder whose
    /// lease was taken over (or whose record was finished) changes nothing: `Ok(false)`; and on
    /// a lease not released (`lease_until <> 0`, [`IdempotencyStore::release_lease`]), so an
    /// extension that lands after its holder gave up on it (an SDK attempt still queued when
    /// the call returned an error and the holder released) does not hold the record again
    /// against the redelivery: `Ok(false)`. Whether
    /// the old lease has already run out does not matter: while nobody took it over it is still
    /// ours, and a take-over racing the extension is conditional on the old lease's end, so one
    /// of the two is refused. `Ok(true)`: the lease is ours until `lease_until_ms`. A retry of an
    /// extension that landed (its answer lost) meets the same condition (the item shows our
    /// token) and writes the same values: `Ok(true)` again.
    async fn extend_lease(
        &self,
        pk: &str,
        owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError>;

    /// Ends an `in_flight` record held by `owner` as `failed` or `manual` with `error`, its
    /// routing to a person pending: the stored request becomes `item` (the manual item's JSON),
    /// `route_pending` is set, and the record keeps its lease and its `InFlight` shard until
    /// [`IdempotencyStore::routed`]. Mark first, send second: once finished, no holder can
    /// commit it, so no committed event is ever also in the manual queue; and a sender that dies
    /// before [`IdempotencyStore::routed`] leaves it in the index for whoever takes it over.
    ///
    /// Conditional on `status = in_flight AND lease_owner = :owner` (and `guard`). A refusal
    /// that finds the record finished by `owner` as `status` is [`FinishOutcome::Finished`] (the
    /// retry of a finish that landed).
    #[allow(clippy::too_many_arguments)]
    async fn finish(
        &self,
        pk: &str,
        owner: &str,
        status: RecordStatus,
        error: &str,
        item: &[u8],
        guard: FinishGuard,
        now_ms: i64,
    ) -> Result<FinishOutcome, StoreError>;

    /// [`IdempotencyStore::finish`] with [`FinishGuard::Lease`] of a record that ends without an
    /// effect (the server refused or declined it, an operator cancelled it), releasing in the
    /// same write the natural key `natural_key` that `record.event_key` holds (its item,
    /// [`natural_key_pk`] of `record`), so that a corrected event (another event key, the same
    /// natural key) is not a collision. Released: the item's `expires_at` set to the second
    /// before `now_ms`'s (epoch seconds), so the next guard of another event key takes it
    /// ([`IdempotencyStore::guard`]'s `expires_at < :now_s`) and the store's TTL or purge deletes
    /// it; its holder stays named.
    ///
    /// Atomic with the finish and fenced like it: nothing is released when the finish is refused
    /// (a holder that lost its lease changes nothing). Released only when the record holds no
    /// effect id (one recorded by a holder whose claim was in transit is an effect: the key stays
    /// held, the record is finished all the same) and the item names `record.event_key` (an
    /// absent item, or one another event key took after it expired, is left as it is). A retry
    /// of a write that landed meets the record finished by `owner` as `status`:
    /// [`FinishOutcome::Finished`], as the finish's.
    ///
    /// The default finishes without releasing (the key stays held until it expires, every other
    /// event key for it goes to a person): for a store that cannot write both at once. The
    /// memory, DynamoDB and PostgreSQL stores release; a wrapper forwards this method.
    #[allow(clippy::too_many_arguments)]
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
        let _ = natural_key;
        self.finish(
            &record.pk,
            owner,
            status,
            error,
            item,
            FinishGuard::Lease,
            now_ms,
        )
        .await
    }

    /// Confirms that the manual item of a routing `owner` holds is in the manual queue: removes
    /// `route_pending`, the stored item, the lease and the `InFlight` shard, on condition
    /// `route_pending AND lease_owner = :owner`. `Ok(false)` when the condition failed: the
    /// routing was confirmed already (the retry of a write that landed) or taken over by someone
    /// who will send the item again (at least once into the queue, under the same dedup key).
    async fn routed(&self, pk: &str, owner: &str, now_ms: i64) -> Result<bool, StoreError>;

    /// Adds `effect_id` to the record's `effect_ids` (`ADD effect_ids`), whatever its state, and
    /// returns the record as it is after the write (`None` if there is no record). A record with
    /// two or more distinct effect ids is marked (the sparse GSI the multi-effect index (`store::dynamo::MULTI_EFFECT_INDEX`)), so the
    /// distinct-effect signal finds it without a scan ([`InFlightIndex::multi_effect_keys`]).
    /// Idempotent by nature: a retried `ADD` of a set element and a retried mark change nothing.
    /// A record holds at most [`limits::MAX_EFFECT_IDS`] distinct ids: past that a new id is not
    /// added (the record is returned as it is; the caller logs the id), so the set cannot grow the
    /// item past DynamoDB's limit.
    async fn record_effect_id(
        &self,
        pk: &str,
        effect_id: &str,
        now_ms: i64,
    ) -> Result<Option<IdempotencyRecord>, StoreError>;

    /// Reads one record (expired or not).
    async fn get(&self, pk: &str) -> Result<Option<IdempotencyRecord>, StoreError>;

    /// The stored names of the business row's columns this store was built with (the
    /// integration's, [`crate::integration::Integration::row_columns`]): a label named like one
    /// is refused ([`limits::check_row`]), and the consumer checks a new event against the same
    /// names before its reserve. No default: a store that wraps another returns the inner one's,
    /// and a wrapper that forgot to would otherwise pre-check with other names than its commit
    /// refuses (the event then refused at the commit instead of before the reserve).
    fn row_columns(&self) -> RowColumns;
}

/// The read side of the idempotency table: its sparse indexes `InFlight` (records with work left,
/// 16 shards) and the multi-effect index (`store::dynamo::MULTI_EFFECT_INDEX`) (records with two or more distinct effect ids). The reconciler pages
/// `InFlight` for records to finish; the metrics function reads both for the store signals, and
/// needs nothing else of the store (on DynamoDB: `gate_dynamo::DynamoIndex`, the table name only).
#[async_trait]
pub trait InFlightIndex: Send + Sync {
    /// How many records hold two or more distinct effect ids (the distinct-effect signal; healthy: 0).
    async fn multi_effect_keys(&self) -> Result<usize, StoreError>;

    /// `in_flight` records of one `InFlight` shard (`"00"`..`"15"`) created before
    /// `created_before_ms` (epoch ms), oldest first, at most `limit` per page.
    async fn stale_in_flight(
        &self,
        shard: &str,
        created_before_ms: i64,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<InFlightPage, StoreError>;
}

/// A whole store: the write path, the read side and the business rows of the same tables, as an
/// adapter provides them ([`memory::MemoryStore`], `dynamo::DynamoStore`) and the conformance
/// suite checks them.
pub trait Store: IdempotencyStore + InFlightIndex + BusinessRows {}

impl<T: IdempotencyStore + InFlightIndex + BusinessRows + ?Sized> Store for T {}
