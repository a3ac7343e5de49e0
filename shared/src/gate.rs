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
//! ## A write that landed and lost its answer
//!
//! The SDK retries a request whose answer did not arrive, and the retry meets the write it
//! repeats. Each write recognises itself by the lease token (see `crate::dynamo`, "A write that
//! landed and lost its answer"): a reserve that meets its own reservation is reserved, a
//! take-over that meets its own lease is taken, a commit that meets the record committed by its
//! token with its slot is committed, a mark that meets its own mark is marked; a release, a
//! confirmation and a slot-id `ADD` are idempotent by nature.

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
use crate::store::{
    CommitOutcome, FinishGuard, FinishOutcome, IdempotencyStore, Reservation, StoreError, TakeOver,
};
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
    /// Record lifetime in **seconds**, counted from the later of the reservation and the
    /// notification's window end (`expires_at = max(now, window_end) + ttl`, see
    /// [`Gate::record_expiry_s`]); routing records count from their reservation. Default 21 days
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
    /// Per terminal code, when the stack books at several (`TERMINALS`, `crate::terminals`):
    /// its key support and claim horizon, which replace the two fields above for records of
    /// that terminal. Empty (the default): every terminal uses the fields above.
    pub terminals: std::collections::BTreeMap<String, crate::terminals::TerminalPolicy>,
}

impl GateConfig {
    /// Whether the terminal `terminal` (a record's terminal code) honours `Idempotency-Key`: its
    /// policy's, else `terminal_supports_idempotency_key`. (A record of a terminal since removed
    /// from `TERMINALS` goes on to the terminal port, which has no client for it and answers
    /// transient: looked up, never claimed, and past the horizon handed to a person.)
    pub fn supports_idempotency_key(&self, terminal: &str) -> bool {
        self.terminals
            .get(terminal)
            .map_or(self.terminal_supports_idempotency_key, |p| {
                p.supports_idempotency_key
            })
    }

    /// The claim horizon at the terminal `terminal`, **milliseconds**: its policy's, else
    /// `claim_horizon_ms`.
    pub fn claim_horizon_for(&self, terminal: &str) -> i64 {
        self.terminals
            .get(terminal)
            .map_or(self.claim_horizon_ms, |p| p.claim_horizon_ms)
    }

    /// Defaults for `integration` booking at `known_terminals`: key support on, 21-day TTL,
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
            terminals: Default::default(),
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
    /// The Lambda request id. Each record handled in the invocation gets its own lease token
    /// from it ([`Invocation::for_record`]), so that two copies of one message in one batch
    /// never hold the same lease, and a write that meets our token is our own.
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
        /// The event key already committed for the same equipment number and window start, if
        /// any: a natural-key collision (signal 4), two event keys for one event.
        natural_key_collision: Option<String>,
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
    /// Our lease was taken over while we worked (our commit or routing was refused): the new
    /// holder finishes the record. `slot_id` is the slot our claim returned, if any; it was
    /// added to the record's `slot_ids`, so the new holder commits it rather than route the
    /// record to a person. Acknowledged.
    LeaseLost {
        /// The slot our claim returned.
        slot_id: Option<String>,
    },
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

impl Invocation {
    /// The invocation as seen by the `n`-th record handled in it: its `request_id` becomes the
    /// lease token `"{request_id}#{n}"` (the `lease_owner` of what that record reserves or takes
    /// over), unique per acquisition as long as `n` is unique within the invocation.
    pub fn for_record(&self, n: usize) -> Invocation {
        Invocation {
            request_id: format!("{}#{n}", self.request_id),
            deadline_ms: self.deadline_ms,
        }
    }
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

    /// The outcome's name as the `record processed` log line gives it in `outcome` (the
    /// runbooks search for these): `Committed`, `AlreadyCommitted`, `Duplicate`,
    /// `DuplicateInFlight`, `LeaseLost`, `Mismatch`, `Rejected`, `Manual`, `Retry`, `NotStarted`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Committed { .. } => "Committed",
            Self::AlreadyCommitted { .. } => "AlreadyCommitted",
            Self::Duplicate(_) => "Duplicate",
            Self::DuplicateInFlight => "DuplicateInFlight",
            Self::LeaseLost { .. } => "LeaseLost",
            Self::Mismatch => "Mismatch",
            Self::Rejected(_) => "Rejected",
            Self::Manual(_) => "Manual",
            Self::Retry(_) => "Retry",
            Self::NotStarted => "NotStarted",
        }
    }

    /// The outcome's detail for the log line's `detail` field: the duplicate's record status,
    /// the rejection's or routing's reason code, the retry's error; empty for the others.
    pub fn detail(&self) -> String {
        match self {
            Self::Duplicate(status) => status.as_str().to_string(),
            Self::Rejected(reason) => reason.code().to_string(),
            Self::Manual(reason) => reason.code().to_string(),
            Self::Retry(error) => error.clone(),
            Self::NotStarted => "deadline near".to_string(),
            _ => String::new(),
        }
    }

    /// The slot id the outcome names (committed, ours, or recorded for the holder), if any.
    pub fn slot_id(&self) -> Option<&str> {
        match self {
            Self::Committed { slot_id, .. } => Some(slot_id),
            Self::AlreadyCommitted { ours, .. } => Some(ours),
            Self::LeaseLost { slot_id } => slot_id.as_deref(),
            _ => None,
        }
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

/// Step 3: claims the slot at the record's terminal with its stored request bytes and operation
/// key.
pub async fn claim(terminal: &dyn SlotTerminal, record: &IdempotencyRecord) -> ClaimOutcome {
    terminal
        .claim_at(&record.terminal, &record.op_key, &record.request)
        .await
}

/// Step 4: commits the slot and the TMS booking in one transaction, only while `owner` holds the
/// record's lease (`in_flight`, `lease_owner = owner`: a holder whose lease was taken over is
/// refused).
///
/// # Errors
/// A transient [`StoreError`], or [`StoreError::Corrupt`] when a booking exists without its record.
pub async fn commit(
    store: &dyn IdempotencyStore,
    record: &IdempotencyRecord,
    owner: &str,
    slot_id: &str,
    now_ms: i64,
) -> Result<CommitOutcome, StoreError> {
    let booking = TmsBooking::for_record(record, slot_id, now_ms);
    store
        .commit(&record.pk, owner, slot_id, &booking, now_ms)
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

    /// When a record for `notification` reserved at `now_ms` (epoch ms) expires, epoch
    /// **seconds**: the key TTL counted from the later of now and the window's end. A record must
    /// outlive the event it guards: until the window ends a redelivery can still act (claim), and
    /// after it every copy is rejected as `window_ended` on the event's own record, which must
    /// still be there to say "committed" for the whole redelivery horizon the TTL covers.
    pub fn record_expiry_s(&self, notification: &Notification, now_ms: i64) -> i64 {
        ms_to_s(now_ms).max(notification.preferred_window.end.timestamp()) + self.config.key_ttl_s
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
            expires_at_s: self.record_expiry_s(notification, now_ms),
            slot_id: None,
            slot_ids: Default::default(),
            inflight_shard: Some(inflight_shard(&keys.event_key)),
            error: None,
            route_pending: false,
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
        let mut records: Vec<(usize, RecordReport)> =
            stream::iter(event.records.into_iter().enumerate())
                .map(|(i, message)| async move {
                    let held_as = invocation.for_record(i);
                    (i, self.handle_record(message, &held_as).await)
                })
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

    /// Handles one SQS record through the four steps (module docs). `invocation.request_id` is
    /// the lease token of everything this record reserves or takes over: unique per record
    /// handling ([`Invocation::for_record`]; [`Gate::handle_batch`] does this).
    ///
    /// Every record ends in exactly one `record processed` log line (INFO) with `outcome`
    /// ([`RecordOutcome::code`]), `detail` ([`RecordOutcome::detail`]), `message_id`, `event_key`,
    /// `container`, `slot_id`, `took_over` and `other_event_key` (a natural-key collision's other
    /// key): duplicates, rejections and retries included. The runbooks search for these lines.
    pub async fn handle_record(
        &self,
        message: SqsMessage,
        invocation: &Invocation,
    ) -> RecordReport {
        let report = self.handle_record_steps(message, invocation).await;
        let other_event_key = match &report.outcome {
            RecordOutcome::Committed {
                natural_key_collision,
                ..
            } => natural_key_collision.as_deref(),
            _ => None,
        };
        info!(
            outcome = report.outcome.code(),
            detail = %report.outcome.detail(),
            message_id = %report.message_id,
            event_key = report.event_key.as_deref().unwrap_or_default(),
            container = report.container.as_deref().unwrap_or_default(),
            slot_id = report.outcome.slot_id().unwrap_or_default(),
            took_over = report.took_over,
            other_event_key = other_event_key.unwrap_or_default(),
            "record processed"
        );
        report
    }

    /// [`Gate::handle_record`] without its log line.
    async fn handle_record_steps(
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
                    .send_routed(&record, &message_id, invocation.request_id.as_str())
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
    async fn claim_and_commit(
        &self,
        record: &IdempotencyRecord,
        body: &str,
        message_id: &str,
        invocation: &Invocation,
    ) -> RecordOutcome {
        if record.route_pending || is_routing_record(record) {
            return match self.resume_routing(record, message_id, invocation).await {
                Ok(reason) => RecordOutcome::Manual(reason),
                Err(e) => RecordOutcome::Retry(e),
            };
        }
        if !self.config.supports_idempotency_key(&record.terminal) {
            return self
                .route_held_record(
                    record,
                    RecordStatus::Manual,
                    ManualReason::NoIdempotencySupport,
                    "the terminal does not honour Idempotency-Key; book by hand".into(),
                    body,
                    message_id,
                    invocation,
                )
                .await;
        }
        let now = self.clock.now_ms();
        let age = now.saturating_sub(record.created_at_ms);
        let past_horizon = age >= self.config.claim_horizon_for(&record.terminal);
        let ended = window_ended(record, now);
        if past_horizon || ended {
            // A record resumed days later (a redelivery after the terminal's key retention), or
            // after its window ended: never claim again; find the slot the key may hold, or hand
            // it to a person.
            let outcome = match self
                .terminal
                .lookup_at(&record.terminal, &record.op_key, &record.request)
                .await
            {
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
                                record.window_end, record.op_key
                            ),
                        )
                    };
                    return self
                        .route_held_record(
                            record,
                            RecordStatus::Manual,
                            reason,
                            detail,
                            body,
                            message_id,
                            invocation,
                        )
                        .await;
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
            // Logged and reported: the summary only, never a character of the answer.
            ClaimOutcome::Transient(why) => {
                return self.release(record, owner, why.to_string()).await
            }
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
                        format!(
                            "terminal: key reused with another body: {}",
                            detail.quoted()
                        ),
                        body,
                        message_id,
                        invocation,
                    )
                    .await
            }
            ClaimOutcome::Permanent { detail, .. } => {
                return self
                    .route_held_record(
                        record,
                        RecordStatus::Failed,
                        ManualReason::TerminalRejected,
                        detail.quoted(),
                        body,
                        message_id,
                        invocation,
                    )
                    .await
            }
        };
        if let Some(other) = slot
            .equipment_number
            .as_deref()
            .filter(|e| *e != record.container)
        {
            // A slot was made, but not for our container: never committed, never recorded in
            // `slot_ids` (whoever holds the record commits a recorded slot); a person decides.
            let detail = format!(
                "terminal answered slot {} for {other}, asked for {}",
                slot.slot_id, record.container
            );
            let outcome = self
                .route_held_record(
                    record,
                    RecordStatus::Failed,
                    ManualReason::TerminalAnswerInvalid,
                    detail.clone(),
                    body,
                    message_id,
                    invocation,
                )
                .await;
            if let RecordOutcome::Manual(_) = outcome {
                // Finished as `failed` (no longer committable): keep the id with the record for
                // the person who cancels it (best effort, the item quotes it too).
                if let Err(e) = self
                    .store
                    .record_slot_id(&record.pk, &slot.slot_id, self.clock.now_ms())
                    .await
                {
                    warn!(event_key = %record.event_key, error = %e, "slot id not added to slot_ids");
                }
            }
            if !matches!(outcome, RecordOutcome::LeaseLost { .. }) {
                return outcome;
            }
            // The record is someone else's now, but this slot is only known here: a person
            // gets it once (keyed by the slot), to cancel it at the terminal.
            let item = ManualItem {
                reason: ManualReason::UnbookedSlot,
                detail: format!("{detail}; the record was taken over meanwhile: cancel this slot"),
                original_body: body.to_string(),
                event_key: Some(record.event_key.clone()),
                message_id: message_id.to_string(),
                original_body_cut: None,
            };
            let route_key = keys::unbooked_slot_route_key(&record.event_key, &slot.slot_id);
            let fingerprint = keys::sha256_hex(slot.slot_id.as_bytes());
            let now = self.clock.now_ms();
            return match self
                .route_once(&route_key, &fingerprint, item, invocation, now)
                .await
            {
                Ok(()) => RecordOutcome::Manual(ManualReason::UnbookedSlot),
                Err(e) => RecordOutcome::Retry(e),
            };
        }
        // Step 4.
        self.commit_slot(record, &slot, body, message_id, invocation)
            .await
    }

    /// Step 4 for a slot `invocation` holds the record for, and what a refused commit means (the
    /// refusal carries the record as it is, so we re-read before acting):
    ///
    /// * committed (by someone else): the same slot is a plain duplicate; another slot id is
    ///   recorded (the distinct-slot signal);
    /// * `failed`/`manual`: the slot is unbooked; a person gets it once
    ///   ([`Gate::route_unbooked_slot`]);
    /// * still `in_flight` under another holder (our lease was taken over): our slot id is
    ///   recorded on the record, so its holder commits it instead of routing the record to a
    ///   person ([`FinishGuard::LeaseAndNoSlot`]); [`RecordOutcome::LeaseLost`].
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
        let existing = match commit(self.store.as_ref(), record, owner, &slot.slot_id, now).await {
            Ok(CommitOutcome::Committed) => {
                return RecordOutcome::Committed {
                    slot_id: slot.slot_id.clone(),
                    natural_key_collision: None,
                }
            }
            Ok(CommitOutcome::CommittedCollision { other_event_key }) => {
                warn!(
                    event_key = %record.event_key,
                    other_event_key = %other_event_key,
                    container = %record.container,
                    window_start = %record.window_start,
                    slot_id = %slot.slot_id,
                    message_id,
                    "natural-key collision: another event key committed this container and window"
                );
                return RecordOutcome::Committed {
                    slot_id: slot.slot_id.clone(),
                    natural_key_collision: Some(other_event_key),
                };
            }
            Ok(CommitOutcome::Refused(existing)) => *existing,
            Err(StoreError::Corrupt(detail)) => {
                return self
                    .route_held_record(
                        record,
                        RecordStatus::Failed,
                        ManualReason::TerminalAnswerInvalid,
                        format!(
                            "slot {} claimed but cannot be committed: {detail}",
                            slot.slot_id
                        ),
                        body,
                        message_id,
                        invocation,
                    )
                    .await
            }
            Err(e) => return self.release(record, owner, e.to_string()).await,
        };
        let existing = if existing.status == RecordStatus::InFlight {
            // Our lease was taken over while the claim was on its way. Record the slot on the
            // record (one atomic ADD that returns the record after it) and act on what it says.
            warn!(
                event_key = %record.event_key,
                holder = ?existing.lease_owner,
                ours = %slot.slot_id,
                "commit refused: the lease was taken over; slot id recorded for the holder"
            );
            match self
                .store
                .record_slot_id(&record.pk, &slot.slot_id, self.clock.now_ms())
                .await
            {
                Ok(Some(after)) if after.status == RecordStatus::InFlight => {
                    return RecordOutcome::LeaseLost {
                        slot_id: Some(slot.slot_id.clone()),
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
                .route_unbooked_slot(record, &existing, slot, body, message_id, invocation)
                .await;
        }
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
                Ok(after) => {
                    distinct_slot_ids = after.map_or(0, |r| r.slot_ids.len()).max(2);
                }
                Err(e) => return RecordOutcome::Retry(e.to_string()),
            }
        }
        RecordOutcome::AlreadyCommitted {
            slot_id: existing.slot_id.clone(),
            ours: slot.slot_id.clone(),
            distinct_slot_ids,
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

    /// Routes a record `invocation` holds to a person: ends it as `status` with its routing
    /// pending ([`IdempotencyStore::finish`], fenced by the lease), then sends the item, then
    /// confirms ([`Gate::send_routed`]). Mark first: a holder that lost its lease sends nothing,
    /// and once marked no one can commit the record, so no committed event is ever also in the
    /// manual queue. A routing because no slot exists ([`ManualReason::PastKeyRetention`]) is
    /// also refused when a slot id was recorded meanwhile (a claim that was in transit when the
    /// lease changed hands, see [`RecordOutcome::LeaseLost`]): that slot is committed instead.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn route_held_record(
        &self,
        record: &IdempotencyRecord,
        status: RecordStatus,
        reason: ManualReason,
        detail: String,
        body: &str,
        message_id: &str,
        invocation: &Invocation,
    ) -> RecordOutcome {
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
            // Routings because no slot was found: refused if a slot id was recorded meanwhile.
            ManualReason::PastKeyRetention | ManualReason::WindowEnded => {
                FinishGuard::LeaseAndNoSlot
            }
            _ => FinishGuard::Lease,
        };
        let item_json = item.to_json();
        let finished = self
            .store
            .finish(
                &record.pk,
                owner,
                status,
                &detail,
                &item_json,
                guard,
                self.clock.now_ms(),
            )
            .await;
        match finished {
            Ok(FinishOutcome::Finished) => {}
            Ok(FinishOutcome::Refused(Some(current))) => {
                return Box::pin(
                    self.after_refused_finish(record, *current, body, message_id, invocation),
                )
                .await
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

    /// A finish of `record` was refused; `current` is the record as the store holds it. Still
    /// ours with a slot recorded (the routing's no-slot guard): commit that slot. Someone
    /// else's: they finish it; we re-read and send nothing.
    async fn after_refused_finish(
        &self,
        record: &IdempotencyRecord,
        current: IdempotencyRecord,
        body: &str,
        message_id: &str,
        invocation: &Invocation,
    ) -> RecordOutcome {
        let owner = invocation.request_id.as_str();
        let ours = current.status == RecordStatus::InFlight
            && current.lease_owner.as_deref() == Some(owner);
        if let (true, Some(slot_id)) = (ours, current.slot_ids.iter().next()) {
            info!(
                event_key = %record.event_key,
                slot_id = %slot_id,
                "a slot was recorded while we held the record: committed instead of routed"
            );
            let slot = SlotClaim {
                slot_id: slot_id.clone(),
                equipment_number: None,
            };
            return self
                .commit_slot(&current, &slot, body, message_id, invocation)
                .await;
        }
        warn!(
            event_key = %record.event_key,
            status = current.status.as_str(),
            holder = ?current.lease_owner,
            "lease lost before routing: nothing sent, the holder finishes it"
        );
        RecordOutcome::LeaseLost { slot_id: None }
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
        let mut item = stored_item(record);
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

    /// Sends `item` to the manual queue once per `route_key`: reserves a routing record born
    /// `manual` with its routing pending (leased, in the `InFlight` index, the item in
    /// `request`), sends the item, then confirms ([`Gate::send_routed`]). `Ok` when the item was
    /// sent now, was sent before, or a live lease holder is sending it (its message stays
    /// unacknowledged until it is done, and the reconciler finishes a stranded one); `Err`
    /// (retry) on a store or queue failure.
    async fn route_once(
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
            lease_until_ms: Some(self.lease_until(invocation, now)),
            created_at_ms: now,
            updated_at_ms: now,
            expires_at_s: ms_to_s(now) + self.config.key_ttl_s,
            slot_id: None,
            slot_ids: Default::default(),
            inflight_shard: Some(inflight_shard(route_key)),
            error: None,
            route_pending: false,
            container: String::new(),
            terminal: String::new(),
            window_start: String::new(),
            window_end: String::new(),
        };
        make_routing_record(&mut fresh, &item);
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
        let item = stored_item(record);
        match self
            .route_held_record(
                record,
                RecordStatus::Manual,
                item.reason,
                item.detail,
                &item.original_body,
                message_id,
                invocation,
            )
            .await
        {
            RecordOutcome::Manual(reason) => Ok(reason),
            RecordOutcome::Retry(why) => Err(why),
            other => Err(format!("routing not resumed: {other:?}")),
        }
    }
}

/// The manual item a routing record stores in `request`; one that cannot be read is routed as
/// `rejected` with the stored bytes as its body (nothing is lost).
fn stored_item(record: &IdempotencyRecord) -> ManualItem {
    ManualItem::from_json(&record.request).unwrap_or_else(|| ManualItem {
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
/// JSON), never a slot claim. It is born `manual` with its routing pending (the mark comes
/// first, see [`Gate::route_held_record`]), keeping its lease and `InFlight` shard until the send
/// is confirmed.
fn make_routing_record(record: &mut IdempotencyRecord, item: &ManualItem) {
    record.op_key = keys::operation_key(&record.event_key, keys::MANUAL_ROUTE);
    record.request = item.to_json();
    record.status = RecordStatus::Manual;
    record.route_pending = true;
    record.error = Some(item.detail.clone());
}

/// Whether the window of the event `record` guards has ended at `now_ms` (epoch ms): no claim is
/// ever sent after it, only a lookup. `false` for a record without a readable window (a routing
/// record).
pub(crate) fn window_ended(record: &IdempotencyRecord, now_ms: i64) -> bool {
    chrono::DateTime::parse_from_rfc3339(&record.window_end)
        .is_ok_and(|end| end.timestamp_millis() <= now_ms)
}

/// Whether `record` is a routing record (its operation is a manual-queue send, see "Routing to a
/// person exactly once" in the module docs): resuming it sends its stored item; it is never
/// claimed at the terminal.
pub(crate) fn is_routing_record(record: &IdempotencyRecord) -> bool {
    record.op_key == keys::operation_key(&record.event_key, keys::MANUAL_ROUTE)
}
