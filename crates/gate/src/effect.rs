//! The side effect's answers as the gate acts on them: what a call under an `Idempotency-Key`
//! gave ([`CallOutcome`]), what a lookup of that key gave
//! ([`LookupOutcome`]), the effect a call made ([`Effect`]: its id and, when
//! the server said, whom it is for) and the description, in our words, of an answer that gave no
//! effect ([`AnswerDetail`]). An integration's client ([`crate::integration::Integration::call`])
//! classifies its server's answers into these.
//!
//! Answers follow the IETF draft `draft-ietf-httpapi-idempotency-key-header-07`: the same key with
//! another payload is a mismatch (permanent), the same key still processing is in flight
//! (transient), a retry after completion gets the first result.

use std::fmt;

/// The effect a call made. `Debug` names the
/// server's `subject` by its keyed digest only (it is the server's text).
#[derive(Clone, PartialEq, Eq)]
pub struct Effect {
    /// The effect's id (the server's effect id). A classified outcome holds only an id in the
    /// format the server declared and quoting no secret ([`crate::idempotency_key::IdFormat`]).
    /// Committed with the record, written to the business row (attribute `effect_id`) and logged.
    pub effect_id: String,
    /// Whom the server says the effect is for (the subject, on the truck-slot path), if it
    /// said. When it is not the record's subject ([`crate::integration::Integration::subject`])
    /// the effect is never committed: a person gets it, told the server's value only by its keyed
    /// digest (it is the server's text: never logged or stored).
    pub subject: Option<String>,
}

impl fmt::Debug for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let subject = self.subject.as_deref().map(|s| {
            format!(
                "keyed SHA-256 {}",
                crate::idempotency_key::answer_digest(s.as_bytes())
            )
        });
        f.debug_struct("Effect")
            .field("effect_id", &self.effect_id)
            .field("subject", &subject)
            .finish()
    }
}

/// What the gate may say about an answer (or a failed request) that gave no usable effect: our
/// own words with the status, the answer's content type (named from a fixed list), its length in
/// bytes and its keyed SHA-256 digest ([`crate::idempotency_key::describe`]), and the reason;
/// never a character of the answer (no text a server chose is stored or logged, since a
/// server echoes what it was sent, in any case and encoding, and a scrubber that knows N encodings
/// loses to the N+1st). This is what log lines, `Retry` outcomes, reports, a record's `error` and
/// a manual item's `detail` carry. A person who needs the answer itself asks the server live
/// (`gatectl lookup`), which prints it to the operator's server and stores nothing.
#[derive(Clone, PartialEq, Eq)]
pub struct AnswerDetail {
    summary: String,
    retry_after: Option<RetryAfter>,
}

impl AnswerDetail {
    /// A detail in our words. The summary must quote nothing that came from outside.
    pub fn new(summary: impl Into<String>) -> Self {
        Self {
            summary: summary.into(),
            retry_after: None,
        }
    }

    /// The same detail with the delay the server asked for (`Retry-After` on a `429` or a
    /// `503`, [`crate::idempotency_key::classify_call`]); `None`: no delay.
    #[must_use]
    pub fn with_retry_after(self, retry_after: Option<RetryAfter>) -> Self {
        Self {
            retry_after,
            ..self
        }
    }

    /// The delay the server asked for before the same request is sent again, if it did: a
    /// [`CallOutcome::Transient`] that carries one is never retried sooner (the held record's
    /// settlement; docs/OPERATING.md, "Retry-After").
    pub fn retry_after(&self) -> Option<RetryAfter> {
        self.retry_after
    }

    /// The summary, in our words (never an excerpt of the server's answer): what a log line, a
    /// record's `error` and a person's text show.
    pub fn summary(&self) -> &str {
        &self.summary
    }
}

impl fmt::Display for AnswerDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary)
    }
}

impl fmt::Debug for AnswerDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut t = f.debug_tuple("AnswerDetail");
        t.field(&self.summary);
        if let Some(after) = &self.retry_after {
            t.field(after);
        }
        t.finish()
    }
}

/// A server's `Retry-After` (RFC 9110 §10.2.3), read by
/// [`crate::idempotency_key::parse_retry_after`]: a delay in **seconds**, or an instant
/// (epoch **milliseconds**, from an HTTP-date) before which the request must not be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryAfter {
    /// Delta-seconds: this many seconds after the answer.
    Seconds(u64),
    /// An HTTP-date, as epoch milliseconds.
    At(i64),
}

impl RetryAfter {
    /// The delay from `now_ms` (epoch ms), **milliseconds**, never below 0 (a date already past
    /// is no delay) and saturating at `i64::MAX`.
    pub fn delay_ms(self, now_ms: i64) -> i64 {
        match self {
            Self::Seconds(s) => i64::try_from(s).unwrap_or(i64::MAX).saturating_mul(1_000),
            Self::At(at_ms) => at_ms.saturating_sub(now_ms),
        }
        .max(0)
    }
}

impl From<&str> for AnswerDetail {
    fn from(summary: &str) -> Self {
        Self::new(summary)
    }
}

impl From<String> for AnswerDetail {
    fn from(summary: String) -> Self {
        Self::new(summary)
    }
}

/// How a call of the side effect ended, as the gate must act on it. An HTTP server's answers are classified
/// into it by [`crate::idempotency_key::classify_call`], whose table gives every status its
/// variant and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallOutcome {
    /// `2xx` with an effect id: commit it.
    Done(Effect),
    /// `5xx`, `408`, `421`, `423`, `425`, `429`, `401`/`407` (credentials refused), `1xx`,
    /// `3xx` (never followed), timeouts, connection errors, a `2xx` without a usable id: the
    /// outcome is unknown or not the event's fault; retry later with the same key and bytes.
    /// A `429` or `503` with `Retry-After` carries its delay ([`AnswerDetail::retry_after`]):
    /// not retried sooner.
    Transient(AnswerDetail),
    /// Another `4xx` (`400`, `402`, `403`, `404`, ...): will never succeed; `failed` and the
    /// manual queue.
    Permanent {
        /// The HTTP status; `0` when nothing was sent (a stored request the server's API shape
        /// cannot carry, e.g. an integration whose server changed its API refusing a stored
        /// request of the old shape).
        status: u16,
        /// The summary of the answer, in our words.
        detail: AnswerDetail,
    },
    /// A permanent refusal the integration's server makes for a reason of its business (a
    /// payments API's `402`: the card was declined), named by the integration's
    /// [`crate::idempotency_key::AnswerReader::declines`]: `failed`, and a person gets it under
    /// [`crate::manual::ManualReason::Declined`], in the integration's words
    /// ([`crate::Integration::manual_reason_code`]), apart from the other refusals.
    Declined {
        /// The HTTP status.
        status: u16,
        /// The summary of the answer, in our words.
        detail: AnswerDetail,
    },
    /// The key was used with another body (`422`, or `409` with problem type
    /// `idempotency_mismatch`): permanent.
    KeyMismatch(AnswerDetail),
    /// The same key is still being processed (`409` otherwise): transient.
    KeyInFlight,
    /// A `2xx` named an effect whose id the gate refuses to keep: outside the format the server
    /// declared ([`crate::idempotency_key::IdFormat`]), or quoting a secret of the request (the
    /// integration's second line, [`crate::idempotency_key::AnswerReader::id_quotes_secret`]). The
    /// effect exists under the key and the server replays the same answer, so asking again
    /// cannot help: the record goes to a person (`server_answer_invalid`), the id named only by
    /// its keyed digest in the detail; the id itself is never logged, stored or booked.
    EffectRefused(AnswerDetail),
}

/// How a lookup by key ended ([`crate::idempotency_key::classify_lookup`] for an HTTP server).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupOutcome {
    /// An effect is held under the key.
    Found(Effect),
    /// No effect under the key (never claimed, failed, or forgotten after the retention).
    NotFound,
    /// Unknown; try again later.
    Transient(AnswerDetail),
    /// A `200` named an effect whose id the gate refuses to keep, as
    /// [`CallOutcome::EffectRefused`]: a person gets the record.
    EffectRefused(AnswerDetail),
}
