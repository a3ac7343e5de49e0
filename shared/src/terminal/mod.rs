//! The side effect of the truck-slot path: the `SlotTerminal` port (a claim under an
//! `Idempotency-Key` and the lookup of that key) and its adapters:
//!
//! * [`http`]: `HttpTerminal`, the reqwest client of the terminal contract (re-exported here);
//! * [`scrub`]: the PIN and the token found and cut out of text from outside, in every form a
//!   server echoes them;
//! * [`several`]: several terminals in one stack (`TERMINALS`, each terminal's API shape, and
//!   `TerminalRouter`, which sends each record's calls to its own terminal).

pub mod http;
pub mod scrub;
pub mod several;

use std::fmt;

use async_trait::async_trait;

pub use http::*;

/// A slot the terminal issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotClaim {
    /// The terminal's slot id, non-empty, printable ASCII, quoting no secret.
    pub slot_id: String,
    /// The container the terminal says the slot is for, if it said. When it is not the container
    /// of the request, it is kept only scrubbed of every secret (and escaped when unreadable).
    pub equipment_number: Option<String>,
}

/// What the gate may say about an answer (or a failed request) that gave no usable slot, in two
/// renderings (issue 13: a terminal echoes what it was sent, in any case and encoding):
///
/// * `Display` and `Debug` give the **summary** only: our own words with the status, the
///   answer's length in bytes and its keyed SHA-256 digest ([`answer_digest`]), never a character
///   of the answer. This is what log lines, `Retry` outcomes and reports carry.
/// * [`AnswerDetail::quoted`] adds the **excerpt**: a problem's `detail` or `title`, or the
///   answer's first `DETAIL_MAX` (300) characters, with secret-looking JSON keys redacted and every
///   secret the client knows (the token; the PIN of the request the answer is about) cut out in
///   every form [`crate::terminal::scrub`] finds. Only the record's `error` and the manual item's `detail`
///   carry it.
#[derive(Clone, PartialEq, Eq)]
pub struct AnswerDetail {
    summary: String,
    excerpt: Option<String>,
}

impl AnswerDetail {
    /// A detail with a summary and no excerpt (a timeout, a connection error, a test terminal).
    /// The summary must quote nothing that came from outside.
    pub fn new(summary: impl Into<String>) -> Self {
        Self {
            summary: summary.into(),
            excerpt: None,
        }
    }

    fn with_excerpt(summary: String, excerpt: String) -> Self {
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

/// How a slot claim ended, as the gate must act on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// `2xx` with a slot id: commit it.
    Claimed(SlotClaim),
    /// `5xx`, `408`, `425`, `429`, `401` (the token refused), `3xx` (never followed), timeouts,
    /// connection errors, a `2xx` without a usable slot id: the outcome is unknown or not the
    /// event's fault; retry later with the same key and bytes (see the module's notes).
    Transient(AnswerDetail),
    /// Another `4xx` (`400`, `403`, ...): will never succeed; `failed` and the manual queue.
    Permanent {
        /// The HTTP status; `0` when nothing was sent (a stored request the terminal's API shape
        /// cannot carry, [`several::appointments_v2_body`]).
        status: u16,
        /// The summary and the scrubbed problem detail or body excerpt (never the request).
        detail: AnswerDetail,
    },
    /// The key was used with another body (`422`, or `409` with problem type
    /// `idempotency_mismatch`): permanent.
    KeyMismatch(AnswerDetail),
    /// The same key is still being processed (`409` otherwise): transient.
    KeyInFlight,
}

/// How a lookup by key ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupOutcome {
    /// A slot is held under the key.
    Found(SlotClaim),
    /// No slot under the key (never claimed, failed, or forgotten after the retention).
    NotFound,
    /// Unknown; try again later.
    Transient(AnswerDetail),
}

/// The terminal's slot API.
#[async_trait]
pub trait SlotTerminal: Send + Sync {
    /// Step 3: claims a slot, sending `request` (the stored bytes) with `Idempotency-Key: op_key`.
    async fn claim(&self, op_key: &str, request: &[u8]) -> ClaimOutcome;

    /// Asks which slot is held under `op_key`. `request` is the stored claim request of the
    /// record the key belongs to: it is **not sent**, only read for the secrets (the PIN) and the
    /// container an answer must be checked against, as for [`SlotTerminal::claim`].
    async fn lookup(&self, op_key: &str, request: &[u8]) -> LookupOutcome;

    /// [`SlotTerminal::claim`] at the terminal `terminal` (the record's terminal code): what the
    /// gate calls. A client of one terminal ignores the code (the default); a router of several
    /// sends the call to that terminal's client ([`several::TerminalRouter`]).
    async fn claim_at(&self, terminal: &str, op_key: &str, request: &[u8]) -> ClaimOutcome {
        let _ = terminal;
        self.claim(op_key, request).await
    }

    /// [`SlotTerminal::lookup`] at the terminal `terminal`, as [`SlotTerminal::claim_at`].
    async fn lookup_at(&self, terminal: &str, op_key: &str, request: &[u8]) -> LookupOutcome {
        let _ = terminal;
        self.lookup(op_key, request).await
    }
}
