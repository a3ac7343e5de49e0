//! The consumer: an SQS batch in, a partial batch response out, each record through the four
//! steps of the gate:
//!
//! 1. [`derive_keys`]: a stable event key at the edge, the operation key and the fingerprint;
//! 2. [`reserve`]: the key reserved before any side effect (one conditional write);
//! 3. [`claim`]: the slot claimed with the operation key in the `Idempotency-Key` header;
//! 4. [`commit`]: the outcome and the TMS booking written in one transaction.
//!
//! ## Routing to a person exactly once
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
//! operation, `request` the item's JSON): it is `in_flight` with a lease while the send happens,
//! then `manual`. Conflicts resolve as for events: `manual` or a live lease is a duplicate
//! (acknowledged); an expired lease is taken over and the stored item sent. Routing records sit
//! in the `InFlight` index while `in_flight`, so the reconciler finishes one whose sender died
//! and whose message will not return (e.g. all copies acknowledged as duplicates meanwhile).
//!
//! The send comes before the mark: a crash between them (or an error from either, or a take-over
//! by a host whose clock runs ahead) sends the item again when the record is resumed. That is
//! the honest promise: **at least once into the manual queue, never lost**, and a repeat carries
//! the same dedup key (`event_key`, or for a rejected body the same `original_body`), so a person
//! sees it is one case. Marking first would turn that crash into a lost item.

use std::collections::HashSet;
use std::sync::Arc;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use futures::stream::{self, StreamExt};
use tracing::{info, warn};

use crate::clock::{ms_to_s, Clock};
use crate::keys::{self, SLOT_CLAIM};
use crate::manual::{ManualItem, ManualQueue, ManualReason};
use crate::notification::{parse_notification, Notification, RejectReason};
use crate::record::{inflight_shard, record_pk, IdempotencyRecord, RecordStatus, TmsBooking};
use crate::store::{CommitOutcome, IdempotencyStore, Reservation, StoreError, TakeOver};
use crate::terminal::{ClaimOutcome, LookupOutcome, SlotClaim, SlotTerminal};

/// 21 days in seconds: the default key TTL, longer than the longest redelivery horizon. A
/// notification can wait 4 days in the notification queue, then up to 14 days (the SQS maximum
/// `MessageRetentionPeriod`) in its dead-letter queue, and a redrive sends it back as a new message with 4
/// more days: 18 days, plus 3 days of margin. A record that expired would let a redelivery claim
/// again under a key the terminal forgot long ago.
pub const DEFAULT_KEY_TTL_S: i64 = 21 * 24 * 3600;

/// The gate's settings.
#[derive(Debug, Clone)]
pub struct GateConfig {
    /// The integration's name, the prefix of every record key (`"{integration}#{event_key}"`).
    pub integration: String,
    /// Terminal codes this integration books at; others are rejected.
    pub known_terminals: Vec<String>,
    /// Whether the terminal honours `Idempotency-Key`. If not, every event goes to the manual
    /// queue: a retry could claim a second slot.
    pub terminal_supports_idempotency_key: bool,
    /// Record lifetime in **seconds** (`expires_at = now + ttl`). Default 21 days
    /// ([`DEFAULT_KEY_TTL_S`]).
    pub key_ttl_s: i64,
    /// The shortest lease, **milliseconds**: a lease lasts until the invocation's deadline, but
    /// never less than this, even when the invocation has no time left.
    pub lease_floor_ms: i64,
    /// Records processed at once within a batch.
    pub max_concurrency: usize,
    /// No new record is started when less than this many **milliseconds** remain before the
    /// invocation's deadline (keep it above the terminal's request timeout plus a commit).
    pub deadline_margin_ms: i64,
    /// A record older than this many **milliseconds** is never claimed again by whoever resumes
    /// it: the terminal's key retention minus a margin (default 23 h: 24 h retention, 1 h
    /// margin, as [`crate::reconciler::ReconcilerConfig`]). Past it the terminal may have
    /// forgotten the key, so a claim could make a second slot; the slot is looked up instead,
    /// and without one the record goes to a person (`past_key_retention`). This is what keeps a
    /// redelivery days later from claiming again.
    pub claim_horizon_ms: i64,
}

impl GateConfig {
    /// Defaults for `integration` booking at `known_terminals`: key support on, 14-day TTL,
    /// 30 s lease floor, 10 records at once, 12 s deadline margin, 23 h claim horizon.
    pub fn new(integration: impl Into<String>, known_terminals: Vec<String>) -> Self {
        Self {
            integration: integration.into(),
            known_terminals,
            terminal_supports_idempotency_key: true,
            key_ttl_s: DEFAULT_KEY_TTL_S,
            lease_floor_ms: 30_000,
            max_concurrency: 10,
            deadline_margin_ms: 12_000,
            claim_horizon_ms: 23 * 3_600_000,
        }
    }
}

/// The gate and its ports, built once per cold start.
#[derive(Clone)]
pub struct Gate {
    /// Settings.
    pub config: GateConfig,
    /// The idempotency and TMS bookings tables.
    pub store: Arc<dyn IdempotencyStore>,
    /// The terminal.
    pub terminal: Arc<dyn SlotTerminal>,
    /// The manual-booking queue.
    pub manual: Arc<dyn ManualQueue>,
    /// Time.
    pub clock: Arc<dyn Clock>,
}

/// The invocation a batch arrives in.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The Lambda request id: the lease owner.
    pub request_id: String,
    /// The invocation's deadline, epoch milliseconds.
    pub deadline_ms: i64,
}

/// What happened to one SQS record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordOutcome {
    /// Claimed and committed by us.
    Committed {
        /// The slot.
        slot_id: String,
    },
    /// Someone else committed first; `ours` is the slot the terminal gave us, if we claimed.
    AlreadyCommitted {
        /// The committed slot.
        slot_id: Option<String>,
        /// The slot our claim returned.
        ours: String,
        /// Distinct slot ids now recorded for the key (1 when ours is the committed one; 2 or
        /// more is the distinct-slot signal).
        distinct_slot_ids: usize,
    },
    /// A conflict on reserve with a finished record (`committed`, `failed`, `manual`).
    Duplicate(RecordStatus),
    /// A conflict on reserve with an `in_flight` record whose lease is live.
    DuplicateInFlight,
    /// The same event key with another fingerprint: routed to the manual queue.
    Mismatch,
    /// The body can never succeed: routed to the manual queue.
    Rejected(RejectReason),
    /// Routed to the manual queue for another reason (the record is `manual` or `failed`).
    Manual(ManualReason),
    /// A transient failure: reported in `batchItemFailures`; SQS redelivers.
    Retry(String),
    /// Not started: the invocation's deadline was near. Reported in `batchItemFailures`.
    NotStarted,
}

impl RecordOutcome {
    /// Whether the record is acknowledged (left out of `batchItemFailures`).
    pub fn acknowledged(&self) -> bool {
        !matches!(self, Self::Retry(_) | Self::NotStarted)
    }

    /// Whether this is a conflict on reserve (the duplicate-ratio numerator).
    pub fn is_duplicate(&self) -> bool {
        matches!(self, Self::Duplicate(_) | Self::DuplicateInFlight)
    }
}

/// One record's report.
#[derive(Debug, Clone)]
pub struct RecordReport {
    /// The SQS message id.
    pub message_id: String,
    /// The event key, if the body got that far.
    pub event_key: Option<String>,
    /// The container, if the body got that far.
    pub container: Option<String>,
    /// Whether this record took over an expired lease.
    pub took_over: bool,
    /// What happened.
    pub outcome: RecordOutcome,
}

/// A batch's result: the Lambda response and a report per record (in batch order).
#[derive(Debug, Clone)]
pub struct BatchReport {
    /// `{"batchItemFailures": [{"itemIdentifier": messageId}, ...]}`, each message id once.
    pub response: SqsBatchResponse,
    /// One report per SQS record, in the batch's order.
    pub records: Vec<RecordReport>,
}

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

/// Step 1: derives the event key, the slot claim's operation key, the fingerprint and the claim
/// request bytes from a parsed notification. Never uses the SQS message id.
///
/// # Errors
/// Only if canonical JSON cannot be written, which a parsed notification cannot cause.
pub fn derive_keys(notification: &Notification) -> Result<DerivedKeys, serde_json::Error> {
    let event_key = keys::event_key(notification);
    Ok(DerivedKeys {
        op_key: keys::operation_key(&event_key, SLOT_CLAIM),
        fingerprint: keys::fingerprint(notification)?,
        request: keys::claim_request(notification)?,
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

/// Step 3: claims the slot with the record's stored request bytes and operation key.
pub async fn claim(terminal: &dyn SlotTerminal, record: &IdempotencyRecord) -> ClaimOutcome {
    terminal.claim(&record.op_key, &record.request).await
}

/// Step 4: commits the slot and the TMS booking in one transaction, only while the record is
/// `in_flight`.
///
/// # Errors
/// A transient [`StoreError`], or [`StoreError::Corrupt`] when a booking exists without its record.
pub async fn commit(
    store: &dyn IdempotencyStore,
    record: &IdempotencyRecord,
    slot_id: &str,
    now_ms: i64,
) -> Result<CommitOutcome, StoreError> {
    let booking = TmsBooking::for_record(record, slot_id, now_ms);
    store.commit(&record.pk, slot_id, &booking, now_ms).await
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

    /// Builds the record that step 2 reserves.
    pub fn new_record(
        &self,
        notification: &Notification,
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
            expires_at_s: ms_to_s(now_ms) + self.config.key_ttl_s,
            slot_id: None,
            slot_ids: Default::default(),
            inflight_shard: Some(inflight_shard(&keys.event_key)),
            error: None,
            container: notification.equipment_number.to_string(),
            terminal: notification.terminal.clone(),
            window_start: notification.preferred_window.start_rfc3339(),
            window_end: notification.preferred_window.end_rfc3339(),
        }
    }

    /// Handles one SQS batch: records concurrently (at most `max_concurrency` at once), no new
    /// record started within `deadline_margin_ms` of the deadline. Never fails as a whole: every
    /// record is either acknowledged or listed in `batchItemFailures`.
    pub async fn handle_batch(&self, event: SqsEvent, invocation: &Invocation) -> BatchReport {
        let concurrency = self.config.max_concurrency.max(1);
        let mut records: Vec<(usize, RecordReport)> = stream::iter(
            event.records.into_iter().enumerate(),
        )
        .map(|(i, message)| async move { (i, self.handle_record(message, invocation).await) })
        .buffer_unordered(concurrency)
        .collect()
        .await;
        records.sort_by_key(|(i, _)| *i);
        let records: Vec<RecordReport> = records.into_iter().map(|(_, r)| r).collect();
        let mut response = SqsBatchResponse::default();
        let mut failed = HashSet::new();
        for r in &records {
            if !r.outcome.acknowledged() && failed.insert(r.message_id.clone()) {
                response.add_failure(r.message_id.clone());
            }
        }
        BatchReport { response, records }
    }

    /// Handles one SQS record through the four steps of the module docs.
    pub async fn handle_record(
        &self,
        message: SqsMessage,
        invocation: &Invocation,
    ) -> RecordReport {
        let message_id = message.message_id.clone().unwrap_or_default();
        let mut report = RecordReport {
            message_id: message_id.clone(),
            event_key: None,
            container: None,
            took_over: false,
            outcome: RecordOutcome::NotStarted,
        };
        let now = self.clock.now_ms();
        if now.saturating_add(self.config.deadline_margin_ms) >= invocation.deadline_ms {
            info!(message_id, "deadline near: record left for redelivery");
            return report;
        }
        let body = message.body.unwrap_or_default();

        // Strict parse: a body that can never succeed goes to a person, acknowledged. A window
        // that has ended is decided on the event's own record (see "Routing to a person exactly
        // once" below), so a committed event is never also routed to a person.
        let (notification, window_ended) =
            match parse_notification(&body, now, &self.config.known_terminals) {
                Ok(n) => (n, None),
                Err(reason) => match self.parse_ended(&body, &reason) {
                    Some(n) => (n, Some(reason)),
                    None => {
                        report.outcome = self
                            .route_rejection(reason, body, &message_id, invocation, now)
                            .await;
                        return report;
                    }
                },
            };
        report.container = Some(notification.equipment_number.to_string());

        // Step 1.
        let keys = match derive_keys(&notification) {
            Ok(k) => k,
            Err(e) => {
                let reason = RejectReason::NotJson(e.to_string());
                report.outcome = self
                    .route_rejection(reason, body, &message_id, invocation, now)
                    .await;
                return report;
            }
        };
        report.event_key = Some(keys.event_key.clone());
        // Step 2. A window that has ended is never claimed: its record is a routing record.
        let mut fresh = self.new_record(&notification, &keys, invocation, now);
        if let Some(reason) = &window_ended {
            let item = ManualItem {
                reason: ManualReason::WindowEnded,
                detail: format!("{}: {reason}", reason.code()),
                original_body: body.clone(),
                event_key: Some(keys.event_key.clone()),
                message_id: message_id.clone(),
                original_body_cut: None,
            };
            make_routing_record(&mut fresh, &item);
        }
        let record = match reserve(self.store.as_ref(), &fresh, now).await {
            Ok(Reservation::Reserved) => fresh,
            Ok(Reservation::Conflict(existing)) => {
                match self
                    .resolve_conflict(*existing, &keys, &body, &message_id, invocation, now)
                    .await
                {
                    Ok(record) => {
                        report.took_over = true;
                        record
                    }
                    Err(outcome) => {
                        report.outcome = outcome;
                        return report;
                    }
                }
            }
            Err(e) => {
                report.outcome = RecordOutcome::Retry(e.to_string());
                return report;
            }
        };
        report.outcome = match window_ended {
            Some(reason) if !report.took_over => {
                match self
                    .deliver_routed(&record, &message_id, invocation.request_id.as_str())
                    .await
                {
                    Ok(_) => RecordOutcome::Rejected(reason),
                    Err(e) => RecordOutcome::Retry(e),
                }
            }
            _ => {
                self.claim_and_commit(&record, &body, &message_id, invocation)
                    .await
            }
        };
        info!(
            event_key = %keys.event_key,
            message_id = %message_id,
            container = %notification.equipment_number,
            outcome = ?report.outcome,
            took_over = report.took_over,
            "record processed"
        );
        report
    }

    /// The conflict cases of step 2: the old record decides. `Ok(record)` means we took over an
    /// expired lease and resume from the stored request; `Err(outcome)` ends the record.
    async fn resolve_conflict(
        &self,
        existing: IdempotencyRecord,
        keys: &DerivedKeys,
        body: &str,
        message_id: &str,
        invocation: &Invocation,
        now: i64,
    ) -> Result<IdempotencyRecord, RecordOutcome> {
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
        match existing.status {
            RecordStatus::InFlight => {}
            finished => return Err(RecordOutcome::Duplicate(finished)),
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
    async fn claim_and_commit(
        &self,
        record: &IdempotencyRecord,
        body: &str,
        message_id: &str,
        invocation: &Invocation,
    ) -> RecordOutcome {
        let owner = invocation.request_id.as_str();
        if is_routing_record(record) {
            return match self.deliver_routed(record, message_id, owner).await {
                Ok(reason) => RecordOutcome::Manual(reason),
                Err(e) => RecordOutcome::Retry(e),
            };
        }
        if !self.config.terminal_supports_idempotency_key {
            return self
                .route_held_record(
                    record,
                    RecordStatus::Manual,
                    ManualReason::NoIdempotencySupport,
                    "the terminal does not honour Idempotency-Key; book by hand".into(),
                    body,
                    message_id,
                    owner,
                )
                .await;
        }
        let age = self.clock.now_ms().saturating_sub(record.created_at_ms);
        if age >= self.config.claim_horizon_ms {
            // A record resumed days later (a redelivery after the terminal's key retention):
            // never claim again; find the slot the key may hold, or hand it to a person.
            let outcome = match self.terminal.lookup(&record.op_key).await {
                LookupOutcome::Found(slot) => ClaimOutcome::Claimed(slot),
                LookupOutcome::Transient(why) => ClaimOutcome::Transient(why),
                LookupOutcome::NotFound => {
                    return self
                        .route_held_record(
                            record,
                            RecordStatus::Manual,
                            ManualReason::PastKeyRetention,
                            format!(
                                "in_flight for {} s, past the terminal's key retention minus \
                                 margin; a new claim could make a second slot",
                                age / 1000
                            ),
                            body,
                            message_id,
                            owner,
                        )
                        .await
                }
            };
            return self
                .settle_claim(record, outcome, body, message_id, invocation)
                .await;
        }
        // Step 3.
        let outcome = claim(self.terminal.as_ref(), record).await;
        self.settle_claim(record, outcome, body, message_id, invocation)
            .await
    }

    /// Acts on a claim's outcome for a record `owner` holds: commit a slot (step 4), release the
    /// lease on a transient failure, or route a permanent one to the manual queue. Shared by the
    /// consumer and the reconciler. `body` is what the manual queue gets as the original body.
    pub(crate) async fn settle_claim(
        &self,
        record: &IdempotencyRecord,
        outcome: ClaimOutcome,
        body: &str,
        message_id: &str,
        invocation: &Invocation,
    ) -> RecordOutcome {
        let owner = invocation.request_id.as_str();
        let slot = match outcome {
            ClaimOutcome::Claimed(slot) => slot,
            ClaimOutcome::Transient(why) => return self.release(record, owner, why).await,
            ClaimOutcome::KeyInFlight => {
                return self
                    .release(record, owner, "terminal: same key still in flight".into())
                    .await
            }
            ClaimOutcome::KeyMismatch(detail) => {
                return self
                    .route_held_record(
                        record,
                        RecordStatus::Failed,
                        ManualReason::TerminalKeyMismatch,
                        format!("terminal: key reused with another body: {detail}"),
                        body,
                        message_id,
                        owner,
                    )
                    .await
            }
            ClaimOutcome::Permanent { status, detail } => {
                return self
                    .route_held_record(
                        record,
                        RecordStatus::Failed,
                        ManualReason::TerminalRejected,
                        format!("terminal answered {status}: {detail}"),
                        body,
                        message_id,
                        owner,
                    )
                    .await
            }
        };
        if let Some(other) = slot
            .equipment_number
            .as_deref()
            .filter(|e| *e != record.container)
        {
            // A slot was made, but not for our container: keep its id and let a person decide.
            let _ = self
                .store
                .record_slot_id(&record.pk, &slot.slot_id, self.clock.now_ms())
                .await;
            return self
                .route_held_record(
                    record,
                    RecordStatus::Failed,
                    ManualReason::TerminalAnswerInvalid,
                    format!(
                        "terminal answered slot {} for {other}, asked for {}",
                        slot.slot_id, record.container
                    ),
                    body,
                    message_id,
                    owner,
                )
                .await;
        }
        // Step 4.
        self.commit_slot(record, &slot, body, message_id, invocation)
            .await
    }

    async fn commit_slot(
        &self,
        record: &IdempotencyRecord,
        slot: &SlotClaim,
        body: &str,
        message_id: &str,
        invocation: &Invocation,
    ) -> RecordOutcome {
        let owner = invocation.request_id.as_str();
        let now = self.clock.now_ms();
        match commit(self.store.as_ref(), record, &slot.slot_id, now).await {
            Ok(CommitOutcome::Committed) => RecordOutcome::Committed {
                slot_id: slot.slot_id.clone(),
            },
            Ok(CommitOutcome::NotInFlight(existing))
                if existing.status != RecordStatus::Committed =>
            {
                self.route_unbooked_slot(record, &existing, slot, body, message_id, invocation)
                    .await
            }
            Ok(CommitOutcome::NotInFlight(existing)) => {
                let mut distinct_slot_ids = existing.slot_ids.len().max(1);
                if existing.slot_id.as_deref() != Some(slot.slot_id.as_str()) {
                    warn!(
                        event_key = %record.event_key,
                        committed = ?existing.slot_id,
                        ours = %slot.slot_id,
                        "terminal returned another slot id for a committed key"
                    );
                    match self
                        .store
                        .record_slot_id(&record.pk, &slot.slot_id, now)
                        .await
                    {
                        Ok(n) => distinct_slot_ids = n.max(2),
                        Err(e) => return RecordOutcome::Retry(e.to_string()),
                    }
                }
                RecordOutcome::AlreadyCommitted {
                    slot_id: existing.slot_id.clone(),
                    ours: slot.slot_id.clone(),
                    distinct_slot_ids,
                }
            }
            Err(StoreError::Corrupt(detail)) => {
                self.route_held_record(
                    record,
                    RecordStatus::Failed,
                    ManualReason::TerminalAnswerInvalid,
                    format!(
                        "slot {} claimed but cannot be committed: {detail}",
                        slot.slot_id
                    ),
                    body,
                    message_id,
                    owner,
                )
                .await
            }
            Err(e) => self.release(record, owner, e.to_string()).await,
        }
    }

    /// A transient failure: the record stays `in_flight`, the lease is released so the
    /// redelivery can take over at once, and the record is reported in `batchItemFailures`.
    pub(crate) async fn release(
        &self,
        record: &IdempotencyRecord,
        owner: &str,
        why: String,
    ) -> RecordOutcome {
        if let Err(e) = self
            .store
            .release_lease(&record.pk, owner, self.clock.now_ms())
            .await
        {
            warn!(event_key = %record.event_key, error = %e, "lease not released; it expires on its own");
        }
        RecordOutcome::Retry(why)
    }

    /// Our claim returned `slot` but the record had meanwhile been finished as `failed` or
    /// `manual` by another holder (a take-over that routed it to a person, e.g. past the key's
    /// retention while our claim was still on its way): nothing will book that slot. A person gets
    /// it once per slot ([`keys::unbooked_slot_route_key`], reason `unbooked_slot`) to book it by
    /// hand or cancel it at the terminal; then its id is added to the record's `slot_ids`.
    ///
    /// The routing record is reserved first: once it exists, the item is durable (a crash after
    /// that is finished by the reconciler). Before it exists nothing else remembers this slot (a
    /// redelivery sees the finished record and is a duplicate), so a failure to reserve it is
    /// logged at `error` with the slot id and the key, and `Retry` is returned.
    async fn route_unbooked_slot(
        &self,
        record: &IdempotencyRecord,
        existing: &IdempotencyRecord,
        slot: &SlotClaim,
        body: &str,
        message_id: &str,
        invocation: &Invocation,
    ) -> RecordOutcome {
        let now = self.clock.now_ms();
        warn!(
            event_key = %record.event_key,
            status = existing.status.as_str(),
            ours = %slot.slot_id,
            "the terminal issued a slot for a record already finished; routed to a person"
        );
        let item = ManualItem {
            reason: ManualReason::UnbookedSlot,
            detail: format!(
                "the terminal issued slot {} under Idempotency-Key {} after the record was \
                 finished as {} ({}); nothing booked it: book it by hand or cancel it at the \
                 terminal",
                slot.slot_id,
                record.op_key,
                existing.status.as_str(),
                existing.error.as_deref().unwrap_or("no error recorded"),
            ),
            original_body: body.to_string(),
            event_key: Some(record.event_key.clone()),
            message_id: message_id.to_string(),
            original_body_cut: None,
        };
        let route_key = keys::unbooked_slot_route_key(&record.event_key, &slot.slot_id);
        let fingerprint = keys::sha256_hex(slot.slot_id.as_bytes());
        if let Err(e) = self
            .route_once(&route_key, &fingerprint, item, invocation, now)
            .await
        {
            tracing::error!(
                event_key = %record.event_key,
                op_key = %record.op_key,
                slot_id = %slot.slot_id,
                error = %e,
                "an unbooked slot could not be routed to a person: book or cancel it by hand"
            );
            return RecordOutcome::Retry(e);
        }
        // Best effort, after the item is safe: the distinct-slot bookkeeping on the record.
        if let Err(e) = self
            .store
            .record_slot_id(&record.pk, &slot.slot_id, self.clock.now_ms())
            .await
        {
            warn!(event_key = %record.event_key, error = %e, "slot id not added to slot_ids");
        }
        RecordOutcome::Manual(ManualReason::UnbookedSlot)
    }

    /// Routes a record we hold to the manual queue, then ends it as `status`. The queue comes
    /// first: if the process dies between the two, the redelivery routes it again (at least once
    /// into the queue, never lost).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn route_held_record(
        &self,
        record: &IdempotencyRecord,
        status: RecordStatus,
        reason: ManualReason,
        detail: String,
        body: &str,
        message_id: &str,
        owner: &str,
    ) -> RecordOutcome {
        let item = ManualItem {
            reason,
            detail: detail.clone(),
            original_body: body.to_string(),
            event_key: Some(record.event_key.clone()),
            message_id: message_id.to_string(),
            original_body_cut: None,
        };
        match self
            .send_then_finish(record, owner, item, status, &detail)
            .await
        {
            Ok(()) => RecordOutcome::Manual(reason),
            Err(why) => RecordOutcome::Retry(why),
        }
    }

    /// Sends `item` to the manual queue, then ends the record `owner` holds as `status` with
    /// `error`. Queue first, mark second: a crash between the two leaves the record `in_flight`
    /// and whoever resumes it sends again (at least once into the queue, never lost). On a
    /// failure of either the lease is released (see [`Gate::release`]) and the reason returned.
    async fn send_then_finish(
        &self,
        record: &IdempotencyRecord,
        owner: &str,
        item: ManualItem,
        status: RecordStatus,
        error: &str,
    ) -> Result<(), String> {
        if let Err(e) = self.manual.send(item).await {
            self.release(record, owner, e.to_string()).await;
            return Err(e.to_string());
        }
        if let Err(e) = self
            .store
            .finish(&record.pk, owner, status, error, self.clock.now_ms())
            .await
        {
            self.release(record, owner, e.to_string()).await;
            return Err(e.to_string());
        }
        Ok(())
    }

    /// Routes a body that failed strict parsing to the manual queue with its reason, once per
    /// distinct body (routing key [`keys::rejected_route_key`]; see "Routing to a person exactly
    /// once" in the module docs). Every copy is acknowledged as `Rejected`.
    async fn route_rejection(
        &self,
        reason: RejectReason,
        body: String,
        message_id: &str,
        invocation: &Invocation,
        now: i64,
    ) -> RecordOutcome {
        let manual_reason = match reason {
            RejectReason::WindowEnded { .. } => ManualReason::WindowEnded,
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

    /// For a body rejected only because its window has ended: the notification as parsed a
    /// millisecond before the window's end, so its keys (and its record) can decide; `None` for
    /// every other reason.
    fn parse_ended(&self, body: &str, reason: &RejectReason) -> Option<Notification> {
        let RejectReason::WindowEnded { end } = reason else {
            return None;
        };
        let end_ms = chrono::DateTime::parse_from_rfc3339(end)
            .ok()?
            .timestamp_millis();
        parse_notification(body, end_ms - 1, &self.config.known_terminals).ok()
    }

    /// Sends `item` to the manual queue once per `route_key`: reserves a routing record
    /// (`in_flight`, leased, in the `InFlight` index) holding the item, sends it, then marks the
    /// record `manual`. `Ok` when the item was sent now, was sent before (`manual`), or a live
    /// lease holder is sending it (its message stays unacknowledged until it is done, and the
    /// reconciler finishes a stranded one); `Err` (retry) on a store or queue failure.
    async fn route_once(
        &self,
        route_key: &str,
        fingerprint: &str,
        item: ManualItem,
        invocation: &Invocation,
        now: i64,
    ) -> Result<(), String> {
        let owner = invocation.request_id.as_str();
        let mut fresh = IdempotencyRecord {
            pk: record_pk(&self.config.integration, route_key),
            event_key: route_key.to_string(),
            status: RecordStatus::InFlight,
            fingerprint: fingerprint.to_string(),
            request: Vec::new(),
            op_key: String::new(),
            lease_owner: Some(owner.to_string()),
            lease_until_ms: Some(self.lease_until(invocation, now)),
            created_at_ms: now,
            updated_at_ms: now,
            expires_at_s: ms_to_s(now) + self.config.key_ttl_s,
            slot_id: None,
            slot_ids: Default::default(),
            inflight_shard: Some(inflight_shard(route_key)),
            error: None,
            container: String::new(),
            terminal: String::new(),
            window_start: String::new(),
            window_end: String::new(),
        };
        make_routing_record(&mut fresh, &item);
        let held = match self.store.reserve(&fresh, now).await {
            Ok(Reservation::Reserved) => fresh,
            Ok(Reservation::Conflict(existing)) => {
                if existing.status != RecordStatus::InFlight || existing.lease_is_live(now) {
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
        self.deliver_routed(&held, &item.message_id, owner)
            .await
            .map(|_| ())
    }

    /// Sends the item a routing record `owner` holds (stored in its `request`, so every resumer
    /// sends the same item), then marks the record `manual`. Queue first, mark second: a crash
    /// between the two leaves the record `in_flight`, and whoever resumes it (a redelivery, the
    /// reconciler) sends the item again, under the same dedup key. On a failure the lease is
    /// released and the caller retries.
    pub(crate) async fn deliver_routed(
        &self,
        record: &IdempotencyRecord,
        message_id: &str,
        owner: &str,
    ) -> Result<ManualReason, String> {
        let mut item = ManualItem::from_json(&record.request).unwrap_or_else(|| ManualItem {
            reason: ManualReason::Rejected,
            detail: format!("routing record {} holds no readable item", record.event_key),
            original_body: String::from_utf8_lossy(&record.request).into_owned(),
            event_key: None,
            message_id: String::new(),
            original_body_cut: None,
        });
        item.message_id = message_id.to_string();
        let reason = item.reason;
        let detail = item.detail.clone();
        self.send_then_finish(record, owner, item, RecordStatus::Manual, &detail)
            .await
            .map(|()| reason)
    }
}

/// Turns `record` into a routing record for `item`: its one operation is sending `item` to the
/// manual queue (`op_key = operation_key(event_key, MANUAL_ROUTE)`, `request` = the item as
/// JSON), never a slot claim.
fn make_routing_record(record: &mut IdempotencyRecord, item: &ManualItem) {
    record.op_key = keys::operation_key(&record.event_key, keys::MANUAL_ROUTE);
    record.request = item.to_json();
}

/// Whether `record` is a routing record (its operation is a manual-queue send, see "Routing to a
/// person exactly once" in the module docs): resuming it sends its stored item; it is never
/// claimed at the terminal.
pub(crate) fn is_routing_record(record: &IdempotencyRecord) -> bool {
    record.op_key == keys::operation_key(&record.event_key, keys::MANUAL_ROUTE)
}
