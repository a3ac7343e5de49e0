//! Routing to a person exactly once: the primitives every held record and every rejected body
//! share. They call nothing above them (never the held record's commit), so no step recurses.
//!
//! SQS delivers a poison body as often as a good one, so each case gets a **routing record** in
//! the idempotency table, reserved like an event before its side effect (the send): a rejected
//! body under [`keys::rejected_route_key`], a mismatch under [`keys::mismatch_route_key`], an
//! ended window under the event's own record (so a committed event is a duplicate, never also a
//! job for a person). Its operation is the send (`op_key` of `manual-route`, `request` the item's
//! JSON); it is born `manual` with its routing pending (a lease, an `InFlight` shard), then sent,
//! then confirmed. Pending routings sit in the `InFlight` index for the reconciler.
//!
//! **Mark, send, confirm.** Every state change is fenced by the lease token
//! ([`Invocation::for_record`]). A held record goes to a person marked first (`failed`/`manual`,
//! routing pending), then sent, then confirmed: a holder that lost its lease sends nothing, and
//! once marked no one can commit the record, so no committed event is ever also in the manual
//! queue. A crash between the send and the confirmation sends the item again under the same
//! dedup key: at least once into the manual queue, never lost.

use tracing::{info, warn};

use crate::clock::ms_to_s;
use crate::gate::{Delivery, Gate, Invocation};
use crate::integration::Rejection;
use crate::keys;
use crate::manual::{ManualItem, ManualQueueError, ManualReason};
use crate::outcome::RecordOutcome;
use crate::record::{inflight_shard, record_pk, IdempotencyRecord, RecordStatus};
use crate::store::{FinishGuard, FinishOutcome, Reservation, StoreError, TakeOver};

/// Why an item did not reach the manual queue, or its routing was not confirmed: the delivery
/// is retried (`RecordOutcome::Retry` carries its text), the routing record stays pending.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RoutingError {
    /// A store call failed (the reserve, take-over, mark or confirmation of a routing).
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The manual queue refused the item.
    #[error("{0}")]
    Queue(#[from] ManualQueueError),
    /// The record (its event key here) was gone when the mark was refused.
    #[error("record {0} vanished")]
    Vanished(String),
    /// A routing record's mark was refused: it is someone else's now (they send it).
    #[error("routing not resumed: {0:?}")]
    NotResumed(RecordOutcome),
}

/// Why a held record was not marked for a person ([`Gate::mark_and_send`]).
pub(crate) enum Unmarked {
    /// The store refused the mark; the record as it holds it (re-read, acted on by the caller).
    Refused(Box<IdempotencyRecord>),
    /// A transient failure, the lease released.
    Failed(RoutingError),
}

impl Gate {
    /// Routes a record `d` holds to a person: ends it as `status` with its routing pending
    /// ([`crate::store::IdempotencyStore::finish`], fenced by the lease), then sends the item and
    /// confirms ([`Gate::send_routed`]). A routing because no effect exists
    /// ([`ManualReason::PastKeyRetention`], [`ManualReason::EventEnded`]) is also refused when an
    /// effect id was recorded meanwhile: [`Unmarked::Refused`] lets the holder commit it.
    pub(crate) async fn mark_and_send(
        &self,
        record: &IdempotencyRecord,
        status: RecordStatus,
        reason: ManualReason,
        detail: String,
        d: Delivery<'_>,
    ) -> Result<ManualReason, Unmarked> {
        let owner = d.owner();
        let item = ManualItem {
            reason,
            detail: detail.clone(),
            original_body: d.body.to_string(),
            event_key: Some(record.event_key.clone()),
            message_id: d.message_id.to_string(),
            original_body_cut: None,
        };
        let guard = match reason {
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
            Ok(FinishOutcome::Refused(Some(current))) => return Err(Unmarked::Refused(current)),
            Ok(FinishOutcome::Refused(None)) => {
                return Err(Unmarked::Failed(RoutingError::Vanished(
                    record.event_key.clone(),
                )))
            }
            Err(e) => {
                self.release(record, owner, e.to_string()).await;
                return Err(Unmarked::Failed(e.into()));
            }
        }
        let mut marked = record.clone();
        marked.status = status;
        marked.route_pending = true;
        marked.request = item_json;
        self.send_routed(&marked, d.message_id, owner)
            .await
            .map_err(Unmarked::Failed)?;
        Ok(reason)
    }

    /// The finish of [`Gate::mark_and_send`] at now. A record that ends without an effect
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
    ) -> Result<ManualReason, RoutingError> {
        let mut item = stored_item(record, |r| self.integration.manual_reason_code(r));
        item.message_id = message_id.to_string();
        let reason = item.reason;
        if let Err(e) = self.manual.send(item).await {
            self.release(record, owner, e.to_string()).await;
            return Err(e.into());
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
            Err(e) => RecordOutcome::Retry(e.to_string()),
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
    ) -> Result<(), RoutingError> {
        let mut fresh = IdempotencyRecord {
            pk: record_pk(&self.config.integration, route_key),
            event_key: route_key.to_string(),
            status: RecordStatus::InFlight,
            fingerprint: fingerprint.to_string(),
            request: Vec::new(),
            op_key: String::new(),
            lease_owner: Some(invocation.request_id.clone()),
            lease_until_ms: Some(self.config.lease_until(now)),
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
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        };
        self.resume_routing(&held, &item.message_id, invocation)
            .await
            .map(|_| ())
    }

    /// Resumes a routing `invocation` holds: a pending one (`route_pending`) is sent and
    /// confirmed; an `in_flight` routing record (one not yet marked) is marked first, then sent. A refused mark is another holder's routing (a routing
    /// record is never called, so it holds no effect id to commit instead).
    pub(crate) async fn resume_routing(
        &self,
        record: &IdempotencyRecord,
        message_id: &str,
        invocation: &Invocation,
    ) -> Result<ManualReason, RoutingError> {
        if record.route_pending {
            return self
                .send_routed(record, message_id, &invocation.request_id)
                .await;
        }
        let item = stored_item(record, |r| self.integration.manual_reason_code(r));
        let d = Delivery {
            body: &item.original_body,
            message_id,
            invocation,
        };
        let marked = self
            .mark_and_send(record, RecordStatus::Manual, item.reason, item.detail, d)
            .await;
        match marked {
            Ok(reason) => Ok(reason),
            Err(Unmarked::Failed(e)) => Err(e),
            Err(Unmarked::Refused(current)) => {
                lease_lost_before_routing(record, &current);
                Err(RoutingError::NotResumed(RecordOutcome::LeaseLost {
                    effect_id: None,
                }))
            }
        }
    }
}

/// The log line of a holder whose mark was refused because the record is no longer its own.
pub(crate) fn lease_lost_before_routing(record: &IdempotencyRecord, current: &IdempotencyRecord) {
    warn!(
        event_key = %record.event_key,
        status = current.status.as_str(),
        holder = ?current.lease_owner,
        "lease lost before routing: nothing sent, the holder finishes it"
    );
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
/// first, see [`Gate::mark_and_send`]), keeping its lease and `InFlight` shard until the send
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
