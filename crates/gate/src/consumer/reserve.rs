//! Steps 1 and 2 of the consumer: the keys of a parsed event ([`crate::consumer::derive_keys`]) and the record
//! reserved for it, or the conflict with the record that holds its key resolved (a duplicate, a
//! mismatch, or an expired lease taken over). Either way the consumer ends up holding the record
//! ([`crate::held::HeldRecord`]) or with the delivery's outcome.

use tracing::{info, warn};

use crate::decision::{decide, Holder, NextStep};
use crate::derive::DerivedKeys;
use crate::gate::{Delivery, Gate, Invocation};
use crate::held::Guarded;
use crate::integration::{Event, Rejection};
use crate::keys;
use crate::manual::{ManualItem, ManualReason};
use crate::outcome::RecordOutcome;
use crate::record::{IdempotencyRecord, RecordStatus};
use crate::routing::make_routing_record;
use crate::store::{Reservation, ReserveAndGuard, TakeOver};

impl Gate {
    /// Step 2: reserves the record for `event` (a routing record when it has `ended`), or
    /// resolves the conflict with the record that holds the key. `Ok((record, took_over,
    /// guarded))` when `d` holds the record now, `guarded` the answer of the guard asked for
    /// with the reserve (a new record whose decision is a call, with a natural key; see
    /// [`crate::store::IdempotencyStore::reserve_with_guard`]); `Err(outcome)` ends the delivery
    /// (a duplicate, a mismatch, a retry).
    pub(super) async fn reserve_or_resume(
        &self,
        event: &Event,
        keys: &DerivedKeys,
        ended: Option<&Rejection>,
        d: Delivery<'_>,
        now_ms: i64,
    ) -> Result<(IdempotencyRecord, bool, Guarded), RecordOutcome> {
        let mut fresh = self.config.new_record(event, keys, d.invocation, now_ms);
        if let Some(reason) = ended {
            let item = ManualItem {
                reason: ManualReason::EventEnded,
                detail: format!("{}: {reason}", reason.code()),
                original_body: d.body.to_string(),
                event_key: Some(keys.event_key.clone()),
                message_id: d.message_id.to_string(),
                original_body_cut: None,
            };
            make_routing_record(&mut fresh, &item, |r| {
                self.integration.manual_reason_code(r)
            });
        }
        // What the store would refuse every time (a label named like a store attribute, an item
        // over DynamoDB's limit in any state the gate writes it in) is rejected before the
        // reserve with its typed reason and routed to a person once: never a retry loop.
        let row = self.integration.business_row(&fresh, "", now_ms);
        let natural_key = self.integration.natural_key(&fresh, now_ms);
        if let Err(refusal) = crate::store::limits::check_new_event(
            &fresh,
            &row,
            natural_key.as_ref(),
            &self.store.row_columns(),
        ) {
            return Err(self.route_rejection(refusal.rejection(), d, now_ms).await);
        }
        // The guard goes with the reserve when the new record is to be called (the decision a
        // reserved record gets: not a routing record, not past its horizon or its end), so a
        // store that writes both in one request (PostgreSQL) spends one round trip on them; it
        // is written only if the reserve reserves, so a duplicate pays nothing for it.
        let calls = ended.is_none()
            && decide(&fresh, now_ms, &self.policy(&fresh), Holder::Consumer) == NextStep::Call;
        let guard_key = calls.then(|| self.guard_key(&fresh, now_ms)).flatten();
        match self
            .store
            .reserve_with_guard(&fresh, guard_key.as_ref(), now_ms)
            .await
        {
            Ok(ReserveAndGuard {
                reservation: Reservation::Reserved,
                guard,
            }) => Ok((fresh, false, guard)),
            Ok(ReserveAndGuard {
                reservation: Reservation::Conflict(existing),
                ..
            }) => self
                .resolve_conflict(*existing, keys, d, now_ms)
                .await
                .map(|record| (record, true, None)),
            // Refused by the service as invalid (DynamoDB's `ValidationException`, e.g. an item
            // the pre-check above did not size as DynamoDB does): the same write is refused every
            // time, so the event goes to a person once instead of retrying until its DLQ.
            Err(e) if !e.is_transient() => {
                let reason = Rejection {
                    code: STORE_REFUSED,
                    detail: e.to_string(),
                    ended: false,
                };
                Err(self.route_rejection(reason, d, now_ms).await)
            }
            Err(e) => Err(RecordOutcome::Retry(e.to_string())),
        }
    }

    /// The conflict cases of step 2: the old record decides. `Ok(record)` means we took over an
    /// expired lease and resume from the stored request; `Err(outcome)` ends the record.
    async fn resolve_conflict(
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
                    Err(e) => RecordOutcome::Retry(e.to_string()),
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
            Err(e) => RecordOutcome::Retry(e.to_string()),
        }
    }
}

/// The rejection code of an event whose reserve the store refused for good
/// ([`crate::store::StoreError::is_transient`] is `false`: a `ValidationException`, an item it
/// refuses).
pub(crate) const STORE_REFUSED: &str = "store_refused";
