//! The four steps as functions ([`derive_keys`], [`reserve`], [`claim`], [`commit`]) and what
//! the consumer does between them: the record it reserves, the conflicts of step 2, and the one
//! decision for a held record ([`crate::decision`]) carried out ([`Gate::proceed`]) for the
//! consumer and the reconciler.

use tracing::{info, warn};

use super::RecordOutcome;
use crate::clock::ms_to_s;
use crate::decision::{decide, Handover, Holder, IfFailed, NextStep, Policy};
use crate::effect::{AnswerDetail, CallOutcome, LookupOutcome};
use crate::gate::{Delivery, Gate, Invocation};
use crate::integration::{Event, Held, Integration};
use crate::keys;
use crate::manual::{ManualItem, ManualReason};
use crate::record::{inflight_shard, record_pk, IdempotencyRecord, NaturalKey, RecordStatus};
use crate::store::{
    CommitOutcome, GuardOutcome, IdempotencyStore, Reservation, StoreError, TakeOver,
};

/// The keys of step 1.
#[derive(Clone)]
pub struct DerivedKeys {
    /// Lowercase hex SHA-256 of `"{notificationId}:{subject}"`.
    pub event_key: String,
    /// The side effect's `Idempotency-Key`.
    pub op_key: String,
    /// SHA-256 hex of the canonical business fields.
    pub fingerprint: String,
    /// The request body for the side effect, built once here ([`Event::request`]); secret
    /// (it may hold credentials: an API key or a PIN).
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
/// `record` or returns the record holding the key. (The consumer asks for a new record's guard in
/// the same call, [`IdempotencyStore::reserve_with_guard`]: one round trip for both where the
/// store merges them.)
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

/// Step 3: calls the side effect with the held record's stored request bytes under its
/// operation key. Only with the gate's proof that the record's lease is held ([`Held`]).
pub async fn claim(integration: &dyn Integration, held: &Held<'_>) -> CallOutcome {
    integration.call(held).await
}

/// Step 4: commits the effect `effect_id` and the integration's business row in one transaction,
/// only while `owner` holds the record's lease (`in_flight`, `lease_owner = owner`: a holder
/// whose lease was taken over is refused). The natural key is not part of it: it was held as a
/// guard before the call (`Gate::guard_natural_key`, [`IdempotencyStore::guard`]).
///
/// # Errors
/// A transient [`StoreError`], or [`StoreError::Corrupt`] when a row exists without its record.
pub async fn commit(
    store: &dyn IdempotencyStore,
    integration: &dyn Integration,
    record: &IdempotencyRecord,
    owner: &str,
    effect_id: &str,
    now_ms: i64,
) -> Result<CommitOutcome, StoreError> {
    let row = integration.business_row(record, effect_id, now_ms);
    store
        .commit(&record.pk, owner, effect_id, &row, now_ms)
        .await
}

impl Gate {
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
            lease_until_ms: Some(self.lease_until(now_ms)),
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            expires_at_s: self.record_expiry_s(event.ends_at_ms, now_ms),
            effect_id: None,
            effect_ids: Default::default(),
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
            if existing.status == RecordStatus::Committed && existing.effect_id.is_none() {
                return Err(self
                    .committed_without_effect_id(&existing, keys, body, message_id, invocation, now)
                    .await);
            }
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

    /// A copy that met its record `committed` without an effect id (an older version's record,
    /// or one edited by hand): a duplicate all the same, never called (the effect may exist and
    /// only the effect id was lost), and a person told once per event key
    /// ([`keys::no_effect_id_route_key`], [`ManualReason::CommittedWithoutEffectId`]) with what
    /// the record knows. A failed routing is retried, as for a mismatch.
    async fn committed_without_effect_id(
        &self,
        existing: &IdempotencyRecord,
        keys: &DerivedKeys,
        body: &str,
        message_id: &str,
        invocation: &Invocation,
        now: i64,
    ) -> RecordOutcome {
        warn!(
            event_key = %keys.event_key,
            message_id,
            "a duplicate met its record committed without an effect id; acknowledged, not called"
        );
        let returned = if existing.effect_ids.is_empty() {
            "none recorded".to_string()
        } else {
            existing
                .effect_ids
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let detail = format!(
            "event key {} is committed without its effect id (last written at {} epoch ms; effect \
             ids the server returned: {returned}); its copies are acknowledged as duplicates and \
             not sent. Ask the server which effect it holds under Idempotency-Key {}, then write \
             that effect id onto the record, or make the effect by hand if there is none",
            keys.event_key, existing.updated_at_ms, existing.op_key
        );
        let item = ManualItem {
            reason: ManualReason::CommittedWithoutEffectId,
            detail,
            original_body: body.to_string(),
            event_key: Some(keys.event_key.clone()),
            message_id: message_id.to_string(),
            original_body_cut: None,
        };
        let route_key = keys::no_effect_id_route_key(&keys.event_key);
        match self
            .route_once(&route_key, &keys.fingerprint, item, invocation, now)
            .await
        {
            Ok(()) => RecordOutcome::DuplicateWithoutEffectId,
            Err(e) => RecordOutcome::Retry(e),
        }
    }

    /// From a record `d` holds the lease of, at `now_ms` (epoch ms): the one decision for
    /// `holder` ([`decide`]) carried out: the routing resumed, step 3 (or the lookup) and step 4,
    /// or the record handed to a person. Returns the outcome and whether the effect was found
    /// by a lookup. Shared by the consumer and the reconciler.
    ///
    /// `guarded`: the guard's answer when the reserve that gave us `record` asked for it
    /// ([`IdempotencyStore::reserve_with_guard`], only for a new record the decision would send);
    /// settled before the call instead of a second guard. `None`: the guard is put here, before
    /// the call. (A record guarded at its reserve whose decision is no longer a call, its event
    /// having ended in between, keeps the guard it never uses: every other event key for that
    /// event has ended too, so none is refused for it.)
    pub(crate) async fn proceed(
        &self,
        record: &IdempotencyRecord,
        holder: Holder,
        now_ms: i64,
        d: Delivery<'_>,
        guarded: Option<Result<GuardOutcome, StoreError>>,
    ) -> (RecordOutcome, bool) {
        // The lease is ours here: the reserve or the take-over that gave us `record`.
        let held = Held::new(record);
        let policy = self.policy(record);
        let step = decide(record, now_ms, &policy, holder);
        let outcome = match step {
            NextStep::ResumeRouting => {
                match self
                    .resume_routing(record, d.message_id, d.invocation)
                    .await
                {
                    Ok(reason) => RecordOutcome::Manual(reason),
                    Err(e) => RecordOutcome::Retry(e),
                }
            }
            NextStep::ToPerson(handover) => {
                self.hand_over(record, handover, &policy, now_ms, None, d)
                    .await
            }
            // Step 3, once the natural key is ours (signal 4's guard) and the lease left covers
            // the call and the commit (extended first if not).
            NextStep::Call => match self.guard_natural_key(record, guarded, d).await {
                Some(stop) => stop,
                None => match self.lease_for_call(record, d.owner()).await {
                    Some(stop) => stop,
                    None => {
                        let outcome = claim(self.integration.as_ref(), &held).await;
                        self.settle_claim(record, outcome, d).await
                    }
                },
            },
            NextStep::LookUp {
                if_not_found,
                if_failed,
            } => match crate::integration::look_up(self.integration.as_ref(), &held).await {
                LookupOutcome::Found(effect) => {
                    let outcome = self
                        .settle_claim(record, CallOutcome::Done(effect), d)
                        .await;
                    return (outcome, true);
                }
                LookupOutcome::EffectRefused(why) => {
                    self.settle_claim(record, CallOutcome::EffectRefused(why), d)
                        .await
                }
                LookupOutcome::NotFound => {
                    self.hand_over(record, if_not_found, &policy, now_ms, None, d)
                        .await
                }
                LookupOutcome::Transient(why) => match if_failed {
                    IfFailed::Retry => {
                        self.settle_claim(record, CallOutcome::Transient(why), d)
                            .await
                    }
                    IfFailed::ToPerson(handover) => {
                        self.hand_over(record, handover, &policy, now_ms, Some(&why), d)
                            .await
                    }
                },
            },
        };
        (outcome, false)
    }

    /// The natural-key item the guard of `record` puts at `now_ms` (epoch ms): the
    /// integration's ([`Integration::natural_key`]), expiring no earlier than `record` (its
    /// `expires_at_s`, from the configured key TTL), whatever the integration's
    /// [`crate::record::NaturalKey::expires_at_s`] says. `None`: the integration has none.
    pub(crate) fn guard_key(&self, record: &IdempotencyRecord, now_ms: i64) -> Option<NaturalKey> {
        let mut natural_key = self.integration.natural_key(record, now_ms)?;
        // The guard outlives the record it guards: the integration counts its TTL from the
        // gate's default key TTL, the record from the configured one (`KeyTtlSeconds`), which
        // may be longer; a guard that expired first would let a second event key claim while
        // the first's record still answers its redeliveries.
        natural_key.expires_at_s = natural_key.expires_at_s.max(record.expires_at_s);
        Some(natural_key)
    }

    /// The guard of signal 4 before a call: holds the record's natural key
    /// ([`Gate::guard_key`]) for its event key ([`IdempotencyStore::guard`], or the answer
    /// `guarded` its reserve already got). `None`: the guard is ours (or the integration has no
    /// natural key), call. Otherwise the outcome that ends the record: another event key holds
    /// the natural key, so the record goes to a person as `manual` with both event keys
    /// ([`ManualReason::NaturalKeyCollision`]) and is never called; or a store failure
    /// (retried, the lease released).
    ///
    /// The same event key is the same holder: a redelivery, a take-over and the reconciler
    /// resuming a record whose holder crashed all find the guard theirs.
    pub(crate) async fn guard_natural_key(
        &self,
        record: &IdempotencyRecord,
        guarded: Option<Result<GuardOutcome, StoreError>>,
        d: Delivery<'_>,
    ) -> Option<RecordOutcome> {
        let now = self.clock.now_ms();
        let natural_key = self.guard_key(record, now)?;
        let answer = match guarded {
            Some(answer) => answer,
            None => self.store.guard(record, &natural_key, now).await,
        };
        let other_event_key = match answer {
            Ok(GuardOutcome::Held) => return None,
            Ok(GuardOutcome::Collision { other_event_key }) => other_event_key,
            Err(StoreError::Refused(refusal)) => {
                let detail = format!("the natural-key item cannot be stored: {refusal}");
                return Some(
                    self.route_held_record(
                        record,
                        RecordStatus::Manual,
                        ManualReason::Rejected,
                        detail,
                        d,
                    )
                    .await,
                );
            }
            Err(e) => {
                let owner = d.invocation.request_id.as_str();
                return Some(self.release(record, owner, e.to_string()).await);
            }
        };
        warn!(
            event_key = %record.event_key,
            other_event_key = %other_event_key,
            subject = %self.integration.subject(record),
            labels = ?record.labels,
            message_id = d.message_id,
            "natural-key collision: another event key holds this natural key; to a person, not called"
        );
        let detail = format!(
            "natural key {} is held by event key {other_event_key}; this event key {} was not \
             called (two event keys for one event: a broken key derivation, or the event re-sent \
             under a new id). Book it by hand if it is a real second event, else drop it",
            natural_key.key, record.event_key
        );
        Some(
            self.route_held_record(
                record,
                RecordStatus::Manual,
                ManualReason::NaturalKeyCollision,
                detail,
                d,
            )
            .await,
        )
    }

    /// Routes a held record to a person as `manual` with the hand-over's reason and text
    /// ([`Handover::detail`]; `failure`: a failed lookup's answer).
    async fn hand_over(
        &self,
        record: &IdempotencyRecord,
        handover: Handover,
        policy: &Policy,
        now_ms: i64,
        failure: Option<&AnswerDetail>,
        d: Delivery<'_>,
    ) -> RecordOutcome {
        let detail = handover.detail(record, policy, now_ms, failure);
        self.route_held_record(record, RecordStatus::Manual, handover.reason(), detail, d)
            .await
    }
}
