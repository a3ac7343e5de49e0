//! The `SlotTerminal` port and `HttpTerminal`, its reqwest client for the terminal contract:
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
//!   [`crate::config::base_url_allowed`]);
//! * an answer body is read up to [`MAX_ANSWER_BYTES`]; the rest is never read;
//! * every detail string quoted from an answer is shortened, its control characters escaped, the
//!   values of secret-looking JSON keys (`pin`, `token`, ...) replaced, and the PIN of the request
//!   and the token removed, so a terminal that echoes the request cannot put a secret into a log
//!   line, a record's `error` or the manual queue's `detail`;
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
//!   reconciler) until new environments start with the new token, instead of all being failed.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;

use crate::notification::MAX_EQUIPMENT_NUMBER_CHARS;

/// The `User-Agent` the client sends: `exactly-once-gate/{version}`.
pub const USER_AGENT: &str = concat!("exactly-once-gate/", env!("CARGO_PKG_VERSION"));

/// Largest answer body read from the terminal, in bytes (64 KiB); a longer answer is cut there.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Longest slot id accepted, in characters. A slot id must also be printable ASCII
/// (`0x20..=0x7E`) and not blank.
pub const MAX_SLOT_ID_CHARS: usize = 128;

/// Longest API token accepted, in bytes.
pub const MAX_TOKEN_BYTES: usize = 4096;

/// A slot the terminal issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotClaim {
    /// The terminal's slot id, non-empty.
    pub slot_id: String,
    /// The container the terminal says the slot is for, if it said.
    pub equipment_number: Option<String>,
}

/// How a slot claim ended, as the gate must act on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// `2xx` with a slot id: commit it.
    Claimed(SlotClaim),
    /// `5xx`, `408`, `425`, `429`, `401` (the token refused), `3xx` (never followed), timeouts,
    /// connection errors, a `2xx` without a usable slot id: the outcome is unknown or not the
    /// event's fault; retry later with the same key and bytes (see the module's notes).
    Transient(String),
    /// Another `4xx` (`400`, `403`, ...): will never succeed; `failed` and the manual queue.
    Permanent {
        /// The HTTP status.
        status: u16,
        /// The problem detail or body excerpt (never the request).
        detail: String,
    },
    /// The key was used with another body (`422`, or `409` with problem type
    /// `idempotency_mismatch`): permanent.
    KeyMismatch(String),
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
    Transient(String),
}

/// The terminal's slot API.
#[async_trait]
pub trait SlotTerminal: Send + Sync {
    /// Step 3: claims a slot, sending `request` (the stored bytes) with `Idempotency-Key: op_key`.
    async fn claim(&self, op_key: &str, request: &[u8]) -> ClaimOutcome;

    /// Asks which slot is held under `op_key`.
    async fn lookup(&self, op_key: &str) -> LookupOutcome;
}

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
}

impl HttpTerminalConfig {
    /// Defaults: 2 s to connect, 10 s for the whole request, no token.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into().trim_end_matches('/').to_string(),
            token: None,
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
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

/// A detail excerpt of an answer body: JSON with secret-looking keys redacted (see
/// [`SECRET_KEYS`]), then `secrets` scrubbed ([`scrub`]), and only then shortened and escaped by
/// [`printable`] (so a secret cut in two by the shortening cannot leave its first half behind).
fn excerpt(body: &[u8], secrets: &[&str]) -> String {
    let text = match serde_json::from_slice::<Value>(body) {
        Ok(mut v) => {
            redact_secret_keys(&mut v);
            v.to_string()
        }
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    };
    printable(&scrub(&text, secrets), DETAIL_MAX)
}

/// Secrets shorter than this many characters are not replaced inside a text (a 2-digit PIN
/// occurs in any status line): a text that holds one is withheld whole ([`WITHHELD`]).
const MIN_REDACTABLE_CHARS: usize = 4;

/// What [`scrub`] returns for a text that quotes a secret shorter than [`MIN_REDACTABLE_CHARS`].
const WITHHELD: &str = "[detail withheld: it may quote a secret]";

/// `text` with every occurrence of each secret replaced by `[redacted]`, in every form an answer
/// or a log line can carry it: as sent, JSON-escaped (an answer that echoes a PIN holding `"` or
/// `\`), and with control characters escaped as [`printable`] writes them. A text that holds a
/// secret shorter than [`MIN_REDACTABLE_CHARS`] characters becomes [`WITHHELD`]. Scrub before
/// shortening a text, never after.
fn scrub(text: &str, secrets: &[&str]) -> String {
    // Every occurrence of every form of every secret, as byte ranges of `text`; overlapping or
    // touching ranges are merged before anything is replaced, so two secrets that overlap in the
    // text (a token ending where a PIN begins) leave no fragment of either.
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        let json = serde_json::to_string(secret).unwrap_or_default();
        let json = json
            .strip_prefix('"')
            .and_then(|j| j.strip_suffix('"'))
            .unwrap_or_default()
            .to_string();
        let mut forms = vec![
            secret.to_string(),
            printable(secret, usize::MAX),
            printable(&json, usize::MAX),
            json,
        ];
        forms.retain(|f| !f.is_empty());
        forms.sort();
        forms.dedup();
        for form in &forms {
            let mut from = 0;
            while let Some(at) = text[from..].find(form.as_str()) {
                if secret.chars().count() < MIN_REDACTABLE_CHARS {
                    return WITHHELD.to_string();
                }
                let begin = from + at;
                ranges.push((begin, begin + form.len()));
                // Step one character on, so overlapping occurrences of one form are found too.
                from = begin + text[begin..].chars().next().map_or(1, char::len_utf8);
            }
        }
    }
    if ranges.is_empty() {
        return text.to_string();
    }
    ranges.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (begin, end) in ranges {
        match merged.last_mut() {
            Some(last) if begin <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((begin, end)),
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (begin, end) in merged {
        out.push_str(&text[at..begin]);
        out.push_str("[redacted]");
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

/// What is wrong with `slot_id`, or `None` if it is acceptable: not blank, at most
/// [`MAX_SLOT_ID_CHARS`] characters, all printable ASCII (graphic or space).
fn slot_id_defect(slot_id: &str) -> Option<&'static str> {
    if slot_id.trim().is_empty() {
        Some("has an empty slot_id")
    } else if slot_id.len() > MAX_SLOT_ID_CHARS {
        Some("has a slot_id that is too long")
    } else if !slot_id.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        Some("has a slot_id that is not printable ASCII")
    } else {
        None
    }
}

/// Whether `slot_id` is acceptable (see [`slot_id_defect`]).
fn slot_id_valid(slot_id: &str) -> bool {
    slot_id_defect(slot_id).is_none()
}

/// Parses a slot answer: a JSON object with a valid string `slot_id` (see [`slot_id_valid`]).
/// An `equipment_number` that is not short printable ASCII is kept only as its escaped excerpt:
/// it cannot equal the container asked for, so the gate routes the answer as invalid.
fn parse_slot(body: SlotBody) -> Option<SlotClaim> {
    let slot_id = body.slot_id.filter(|s| slot_id_valid(s))?;
    let equipment_number = body.equipment_number.map(|e| {
        if e.len() <= MAX_EQUIPMENT_NUMBER_CHARS && e.bytes().all(|b| b.is_ascii_graphic()) {
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
fn slot_defect(body: &[u8]) -> &'static str {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return "is not JSON";
    };
    let slot = value.get("slot").unwrap_or(&value);
    match slot.get("slot_id") {
        None | Some(Value::Null) => "has no slot_id",
        // A valid slot_id with another field unreadable: as before, reported with the id rules.
        Some(Value::String(s)) => {
            slot_id_defect(s).unwrap_or("has a slot_id that is not printable ASCII")
        }
        Some(_) => "has a slot_id that is not a string",
    }
}

/// Classifies a claim answer (status and body bytes) following the IETF draft and the module docs.
/// No secret is known here: [`classify_claim_scrubbed`] is the one that quotes an answer safely.
pub fn classify_claim(status: u16, body: &[u8]) -> ClaimOutcome {
    classify_claim_scrubbed(status, body, &[])
}

/// [`classify_claim`], with every detail quoted from the answer (a problem's `detail` or `title`,
/// or an excerpt of the body) scrubbed of `secrets` ([`scrub`]) before it is shortened.
fn classify_claim_scrubbed(status: u16, body: &[u8], secrets: &[&str]) -> ClaimOutcome {
    if (200..=299).contains(&status) {
        // The common answer: one parse, no detail to quote.
        return match serde_json::from_slice::<SlotBody>(body)
            .ok()
            .and_then(parse_slot)
        {
            Some(slot) => ClaimOutcome::Claimed(slot),
            // Transient, not permanent: see the module's notes (the slot may exist under the key).
            None => ClaimOutcome::Transient(format!(
                "terminal answered {status}, but the answer {} ({} bytes); the slot may exist \
                 under the key: retried with the same key",
                slot_defect(body),
                body.len()
            )),
        };
    }
    let problem: Option<Problem> = serde_json::from_slice(body).ok();
    let problem_kind = problem
        .as_ref()
        .and_then(|p| p.kind.as_deref())
        .unwrap_or("");
    let detail = match problem
        .as_ref()
        .and_then(|p| p.detail.as_deref().or(p.title.as_deref()))
    {
        Some(text) => printable(&scrub(text, secrets), DETAIL_MAX),
        None => excerpt(body, secrets),
    };
    match status {
        422 => ClaimOutcome::KeyMismatch(detail),
        409 if problem_kind.ends_with("idempotency_mismatch") => ClaimOutcome::KeyMismatch(detail),
        409 => ClaimOutcome::KeyInFlight,
        401 => ClaimOutcome::Transient(format!("terminal refused the API token (401): {detail}")),
        408 | 425 | 429 => ClaimOutcome::Transient(format!("terminal answered {status}: {detail}")),
        400..=499 => ClaimOutcome::Permanent { status, detail },
        _ => ClaimOutcome::Transient(format!("terminal answered {status}: {detail}")),
    }
}

/// Classifies a lookup answer (`GET /slots?idempotency_key=K`: status and body bytes): `200`
/// with a valid slot is [`LookupOutcome::Found`], `404` [`LookupOutcome::NotFound`], anything
/// else [`LookupOutcome::Transient`]. No secret is known here; [`HttpTerminal`] scrubs its own.
pub fn classify_lookup(status: u16, body: &[u8]) -> LookupOutcome {
    classify_lookup_scrubbed(status, body, &[])
}

/// [`classify_lookup`], with the excerpt quoted from an unexpected answer scrubbed of `secrets`.
fn classify_lookup_scrubbed(status: u16, body: &[u8], secrets: &[&str]) -> LookupOutcome {
    match status {
        200 => match serde_json::from_slice::<LookupBody>(body)
            .ok()
            .and_then(|b| parse_slot(b.slot))
        {
            Some(slot) => LookupOutcome::Found(slot),
            None => LookupOutcome::Transient(format!(
                "lookup answered 200, but the answer {} ({} bytes)",
                slot_defect(body),
                body.len()
            )),
        },
        404 => LookupOutcome::NotFound,
        _ => LookupOutcome::Transient(format!(
            "lookup answered {status}: {}",
            excerpt(body, secrets)
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

    /// The secrets a detail string must never hold: the token and, for a claim, the PIN inside
    /// the request body.
    fn secrets<'a>(&'a self, request: Option<&'a PinOf>) -> Vec<&'a str> {
        let mut secrets = Vec::new();
        if let Some(token) = &self.config.token {
            secrets.push(token.expose());
        }
        if let Some(pin) = request.and_then(|r| r.pin.as_deref()) {
            secrets.push(pin);
        }
        secrets
    }
}

/// The PIN inside a stored claim request, to scrub it from detail strings.
#[derive(Deserialize)]
struct PinOf {
    pin: Option<String>,
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
        let url = format!("{}/slots", self.config.base_url);
        let req = self
            .client
            .post(url)
            .header("Idempotency-Key", idempotency_key_header(op_key))
            .header("Content-Type", "application/json")
            .body(request.to_vec());
        let pin: Option<PinOf> = serde_json::from_slice(request).ok();
        let secrets = self.secrets(pin.as_ref());
        let response = match self.authorise(req).send().await {
            Ok(r) => r,
            Err(e) => {
                let why = format!("claim request failed: {}", request_error(e));
                return ClaimOutcome::Transient(scrub(&why, &secrets));
            }
        };
        let status = response.status().as_u16();
        // Every text quoted from the answer is scrubbed where it is quoted (before shortening).
        match read_capped(response).await {
            Ok(body) => classify_claim_scrubbed(status, &body, &secrets),
            Err(e) => ClaimOutcome::Transient(scrub(
                &format!("claim answer {status} unreadable: {}", request_error(e)),
                &secrets,
            )),
        }
    }

    async fn lookup(&self, op_key: &str) -> LookupOutcome {
        let url = format!("{}/slots", self.config.base_url);
        let req = self.client.get(url).query(&[("idempotency_key", op_key)]);
        let secrets = self.secrets(None);
        let response = match self.authorise(req).send().await {
            Ok(r) => r,
            Err(e) => {
                let why = format!("lookup failed: {}", request_error(e));
                return LookupOutcome::Transient(scrub(&why, &secrets));
            }
        };
        let status = response.status().as_u16();
        let body = match read_capped(response).await {
            Ok(b) => b,
            Err(e) => {
                return LookupOutcome::Transient(scrub(
                    &format!("lookup answer unreadable: {}", request_error(e)),
                    &secrets,
                ))
            }
        };
        classify_lookup_scrubbed(status, &body, &secrets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(
            classify_claim(400, br#"{"type":"bad","detail":"pin empty"}"#),
            ClaimOutcome::Permanent {
                status: 400,
                detail: "pin empty".into()
            }
        );
        assert!(matches!(
            classify_claim(429, b""),
            ClaimOutcome::Transient(_)
        ));
        assert!(matches!(
            classify_claim(503, b"down"),
            ClaimOutcome::Transient(_)
        ));
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
            assert!(why.contains("slot may exist"), "{why}");
            if bad.len() > 3 {
                assert!(!why.contains(bad.as_str()), "{why}");
            }
        }
        let ClaimOutcome::Transient(why) = classify_claim(201, br#"{"slot_id":42}"#) else {
            panic!("a number is not a slot id");
        };
        assert!(why.contains("not a string"), "{why}");
        let ClaimOutcome::Transient(why) = classify_claim(200, b"<html>ok</html>") else {
            panic!("not JSON");
        };
        assert!(why.contains("not JSON"), "{why}");
        // Duplicate keys in an answer are refused by serde's derive: no slot.
        assert!(matches!(
            classify_claim(201, br#"{"slot_id":"A","slot_id":"B"}"#),
            ClaimOutcome::Transient(_)
        ));
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
        let pin = "PIN-XYZZY-7731";
        let detail = format!("{}{pin} tail", "x".repeat(DETAIL_MAX - 5));
        let body = serde_json::json!({ "detail": detail }).to_string();
        let ClaimOutcome::Transient(why) = classify_claim_scrubbed(503, body.as_bytes(), &[pin])
        else {
            panic!("transient");
        };
        assert!(!why.contains("PIN-X"), "{why}");
        // Without a problem document, the excerpt path the same.
        let raw = format!("{}{pin}", "y".repeat(DETAIL_MAX - 5));
        let ClaimOutcome::Transient(why) = classify_claim_scrubbed(502, raw.as_bytes(), &[pin])
        else {
            panic!("transient");
        };
        assert!(!why.contains("PIN-X"), "{why}");
    }

    /// A PIN with `"` and `\` comes back JSON-escaped in an echoed body: scrubbed in that form too.
    #[test]
    fn a_secret_is_scrubbed_in_its_json_escaped_form() {
        let pin = r#"PI"N\77"#;
        let body = serde_json::json!({ "echo": { "you_sent": pin } }).to_string();
        assert!(body.contains(r#"PI\"N\\77"#), "{body}");
        let ClaimOutcome::Transient(why) = classify_claim_scrubbed(500, body.as_bytes(), &[pin])
        else {
            panic!("transient");
        };
        assert!(
            !why.contains("PI\\\"N") && !why.contains("N\\\\77"),
            "{why}"
        );
        assert!(why.contains("[redacted]"), "{why}");
    }

    /// Two secrets that overlap in a text (a token whose end is the PIN's start) leave no fragment
    /// of either; a secret repeated with overlap (`abab` in `ababab`) is covered whole.
    #[test]
    fn overlapping_secrets_leave_no_fragment() {
        assert_eq!(
            scrub("auth tok-PLUGH-77 end", &["tok-PLUGH", "PLUGH-77"]),
            "auth [redacted] end"
        );
        assert_eq!(scrub("x ababab y", &["abab"]), "x [redacted] y");
        assert_eq!(scrub("no secret here", &["PIN-XYZZY"]), "no secret here");
    }

    /// A PIN too short to replace inside a text (here 3 digits) withholds any text that holds it,
    /// and leaves a text without it alone.
    #[test]
    fn a_short_secret_withholds_the_text() {
        assert_eq!(scrub("upstream 503 at gate 731", &["731"]), WITHHELD);
        assert_eq!(scrub("upstream 503", &["731"]), "upstream 503");
        let body = br#"{"detail":"PIN 731 rejected by the gate"}"#;
        let ClaimOutcome::Permanent { detail, .. } = classify_claim_scrubbed(400, body, &["731"])
        else {
            panic!("permanent");
        };
        assert_eq!(detail, WITHHELD);
    }

    #[test]
    fn excerpts_redact_secret_keys_and_escape_controls() {
        let echoed = br#"{"title":"bad","request":{"pin":"PIN-XYZZY-7731","Release-Pin":"x","headers":{"Authorization":"Bearer tok-PLUGH-0042"}}}"#;
        let ClaimOutcome::Permanent { detail, .. } = classify_claim(418, echoed) else {
            panic!("permanent");
        };
        assert_eq!(detail, "bad");
        let ClaimOutcome::Transient(why) = classify_claim(500, echoed) else {
            panic!("transient");
        };
        // The problem has a title, so the title is the detail; the excerpt path:
        let text = excerpt(echoed, &[]);
        assert!(!text.contains("XYZZY") && !text.contains("PLUGH"), "{text}");
        assert!(text.contains("[redacted]"));
        assert!(!why.contains("XYZZY"));
        assert_eq!(printable("a\nb\u{1b}", 10), "a\\nb\\u{1b}");
        assert_eq!(printable("abcdef", 3), "abc…");
        assert_eq!(
            scrub(
                "pin PIN-XYZZY-7731 and PIN-XYZZY-7731",
                &["PIN-XYZZY-7731", ""]
            ),
            "pin [redacted] and [redacted]"
        );
    }
}
