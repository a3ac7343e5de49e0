//! `SqsManualQueue`: the [`ManualQueue`] on an SQS queue; [`SqsVisibility`]: the
//! event queue's [`MessageVisibility`] (a message kept away for a server's `Retry-After`).
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
//! original SQS body and so its secrets (an API key or a PIN): the queue must
//! be encrypted (`docs/SECURITY.md`).

use async_trait::async_trait;
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::MessageAttributeValue;
use aws_sdk_sqs::Client;

use std::sync::Arc;

use gate::manual::{ManualItem, ManualQueue, ManualQueueError, ManualReason};
use gate::visibility::{MessageVisibility, QueuedMessage, VisibilityError, MAX_VISIBILITY_S};

/// The code of a reason on the queue (an integration's, [`gate::Integration::manual_reason_code`]).
pub type ReasonCodes = Arc<dyn Fn(ManualReason) -> &'static str + Send + Sync>;

/// The name of the message attribute that holds the reason code.
pub const REASON_ATTRIBUTE: &str = "reason";

/// The manual queue on SQS: one JSON message per [`ManualItem`].
///
/// Build the [`Client`] once per cold start, with the SDK's retry configuration; a failed send
/// (after those retries) is a [`ManualQueueError`] and the SQS record is retried.
///
/// A message always fits SQS's limit ([`gate::manual::MAX_ITEM_JSON_BYTES`], 256 KiB with the
/// attribute), so a send never fails on size and an oversized body cannot turn into a retry loop:
/// `detail` is cut to [`gate::manual::MAX_DETAIL_CHARS`] characters, and when the JSON-escaped
/// original body does not fit, it is cut at a character boundary and the message says so:
/// `"original_body_truncated": true`, `"original_body_bytes"` (the full size) and
/// `"original_body_sha256"` (of the full body). The gate refuses bodies over 64 KiB
/// (`truck_slot::notification::MAX_BODY_BYTES`), so only those are ever cut.
#[derive(Clone)]
pub struct SqsManualQueue {
    client: Client,
    queue_url: String,
    codes: ReasonCodes,
}

impl std::fmt::Debug for SqsManualQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsManualQueue")
            .field("queue_url", &self.queue_url)
            .finish_non_exhaustive()
    }
}

impl SqsManualQueue {
    /// A manual queue sending to `queue_url` through `client`, with the core's reason codes.
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
            codes: Arc::new(ManualReason::code),
        }
    }

    /// The same queue writing each reason under `codes` (the integration's:
    /// `move |r| integration.manual_reason_code(r)`), in the body and the `reason` attribute.
    pub fn with_codes(mut self, codes: ReasonCodes) -> Self {
        self.codes = codes;
        self
    }

    /// The queue's URL.
    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }
}

/// The message body for `item`: [`ManualItem::to_json`], never more than
/// [`gate::manual::MAX_ITEM_JSON_BYTES`] (see the module's notes on truncation).
pub fn message_body(item: &ManualItem) -> String {
    String::from_utf8_lossy(&item.to_json()).into_owned()
}

#[async_trait]
impl ManualQueue for SqsManualQueue {
    async fn send(&self, item: ManualItem) -> Result<(), ManualQueueError> {
        let reason = MessageAttributeValue::builder()
            .data_type("String")
            .string_value((self.codes)(item.reason))
            .build()
            .map_err(|e| ManualQueueError(format!("reason attribute: {e}")))?;
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(String::from_utf8_lossy(&item.to_json_with(&*self.codes)).into_owned())
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

/// The event queue's [`MessageVisibility`] on SQS: one `ChangeMessageVisibility` per delay,
/// to the queue URL its ARN names (`https://sqs.{region}.amazonaws.com/{account}/{name}`;
/// the SDK sends it to the client's endpoint, so moto and VPC endpoints work alike). The
/// function's role needs `sqs:ChangeMessageVisibility` on the event queue; without it every
/// change fails and a delayed record is left to the reconciler.
#[derive(Clone, Debug)]
pub struct SqsVisibility {
    client: Client,
}

impl SqsVisibility {
    /// The port on `client` (built once per cold start).
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

/// The queue URL an SQS queue ARN names, `None` if `arn` is not `arn:{partition}:sqs:{region}:
/// {account}:{name}`.
pub fn queue_url_of_arn(arn: &str) -> Option<String> {
    let parts: Vec<&str> = arn.split(':').collect();
    match parts.as_slice() {
        ["arn", _, "sqs", region, account, name]
            if !region.is_empty() && !account.is_empty() && !name.is_empty() =>
        {
            Some(format!(
                "https://sqs.{region}.amazonaws.com/{account}/{name}"
            ))
        }
        _ => None,
    }
}

#[async_trait]
impl MessageVisibility for SqsVisibility {
    async fn hide(&self, message: QueuedMessage<'_>, seconds: u32) -> Result<(), VisibilityError> {
        let url = queue_url_of_arn(message.queue_arn).ok_or_else(|| {
            VisibilityError(format!("not an SQS queue ARN: {}", message.queue_arn).into())
        })?;
        let timeout = i32::try_from(seconds.min(MAX_VISIBILITY_S)).unwrap_or(i32::MAX);
        self.client
            .change_message_visibility()
            .queue_url(url)
            .receipt_handle(message.receipt_handle)
            .visibility_timeout(timeout)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| VisibilityError(Box::new(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gate::keys::sha256_hex;
    use gate::manual::ManualReason;
    use gate::manual::{MAX_DETAIL_CHARS, MAX_ITEM_JSON_BYTES};

    #[test]
    fn a_queue_arn_names_its_url() {
        assert_eq!(
            super::queue_url_of_arn("arn:aws:sqs:eu-west-1:123456789012:gate-events"),
            Some("https://sqs.eu-west-1.amazonaws.com/123456789012/gate-events".to_string())
        );
        assert_eq!(
            super::queue_url_of_arn("arn:aws:sns:eu-west-1:1:topic"),
            None
        );
        assert_eq!(super::queue_url_of_arn("gate-events"), None);
    }

    #[test]
    fn body_has_every_field() {
        let item = ManualItem {
            reason: ManualReason::EventEnded,
            detail: "event_ended: ...".into(),
            original_body: "{\"pin\":\"4711\"}".into(),
            event_key: None,
            message_id: "m1".into(),
            original_body_cut: None,
        };
        let v: serde_json::Value = serde_json::from_str(&message_body(&item)).unwrap();
        assert_eq!(v["reason"], "event_ended");
        assert_eq!(v["detail"], "event_ended: ...");
        assert_eq!(v["original_body"], "{\"pin\":\"4711\"}");
        assert!(v["event_key"].is_null());
        assert_eq!(v["message_id"], "m1");
        assert!(v.get("original_body_truncated").is_none());
    }

    fn item(original_body: String) -> ManualItem {
        ManualItem {
            reason: ManualReason::Rejected,
            detail: "body_too_large: ...".into(),
            original_body,
            event_key: None,
            message_id: "m2".into(),
            original_body_cut: None,
        }
    }

    #[test]
    fn a_body_that_fits_is_kept_whole() {
        // 120 KiB of quotes escape to 240 KiB: still under the limit, kept whole.
        let body = "\"".repeat(120 * 1024);
        let text = message_body(&item(body.clone()));
        assert!(text.len() <= MAX_ITEM_JSON_BYTES);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["original_body"], body.as_str());
    }

    #[test]
    fn an_oversized_body_is_cut_to_fit_and_says_so() {
        // The worst cases: SQS's largest body, of characters that escape to 2 and to 6 bytes,
        // and of multi-byte characters.
        for body in [
            "\\".repeat(256 * 1024),
            "\u{1}".repeat(256 * 1024),
            "é".repeat(128 * 1024),
            format!("{}{}", "x".repeat(300 * 1024 - 1), "€"),
        ] {
            let text = message_body(&item(body.clone()));
            assert!(text.len() <= MAX_ITEM_JSON_BYTES, "{}", text.len());
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["original_body_truncated"], true);
            assert_eq!(v["original_body_bytes"], body.len());
            assert_eq!(v["original_body_sha256"], sha256_hex(body.as_bytes()));
            let kept = v["original_body"].as_str().unwrap();
            assert!(body.starts_with(kept));
            assert!(kept.len() > 40 * 1024, "kept {} bytes", kept.len());
            assert_eq!(v["reason"], "rejected");
        }
    }

    #[test]
    fn a_long_detail_is_cut() {
        let mut long = item("{}".into());
        long.detail = "d".repeat(MAX_DETAIL_CHARS * 3);
        let v: serde_json::Value = serde_json::from_str(&message_body(&long)).unwrap();
        assert_eq!(v["detail"].as_str().unwrap().len(), MAX_DETAIL_CHARS);
    }
}
