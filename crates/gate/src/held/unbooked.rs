//! The settlement's rarer branches: an effect the gate cannot book as answered (an id it cannot
//! keep, another subject's effect) and a commit refused because the record changed under us.
//! None calls back into [`HeldRecord::finish`] but through it, so no step recurses.

use tracing::warn;

use super::{HeldRecord, ToPerson};
use crate::effect::Effect;
use crate::keys;
use crate::manual::{ManualItem, ManualReason};
use crate::outcome::RecordOutcome;
use crate::record::{IdempotencyRecord, RecordStatus};
use crate::store::limits::MAX_EFFECT_ID_BYTES;

/// The hand-over text when the server answered an effect id the record cannot keep: empty
/// (DynamoDB refuses an empty string in a set: a `ValidationException` every time) or longer
/// than [`MAX_EFFECT_ID_BYTES`] (the record's size is bounded). The id is not quoted (it is the
/// server's answer). `None`: the id is fine.
pub(super) fn invalid_effect_id(effect: &Effect) -> Option<String> {
    let len = effect.effect_id.len();
    (len == 0 || len > MAX_EFFECT_ID_BYTES).then(|| {
        format!("server answered an effect id of {len} bytes; the gate records 1 to {MAX_EFFECT_ID_BYTES}")
    })
}

/// The hand-over text of an effect made for `other` (the server's text: named by its keyed
/// digest only), not for the record's `subject`.
pub(super) fn other_subject_detail(
    record: &IdempotencyRecord,
    effect: &Effect,
    other: &str,
    subject: &str,
) -> String {
    format!(
        "the server answered effect {} for another subject (keyed SHA-256 {}), asked for {}; \
         see it live with `gatectl lookup {}`",
        effect.effect_id,
        crate::idempotency_key::answer_digest(other.as_bytes()),
        subject,
        record.event_key
    )
}

impl HeldRecord<'_> {
    /// An effect made for another subject: never committed, never recorded in `effect_ids`
    /// before the record is finished (whoever holds a record commits a recorded effect); the
    /// record goes to a person as `failed`. Finished so, the id is kept with the record (best
    /// effort) for whoever cancels it. If our lease was taken over meanwhile, the effect is
    /// known only here: a person gets it once (keyed by the effect) to cancel it at the server.
    pub(super) async fn other_subject(&mut self, effect: &Effect, detail: String) -> RecordOutcome {
        let gate = self.gate;
        let to = ToPerson::failed(ManualReason::ServerAnswerInvalid, detail.clone());
        let outcome = self.finish(to).await;
        let (pk, event_key) = (&self.record.pk, &self.record.event_key);
        if let RecordOutcome::Manual(_) = outcome {
            let now = gate.clock.now_ms();
            if let Err(e) = gate
                .store
                .record_effect_id(pk, &effect.effect_id, now)
                .await
            {
                warn!(event_key = %event_key, error = %e, "effect id not added to the record's effect ids");
            }
        }
        if !matches!(outcome, RecordOutcome::LeaseLost { .. }) {
            return outcome;
        }
        let item = ManualItem {
            reason: ManualReason::UnrecordedEffect,
            detail: format!("{detail}; the record was taken over meanwhile: cancel this effect"),
            original_body: self.d.body.to_string(),
            event_key: Some(event_key.clone()),
            message_id: self.d.message_id.to_string(),
            original_body_cut: None,
        };
        let route_key = keys::unrecorded_effect_route_key(event_key, &effect.effect_id);
        let fingerprint = keys::sha256_hex(effect.effect_id.as_bytes());
        let now = gate.clock.now_ms();
        let routed = gate.route_once(&route_key, &fingerprint, item, self.d.invocation, now);
        match routed.await {
            Ok(()) => RecordOutcome::Manual(ManualReason::UnrecordedEffect),
            Err(e) => RecordOutcome::Retry(e.to_string()),
        }
    }

    /// A commit of `effect` refused at `now` (epoch ms); `existing` is the record as the store
    /// holds it. Still `in_flight` (our lease was taken over while the call was on its way): the
    /// effect id is recorded on it (one `ADD` that returns the record after it) and what it then
    /// says is acted on. Committed: a duplicate, another effect id recorded (the distinct-effect
    /// signal). `failed`/`manual`: the effect is unbooked, a person gets it once.
    pub(super) async fn after_refused_commit(
        &self,
        existing: IdempotencyRecord,
        effect: &Effect,
        now: i64,
    ) -> RecordOutcome {
        let (gate, record) = (self.gate, &self.record);
        let existing = if existing.status == RecordStatus::InFlight {
            warn!(
                event_key = %record.event_key,
                holder = ?existing.lease_owner,
                ours = %effect.effect_id,
                "commit refused: the lease was taken over; effect id recorded for the holder"
            );
            let at = gate.clock.now_ms();
            match gate
                .store
                .record_effect_id(&record.pk, &effect.effect_id, at)
                .await
            {
                Ok(Some(after)) if after.status == RecordStatus::InFlight => {
                    let effect_id = Some(effect.effect_id.clone());
                    return RecordOutcome::LeaseLost { effect_id };
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
            return self.route_unrecorded_effect(&existing, effect).await;
        }
        let mut distinct_effect_ids = existing.effect_ids.len().max(1);
        if existing.effect_id.as_deref() != Some(effect.effect_id.as_str()) {
            warn!(
                event_key = %record.event_key,
                committed = ?existing.effect_id,
                ours = %effect.effect_id,
                "server returned another effect id for a committed key"
            );
            match gate
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

    /// Our call returned `effect` but the record was meanwhile finished as `failed` or `manual`
    /// by another holder (`existing`): nothing will book that effect. A person gets it once per
    /// effect ([`keys::unrecorded_effect_route_key`], reason `unrecorded_effect`); then its id
    /// is added to the record's `effect_ids`. Until the routing record exists nothing else
    /// remembers this effect (a redelivery is a duplicate), so a failure to reserve it is
    /// logged at `error` with the effect id and the key, and retried.
    async fn route_unrecorded_effect(
        &self,
        existing: &IdempotencyRecord,
        effect: &Effect,
    ) -> RecordOutcome {
        let (gate, record, d) = (self.gate, &self.record, self.d);
        let now = gate.clock.now_ms();
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
            original_body: d.body.to_string(),
            event_key: Some(record.event_key.clone()),
            message_id: d.message_id.to_string(),
            original_body_cut: None,
        };
        let route_key = keys::unrecorded_effect_route_key(&record.event_key, &effect.effect_id);
        let fingerprint = keys::sha256_hex(effect.effect_id.as_bytes());
        let routed = gate.route_once(&route_key, &fingerprint, item, d.invocation, now);
        if let Err(e) = routed.await {
            tracing::error!(
                event_key = %record.event_key,
                op_key = %record.op_key,
                effect_id = %effect.effect_id,
                error = %e,
                "an unrecorded effect could not be routed to a person: record or undo it by hand"
            );
            return RecordOutcome::Retry(e.to_string());
        }
        // Best effort, after the item is safe: the distinct-effect bookkeeping on the record.
        let at = gate.clock.now_ms();
        if let Err(e) = gate
            .store
            .record_effect_id(&record.pk, &effect.effect_id, at)
            .await
        {
            warn!(event_key = %record.event_key, error = %e, "effect id not added to the record's effect ids");
        }
        RecordOutcome::Manual(ManualReason::UnrecordedEffect)
    }
}
