//! The consumer: an SQS batch in, a partial batch response out, each record through the four
//! steps of the gate:
//!
//! 1. [`derive_keys`]: a stable event key at the edge, the operation key and the fingerprint;
//! 2. [`reserve`]: the key reserved before any side effect (one conditional write);
//! 3. [`claim`]: the effect claimed with the operation key in the `Idempotency-Key` header;
//! 4. [`commit`]: the outcome and the TMS booking written in one transaction.
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
mod outcome;
mod settle;
mod steps;

use std::collections::HashSet;
use std::sync::Arc;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use futures::stream::{self, StreamExt};
use tracing::info;

use crate::clock::Clock;
use crate::decision::Holder;
use crate::integration::{Event, Integration, Parsed, Rejection};
use crate::manual::{ManualItem, ManualQueue, ManualReason};
use crate::record::IdempotencyRecord;
use crate::routing::make_routing_record;
use crate::store::{IdempotencyStore, Reservation};

pub use input::{SqsInput, UnreadableRecord, UNREADABLE_RECORD};
pub use outcome::{BatchReport, RecordOutcome, RecordReport};
pub use steps::{claim, commit, derive_keys, reserve, DerivedKeys};

/// 21 days in seconds: the default key TTL, longer than the longest redelivery horizon. A
/// notification can wait 4 days in the notification queue, then up to 14 days (the SQS maximum
/// `MessageRetentionPeriod`) in its dead-letter queue, and a redrive sends it back as a new message with 4
/// more days: 18 days, plus 3 days of margin. A record that expired would let a redelivery claim
/// again under a key the server forgot long ago.
pub const DEFAULT_KEY_TTL_S: i64 = 21 * 24 * 3600;

/// The gate's settings.
#[derive(Debug, Clone)]
pub struct GateConfig {
    /// The integration's name, the prefix of every record key (`"{integration}#{event_key}"`).
    pub integration: String,
    /// Whether the side effect's server honours `Idempotency-Key` (the server, on the
    /// truck-slot path), unless the integration says otherwise for a record
    /// ([`Integration::supports_idempotency_key`]). If not, every event goes to the manual queue:
    /// a retry could make a second effect.
    pub server_supports_idempotency_key: bool,
    /// Record lifetime in **seconds**, counted from the later of the reservation and the
    /// event's end ([`Event::ends_at_ms`]; `expires_at = max(now, end) + ttl`, see
    /// [`Gate::record_expiry_s`]); routing records count from their reservation. Default 21 days
    /// ([`DEFAULT_KEY_TTL_S`]).
    pub key_ttl_s: i64,
    /// The shortest lease, **milliseconds**: a lease lasts until the invocation's deadline, but
    /// never less than this, even when the invocation has no time left.
    pub lease_floor_ms: i64,
    /// Records processed at once within a batch.
    pub max_concurrency: usize,
    /// No new record is started when less than this many **milliseconds** remain before the
    /// invocation's deadline (keep it above the server's request timeout plus a commit).
    pub deadline_margin_ms: i64,
    /// A record older than this many **milliseconds** is never claimed again by whoever resumes
    /// it: the server's key retention minus a margin (default 23 h: 24 h retention, 1 h
    /// margin, as [`crate::reconciler::ReconcilerConfig`]). Past it the server may have
    /// forgotten the key, so a claim could make a second effect; the effect is looked up instead,
    /// and without one the record goes to a person (`past_key_retention`). This is what keeps a
    /// redelivery days later from claiming again.
    pub claim_horizon_ms: i64,
}

impl GateConfig {
    /// Defaults for `integration` (the record keys' prefix): key support on, 21-day TTL,
    /// 30 s lease floor, 10 records at once, 12 s deadline margin, 23 h claim horizon.
    pub fn new(integration: impl Into<String>) -> Self {
        Self {
            integration: integration.into(),
            server_supports_idempotency_key: true,
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
    /// The idempotency table and the business table (the write path).
    pub store: Arc<dyn IdempotencyStore>,
    /// The integration: the parse, the side effect and its lookup, the business row.
    pub integration: Arc<dyn Integration>,
    /// The manual-booking queue.
    pub manual: Arc<dyn ManualQueue>,
    /// Time.
    pub clock: Arc<dyn Clock>,
}

/// The invocation a batch (or a reconciler run) arrives in: one execution of the function.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The execution's id, the stem of every lease token it writes: in a deployment the Lambda
    /// request id and a nonce drawn for this execution, `"{request_id}/{nonce}"`
    /// ([`Invocation::new`]). Lambda gives two executions the same request id (an asynchronous
    /// invocation retried, an event its queue delivers twice), so the request id alone would let
    /// one execution meet the other's lease and take it for its own; the nonce makes the token
    /// one execution's. Each record handled in the invocation gets its own lease token from it
    /// ([`Invocation::for_record`]), so that two copies of one message in one batch never hold
    /// the same lease, and a write that meets our token is our own.
    pub request_id: String,
    /// The invocation's deadline, epoch milliseconds.
    pub deadline_ms: i64,
}

impl Invocation {
    /// One execution of the Lambda request `request_id` ending at `deadline_ms` (epoch ms), with
    /// a nonce of 64 random bits (16 lowercase hex digits) drawn now: its lease tokens are
    /// `"{request_id}/{nonce}#{n}"`. Lambda retries an asynchronous invocation (a scheduled
    /// reconciler run) with the same request id, and its event queue may deliver one event twice
    /// ("Asynchronous invocation", AWS Lambda developer guide); two such executions never hold
    /// the same lease token, so a fenced write of one never succeeds on the other's lease.
    pub fn new(request_id: &str, deadline_ms: i64) -> Invocation {
        Invocation::with_nonce(
            request_id,
            &format!("{:016x}", rand::random::<u64>()),
            deadline_ms,
        )
    }

    /// [`Invocation::new`] with a given `nonce` (the simulation draws it from its seed). The
    /// nonce must be unique per execution of `request_id`.
    pub fn with_nonce(request_id: &str, nonce: &str, deadline_ms: i64) -> Invocation {
        Invocation {
            request_id: format!("{request_id}/{nonce}"),
            deadline_ms,
        }
    }

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

/// One SQS delivery as the steps after the parse see it: the body as received (what the manual
/// queue gets as `original_body`), its message id, and the invocation (with the lease token of
/// this record, [`Invocation::for_record`]) it is handled in.
#[derive(Debug, Clone, Copy)]
pub struct Delivery<'a> {
    /// The SQS body, verbatim.
    pub body: &'a str,
    /// The SQS message id (unique per delivery, never part of a key).
    pub message_id: &'a str,
    /// The invocation; its `request_id` is the lease token of what this delivery holds.
    pub invocation: &'a Invocation,
}

impl Delivery<'_> {
    /// The lease token of everything this delivery reserves or takes over.
    pub fn owner(&self) -> &str {
        &self.invocation.request_id
    }
}

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

        // Step 2: reserve the key, or resume a record whose lease expired.
        let (record, took_over) = match self
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
                self.proceed(&record, Holder::Consumer, now, d).await.0
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

    /// Step 2: reserves the record for `event` (a routing record when it has `ended`), or resolves the conflict with the record that holds the key. `Ok((record,
    /// took_over))` when `d` holds the record now; `Err(outcome)` ends the delivery (a
    /// duplicate, a mismatch, a retry).
    async fn reserve_or_resume(
        &self,
        event: &Event,
        keys: &DerivedKeys,
        ended: Option<&Rejection>,
        d: Delivery<'_>,
        now_ms: i64,
    ) -> Result<(IdempotencyRecord, bool), RecordOutcome> {
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
        if let Err(refusal) =
            crate::store::limits::check_new_event(&fresh, &row, natural_key.as_ref())
        {
            return Err(self.route_rejection(refusal.rejection(), d, now_ms).await);
        }
        match reserve(self.store.as_ref(), &fresh, now_ms).await {
            Ok(Reservation::Reserved) => Ok((fresh, false)),
            Ok(Reservation::Conflict(existing)) => self
                .resolve_conflict(*existing, keys, d, now_ms)
                .await
                .map(|record| (record, true)),
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

#[cfg(test)]
mod tests {
    use super::Invocation;

    /// Two executions of one Lambda request id (an asynchronous retry, a twice-delivered event)
    /// get different lease tokens for the same record position; each keeps the request id in
    /// front, so a lease still names the request that holds it.
    #[test]
    fn two_executions_of_one_request_id_never_share_a_lease_token() {
        let first = Invocation::new("8f3c-request", 1_000);
        let second = Invocation::new("8f3c-request", 1_000);
        assert_ne!(first.request_id, second.request_id);
        assert_ne!(
            first.for_record(0).request_id,
            second.for_record(0).request_id
        );
        for inv in [&first, &second] {
            let nonce = inv
                .request_id
                .strip_prefix("8f3c-request/")
                .expect("the request id, then the nonce");
            assert_eq!(nonce.len(), 16, "{nonce}");
            assert!(nonce.bytes().all(|b| b.is_ascii_hexdigit()), "{nonce}");
        }
        assert_eq!(
            Invocation::with_nonce("r", "n1", 5)
                .for_record(3)
                .request_id,
            "r/n1#3"
        );
    }
}
