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
//! Endpoints:
//!
//! * `POST /slots` with JSON `{"equipment_number", "window_start", "window_end", "pin"}` (the
//!   windows RFC 3339 strings, `pin` non-empty): `201` with
//!   `{"slot_id", "equipment_number", "window_start", "window_end", "terminal"}`; `400` problem
//!   for a bad body.
//! * `GET /slots?idempotency_key=K`: `200 {"slot": {...}}` (the same object as the `201` body) if a
//!   successful claim is stored under `K` and within retention, else `404` problem.
//! * `GET /slots`: `200 {"slots": [...]}`, every slot issued.
//! * `GET /health`: `200 {"status": "ok"}`.
//!
//! A terminal whose API differs in shape ([`TerminalConfig::api`] =
//! [`TerminalApi::AppointmentsV2`], `truck_slot::terminal::several`) answers instead, with the same key
//! semantics:
//!
//! * `POST /v2/appointments` with JSON `{"container": {"number"}, "release": {"pin"},
//!   "slot_window": {"from", "until"}}`: `201 {"appointment": {"id", "container": {"number"},
//!   "slot_window": {"from", "until"}, "terminal"}}` (the `id` is the slot id);
//! * `GET /v2/appointments/by-key/{K}`: `200 {"appointment": {...}}` or `404` problem;
//! * `GET /v2/appointments`: `200 {"slots": [...]}`, every slot issued.
//!
//! Several terminals with different behaviour at once: [`multi_router`] / [`spawn_many`] serve
//! each [`TerminalCore`] under its own base path, `/terminals/{code}` ([`base_path`]).
//!
//! Errors are RFC 9457 problem documents (`application/problem+json`,
//! `{"type", "title", "status", "detail"}`) with short problem types such as
//! `idempotency_mismatch`.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use gate::clock::Clock;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;
pub use truck_slot::terminal::several::TerminalApi;

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

/// An RFC 9457 problem document, fields in the RFC's order.
#[derive(Serialize)]
struct Problem<'a> {
    #[serde(rename = "type")]
    problem_type: &'a str,
    title: &'a str,
    status: u16,
    detail: &'a str,
}

/// A slot the simulator issued (every one, with or without a key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IssuedSlot {
    /// The slot id, e.g. `ECTD-000001`.
    #[serde(rename = "slot_id")]
    pub effect_id: String,
    /// The equipment (container) number as sent by the client.
    pub equipment_number: String,
    /// Window start, the RFC 3339 string as sent by the client.
    pub window_start: String,
    /// Window end, the RFC 3339 string as sent by the client.
    pub window_end: String,
    /// The (unquoted) `Idempotency-Key` the slot was claimed under, if any was honoured.
    pub idempotency_key: Option<String>,
    /// When the slot was issued, epoch milliseconds of the simulator's clock.
    pub issued_at_ms: i64,
}

/// The slot object of the `201` body and of the lookup's `{"slot": ...}`.
#[derive(Debug, Clone, Serialize)]
struct SlotView {
    #[serde(rename = "slot_id")]
    effect_id: String,
    equipment_number: String,
    window_start: String,
    window_end: String,
    terminal: String,
}

/// The lookup's `{"slot": {...}}`, fields in the same order as the `201` body.
#[derive(Serialize)]
struct SlotEnvelope<'a> {
    slot: &'a SlotView,
}

/// One entry of the listing `{"slots": [...]}`: the slot object plus key and issue time (epoch ms).
#[derive(Serialize)]
struct ListedSlot<'a> {
    #[serde(rename = "slot_id")]
    effect_id: &'a str,
    equipment_number: &'a str,
    window_start: &'a str,
    window_end: &'a str,
    terminal: &'a str,
    idempotency_key: Option<&'a str>,
    issued_at_ms: i64,
}

/// The listing `{"slots": [...]}`.
#[derive(Serialize)]
struct SlotList<'a> {
    slots: Vec<ListedSlot<'a>>,
}

/// The POST body.
#[derive(Debug, Deserialize)]
struct SlotRequest {
    equipment_number: String,
    window_start: String,
    window_end: String,
    pin: String,
}

/// The `appointments-v2` POST body.
#[derive(Debug, Deserialize)]
struct AppointmentRequest {
    container: AppointmentContainer,
    release: AppointmentRelease,
    slot_window: AppointmentWindow,
}

#[derive(Debug, Serialize, Deserialize)]
struct AppointmentContainer {
    number: String,
}

#[derive(Debug, Deserialize)]
struct AppointmentRelease {
    pin: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct AppointmentWindow {
    from: String,
    until: String,
}

/// The `appointments-v2` appointment object of the `201` body and of the lookup.
#[derive(Serialize)]
struct AppointmentView {
    id: String,
    container: AppointmentContainer,
    slot_window: AppointmentWindow,
    terminal: String,
}

/// `{"appointment": {...}}`.
#[derive(Serialize)]
struct AppointmentEnvelope {
    appointment: AppointmentView,
}

impl AppointmentEnvelope {
    fn of(slot: &SlotView) -> Self {
        Self {
            appointment: AppointmentView {
                id: slot.effect_id.clone(),
                container: AppointmentContainer {
                    number: slot.equipment_number.clone(),
                },
                slot_window: AppointmentWindow {
                    from: slot.window_start.clone(),
                    until: slot.window_end.clone(),
                },
                terminal: slot.terminal.clone(),
            },
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

/// Removes an in-flight record and wakes its waiters if the claiming request is dropped
/// (cancelled) before it stored its response, so the key does not stay stuck in flight.
struct ClaimGuard<'a> {
    core: &'a TerminalCore,
    key: &'a str,
    token: u64,
    notify: Arc<Notify>,
    armed: bool,
}

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut st = self.core.lock();
        if matches!(st.records.get(self.key), Some(Entry::InFlight { token, .. }) if *token == self.token)
        {
            st.records.remove(self.key);
        }
        drop(st);
        self.notify.notify_waiters();
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

    fn handle_get_slots(&self, query: Option<&str>) -> SimResponse {
        let key = query.and_then(|q| {
            parse_query(q)
                .into_iter()
                .find(|(k, _)| k == "idempotency_key")
                .map(|(_, v)| v)
        });
        let Some(raw_key) = key else {
            let st = self.lock();
            let slots: Vec<ListedSlot<'_>> = st
                .slots
                .iter()
                .map(|s| ListedSlot {
                    effect_id: &s.effect_id,
                    equipment_number: &s.equipment_number,
                    window_start: &s.window_start,
                    window_end: &s.window_end,
                    terminal: &self.config.terminal_name,
                    idempotency_key: s.idempotency_key.as_deref(),
                    issued_at_ms: s.issued_at_ms,
                })
                .collect();
            return SimResponse::json(200, &SlotList { slots });
        };
        self.lookup(&raw_key)
    }

    /// The lookup by key: `200` with the slot stored under `raw_key` (in the terminal's shape)
    /// while within retention, else `404` problem (always, without key support).
    fn lookup(&self, raw_key: &str) -> SimResponse {
        let not_found = || {
            SimResponse::problem(
                404,
                PROBLEM_NOT_FOUND,
                "Not Found",
                "no slot is stored under this idempotency key",
            )
        };
        if !self.config.supports_idempotency_key {
            return not_found();
        }
        let key = normalize_key(raw_key);
        let now = self.clock.now_ms();
        let st = self.lock();
        match st.records.get(&key) {
            Some(Entry::Done {
                slot: Some(slot),
                stored_at_ms,
                ..
            }) if !self.is_expired(*stored_at_ms, now) => match self.config.api {
                TerminalApi::Slots => SimResponse::json(200, &SlotEnvelope { slot }),
                TerminalApi::AppointmentsV2 => {
                    SimResponse::json(200, &AppointmentEnvelope::of(slot))
                }
            },
            _ => not_found(),
        }
    }

    /// Whether this POST fails before taking the key (forced first, then `error_rate`).
    fn draw_failure(&self, st: &mut Inner) -> bool {
        if st.forced_failures > 0 {
            st.forced_failures -= 1;
            return true;
        }
        self.config.error_rate > 0.0 && st.rng.random::<f64>() < self.config.error_rate
    }

    /// Whether the response of a POST that ran is lost (forced first, then `lose_response_rate`).
    fn draw_loss(&self, st: &mut Inner) -> bool {
        if st.forced_losses > 0 {
            st.forced_losses -= 1;
            return true;
        }
        self.config.lose_response_rate > 0.0
            && st.rng.random::<f64>() < self.config.lose_response_rate
    }

    async fn sleep_latency(&self) {
        if self.config.latency_ms > 0 {
            tokio::time::sleep(Duration::from_millis(self.config.latency_ms)).await;
        }
    }

    async fn handle_post(
        &self,
        path: &str,
        idempotency_key: Option<&str>,
        body: &[u8],
    ) -> SimResponse {
        let failed = {
            let mut st = self.lock();
            self.draw_failure(&mut st)
        };
        if failed {
            return SimResponse::problem(
                503,
                PROBLEM_SERVICE_UNAVAILABLE,
                "Service Unavailable",
                "the terminal failed before processing the request; it was not recorded",
            );
        }
        let key = match idempotency_key {
            Some(raw) if self.config.supports_idempotency_key => {
                let key = normalize_key(raw);
                if key.is_empty() {
                    return SimResponse::problem(
                        400,
                        PROBLEM_INVALID_REQUEST,
                        "Bad Request",
                        "the Idempotency-Key header is empty",
                    );
                }
                key
            }
            _ => return self.run_unkeyed(body).await,
        };
        let fingerprint = fingerprint(&key, "POST", path, body);
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(self.config.in_flight_wait_ms);
        loop {
            let decision = {
                let mut st = self.lock();
                self.decide(&mut st, &key, &fingerprint)
            };
            match decision {
                Decision::Replay(response) => return response,
                Decision::Mismatch => return mismatch(),
                Decision::Claimed { notify, token } => {
                    return self
                        .run_claimed(&key, fingerprint, token, notify, body)
                        .await;
                }
                Decision::Wait { notify, token } => {
                    // A `Notified` receives `notify_waiters` calls from its creation on; re-check
                    // after creating it so a completion in between is not missed.
                    let notified = notify.notified();
                    let still_in_flight = matches!(
                        self.lock().records.get(&key),
                        Some(Entry::InFlight { token: t, .. }) if *t == token
                    );
                    if !still_in_flight {
                        continue;
                    }
                    if tokio::time::timeout_at(deadline, notified).await.is_err() {
                        return SimResponse::problem(
                            409,
                            PROBLEM_IDEMPOTENCY_KEY_IN_FLIGHT,
                            "Conflict",
                            "a request with this Idempotency-Key is still being processed; \
                             retry later",
                        );
                    }
                }
            }
        }
    }

    fn decide(&self, st: &mut Inner, key: &str, fp: &Fingerprint) -> Decision {
        let now = self.clock.now_ms();
        match st.records.get(key) {
            Some(Entry::Done {
                fingerprint,
                response,
                stored_at_ms,
                ..
            }) if !self.is_expired(*stored_at_ms, now) => {
                if fingerprint == fp {
                    Decision::Replay(response.clone())
                } else {
                    Decision::Mismatch
                }
            }
            Some(Entry::InFlight {
                fingerprint,
                notify,
                token,
            }) => {
                if fingerprint == fp {
                    Decision::Wait {
                        notify: Arc::clone(notify),
                        token: *token,
                    }
                } else {
                    Decision::Mismatch
                }
            }
            // No record, or an expired one: the key is new.
            _ => {
                let token = st.next_token;
                st.next_token = st.next_token.wrapping_add(1);
                let notify = Arc::new(Notify::new());
                st.records.insert(
                    key.to_string(),
                    Entry::InFlight {
                        fingerprint: *fp,
                        notify: Arc::clone(&notify),
                        token,
                    },
                );
                Decision::Claimed { notify, token }
            }
        }
    }

    async fn run_claimed(
        &self,
        key: &str,
        fingerprint: Fingerprint,
        token: u64,
        notify: Arc<Notify>,
        body: &[u8],
    ) -> SimResponse {
        let mut guard = ClaimGuard {
            core: self,
            key,
            token,
            notify: Arc::clone(&notify),
            armed: true,
        };
        self.sleep_latency().await;
        let (response, lost) = {
            let mut st = self.lock();
            let (response, slot) = self.execute(&mut st, body, Some(key));
            st.records.insert(
                key.to_string(),
                Entry::Done {
                    fingerprint,
                    response: response.clone(),
                    stored_at_ms: self.clock.now_ms(),
                    slot,
                },
            );
            let lost = self.draw_loss(&mut st);
            (response, lost)
        };
        guard.armed = false;
        drop(guard);
        notify.notify_waiters();
        if lost {
            lost_response()
        } else {
            response
        }
    }

    async fn run_unkeyed(&self, body: &[u8]) -> SimResponse {
        self.sleep_latency().await;
        let mut st = self.lock();
        let (response, _) = self.execute(&mut st, body, None);
        if self.draw_loss(&mut st) {
            lost_response()
        } else {
            response
        }
    }

    /// Validates the body and issues a slot. Returns the response and, on success, the slot.
    fn execute(
        &self,
        st: &mut Inner,
        body: &[u8],
        key: Option<&str>,
    ) -> (SimResponse, Option<SlotView>) {
        let bad = |detail: &str| {
            (
                SimResponse::problem(400, PROBLEM_INVALID_REQUEST, "Bad Request", detail),
                None,
            )
        };
        let parsed = match self.config.api {
            TerminalApi::Slots => serde_json::from_slice::<SlotRequest>(body),
            TerminalApi::AppointmentsV2 => {
                serde_json::from_slice::<AppointmentRequest>(body).map(|a| SlotRequest {
                    equipment_number: a.container.number,
                    window_start: a.slot_window.from,
                    window_end: a.slot_window.until,
                    pin: a.release.pin,
                })
            }
        };
        let req: SlotRequest = match parsed {
            Ok(req) => req,
            Err(e) => return bad(&format!("invalid slot request body: {e}")),
        };
        if req.equipment_number.trim().is_empty() {
            return bad("equipment_number must not be empty");
        }
        if req.pin.is_empty() {
            return bad("pin must not be empty");
        }
        if chrono::DateTime::parse_from_rfc3339(&req.window_start).is_err() {
            return bad("window_start is not an RFC 3339 date-time");
        }
        if chrono::DateTime::parse_from_rfc3339(&req.window_end).is_err() {
            return bad("window_end is not an RFC 3339 date-time");
        }
        let effect_id = format!("{}-{:06}", self.config.slot_prefix, st.slots.len() + 1);
        st.slots.push(IssuedSlot {
            effect_id: effect_id.clone(),
            equipment_number: req.equipment_number.clone(),
            window_start: req.window_start.clone(),
            window_end: req.window_end.clone(),
            idempotency_key: key.map(str::to_string),
            issued_at_ms: self.clock.now_ms(),
        });
        tracing::debug!(%effect_id, "slot issued");
        let view = SlotView {
            effect_id,
            equipment_number: req.equipment_number,
            window_start: req.window_start,
            window_end: req.window_end,
            terminal: self.config.terminal_name.clone(),
        };
        let response = match self.config.api {
            TerminalApi::Slots => SimResponse::json(201, &view),
            TerminalApi::AppointmentsV2 => SimResponse::json(201, &AppointmentEnvelope::of(&view)),
        };
        (response, Some(view))
    }
}

fn mismatch() -> SimResponse {
    SimResponse::problem(
        409,
        PROBLEM_IDEMPOTENCY_MISMATCH,
        "Conflict",
        "this Idempotency-Key was already used with a different request",
    )
}

fn lost_response() -> SimResponse {
    SimResponse::problem(
        504,
        PROBLEM_UPSTREAM_RESPONSE_LOST,
        "Gateway Timeout",
        "upstream response lost",
    )
}

/// SHA-256 over key, method, path and body, NUL-separated so fields cannot run into each other.
fn fingerprint(key: &str, method: &str, path: &str, body: &[u8]) -> Fingerprint {
    let mut h = Sha256::new();
    h.update(key.as_bytes());
    h.update([0u8]);
    h.update(method.as_bytes());
    h.update([0u8]);
    h.update(path.as_bytes());
    h.update([0u8]);
    h.update(body);
    h.finalize().into()
}

/// The key from an `Idempotency-Key` value: a Structured Field string (`"abc"`, with `\"` and
/// `\\` escapes) is unquoted; anything else is taken as is (trimmed).
pub fn normalize_key(raw: &str) -> String {
    let raw = raw.trim();
    match raw
        .strip_prefix('"')
        .and_then(|inner| inner.strip_suffix('"'))
    {
        Some(inner) => {
            let mut out = String::with_capacity(inner.len());
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                if c == '\\' {
                    if let Some(next) = chars.next() {
                        out.push(next);
                    }
                } else {
                    out.push(c);
                }
            }
            out
        }
        None => raw.to_string(),
    }
}

/// `a=b&c=d` into decoded pairs (`+` is a space, `%XX` percent-decoded).
fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The axum router serving `core`: every request goes to [`TerminalCore::handle`]. The core runs
/// in its own task, so a client that disconnects does not cancel the server's work (as with a
/// real server, the slot is still made and stored).
pub fn router(core: Arc<TerminalCore>) -> Router {
    Router::new().fallback(dispatch).with_state(core)
}

async fn dispatch(
    State(core): State<Arc<TerminalCore>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve_core(core, method, uri.path().to_string(), &uri, &headers, body).await
}

/// The base path [`multi_router`] serves terminal `code` under: `/terminals/{code}`.
pub fn base_path(code: &str) -> String {
    format!("/terminals/{code}")
}

/// The axum router serving several terminals at once, each under its own base path
/// (`/terminals/{code}/...`, [`base_path`]) with its own behaviour: `POST
/// /terminals/ECT-DELTA/slots` goes to that core as `POST /slots`. A path under no known code is
/// answered `404` problem.
pub fn multi_router(terminals: Vec<(String, Arc<TerminalCore>)>) -> Router {
    let terminals: Arc<HashMap<String, Arc<TerminalCore>>> =
        Arc::new(terminals.into_iter().collect());
    Router::new().fallback(dispatch_many).with_state(terminals)
}

async fn dispatch_many(
    State(terminals): State<Arc<HashMap<String, Arc<TerminalCore>>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let routed = uri.path().strip_prefix("/terminals/").and_then(|rest| {
        let (code, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let path = if path.is_empty() { "/" } else { path };
        terminals
            .get(&percent_decode(code))
            .map(|core| (core.clone(), path.to_string()))
    });
    match routed {
        Some((core, path)) => serve_core(core, method, path, &uri, &headers, body).await,
        None => respond(SimResponse::problem(
            404,
            PROBLEM_NOT_FOUND,
            "Not Found",
            "no terminal is served under this path (expected /terminals/{code}/...)",
        )),
    }
}

/// Runs one request on `core` in its own task (a client that disconnects does not cancel it).
async fn serve_core(
    core: Arc<TerminalCore>,
    method: Method,
    path: String,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let key = headers
        .get("idempotency-key")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let query = uri.query().map(str::to_string);
    let method = method.as_str().to_string();
    let task = tokio::spawn(async move {
        core.handle(&method, &path, query.as_deref(), key.as_deref(), &body)
            .await
    });
    let response = match task.await {
        Ok(r) => r,
        Err(e) => SimResponse::problem(
            500,
            PROBLEM_INTERNAL,
            "Internal Server Error",
            &e.to_string(),
        ),
    };
    respond(response)
}

fn respond(response: SimResponse) -> Response {
    let status = StatusCode::from_u16(response.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(header::CONTENT_TYPE, response.content_type)],
        response.body,
    )
        .into_response()
}

/// Binds `addr` and serves [`router`]`(core)` on a background task. Returns the bound address
/// (useful with port 0) and the server task's handle.
pub async fn spawn_on(
    core: Arc<TerminalCore>,
    addr: SocketAddr,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let handle = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(core)).await {
            tracing::error!(error = %e, "terminal simulator server stopped");
        }
    });
    Ok((bound, handle))
}

/// Binds `addr` and serves [`multi_router`]`(terminals)` on a background task: several terminals
/// in one server, each under `/terminals/{code}`. Returns the bound address and the server task's
/// handle (abort it to stop the server).
pub async fn spawn_many(
    terminals: Vec<(String, Arc<TerminalCore>)>,
    addr: SocketAddr,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let handle = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, multi_router(terminals)).await {
            tracing::error!(error = %e, "terminal simulator server stopped");
        }
    });
    Ok((bound, handle))
}

/// Binds `127.0.0.1:0` and serves [`router`]`(core)` on a background task; returns the bound
/// address and the server task's handle (abort it to stop the server).
pub async fn spawn(
    core: Arc<TerminalCore>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    spawn_on(core, SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[tokio::test]
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
