//! The idempotency record, its states, and the business row its commit writes.
//!
//! Units, never mixed: `expires_at_s` is **epoch seconds** (the DynamoDB TTL attribute);
//! `lease_until_ms`, `created_at_ms`, `updated_at_ms` and `written_at_ms` are **epoch
//! milliseconds**.
//!
//! What is the integration's own (a subject, a server, a window on the truck-slot path; a job
//! name on another) travels as [`Labels`]: named text the integration supplies when it parses a
//! body ([`crate::integration::Event::labels`]), stored on the record and copied to the business
//! row, each as a string attribute of its name.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::clock::ms_to_s;
use crate::keys;

/// Number of shards of the sparse GSI `InFlight`: `inflight_shard` is `"00"`..`"15"`.
pub const INFLIGHT_SHARDS: u8 = 16;

/// The state of an idempotency record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordStatus {
    /// Reserved; the claim may or may not have reached the server. Carries a lease.
    InFlight,
    /// The effect is made and the business row written (in one transaction).
    Committed,
    /// A permanent error; replayed to duplicates, the event sits in the manual queue.
    Failed,
    /// Routed to a person (e.g. a server without Idempotency-Key support).
    Manual,
}

impl RecordStatus {
    /// The stored form: `in_flight`, `committed`, `failed`, `manual`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InFlight => "in_flight",
            Self::Committed => "committed",
            Self::Failed => "failed",
            Self::Manual => "manual",
        }
    }

    /// Parses the stored form; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "in_flight" => Some(Self::InFlight),
            "committed" => Some(Self::Committed),
            "failed" => Some(Self::Failed),
            "manual" => Some(Self::Manual),
            _ => None,
        }
    }
}

impl fmt::Display for RecordStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row of the idempotency table (partition key `pk = "{integration}#{event_key}"`).
/// `Debug` redacts `request`, which may hold secrets (an API key or a PIN).
#[derive(Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    /// `"{integration}#{event_key}"`.
    pub pk: String,
    /// The event key (64 hex characters).
    pub event_key: String,
    /// The state.
    pub status: RecordStatus,
    /// SHA-256 hex of the RFC 8785 canonical business fields.
    pub fingerprint: String,
    /// The exact request body of the side effect, built once at reservation and re-sent byte
    /// for byte by whoever resumes the record. Secret (it may hold credentials).
    pub request: Vec<u8>,
    /// The `Idempotency-Key` sent to the server.
    pub op_key: String,
    /// Who works on it now: the Lambda invocation's request id.
    pub lease_owner: Option<String>,
    /// Until when the lease holds, epoch milliseconds. A lease is live while `now <= lease_until`.
    pub lease_until_ms: Option<i64>,
    /// Creation time, epoch milliseconds (the `InFlight` GSI's sort key).
    pub created_at_ms: i64,
    /// Last change, epoch milliseconds.
    pub updated_at_ms: i64,
    /// TTL, epoch **seconds**. Past it the record counts as absent even while still stored.
    pub expires_at_s: i64,
    /// The committed effect.
    pub effect_id: Option<String>,
    /// Every effect id the server ever returned for this key; more than one is the distinct-effect
    /// signal.
    pub effect_ids: BTreeSet<String>,
    /// `"00"`..`"15"`, present only while `in_flight` (the sparse GSI's partition key).
    pub inflight_shard: Option<String>,
    /// The permanent error, for `failed` and `manual`.
    pub error: Option<String>,
    /// A `failed` or `manual` record whose manual item (then in `request`) is not yet confirmed
    /// in the manual queue: it keeps its lease and its `InFlight` shard until the send is
    /// confirmed ([`crate::store::IdempotencyStore::routed`]); whoever takes it over sends the
    /// item again. Stored as `route_pending = "1"`, absent otherwise.
    pub route_pending: bool,
    /// The integration's labels of the event (name to text), stored as string attributes of
    /// those names and copied to the business row. Empty text for a routing record.
    pub labels: Labels,
}

impl fmt::Debug for IdempotencyRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyRecord")
            .field("pk", &self.pk)
            .field("status", &self.status)
            .field("fingerprint", &self.fingerprint)
            .field(
                "request",
                &format_args!("[redacted {} bytes]", self.request.len()),
            )
            .field("op_key", &self.op_key)
            .field("lease_owner", &self.lease_owner)
            .field("lease_until_ms", &self.lease_until_ms)
            .field("created_at_ms", &self.created_at_ms)
            .field("updated_at_ms", &self.updated_at_ms)
            .field("expires_at_s", &self.expires_at_s)
            .field("effect_id", &self.effect_id)
            .field("effect_ids", &self.effect_ids)
            .field("inflight_shard", &self.inflight_shard)
            .field("error", &self.error)
            .field("route_pending", &self.route_pending)
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

impl IdempotencyRecord {
    /// Whether the record's TTL has passed at `now_ms` (epoch ms): `expires_at < now` in epoch
    /// seconds, the same test as the reserve condition. An expired record counts as absent.
    pub fn is_expired(&self, now_ms: i64) -> bool {
        self.expires_at_s < ms_to_s(now_ms)
    }

    /// Whether someone holds a live lease at `now_ms` (epoch ms): `now <= lease_until`.
    pub fn lease_is_live(&self, now_ms: i64) -> bool {
        self.lease_until_ms.is_some_and(|until| now_ms <= until)
    }

    /// Whether the record still has work for a lease holder: `in_flight` (claim and commit, or
    /// route), or a routing whose send is not confirmed ([`IdempotencyRecord::route_pending`]).
    pub fn has_work(&self) -> bool {
        self.status == RecordStatus::InFlight || self.route_pending
    }

    /// Whether the record is `committed` by `owner` with `effect_id`: what the retry of a commit
    /// that landed meets (its answer lost), which must count as committed, not as refused.
    pub fn is_committed_by(&self, owner: &str, effect_id: &str) -> bool {
        self.status == RecordStatus::Committed
            && self.lease_owner.as_deref() == Some(owner)
            && self.effect_id.as_deref() == Some(effect_id)
    }

    /// Whether `self` (what the store holds) is the reservation `written`, made by the same
    /// acquisition: same lease owner (a lease token unique per acquisition), status, fingerprint,
    /// operation key and creation time. This is what the client's retry of a reserve whose write
    /// landed (its answer lost) meets; it must count as reserved, not as a duplicate.
    pub fn is_same_reservation(&self, written: &IdempotencyRecord) -> bool {
        self.lease_owner.is_some()
            && self.lease_owner == written.lease_owner
            && self.lease_until_ms == written.lease_until_ms
            && self.status == written.status
            && self.fingerprint == written.fingerprint
            && self.op_key == written.op_key
            && self.created_at_ms == written.created_at_ms
    }
}

/// The partition key of a record: `"{integration}#{event_key}"`.
pub fn record_pk(integration: &str, event_key: &str) -> String {
    format!("{integration}#{event_key}")
}

/// The `InFlight` shard of an event key: the first byte of the hex key modulo 16, as `"00"`..`"15"`.
pub fn inflight_shard(event_key: &str) -> String {
    let byte = event_key
        .get(..2)
        .and_then(|h| u8::from_str_radix(h, 16).ok())
        .unwrap_or(0);
    format!("{:02}", byte % INFLIGHT_SHARDS)
}

/// The integration's labels of an event: name to text (e.g. `subject`, `server`,
/// `window_start`, `window_end` on the truck-slot path). Each is stored as a string attribute of
/// its name on the record, on the business row and (a subset) on the natural-key item, so a name
/// must not be one of the store's own attribute names (`pk`, `status`, `effect_id`, ...:
/// [`crate::store::limits::RESERVED_NAMES`]); every store refuses such a label, and an item over
/// DynamoDB's item limit ([`crate::store::limits`]).
pub type Labels = BTreeMap<String, String>;

/// The stored names of the business row's own columns on DynamoDB, named by the integration
/// ([`crate::integration::Integration::row_columns`]) so that a business table others already
/// read (a TMS, a ledger) keeps its names. The store learns them where it is built
/// (`DynamoStore::with_row_columns`, `MemoryStore::with_row_columns`; the Lambda wiring and
/// gatectl pass the integration's); every other attribute of the row is a label of that name.
///
/// A label named like one of these columns would overwrite the row's own attribute, so every
/// store refuses it ([`crate::store::limits::check_row`]). PostgreSQL keeps its fixed
/// `business_rows` columns (`source_event`, `effect_id`, `booked_at_ms`; the labels in one
/// JSON column) whatever the names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RowColumns {
    /// The partition key of the business table, holding the event key (S). The table is
    /// created with it: changing it on a deployed table is a new table.
    pub event_key: &'static str,
    /// The effect id the server returned (S).
    pub effect_id: &'static str,
    /// When the row was written, epoch **milliseconds** (N).
    pub written_at: &'static str,
}

impl RowColumns {
    /// The neutral names, the default: `source_event` (the key every business table of the
    /// templates already has: a DynamoDB table's key cannot be renamed in place), `effect_id`,
    /// `written_at`.
    pub const NEUTRAL: Self = Self {
        event_key: "source_event",
        effect_id: "effect_id",
        written_at: "written_at",
    };

    /// The legacy layout of a business row (the names of bookings tables already deployed). A
    /// row without the configured effect id (a string) and time (a number) but with these is
    /// read under these names, so a row in the legacy layout reads the same; never written
    /// unless an integration names its columns so.
    pub const LEGACY: Self = Self {
        event_key: "source_event",
        effect_id: "slot_id",
        written_at: "booked_at",
    };

    /// The three names: key, effect id, time.
    pub const fn names(&self) -> [&'static str; 3] {
        [self.event_key, self.effect_id, self.written_at]
    }

    /// Whether `name` is one of the three.
    pub fn contains(&self, name: &str) -> bool {
        self.names().contains(&name)
    }

    /// Checks that the names can lay out an item: none empty, all distinct.
    ///
    /// # Errors
    /// A sentence naming the fault (the Lambda wiring reports it as an init error).
    pub fn validate(&self) -> Result<(), String> {
        let [key, id, at] = self.names();
        if key.is_empty() || id.is_empty() || at.is_empty() {
            return Err(format!(
                "the business row's column names must not be empty: {self:?}"
            ));
        }
        if key == id || key == at || id == at {
            return Err(format!(
                "the business row's column names must be distinct: {self:?}"
            ));
        }
        Ok(())
    }

    /// Checks that none of the integration's `label_names` ([`crate::Integration::label_names`])
    /// is one of these column names: such a label is refused on every commit (it would overwrite
    /// the column), so every new event would go to a person. The Lambda wiring checks it at cold
    /// start (`gate_lambda::build_gate`, feature `lambda`): an init error instead.
    ///
    /// # Errors
    /// The first label named like a column, with the columns.
    pub fn validate_labels(&self, label_names: &[&str]) -> Result<(), String> {
        match label_names.iter().find(|label| self.contains(label)) {
            Some(label) => Err(format!(
                "the label {label:?} is named like one of the business row's columns {:?}: \
                 rename the label, or on DynamoDB the column (Integration::row_columns; \
                 PostgreSQL's columns are fixed)",
                self.names()
            )),
            None => Ok(()),
        }
    }
}

impl Default for RowColumns {
    /// [`RowColumns::NEUTRAL`].
    fn default() -> Self {
        Self::NEUTRAL
    }
}

/// A row of the business table the commit writes in the same transaction as the record (the TMS
/// bookings table on the truck-slot path; partition key = the event key). On DynamoDB: the
/// integration's [`RowColumns`] (by default `source_event` (S, the event key), `effect_id` (S),
/// `written_at` (N, epoch **ms**)) and one string attribute per label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusinessRow {
    /// The event key.
    pub source_event: String,
    /// The id the side effect returned (stored under [`RowColumns::effect_id`]).
    pub effect_id: String,
    /// The integration's labels (usually the record's, see [`BusinessRow::for_record`]).
    pub labels: Labels,
    /// When the row was written, epoch milliseconds (stored under [`RowColumns::written_at`]).
    pub written_at_ms: i64,
}

impl BusinessRow {
    /// The row for `record` with `effect_id`, written at `now_ms` (epoch ms): the record's labels.
    pub fn for_record(record: &IdempotencyRecord, effect_id: &str, now_ms: i64) -> Self {
        Self {
            source_event: record.event_key.clone(),
            effect_id: effect_id.to_string(),
            labels: record.labels.clone(),
            written_at_ms: now_ms,
        }
    }

    /// The label `name`, empty if absent.
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }
}

impl IdempotencyRecord {
    /// The label `name`, empty if absent.
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }
}

/// The natural key of an event (signal 4): what identifies the business event apart from its
/// event key (on the truck-slot path the subject and the window start). The gate's guard
/// writes it before the call as an item `"{integration}#nk#{key}"` holding the first event key
/// that held it ([`crate::store::IdempotencyStore::guard`]), so a second event key for the same
/// event goes to a person before it is called (a natural-key collision).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NaturalKey {
    /// The key, e.g. `"{subject}#{window start}"`.
    pub key: String,
    /// Labels stored on the item for whoever reads it (e.g. `subject`, `window_start`).
    pub labels: Labels,
    /// The item's TTL, epoch **seconds** ([`natural_key_expires_at_s`]).
    pub expires_at_s: i64,
}

/// Whether `record` is a routing record (its operation is a manual-queue send, see "Routing to a
/// person exactly once" in `crate::routing`): resuming it sends its stored item; it is never
/// claimed at the server.
pub(crate) fn is_routing_record(record: &IdempotencyRecord) -> bool {
    record.op_key == keys::operation_key(&record.event_key, keys::MANUAL_ROUTE)
}

/// 21 days in seconds: the default key TTL, longer than the longest redelivery horizon. A
/// notification can wait 4 days in the notification queue, then up to 14 days (the SQS maximum
/// `MessageRetentionPeriod`) in its dead-letter queue, and a redrive sends it back as a new message with 4
/// more days: 18 days, plus 3 days of margin. A record that expired would let a redelivery claim
/// again under a key the server forgot long ago.
pub const DEFAULT_KEY_TTL_S: i64 = 21 * 24 * 3600;

/// A natural-key item's TTL, epoch **seconds**: [`DEFAULT_KEY_TTL_S`] after the
/// later of `now_ms` (epoch ms) and the event's end `ends_at_ms` (epoch ms; `None` counts as now),
/// as long as a redelivery of the event can still come back.
pub fn natural_key_expires_at_s(ends_at_ms: Option<i64>, now_ms: i64) -> i64 {
    ms_to_s(now_ms).max(ends_at_ms.map_or(0, ms_to_s)) + DEFAULT_KEY_TTL_S
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_label_named_like_a_row_column_is_refused_at_start() {
        let columns = RowColumns::NEUTRAL;
        assert_eq!(columns.validate_labels(&["invoice", "customer"]), Ok(()));
        let err = columns
            .validate_labels(&["invoice", "written_at"])
            .unwrap_err();
        assert!(err.contains("\"written_at\""), "{err}");
        assert!(RowColumns::LEGACY.validate_labels(&["written_at"]).is_ok());
        assert!(RowColumns::LEGACY
            .validate_labels(&[RowColumns::LEGACY.effect_id])
            .is_err());
    }

    use super::*;

    #[test]
    fn shards_cover_00_to_15() {
        assert_eq!(inflight_shard("00ab"), "00");
        assert_eq!(inflight_shard("0f"), "15");
        assert_eq!(inflight_shard("10"), "00");
        assert_eq!(inflight_shard("ff"), "15");
        assert_eq!(inflight_shard("1a"), "10");
    }

    #[test]
    fn status_round_trips() {
        for s in [
            RecordStatus::InFlight,
            RecordStatus::Committed,
            RecordStatus::Failed,
            RecordStatus::Manual,
        ] {
            assert_eq!(RecordStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(RecordStatus::parse("pending"), None);
    }
}
