//! The side effect's answers as the gate acts on them: what a call under an `Idempotency-Key`
//! gave ([`CallOutcome`]), what a lookup of that key gave
//! ([`LookupOutcome`]), the effect a call made ([`Effect`]: its id and, when
//! the server said, whom it is for) and the scrubbed description of an answer that gave no effect
//! ([`AnswerDetail`]). An integration's client ([`crate::integration::Integration::call`])
//! classifies its server's answers into these; the names are the truck-slot path's (a claim, a
//! effect), the meaning is any side effect's.
//!
//! Answers follow the IETF draft `draft-ietf-httpapi-idempotency-key-header-07`: the same key with
//! another payload is a mismatch (permanent), the same key still processing is in flight
//! (transient), a retry after completion gets the first result.

use std::fmt;

/// The effect a call made (an effect the server issued, on the truck-slot path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    /// The effect's id (the server's effect id): non-empty, printable ASCII, quoting no secret.
    /// Committed with the record and written to the business row (attribute `effect_id`).
    pub effect_id: String,
    /// Whom the server says the effect is for (the subject, on the truck-slot path), if it
    /// said. When it is not the record's subject ([`crate::integration::Integration::subject`])
    /// the effect is never committed: a person gets it. Kept only scrubbed of every secret.
    pub subject: Option<String>,
}

/// What the gate may say about an answer (or a failed request) that gave no usable effect, in two
/// renderings (issue 13: a server echoes what it was sent, in any case and encoding):
///
/// * `Display` and `Debug` give the **summary** only: our own words with the status, the
///   answer's content type, its length in bytes and its keyed SHA-256 digest
///   ([`crate::idempotency_key::describe`]), never a character of the answer. This is what log
///   lines, `Retry` outcomes and reports carry.
/// * [`AnswerDetail::quoted`] adds the **excerpt**: a problem's `detail` or `title`, or the
///   answer's first `DETAIL_MAX` (300) characters, with secret-looking JSON keys redacted and every
///   secret the client knows (the token; the PIN of the request the answer is about) cut out in
///   every form the integration's scrubber finds. Only the record's `error` and the manual item's `detail`
///   carry it.
#[derive(Clone, PartialEq, Eq)]
pub struct AnswerDetail {
    summary: String,
    excerpt: Option<String>,
}

impl AnswerDetail {
    /// A detail with a summary and no excerpt (a timeout, a connection error, a test server).
    /// The summary must quote nothing that came from outside.
    pub fn new(summary: impl Into<String>) -> Self {
        Self {
            summary: summary.into(),
            excerpt: None,
        }
    }

    /// A detail with an excerpt for a person (the record's `error`, the manual item's
    /// `detail`): the caller must have scrubbed it of every secret and every echo of the request
    /// (an empty excerpt is none).
    pub fn with_excerpt(summary: String, excerpt: String) -> Self {
        Self {
            summary,
            excerpt: (!excerpt.is_empty()).then_some(excerpt),
        }
    }

    /// The summary: what a log line may carry.
    pub fn summary(&self) -> &str {
        &self.summary
    }

    /// The scrubbed excerpt of the answer, if there was one.
    pub fn excerpt(&self) -> Option<&str> {
        self.excerpt.as_deref()
    }

    /// `"{summary}: {excerpt}"` (or the summary alone): for the record's `error` and the manual
    /// item's `detail`, never for a log line.
    pub fn quoted(&self) -> String {
        match &self.excerpt {
            Some(excerpt) => format!("{}: {excerpt}", self.summary),
            None => self.summary.clone(),
        }
    }
}

impl fmt::Display for AnswerDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary)
    }
}

impl fmt::Debug for AnswerDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AnswerDetail").field(&self.summary).finish()
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

/// How an effect claim ended, as the gate must act on it. An HTTP server's answers are classified
/// into it by [`crate::idempotency_key::classify_call`], whose table gives every status its
/// variant and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallOutcome {
    /// `2xx` with an effect id: commit it.
    Done(Effect),
    /// `5xx`, `408`, `421`, `423`, `425`, `429`, `401`/`407` (credentials refused), `1xx`,
    /// `3xx` (never followed), timeouts, connection errors, a `2xx` without a usable id: the
    /// outcome is unknown or not the event's fault; retry later with the same key and bytes.
    Transient(AnswerDetail),
    /// Another `4xx` (`400`, `402`, `403`, `404`, ...): will never succeed; `failed` and the
    /// manual queue.
    Permanent {
        /// The HTTP status; `0` when nothing was sent (a stored request the server's API shape
        /// cannot carry, [`several::appointments_v2_body`]).
        status: u16,
        /// The summary and the scrubbed problem detail or body excerpt (never the request).
        detail: AnswerDetail,
    },
    /// A permanent refusal the integration names with its own code (a payments API's `402`: the
    /// card was declined, `card_declined`): `failed`, and a person gets it under
    /// [`crate::manual::ManualReason::Integration`]`(code)` instead of the generic refusal. An
    /// integration makes it from the [`CallOutcome::Permanent`] the core classified (e.g. for one
    /// status). `code`: `[a-z0-9_]{1,64}` and none of the core's reason codes
    /// ([`crate::manual::is_integration_code`]; another is routed as the generic refusal).
    Refused {
        /// The integration's reason code, e.g. `card_declined`.
        code: &'static str,
        /// The summary and the scrubbed problem detail or body excerpt (never the request).
        detail: AnswerDetail,
    },
    /// The key was used with another body (`422`, or `409` with problem type
    /// `idempotency_mismatch`): permanent.
    KeyMismatch(AnswerDetail),
    /// The same key is still being processed (`409` otherwise): transient.
    KeyInFlight,
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
}
