//! After the side effect: a claim's outcome settled for a record the invocation holds. An effect is
//! committed (step 4), a transient failure releases the lease, a permanent one routes the record
//! to a person; a refused commit is re-read and acted on (someone else committed, the record was
//! finished meanwhile, or our lease was taken over).

use tracing::warn;

use super::RecordOutcome;
use crate::effect::{CallOutcome, Effect};
use crate::gate::{Delivery, Gate};
use crate::keys;
use crate::manual::{ManualItem, ManualReason};
use crate::record::{IdempotencyRecord, RecordStatus};
use crate::store::{CommitOutcome, StoreError};

use super::steps::commit;

impl Gate {
    /// Acts on a claim's outcome for a record `owner` holds: commit an effect (step 4), release the
    /// lease on a transient failure, or route a permanent one to the manual queue. Shared by the
    /// consumer and the reconciler. `body` is what the manual queue gets as the original body.
    pub(crate) async fn settle_claim(
        &self,
        record: &IdempotencyRecord,
        outcome: CallOutcome,
        d: Delivery<'_>,
    ) -> RecordOutcome {
        let Delivery {
            body,
            message_id,
            invocation,
        } = d;
        let owner = invocation.request_id.as_str();
        let effect = match outcome {
            CallOutcome::Done(effect) => effect,
            // Logged and reported: the summary only, never a character of the answer.
            CallOutcome::Transient(why) => {
                return self.release(record, owner, why.to_string()).await
            }
            CallOutcome::KeyInFlight => {
                return self
                    .release(record, owner, "server: same key still in flight".into())
                    .await
            }
            CallOutcome::KeyMismatch(detail) => {
                return self
                    .route_held_record(
                        record,
                        RecordStatus::Failed,
                        ManualReason::ServerKeyMismatch,
                        format!("server: key reused with another body: {detail}"),
                        d,
                    )
                    .await
            }
            CallOutcome::Permanent { detail, .. } => {
                return self
                    .route_held_record(
                        record,
                        RecordStatus::Failed,
                        ManualReason::ServerRejected,
                        detail.to_string(),
                        d,
                    )
                    .await
            }
            CallOutcome::Declined { detail, .. } => {
                return self
                    .route_held_record(
                        record,
                        RecordStatus::Failed,
                        ManualReason::Declined,
                        detail.to_string(),
                        d,
                    )
                    .await
            }
            // The effect exists, but its id may not be kept: a person, told how to see it.
            CallOutcome::EffectRefused(detail) => {
                return self
                    .route_held_record(
                        record,
                        RecordStatus::Failed,
                        ManualReason::ServerAnswerInvalid,
                        format!(
                            "{detail}; see the server's answer live with `gatectl lookup {}` \
                             (Idempotency-Key {}), then make the effect by hand or undo it at \
                             the server",
                            record.event_key, record.op_key
                        ),
                        d,
                    )
                    .await
            }
        };
        if effect.effect_id.is_empty()
            || effect.effect_id.len() > crate::store::limits::MAX_EFFECT_ID_BYTES
        {
            // An effect was made, but its id is empty (DynamoDB refuses an empty string in the
            // record's `effect_ids` set: a `ValidationException` every time) or longer than a
            // record keeps (the record's size is bounded, `crate::store::limits`): never
            // committed, never recorded; a person decides. The id is not quoted (the server's
            // answer).
            let detail = format!(
                "server answered an effect id of {} bytes; the gate records 1 to {}",
                effect.effect_id.len(),
                crate::store::limits::MAX_EFFECT_ID_BYTES
            );
            return self
                .route_held_record(
                    record,
                    RecordStatus::Failed,
                    ManualReason::ServerAnswerInvalid,
                    detail,
                    d,
                )
                .await;
        }
        let subject = self.integration.subject(record);
        if let Some(other) = effect
            .subject
            .as_deref()
            .filter(|e| !subject.is_empty() && *e != subject)
        {
            // An effect was made, but not for our subject: never committed, never recorded in
            // `effect_ids` (whoever holds the record commits a recorded effect); a person decides.
            // `other` is the server's text: named by its keyed digest only.
            let detail = format!(
                "the server answered effect {} for another subject (keyed SHA-256 {}), asked \
                 for {}; see it live with `gatectl lookup {}`",
                effect.effect_id,
                crate::idempotency_key::answer_digest(other.as_bytes()),
                subject,
                record.event_key
            );
            let outcome = self
                .route_held_record(
                    record,
                    RecordStatus::Failed,
                    ManualReason::ServerAnswerInvalid,
                    detail.clone(),
                    d,
                )
                .await;
            if let RecordOutcome::Manual(_) = outcome {
                // Finished as `failed` (no longer committable): keep the id with the record for
                // the person who cancels it (best effort, the item quotes it too).
                if let Err(e) = self
                    .store
                    .record_effect_id(&record.pk, &effect.effect_id, self.clock.now_ms())
                    .await
                {
                    warn!(event_key = %record.event_key, error = %e, "effect id not added to the record's effect ids");
                }
            }
            if !matches!(outcome, RecordOutcome::LeaseLost { .. }) {
                return outcome;
            }
            // The record is someone else's now, but this effect is only known here: a person
            // gets it once (keyed by the effect), to cancel it at the server.
            let item = ManualItem {
                reason: ManualReason::UnrecordedEffect,
                detail: format!(
                    "{detail}; the record was taken over meanwhile: cancel this effect"
                ),
                original_body: body.to_string(),
                event_key: Some(record.event_key.clone()),
                message_id: message_id.to_string(),
                original_body_cut: None,
            };
            let route_key = keys::unrecorded_effect_route_key(&record.event_key, &effect.effect_id);
            let fingerprint = keys::sha256_hex(effect.effect_id.as_bytes());
            let now = self.clock.now_ms();
            return match self
                .route_once(&route_key, &fingerprint, item, invocation, now)
                .await
            {
                Ok(()) => RecordOutcome::Manual(ManualReason::UnrecordedEffect),
                Err(e) => RecordOutcome::Retry(e),
            };
        }
        // Step 4.
        self.commit_effect(record, &effect, d).await
    }

    /// Step 4 for an effect `invocation` holds the record for, and what a refused commit means (the
    /// refusal carries the record as it is, so we re-read before acting):
    ///
    /// * committed (by someone else): the same effect is a plain duplicate; another effect id is
    ///   recorded (the distinct-effect signal);
    /// * `failed`/`manual`: the effect is unbooked; a person gets it once
    ///   ([`Gate::route_unrecorded_effect`]);
    /// * still `in_flight` under another holder (our lease was taken over): our effect id is
    ///   recorded on the record, so its holder commits it instead of routing the record to a
    ///   person ([`FinishGuard::LeaseAndNoEffect`]); [`RecordOutcome::LeaseLost`].
    pub(crate) async fn commit_effect(
        &self,
        record: &IdempotencyRecord,
        effect: &Effect,
        d: Delivery<'_>,
    ) -> RecordOutcome {
        let owner = d.invocation.request_id.as_str();
        let now = self.clock.now_ms();
        let committed = commit(
            self.store.as_ref(),
            self.integration.as_ref(),
            record,
            owner,
            &effect.effect_id,
            now,
        )
        .await;
        let existing = match committed {
            Ok(CommitOutcome::Committed) => {
                return RecordOutcome::Committed {
                    effect_id: effect.effect_id.clone(),
                }
            }
            Ok(CommitOutcome::Refused(existing)) => *existing,
            Err(e @ (StoreError::Corrupt(_) | StoreError::Refused(_) | StoreError::Invalid(_))) => {
                let detail = match e {
                    StoreError::Corrupt(detail) => detail.to_string(),
                    other => other.to_string(),
                };
                return self
                    .route_held_record(
                        record,
                        RecordStatus::Failed,
                        ManualReason::ServerAnswerInvalid,
                        format!(
                            "effect {} made but cannot be committed: {detail}",
                            effect.effect_id
                        ),
                        d,
                    )
                    .await;
            }
            Err(e) => return self.release(record, owner, e.to_string()).await,
        };
        let existing = if existing.status == RecordStatus::InFlight {
            // Our lease was taken over while the claim was on its way. Record the effect on the
            // record (one atomic ADD that returns the record after it) and act on what it says.
            warn!(
                event_key = %record.event_key,
                holder = ?existing.lease_owner,
                ours = %effect.effect_id,
                "commit refused: the lease was taken over; effect id recorded for the holder"
            );
            match self
                .store
                .record_effect_id(&record.pk, &effect.effect_id, self.clock.now_ms())
                .await
            {
                Ok(Some(after)) if after.status == RecordStatus::InFlight => {
                    return RecordOutcome::LeaseLost {
                        effect_id: Some(effect.effect_id.clone()),
                    }
                }
                Ok(Some(after)) => after,
                Ok(None) => {
                    return RecordOutcome::Retry(format!("record {} vanished", record.event_key))
                }
                Err(e) => return RecordOutcome::Retry(e.to_string()),
            }
        } else {
            existing
        };
        if existing.status != RecordStatus::Committed {
            return self
                .route_unrecorded_effect(record, &existing, effect, d)
                .await;
        }
        let mut distinct_effect_ids = existing.effect_ids.len().max(1);
        if existing.effect_id.as_deref() != Some(effect.effect_id.as_str()) {
            warn!(
                event_key = %record.event_key,
                committed = ?existing.effect_id,
                ours = %effect.effect_id,
                "server returned another effect id for a committed key"
            );
            match self
                .store
                .record_effect_id(&record.pk, &effect.effect_id, now)
                .await
            {
                Ok(after) => {
                    distinct_effect_ids = after.map_or(0, |r| r.effect_ids.len()).max(2);
                }
                Err(e) => return RecordOutcome::Retry(e.to_string()),
            }
        }
        RecordOutcome::AlreadyCommitted {
            effect_id: existing.effect_id.clone(),
            ours: effect.effect_id.clone(),
            distinct_effect_ids,
        }
    }

    /// Our claim returned `effect` but the record had meanwhile been finished as `failed` or
    /// `manual` by another holder (a take-over that routed it to a person, e.g. past the key's
    /// retention while our claim was still on its way): nothing will book that effect. A person gets
    /// it once per effect ([`keys::unrecorded_effect_route_key`], reason `unrecorded_effect`) to book it by
    /// hand or cancel it at the server; then its id is added to the record's `effect_ids`.
    ///
    /// The routing record is reserved first: once it exists, the item is durable (a crash after
    /// that is finished by the reconciler). Before it exists nothing else remembers this effect (a
    /// redelivery sees the finished record and is a duplicate), so a failure to reserve it is
    /// logged at `error` with the effect id and the key, and `Retry` is returned.
    pub(crate) async fn route_unrecorded_effect(
        &self,
        record: &IdempotencyRecord,
        existing: &IdempotencyRecord,
        effect: &Effect,
        d: Delivery<'_>,
    ) -> RecordOutcome {
        let Delivery {
            body,
            message_id,
            invocation,
        } = d;
        let now = self.clock.now_ms();
        warn!(
            event_key = %record.event_key,
            status = existing.status.as_str(),
            ours = %effect.effect_id,
            "the server made an effect for a record already finished; routed to a person"
        );
        let item = ManualItem {
            reason: ManualReason::UnrecordedEffect,
            detail: format!(
                "the server made effect {} under Idempotency-Key {} after the record was \
                 finished as {} ({}); nothing recorded it: record it by hand or undo it at the \
                 server",
                effect.effect_id,
                record.op_key,
                existing.status.as_str(),
                existing.error.as_deref().unwrap_or("no error recorded"),
            ),
            original_body: body.to_string(),
            event_key: Some(record.event_key.clone()),
            message_id: message_id.to_string(),
            original_body_cut: None,
        };
        let route_key = keys::unrecorded_effect_route_key(&record.event_key, &effect.effect_id);
        let fingerprint = keys::sha256_hex(effect.effect_id.as_bytes());
        if let Err(e) = self
            .route_once(&route_key, &fingerprint, item, invocation, now)
            .await
        {
            tracing::error!(
                event_key = %record.event_key,
                op_key = %record.op_key,
                effect_id = %effect.effect_id,
                error = %e,
                "an unrecorded effect could not be routed to a person: record or undo it by hand"
            );
            return RecordOutcome::Retry(e);
        }
        // Best effort, after the item is safe: the distinct-effect bookkeeping on the record.
        if let Err(e) = self
            .store
            .record_effect_id(&record.pk, &effect.effect_id, self.clock.now_ms())
            .await
        {
            warn!(event_key = %record.event_key, error = %e, "effect id not added to the record's effect ids");
        }
        RecordOutcome::Manual(ManualReason::UnrecordedEffect)
    }
}
