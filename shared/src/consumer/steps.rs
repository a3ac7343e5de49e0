//! The four steps as functions ([`derive_keys`], [`reserve`], [`claim`], [`commit`]) and what
//! the consumer does between them: the record it reserves, the conflicts of step 2, and the
//! choice between a claim and a lookup (the claim horizon, the window's end).

use tracing::{info, warn};

use super::{Delivery, Gate, Invocation, RecordOutcome};
use crate::clock::ms_to_s;
use crate::effect::{ClaimOutcome, LookupOutcome};
use crate::integration::{Event, Integration};
use crate::keys;
use crate::manual::{ManualItem, ManualReason};
use crate::record::{inflight_shard, record_pk, IdempotencyRecord, RecordStatus};
use crate::routing::is_routing_record;
use crate::store::{CommitOutcome, IdempotencyStore, Reservation, StoreError, TakeOver};

/// The keys of step 1.
#[derive(Clone)]
pub struct DerivedKeys {
    /// Lowercase hex SHA-256 of `"{notificationId}:{equipment_number}"`.
    pub event_key: String,
    /// The slot claim's `Idempotency-Key`.
    pub op_key: String,
    /// SHA-256 hex of the canonical business fields.
    pub fingerprint: String,
    /// The claim request body (holds the PIN).
    pub request: Vec<u8>,
}

/// Step 1: derives the event key (from the event's key material), the operation key of
/// `operation` (the side effect's `Idempotency-Key`), the fingerprint (of the business fields)
/// and the request bytes from a parsed event. Never uses the SQS message id.
///
/// # Errors
/// Only if the business fields cannot be written as canonical JSON (RFC 8785 refuses no value
/// `serde_json` can hold but a number out of its range).
pub fn derive_keys(event: &Event, operation: &str) -> Result<DerivedKeys, serde_json::Error> {
    let event_key = keys::event_key_of_material(&event.key_material);
    Ok(DerivedKeys {
        op_key: keys::operation_key(&event_key, operation),
        fingerprint: keys::fingerprint_of(&event.business_fields)?,
        request: event.request.clone(),
        event_key,
    })
}

/// Step 2: reserves the key before any side effect: one conditional write that either stores
/// `record` or returns the record holding the key.
///
/// # Errors
/// A transient [`StoreError`].
pub async fn reserve(
    store: &dyn IdempotencyStore,
    record: &IdempotencyRecord,
    now_ms: i64,
) -> Result<Reservation, StoreError> {
    store.reserve(record, now_ms).await
}

/// Step 3: calls the side effect with the record's stored request bytes under its operation key.
pub async fn claim(integration: &dyn Integration, record: &IdempotencyRecord) -> ClaimOutcome {
    integration.call(record).await
}

/// Step 4: commits the effect `slot_id`, the integration's business row and its natural key (if
/// any) in one transaction, only while `owner` holds the record's lease (`in_flight`,
/// `lease_owner = owner`: a holder whose lease was taken over is refused).
///
/// # Errors
/// A transient [`StoreError`], or [`StoreError::Corrupt`] when a row exists without its record.
pub async fn commit(
    store: &dyn IdempotencyStore,
    integration: &dyn Integration,
    record: &IdempotencyRecord,
    owner: &str,
    slot_id: &str,
    now_ms: i64,
) -> Result<CommitOutcome, StoreError> {
    let row = integration.business_row(record, slot_id, now_ms);
    let natural_key = integration.natural_key(&row, record);
    store
        .commit(
            &record.pk,
            owner,
            slot_id,
            &row,
            natural_key.as_ref(),
            now_ms,
        )
        .await
}

impl Gate {
    /// Takes over for `invocation` (its request id the new owner, until [`Gate::lease_until`])
    /// the expired lease `old_owner` held on `pk`: the one conditional `UpdateItem` the consumer,
    /// the manual routing and the reconciler all resume a record with.
    pub(crate) async fn take_over_for(
        &self,
        pk: &str,
        old_owner: Option<&str>,
        invocation: &Invocation,
        now_ms: i64,
    ) -> Result<TakeOver, StoreError> {
        self.store
            .take_over(
                pk,
                old_owner.unwrap_or_default(),
                &invocation.request_id,
                self.lease_until(invocation, now_ms),
                now_ms,
            )
            .await
    }

    /// The lease end for a record started at `now_ms` in `invocation`: the invocation's deadline,
    /// but at least `now + lease_floor` (epoch ms).
    pub fn lease_until(&self, invocation: &Invocation, now_ms: i64) -> i64 {
        invocation
            .deadline_ms
            .max(now_ms.saturating_add(self.config.lease_floor_ms))
    }

    /// When a record for an event ending at `ends_at_ms` (epoch ms, [`Event::ends_at_ms`]),
    /// reserved at `now_ms` (epoch ms), expires, epoch **seconds**: the key TTL counted from the
    /// later of now and the event's end. A record must outlive the event it guards: until the
    /// event ends a redelivery can still act, and after it every copy is rejected as ended on the
    /// event's own record, which must still be there to say "committed" for the whole redelivery
    /// horizon the TTL covers.
    pub fn record_expiry_s(&self, ends_at_ms: Option<i64>, now_ms: i64) -> i64 {
        let from = ends_at_ms.map_or(ms_to_s(now_ms), |end| ms_to_s(now_ms).max(ms_to_s(end)));
        from + self.config.key_ttl_s
    }

    /// Whether the server of `record`'s side effect honours `Idempotency-Key`: the integration's
    /// answer for the record ([`Integration::supports_idempotency_key`]), else
    /// `config.terminal_supports_idempotency_key`.
    pub(crate) fn supports_idempotency_key(&self, record: &IdempotencyRecord) -> bool {
        self.integration
            .supports_idempotency_key(record)
            .unwrap_or(self.config.terminal_supports_idempotency_key)
    }

    /// The claim horizon of `record`, **milliseconds**: the integration's for the record
    /// ([`Integration::claim_horizon_ms`], e.g. its terminal's key retention minus the margin),
    /// else `config.claim_horizon_ms`.
    pub(crate) fn claim_horizon_ms(&self, record: &IdempotencyRecord) -> i64 {
        self.integration
            .claim_horizon_ms(record)
            .unwrap_or(self.config.claim_horizon_ms)
    }

    /// Whether the event `record` guards has ended at `now_ms` (epoch ms): no side effect is
    /// ever started after it, only a lookup. `false` for a record without an end (a routing
    /// record).
    pub(crate) fn event_ended(&self, record: &IdempotencyRecord, now_ms: i64) -> bool {
        self.integration
            .ends_at_ms(record)
            .is_some_and(|end| end <= now_ms)
    }

    /// The end of the event `record` guards as RFC 3339 UTC (`2025-06-09T10:00:00Z`), for a
    /// person's detail; `unknown` without one.
    pub(crate) fn event_end_text(&self, record: &IdempotencyRecord) -> String {
        self.integration
            .ends_at_ms(record)
            .and_then(chrono::DateTime::from_timestamp_millis)
            .map_or_else(
                || "unknown".to_string(),
                |t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
            )
    }

    /// Builds the record that step 2 reserves for `event`.
    pub fn new_record(
        &self,
        event: &Event,
        keys: &DerivedKeys,
        invocation: &Invocation,
        now_ms: i64,
    ) -> IdempotencyRecord {
        IdempotencyRecord {
            pk: record_pk(&self.config.integration, &keys.event_key),
            event_key: keys.event_key.clone(),
            status: RecordStatus::InFlight,
            fingerprint: keys.fingerprint.clone(),
            request: keys.request.clone(),
            op_key: keys.op_key.clone(),
            lease_owner: Some(invocation.request_id.clone()),
            lease_until_ms: Some(self.lease_until(invocation, now_ms)),
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            expires_at_s: self.record_expiry_s(event.ends_at_ms, now_ms),
            slot_id: None,
            slot_ids: Default::default(),
            inflight_shard: Some(inflight_shard(&keys.event_key)),
            error: None,
            route_pending: false,
            labels: event.labels.clone(),
        }
    }

    /// The conflict cases of step 2: the old record decides. `Ok(record)` means we took over an
    /// expired lease and resume from the stored request; `Err(outcome)` ends the record.
    pub(crate) async fn resolve_conflict(
        &self,
        existing: IdempotencyRecord,
        keys: &DerivedKeys,
        d: Delivery<'_>,
        now: i64,
    ) -> Result<IdempotencyRecord, RecordOutcome> {
        let Delivery {
            body,
            message_id,
            invocation,
        } = d;
        if existing.fingerprint != keys.fingerprint {
            warn!(event_key = %keys.event_key, message_id, "same event key, other fingerprint: mismatch");
            let item = ManualItem {
                reason: ManualReason::Mismatch,
                detail: format!(
                    "event key {} already reserved with fingerprint {}, this body has {}",
                    keys.event_key, existing.fingerprint, keys.fingerprint
                ),
                original_body: body.to_string(),
                event_key: Some(keys.event_key.clone()),
                message_id: message_id.to_string(),
                original_body_cut: None,
            };
            let route_key = keys::mismatch_route_key(&keys.event_key, &keys.fingerprint);
            return Err(
                match self
                    .route_once(&route_key, &keys.fingerprint, item, invocation, now)
                    .await
                {
                    Ok(()) => RecordOutcome::Mismatch,
                    Err(e) => RecordOutcome::Retry(e),
                },
            );
        }
        if !existing.has_work() {
            return Err(RecordOutcome::Duplicate(existing.status));
        }
        if existing.lease_is_live(now) {
            return Err(RecordOutcome::DuplicateInFlight);
        }
        match self
            .take_over_for(
                &existing.pk,
                existing.lease_owner.as_deref(),
                invocation,
                now,
            )
            .await
        {
            Ok(TakeOver::Taken(record)) => {
                let old_owner = existing.lease_owner.as_deref().unwrap_or_default();
                info!(event_key = %keys.event_key, message_id, old_owner, "took over an expired lease");
                Ok(*record)
            }
            Ok(TakeOver::Refused) => Err(RecordOutcome::DuplicateInFlight),
            Err(e) => Err(RecordOutcome::Retry(e.to_string())),
        }
    }

    /// From a record we hold the lease of: manual routing without key support, step 3, step 4.
    pub(crate) async fn claim_and_commit(
        &self,
        record: &IdempotencyRecord,
        d: Delivery<'_>,
    ) -> RecordOutcome {
        let Delivery {
            message_id,
            invocation,
            ..
        } = d;
        if record.route_pending || is_routing_record(record) {
            return match self.resume_routing(record, message_id, invocation).await {
                Ok(reason) => RecordOutcome::Manual(reason),
                Err(e) => RecordOutcome::Retry(e),
            };
        }
        if !self.supports_idempotency_key(record) {
            return self
                .route_held_record(
                    record,
                    RecordStatus::Manual,
                    ManualReason::NoIdempotencySupport,
                    "the terminal does not honour Idempotency-Key; book by hand".into(),
                    d,
                )
                .await;
        }
        let now = self.clock.now_ms();
        let age = now.saturating_sub(record.created_at_ms);
        let past_horizon = age >= self.claim_horizon_ms(record);
        let ended = self.event_ended(record, now);
        if past_horizon || ended {
            // A record resumed days later (a redelivery after the terminal's key retention), or
            // after its window ended: never claim again; find the slot the key may hold, or hand
            // it to a person.
            let outcome = match self.integration.lookup(record).await {
                LookupOutcome::Found(slot) => ClaimOutcome::Claimed(slot),
                LookupOutcome::Transient(why) => ClaimOutcome::Transient(why),
                LookupOutcome::NotFound => {
                    let (reason, detail) = if past_horizon {
                        (
                            ManualReason::PastKeyRetention,
                            format!(
                                "in_flight for {} s, past the terminal's key retention minus \
                                 margin, and no slot under Idempotency-Key {}: look the key up \
                                 at the terminal before booking by hand (a new claim could make \
                                 a second slot)",
                                age / 1000,
                                record.op_key
                            ),
                        )
                    } else {
                        (
                            ManualReason::WindowEnded,
                            format!(
                                "in_flight when its window ended ({}); no slot under \
                                 Idempotency-Key {}: never claimed after the window's end",
                                self.event_end_text(record),
                                record.op_key
                            ),
                        )
                    };
                    return self
                        .route_held_record(record, RecordStatus::Manual, reason, detail, d)
                        .await;
                }
            };
            return self.settle_claim(record, outcome, d).await;
        }
        // Step 3.
        let outcome = claim(self.integration.as_ref(), record).await;
        self.settle_claim(record, outcome, d).await
    }
}
