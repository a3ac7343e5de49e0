//! The idempotency record, its states, and the TMS booking.
//!
//! Units, never mixed: `expires_at_s` is **epoch seconds** (the DynamoDB TTL attribute);
//! `lease_until_ms`, `created_at_ms`, `updated_at_ms` and `booked_at_ms` are **epoch
//! milliseconds**.

use std::collections::BTreeSet;
use std::fmt;

use crate::clock::ms_to_s;

/// Number of shards of the sparse GSI `InFlight`: `inflight_shard` is `"00"`..`"15"`.
pub const INFLIGHT_SHARDS: u8 = 16;

/// The state of an idempotency record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordStatus {
    /// Reserved; the claim may or may not have reached the terminal. Carries a lease.
    InFlight,
    /// The slot is claimed and the TMS booking written (in one transaction).
    Committed,
    /// A permanent error; replayed to duplicates, the event sits in the manual queue.
    Failed,
    /// Routed to a person (e.g. a terminal without Idempotency-Key support).
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
/// `Debug` redacts `request`, which holds the release PIN.
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
    /// The exact claim request body, built once at reservation. Secret (holds the PIN).
    pub request: Vec<u8>,
    /// The `Idempotency-Key` sent to the terminal.
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
    /// The committed slot.
    pub slot_id: Option<String>,
    /// Every slot id the terminal ever returned for this key; more than one is the distinct-slot
    /// signal.
    pub slot_ids: BTreeSet<String>,
    /// `"00"`..`"15"`, present only while `in_flight` (the sparse GSI's partition key).
    pub inflight_shard: Option<String>,
    /// The permanent error, for `failed` and `manual`.
    pub error: Option<String>,
    /// A `failed` or `manual` record whose manual item (then in `request`) is not yet confirmed
    /// in the manual queue: it keeps its lease and its `InFlight` shard until the send is
    /// confirmed ([`crate::store::IdempotencyStore::routed`]); whoever takes it over sends the
    /// item again. Stored as `route_pending = "1"`, absent otherwise.
    pub route_pending: bool,
    /// The container (canonical ISO 6346), for the TMS booking.
    pub container: String,
    /// The terminal code, for the TMS booking.
    pub terminal: String,
    /// Window start, RFC 3339 UTC, for the TMS booking.
    pub window_start: String,
    /// Window end, RFC 3339 UTC, for the TMS booking.
    pub window_end: String,
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
            .field("slot_id", &self.slot_id)
            .field("slot_ids", &self.slot_ids)
            .field("inflight_shard", &self.inflight_shard)
            .field("error", &self.error)
            .field("route_pending", &self.route_pending)
            .field("container", &self.container)
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

/// A row of the TMS bookings table (partition key `source_event` = the event key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TmsBooking {
    /// The event key.
    pub source_event: String,
    /// The container (canonical ISO 6346).
    pub container: String,
    /// The slot the terminal issued.
    pub slot_id: String,
    /// The terminal code.
    pub terminal: String,
    /// Window start, RFC 3339 UTC.
    pub window_start: String,
    /// Window end, RFC 3339 UTC.
    pub window_end: String,
    /// When the booking was written, epoch milliseconds.
    pub booked_at_ms: i64,
}

impl TmsBooking {
    /// The booking for `record` with `slot_id`, written at `now_ms` (epoch ms).
    pub fn for_record(record: &IdempotencyRecord, slot_id: &str, now_ms: i64) -> Self {
        Self {
            source_event: record.event_key.clone(),
            container: record.container.clone(),
            slot_id: slot_id.to_string(),
            terminal: record.terminal.clone(),
            window_start: record.window_start.clone(),
            window_end: record.window_end.clone(),
            booked_at_ms: now_ms,
        }
    }
}

#[cfg(test)]
mod tests {
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
