//! The `ManualQueue` port: where events go that a person must handle, with the reason and the
//! original body, so nothing is lost silently.

use std::fmt;
use std::sync::Mutex;

use async_trait::async_trait;

/// Why an event was routed to a person. The code is stable (message attribute, metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ManualReason {
    /// The body can never succeed (see [`crate::notification::RejectReason`]); the detail says why.
    Rejected,
    /// The window had already ended: no slot can be claimed.
    WindowEnded,
    /// The same event key arrived with another fingerprint: never a duplicate.
    Mismatch,
    /// The terminal does not honour `Idempotency-Key`: claiming would risk a second slot.
    NoIdempotencySupport,
    /// The terminal said the key was reused with another body (IETF draft: 422; or 409
    /// `idempotency_mismatch`).
    TerminalKeyMismatch,
    /// The terminal answered another permanent error (4xx).
    TerminalRejected,
    /// The terminal's key retention has passed: claiming again could make a second slot.
    PastKeyRetention,
    /// The terminal answered for another container than the one asked.
    TerminalAnswerInvalid,
}

impl ManualReason {
    /// `rejected`, `window_ended`, `mismatch`, `no_idempotency_support`, `terminal_key_mismatch`,
    /// `terminal_rejected`, `past_key_retention`, `terminal_answer_invalid`.
    pub fn code(self) -> &'static str {
        match self {
            Self::Rejected => "rejected",
            Self::WindowEnded => "window_ended",
            Self::Mismatch => "mismatch",
            Self::NoIdempotencySupport => "no_idempotency_support",
            Self::TerminalKeyMismatch => "terminal_key_mismatch",
            Self::TerminalRejected => "terminal_rejected",
            Self::PastKeyRetention => "past_key_retention",
            Self::TerminalAnswerInvalid => "terminal_answer_invalid",
        }
    }
}

impl ManualReason {
    /// Every reason, for parsing codes.
    pub const ALL: [ManualReason; 8] = [
        Self::Rejected,
        Self::WindowEnded,
        Self::Mismatch,
        Self::NoIdempotencySupport,
        Self::TerminalKeyMismatch,
        Self::TerminalRejected,
        Self::PastKeyRetention,
        Self::TerminalAnswerInvalid,
    ];

    /// The reason with this [`ManualReason::code`], if any.
    pub fn parse(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.code() == code)
    }
}

/// One message for the manual-booking queue. `Debug` redacts the original body (it holds the
/// release PIN, which the person booking by hand needs, but no log does).
#[derive(Clone, PartialEq, Eq)]
pub struct ManualItem {
    /// Why.
    pub reason: ManualReason,
    /// A human-readable explanation (never the PIN).
    pub detail: String,
    /// The SQS body exactly as received.
    pub original_body: String,
    /// The event key, when the body got far enough to have one.
    pub event_key: Option<String>,
    /// The SQS message id of the delivery that routed it.
    pub message_id: String,
}

impl fmt::Debug for ManualItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualItem")
            .field("reason", &self.reason)
            .field("detail", &self.detail)
            .field(
                "original_body",
                &format_args!("[redacted {} bytes]", self.original_body.len()),
            )
            .field("event_key", &self.event_key)
            .field("message_id", &self.message_id)
            .finish()
    }
}

impl ManualItem {
    /// The item as JSON bytes `{"reason", "detail", "original_body", "event_key", "message_id"}`:
    /// what a routing record stores as its `request`, so whoever resumes the record (a
    /// redelivery, the reconciler) sends the same item. Holds the original body, and so the PIN.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::json!({
            "reason": self.reason.code(),
            "detail": self.detail,
            "original_body": self.original_body,
            "event_key": self.event_key,
            "message_id": self.message_id,
        })
        .to_string()
        .into_bytes()
    }

    /// Reads an item written by [`ManualItem::to_json`]; `None` if the bytes are not one.
    pub fn from_json(bytes: &[u8]) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
        Some(Self {
            reason: ManualReason::parse(v.get("reason")?.as_str()?)?,
            detail: v.get("detail")?.as_str()?.to_string(),
            original_body: v.get("original_body")?.as_str()?.to_string(),
            event_key: v
                .get("event_key")
                .and_then(serde_json::Value::as_str)
                .map(str::to_string),
            message_id: v.get("message_id")?.as_str()?.to_string(),
        })
    }
}

/// A failure to enqueue; the record is reported in `batchItemFailures` and retried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("manual queue unavailable: {0}")]
pub struct ManualQueueError(pub String);

/// The manual-booking queue.
#[async_trait]
pub trait ManualQueue: Send + Sync {
    /// Enqueues one item.
    async fn send(&self, item: ManualItem) -> Result<(), ManualQueueError>;
}

/// An in-memory manual queue: keeps every item, in order.
#[derive(Debug, Default)]
pub struct MemoryManualQueue {
    items: Mutex<Vec<ManualItem>>,
}

impl MemoryManualQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every item sent so far, in order.
    pub fn items(&self) -> Vec<ManualItem> {
        self.items.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[async_trait]
impl ManualQueue for MemoryManualQueue {
    async fn send(&self, item: ManualItem) -> Result<(), ManualQueueError> {
        self.items
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(item);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_round_trips_through_json() {
        for reason in ManualReason::ALL {
            assert_eq!(ManualReason::parse(reason.code()), Some(reason));
            for event_key in [None, Some("ab".repeat(32))] {
                let item = ManualItem {
                    reason,
                    detail: "why \"quoted\" \n".into(),
                    original_body: "{\"pin\":\"4711\"} \u{1F6A2}".into(),
                    event_key,
                    message_id: "m-1".into(),
                };
                assert_eq!(ManualItem::from_json(&item.to_json()), Some(item));
            }
        }
        assert_eq!(ManualReason::parse("nope"), None);
        assert_eq!(ManualItem::from_json(b"{}"), None);
        assert_eq!(ManualItem::from_json(b"not json"), None);
    }
}
