//! The side effect of the truck-slot path: the `SlotTerminal` port (a claim under an
//! `Idempotency-Key` and the lookup of that key) and its adapters:
//!
//! * [`http`]: `HttpTerminal`, the reqwest client of the terminal contract (re-exported here),
//!   on the core's `Idempotency-Key` contract (`gate::idempotency_key`);
//! * [`answer`]: how the terminal's answers are read (the slot; the terminal's slot-id format and
//!   the PIN check on ids): the terminal's hooks of the core's classification;
//! * [`id_secrets`]: the second line behind the slot-id format: an id that decodes to the PIN or
//!   the token, or holds a fragment of either;
//! * [`scrub`]: the PIN and the token found in text from outside, in every form a server echoes
//!   them: the second line behind the id format, and what `gatectl lookup` prints;
//! * [`several`]: several terminals in one stack (`TERMINALS`, each terminal's API shape, and
//!   `TerminalRouter`, which sends each record's calls to its own terminal).

pub mod answer;
pub mod http;
pub mod id_secrets;
pub mod scrub;
pub mod several;

use async_trait::async_trait;

pub use answer::{classify_claim, classify_lookup, MAX_SLOT_ID_CHARS};
pub use gate::effect::{AnswerDetail, CallOutcome, Effect, LookupOutcome};
pub use http::*;

/// The terminal's slot API.
#[async_trait]
pub trait SlotTerminal: Send + Sync {
    /// Step 3: claims a slot, sending `request` (the stored bytes) with `Idempotency-Key: op_key`.
    async fn claim(&self, op_key: &str, request: &[u8]) -> CallOutcome;

    /// Asks which slot is held under `op_key`. `request` is the stored claim request of the
    /// record the key belongs to: it is **not sent**, only read for the secrets (the PIN) and the
    /// container an answer must be checked against, as for [`SlotTerminal::claim`].
    async fn lookup(&self, op_key: &str, request: &[u8]) -> LookupOutcome;

    /// [`SlotTerminal::claim`] at the terminal `terminal` (the record's terminal code): what the
    /// gate calls. A client of one terminal ignores the code (the default); a router of several
    /// sends the call to that terminal's client ([`several::TerminalRouter`]).
    async fn claim_at(&self, terminal: &str, op_key: &str, request: &[u8]) -> CallOutcome {
        let _ = terminal;
        self.claim(op_key, request).await
    }

    /// [`SlotTerminal::lookup`] at the terminal `terminal`, as [`SlotTerminal::claim_at`].
    async fn lookup_at(&self, terminal: &str, op_key: &str, request: &[u8]) -> LookupOutcome {
        let _ = terminal;
        self.lookup(op_key, request).await
    }

    /// The lookup's answer for an operator's terminal (`gatectl lookup` only, never stored or
    /// logged): the answer described in our words, then its body with the PIN of `request` and
    /// the token cut out ([`answer::for_the_operator`]). `None`: this client cannot show it.
    async fn show_lookup_at(&self, terminal: &str, op_key: &str, request: &[u8]) -> Option<String> {
        let _ = (terminal, op_key, request);
        None
    }
}

/// Whether `url` may be used as the terminal's base URL: the core's rule for any server's
/// (`gate_http::base_url_allowed`).
pub use gate_http::base_url_allowed;
