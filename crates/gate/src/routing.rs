//! Routing to a person exactly once.
//!
//! SQS delivers a poison body or a mismatched body as often as it delivers a good one, so routing
//! it to the manual queue "once per delivery" would hand a person the same case several times.
//! Each such case therefore gets a **routing record** in the idempotency table, reserved like an
//! event before the side effect (the send):
//!
//! * a body the strict parser rejects: key [`keys::rejected_route_key`] (the body's bytes);
//! * a mismatch: key [`keys::mismatch_route_key`] (event key and the mismatched fingerprint);
//! * a window that has ended: the event's own record, so an event that is `committed` (or being
//!   claimed) is a duplicate, never also a job for a person.
//!
//! A routing record's operation is the send itself (`op_key` is the key of the `manual-route`
//! operation, `request` the item's JSON). It is born `manual` with its routing pending
//! (`route_pending`, a lease, an `InFlight` shard), then the item is sent, then the routing is
//! confirmed (`routed`: pending mark, item, lease and shard removed). Conflicts resolve as for
//! events: a confirmed routing or a live lease is a duplicate (acknowledged); an expired lease
//! is taken over and the stored item sent. Pending routings sit in the `InFlight` index, so the
//! reconciler finishes one whose sender died and whose message will not return.
//!
//! ## Mark, send, confirm: the lease fences every state change
//!
//! Every record a worker holds carries its lease token (`lease_owner`, unique per acquisition,
//! see [`Invocation::for_record`]); every state change is conditional on it: a commit, a release,
//! a routing's mark and its confirmation. A holder whose lease was taken over is refused and
//! re-reads before acting (see [`RecordOutcome::LeaseLost`]). Routing an event to a person marks
//! the record first (`failed`/`manual`, routing pending, fenced by the lease), then sends, then
//! confirms: a holder that lost its lease sends nothing, and once marked no one can commit the
//! record, so **no committed event is ever also in the manual queue**. A crash (or an error)
//! between the send and the confirmation sends the item again when the routing is resumed: **at
//! least once into the manual queue, never lost**, and a repeat carries the same dedup key
//! (`event_key`, or for a rejected body the same `original_body`), so a person sees it is one
//! case.
//!

use tracing::{info, warn};

use crate::clock::ms_to_s;
use crate::consumer::outcome::RecordOutcome;
use crate::effect::Effect;
use crate::gate::{Delivery, Gate, Invocation};
use crate::integration::Rejection;
use crate::keys;
use crate::manual::{ManualItem, ManualReason};
use crate::record::{inflight_shard, record_pk, IdempotencyRecord, RecordStatus};
use crate::store::{FinishGuard, FinishOutcome, Reservation, TakeOver};

impl Gate {
    /// Routes a record `invocation` holds to a person: ends it as `status` with its routing
    /// pending ([`IdempotencyStore::finish`], fenced by the lease), then sends the item, then
    /// confirms ([`Gate::send_routed`]). Mark first: a holder that lost its lease sends nothing,
    /// and once marked no one can commit the record, so no committed event is ever also in the
    /// manual queue. A routing because no effect exists ([`ManualReason::PastKeyRetention`]) is
    /// also refused when an effect id was recorded meanwhile (a claim that was in transit when the
    /// lease changed hands, see [`RecordOutcome::LeaseLost`]): that effect is committed instead.
    pub(crate) async fn route_held_record(
        &self,
        record: &IdempotencyRecord,
        status: RecordStatus,
        reason: ManualReason,
        detail: String,
        d: Delivery<'_>,
    ) -> RecordOutcome {
        let Delivery {
            body,
            message_id,
            invocation,
        } = d;
        let owner = invocation.request_id.as_str();
        let item = ManualItem {
            reason,
            detail: detail.clone(),
            original_body: body.to_string(),
            event_key: Some(record.event_key.clone()),
            message_id: message_id.to_string(),
            original_body_cut: None,
        };
        let guard = match reason {
            // Routings because no effect was found: refused if an effect id was recorded meanwhile.
            ManualReason::PastKeyRetention | ManualReason::EventEnded => {
                FinishGuard::LeaseAndNoEffect
            }
            _ => FinishGuard::Lease,
        };
        let item_json = item.to_json_with(|r| self.integration.manual_reason_code(r));
        let finished = self
            .finish_held_record(record, owner, status, reason, &detail, &item_json, guard)
            .await;
        match finished {
            Ok(FinishOutcome::Finished) => {}
            Ok(FinishOutcome::Refused(Some(current))) => {
                return Box::pin(self.after_refused_finish(record, *current, d)).await
            }
            Ok(FinishOutcome::Refused(None)) => {
                return RecordOutcome::Retry(format!("record {} vanished", record.event_key))
            }
            Err(e) => return self.release(record, owner, e.to_string()).await,
        }
        let mut marked = record.clone();
        marked.status = status;
        marked.route_pending = true;
        marked.request = item_json;
        match self.send_routed(&marked, message_id, owner).await {
            Ok(_) => RecordOutcome::Manual(reason),
            Err(why) => RecordOutcome::Retry(why),
        }
    }

    /// The finish of [`Gate::route_held_record`] at now. A record that ends without an effect
    /// ([`ends_without_effect`]) releases its natural key in the same write
    /// ([`IdempotencyStore::finish_without_effect`]), so a corrected event is not a collision;
    /// any other keeps it to its expiry (a `manual` record may hold an effect nobody knows of).
    #[allow(clippy::too_many_arguments)]
    async fn finish_held_record(
        &self,
        record: &IdempotencyRecord,
        owner: &str,
        status: RecordStatus,
        reason: ManualReason,
        detail: &str,
        item_json: &[u8],
        guard: FinishGuard,
    ) -> Result<FinishOutcome, crate::store::StoreError> {
        let now = self.clock.now_ms();
        let error = crate::store::limits::bounded_error(detail);
        let natural_key = match (ends_without_effect(reason), guard) {
            (true, FinishGuard::Lease) => self.guard_key(record, now),
            _ => None,
        };
        match natural_key {
            Some(key) => {
                self.store
                    .finish_without_effect(record, owner, status, error, item_json, &key, now)
                    .await
            }
            None => {
                self.store
                    .finish(&record.pk, owner, status, error, item_json, guard, now)
                    .await
            }
        }
    }

    /// A finish of `record` was refused; `current` is the record as the store holds it. Still
    /// ours with an effect recorded (the routing's no-effect guard): commit that effect. Someone
    /// else's: they finish it; we re-read and send nothing.
    pub(crate) async fn after_refused_finish(
        &self,
        record: &IdempotencyRecord,
        current: IdempotencyRecord,
        d: Delivery<'_>,
    ) -> RecordOutcome {
        let invocation = d.invocation;
        let owner = invocation.request_id.as_str();
        let ours = current.status == RecordStatus::InFlight
            && current.lease_owner.as_deref() == Some(owner);
        if let (true, Some(effect_id)) = (ours, current.effect_ids.iter().next()) {
            info!(
                event_key = %record.event_key,
                effect_id = %effect_id,
                "an effect id was recorded while we held the record: committed instead of routed"
            );
            let effect = Effect {
                effect_id: effect_id.clone(),
                subject: None,
            };
            return self.commit_effect(&current, &effect, d).await;
        }
        warn!(
            event_key = %record.event_key,
            status = current.status.as_str(),
            holder = ?current.lease_owner,
            "lease lost before routing: nothing sent, the holder finishes it"
        );
        RecordOutcome::LeaseLost { effect_id: None }
    }

    /// Sends the manual item of a routing `owner` holds (`route_pending`, the item in
    /// `request`), then confirms it ([`IdempotencyStore::routed`]). A send that fails releases
    /// the lease so a redelivery or the reconciler sends it again; a crash between the send and
    /// the confirmation sends it again too, under the same dedup key (at least once into the
    /// manual queue, never lost).
    pub(crate) async fn send_routed(
        &self,
        record: &IdempotencyRecord,
        message_id: &str,
        owner: &str,
    ) -> Result<ManualReason, String> {
        let mut item = stored_item(record, |r| self.integration.manual_reason_code(r));
        item.message_id = message_id.to_string();
        let reason = item.reason;
        if let Err(e) = self.manual.send(item).await {
            self.release(record, owner, e.to_string()).await;
            return Err(e.to_string());
        }
        match self
            .store
            .routed(&record.pk, owner, self.clock.now_ms())
            .await
        {
            Ok(true) => {}
            Ok(false) => info!(
                event_key = %record.event_key,
                "routing confirmed already or taken over; the item is in the manual queue"
            ),
            // The item is in the queue; the record stays pending and whoever takes it over sends
            // it once more (same dedup key). The lease is released so that happens at once.
            Err(e) => {
                warn!(event_key = %record.event_key, error = %e, "routing not confirmed");
                self.release(record, owner, e.to_string()).await;
            }
        }
        Ok(reason)
    }

    /// Routes a body that failed strict parsing to the manual queue with its reason, once per
    /// distinct body (routing key [`keys::rejected_route_key`]; see "Routing to a person exactly
    /// once" in the module docs). Every copy is acknowledged as `Rejected`.
    pub(crate) async fn route_rejection(
        &self,
        reason: Rejection,
        d: Delivery<'_>,
        now: i64,
    ) -> RecordOutcome {
        let Delivery {
            body,
            message_id,
            invocation,
        } = d;
        let body = body.to_string();
        let manual_reason = match reason {
            Rejection { ended: true, .. } => ManualReason::EventEnded,
            _ => ManualReason::Rejected,
        };
        warn!(message_id, reason = reason.code(), detail = %reason, "body rejected");
        let route_key = keys::rejected_route_key(&body);
        let fingerprint = keys::sha256_hex(body.as_bytes());
        let item = ManualItem {
            reason: manual_reason,
            detail: format!("{}: {reason}", reason.code()),
            original_body: body,
            event_key: None,
            message_id: message_id.to_string(),
            original_body_cut: None,
        };
        match self
            .route_once(&route_key, &fingerprint, item, invocation, now)
            .await
        {
            Ok(()) => RecordOutcome::Rejected(reason),
            Err(e) => RecordOutcome::Retry(e),
        }
    }

    /// Sends `item` to the manual queue once per `route_key`: reserves a routing record born
    /// `manual` with its routing pending (leased, in the `InFlight` index, the item in
    /// `request`), sends the item, then confirms ([`Gate::send_routed`]). `Ok` when the item was
    /// sent now, was sent before, or a live lease holder is sending it (its message stays
    /// unacknowledged until it is done, and the reconciler finishes a stranded one); `Err`
    /// (retry) on a store or queue failure.
    pub(crate) async fn route_once(
        &self,
        route_key: &str,
        fingerprint: &str,
        item: ManualItem,
        invocation: &Invocation,
        now: i64,
    ) -> Result<(), String> {
        let mut fresh = IdempotencyRecord {
            pk: record_pk(&self.config.integration, route_key),
            event_key: route_key.to_string(),
            status: RecordStatus::InFlight,
            fingerprint: fingerprint.to_string(),
            request: Vec::new(),
            op_key: String::new(),
            lease_owner: Some(invocation.request_id.clone()),
            lease_until_ms: Some(self.lease_until(now)),
            created_at_ms: now,
            updated_at_ms: now,
            expires_at_s: ms_to_s(now) + self.config.key_ttl_s,
            effect_id: None,
            effect_ids: Default::default(),
            inflight_shard: Some(inflight_shard(route_key)),
            error: None,
            route_pending: false,
            labels: self
                .integration
                .label_names()
                .iter()
                .map(|name| (name.to_string(), String::new()))
                .collect(),
        };
        make_routing_record(&mut fresh, &item, |r| {
            self.integration.manual_reason_code(r)
        });
        let held = match self.store.reserve(&fresh, now).await {
            Ok(Reservation::Reserved) => fresh,
            Ok(Reservation::Conflict(existing)) => {
                if !existing.has_work() || existing.lease_is_live(now) {
                    info!(route_key, message_id = %item.message_id, "already routed to the manual queue");
                    return Ok(());
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
                    Ok(TakeOver::Taken(record)) => *record,
                    Ok(TakeOver::Refused) => return Ok(()),
                    Err(e) => return Err(e.to_string()),
                }
            }
            Err(e) => return Err(e.to_string()),
        };
        self.resume_routing(&held, &item.message_id, invocation)
            .await
            .map(|_| ())
    }

    /// Resumes a routing `invocation` holds: a pending one (`route_pending`) is sent and
    /// confirmed; an `in_flight` routing record (written by an earlier version, which marked after
    /// sending) is marked first, then sent.
    pub(crate) async fn resume_routing(
        &self,
        record: &IdempotencyRecord,
        message_id: &str,
        invocation: &Invocation,
    ) -> Result<ManualReason, String> {
        if record.route_pending {
            return self
                .send_routed(record, message_id, &invocation.request_id)
                .await;
        }
        let item = stored_item(record, |r| self.integration.manual_reason_code(r));
        match self
            .route_held_record(
                record,
                RecordStatus::Manual,
                item.reason,
                item.detail,
                Delivery {
                    body: &item.original_body,
                    message_id,
                    invocation,
                },
            )
            .await
        {
            RecordOutcome::Manual(reason) => Ok(reason),
            RecordOutcome::Retry(why) => Err(why),
            other => Err(format!("routing not resumed: {other:?}")),
        }
    }
}

/// The manual item a routing record stores in `request` (with the integration's codes,
/// `code_of`); one that cannot be read is routed as `rejected` with the stored bytes as its body
/// (nothing is lost).
pub(crate) fn stored_item(
    record: &IdempotencyRecord,
    code_of: impl Fn(ManualReason) -> &'static str,
) -> ManualItem {
    ManualItem::from_json_with(&record.request, code_of).unwrap_or_else(|| ManualItem {
        reason: ManualReason::Rejected,
        detail: format!("routing record {} holds no readable item", record.event_key),
        original_body: String::from_utf8_lossy(&record.request).into_owned(),
        event_key: None,
        message_id: String::new(),
        original_body_cut: None,
    })
}

/// Turns `record` into a routing record for `item`: its one operation is sending `item` to the
/// manual queue (`op_key = operation_key(event_key, MANUAL_ROUTE)`, `request` = the item as
/// JSON), never a call of the side effect. It is born `manual` with its routing pending (the mark comes
/// first, see [`Gate::route_held_record`]), keeping its lease and `InFlight` shard until the send
/// is confirmed.
pub(crate) fn make_routing_record(
    record: &mut IdempotencyRecord,
    item: &ManualItem,
    code_of: impl Fn(ManualReason) -> &'static str,
) {
    record.op_key = keys::operation_key(&record.event_key, keys::MANUAL_ROUTE);
    record.request = item.to_json_with(code_of);
    record.status = RecordStatus::Manual;
    record.route_pending = true;
    record.error = Some(item.detail.clone());
}

/// Whether a record routed for `reason` ends without an effect, so its natural key is released:
/// the server refused the request ([`ManualReason::ServerRejected`], a permanent 4xx) or declined
/// it ([`ManualReason::Declined`]), or an operator cancelled a record for which no effect id was
/// returned ([`ManualReason::Cancelled`]). Not a key reused at the server
/// ([`ManualReason::ServerKeyMismatch`]: something is held under it), nor any routing whose
/// effect is unknown or made.
pub(crate) fn ends_without_effect(reason: ManualReason) -> bool {
    matches!(
        reason,
        ManualReason::ServerRejected | ManualReason::Declined | ManualReason::Cancelled
    )
}
