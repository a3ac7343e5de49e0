//! The `ManualQueue` port: where events go that a person must handle, with the reason and the
//! original body, so nothing is lost silently. Adapters: [`memory::MemoryManualQueue`] (tests, the
//! simulator) and `sqs::SqsManualQueue` (feature `aws`).

mod memory;

pub use memory::MemoryManualQueue;

use std::fmt;

use async_trait::async_trait;

/// Why an event was routed to a person. The code is stable (the item's `reason`, the SQS message
/// attribute, the log line's `detail`). The core's codes and texts speak of the effect and the
/// server; an integration whose queue readers know other codes and words gives its own
/// ([`crate::Integration::manual_reason_code`], [`crate::Integration::manual_reason_text`]):
/// truck-slot keeps its legacy `terminal_rejected` for [`ManualReason::ServerRejected`]. The item
/// then carries the integration's code ([`ManualItem::to_json_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ManualReason {
    /// The body can never succeed (the integration's [`crate::integration::Rejection`]); the detail says why.
    Rejected,
    /// The event had already ended: no effect is made for it any more.
    EventEnded,
    /// The same event key arrived with another fingerprint: never a duplicate.
    Mismatch,
    /// The server does not honour `Idempotency-Key`: calling it would risk a second effect.
    NoIdempotencySupport,
    /// The server said the key was reused with another body (IETF draft: 422; or 409
    /// `idempotency_mismatch`).
    ServerKeyMismatch,
    /// The server answered another permanent error (4xx).
    ServerRejected,
    /// The server declined the request for a reason of its business, a refusal the integration
    /// names apart from [`ManualReason::ServerRejected`] (its
    /// [`crate::idempotency_key::AnswerReader::declines`]; [`crate::effect::CallOutcome::Declined`]):
    /// a payments API's `402`, a declined card, which payments calls `card_declined`
    /// ([`crate::Integration::manual_reason_code`]).
    Declined,
    /// The server's key retention has passed: calling again could make a second effect.
    PastKeyRetention,
    /// The server made the effect, but its answer names an effect the gate cannot keep: an id
    /// outside the format the server declares ([`crate::idempotency_key::AnswerReader::id_format`]),
    /// one that quotes a secret of the request, or one the store cannot commit.
    ServerAnswerInvalid,
    /// The server made an effect for a record another holder had already finished as `failed`
    /// or `manual`: nothing recorded that effect; record it by hand or undo it at the server.
    UnrecordedEffect,
    /// An operator cancelled the `in_flight` record (`gatectl cancel`, `crate::operator`); the
    /// detail names who and why. Make the effect by hand from the original body, or drop it.
    Cancelled,
    /// Another event key holds the event's natural key (signal 4: two event keys for one
    /// event): the effect was not called; the detail names both event keys.
    NaturalKeyCollision,
    /// A copy met its event key's record `committed` without an effect id (written by an older
    /// version, or edited by hand): acknowledged as a duplicate and not called (the effect may
    /// exist), told once per event key; the detail names the operation key to ask the server.
    CommittedWithoutEffectId,
}

impl ManualReason {
    /// `rejected`, `event_ended`, `mismatch`, `no_idempotency_support`, `server_key_mismatch`,
    /// `server_rejected`, `declined`, `past_key_retention`, `server_answer_invalid`,
    /// `unrecorded_effect`, `cancelled`, `natural_key_collision`, `committed_without_effect_id`:
    /// the core's codes.
    pub fn code(self) -> &'static str {
        match self {
            Self::Rejected => "rejected",
            Self::EventEnded => "event_ended",
            Self::Mismatch => "mismatch",
            Self::NoIdempotencySupport => "no_idempotency_support",
            Self::ServerKeyMismatch => "server_key_mismatch",
            Self::ServerRejected => "server_rejected",
            Self::Declined => "declined",
            Self::PastKeyRetention => "past_key_retention",
            Self::ServerAnswerInvalid => "server_answer_invalid",
            Self::UnrecordedEffect => "unrecorded_effect",
            Self::Cancelled => "cancelled",
            Self::NaturalKeyCollision => "natural_key_collision",
            Self::CommittedWithoutEffectId => "committed_without_effect_id",
        }
    }

    /// What the reason means, for a person: the core's words.
    pub fn text(self) -> &'static str {
        match self {
            Self::Rejected => "the body can never succeed",
            Self::EventEnded => "the event had already ended: no effect is made for it any more",
            Self::Mismatch => "the same event key arrived with another body",
            Self::NoIdempotencySupport => {
                "the server does not honour Idempotency-Key: a retry could make a second effect"
            }
            Self::ServerKeyMismatch => "the server said the key was reused with another body",
            Self::ServerRejected => "the server refused the request (a permanent error)",
            Self::Declined => "the server declined the request for a reason of its business",
            Self::PastKeyRetention => {
                "the server's key retention has passed: a new call could make a second effect"
            }
            Self::ServerAnswerInvalid => {
                "the server made the effect, but its answer names an effect id the gate cannot keep"
            }
            Self::UnrecordedEffect => {
                "the server made an effect for a record already finished: nothing recorded it"
            }
            Self::Cancelled => "an operator cancelled the record",
            Self::NaturalKeyCollision => {
                "another event key holds this event's natural key: the server was not called"
            }
            Self::CommittedWithoutEffectId => {
                "the record is committed without its effect id: the copy was not sent, the \
                 effect may exist"
            }
        }
    }
}

impl ManualReason {
    /// Every reason of the core, for parsing codes.
    pub const ALL: [ManualReason; 13] = [
        Self::Rejected,
        Self::EventEnded,
        Self::Mismatch,
        Self::NoIdempotencySupport,
        Self::ServerKeyMismatch,
        Self::ServerRejected,
        Self::Declined,
        Self::PastKeyRetention,
        Self::ServerAnswerInvalid,
        Self::UnrecordedEffect,
        Self::Cancelled,
        Self::NaturalKeyCollision,
        Self::CommittedWithoutEffectId,
    ];

    /// The reason with this [`ManualReason::code`], if any.
    pub fn parse(code: &str) -> Option<Self> {
        Self::parse_with(code, Self::code)
    }

    /// The reason whose code is `code` under `code_of` (an integration's codes:
    /// [`crate::Integration::manual_reason_code`]), or under the core's codes.
    pub fn parse_with(code: &str, code_of: impl Fn(Self) -> &'static str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|r| code_of(*r) == code)
            .or_else(|| Self::ALL.into_iter().find(|r| r.code() == code))
    }
}

/// One message for the manual queue. `Debug` redacts the original body (it may hold secrets,
/// an API key or a PIN, which the person acting by hand needs, but no log does).
#[derive(Clone, PartialEq, Eq)]
pub struct ManualItem {
    /// Why.
    pub reason: ManualReason,
    /// A human-readable explanation (never a secret of the request).
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
    /// fail on size and turn a bad body into a retry loop. Holds the original body, and so its
    /// secrets.
    pub fn to_json(&self) -> Vec<u8> {
        self.to_json_with(ManualReason::code)
    }

    /// [`ManualItem::to_json`] with the reason's code under `code_of` (an integration's codes:
    /// [`crate::Integration::manual_reason_code`]).
    pub fn to_json_with(&self, code_of: impl Fn(ManualReason) -> &'static str) -> Vec<u8> {
        let detail: String = self.detail.chars().take(MAX_DETAIL_CHARS).collect();
        let mut message = serde_json::json!({
            "reason": code_of(self.reason),
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
        Self::from_json_with(bytes, ManualReason::code)
    }

    /// [`ManualItem::from_json`] of an item written with an integration's codes (`code_of`:
    /// [`crate::Integration::manual_reason_code`]; the core's codes are read too).
    pub fn from_json_with(
        bytes: &[u8],
        code_of: impl Fn(ManualReason) -> &'static str,
    ) -> Option<Self> {
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
            reason: ManualReason::parse_with(v.get("reason")?.as_str()?, code_of)?,
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

/// The manual queue port: where a record goes to a person, with its reason and original body.
#[async_trait]
pub trait ManualQueue: Send + Sync {
    /// Enqueues one item. The gate may send the same item again (a routing resumed after a crash
    /// between the send and its confirmation, see `crate::routing`): at least once, with the
    /// same `event_key` (or `original_body`) so a person sees it is one case.
    ///
    /// # Errors
    /// [`ManualQueueError`] when the item could not be enqueued: the gate releases the routing's
    /// lease, so a redelivery or the reconciler sends the item again; it is never dropped.
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
        assert_eq!(ManualReason::parse("nope"), None);
        // An integration's own codes: written and read back with them; the core's still read.
        let own = |r: ManualReason| match r {
            ManualReason::ServerRejected => "card_declined",
            r => r.code(),
        };
        let item = ManualItem {
            reason: ManualReason::ServerRejected,
            detail: "402".into(),
            original_body: "{}".into(),
            event_key: None,
            message_id: "m-2".into(),
            original_body_cut: None,
        };
        let json = item.to_json_with(own);
        assert!(String::from_utf8_lossy(&json).contains("\"reason\":\"card_declined\""));
        assert_eq!(
            ManualItem::from_json(&json),
            None,
            "a code the core does not know"
        );
        assert_eq!(ManualItem::from_json_with(&json, own), Some(item.clone()));
        assert_eq!(ManualItem::from_json_with(&item.to_json(), own), Some(item));

        assert_eq!(ManualItem::from_json(b"{}"), None);
        assert_eq!(ManualItem::from_json(b"not json"), None);
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
