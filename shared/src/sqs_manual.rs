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
//!
//! A message always fits SQS's limit ([`MAX_MESSAGE_BYTES`], 256 KiB with the attribute), so a
//! send never fails on size and an oversized body cannot turn into a retry loop: `detail` is cut
//! to [`MAX_DETAIL_CHARS`] characters, and when the JSON-escaped original body does not fit, it
//! is cut at a character boundary and the message says so:
//! `"original_body_truncated": true`, `"original_body_bytes"` (the full size) and
//! `"original_body_sha256"` (of the full body). The gate refuses bodies over 64 KiB
//! (`crate::notification::MAX_BODY_BYTES`), so only those are ever cut.

use async_trait::async_trait;
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::MessageAttributeValue;
use aws_sdk_sqs::Client;

use crate::keys::sha256_hex;
use crate::manual::{ManualItem, ManualQueue, ManualQueueError};

/// The name of the message attribute that holds the reason code.
pub const REASON_ATTRIBUTE: &str = "reason";

/// Largest message body sent, in bytes: SQS's 256 KiB minus 1 KiB for the `reason` attribute
/// (which counts towards the limit) and the truncation fields.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 - 1024;

/// Longest `detail`, in characters.
pub const MAX_DETAIL_CHARS: usize = 4096;

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

/// The bytes `c` takes inside a JSON string as `serde_json` writes it.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// The longest prefix of `text` whose JSON-escaped form takes at most `budget` bytes.
fn prefix_within(text: &str, budget: usize) -> &str {
    let mut used = 0;
    for (i, c) in text.char_indices() {
        used += escaped_len(c);
        if used > budget {
            return &text[..i];
        }
    }
    text
}

/// The message body for `item`: JSON with `reason` (the code), `detail`, `original_body`,
/// `event_key` (or `null`) and `message_id`; never more than [`MAX_MESSAGE_BYTES`] (see the
/// module's notes on truncation).
pub fn message_body(item: &ManualItem) -> String {
    let detail: String = item.detail.chars().take(MAX_DETAIL_CHARS).collect();
    let mut message = serde_json::json!({
        "reason": item.reason.code(),
        "detail": detail,
        "original_body": item.original_body,
        "event_key": item.event_key,
        "message_id": item.message_id,
    });
    let full = message.to_string();
    if full.len() <= MAX_MESSAGE_BYTES {
        return full;
    }
    message["original_body"] = serde_json::Value::String(String::new());
    message["original_body_truncated"] = serde_json::Value::Bool(true);
    message["original_body_bytes"] = serde_json::Value::from(item.original_body.len());
    message["original_body_sha256"] =
        serde_json::Value::String(sha256_hex(item.original_body.as_bytes()));
    let envelope = message.to_string().len();
    let budget = MAX_MESSAGE_BYTES.saturating_sub(envelope);
    message["original_body"] =
        serde_json::Value::String(prefix_within(&item.original_body, budget).to_string());
    message.to_string()
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
        assert!(v.get("original_body_truncated").is_none());
    }

    fn item(original_body: String) -> ManualItem {
        ManualItem {
            reason: ManualReason::Rejected,
            detail: "body_too_large: ...".into(),
            original_body,
            event_key: None,
            message_id: "m2".into(),
        }
    }

    #[test]
    fn a_body_that_fits_is_kept_whole() {
        // 120 KiB of quotes escape to 240 KiB: still under the limit, kept whole.
        let body = "\"".repeat(120 * 1024);
        let text = message_body(&item(body.clone()));
        assert!(text.len() <= MAX_MESSAGE_BYTES);
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
            assert!(text.len() <= MAX_MESSAGE_BYTES, "{}", text.len());
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
