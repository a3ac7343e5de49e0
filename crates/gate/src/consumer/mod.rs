//! The consumer: an SQS batch in, a partial batch response out, each record through the four
//! steps of the gate:
//!
//! 1. [`derive_keys`]: a stable event key at the edge, the operation key and the fingerprint;
//! 2. reserve: the key reserved before any side effect (one conditional write), or an expired
//!    lease taken over;
//! 3. claim: the effect claimed with the operation key in the `Idempotency-Key` header;
//! 4. commit: the outcome and the business row written in one transaction.
//!
//! Steps 3 and 4, and a hand-over to a person, are the held record's (`crate::held`).
//!
//! A write can land and lose its answer: the SDK retries it and the retry meets the write it
//! repeats. Each write recognises itself by the lease token: a reserve that meets its own
//! reservation is reserved, a take-over that meets its own lease is taken, a commit that meets
//! the record committed by its token with its effect is committed, a mark that meets its own
//! mark is marked; a release, a confirmation and an effect-id `ADD` are idempotent by nature.
mod input;
mod reserve;

use std::collections::HashSet;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use futures::stream::{self, StreamExt};
use tracing::info;

use crate::decision::Holder;
use crate::held::HeldRecord;
use crate::integration::{Event, Parsed, Rejection};
use crate::store::StoreError;
use crate::visibility::QueuedMessage;

pub use crate::derive::{derive_keys, DerivedKeys};
pub use input::type_name;
pub use input::{SqsInput, UnreadableRecord, UNREADABLE_RECORD};

pub use crate::gate::{Delivery, Gate, GateConfig, Invocation};
pub use crate::outcome::{BatchReport, RecordOutcome, RecordReport};
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
        let queue_arn = message.event_source_arn.unwrap_or_default();
        let receipt_handle = message.receipt_handle.unwrap_or_default();
        let queued =
            (!queue_arn.is_empty() && !receipt_handle.is_empty()).then_some(QueuedMessage {
                queue_arn: &queue_arn,
                receipt_handle: &receipt_handle,
            });
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
                    Err(e) => RecordOutcome::Retry(e.to_string()),
                }
            }
            _ => {
                let now = self.clock.now_ms();
                let held = HeldRecord::new(self, record, d).received_in(queued);
                held.proceed(Holder::Consumer, now, guarded).await.0
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
                Err(e) => Err(RecordOutcome::Retry(e.to_string())),
            },
        }
    }

    /// Whether `event` already has a record holding the same `label` as the event (one consistent
    /// read). `Err`: the store's error (the delivery is retried).
    async fn has_record(&self, event: &Event, label: &str) -> Result<bool, StoreError> {
        let key = crate::keys::event_key_of_material(&event.key_material);
        let pk = crate::record::record_pk(&self.config.integration, &key);
        let want = event.labels.get(label).map_or("", String::as_str);
        match self.store.get(&pk).await {
            Ok(Some(record)) => Ok(record.label(label) == want),
            Ok(None) => Ok(false),
            Err(e) => Err(e),
        }
    }
}
