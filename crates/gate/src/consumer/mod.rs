//! The consumer: an SQS batch in, a partial batch response out, each record through the four
//! steps of the gate:
//!
//! 1. [`derive_keys`]: a stable event key at the edge, the operation key and the fingerprint;
//! 2. [`reserve`]: the key reserved before any side effect (one conditional write);
//! 3. [`claim`]: the effect claimed with the operation key in the `Idempotency-Key` header;
//! 4. [`commit`]: the outcome and the business row written in one transaction.
//!
//! ## A write that landed and lost its answer
//!
//! The SDK retries a request whose answer did not arrive, and the retry meets the write it
//! repeats. Each write recognises itself by the lease token (see `crate::store::dynamo`, "A write that
//! landed and lost its answer"): a reserve that meets its own reservation is reserved, a
//! take-over that meets its own lease is taken, a commit that meets the record committed by its
//! token with its effect is committed, a mark that meets its own mark is marked; a release, a
//! confirmation and an effect-id `ADD` are idempotent by nature.
mod input;
pub(crate) mod outcome;
mod settle;
mod steps;

use std::collections::HashSet;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use futures::stream::{self, StreamExt};
use tracing::info;

use crate::decision::{decide, Holder, NextStep};
use crate::integration::{Event, Parsed, Rejection};
use crate::manual::{ManualItem, ManualReason};
use crate::record::IdempotencyRecord;
use crate::routing::make_routing_record;
use crate::store::{GuardOutcome, Reservation, ReserveAndGuard, StoreError};

/// The answer of the guard asked for with the reserve, if it was
/// ([`crate::store::ReserveAndGuard::guard`]).
type Guarded = Option<Result<GuardOutcome, StoreError>>;

pub use input::type_name;
pub use input::{SqsInput, UnreadableRecord, UNREADABLE_RECORD};
pub use outcome::{BatchReport, RecordOutcome, RecordReport};
pub use steps::{claim, commit, derive_keys, reserve, DerivedKeys};

pub use crate::gate::{Delivery, Gate, GateConfig, Invocation};
pub use crate::record::DEFAULT_KEY_TTL_S;

impl Gate {
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
    /// `subject`, `effect_id` and `took_over` (a natural-key collision's other key is in its own
    /// WARN line and in the manual item): duplicates, rejections and retries included. The runbooks search for these lines.
    pub async fn handle_record(
        &self,
        message: SqsMessage,
        invocation: &Invocation,
    ) -> RecordReport {
        let report = self.handle_record_steps(message, invocation).await;
        let detail = match &report.outcome {
            RecordOutcome::Manual(reason) => {
                self.integration.manual_reason_code(*reason).to_string()
            }
            outcome => outcome.detail(),
        };
        info!(
            outcome = report.outcome.code(),
            detail = %detail,
            message_id = %report.message_id,
            event_key = report.event_key.as_deref().unwrap_or_default(),
            subject = report.subject.as_deref().unwrap_or_default(),
            effect_id = report.outcome.effect_id().unwrap_or_default(),
            took_over = report.took_over,
            "record processed"
        );
        report
    }

    /// [`Gate::handle_record`] without its log line: the four steps.
    async fn handle_record_steps(
        &self,
        message: SqsMessage,
        invocation: &Invocation,
    ) -> RecordReport {
        let message_id = message.message_id.clone().unwrap_or_default();
        let mut report = RecordReport {
            message_id: message_id.clone(),
            event_key: None,
            subject: None,
            took_over: false,
            outcome: RecordOutcome::NotStarted,
        };
        let now = self.clock.now_ms();
        if now.saturating_add(self.config.deadline_margin_ms) >= invocation.deadline_ms {
            return report;
        }
        let body = message.body.unwrap_or_default();
        let d = Delivery {
            body: &body,
            message_id: &message_id,
            invocation,
        };

        // The strict parse: a body that can never succeed goes to a person, acknowledged
        // ([`crate::routing`]). A window that has ended is decided on the event's own record.
        let (event, ended) = match self.parse(d, now).await {
            Ok(parsed) => parsed,
            Err(outcome) => {
                report.outcome = outcome;
                return report;
            }
        };
        report.subject = Some(event.subject.clone());

        // Step 1: the event key, the operation key, the fingerprint, the request bytes.
        let keys = match derive_keys(&event, self.integration.operation()) {
            Ok(k) => k,
            Err(e) => {
                let reason = Rejection {
                    code: "not_json",
                    detail: format!("body is not a JSON object: {e}"),
                    ended: false,
                };
                report.outcome = self.route_rejection(reason, d, now).await;
                return report;
            }
        };
        report.event_key = Some(keys.event_key.clone());

        // Step 2: reserve the key (with the guard of a new record to be called), or resume a
        // record whose lease expired.
        let (record, took_over, guarded) = match self
            .reserve_or_resume(&event, &keys, ended.as_ref(), d, now)
            .await
        {
            Ok(held) => held,
            Err(outcome) => {
                report.outcome = outcome;
                return report;
            }
        };
        report.took_over = took_over;

        // Steps 3 and 4: claim (or look up) and commit; an ended window goes to a person.
        report.outcome = match ended {
            Some(reason) if !took_over => {
                match self.send_routed(&record, d.message_id, d.owner()).await {
                    Ok(_) => RecordOutcome::Rejected(reason),
                    Err(e) => RecordOutcome::Retry(e),
                }
            }
            _ => {
                let now = self.clock.now_ms();
                self.proceed(&record, Holder::Consumer, now, d, guarded)
                    .await
                    .0
            }
        };
        report
    }

    /// The integration's strict parse of `d.body` at `now_ms`: the event, and the rejection when
    /// it is rejected only because its event has ended (then parsed as of just before the end,
    /// so its keys and its record decide), or rejected but still its event's because that event
    /// has a record ([`Parsed::IfRecorded`]). Any other rejection is routed to a person once per
    /// body, and its outcome returned as `Err`.
    async fn parse(
        &self,
        d: Delivery<'_>,
        now_ms: i64,
    ) -> Result<(Event, Option<Rejection>), RecordOutcome> {
        match self.integration.parse(d.body, now_ms) {
            Parsed::Event(event) => Ok((event, None)),
            Parsed::Ended(event, reason) => Ok((event, Some(reason))),
            Parsed::Rejected(reason) => Err(self.route_rejection(reason, d, now_ms).await),
            Parsed::IfRecorded {
                event,
                ended,
                rejection,
                label,
            } => match self.has_record(&event, label).await {
                Ok(true) => Ok((event, ended)),
                Ok(false) => Err(self.route_rejection(rejection, d, now_ms).await),
                Err(e) => Err(RecordOutcome::Retry(e)),
            },
        }
    }

    /// Whether `event` already has a record holding the same `label` as the event (one consistent
    /// read). `Err` is the store's error as text (the delivery is retried).
    async fn has_record(&self, event: &Event, label: &str) -> Result<bool, String> {
        let key = crate::keys::event_key_of_material(&event.key_material);
        let pk = crate::record::record_pk(&self.config.integration, &key);
        let want = event.labels.get(label).map_or("", String::as_str);
        match self.store.get(&pk).await {
            Ok(Some(record)) => Ok(record.label(label) == want),
            Ok(None) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Step 2: reserves the record for `event` (a routing record when it has `ended`), or
    /// resolves the conflict with the record that holds the key. `Ok((record, took_over,
    /// guarded))` when `d` holds the record now, `guarded` the answer of the guard asked for
    /// with the reserve (a new record whose decision is a call, with a natural key; see
    /// [`crate::store::IdempotencyStore::reserve_with_guard`]); `Err(outcome)` ends the delivery
    /// (a duplicate, a mismatch, a retry).
    async fn reserve_or_resume(
        &self,
        event: &Event,
        keys: &DerivedKeys,
        ended: Option<&Rejection>,
        d: Delivery<'_>,
        now_ms: i64,
    ) -> Result<(IdempotencyRecord, bool, Guarded), RecordOutcome> {
        let mut fresh = self.new_record(event, keys, d.invocation, now_ms);
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
}

/// The rejection code of an event whose reserve the store refused for good
/// ([`crate::store::StoreError::is_transient`] is `false`: a `ValidationException`, an item it
/// refuses).
pub const STORE_REFUSED: &str = "store_refused";
