//! The terminal simulator: a container terminal's slot-booking HTTP API with IETF
//! `Idempotency-Key` semantics (draft-ietf-httpapi-idempotency-key-header-07): the terminal
//! contract `truck_slot::terminal` relies on.
//!
//! The simulator is split in two:
//!
//! * [`TerminalCore`], a transport-independent core that answers a request given its method,
//!   path, query, `Idempotency-Key` header and body bytes with a [`SimResponse`]. A deterministic
//!   simulation drives it in process, without HTTP.
//! * [`router`] / [`spawn`] / [`spawn_on`], a thin axum wrapper that serves the core over HTTP.
//!
//! Files: this one holds the core's state and entry points; `claims.rs` the keyed POST,
//! `lookups.rs` the reads, `keys.rs` the fingerprint and key normalisation, `wire.rs` the JSON
//! bodies and problems, `http.rs` the axum wrapper.
//!
//! The endpoints are listed at [`TerminalCore`].
//!
//! Errors are RFC 9457 problem documents (`application/problem+json`,
//! `{"type", "title", "status", "detail"}`) with short problem types such as
//! `idempotency_mismatch`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use gate::clock::Clock;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use tokio::sync::Notify;

mod claims;
mod http;
mod keys;
mod lookups;
mod wire;
pub use http::{base_path, multi_router, router, spawn, spawn_many, spawn_on};
pub use keys::normalize_key;
use keys::percent_decode;
pub use truck_slot::terminal::several::TerminalApi;
pub use wire::IssuedSlot;
use wire::{Problem, SlotView};

/// Content type of a successful JSON answer.
pub const CONTENT_TYPE_JSON: &str = "application/json";
/// Content type of an RFC 9457 problem document.
pub const CONTENT_TYPE_PROBLEM: &str = "application/problem+json";

/// Problem type: the same `Idempotency-Key` was reused with another request (another
/// fingerprint). The draft (-07, section 2.7) suggests `422`; this terminal answers `409` with this
/// type, as many servers do.
pub const PROBLEM_IDEMPOTENCY_MISMATCH: &str = "idempotency_mismatch";
/// Problem type: a request with the same `Idempotency-Key` is still being processed and did not
/// finish within the in-flight wait (the draft's "request in progress", `409`).
pub const PROBLEM_IDEMPOTENCY_KEY_IN_FLIGHT: &str = "idempotency_key_in_flight";
/// Problem type: the request body or a header is malformed (`400`).
pub const PROBLEM_INVALID_REQUEST: &str = "invalid_request";
/// Problem type: no such resource (`404`).
pub const PROBLEM_NOT_FOUND: &str = "not_found";
/// Problem type: the method is not allowed on this path (`405`).
pub const PROBLEM_METHOD_NOT_ALLOWED: &str = "method_not_allowed";
/// Problem type: an injected failure before the key was taken (`503`, never stored).
pub const PROBLEM_SERVICE_UNAVAILABLE: &str = "service_unavailable";
/// Problem type: an injected lost response; the work was done and stored (`504`).
pub const PROBLEM_UPSTREAM_RESPONSE_LOST: &str = "upstream_response_lost";
/// Problem type: the HTTP wrapper failed to run the core (`500`).
pub const PROBLEM_INTERNAL: &str = "internal_error";

/// One day in milliseconds: the default key retention.
pub const DEFAULT_RETENTION_MS: i64 = 24 * 60 * 60 * 1000;

/// The simulator's switches. All fields are public; [`Default`] gives a well-behaved terminal
/// (idempotency keys supported, no latency, no faults, 24 h retention).
#[derive(Debug, Clone)]
pub struct TerminalConfig {
    /// Whether the `Idempotency-Key` header is honoured (default `true`). When `false` the header
    /// is ignored entirely: every POST makes a new slot and the lookup by key always answers `404`.
    pub supports_idempotency_key: bool,
    /// Real-time sleep, in milliseconds, while a POST is being processed (after the key is taken,
    /// before the slot is made). Replays and rejections answer without it. Default `0`.
    pub latency_ms: u64,
    /// Probability in `[0, 1]` that a POST answers `503` problem instead of running. Such a `503`
    /// represents a server that failed before taking the key: it is NOT stored. Default `0`.
    pub error_rate: f64,
    /// Probability in `[0, 1]` that a POST that ran (slot made, response stored under the key)
    /// answers `504` problem "upstream response lost" to the client instead. Default `0`.
    pub lose_response_rate: f64,
    /// How long a completed record is kept, in milliseconds of the injected clock (default 24 h,
    /// the key expiry the draft asks servers to publish). A record aged `>= retention_ms` is
    /// forgotten and the key is new again.
    pub retention_ms: i64,
    /// How long, in real-time milliseconds, a retry waits for a first request with the same key
    /// still in flight before answering `409` `idempotency_key_in_flight`. Default `2000`.
    pub in_flight_wait_ms: u64,
    /// Seed of the fault RNG (ChaCha8), so runs are reproducible. Default `0`.
    pub seed: u64,
    /// The terminal's name, echoed as `terminal` in slot objects. Default `"ECT-DELTA"`.
    pub terminal_name: String,
    /// Prefix of slot ids: ids are `{slot_prefix}-{n:06}`, `n` from 1. Default `"ECTD"`.
    pub slot_prefix: String,
    /// The API shape it speaks (default [`TerminalApi::Slots`], see the module docs).
    pub api: TerminalApi,
}

impl Default for TerminalConfig {
    fn default() -> Self {
        Self {
            supports_idempotency_key: true,
            latency_ms: 0,
            error_rate: 0.0,
            lose_response_rate: 0.0,
            retention_ms: DEFAULT_RETENTION_MS,
            in_flight_wait_ms: 2000,
            seed: 0,
            terminal_name: "ECT-DELTA".to_string(),
            slot_prefix: "ECTD".to_string(),
            api: TerminalApi::Slots,
        }
    }
}

/// An answer of the simulator, independent of the transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimResponse {
    /// HTTP status code, e.g. `201`.
    pub status: u16,
    /// The `Content-Type`, `application/json` or `application/problem+json`.
    pub content_type: String,
    /// The body bytes (replays return exactly the stored bytes).
    pub body: Vec<u8>,
}

impl SimResponse {
    fn json(status: u16, value: &impl Serialize) -> Self {
        Self {
            status,
            content_type: CONTENT_TYPE_JSON.to_string(),
            body: serde_json::to_vec(value).unwrap_or_default(),
        }
    }

    /// An RFC 9457 problem document `{"type", "title", "status", "detail"}`.
    fn problem(status: u16, problem_type: &str, title: &str, detail: &str) -> Self {
        let value = Problem {
            problem_type,
            title,
            status,
            detail,
        };
        Self {
            status,
            content_type: CONTENT_TYPE_PROBLEM.to_string(),
            body: serde_json::to_vec(&value).unwrap_or_default(),
        }
    }
}

/// The path prefix of the `appointments-v2` lookup by key.
const BY_KEY: &str = "/v2/appointments/by-key/";

/// SHA-256 fingerprint of a request.
type Fingerprint = [u8; 32];

/// Per-key idempotency record.
enum Entry {
    /// The first request with the key is running.
    InFlight {
        fingerprint: Fingerprint,
        notify: Arc<Notify>,
        token: u64,
    },
    /// The first request finished; its full response is stored.
    Done {
        fingerprint: Fingerprint,
        response: SimResponse,
        stored_at_ms: i64,
        slot: Option<SlotView>,
    },
}

struct Inner {
    slots: Vec<IssuedSlot>,
    records: HashMap<String, Entry>,
    rng: ChaCha8Rng,
    forced_failures: usize,
    forced_losses: usize,
    next_token: u64,
}

/// What a keyed POST does next.
enum Decision {
    Replay(SimResponse),
    Mismatch,
    Wait { notify: Arc<Notify>, token: u64 },
    Claimed { notify: Arc<Notify>, token: u64 },
}

/// The transport-independent terminal: slot issuing plus server-side idempotency
/// (draft-ietf-httpapi-idempotency-key-header-07). State lives behind a mutex that is never held
/// across an `.await`.
///
/// Endpoints:
///
/// * `POST /slots` with JSON `{"equipment_number", "window_start", "window_end", "pin"}` (the
///   windows RFC 3339 strings, `pin` non-empty): `201` with
///   `{"slot_id", "equipment_number", "window_start", "window_end", "terminal"}`; `400` problem
///   for a bad body.
/// * `GET /slots?idempotency_key=K`: `200 {"slot": {...}}` (the same object as the `201` body) if a
///   successful claim is stored under `K` and within retention, else `404` problem.
/// * `GET /slots`: `200 {"slots": [...]}`, every slot issued.
/// * `GET /health`: `200 {"status": "ok"}`.
///
/// A terminal whose API differs in shape ([`TerminalConfig::api`] =
/// [`TerminalApi::AppointmentsV2`], `truck_slot::terminal::several`) answers instead, with the same key
/// semantics:
///
/// * `POST /v2/appointments` with JSON `{"container": {"number"}, "release": {"pin"},
///   "slot_window": {"from", "until"}}`: `201 {"appointment": {"id", "container": {"number"},
///   "slot_window": {"from", "until"}, "terminal"}}` (the `id` is the slot id);
/// * `GET /v2/appointments/by-key/{K}`: `200 {"appointment": {...}}` or `404` problem;
/// * `GET /v2/appointments`: `200 {"slots": [...]}`, every slot issued.
///
/// Several terminals with different behaviour at once: [`multi_router`] / [`spawn_many`] serve
/// each [`TerminalCore`] under its own base path, `/terminals/{code}` ([`base_path`]).
pub struct TerminalCore {
    config: TerminalConfig,
    clock: Arc<dyn Clock>,
    state: Mutex<Inner>,
    /// Requests being answered now, and the most at once so far.
    answering: AtomicUsize,
    most_at_once: AtomicUsize,
}

/// Counts a request as being answered while it lives.
struct Answering<'a>(&'a AtomicUsize);

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for TerminalCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalCore")
            .field("config", &self.config)
            .field("slots_issued", &self.slots_issued())
            .finish_non_exhaustive()
    }
}

impl TerminalCore {
    /// A new terminal with no slots and no keys. `clock` (epoch ms) stamps slots and ages the
    /// idempotency records; waits and latency use real time.
    pub fn new(config: TerminalConfig, clock: Arc<dyn Clock>) -> Arc<Self> {
        let rng = ChaCha8Rng::seed_from_u64(config.seed);
        Arc::new(Self {
            config,
            clock,
            state: Mutex::new(Inner {
                slots: Vec::new(),
                records: HashMap::new(),
                rng,
                forced_failures: 0,
                forced_losses: 0,
                next_token: 0,
            }),
            answering: AtomicUsize::new(0),
            most_at_once: AtomicUsize::new(0),
        })
    }

    /// The most requests (claims and lookups) this terminal was answering at one time so far:
    /// what a client's concurrency limit is checked against.
    pub fn most_requests_at_once(&self) -> usize {
        self.most_at_once.load(Ordering::SeqCst)
    }

    /// The configuration this terminal runs with.
    pub fn config(&self) -> &TerminalConfig {
        &self.config
    }

    /// Every slot issued so far, in issue order.
    pub fn slots(&self) -> Vec<IssuedSlot> {
        self.lock().slots.clone()
    }

    /// How many slots were issued so far.
    pub fn slots_issued(&self) -> usize {
        self.lock().slots.len()
    }

    /// Makes the next `n` POSTs answer `503` problem without running; like `error_rate`, these
    /// answers are not stored under the key (the server failed before taking it). Adds to any
    /// pending count.
    pub fn fail_next_posts(&self, n: usize) {
        let mut st = self.lock();
        st.forced_failures = st.forced_failures.saturating_add(n);
    }

    /// Makes the next `n` POSTs that run answer `504` problem "upstream response lost" although
    /// the slot was made and the real response stored under the key. Adds to any pending count.
    pub fn lose_next_responses(&self, n: usize) {
        let mut st = self.lock();
        st.forced_losses = st.forced_losses.saturating_add(n);
    }

    /// Answers one request.
    ///
    /// * `method`: the HTTP method, e.g. `"POST"` (case-insensitive).
    /// * `path`: the path without the query, e.g. `"/slots"`.
    /// * `query`: the raw (percent-encoded) query string without `?`, if any.
    /// * `idempotency_key`: the raw `Idempotency-Key` header value, a Structured Field string
    ///   (`"abc"`) or unquoted (`abc`); only POST honours it (GET, HEAD and DELETE ignore it, as
    ///   the draft says).
    /// * `body`: the request body bytes.
    pub async fn handle(
        &self,
        method: &str,
        path: &str,
        query: Option<&str>,
        idempotency_key: Option<&str>,
        body: &[u8],
    ) -> SimResponse {
        let now = self.answering.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(now, Ordering::SeqCst);
        let _answering = Answering(&self.answering);
        let method = method.to_ascii_uppercase();
        if self.config.api == TerminalApi::AppointmentsV2 {
            return self.handle_v2(&method, path, idempotency_key, body).await;
        }
        match (method.as_str(), path) {
            ("GET" | "HEAD", "/health") => {
                SimResponse::json(200, &serde_json::json!({"status": "ok"}))
            }
            ("GET" | "HEAD", "/slots") => self.handle_get_slots(query),
            ("POST", "/slots") => self.handle_post(path, idempotency_key, body).await,
            (_, "/slots" | "/health") => SimResponse::problem(
                405,
                PROBLEM_METHOD_NOT_ALLOWED,
                "Method Not Allowed",
                &format!("{method} is not allowed on {path}"),
            ),
            _ => SimResponse::problem(
                404,
                PROBLEM_NOT_FOUND,
                "Not Found",
                &format!("no resource at {path}"),
            ),
        }
    }

    /// [`TerminalCore::handle`] for the `appointments-v2` shape.
    async fn handle_v2(
        &self,
        method: &str,
        path: &str,
        idempotency_key: Option<&str>,
        body: &[u8],
    ) -> SimResponse {
        match (method, path) {
            ("GET" | "HEAD", "/health") => {
                SimResponse::json(200, &serde_json::json!({"status": "ok"}))
            }
            ("GET" | "HEAD", "/v2/appointments") => self.handle_get_slots(None),
            ("POST", "/v2/appointments") => self.handle_post(path, idempotency_key, body).await,
            ("GET" | "HEAD", p) if p.starts_with(BY_KEY) && p.len() > BY_KEY.len() => {
                self.lookup(&percent_decode(&p[BY_KEY.len()..]))
            }
            (_, "/v2/appointments" | "/health") => SimResponse::problem(
                405,
                PROBLEM_METHOD_NOT_ALLOWED,
                "Method Not Allowed",
                &format!("{method} is not allowed on {path}"),
            ),
            (_, p) if p.starts_with(BY_KEY) => SimResponse::problem(
                405,
                PROBLEM_METHOD_NOT_ALLOWED,
                "Method Not Allowed",
                &format!("{method} is not allowed on {path}"),
            ),
            _ => SimResponse::problem(
                404,
                PROBLEM_NOT_FOUND,
                "Not Found",
                &format!("no resource at {path}"),
            ),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_expired(&self, stored_at_ms: i64, now_ms: i64) -> bool {
        now_ms.saturating_sub(stored_at_ms) >= self.config.retention_ms
    }
}

#[cfg(test)]
mod tests {
    use super::keys::parse_query;
    use super::*;
    use std::time::Duration;

    #[test]
    fn keys_normalize() {
        assert_eq!(normalize_key("\"abc\""), "abc");
        assert_eq!(normalize_key("abc"), "abc");
        assert_eq!(normalize_key(" \"a\\\"b\" "), "a\"b");
    }

    #[test]
    fn query_decodes() {
        assert_eq!(
            parse_query("idempotency_key=a%20b+c&x"),
            vec![
                ("idempotency_key".to_string(), "a b c".to_string()),
                ("x".to_string(), String::new())
            ]
        );
        assert_eq!(percent_decode("%4"), "%4");
        assert_eq!(percent_decode("%zz"), "%zz");
    }

    // Paused time: the 20 ms timeout fires before the 200 ms latency however loaded the machine.
    #[tokio::test(start_paused = true)]
    async fn a_cancelled_first_request_releases_the_key() {
        let clock = Arc::new(gate::clock::ManualClock::new(0));
        let core = TerminalCore::new(
            TerminalConfig {
                latency_ms: 200,
                ..TerminalConfig::default()
            },
            clock,
        );
        let body = br#"{"equipment_number":"MSCU1234565","window_start":"2025-10-20T08:00:00Z","window_end":"2025-10-20T09:00:00Z","pin":"1"}"#;
        let cancelled = tokio::time::timeout(
            Duration::from_millis(20),
            core.handle("POST", "/slots", None, Some("\"k\""), body),
        )
        .await;
        assert!(cancelled.is_err());
        assert_eq!(core.slots_issued(), 0);
        let retry = core
            .handle("POST", "/slots", None, Some("\"k\""), body)
            .await;
        assert_eq!(retry.status, 201);
        assert_eq!(core.slots_issued(), 1);
    }
}
