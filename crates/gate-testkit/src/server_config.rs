//! How an [`IdempotencyServer`](super::IdempotencyServer) behaves ([`ServerConfig`]: path, id
//! field, the answer's shape, mismatch status, retention, lookup, [`Faults`]), what it counts
//! ([`Counters`]) and the problem types it answers with.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::server_ids::{IdMaker, IdShapeError};
use gate::idempotency_key::IdFormat;

/// Content type of a JSON answer.
pub const CONTENT_TYPE_JSON: &str = "application/json";
/// Content type of an RFC 9457 problem document.
pub const CONTENT_TYPE_PROBLEM: &str = "application/problem+json";
/// Problem type: the key was used with another request body.
pub const PROBLEM_IDEMPOTENCY_MISMATCH: &str = "idempotency_mismatch";
/// Problem type: a request with the same key is still being processed.
pub const PROBLEM_IDEMPOTENCY_KEY_IN_FLIGHT: &str = "idempotency_key_in_flight";
/// Problem type: a `POST` came without an `Idempotency-Key`.
pub const PROBLEM_IDEMPOTENCY_KEY_MISSING: &str = "idempotency_key_missing";
/// Problem type: an injected failure before the key was taken (`503`, never stored).
pub const PROBLEM_SERVICE_UNAVAILABLE: &str = "service_unavailable";
/// Problem type: an injected lost answer; the work was done and its answer stored (`504`).
pub const PROBLEM_UPSTREAM_RESPONSE_LOST: &str = "upstream_response_lost";
/// Problem type: no such resource, or nothing stored under the key (`404`).
pub const PROBLEM_NOT_FOUND: &str = "not_found";
/// Problem type: the method is not served on this path (`405`).
pub const PROBLEM_METHOD_NOT_ALLOWED: &str = "method_not_allowed";

/// One day in **milliseconds**: the default key retention (the key expiry the draft asks a
/// server to publish; Stripe keeps keys 24 hours).
pub const DEFAULT_RETENTION_MS: i64 = 24 * 3_600_000;

/// What the work answers: a status and a JSON body ([`ServerConfig::answer`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The HTTP status; a 2xx made an effect (counted), anything else did not.
    pub status: u16,
    /// The JSON body.
    pub body: Value,
}

/// How the server answers a key reused with another body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MismatchAnswer {
    /// `422 Unprocessable Content`, problem type `idempotency_mismatch` (the draft's suggestion).
    Unprocessable,
    /// `409 Conflict`, problem type `idempotency_mismatch` (as many servers answer).
    Conflict,
}

/// The fault switches, drawn per `POST` from a ChaCha8 generator seeded with `seed` (so a run is
/// reproducible when the requests come in the same order). [`Default`]: no faults.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Faults {
    /// Probability in `[0, 1]` that a `POST` answers `503` before taking the key (not stored).
    pub unavailable_rate: f64,
    /// Probability in `[0, 1]` that a `POST` that did the work (effect made, answer stored)
    /// answers `504` `upstream_response_lost` instead.
    pub lose_answer_rate: f64,
    /// Real-time latency of the work, **milliseconds** (a second request with the key meanwhile
    /// is `409` in flight). Replays, mismatches and lookups answer at once.
    pub latency_ms: u64,
    /// The generator's seed.
    pub seed: u64,
}

/// The closure that shapes an answer: the request body and the new effect's id in, the answer
/// out.
pub type AnswerFn = Arc<dyn Fn(&[u8], &str) -> Answer + Send + Sync>;

/// How the server behaves. [`ServerConfig::new`] gives a well-behaved one.
#[derive(Clone)]
pub struct ServerConfig {
    /// The resource path, e.g. `/jobs`: `POST` does the work, `GET ?idempotency_key=K` looks up.
    pub path: String,
    /// The name of the effect id in the default answer (`201 {"<id_field>": "<id>"}`).
    pub id_field: String,
    /// Effect ids are `{id_prefix}-{n:06}`, `n` from 1 in the order effects are made, unless
    /// `ids` is set.
    pub id_prefix: String,
    /// Effect ids in a declared format instead ([`ServerConfig::id_format`]): the n-th effect
    /// gets [`IdMaker::id`]`(n)`.
    pub ids: Option<IdMaker>,
    /// Shapes the answer of the work ([`ServerConfig::answer`]).
    pub answer: AnswerFn,
    /// The answer to a key reused with another body.
    pub mismatch: MismatchAnswer,
    /// How long a stored answer is kept, **milliseconds** of the server's clock: an answer aged
    /// at least this is forgotten and the key is new again.
    pub retention_ms: i64,
    /// Whether `GET {path}?idempotency_key=K` is served.
    pub lookup: bool,
    /// The fault switches.
    pub faults: Faults,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("path", &self.path)
            .field("id_field", &self.id_field)
            .field("id_prefix", &self.id_prefix)
            .field("ids", &self.ids.as_ref().map(IdMaker::format))
            .field("mismatch", &self.mismatch)
            .field("retention_ms", &self.retention_ms)
            .field("lookup", &self.lookup)
            .field("faults", &self.faults)
            .finish_non_exhaustive()
    }
}

impl ServerConfig {
    /// A server of `path` (e.g. `/jobs`) whose work answers `201 {"<id_field>": "<id>"}`, ids
    /// `E-000001`, ...; mismatch `422`; 24 h retention; lookup on; no faults.
    pub fn new(path: impl Into<String>, id_field: impl Into<String>) -> Self {
        let id_field = id_field.into();
        let field = id_field.clone();
        Self {
            path: path.into(),
            id_field,
            id_prefix: "E".to_string(),
            ids: None,
            answer: Arc::new(move |_, id| Answer {
                status: 201,
                body: json!({ field.as_str(): id }),
            }),
            mismatch: MismatchAnswer::Unprocessable,
            retention_ms: DEFAULT_RETENTION_MS,
            lookup: true,
            faults: Faults::default(),
        }
    }

    /// The answer's shape: `f(request body, new effect id)`. A 2xx answer makes the effect
    /// (counted under the key); any other makes none. Either is stored and replayed.
    pub fn answer(mut self, f: impl Fn(&[u8], &str) -> Answer + Send + Sync + 'static) -> Self {
        self.answer = Arc::new(f);
        self
    }

    /// The prefix of effect ids.
    pub fn id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.id_prefix = prefix.into();
        self
    }

    /// Effect ids in the format an integration declares for its server (the same
    /// [`IdFormat`] its answer reader checks ids against): the n-th effect's id is the n-th id
    /// of the pattern ([`IdMaker`]), e.g. `MRN[0-9]{6}` gives `MRN000001`, `MRN000002`, ...
    ///
    /// # Errors
    /// [`IdShapeError`]: a pattern the server cannot make ids of, or one holding fewer than
    /// [`crate::MIN_IDS`] within its maximum length.
    pub fn id_format(mut self, format: &IdFormat) -> Result<Self, IdShapeError> {
        self.ids = Some(IdMaker::new(format)?);
        Ok(self)
    }

    /// The id of the n-th effect made (n from 1); `None` past what the declared format holds.
    pub fn effect_id(&self, n: u64) -> Option<String> {
        match &self.ids {
            Some(ids) => ids.id(n),
            None => Some(format!("{}-{n:06}", self.id_prefix)),
        }
    }

    /// The answer to a key reused with another body.
    pub fn mismatch(mut self, answer: MismatchAnswer) -> Self {
        self.mismatch = answer;
        self
    }

    /// The key retention, **milliseconds**.
    pub fn retention_ms(mut self, ms: i64) -> Self {
        self.retention_ms = ms;
        self
    }

    /// No lookup by key (a server like Stripe's): `GET` is `405`.
    pub fn without_lookup(mut self) -> Self {
        self.lookup = false;
        self
    }

    /// The fault switches.
    pub fn faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }
}

/// What the server counted, by kind of answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// `POST`s received.
    pub posts: usize,
    /// Works run (a new key; each made an effect when its answer was 2xx).
    pub works: usize,
    /// Stored answers replayed.
    pub replays: usize,
    /// Keys reused with another body.
    pub mismatches: usize,
    /// `409` in flight.
    pub in_flight: usize,
    /// Injected `503`s.
    pub unavailable: usize,
    /// Answers lost after the work (`504`).
    pub lost: usize,
    /// `GET` lookups by key.
    pub lookups: usize,
}
