//! A record the gate holds ([`HeldRecord`]): reserved by the consumer, or taken over by the
//! consumer, the reconciler or an operator, with the lease token of the delivery that holds it.
//! Its methods are the steps after the reserve, in the order a record meets them:
//! [`HeldRecord::proceed`] (the one decision, [`crate::decision`]), [`HeldRecord::call`]
//! (step 3), [`HeldRecord::settle`] (the answer), [`HeldRecord::commit`] (step 4),
//! [`HeldRecord::route_to_person`] (mark, send, confirm), [`HeldRecord::release`] and
//! [`HeldRecord::retry_later`] (a transient answer, with a server's `Retry-After`).
//!
//! A commit and a hand-over may lead to each other (a commit the store calls corrupt goes to a
//! person; a hand-over refused because an effect id was recorded meanwhile commits that effect).
//! Each returns the next step ([`Next`]) and [`HeldRecord::finish`] runs them in a loop, so no
//! step calls another; the routing primitives ([`crate::routing`]) never call back here. The
//! rarer branches of the settlement live in `held/unbooked.rs`.

mod unbooked;

use tracing::{info, warn};

use crate::decision::{decide, Handover, Holder, IfFailed, NextStep, Policy};
use crate::effect::{AnswerDetail, CallOutcome, Effect, LookupOutcome};
use crate::gate::{Delivery, Gate, EXTENSION_HEADROOM_MS};
use crate::integration::Held;
use crate::manual::ManualReason;
use crate::outcome::RecordOutcome;
use crate::record::{IdempotencyRecord, RecordStatus};
use crate::routing::{lease_lost_before_routing, Unmarked};
use crate::store::{CommitOutcome, GuardOutcome, StoreError};
use crate::visibility::{QueuedMessage, MAX_VISIBILITY_S};

/// The answer of the natural-key guard asked for with the reserve, if it was
/// ([`crate::store::ReserveAndGuard::guard`]).
pub(crate) type Guarded = Option<Result<GuardOutcome, StoreError>>;

/// How many extensions a holder writes before one call ([`HeldRecord::call`]) when each answers
/// too late to leave the call and the commit their lease: then it does not call and releases.
const MAX_EXTENSIONS_BEFORE_A_CALL: u32 = 2;

/// A record whose lease `d` holds (its reserve or take-over just returned it), and the delivery
/// it came with: the body and message id a manual item quotes, the lease token every write is
/// fenced by.
pub(crate) struct HeldRecord<'a> {
    gate: &'a Gate,
    record: IdempotencyRecord,
    d: Delivery<'a>,
    /// The SQS message the consumer received the record with (none for the reconciler and an
    /// operator): what a server's `Retry-After` hides ([`HeldRecord::retry_later`]).
    queued: Option<QueuedMessage<'a>>,
}

/// What a step leaves to do: the next step, or the record's outcome.
enum Next {
    Commit(Effect),
    ToPerson(ToPerson),
    Done(RecordOutcome),
}

/// A hand-over to a person: the status the record ends in, the reason, the item's text.
struct ToPerson {
    status: RecordStatus,
    reason: ManualReason,
    detail: String,
}

impl ToPerson {
    fn failed(reason: ManualReason, detail: String) -> Next {
        Next::ToPerson(Self {
            status: RecordStatus::Failed,
            reason,
            detail,
        })
    }
}

impl<'a> HeldRecord<'a> {
    /// `record` as its reserve or take-over returned it, held by `d`'s lease token.
    pub(crate) fn new(gate: &'a Gate, record: IdempotencyRecord, d: Delivery<'a>) -> Self {
        Self {
            gate,
            record,
            d,
            queued: None,
        }
    }

    /// The same record, received in `queued` (the consumer's SQS message).
    pub(crate) fn received_in(self, queued: Option<QueuedMessage<'a>>) -> Self {
        Self { queued, ..self }
    }

    fn owner(&self) -> &'a str {
        self.d.invocation.request_id.as_str()
    }

    /// The one decision for `holder` at `now_ms` (epoch ms, [`decide`]) carried out: the routing
    /// resumed, step 3 (or the lookup) and step 4, or the record handed to a person. Returns the
    /// outcome and whether the effect was found by a lookup. `guarded`: the guard's answer when
    /// the reserve asked for it (a new record to be called), settled instead of a second guard.
    pub(crate) async fn proceed(
        mut self,
        holder: Holder,
        now_ms: i64,
        guarded: Guarded,
    ) -> (RecordOutcome, bool) {
        let gate = self.gate;
        let policy = gate.policy(&self.record);
        let next = match decide(&self.record, now_ms, &policy, holder) {
            NextStep::ResumeRouting => {
                let (message_id, invocation) = (self.d.message_id, self.d.invocation);
                let resumed = gate.resume_routing(&self.record, message_id, invocation);
                Next::Done(match resumed.await {
                    Ok(reason) => RecordOutcome::Manual(reason),
                    Err(e) => RecordOutcome::Retry(e.to_string()),
                })
            }
            NextStep::ToPerson(handover) => self.hand_over(handover, &policy, now_ms, None),
            NextStep::Call => match self.call(guarded).await {
                Ok(answer) => self.settle_next(answer).await,
                Err(stop) => stop,
            },
            NextStep::LookUp {
                if_not_found,
                if_failed,
            } => match crate::integration::look_up(
                gate.integration.as_ref(),
                &Held::new(&self.record),
            )
            .await
            {
                LookupOutcome::Found(effect) => {
                    let done = self.settle(CallOutcome::Done(effect)).await;
                    return (done, true);
                }
                LookupOutcome::EffectRefused(why) => {
                    self.settle_next(CallOutcome::EffectRefused(why)).await
                }
                LookupOutcome::NotFound => self.hand_over(if_not_found, &policy, now_ms, None),
                LookupOutcome::Transient(why) => match if_failed {
                    IfFailed::Retry => self.settle_next(CallOutcome::Transient(why)).await,
                    IfFailed::ToPerson(h) => self.hand_over(h, &policy, now_ms, Some(&why)),
                },
            },
        };
        (self.finish(next).await, false)
    }

    /// Step 3: the side effect, once the natural key is ours ([`HeldRecord::guard_natural_key`])
    /// and the lease left covers the call and the commit ([`HeldRecord::lease_for_call`]).
    /// `Err`: the step that ends the record without a call.
    async fn call(&mut self, guarded: Guarded) -> Result<CallOutcome, Next> {
        if let Some(stop) = self.guard_natural_key(guarded).await {
            return Err(stop);
        }
        if let Some(stop) = self.lease_for_call().await {
            return Err(Next::Done(stop));
        }
        Ok(self.gate.integration.call(&Held::new(&self.record)).await)
    }

    /// The guard of signal 4 before a call: holds the record's natural key
    /// ([`Gate::guard_key`]) for its event key ([`crate::store::IdempotencyStore::guard`], or the
    /// answer `guarded` its reserve already got). `None`: the guard is ours (or there is no
    /// natural key), call. Otherwise the step that ends the record: another event key holds the
    /// natural key (a person, `manual` with both event keys, [`ManualReason::NaturalKeyCollision`],
    /// never called), an item the store refuses (a person), or a store failure (released). The
    /// same event key is the same holder: a redelivery, a take-over and the reconciler all find
    /// the guard theirs.
    async fn guard_natural_key(&self, guarded: Guarded) -> Option<Next> {
        let (gate, record) = (self.gate, &self.record);
        let now = gate.clock.now_ms();
        let natural_key = gate.guard_key(record, now)?;
        let answer = match guarded {
            Some(answer) => answer,
            None => gate.store.guard(record, &natural_key, now).await,
        };
        let manual = |reason, detail| {
            Some(Next::ToPerson(ToPerson {
                status: RecordStatus::Manual,
                reason,
                detail,
            }))
        };
        let other_event_key = match answer {
            Ok(GuardOutcome::Held) => return None,
            Ok(GuardOutcome::Collision { other_event_key }) => other_event_key,
            Err(StoreError::Refused(refusal)) => {
                let detail = format!("the natural-key item cannot be stored: {refusal}");
                return manual(ManualReason::Rejected, detail);
            }
            Err(e) => return Some(Next::Done(self.release(e.to_string()).await)),
        };
        warn!(
            event_key = %record.event_key,
            other_event_key = %other_event_key,
            subject = %gate.integration.subject(record),
            labels = ?record.labels,
            message_id = self.d.message_id,
            "natural-key collision: another event key holds this natural key; to a person, not called"
        );
        let detail = format!(
            "natural key {} is held by event key {other_event_key}; this event key {} was not \
             called (two event keys for one event: a broken key derivation, or the event re-sent \
             under a new id). Book it by hand if it is a real second event, else drop it",
            natural_key.key, record.event_key
        );
        manual(ManualReason::NaturalKeyCollision, detail)
    }

    /// Before a call: whether the lease left covers the call and the commit
    /// ([`crate::GateConfig::call_lease_ms`]). On the clock when it does (`None`: call). When it
    /// does not (a slow reserve, take-over or guard ate it), one fenced write moves the lease to
    /// the later of a fresh lease and what a call and the commit need plus
    /// [`EXTENSION_HEADROOM_MS`], and the lease left is checked again (a slow store answers late).
    /// Otherwise the outcome without a call: the extension refused (no longer ours: nothing
    /// written, [`RecordOutcome::LeaseLost`]; a late holder must not call while the next one
    /// re-sends under the same key), a store error, or still short after
    /// [`MAX_EXTENSIONS_BEFORE_A_CALL`] extensions (both released and retried).
    async fn lease_for_call(&self) -> Option<RecordOutcome> {
        let (gate, record) = (self.gate, &self.record);
        let need = gate.config.call_lease_ms();
        let mut lease_until = record.lease_until_ms.unwrap_or(0);
        let mut extensions = 0;
        loop {
            let now = gate.clock.now_ms();
            let left = lease_until.saturating_sub(now);
            if left >= need {
                return None;
            }
            if extensions == MAX_EXTENSIONS_BEFORE_A_CALL {
                let why = format!(
                    "lease too short for a call after {extensions} extensions ({left} ms left, \
                     {need} ms needed): the store answers too slowly; not called"
                );
                warn!(event_key = %record.event_key, left_ms = left, "lease too short for a call after its extensions: not called, released");
                return Some(self.release(why).await);
            }
            let until = gate
                .config
                .lease_until(now)
                .max(now.saturating_add(need.saturating_add(EXTENSION_HEADROOM_MS)));
            match gate
                .store
                .extend_lease(&record.pk, self.owner(), until, now)
                .await
            {
                Ok(true) => {
                    info!(event_key = %record.event_key, left_ms = left, lease_until_ms = until, "lease too short for a call: extended before calling");
                    lease_until = until;
                }
                Ok(false) => {
                    warn!(event_key = %record.event_key, left_ms = left, "lease too short for a call and no longer ours: not called, nothing written");
                    return Some(RecordOutcome::LeaseLost { effect_id: None });
                }
                Err(e) => {
                    warn!(event_key = %record.event_key, left_ms = left, error = %e, "lease too short for a call and not extended: not called, released");
                    return Some(self.release(e.to_string()).await);
                }
            }
            extensions += 1;
        }
    }

    /// Settles an answer (a call's, a lookup's, an operator's effect) to its end: an effect is
    /// committed, a transient failure releases the lease, a permanent one goes to a person.
    pub(crate) async fn settle(mut self, answer: CallOutcome) -> RecordOutcome {
        let next = self.settle_next(answer).await;
        self.finish(next).await
    }

    /// The step an answer leads to ([`HeldRecord::settle`]); the answer's text is the summary
    /// only, never a character of the server's body.
    async fn settle_next(&mut self, answer: CallOutcome) -> Next {
        let effect = match answer {
            CallOutcome::Done(effect) => effect,
            CallOutcome::Transient(why) => return Next::Done(self.retry_later(why).await),
            CallOutcome::KeyInFlight => {
                let why = "server: same key still in flight".to_string();
                return Next::Done(self.release(why).await);
            }
            CallOutcome::KeyMismatch(detail) => {
                let detail = format!("server: key reused with another body: {detail}");
                return ToPerson::failed(ManualReason::ServerKeyMismatch, detail);
            }
            CallOutcome::Permanent { detail, .. } => {
                return ToPerson::failed(ManualReason::ServerRejected, detail.to_string())
            }
            CallOutcome::Declined { detail, .. } => {
                return ToPerson::failed(ManualReason::Declined, detail.to_string())
            }
            // The effect exists, but its id may not be kept: a person, told how to see it.
            CallOutcome::EffectRefused(detail) => {
                let detail = format!(
                    "{detail}; see the server's answer live with `gatectl lookup {}` \
                     (Idempotency-Key {}), then make the effect by hand or undo it at the server",
                    self.record.event_key, self.record.op_key
                );
                return ToPerson::failed(ManualReason::ServerAnswerInvalid, detail);
            }
        };
        if let Some(invalid) = unbooked::invalid_effect_id(&effect) {
            return ToPerson::failed(ManualReason::ServerAnswerInvalid, invalid);
        }
        let subject = self.gate.integration.subject(&self.record);
        match effect.subject.as_deref() {
            Some(other) if !subject.is_empty() && other != subject => {
                let detail = unbooked::other_subject_detail(&self.record, &effect, other, &subject);
                Next::Done(self.other_subject(&effect, detail).await)
            }
            _ => Next::Commit(effect),
        }
    }

    /// Hands the record to a person as `status` with `reason` and `detail` (an operator's
    /// cancel), to its end ([`HeldRecord::route_to_person`]).
    pub(crate) async fn hand_to_person(
        mut self,
        status: RecordStatus,
        reason: ManualReason,
        detail: String,
    ) -> RecordOutcome {
        let to = ToPerson {
            status,
            reason,
            detail,
        };
        self.finish(Next::ToPerson(to)).await
    }

    /// Runs steps until the record's outcome: commits and hand-overs, each returning the next.
    async fn finish(&mut self, mut next: Next) -> RecordOutcome {
        loop {
            next = match next {
                Next::Commit(effect) => self.commit(effect).await,
                Next::ToPerson(to) => self.route_to_person(to).await,
                Next::Done(outcome) => return outcome,
            };
        }
    }

    /// Step 4: commits `effect` with the integration's business row in one transaction, only
    /// while we hold the lease. A refused commit carries the record as it is, acted on: still
    /// `in_flight` under another holder, our effect id is recorded for it
    /// ([`RecordOutcome::LeaseLost`]); committed by someone else, a duplicate (another effect id
    /// is recorded: the distinct-effect signal); `failed`/`manual`, the effect is unbooked and a
    /// person gets it once. A store that calls the write corrupt or invalid: a person.
    async fn commit(&mut self, effect: Effect) -> Next {
        let (gate, record) = (self.gate, &self.record);
        let now = gate.clock.now_ms();
        let row = gate
            .integration
            .business_row(record, &effect.effect_id, now);
        let committed = gate
            .store
            .commit(&record.pk, self.owner(), &effect.effect_id, &row, now)
            .await;
        let existing = match committed {
            Ok(CommitOutcome::Committed) => {
                let effect_id = effect.effect_id;
                return Next::Done(RecordOutcome::Committed { effect_id });
            }
            Ok(CommitOutcome::Refused(existing)) => *existing,
            Err(e @ (StoreError::Corrupt(_) | StoreError::Refused(_) | StoreError::Invalid(_))) => {
                let detail = match e {
                    StoreError::Corrupt(detail) => detail.to_string(),
                    other => other.to_string(),
                };
                let id = &effect.effect_id;
                let detail = format!("effect {id} made but cannot be committed: {detail}");
                return ToPerson::failed(ManualReason::ServerAnswerInvalid, detail);
            }
            Err(e) => return Next::Done(self.release(e.to_string()).await),
        };
        Next::Done(self.after_refused_commit(existing, &effect, now).await)
    }

    /// Hands the record to a person: marked (fenced by the lease), sent, confirmed
    /// ([`Gate::mark_and_send`]). A refused mark is re-read: still ours with an effect id
    /// recorded meanwhile (the routing's no-effect guard), that effect is committed instead;
    /// someone else's, they finish it and nothing is sent ([`RecordOutcome::LeaseLost`]).
    async fn route_to_person(&mut self, to: ToPerson) -> Next {
        let (status, reason) = (to.status, to.reason);
        let marked = self
            .gate
            .mark_and_send(&self.record, status, reason, to.detail, self.d)
            .await;
        let current = match marked {
            Ok(reason) => return Next::Done(RecordOutcome::Manual(reason)),
            Err(Unmarked::Failed(e)) => return Next::Done(RecordOutcome::Retry(e.to_string())),
            Err(Unmarked::Refused(current)) => *current,
        };
        let ours = current.status == RecordStatus::InFlight
            && current.lease_owner.as_deref() == Some(self.owner());
        if let (true, Some(effect_id)) = (ours, current.effect_ids.iter().next()) {
            info!(
                event_key = %self.record.event_key,
                effect_id = %effect_id,
                "an effect id was recorded while we held the record: committed instead of routed"
            );
            let effect = Effect {
                effect_id: effect_id.clone(),
                subject: None,
            };
            self.record = current;
            return Next::Commit(effect);
        }
        lease_lost_before_routing(&self.record, &current);
        Next::Done(RecordOutcome::LeaseLost { effect_id: None })
    }

    /// A transient failure: the record stays `in_flight`, the lease is released so a redelivery
    /// can take over at once, and the record is retried (`batchItemFailures`) with `why`.
    pub(crate) async fn release(&self, why: String) -> RecordOutcome {
        self.gate.release(&self.record, self.owner(), why).await
    }

    /// A transient answer. Without a delay: released ([`HeldRecord::release`]). With one (a
    /// server's `Retry-After`, ending at `now + delay`), never sent again sooner: the lease is
    /// held to the millisecond before the delay's end (one fenced write; if it fails, released
    /// as without a delay), so neither a redelivery nor the reconciler takes the record over
    /// sooner; then the message is hidden for the delay (whole seconds, rounded up) and retried,
    /// or, past SQS's [`MAX_VISIBILITY_S`], without a message or a working port, acknowledged
    /// and left to the reconciler ([`RecordOutcome::Deferred`]). docs/OPERATING.md, "Retry-After".
    async fn retry_later(&self, why: AnswerDetail) -> RecordOutcome {
        let Some(after) = why.retry_after() else {
            return self.release(why.to_string()).await;
        };
        let gate = self.gate;
        let now = gate.clock.now_ms();
        let asked_ms = after.delay_ms(now);
        let latest = retry_limit_ms(&self.record, &gate.policy(&self.record));
        let delay_ms = asked_ms.min(latest.saturating_sub(now)).max(0);
        if delay_ms == 0 {
            return self.release(why.to_string()).await;
        }
        if delay_ms < asked_ms {
            info!(event_key = %self.record.event_key, asked_ms, held_ms = delay_ms, "server asked to wait past the last retry: lease held to it, then the reconciler decides");
        }
        let until = now.saturating_add(delay_ms - 1);
        let (pk, event_key) = (&self.record.pk, &self.record.event_key);
        match gate.store.extend_lease(pk, self.owner(), until, now).await {
            Ok(true) => {}
            Ok(false) => return RecordOutcome::Retry(why.to_string()),
            Err(e) => {
                warn!(event_key = %event_key, error = %e, "lease not held for the server's Retry-After: released");
                return self.release(why.to_string()).await;
            }
        }
        let seconds = u32::try_from(delay_ms.saturating_add(999) / 1_000).unwrap_or(u32::MAX);
        let port = gate.config.visibility.as_ref();
        if let (Some(port), Some(queued)) = (port, self.queued) {
            if seconds <= MAX_VISIBILITY_S {
                match port.hide(queued, seconds).await {
                    Ok(()) => {
                        info!(event_key = %event_key, delay_s = seconds, "server asked to wait: message hidden, lease held");
                        return RecordOutcome::Retry(why.to_string());
                    }
                    Err(e) => {
                        warn!(event_key = %event_key, error = %e, "message not hidden: left to the reconciler");
                    }
                }
            }
        }
        info!(event_key = %event_key, lease_until_ms = until, "server asked to wait: left to the reconciler, lease held");
        RecordOutcome::Deferred { until_ms: until }
    }

    /// A hand-over the one decision chose ([`Handover::detail`]; `failure`: a failed lookup's
    /// answer): `manual` with its reason.
    fn hand_over(
        &self,
        handover: Handover,
        policy: &Policy,
        now_ms: i64,
        failure: Option<&AnswerDetail>,
    ) -> Next {
        Next::ToPerson(ToPerson {
            status: RecordStatus::Manual,
            reason: handover.reason(),
            detail: handover.detail(&self.record, policy, now_ms, failure),
        })
    }
}

/// The last instant, epoch ms, at which `record` could still be sent again: the claim horizon
/// (`created_at_ms + claim_horizon_ms`), the event's end, and the record's own expiry less
/// [`EXPIRY_MARGIN_MS`], whichever comes first. A server's `Retry-After` past it holds the lease
/// only to it: then the reconciler's decision (a lookup or a person) takes over, and the record
/// never outlives its guard unattended.
fn retry_limit_ms(record: &IdempotencyRecord, policy: &Policy) -> i64 {
    let horizon = record.created_at_ms.saturating_add(policy.claim_horizon_ms);
    let expiry = record.expires_at_s.saturating_mul(1_000) - EXPIRY_MARGIN_MS;
    let limit = horizon.min(expiry);
    policy.ends_at_ms.map_or(limit, |end| limit.min(end))
}

/// How long before a record's expiry a held lease must end, so the reconciler (every minute)
/// meets the record before a store's TTL may delete it: one hour, milliseconds.
const EXPIRY_MARGIN_MS: i64 = 3_600_000;
