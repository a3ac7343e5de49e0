//! What happened to one SQS record ([`RecordOutcome`], [`RecordReport`]) and to a batch
//! ([`BatchReport`]).

use aws_lambda_events::event::sqs::SqsBatchResponse;

use crate::integration::Rejection;
use crate::manual::ManualReason;
use crate::record::RecordStatus;

/// What happened to one SQS record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordOutcome {
    /// Claimed and committed by us.
    Committed {
        /// The effect.
        effect_id: String,
    },
    /// Someone else committed first; `ours` is the effect the server gave us, if we claimed.
    AlreadyCommitted {
        /// The committed effect.
        effect_id: Option<String>,
        /// The effect our claim returned.
        ours: String,
        /// Distinct effect ids now recorded for the key (1 when ours is the committed one; 2 or
        /// more is the distinct-effect signal).
        distinct_effect_ids: usize,
    },
    /// A conflict on reserve with a finished record (`committed`, `failed`, `manual`).
    Duplicate(RecordStatus),
    /// A conflict on reserve with an `in_flight` record whose lease is live.
    DuplicateInFlight,
    /// A conflict on reserve with a `committed` record that holds no effect id (written by an
    /// older version, or edited by hand): a duplicate all the same (acknowledged, never called:
    /// the effect may exist), and the anomaly sent to a person once per event key
    /// ([`ManualReason::CommittedWithoutEffectId`]). Logged as `Duplicate` with detail
    /// `committed_without_effect_id`.
    DuplicateWithoutEffectId,
    /// Our lease was taken over while we worked (our commit or routing was refused): the new
    /// holder finishes the record. `effect_id` is the effect our claim returned, if any; it was
    /// added to the record's `effect_ids`, so the new holder commits it rather than route the
    /// record to a person. Acknowledged.
    LeaseLost {
        /// The effect our claim returned.
        effect_id: Option<String>,
    },
    /// The same event key with another fingerprint: routed to the manual queue.
    Mismatch,
    /// The body can never succeed: routed to the manual queue.
    Rejected(Rejection),
    /// Routed to the manual queue for another reason (the record is `manual` or `failed`).
    Manual(ManualReason),
    /// A transient failure: reported in `batchItemFailures`; SQS redelivers.
    Retry(String),
    /// A transient answer whose server asked to wait (`Retry-After`) longer than the message
    /// can be hidden, or the message could not be hidden: acknowledged, the record left
    /// `in_flight` to the reconciler with its lease held until `until_ms` (epoch ms), so nothing
    /// sends it sooner (docs/OPERATING.md, "Retry-After").
    Deferred {
        /// The lease's end, epoch milliseconds: the reconciler takes the record over after it.
        until_ms: i64,
    },
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
        matches!(
            self,
            Self::Duplicate(_) | Self::DuplicateInFlight | Self::DuplicateWithoutEffectId
        )
    }

    /// The outcome's name as the `record processed` log line gives it in `outcome` (the
    /// runbooks search for these): `Committed`, `AlreadyCommitted`, `Duplicate`,
    /// `DuplicateInFlight`, `LeaseLost`, `Mismatch`, `Rejected`, `Manual`, `Retry`, `Deferred`, `NotStarted`
    /// (a [`RecordOutcome::DuplicateWithoutEffectId`] is a `Duplicate`: its detail tells it apart).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Committed { .. } => "Committed",
            Self::AlreadyCommitted { .. } => "AlreadyCommitted",
            Self::Duplicate(_) | Self::DuplicateWithoutEffectId => "Duplicate",
            Self::DuplicateInFlight => "DuplicateInFlight",
            Self::LeaseLost { .. } => "LeaseLost",
            Self::Mismatch => "Mismatch",
            Self::Rejected(_) => "Rejected",
            Self::Manual(_) => "Manual",
            Self::Retry(_) => "Retry",
            Self::Deferred { .. } => "Deferred",
            Self::NotStarted => "NotStarted",
        }
    }

    /// The outcome's detail for the log line's `detail` field: the duplicate's record status
    /// (`committed_without_effect_id` for a committed record without its effect id), the
    /// rejection's or routing's reason code, the retry's error; empty for the others.
    pub fn detail(&self) -> String {
        match self {
            Self::Duplicate(status) => status.as_str().to_string(),
            Self::DuplicateWithoutEffectId => {
                ManualReason::CommittedWithoutEffectId.code().to_string()
            }
            Self::Rejected(reason) => reason.code().to_string(),
            Self::Manual(reason) => reason.code().to_string(),
            Self::Retry(error) => error.clone(),
            Self::Deferred { until_ms } => format!("left to the reconciler after {until_ms}"),
            Self::NotStarted => "deadline near".to_string(),
            _ => String::new(),
        }
    }

    /// The effect id the outcome names (committed, ours, or recorded for the holder), if any.
    pub fn effect_id(&self) -> Option<&str> {
        match self {
            Self::Committed { effect_id, .. } => Some(effect_id),
            Self::AlreadyCommitted { ours, .. } => Some(ours),
            Self::LeaseLost { effect_id } => effect_id.as_deref(),
            _ => None,
        }
    }
}

/// One record's report: what the `record processed` log line says of it and what the signals
/// count. Carries no secret (no body, no request).
#[derive(Debug, Clone)]
pub struct RecordReport {
    /// The SQS message id (the `itemIdentifier` of `batchItemFailures` when it is retried).
    pub message_id: String,
    /// The event key, if the body got that far.
    pub event_key: Option<String>,
    /// Whom the event is for ([`crate::integration::Event::subject`]: the subject on the
    /// truck-slot path), if the body got that far. The log line calls it `subject`.
    pub subject: Option<String>,
    /// Whether this record took over an expired lease.
    pub took_over: bool,
    /// What happened; [`RecordOutcome::acknowledged`] decides whether it is retried.
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
