//! What an operator does to one record (the runbooks' "finish or cancel by hand"), through the
//! gate's own code and conditions: the `gatectl` command line calls these.
//!
//! * [`Gate::operator_finish`]: take the expired lease over as the operator (a lease token
//!   `gatectl:{user}/{nonce}`, the nonce 64 random bits drawn per command by
//!   [`Invocation::new`]), then settle the effect exactly as the consumer
//!   and the reconciler do (the held record's settlement: the subject check, the fenced commit
//!   with the business row, a refused commit re-read and acted on);
//! * [`Gate::operator_cancel`]: take the lease over, then route the record to a person as the gate
//!   routes any record (`failed`, reason [`ManualReason::Cancelled`]): mark first (fenced by the
//!   lease), send the stored request to the manual queue (the person who acts by hand
//!   needs it, secrets included: nothing lost silently), confirm (the record leaves the
//!   `InFlight` index);
//! * [`operator_check`]: the refusals both share, before anything is written;
//! * [`Gate::operator_lookup`]: the effect the server holds under a record's key, read-only
//!   (no lease taken, nothing sent);
//! * [`Gate::next_step`]: what the gate does next with a record, in words (`gatectl show`).
//!
//! Each write an operator makes leaves an [`AuditEntry`] (who, what, when) in the record's
//! history ([`AuditLog`]), which only a new reservation of an expired, finished key replaces.

use crate::clock::ms_to_s;
use crate::decision::{decide, Holder};
use crate::effect::{CallOutcome, Effect, LookupOutcome};
use crate::gate::{Delivery, Gate, Invocation};
use crate::held::HeldRecord;
use crate::integration::Held;
use crate::manual::ManualReason;
use crate::outcome::RecordOutcome;
use crate::record::is_routing_record;
use crate::record::{IdempotencyRecord, RecordStatus};
use crate::store::{StoreError, TakeOver};

/// The prefix of every lease token an operator's command takes: `gatectl:{user}/{nonce}`
/// ([`Invocation::new`] with the request id `gatectl:{user}`; `#{n}` after it per record of a
/// `gatectl reconcile`).
pub const OPERATOR_OWNER_PREFIX: &str = "gatectl:";

/// How long an operator's lease lasts, **milliseconds**: long enough for a commit or a routing
/// (a few DynamoDB and SQS calls), short enough that a command killed halfway leaves the record
/// to the reconciler a minute later.
pub const OPERATOR_LEASE_MS: i64 = 60_000;

pub use crate::store::audit::{AuditEntry, AuditLog};

/// Why an operator's write was refused before anything was written. Each names what to do
/// instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No record under the key.
    #[error("no record {pk}")]
    NotFound {
        /// The key looked for.
        pk: String,
    },
    /// The record is not `in_flight`: nothing to finish or cancel.
    #[error("the record is {status}, not in_flight{}: nothing to {action}", error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default())]
    NotInFlight {
        /// The subcommand refused.
        action: &'static str,
        /// Its status.
        status: RecordStatus,
        /// Its error, for `failed` and `manual`.
        error: Option<String>,
    },
    /// The record routes an item to a person (a poison body, a mismatch, an ended window), not
    /// a call of the side effect: `gatectl reconcile KEY` sends its item.
    #[error("the record is a routing to the manual queue, not an effect: run `gatectl reconcile {event_key}` to send its item")]
    Routing {
        /// Its event key.
        event_key: String,
    },
    /// Someone holds a live lease: a consumer or the reconciler works on it now.
    #[error("the lease is live: held by {holder} until {until} ({left_s} s from now); wait for it to expire, then run the command again")]
    LeaseLive {
        /// The lease owner.
        holder: String,
        /// Its end, RFC 3339 UTC.
        until: String,
        /// Seconds left.
        left_s: i64,
    },
    /// A cancel of a record for which the server already returned an effect id.
    #[error("the server already returned effect id(s) {effect_ids:?} for this record: finish it with `--effect-id`, or undo the effect at the server first")]
    EffectRecorded {
        /// The recorded effect ids.
        effect_ids: Vec<String>,
    },
    /// A finish with another effect than the one(s) the server already returned for the record.
    #[error("the server returned effect id(s) {effect_ids:?} for this record, not {given}: finish it with one of those (or --from-server)")]
    OtherEffectRecorded {
        /// The effect id given.
        given: String,
        /// The recorded effect ids.
        effect_ids: Vec<String>,
    },
    /// A lookup asked of a server that has no lookup by key
    /// (`crate::integration::lookup_for`).
    #[error("the server has no lookup by key: whether an effect exists under Idempotency-Key {op_key} is unknown to the gate; ask the server's operators")]
    NoLookup {
        /// The record's `Idempotency-Key`.
        op_key: String,
    },
    /// The take-over was refused: someone took the record meanwhile, or finished it.
    #[error(
        "the lease was taken or the record finished meanwhile; run `gatectl show` and look again"
    )]
    TakenMeanwhile,
}

/// An RFC 3339 UTC rendering of epoch **milliseconds** (`?` when out of range).
pub fn rfc3339_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| "?".to_string())
}

/// The refusals shared by a finish and a cancel of `record` at `now_ms` (epoch ms), in this
/// order: not `in_flight` (or a pending routing), a routing record, a live lease.
///
/// # Errors
/// The [`Refusal`].
pub fn operator_check(
    record: &IdempotencyRecord,
    action: &'static str,
    now_ms: i64,
) -> Result<(), Refusal> {
    if record.status != RecordStatus::InFlight || record.route_pending {
        return Err(Refusal::NotInFlight {
            action,
            status: record.status,
            error: record.error.clone(),
        });
    }
    if is_routing_record(record) {
        return Err(Refusal::Routing {
            event_key: record.event_key.clone(),
        });
    }
    if record.lease_is_live(now_ms) {
        let until = record.lease_until_ms.unwrap_or_default();
        return Err(Refusal::LeaseLive {
            holder: record.lease_owner.clone().unwrap_or_default(),
            until: rfc3339_ms(until),
            left_s: (until - now_ms) / 1000,
        });
    }
    Ok(())
}

impl Gate {
    /// Takes the expired lease of `record` over for `invocation` (its request id the operator's
    /// lease token), after [`operator_check`].
    async fn operator_take_over(
        &self,
        record: &IdempotencyRecord,
        action: &'static str,
        invocation: &Invocation,
    ) -> Result<IdempotencyRecord, OperatorError> {
        let now = self.clock.now_ms();
        operator_check(record, action, now)?;
        match self
            .take_over_for(&record.pk, record.lease_owner.as_deref(), invocation, now)
            .await?
        {
            TakeOver::Taken(held) => Ok(*held),
            TakeOver::Refused => Err(Refusal::TakenMeanwhile.into()),
        }
    }

    /// The runbook's finish: takes the expired lease of `record` over as the operator
    /// (`invocation.request_id`, a `gatectl:{user}/{nonce}` token) and commits `effect` with the
    /// business row, through the gate's own settlement of a claim (the effect must be for the
    /// record's subject when the server named one; a refused commit is re-read and acted on as the
    /// consumer would). Returns what happened ([`RecordOutcome::Committed`] when all went well).
    /// Refused ([`Refusal::OtherEffectRecorded`]) when the server already returned another effect
    /// id for the record: committing a second effect would leave the first unbooked.
    ///
    /// # Errors
    /// A [`Refusal`] before anything was written, or a store error of the take-over.
    pub async fn operator_finish(
        &self,
        record: &IdempotencyRecord,
        effect: Effect,
        invocation: &Invocation,
    ) -> Result<RecordOutcome, OperatorError> {
        operator_check(record, "finish", self.clock.now_ms())?;
        operator_check_effect(record, &effect.effect_id)?;
        let held = self
            .operator_take_over(record, "finish", invocation)
            .await?;
        // An effect id recorded between the read and the take-over (the effect-id `ADD` is not
        // fenced): checked again under our lease, which is handed back on refusal.
        if let Err(refusal) = operator_check_effect(&held, &effect.effect_id) {
            self.release(&held, &invocation.request_id, String::new())
                .await;
            return Err(refusal.into());
        }
        let body = String::from_utf8_lossy(&held.request).into_owned();
        let message_id = invocation.request_id.clone();
        let d = Delivery {
            body: &body,
            message_id: &message_id,
            invocation,
        };
        let held = HeldRecord::new(self, held, d);
        Ok(held.settle(CallOutcome::Done(effect)).await)
    }

    /// The runbook's cancel: refused when the server already returned an effect id for the
    /// record ([`Refusal::EffectRecorded`]); otherwise takes the expired lease over as the operator
    /// and routes the record to a person as `failed` with reason [`ManualReason::Cancelled`]
    /// and `error` = `detail`: marked (fenced by the lease), its stored request sent to the
    /// manual queue (with the secrets the person acting by hand needs), the routing
    /// confirmed, which takes it out of the `InFlight` index. Returns
    /// [`RecordOutcome::Manual`] when all went well.
    ///
    /// # Errors
    /// A [`Refusal`] before anything was written, or a store error of the take-over.
    pub async fn operator_cancel(
        &self,
        record: &IdempotencyRecord,
        detail: &str,
        invocation: &Invocation,
    ) -> Result<RecordOutcome, OperatorError> {
        if !record.effect_ids.is_empty() {
            return Err(Refusal::EffectRecorded {
                effect_ids: record.effect_ids.iter().cloned().collect(),
            }
            .into());
        }
        let held = self
            .operator_take_over(record, "cancel", invocation)
            .await?;
        if !held.effect_ids.is_empty() {
            // Recorded between the read and the take-over: hand the lease back at once.
            self.release(&held, &invocation.request_id, String::new())
                .await;
            return Err(Refusal::EffectRecorded {
                effect_ids: held.effect_ids.iter().cloned().collect(),
            }
            .into());
        }
        let body = String::from_utf8_lossy(&held.request).into_owned();
        let message_id = invocation.request_id.clone();
        let d = Delivery {
            body: &body,
            message_id: &message_id,
            invocation,
        };
        let held = HeldRecord::new(self, held, d);
        let (status, reason) = (RecordStatus::Failed, ManualReason::Cancelled);
        Ok(held
            .hand_to_person(status, reason, detail.to_string())
            .await)
    }

    /// What the gate will do next with `record` at `now_ms` (epoch ms), in words for a person
    /// (`gatectl show`): nothing for a finished record, its holder's work under a live lease,
    /// otherwise when the reconciler takes it over (its minimum age in `reconciler`) and the one
    /// decision it then carries out (`crate::decision::decide` for
    /// `Holder::Reconciler`, `crate::decision::NextStep::describe`).
    pub fn next_step(
        &self,
        record: &IdempotencyRecord,
        reconciler: &crate::reconciler::ReconcilerConfig,
        now_ms: i64,
    ) -> String {
        if !record.has_work() {
            return match record.status {
                RecordStatus::Committed => {
                    "nothing: committed; a redelivery is acknowledged as a duplicate".into()
                }
                _ => "nothing: routed to a person; a redelivery is acknowledged as a duplicate"
                    .into(),
            };
        }
        if record.lease_is_live(now_ms) {
            return format!(
                "its holder {} works on it until {}",
                record.lease_owner.as_deref().unwrap_or("?"),
                rfc3339_ms(record.lease_until_ms.unwrap_or_default())
            );
        }
        let age = now_ms.saturating_sub(record.created_at_ms);
        let when = if age < reconciler.min_age_ms {
            format!(
                "in {} s (the reconciler waits until it is {} s old)",
                (reconciler.min_age_ms - age) / 1000,
                reconciler.min_age_ms / 1000
            )
        } else {
            format!(
                "at its next sweep (every {} s)",
                reconciler.sweep_interval_ms.max(1_000) / 1000
            )
        };
        let policy = self.policy(record);
        let then =
            decide(record, now_ms, &policy, Holder::Reconciler).describe(record, &policy, now_ms);
        let expired = if record.is_expired(now_ms) {
            format!(
                " (its TTL passed at {}: finished like any other)",
                rfc3339_ms(record.expires_at_s.saturating_mul(1000))
            )
        } else {
            String::new()
        };
        format!("the reconciler takes it over {when}, {then}{expired}")
    }

    /// An operator's read-only lookup (`gatectl lookup`, `gatectl finish --from-server`): the
    /// record `pk` read back from the store (one consistent read: it is reserved), then the
    /// effect its server holds under its `Idempotency-Key`, without taking its lease (a lookup
    /// changes nothing at the server). Never sends the request.
    ///
    /// # Errors
    /// [`Refusal::NotFound`] without such a record; [`Refusal::NoLookup`] when its server has no
    /// lookup by key (`crate::integration::lookup_for`); a store error of the read.
    pub async fn operator_lookup(
        &self,
        pk: &str,
    ) -> Result<(IdempotencyRecord, LookupOutcome), OperatorError> {
        let record = self
            .store
            .get(pk)
            .await?
            .ok_or_else(|| Refusal::NotFound { pk: pk.to_string() })?;
        let Some(lookup) = crate::integration::lookup_for(self.integration.as_ref(), &record)
        else {
            return Err(Refusal::NoLookup {
                op_key: record.op_key.clone(),
            }
            .into());
        };
        let outcome = lookup.lookup(&Held::new(&record)).await;
        Ok((record, outcome))
    }

    /// The server's answer to a lookup under `record`'s key, as the integration renders it for
    /// an operator's server ([`crate::integration::Lookup::show_lookup`]: secrets cut out), for
    /// `gatectl lookup` to print: never logged or stored. `None` when the integration cannot show
    /// it or the server has no lookup by key.
    pub async fn operator_show_lookup(&self, record: &IdempotencyRecord) -> Option<String> {
        crate::integration::lookup_for(self.integration.as_ref(), record)?
            .show_lookup(&Held::new(record))
            .await
    }
}

/// The refusal of a finish of `record` with `effect_id` when the server already returned other
/// effect ids for it ([`Refusal::OtherEffectRecorded`]); checked by [`Gate::operator_finish`].
///
/// # Errors
/// The [`Refusal`].
pub fn operator_check_effect(record: &IdempotencyRecord, effect_id: &str) -> Result<(), Refusal> {
    if record.effect_ids.is_empty() || record.effect_ids.contains(effect_id) {
        return Ok(());
    }
    Err(Refusal::OtherEffectRecorded {
        given: effect_id.to_string(),
        effect_ids: record.effect_ids.iter().cloned().collect(),
    })
}

/// A refused or failed operator write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OperatorError {
    /// Refused before anything was written.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// A store call failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Seconds between `ms` and `now_ms` (epoch ms), for ages.
pub fn age_s(ms: i64, now_ms: i64) -> i64 {
    ms_to_s(now_ms.saturating_sub(ms))
}

#[cfg(test)]
mod tests;
