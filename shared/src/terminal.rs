//! The `SlotTerminal` port and `HttpTerminal`, its reqwest client for the terminal contract of
//! `DESIGN.md`:
//!
//! * `POST {base}/slots` with `Idempotency-Key: "K"` and the stored JSON body
//!   `{equipment_number, window_start, window_end, pin}` answers `201 {slot_id, ...}`;
//! * `GET {base}/slots?idempotency_key=K` answers `200 {"slot": {slot_id, ...}}` or `404`.
//!
//! Answers are classified following the IETF draft `draft-ietf-httpapi-idempotency-key-header-07`:
//! same key with another payload is `422` (the draft) or `409` with problem type
//! `idempotency_mismatch` (some servers); same key while the first request is still processing is
//! `409`; a retry after completion gets the first result.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;

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
    /// `5xx`, `429`, timeouts, connection errors, a `2xx` without a readable answer: the outcome
    /// is unknown; retry later with the same key and bytes.
    Transient(String),
    /// Another `4xx`: will never succeed; `failed` and the manual queue.
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
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken(String);

impl ApiToken {
    /// Wraps a token.
    pub fn new(token: impl Into<String>) -> Self {
        Self(token.into())
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

fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut s: String = text.chars().take(DETAIL_MAX).collect();
    if text.chars().count() > DETAIL_MAX {
        s.push('…');
    }
    s
}

/// Parses a slot answer: a JSON object with a non-empty string `slot_id`.
fn parse_slot(body: SlotBody) -> Option<SlotClaim> {
    let slot_id = body.slot_id.filter(|s| !s.trim().is_empty())?;
    Some(SlotClaim {
        slot_id,
        equipment_number: body.equipment_number,
    })
}

/// Classifies a claim answer (status and body bytes) following the IETF draft and `DESIGN.md`.
pub fn classify_claim(status: u16, body: &[u8]) -> ClaimOutcome {
    let problem: Option<Problem> = serde_json::from_slice(body).ok();
    let problem_kind = problem
        .as_ref()
        .and_then(|p| p.kind.as_deref())
        .unwrap_or("");
    let detail = problem
        .as_ref()
        .and_then(|p| p.detail.clone().or_else(|| p.title.clone()))
        .unwrap_or_else(|| excerpt(body));
    match status {
        200..=299 => match serde_json::from_slice::<SlotBody>(body)
            .ok()
            .and_then(parse_slot)
        {
            Some(slot) => ClaimOutcome::Claimed(slot),
            None => ClaimOutcome::Transient(format!(
                "terminal answered {status} without a slot_id: {}",
                excerpt(body)
            )),
        },
        422 => ClaimOutcome::KeyMismatch(detail),
        409 if problem_kind.ends_with("idempotency_mismatch") => ClaimOutcome::KeyMismatch(detail),
        409 => ClaimOutcome::KeyInFlight,
        408 | 425 | 429 => ClaimOutcome::Transient(format!("terminal answered {status}: {detail}")),
        400..=499 => ClaimOutcome::Permanent { status, detail },
        _ => ClaimOutcome::Transient(format!("terminal answered {status}: {detail}")),
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
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("exactly-once-gate/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| HttpTerminalError(e.to_string()))?;
        Ok(Self { client, config })
    }

    fn authorise(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.config.token {
            Some(token) => req.bearer_auth(token.expose()),
            None => req,
        }
    }
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
        let response = match self.authorise(req).send().await {
            Ok(r) => r,
            Err(e) => return ClaimOutcome::Transient(format!("claim request failed: {e}")),
        };
        let status = response.status().as_u16();
        match response.bytes().await {
            Ok(body) => classify_claim(status, &body),
            Err(e) => ClaimOutcome::Transient(format!("claim answer {status} unreadable: {e}")),
        }
    }

    async fn lookup(&self, op_key: &str) -> LookupOutcome {
        let url = format!("{}/slots", self.config.base_url);
        let req = self.client.get(url).query(&[("idempotency_key", op_key)]);
        let response = match self.authorise(req).send().await {
            Ok(r) => r,
            Err(e) => return LookupOutcome::Transient(format!("lookup failed: {e}")),
        };
        let status = response.status().as_u16();
        let body = match response.bytes().await {
            Ok(b) => b,
            Err(e) => return LookupOutcome::Transient(format!("lookup answer unreadable: {e}")),
        };
        match status {
            200 => match serde_json::from_slice::<LookupBody>(&body)
                .ok()
                .and_then(|b| parse_slot(b.slot))
            {
                Some(slot) => LookupOutcome::Found(slot),
                None => LookupOutcome::Transient(format!(
                    "lookup answered 200 without a slot: {}",
                    excerpt(&body)
                )),
            },
            404 => LookupOutcome::NotFound,
            _ => LookupOutcome::Transient(format!("lookup answered {status}: {}", excerpt(&body))),
        }
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
}
