//! The `ManualQueue` port: where events go that a person must handle, with the reason and the
//! original body, so nothing is lost silently. Adapters: [`memory::MemoryManualQueue`] (tests, the
//! simulator) and `sqs::SqsManualQueue` (feature `aws`).

pub mod memory;
#[cfg(feature = "aws")]
pub mod sqs;

pub use memory::MemoryManualQueue;

use std::fmt;

use async_trait::async_trait;

/// Why an event was routed to a person. The code is stable (message attribute, metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ManualReason {
    /// The body can never succeed (the integration's [`crate::integration::Rejection`]); the detail says why.
    Rejected,
    /// The window had already ended: no effect can be claimed.
    EventEnded,
    /// The same event key arrived with another fingerprint: never a duplicate.
    Mismatch,
    /// The server does not honour `Idempotency-Key`: claiming would risk a second effect.
    NoIdempotencySupport,
    /// The server said the key was reused with another body (IETF draft: 422; or 409
    /// `idempotency_mismatch`).
    ServerKeyMismatch,
    /// The server answered another permanent error (4xx).
    ServerRejected,
    /// The server's key retention has passed: claiming again could make a second effect.
    PastKeyRetention,
    /// The server answered for another subject than the one asked.
    ServerAnswerInvalid,
    /// The server issued an effect for a record another holder had already finished as `failed`
    /// or `manual`: nothing booked that effect; book it by hand or cancel it at the server.
    UnrecordedEffect,
    /// An operator cancelled the `in_flight` record (`gatectl cancel`, `crate::operator`); the
    /// detail names who and why. Book it by hand from the original body, or drop it.
    Cancelled,
    /// The server refused the request permanently for a reason the integration names (its
    /// [`crate::effect::CallOutcome::Refused`]): the code is the integration's own (e.g.
    /// `card_declined` for a payments API's `402`), so a person reads the business reason, not a
    /// generic refusal. A code is 1 to [`MAX_INTEGRATION_CODE_LEN`] characters of `a-z`, `0-9`
    /// and `_`, and never one of the core's codes ([`ManualReason::ALL`]): such a code is read
    /// back as the core's reason ([`ManualReason::parse`]).
    Integration(&'static str),
}

/// Longest integration-defined reason code ([`ManualReason::Integration`]), characters.
pub const MAX_INTEGRATION_CODE_LEN: usize = 64;

/// Distinct integration codes one process reads back from JSON ([`ManualReason::parse`]) at
/// most: each is kept once for the process's life (a `&'static str`), so the set must be bounded.
/// Past it an unknown code is unreadable (the item is then routed as `rejected` with its stored
/// bytes as the body: nothing is lost).
const MAX_INTERNED_CODES: usize = 256;

/// Whether `code` has the form of an integration code (`[a-z0-9_]{1,64}`).
pub fn is_integration_code(code: &str) -> bool {
    (1..=MAX_INTEGRATION_CODE_LEN).contains(&code.len())
        && code
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// `code` as a `&'static str`, kept once per distinct code (bounded, [`MAX_INTERNED_CODES`]).
fn intern(code: &str) -> Option<&'static str> {
    static CODES: std::sync::Mutex<std::collections::BTreeSet<&'static str>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut codes = CODES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(known) = codes.get(code) {
        return Some(known);
    }
    if codes.len() >= MAX_INTERNED_CODES {
        return None;
    }
    let kept: &'static str = Box::leak(code.to_string().into_boxed_str());
    codes.insert(kept);
    Some(kept)
}

impl ManualReason {
    /// `rejected`, `window_ended`, `mismatch`, `no_idempotency_support`, `server_key_mismatch`,
    /// `server_rejected`, `past_key_retention`, `server_answer_invalid`, `unbooked_effect`,
    /// `cancelled`, or the integration's own code.
    pub fn code(self) -> &'static str {
        match self {
            Self::Rejected => "rejected",
            Self::EventEnded => "window_ended",
            Self::Mismatch => "mismatch",
            Self::NoIdempotencySupport => "no_idempotency_support",
            Self::ServerKeyMismatch => "terminal_key_mismatch",
            Self::ServerRejected => "terminal_rejected",
            Self::PastKeyRetention => "past_key_retention",
            Self::ServerAnswerInvalid => "terminal_answer_invalid",
            Self::UnrecordedEffect => "unbooked_slot",
            Self::Cancelled => "cancelled",
            Self::Integration(code) => code,
        }
    }
}

impl ManualReason {
    /// Every reason of the core (not the integrations' own, [`ManualReason::Integration`]).
    pub const ALL: [ManualReason; 10] = [
        Self::Rejected,
        Self::EventEnded,
        Self::Mismatch,
        Self::NoIdempotencySupport,
        Self::ServerKeyMismatch,
        Self::ServerRejected,
        Self::PastKeyRetention,
        Self::ServerAnswerInvalid,
        Self::UnrecordedEffect,
        Self::Cancelled,
    ];

    /// The reason with this [`ManualReason::code`]: the core's, else an integration's code of the
    /// right form ([`is_integration_code`]), else `None`.
    pub fn parse(code: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|r| r.code() == code)
            .or_else(|| {
                is_integration_code(code)
                    .then(|| intern(code))
                    .flatten()
                    .map(Self::Integration)
            })
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
    /// Set when `original_body` is only a prefix of the body received (it did not fit the
    /// manual queue's message limit, see [`ManualItem::to_json`]); `None` for a whole body.
    pub original_body_cut: Option<BodyCut>,
}

/// What a cut `original_body` was: its full size in bytes and the SHA-256 (hex) of all of it, so
/// a person can tell repeats of one body apart from other bodies. The cut tail itself is kept
/// nowhere: the message that carried it was acknowledged (such a body is rejected, never retried).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyCut {
    /// The full body's size, bytes.
    pub bytes: usize,
    /// SHA-256 of the full body, lower-case hex.
    pub sha256: String,
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
            .field("original_body_cut", &self.original_body_cut)
            .finish()
    }
}

impl ManualItem {
    /// The item as JSON, never more than [`MAX_ITEM_JSON_BYTES`]: an object with `reason` (the
    /// code), `detail` (cut to [`MAX_DETAIL_CHARS`] characters), `original_body`, `event_key` (or
    /// `null`) and `message_id`. When the JSON-escaped original body does not fit (a body over
    /// 64 KiB is rejected, and escaping can make one six times longer), it is cut at a character
    /// boundary and the object says so: `"original_body_truncated": true`,
    /// `"original_body_bytes"` (the full size) and `"original_body_sha256"` (of the full body).
    ///
    /// The same bytes are the manual-queue message (SQS: 256 KiB) and a routing record's stored
    /// `request` (DynamoDB: 400 KB per item), so whoever resumes the record (a redelivery, the
    /// reconciler) sends the same item, and neither the send nor the routing record's write can
    /// fail on size and turn a bad body into a retry loop. Holds the original body, and so the PIN.
    pub fn to_json(&self) -> Vec<u8> {
        let detail: String = self.detail.chars().take(MAX_DETAIL_CHARS).collect();
        let mut message = serde_json::json!({
            "reason": self.reason.code(),
            "detail": detail,
            "original_body": self.original_body,
            "event_key": self.event_key,
            "message_id": self.message_id,
        });
        let mark = |message: &mut serde_json::Value, cut: &BodyCut| {
            message["original_body_truncated"] = serde_json::Value::Bool(true);
            message["original_body_bytes"] = serde_json::Value::from(cut.bytes);
            message["original_body_sha256"] = serde_json::Value::String(cut.sha256.clone());
        };
        if let Some(cut) = &self.original_body_cut {
            mark(&mut message, cut);
        }
        let full = message.to_string();
        if full.len() <= MAX_ITEM_JSON_BYTES {
            return full.into_bytes();
        }
        let cut = self.original_body_cut.clone().unwrap_or_else(|| BodyCut {
            bytes: self.original_body.len(),
            sha256: crate::keys::sha256_hex(self.original_body.as_bytes()),
        });
        message["original_body"] = serde_json::Value::String(String::new());
        mark(&mut message, &cut);
        // The kept prefix must not depend on which delivery routes the item: a resumed routing
        // record is resent under another message id (the reconciler's is longer than SQS's), and
        // the person should see the same `original_body` both times. So the budget reserves a
        // fixed allowance for the message id instead of measuring this one.
        let message_id_len = serde_json::Value::String(self.message_id.clone())
            .to_string()
            .len();
        message["message_id"] = serde_json::Value::String(String::new());
        let envelope = message.to_string().len() + message_id_len.max(MESSAGE_ID_ALLOWANCE);
        message["message_id"] = serde_json::Value::String(self.message_id.clone());
        let budget = MAX_ITEM_JSON_BYTES.saturating_sub(envelope);
        message["original_body"] =
            serde_json::Value::String(prefix_within(&self.original_body, budget).to_string());
        message.to_string().into_bytes()
    }

    /// Reads an item written by [`ManualItem::to_json`]; `None` if the bytes are not one (a cut
    /// item must carry both `original_body_bytes` and `original_body_sha256`). Of a cut item,
    /// `original_body` is the kept prefix and `original_body_cut` what was cut, so a resend says so.
    pub fn from_json(bytes: &[u8]) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
        let original_body_cut =
            if v.get("original_body_truncated") == Some(&serde_json::Value::Bool(true)) {
                Some(BodyCut {
                    bytes: usize::try_from(v.get("original_body_bytes")?.as_u64()?).ok()?,
                    sha256: v.get("original_body_sha256")?.as_str()?.to_string(),
                })
            } else {
                None
            };
        Some(Self {
            reason: ManualReason::parse(v.get("reason")?.as_str()?)?,
            detail: v.get("detail")?.as_str()?.to_string(),
            original_body: v.get("original_body")?.as_str()?.to_string(),
            original_body_cut,
            event_key: v
                .get("event_key")
                .and_then(serde_json::Value::as_str)
                .map(str::to_string),
            message_id: v.get("message_id")?.as_str()?.to_string(),
        })
    }
}

/// Largest manual item JSON, in bytes ([`ManualItem::to_json`]): SQS's 256 KiB message limit
/// minus 1 KiB for the `reason` message attribute (which counts towards it). Far under
/// DynamoDB's 400 KB item limit, so a routing record holding it fits too.
pub const MAX_ITEM_JSON_BYTES: usize = 256 * 1024 - 1024;

/// Bytes a cut item's JSON reserves for its `message_id` (quoted), whatever the id's length up to
/// this: SQS ids take 38, the reconciler's (`reconciler:{request id}`) about 49.
const MESSAGE_ID_ALLOWANCE: usize = 256;

/// Longest `detail` kept in a manual item's JSON, in characters.
pub const MAX_DETAIL_CHARS: usize = 4096;

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
                    original_body_cut: None,
                };
                assert_eq!(ManualItem::from_json(&item.to_json()), Some(item));
            }
        }
        assert_eq!(ManualReason::parse("Nope!"), None);
        assert_eq!(ManualReason::parse(""), None);
        assert_eq!(ManualReason::parse(&"x".repeat(65)), None);
        assert_eq!(ManualItem::from_json(b"{}"), None);
        assert_eq!(ManualItem::from_json(b"not json"), None);
    }

    /// An integration's own code (a declined card) is written and read back as itself.
    #[test]
    fn an_integration_code_round_trips() {
        let reason = ManualReason::Integration("card_declined");
        assert_eq!(reason.code(), "card_declined");
        assert_eq!(ManualReason::parse("card_declined"), Some(reason));
        let item = ManualItem {
            reason,
            detail: "card_declined: payments API answered 402".into(),
            original_body: "{}".into(),
            event_key: None,
            message_id: "m-1".into(),
            original_body_cut: None,
        };
        assert_eq!(ManualItem::from_json(&item.to_json()), Some(item));
        // A core code is the core's reason.
        assert_eq!(
            ManualReason::parse("cancelled"),
            Some(ManualReason::Cancelled)
        );
    }

    /// 200 KiB of `"` (each escaped to 2 bytes) would make a 400 KiB item: over SQS's limit and,
    /// stored in a routing record, over DynamoDB's 400 KB item limit.
    #[test]
    fn an_item_that_would_not_fit_is_cut_and_says_so() {
        let body = "\"".repeat(200 * 1024);
        let item = ManualItem {
            reason: ManualReason::Rejected,
            detail: "body_too_large: 204800 bytes".into(),
            original_body: body.clone(),
            event_key: None,
            message_id: "m-big".into(),
            original_body_cut: None,
        };
        let json = item.to_json();
        assert!(json.len() <= MAX_ITEM_JSON_BYTES, "{} bytes", json.len());
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(v["original_body_truncated"], true);
        assert_eq!(v["original_body_bytes"], 200 * 1024);
        let sha = crate::keys::sha256_hex(body.as_bytes());
        assert_eq!(v["original_body_sha256"], sha.as_str());
        let kept = v["original_body"].as_str().unwrap();
        assert!(body.starts_with(kept));
        // Nearly the whole budget is used: 2 bytes per kept character.
        assert!(
            kept.len() * 2 > MAX_ITEM_JSON_BYTES - 1024,
            "kept {}",
            kept.len()
        );

        let back = ManualItem::from_json(&json).unwrap();
        assert_eq!(back.original_body, kept);
        assert_eq!(back.detail, "body_too_large: 204800 bytes");
        assert_eq!(
            back.original_body_cut,
            Some(BodyCut {
                bytes: 200 * 1024,
                sha256: sha.clone()
            })
        );
        // Resending the read-back item (a resumed routing record) gives the same bytes.
        assert_eq!(back.to_json(), json);

        // Resent by the reconciler under its longer message id, the person sees the same prefix.
        let resent = ManualItem {
            message_id: "reconciler:8f14e45f-ceea-467f-a1c3-2b7a0e8f9d01".into(),
            ..item.clone()
        };
        let v2: serde_json::Value = serde_json::from_slice(&resent.to_json()).unwrap();
        assert_eq!(v2["original_body"], v["original_body"]);
        assert!(resent.to_json().len() <= MAX_ITEM_JSON_BYTES);
        let resumed = ManualItem {
            message_id: "reconciler:8f14e45f-ceea-467f-a1c3-2b7a0e8f9d01".into(),
            ..back
        };
        let v3: serde_json::Value = serde_json::from_slice(&resumed.to_json()).unwrap();
        assert_eq!(v3["original_body"], v["original_body"]);
    }
}
