//! `SqsManualQueue`: the [`ManualQueue`] on an SQS queue (feature `aws`).
//!
//! One `SendMessage` per item. Body (JSON object):
//!
//! ```json
//! {"reason": "mismatch", "detail": "...", "original_body": "...", "event_key": "ab12..." | null,
//!  "message_id": "..."}
//! ```
//!
//! and a message attribute `reason` (DataType `String`) holding the same reason code, so a
//! subscription filter or a person can sort the queue without parsing bodies. The body holds the
//! original SQS body and so the release PIN: the queue must be encrypted (DESIGN.md, "Secrets").

use async_trait::async_trait;
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::MessageAttributeValue;
use aws_sdk_sqs::Client;

use crate::manual::{ManualItem, ManualQueue, ManualQueueError};

/// The name of the message attribute that holds the reason code.
pub const REASON_ATTRIBUTE: &str = "reason";

/// The manual-booking queue on SQS.
///
/// Build the [`Client`] once per cold start, with the SDK's retry configuration; a failed send
/// (after those retries) is a [`ManualQueueError`] and the SQS record is retried.
#[derive(Debug, Clone)]
pub struct SqsManualQueue {
    client: Client,
    queue_url: String,
}

impl SqsManualQueue {
    /// A manual queue sending to `queue_url` through `client`.
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
        }
    }

    /// The queue's URL.
    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }
}

/// The message body for `item`: JSON with `reason` (the code), `detail`, `original_body`,
/// `event_key` (or `null`) and `message_id`.
pub fn message_body(item: &ManualItem) -> String {
    serde_json::json!({
        "reason": item.reason.code(),
        "detail": item.detail,
        "original_body": item.original_body,
        "event_key": item.event_key,
        "message_id": item.message_id,
    })
    .to_string()
}

#[async_trait]
impl ManualQueue for SqsManualQueue {
    async fn send(&self, item: ManualItem) -> Result<(), ManualQueueError> {
        let reason = MessageAttributeValue::builder()
            .data_type("String")
            .string_value(item.reason.code())
            .build()
            .map_err(|e| ManualQueueError(format!("reason attribute: {e}")))?;
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(message_body(&item))
            .message_attributes(REASON_ATTRIBUTE, reason)
            .send()
            .await
            .map_err(|e| {
                ManualQueueError(format!(
                    "SendMessage to the manual queue: {}",
                    DisplayErrorContext(&e)
                ))
            })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manual::ManualReason;

    #[test]
    fn body_has_every_field() {
        let item = ManualItem {
            reason: ManualReason::WindowEnded,
            detail: "window_ended: ...".into(),
            original_body: "{\"pin\":\"4711\"}".into(),
            event_key: None,
            message_id: "m1".into(),
        };
        let v: serde_json::Value = serde_json::from_str(&message_body(&item)).unwrap();
        assert_eq!(v["reason"], "window_ended");
        assert_eq!(v["detail"], "window_ended: ...");
        assert_eq!(v["original_body"], "{\"pin\":\"4711\"}");
        assert!(v["event_key"].is_null());
        assert_eq!(v["message_id"], "m1");
    }
}
