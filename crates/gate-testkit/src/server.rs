//! An in-process Idempotency-Key HTTP server for an integration's tests: axum on `127.0.0.1:0`,
//! with the semantics of the IETF draft `draft-ietf-httpapi-idempotency-key-header` as a server
//! that honours it answers (the server simulator of crate `sim` is the reference):
//!
//! * `POST {path}` with `Idempotency-Key: K` (a Structured Field string `"K"`, or `K` as is) does
//!   the work once: the first answer under `K` is stored and **replayed byte for byte** (status,
//!   content type, body) to every later request with the same key and body, errors included;
//! * the same key with another body (another fingerprint: SHA-256 of path and body) is
//!   `422` problem `idempotency_mismatch` (the draft's suggestion), or `409` with that problem
//!   type ([`MismatchAnswer`]);
//! * the same key while its first request is still being processed is `409` problem
//!   `idempotency_key_in_flight` (the draft's "request in progress");
//! * a key is forgotten [`ServerConfig::retention_ms`] after its answer was stored, on the clock
//!   the server is given (a `ManualClock` in a test): then the key is new again;
//! * `GET {path}?idempotency_key=K` answers `200` with the stored body of a successful (2xx)
//!   answer under `K` within the retention, else `404` problem `not_found`; a server without
//!   lookup ([`ServerConfig::without_lookup`], like Stripe's) answers `405` problem
//!   `method_not_allowed`;
//! * a `POST` without a key is `400` problem `idempotency_key_missing`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;
#[cfg(test)]
use serde_json::Value;
use sha2::{Digest, Sha256};

use gate::clock::Clock;

pub use super::server_config::*;

type Fingerprint = [u8; 32];

/// One stored reply: status, content type, body bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reply {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
}

impl Reply {
    fn problem(status: u16, problem_type: &str, title: &str, detail: &str) -> Self {
        let body =
            json!({"type": problem_type, "title": title, "status": status, "detail": detail});
        Self {
            status,
            content_type: CONTENT_TYPE_PROBLEM,
            body: body.to_string().into_bytes(),
        }
    }
}

enum Entry {
    InFlight {
        fingerprint: Fingerprint,
    },
    Done {
        fingerprint: Fingerprint,
        reply: Reply,
        stored_at_ms: i64,
        effect: bool,
    },
}

struct Inner {
    entries: HashMap<String, Entry>,
    effects: BTreeMap<String, Vec<String>>,
    made: usize,
    rng: ChaCha8Rng,
    faults: Faults,
    forced_unavailable: usize,
    forced_losses: usize,
    counters: Counters,
}

/// The transport-independent server: the HTTP wrapper hands it each request.
struct Core {
    config: ServerConfig,
    clock: Arc<dyn Clock>,
    state: Mutex<Inner>,
}

enum Decision {
    Replay(Reply),
    Mismatch,
    InFlight,
    Work,
}

impl Core {
    fn new(config: ServerConfig, clock: Arc<dyn Clock>) -> Self {
        Self {
            state: Mutex::new(Inner {
                entries: HashMap::new(),
                effects: BTreeMap::new(),
                made: 0,
                rng: ChaCha8Rng::seed_from_u64(config.faults.seed),
                faults: config.faults,
                forced_unavailable: 0,
                forced_losses: 0,
                counters: Counters::default(),
            }),
            config,
            clock,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn expired(&self, stored_at_ms: i64) -> bool {
        self.clock.now_ms().saturating_sub(stored_at_ms) >= self.config.retention_ms
    }

    fn mismatch(&self) -> Reply {
        let status = match self.config.mismatch {
            MismatchAnswer::Unprocessable => 422,
            MismatchAnswer::Conflict => 409,
        };
        Reply::problem(
            status,
            PROBLEM_IDEMPOTENCY_MISMATCH,
            "Idempotency-Key reused",
            "this Idempotency-Key was already used with a different request",
        )
    }

    fn decide(&self, st: &mut Inner, key: &str, fp: &Fingerprint) -> Decision {
        match st.entries.get(key) {
            Some(Entry::Done {
                fingerprint,
                reply,
                stored_at_ms,
                ..
            }) if !self.expired(*stored_at_ms) => {
                if fingerprint == fp {
                    Decision::Replay(reply.clone())
                } else {
                    Decision::Mismatch
                }
            }
            Some(Entry::InFlight { fingerprint }) => {
                if fingerprint == fp {
                    Decision::InFlight
                } else {
                    Decision::Mismatch
                }
            }
            // No entry, or an expired one: the key is new.
            _ => {
                st.entries
                    .insert(key.to_string(), Entry::InFlight { fingerprint: *fp });
                Decision::Work
            }
        }
    }

    async fn post(&self, raw_key: Option<&str>, body: &[u8]) -> Reply {
        let key = raw_key.map(normalize_key).unwrap_or_default();
        if key.is_empty() {
            return Reply::problem(
                400,
                PROBLEM_IDEMPOTENCY_KEY_MISSING,
                "Bad Request",
                "this resource requires an Idempotency-Key header",
            );
        }
        let fp = fingerprint(&self.config.path, body);
        let (decision, latency_ms) = {
            let mut st = self.lock();
            st.counters.posts += 1;
            let unavailable = if st.forced_unavailable > 0 {
                st.forced_unavailable -= 1;
                true
            } else {
                let rate = st.faults.unavailable_rate;
                rate > 0.0 && st.rng.random::<f64>() < rate
            };
            if unavailable {
                st.counters.unavailable += 1;
                return Reply::problem(
                    503,
                    PROBLEM_SERVICE_UNAVAILABLE,
                    "Service Unavailable",
                    "the server failed before processing the request; it was not recorded",
                );
            }
            (self.decide(&mut st, &key, &fp), st.faults.latency_ms)
        };
        match decision {
            Decision::Replay(reply) => {
                self.lock().counters.replays += 1;
                reply
            }
            Decision::Mismatch => {
                self.lock().counters.mismatches += 1;
                self.mismatch()
            }
            Decision::InFlight => {
                self.lock().counters.in_flight += 1;
                Reply::problem(
                    409,
                    PROBLEM_IDEMPOTENCY_KEY_IN_FLIGHT,
                    "Conflict",
                    "a request with this Idempotency-Key is still being processed; retry later",
                )
            }
            Decision::Work => {
                if latency_ms > 0 {
                    tokio::time::sleep(Duration::from_millis(latency_ms)).await;
                }
                self.work(&key, fp, body)
            }
        }
    }

    /// Runs the work under `key`, stores its answer, and answers it (or loses it).
    fn work(&self, key: &str, fingerprint: Fingerprint, body: &[u8]) -> Reply {
        let mut st = self.lock();
        st.counters.works += 1;
        let Some(id) = self.config.effect_id(st.made as u64 + 1) else {
            // Past what the declared format holds: no effect, nothing stored.
            return Reply::problem(
                500,
                "effect_ids_exhausted",
                "Effect ids exhausted",
                "the declared effect-id format holds no more ids",
            );
        };
        let answer = (self.config.answer)(body, &id);
        let effect = (200..300).contains(&answer.status);
        if effect {
            st.made += 1;
            st.effects.entry(key.to_string()).or_default().push(id);
        }
        let reply = Reply {
            status: answer.status,
            content_type: CONTENT_TYPE_JSON,
            body: answer.body.to_string().into_bytes(),
        };
        st.entries.insert(
            key.to_string(),
            Entry::Done {
                fingerprint,
                reply: reply.clone(),
                stored_at_ms: self.clock.now_ms(),
                effect,
            },
        );
        let lost = if st.forced_losses > 0 {
            st.forced_losses -= 1;
            true
        } else {
            let rate = st.faults.lose_answer_rate;
            rate > 0.0 && st.rng.random::<f64>() < rate
        };
        if lost {
            st.counters.lost += 1;
            return Reply::problem(
                504,
                PROBLEM_UPSTREAM_RESPONSE_LOST,
                "Gateway Timeout",
                "upstream response lost",
            );
        }
        reply
    }

    fn lookup(&self, raw_key: Option<&str>) -> Reply {
        if !self.config.lookup {
            return Reply::problem(
                405,
                PROBLEM_METHOD_NOT_ALLOWED,
                "Method Not Allowed",
                "this server has no lookup by key",
            );
        }
        let key = raw_key.map(normalize_key).unwrap_or_default();
        let mut st = self.lock();
        st.counters.lookups += 1;
        match st.entries.get(&key) {
            Some(Entry::Done {
                reply,
                stored_at_ms,
                effect: true,
                ..
            }) if !self.expired(*stored_at_ms) => Reply {
                status: 200,
                content_type: CONTENT_TYPE_JSON,
                body: reply.body.clone(),
            },
            _ => Reply::problem(
                404,
                PROBLEM_NOT_FOUND,
                "Not Found",
                "nothing is stored under this idempotency key",
            ),
        }
    }
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

/// SHA-256 over the path and the body, NUL-separated.
fn fingerprint(path: &str, body: &[u8]) -> Fingerprint {
    let mut h = Sha256::new();
    h.update(path.as_bytes());
    h.update([0u8]);
    h.update(body);
    h.finalize().into()
}

/// A running server; stopped when dropped.
///
/// Errors are RFC 9457 problem documents (`application/problem+json`, `{"type", "title",
/// "status", "detail"}`). Fault switches ([`Faults`], seeded ChaCha8, and the counted
/// [`IdempotencyServer::fail_next_posts`] / [`IdempotencyServer::lose_next_answers`]): a `503`
/// before the key is taken (never stored), an answer lost after the work was done and stored
/// (`504` problem `upstream_response_lost`), latency. The effects made are counted per key
/// ([`IdempotencyServer::effects`]): the input of
/// [`exactly_once_violations`](crate::exactly_once_violations).
///
/// Generic: the integration author sets the path, the id field and the answer's shape (a closure
/// from the request body and the new effect id to a status and a JSON body, [`ServerConfig::answer`]);
/// a non-2xx answer from the closure makes no effect and is stored and replayed like any other.
pub struct IdempotencyServer {
    core: Arc<Core>,
    url: String,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for IdempotencyServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyServer")
            .field("url", &self.url)
            .field("config", &self.core.config)
            .finish_non_exhaustive()
    }
}

impl Drop for IdempotencyServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl IdempotencyServer {
    /// Starts a server on `127.0.0.1:0` (a free port) serving `config`; `clock` (epoch ms) ages
    /// the stored answers. Must run inside a tokio runtime.
    ///
    /// # Errors
    /// If the loopback port cannot be bound.
    pub async fn start(config: ServerConfig, clock: Arc<dyn Clock>) -> std::io::Result<Self> {
        let core = Arc::new(Core::new(config, clock));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let app = Router::new()
            .fallback(dispatch)
            .with_state(Arc::clone(&core));
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "test kit server stopped");
            }
        });
        Ok(Self { core, url, task })
    }

    /// The base URL, e.g. `http://127.0.0.1:49152` (the path is [`ServerConfig::path`]).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Every effect made, by key (the normalized `Idempotency-Key`), in order: the `effects` of
    /// [`exactly_once_violations`](super::exactly_once_violations).
    pub fn effects(&self) -> BTreeMap<String, Vec<String>> {
        self.core.lock().effects.clone()
    }

    /// How many effects were made in all.
    pub fn effects_made(&self) -> usize {
        self.core.lock().made
    }

    /// What the server counted so far.
    pub fn counters(&self) -> Counters {
        self.core.lock().counters
    }

    /// Switches the faults (the generator keeps its state).
    pub fn set_faults(&self, faults: Faults) {
        self.core.lock().faults = faults;
    }

    /// Makes the next `n` `POST`s answer `503` before taking their key (not stored).
    pub fn fail_next_posts(&self, n: usize) {
        let mut st = self.core.lock();
        st.forced_unavailable = st.forced_unavailable.saturating_add(n);
    }

    /// Makes the next `n` `POST`s that do the work lose their answer (`504`; the effect is made
    /// and the answer stored).
    pub fn lose_next_answers(&self, n: usize) {
        let mut st = self.core.lock();
        st.forced_losses = st.forced_losses.saturating_add(n);
    }
}

impl super::harness::EffectLedger for IdempotencyServer {
    fn effects(&self) -> BTreeMap<String, Vec<String>> {
        IdempotencyServer::effects(self)
    }
}

async fn dispatch(
    State(core): State<Arc<Core>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    if uri.path() != core.config.path {
        return respond(Reply::problem(
            404,
            PROBLEM_NOT_FOUND,
            "Not Found",
            "no such resource",
        ));
    }
    let reply = match method {
        Method::POST => {
            let key = headers
                .get("idempotency-key")
                .and_then(|k| k.to_str().ok())
                .map(str::to_string);
            // The work runs in its own task: a client that gives up does not cancel it (as with
            // a real server, the effect is still made and its answer stored).
            let worker = Arc::clone(&core);
            let run = tokio::spawn(async move { worker.post(key.as_deref(), &body).await });
            match run.await {
                Ok(reply) => reply,
                Err(e) => Reply::problem(500, "internal_error", "Internal Error", &e.to_string()),
            }
        }
        Method::GET => core.lookup(query.get("idempotency_key").map(String::as_str)),
        _ => Reply::problem(
            405,
            PROBLEM_METHOD_NOT_ALLOWED,
            "Method Not Allowed",
            "only POST (and GET with idempotency_key) are served",
        ),
    };
    respond(reply)
}

fn respond(reply: Reply) -> Response {
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(header::CONTENT_TYPE, reply.content_type)],
        reply.body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gate::clock::ManualClock;

    /// The same key while its first request is still processing: `409` in flight (another body:
    /// mismatch); once the work stored its answer, a replay.
    #[tokio::test]
    async fn a_key_in_flight_is_409_until_its_answer_is_stored() {
        let core = Core::new(
            ServerConfig::new("/jobs", "id"),
            Arc::new(ManualClock::new(0)),
        );
        let fp = fingerprint("/jobs", b"{}");
        assert!(matches!(
            core.decide(&mut core.lock(), "k", &fp),
            Decision::Work
        ));
        let busy = core.post(Some("\"k\""), b"{}").await;
        assert_eq!(busy.status, 409);
        let v: Value = serde_json::from_slice(&busy.body).unwrap();
        assert_eq!(v["type"], PROBLEM_IDEMPOTENCY_KEY_IN_FLIGHT);
        let other = core.post(Some("k"), b"{\"x\":1}").await;
        assert_eq!(other.status, 422);
        let done = core.work("k", fp, b"{}");
        assert_eq!(
            (done.status, done.body.as_slice()),
            (201, &br#"{"id":"E-000001"}"#[..])
        );
        assert_eq!(core.post(Some("k"), b"{}").await, done);
        assert_eq!(core.lock().counters.in_flight, 1);
    }

    #[test]
    fn keys_are_unquoted_structured_field_strings() {
        assert_eq!(normalize_key("\"abc\""), "abc");
        assert_eq!(normalize_key(" abc "), "abc");
        assert_eq!(normalize_key(r#""a\"b""#), "a\"b");
    }
}
