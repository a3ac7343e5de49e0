//! The event queue's visibility port ([`MessageVisibility`]): how the consumer keeps a message
//! away for as long as a server's `Retry-After` asks (SQS `ChangeMessageVisibility`, in
//! `gate-dynamo`; [`MemoryVisibility`] for tests). Optional: without it, or when it fails, or
//! for a delay past [`MAX_VISIBILITY_S`], the record is left to the reconciler with its lease
//! held to the delay's end (docs/OPERATING.md, "Retry-After").

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

/// The longest visibility timeout SQS accepts, **seconds**: 12 hours ("ChangeMessageVisibility",
/// Amazon SQS API Reference: `VisibilityTimeout` 0 to 43,200), counted from the message's
/// receive, so a delay just under it may still be refused (the caller's fallback applies).
pub const MAX_VISIBILITY_S: u32 = 43_200;

/// One received message of the event queue, as Lambda hands it over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuedMessage<'a> {
    /// The queue's ARN (`eventSourceARN`: `arn:aws:sqs:{region}:{account}:{name}`).
    pub queue_arn: &'a str,
    /// The receipt handle of this receive (`receiptHandle`).
    pub receipt_handle: &'a str,
}

/// A visibility change refused or failed; the cause is kept (the SDK's error, or the double's).
#[derive(Debug, thiserror::Error)]
#[error("the message's visibility was not changed")]
pub struct VisibilityError(#[source] pub Box<dyn std::error::Error + Send + Sync>);

/// Changes how long a received message stays invisible.
#[async_trait]
pub trait MessageVisibility: Send + Sync + std::fmt::Debug {
    /// Makes `message` invisible for `seconds` from now (at most [`MAX_VISIBILITY_S`]): SQS
    /// delivers it again no sooner. Called while the message's receive is still ours (before the
    /// batch's answer), with the record's lease already held to the same end.
    ///
    /// # Errors
    /// [`VisibilityError`]: the message comes back at the queue's own visibility timeout.
    async fn hide(&self, message: QueuedMessage<'_>, seconds: u32) -> Result<(), VisibilityError>;
}

/// The double for tests: records every change (queue ARN, receipt handle, seconds), or refuses
/// them all when built with [`MemoryVisibility::failing`].
#[derive(Debug, Clone, Default)]
pub struct MemoryVisibility {
    changes: Arc<Mutex<Vec<(String, String, u32)>>>,
    fails: bool,
}

impl MemoryVisibility {
    /// A double that refuses every change (as a role without `sqs:ChangeMessageVisibility`).
    pub fn failing() -> Self {
        Self {
            fails: true,
            ..Self::default()
        }
    }

    /// The changes made so far: (queue ARN, receipt handle, seconds), in order.
    pub fn changes(&self) -> Vec<(String, String, u32)> {
        self.changes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

#[async_trait]
impl MessageVisibility for MemoryVisibility {
    async fn hide(&self, message: QueuedMessage<'_>, seconds: u32) -> Result<(), VisibilityError> {
        if self.fails {
            return Err(VisibilityError("access denied (the double refuses)".into()));
        }
        self.changes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((
                message.queue_arn.to_string(),
                message.receipt_handle.to_string(),
                seconds,
            ));
        Ok(())
    }
}
