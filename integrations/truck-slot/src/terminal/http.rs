//! `HttpTerminal`, the [`SlotTerminal`] port's reqwest client for the terminal contract:
//!
//! * `POST {base}/slots` with `Idempotency-Key: "K"` and the stored JSON body
//!   `{equipment_number, window_start, window_end, pin}` answers `201 {slot_id, ...}`;
//! * `GET {base}/slots?idempotency_key=K` answers `200 {"slot": {slot_id, ...}}` or `404`.
//!
//! Answers are classified following the IETF draft `draft-ietf-httpapi-idempotency-key-header-07`:
//! same key with another payload is `422` (the draft) or `409` with problem type
//! `idempotency_mismatch` (some servers); same key while the first request is still processing is
//! `409`; a retry after completion gets the first result.
//!
//! Hardening (issue 7):
//!
//! * the client sends a `User-Agent` ([`USER_AGENT`]) and follows **no** redirect: a `3xx` is an
//!   answer like any other (a transient one), never a second request that would carry the
//!   bearer token and the PIN to another host;
//! * the token travels only in the `Authorization` header, never in a URL, and
//!   [`HttpTerminalConfig`]'s base URL may hold no user info, query or fragment (checked by
//!   [`crate::terminal::base_url_allowed`]);
//! * an answer body is read up to [`MAX_ANSWER_BYTES`]; the rest is never read;
//! * an answer is **never quoted in a log line** ([`AnswerDetail`]: a log line gets the status,
//!   the length and a keyed SHA-256 digest of the answer); the excerpt that reaches a record's
//!   `error` and the manual queue's `detail` is shortened, its control characters escaped, the
//!   values of secret-looking JSON keys (`pin`, `token`, ...) replaced, and the token and the
//!   PIN of the request cut out in every form a server may echo them ([`super::scrub`]: any
//!   case, separators dropped or changed, JSON and URL escapes, HTML references, hex, base64),
//!   for the claim and the lookup alike;
//! * every field of a `2xx` the gate uses is checked against the request's secrets: a slot id
//!   that quotes the PIN or the token is an invalid answer (transient, as below), and an
//!   `equipment_number` other than the container asked for is kept only scrubbed;
//! * a `2xx` whose slot id is missing, empty, longer than [`MAX_SLOT_ID_CHARS`] or not printable
//!   ASCII is **transient**, not permanent: the terminal has probably made the slot and stored its
//!   answer under the key, so the only safe moves are to ask again with the same key (a redelivery,
//!   or the reconciler's lookup) or, past the key's retention, to hand it to a person. Calling it
//!   permanent would send it to a person at once, who would book a second slot by hand while the
//!   first one exists. A terminal that always answers garbage is bounded: SQS moves the message to
//!   the dead-letter queue after `maxReceiveCount` deliveries, the record stays `in_flight` (the
//!   oldest-`in_flight` alarm fires), the reconciler looks the key up every minute, and past the
//!   key retention routes it to the manual queue;
//! * `401` is transient: the token was refused, which says nothing about the event. The token is
//!   read once per cold start, so after a rotation the events wait (redelivery, then the

use std::fmt;
use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::scrub;
use super::several::{appointments_v2_answer, appointments_v2_body, path_segment, TerminalApi};
use super::{AnswerDetail, ClaimOutcome, LookupOutcome, SlotClaim, SlotTerminal};
use crate::notification::MAX_EQUIPMENT_NUMBER_CHARS;

pub const USER_AGENT: &str = concat!("exactly-once-gate/", env!("CARGO_PKG_VERSION"));

/// Largest answer body read from the terminal, in bytes (64 KiB); a longer answer is cut there.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Longest slot id accepted, in characters. A slot id must also be printable ASCII
/// (`0x20..=0x7E`) and not blank.
pub const MAX_SLOT_ID_CHARS: usize = 128;

/// Longest API token accepted, in bytes.
pub const MAX_TOKEN_BYTES: usize = 4096;

/// An API token for the terminal: `Debug` and `Display` print `[redacted]`.
///
/// In the cloud it comes from AWS Secrets Manager, read once per cold start
/// (`crate::secrets`); the `TERMINAL_API_TOKEN` environment variable is for local runs only.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken(String);

/// Why a token value cannot be used. The messages never quote the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Empty (or only whitespace).
    #[error("the token is empty")]
    Empty,
    /// Longer than [`MAX_TOKEN_BYTES`].
    #[error("the token has {0} bytes, more than the limit of {MAX_TOKEN_BYTES}")]
    TooLong(usize),
    /// Holds a character that cannot travel in an HTTP header as a bearer token.
    #[error("the token holds a character that is not visible ASCII at byte {0}")]
    BadCharacter(usize),
}

impl ApiToken {
    /// Wraps a token as is (tests and callers that validated it).
    pub fn new(token: impl Into<String>) -> Self {
        Self(token.into())
    }

    /// Validates a token read from outside (a secret, an environment variable): surrounding
    /// whitespace (a trailing newline from a file) is removed; the rest must be 1 to
    /// [`MAX_TOKEN_BYTES`] bytes of visible ASCII (`0x21..=0x7E`).
    ///
    /// # Errors
    /// A [`TokenError`], which never quotes the value.
    pub fn parse(raw: &str) -> Result<Self, TokenError> {
        let token = raw.trim();
        if token.is_empty() {
            return Err(TokenError::Empty);
        }
        if token.len() > MAX_TOKEN_BYTES {
            return Err(TokenError::TooLong(token.len()));
        }
        if let Some(at) = token.bytes().position(|b| !(0x21..=0x7E).contains(&b)) {
            return Err(TokenError::BadCharacter(at));
        }
        Ok(Self(token.to_string()))
    }

    /// The secret value. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiToken([redacted])")
    }
}

impl fmt::Display for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Settings of [`HttpTerminal`].
#[derive(Debug, Clone)]
pub struct HttpTerminalConfig {
    /// Base URL without a trailing slash, e.g. `https://slots.terminal.example/api`.
    pub base_url: String,
    /// Bearer token, if the terminal wants one.
    pub token: Option<ApiToken>,
    /// TCP + TLS connect timeout.
    pub connect_timeout: Duration,
    /// Whole-request timeout (connect, send, answer). Keep it well under the lease.
    pub request_timeout: Duration,
    /// The terminal's API shape (default [`TerminalApi::Slots`]).
    pub api: TerminalApi,
}

impl HttpTerminalConfig {
    /// Defaults: 2 s to connect, 10 s for the whole request, no token.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into().trim_end_matches('/').to_string(),
            token: None,
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
            api: TerminalApi::Slots,
        }
    }
}

/// The terminal client over HTTP (reqwest, rustls).
#[derive(Debug, Clone)]
pub struct HttpTerminal {
    client: reqwest::Client,
    config: HttpTerminalConfig,
}

/// Building the HTTP client failed (TLS backend initialisation).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the terminal HTTP client: {0}")]
pub struct HttpTerminalError(String);

#[derive(Deserialize)]
struct SlotBody {
    slot_id: Option<String>,
    equipment_number: Option<String>,
}

#[derive(Deserialize)]
struct LookupBody {
    slot: SlotBody,
}

#[derive(Deserialize)]
struct Problem {
    #[serde(rename = "type")]
    kind: Option<String>,
    title: Option<String>,
    detail: Option<String>,
}

/// Longest excerpt of an error body kept in a detail string.
const DETAIL_MAX: usize = 300;

/// JSON keys whose values are replaced by `[redacted]` in an excerpt (compared case-insensitively,
/// `-` and `_` ignored): a terminal that echoes the request or its headers must not put the PIN
/// or the token into a detail string.
const SECRET_KEYS: &[&str] = &[
    "pin",
    "releasepin",
    "token",
    "apitoken",
    "accesstoken",
    "authorization",
    "password",
    "secret",
];

fn is_secret_key(key: &str) -> bool {
    let folded: String = key
        .chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect();
    SECRET_KEYS.contains(&folded.as_str())
}

fn redact_secret_keys(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if is_secret_key(key) {
                    *v = Value::String("[redacted]".into());
                } else {
                    redact_secret_keys(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_secret_keys),
        _ => {}
    }
}

/// A printable, bounded rendering of `text`: at most `max` characters (then `…`), control
/// characters escaped (`\n`, `\u{1b}`), so a quoted answer cannot forge a log line.
fn printable(text: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// What the client knows about the request an answer is about: the secrets no quoted text may
/// hold (the token; the request's PIN) and the container asked for.
struct Known<'a> {
    secrets: Vec<&'a str>,
    equipment_number: Option<&'a str>,
}

impl Known<'_> {
    const NONE: Known<'static> = Known {
        secrets: Vec::new(),
        equipment_number: None,
    };
}

/// The fields of a stored claim request the client reads back: the PIN (to scrub it) and the
/// container (to tell our container from an echo).
#[derive(Deserialize, Default)]
struct RequestFields {
    pin: Option<String>,
    equipment_number: Option<String>,
}

impl RequestFields {
    fn of(request: &[u8]) -> Self {
        serde_json::from_slice(request).unwrap_or_default()
    }
}

/// The key of [`answer_digest`]: 32 random bytes, drawn once per process (execution
/// environment).
fn digest_key() -> &'static [u8; 32] {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    KEY.get_or_init(rand::random)
}

/// The first 16 hex characters of SHA-256 over a per-process random key and `body`: equal
/// answers within one execution environment show the same digest, so a log tells a repeated
/// answer from varying ones. Keyed, because an answer that echoes the request is otherwise
/// known but for the PIN: a plain SHA-256 of it in a log line would let anyone who reads the
/// log try every PIN offline.
pub fn answer_digest(body: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(digest_key());
    hasher.update(body);
    hex::encode(&hasher.finalize()[..8])
}

/// `"{n} bytes, keyed SHA-256 {digest}"`: how an answer is named in a summary.
fn answer_size(body: &[u8]) -> String {
    format!(
        "{} bytes, keyed SHA-256 {}",
        body.len(),
        answer_digest(body)
    )
}

/// A detail excerpt of an answer body: JSON with secret-looking keys redacted (see
/// [`SECRET_KEYS`]), then every secret scrubbed ([`scrub::scrub`]), and only then shortened and
/// escaped by [`printable`] (so a secret cut in two by the shortening cannot leave its first half
/// behind).
fn excerpt(body: &[u8], known: &Known<'_>) -> String {
    let text = match serde_json::from_slice::<Value>(body) {
        Ok(mut v) => {
            redact_secret_keys(&mut v);
            v.to_string()
        }
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    };
    printable(&scrub::scrub(&text, &known.secrets), DETAIL_MAX)
}

/// What is wrong with `slot_id`, or `None` if it is acceptable: not blank, at most
/// [`MAX_SLOT_ID_CHARS`] characters, all printable ASCII (graphic or space), and quoting none of
/// `secrets` in any form [`super::scrub`] finds (a slot id is logged and stored in the booking).
fn slot_id_defect(slot_id: &str, secrets: &[&str]) -> Option<&'static str> {
    if slot_id.trim().is_empty() {
        Some("has an empty slot_id")
    } else if slot_id.len() > MAX_SLOT_ID_CHARS {
        Some("has a slot_id that is too long")
    } else if !slot_id.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        Some("has a slot_id that is not printable ASCII")
    } else if scrub::quotes_secret(slot_id, secrets) {
        Some("has a slot_id that quotes a secret of the request")
    } else {
        None
    }
}

/// Whether `slot_id` is acceptable (see [`slot_id_defect`]).
#[cfg(test)]
fn slot_id_valid(slot_id: &str) -> bool {
    slot_id_defect(slot_id, &[]).is_none()
}

/// What [`parse_slot`] keeps of an answered equipment number that quotes a secret.
const EQUIPMENT_WITHHELD: &str = "(withheld: it quotes a secret of the request)";

/// Parses a slot answer: a JSON object with a valid string `slot_id` (see [`slot_id_defect`]).
/// An `equipment_number` other than the container asked for is kept only scrubbed: withheld
/// when it quotes a secret, as its escaped excerpt when it is not short printable ASCII. It
/// cannot equal the container asked for, so the gate routes the answer as invalid.
fn parse_slot(body: SlotBody, known: &Known<'_>) -> Option<SlotClaim> {
    let slot_id = body
        .slot_id
        .filter(|s| slot_id_defect(s, &known.secrets).is_none())?;
    let equipment_number = body.equipment_number.map(|e| {
        if known.equipment_number == Some(e.as_str()) {
            e
        } else if scrub::quotes_secret(&e, &known.secrets) {
            EQUIPMENT_WITHHELD.to_string()
        } else if e.len() <= MAX_EQUIPMENT_NUMBER_CHARS && e.bytes().all(|b| b.is_ascii_graphic()) {
            e
        } else {
            format!(
                "(unreadable: {:?})",
                printable(&e, MAX_EQUIPMENT_NUMBER_CHARS)
            )
        }
    });
    Some(SlotClaim {
        slot_id,
        equipment_number,
    })
}

/// Why a `2xx` answer has no usable slot, without quoting a slot id that failed the checks.
fn slot_defect(body: &[u8], known: &Known<'_>) -> &'static str {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return "is not JSON";
    };
    let slot = value.get("slot").unwrap_or(&value);
    match slot.get("slot_id") {
        None | Some(Value::Null) => "has no slot_id",
        // A valid slot_id with another field unreadable: as before, reported with the id rules.
        Some(Value::String(s)) => {
            slot_id_defect(s, &known.secrets).unwrap_or("has a slot_id that is not printable ASCII")
        }
        Some(_) => "has a slot_id that is not a string",
    }
}

/// Classifies a claim answer (status and body bytes) following the IETF draft and the module docs.
/// No secret is known here: [`HttpTerminal`] classifies with the secrets of the request
/// ([`classify_claim_known`]), which is what quotes an answer safely.
pub fn classify_claim(status: u16, body: &[u8]) -> ClaimOutcome {
    classify_claim_known(status, body, &Known::NONE)
}

/// [`classify_claim`] knowing the request: every field of a `2xx` checked against its secrets and
/// its container ([`parse_slot`]), every excerpt scrubbed of its secrets before it is shortened,
/// and no summary quoting the answer at all (see [`AnswerDetail`]).
fn classify_claim_known(status: u16, body: &[u8], known: &Known<'_>) -> ClaimOutcome {
    if (200..=299).contains(&status) {
        // The common answer: one parse, no detail to quote.
        return match serde_json::from_slice::<SlotBody>(body)
            .ok()
            .and_then(|b| parse_slot(b, known))
        {
            Some(slot) => ClaimOutcome::Claimed(slot),
            // Transient, not permanent: see the module's notes (the slot may exist under the key).
            None => ClaimOutcome::Transient(AnswerDetail::new(format!(
                "terminal answered {status}, but the answer {} ({}); the slot may exist under \
                 the key: retried with the same key",
                slot_defect(body, known),
                answer_size(body)
            ))),
        };
    }
    let problem: Option<Problem> = serde_json::from_slice(body).ok();
    let problem_kind = problem
        .as_ref()
        .and_then(|p| p.kind.as_deref())
        .unwrap_or("");
    let quoted = match problem
        .as_ref()
        .and_then(|p| p.detail.as_deref().or(p.title.as_deref()))
    {
        Some(text) => printable(&scrub::scrub(text, &known.secrets), DETAIL_MAX),
        None => excerpt(body, known),
    };
    let detail = |summary: String| AnswerDetail::with_excerpt(summary, quoted.clone());
    let size = answer_size(body);
    match status {
        422 => ClaimOutcome::KeyMismatch(detail(format!("terminal answered 422 ({size})"))),
        409 if problem_kind.ends_with("idempotency_mismatch") => ClaimOutcome::KeyMismatch(detail(
            format!("terminal answered 409 idempotency_mismatch ({size})"),
        )),
        409 => ClaimOutcome::KeyInFlight,
        401 => ClaimOutcome::Transient(detail(format!(
            "terminal refused the API token (401; {size})"
        ))),
        408 | 425 | 429 => {
            ClaimOutcome::Transient(detail(format!("terminal answered {status} ({size})")))
        }
        400..=499 => ClaimOutcome::Permanent {
            status,
            detail: detail(format!("terminal answered {status} ({size})")),
        },
        _ => ClaimOutcome::Transient(detail(format!("terminal answered {status} ({size})"))),
    }
}

/// Classifies a lookup answer (`GET /slots?idempotency_key=K`: status and body bytes): `200`
/// with a valid slot is [`LookupOutcome::Found`], `404` [`LookupOutcome::NotFound`], anything
/// else [`LookupOutcome::Transient`]. No secret is known here; [`HttpTerminal`] classifies with
/// the secrets of the record's request.
pub fn classify_lookup(status: u16, body: &[u8]) -> LookupOutcome {
    classify_lookup_known(status, body, &Known::NONE)
}

/// [`classify_lookup`] knowing the request: the slot's fields checked as for a claim, the excerpt
/// of an unexpected answer scrubbed of its secrets, the summary quoting nothing.
fn classify_lookup_known(status: u16, body: &[u8], known: &Known<'_>) -> LookupOutcome {
    match status {
        200 => match serde_json::from_slice::<LookupBody>(body)
            .ok()
            .and_then(|b| parse_slot(b.slot, known))
        {
            Some(slot) => LookupOutcome::Found(slot),
            None => LookupOutcome::Transient(AnswerDetail::new(format!(
                "lookup answered 200, but the answer {} ({})",
                slot_defect(body, known),
                answer_size(body)
            ))),
        },
        404 => LookupOutcome::NotFound,
        _ => LookupOutcome::Transient(AnswerDetail::with_excerpt(
            format!("lookup answered {status} ({})", answer_size(body)),
            excerpt(body, known),
        )),
    }
}

impl HttpTerminal {
    /// Builds the client once (at cold start).
    ///
    /// # Errors
    /// [`HttpTerminalError`] if reqwest cannot build a client.
    pub fn new(config: HttpTerminalConfig) -> Result<Self, HttpTerminalError> {
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout)
            // No redirect is followed: a 3xx is answered as it is (transient), so the token and
            // the PIN never travel to a host the configuration did not name.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(USER_AGENT)
            .build()
            .map_err(|e| HttpTerminalError(e.to_string()))?;
        Ok(Self { client, config })
    }

    fn authorise(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        // `bearer_auth` marks the header sensitive: reqwest's and hyper's `Debug` hide it.
        match &self.config.token {
            Some(token) => req.bearer_auth(token.expose()),
            None => req,
        }
    }

    /// What an answer about `request` is checked against: the token and the request's PIN (the
    /// secrets no quoted text may hold), and the request's container.
    fn known<'a>(&'a self, request: &'a RequestFields) -> Known<'a> {
        let mut secrets = Vec::new();
        if let Some(token) = &self.config.token {
            secrets.push(token.expose());
        }
        if let Some(pin) = request.pin.as_deref() {
            secrets.push(pin);
        }
        Known {
            secrets,
            equipment_number: request.equipment_number.as_deref(),
        }
    }
}

impl HttpTerminal {
    /// A `2xx` answer of the terminal's API in the `slots` shape the classification reads (see
    /// [`TerminalApi`]); any other answer as it is.
    fn shaped(&self, status: u16, body: Vec<u8>, lookup: bool) -> Vec<u8> {
        match self.config.api {
            TerminalApi::AppointmentsV2 if (200..=299).contains(&status) => {
                appointments_v2_answer(&body, lookup).unwrap_or(body)
            }
            _ => body,
        }
    }
}

/// Reads at most [`MAX_ANSWER_BYTES`] of an answer body; the rest is never read.
async fn read_capped(mut response: reqwest::Response) -> Result<Vec<u8>, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = MAX_ANSWER_BYTES - body.len();
        if chunk.len() >= room {
            body.extend_from_slice(&chunk[..room]);
            break;
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A reqwest error without its URL (which holds nothing secret, but a lookup URL carries the
/// key and a base URL is configuration): the kind of failure is what matters.
fn request_error(e: reqwest::Error) -> String {
    let e = e.without_url();
    let kind = if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connect"
    } else if e.is_body() || e.is_decode() {
        "body"
    } else {
        "request"
    };
    format!("{kind} error: {e}")
}

/// The header value for `op_key`: a Structured Field string (`"K"`), as the IETF draft specifies.
pub fn idempotency_key_header(op_key: &str) -> String {
    format!("\"{op_key}\"")
}

#[async_trait]
impl SlotTerminal for HttpTerminal {
    async fn claim(&self, op_key: &str, request: &[u8]) -> ClaimOutcome {
        let (url, body) = match self.config.api {
            TerminalApi::Slots => (format!("{}/slots", self.config.base_url), request.to_vec()),
            TerminalApi::AppointmentsV2 => match appointments_v2_body(request) {
                Ok(body) => (format!("{}/v2/appointments", self.config.base_url), body),
                Err(why) => {
                    return ClaimOutcome::Permanent {
                        status: 0,
                        detail: AnswerDetail::new(why),
                    }
                }
            },
        };
        let req = self
            .client
            .post(url)
            .header("Idempotency-Key", idempotency_key_header(op_key))
            .header("Content-Type", "application/json")
            .body(body);
        let fields = RequestFields::of(request);
        let known = self.known(&fields);
        let response = match self.authorise(req).send().await {
            Ok(r) => r,
            Err(e) => {
                let why = format!("claim request failed: {}", request_error(e));
                return ClaimOutcome::Transient(scrub::scrub(&why, &known.secrets).into());
            }
        };
        let status = response.status().as_u16();
        match read_capped(response).await {
            Ok(body) => classify_claim_known(status, &self.shaped(status, body, false), &known),
            Err(e) => ClaimOutcome::Transient(
                scrub::scrub(
                    &format!("claim answer {status} unreadable: {}", request_error(e)),
                    &known.secrets,
                )
                .into(),
            ),
        }
    }

    async fn lookup(&self, op_key: &str, request: &[u8]) -> LookupOutcome {
        let req = match self.config.api {
            TerminalApi::Slots => self
                .client
                .get(format!("{}/slots", self.config.base_url))
                .query(&[("idempotency_key", op_key)]),
            TerminalApi::AppointmentsV2 => self.client.get(format!(
                "{}/v2/appointments/by-key/{}",
                self.config.base_url,
                path_segment(op_key)
            )),
        };
        let fields = RequestFields::of(request);
        let known = self.known(&fields);
        let response = match self.authorise(req).send().await {
            Ok(r) => r,
            Err(e) => {
                let why = format!("lookup failed: {}", request_error(e));
                return LookupOutcome::Transient(scrub::scrub(&why, &known.secrets).into());
            }
        };
        let status = response.status().as_u16();
        let body = match read_capped(response).await {
            Ok(b) => b,
            Err(e) => {
                return LookupOutcome::Transient(
                    scrub::scrub(
                        &format!("lookup answer {status} unreadable: {}", request_error(e)),
                        &known.secrets,
                    )
                    .into(),
                )
            }
        };
        classify_lookup_known(status, &self.shaped(status, body, true), &known)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIN: &str = "PIN-XYZZY-7731";
    const TOKEN: &str = "tok-PLUGH-0042";

    fn known() -> Known<'static> {
        Known {
            secrets: vec![TOKEN, PIN],
            equipment_number: Some("CSQU3054383"),
        }
    }

    #[test]
    fn classifies_every_kind_of_answer() {
        assert_eq!(
            classify_claim(
                201,
                br#"{"slot_id":"S-1","equipment_number":"CSQU3054383"}"#
            ),
            ClaimOutcome::Claimed(SlotClaim {
                slot_id: "S-1".into(),
                equipment_number: Some("CSQU3054383".into())
            })
        );
        assert!(matches!(
            classify_claim(201, b"not json"),
            ClaimOutcome::Transient(_)
        ));
        assert!(matches!(
            classify_claim(201, br#"{"slot_id":""}"#),
            ClaimOutcome::Transient(_)
        ));
        assert!(matches!(
            classify_claim(422, br#"{"type":"about:blank","title":"reused"}"#),
            ClaimOutcome::KeyMismatch(_)
        ));
        assert!(matches!(
            classify_claim(409, br#"{"type":"idempotency_mismatch","status":409}"#),
            ClaimOutcome::KeyMismatch(_)
        ));
        assert!(matches!(
            classify_claim(
                409,
                br#"{"type":"https://x.example/p/idempotency_mismatch"}"#
            ),
            ClaimOutcome::KeyMismatch(_)
        ));
        assert_eq!(
            classify_claim(409, br#"{"type":"idempotency_key_in_flight"}"#),
            ClaimOutcome::KeyInFlight
        );
        assert_eq!(classify_claim(409, b""), ClaimOutcome::KeyInFlight);
        let body = br#"{"type":"bad","detail":"pin empty"}"#;
        let ClaimOutcome::Permanent { status, detail } = classify_claim(400, body) else {
            panic!("permanent");
        };
        assert_eq!(status, 400);
        assert_eq!(detail.excerpt(), Some("pin empty"));
        assert_eq!(
            detail.summary(),
            format!(
                "terminal answered 400 ({} bytes, keyed SHA-256 {})",
                body.len(),
                answer_digest(body)
            )
        );
        assert_eq!(detail.quoted(), format!("{}: pin empty", detail.summary()));
        assert!(matches!(
            classify_claim(429, b""),
            ClaimOutcome::Transient(_)
        ));
        assert!(matches!(
            classify_claim(503, b"down"),
            ClaimOutcome::Transient(_)
        ));
    }

    /// Log lines get the summary: the status, the length and the keyed digest, never a character
    /// of the answer, whatever the answer holds.
    #[test]
    fn summaries_and_debug_never_quote_the_answer() {
        let body = br#"{"title":"upstream says: hello from the terminal"}"#;
        for outcome in [
            classify_claim(503, body),
            classify_claim(400, body),
            classify_claim(422, body),
            classify_claim(401, body),
        ] {
            let logged = format!("{outcome:?}");
            assert!(!logged.contains("hello"), "{logged}");
            assert!(logged.contains(&answer_digest(body)), "{logged}");
        }
        let LookupOutcome::Transient(why) = classify_lookup(500, body) else {
            panic!("transient");
        };
        assert!(!why.to_string().contains("hello"), "{why}");
        assert!(!format!("{why:?}").contains("hello"), "{why:?}");
        assert!(why.quoted().contains("hello"), "{}", why.quoted());
        // Equal answers, equal digests; other answers, other digests; 16 hex characters.
        assert_eq!(answer_digest(body), answer_digest(body));
        assert_ne!(answer_digest(body), answer_digest(b"other"));
        assert_eq!(answer_digest(body).len(), 16);
        // Keyed: not the plain SHA-256 of the answer.
        assert!(!crate::keys::sha256_hex(body).starts_with(&answer_digest(body)));
    }

    #[test]
    fn token_debug_is_redacted() {
        let t = ApiToken::new("tok-SECRET-123");
        assert_eq!(format!("{t:?}"), "ApiToken([redacted])");
        let c = HttpTerminalConfig {
            token: Some(t),
            ..HttpTerminalConfig::new("http://127.0.0.1:1")
        };
        assert!(!format!("{c:?}").contains("SECRET"));
    }

    #[test]
    fn header_is_a_structured_field_string() {
        assert_eq!(idempotency_key_header("abc"), "\"abc\"");
    }

    #[test]
    fn token_parse_trims_and_checks_without_quoting() {
        assert_eq!(
            ApiToken::parse("  tok-PLUGH-0042\n").unwrap().expose(),
            "tok-PLUGH-0042"
        );
        assert_eq!(ApiToken::parse(" \n"), Err(TokenError::Empty));
        let err = ApiToken::parse("tok PLUGH").unwrap_err();
        assert_eq!(err, TokenError::BadCharacter(3));
        assert!(!err.to_string().contains("PLUGH"));
        assert_eq!(
            ApiToken::parse(&"t".repeat(MAX_TOKEN_BYTES + 1)),
            Err(TokenError::TooLong(MAX_TOKEN_BYTES + 1))
        );
        assert!(ApiToken::parse("tök").is_err());
        assert_eq!(format!("{}", ApiToken::new("tok-PLUGH-0042")), "[redacted]");
    }

    #[test]
    fn slot_ids_must_be_short_printable_ascii() {
        assert!(slot_id_valid("ECTD-20250609-0800-0042"));
        assert!(slot_id_valid(&"S".repeat(MAX_SLOT_ID_CHARS)));
        for bad in [
            String::new(),
            "   ".to_string(),
            "S".repeat(MAX_SLOT_ID_CHARS + 1),
            "S-1\n".to_string(),
            "S-\u{1b}[31m".to_string(),
            "S-é".to_string(),
        ] {
            assert!(!slot_id_valid(&bad), "{bad:?}");
            let body = serde_json::json!({ "slot_id": bad }).to_string();
            let ClaimOutcome::Transient(why) = classify_claim(201, body.as_bytes()) else {
                panic!("{bad:?} must be transient");
            };
            assert!(why.summary().contains("slot may exist"), "{why}");
            if bad.len() > 3 {
                assert!(!why.quoted().contains(bad.as_str()), "{why}");
            }
        }
        let ClaimOutcome::Transient(why) = classify_claim(201, br#"{"slot_id":42}"#) else {
            panic!("a number is not a slot id");
        };
        assert!(why.summary().contains("not a string"), "{why}");
        let ClaimOutcome::Transient(why) = classify_claim(200, b"<html>ok</html>") else {
            panic!("not JSON");
        };
        assert!(why.summary().contains("not JSON"), "{why}");
        // Duplicate keys in an answer are refused by serde's derive: no slot.
        assert!(matches!(
            classify_claim(201, br#"{"slot_id":"A","slot_id":"B"}"#),
            ClaimOutcome::Transient(_)
        ));
    }

    /// A slot id that quotes the PIN or the token, in any form, is an invalid answer (transient,
    /// like every unusable slot id), for a claim and a lookup; the reason never quotes it.
    #[test]
    fn a_slot_id_quoting_a_secret_is_refused() {
        for slot_id in [
            "S-PIN-XYZZY-7731",
            "S-pinxyzzy7731",
            "S-PIN%2DXYZZY%2D7731",
            "S-tok-plugh-0042",
        ] {
            let body = serde_json::json!({"slot_id": slot_id, "equipment_number": "CSQU3054383"});
            let body = body.to_string();
            let ClaimOutcome::Transient(why) = classify_claim_known(201, body.as_bytes(), &known())
            else {
                panic!("{slot_id} must be refused");
            };
            assert!(why.summary().contains("quotes a secret"), "{why}");
            assert!(!why.quoted().to_lowercase().contains("xyzzy"), "{why}");
            let lookup = serde_json::json!({"slot": {"slot_id": slot_id}}).to_string();
            let LookupOutcome::Transient(why) =
                classify_lookup_known(200, lookup.as_bytes(), &known())
            else {
                panic!("{slot_id} must be refused by a lookup too");
            };
            assert!(why.summary().contains("quotes a secret"), "{why}");
            // Without the secrets (the simulator's classification) it is a slot like any other.
            assert!(matches!(
                classify_claim(201, body.as_bytes()),
                ClaimOutcome::Claimed(_)
            ));
        }
    }

    /// An answered equipment number that is the PIN is never kept as it is; the container asked
    /// for is kept as it is even when it happens to contain the PIN's characters.
    #[test]
    fn an_echoed_equipment_number_is_scrubbed() {
        let body = serde_json::json!({"slot_id": "S-2", "equipment_number": "pin-xyzzy-7731"});
        let ClaimOutcome::Claimed(slot) =
            classify_claim_known(201, body.to_string().as_bytes(), &known())
        else {
            panic!("claimed");
        };
        assert_eq!(slot.equipment_number.as_deref(), Some(EQUIPMENT_WITHHELD));
        let short = Known {
            secrets: vec!["3054"],
            equipment_number: Some("CSQU3054383"),
        };
        let ours = serde_json::json!({"slot_id": "S-3", "equipment_number": "CSQU3054383"});
        let ClaimOutcome::Claimed(slot) =
            classify_claim_known(201, ours.to_string().as_bytes(), &short)
        else {
            panic!("claimed");
        };
        assert_eq!(slot.equipment_number.as_deref(), Some("CSQU3054383"));
    }

    #[test]
    fn an_unreadable_equipment_number_cannot_match() {
        let body = serde_json::json!({"slot_id": "S-1", "equipment_number": "CSQU\n3054383"});
        let ClaimOutcome::Claimed(slot) = classify_claim(201, body.to_string().as_bytes()) else {
            panic!("claimed");
        };
        let e = slot.equipment_number.unwrap();
        assert!(e.starts_with("(unreadable"), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn a_refused_token_is_transient_and_other_4xx_permanent() {
        assert!(matches!(
            classify_claim(401, b""),
            ClaimOutcome::Transient(_)
        ));
        assert!(matches!(
            classify_claim(403, b""),
            ClaimOutcome::Permanent { status: 403, .. }
        ));
        assert!(matches!(
            classify_claim(302, b""),
            ClaimOutcome::Transient(_)
        ));
    }

    /// An answer that echoes the PIN in free text (a problem's `detail`), where the 300-character
    /// cut falls inside the PIN: nothing of the PIN is left, not even its first half.
    #[test]
    fn a_secret_across_the_cut_is_scrubbed_before_the_cut() {
        let detail = format!("{}{PIN} tail", "x".repeat(DETAIL_MAX - 5));
        let body = serde_json::json!({ "detail": detail }).to_string();
        let ClaimOutcome::Transient(why) = classify_claim_known(503, body.as_bytes(), &known())
        else {
            panic!("transient");
        };
        assert!(!why.quoted().contains("PIN-X"), "{}", why.quoted());
        // Without a problem document, the excerpt path the same.
        let raw = format!("{}{PIN}", "y".repeat(DETAIL_MAX - 5));
        let ClaimOutcome::Transient(why) = classify_claim_known(502, raw.as_bytes(), &known())
        else {
            panic!("transient");
        };
        assert!(!why.quoted().contains("PIN-X"), "{}", why.quoted());
    }

    /// The issue's answers: a 503 and a lookup 500 that echo the PIN in another case, without
    /// separators, JSON-escaped and percent-encoded; none reaches the excerpt.
    #[test]
    fn echoed_forms_are_cut_from_claim_and_lookup_excerpts() {
        for echo in [
            "upstream refused release pin pin-xyzzy-7731",
            "upstream refused release PINXYZZY7731",
            r"upstream refused release \u0050IN-XYZZY-7731",
            "upstream refused release PIN%2DXYZZY%2D7731, Bearer TOK-PLUGH-0042",
        ] {
            let ClaimOutcome::Transient(why) = classify_claim_known(503, echo.as_bytes(), &known())
            else {
                panic!("transient");
            };
            let text = why.quoted();
            assert!(text.contains("upstream refused release"), "{text}");
            assert!(!scrub::quotes_secret(&text, &[PIN, TOKEN]), "{text}");
            let body = serde_json::json!({"message": format!("lookup failed: {echo} is locked")});
            let LookupOutcome::Transient(why) =
                classify_lookup_known(500, body.to_string().as_bytes(), &known())
            else {
                panic!("transient");
            };
            let text = why.quoted();
            assert!(text.contains("is locked"), "{text}");
            assert!(!scrub::quotes_secret(&text, &[PIN, TOKEN]), "{text}");
        }
    }

    /// A PIN too short to replace inside a text (here 3 digits) withholds any excerpt that holds
    /// it.
    #[test]
    fn a_short_secret_withholds_the_excerpt() {
        let body = br#"{"detail":"PIN 731 rejected by the gate"}"#;
        let short = Known {
            secrets: vec!["731"],
            equipment_number: None,
        };
        let ClaimOutcome::Permanent { detail, .. } = classify_claim_known(400, body, &short) else {
            panic!("permanent");
        };
        assert_eq!(detail.excerpt(), Some(scrub::WITHHELD));
    }

    #[test]
    fn excerpts_redact_secret_keys_and_escape_controls() {
        let echoed = br#"{"title":"bad","request":{"pin":"PIN-XYZZY-7731","Release-Pin":"x","headers":{"Authorization":"Bearer tok-PLUGH-0042"}}}"#;
        let ClaimOutcome::Permanent { detail, .. } = classify_claim(418, echoed) else {
            panic!("permanent");
        };
        assert_eq!(detail.excerpt(), Some("bad"));
        // The problem has a title, so the title is the excerpt; the excerpt path:
        let text = excerpt(echoed, &Known::NONE);
        assert!(!text.contains("XYZZY") && !text.contains("PLUGH"), "{text}");
        assert!(text.contains("[redacted]"));
        assert_eq!(printable("a\nb\u{1b}", 10), "a\\nb\\u{1b}");
        assert_eq!(printable("abcdef", 3), "abc…");
    }
}
