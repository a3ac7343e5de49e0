//! `HttpTerminal`, the [`SlotTerminal`] port's reqwest client for the terminal contract:
//!
//! * `POST {base}/slots` with `Idempotency-Key: "K"` and the stored JSON body
//!   `{equipment_number, window_start, window_end, pin}` answers `201 {slot_id, ...}`;
//! * `GET {base}/slots?idempotency_key=K` answers `200 {"slot": {slot_id, ...}}` or `404`
//!   (an `appointments-v2` terminal in its own shape, [`TerminalApi`]).
//!
//! The `Idempotency-Key` contract is the core's ([`gate::idempotency_key`]): the header as an RFC
//! 8941 string, every answer and every failed request classified by one table (IETF draft
//! `draft-ietf-httpapi-idempotency-key-header-07`, the terminal simulator's semantics), summaries
//! in the gate's words. What is the terminal's (the slot read from an answer, the terminal's
//! slot-id format, the PIN check on ids) is [`super::answer`].
//!
//! Hardening (no redirect, the token only in its header, one resend of a claim whose connection
//! failed, a bounded answer never quoted, `401` transient): [`HttpTerminal`].

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use gate::idempotency_key::IdFormat;
use serde::Deserialize;

use super::answer::{for_the_operator, TerminalAnswers};
use super::several::{appointments_v2_body, path_segment, TerminalApi};
use super::{AnswerDetail, CallOutcome, LookupOutcome, SlotTerminal};

/// The `User-Agent` the client sends.
pub const USER_AGENT: &str = concat!("exactly-once-gate/", env!("CARGO_PKG_VERSION"));

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
    /// The format the terminal declares for its slot ids (default [`IdFormat::default`]: ASCII
    /// letters, digits and `-_.:`, 1 to 64 characters). A slot id outside it is never kept: the
    /// record goes to a person.
    pub slot_id_format: IdFormat,
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
            slot_id_format: IdFormat::default(),
        }
    }
}

/// The terminal client over HTTP (reqwest, rustls). Its hardening:
///
/// * the client sends a `User-Agent` ([`USER_AGENT`]) and follows **no** redirect
///   ([`gate_http::builder`]): a `3xx` is an answer like any other (a
///   transient one), never a second request that would carry the bearer token and the PIN to
///   another host;
/// * the token travels only in the `Authorization` header (reqwest's `bearer_auth`, marked
///   sensitive), never in a URL, and [`HttpTerminalConfig`]'s base URL may hold no user info,
///   query or fragment (checked by [`crate::terminal::base_url_allowed`]);
/// * a claim whose connection failed after it may have been sent (a reset, closed before the
///   answer: a keep-alive connection dead after the environment was frozen) is sent once more,
///   the same bytes under the same key, on a new connection
///   (`gate_http::ServerClient`): the terminal replays its stored answer or
///   runs the claim once;
/// * an answer body is read up to `gate_http::MAX_ANSWER_BYTES` (64 KiB);
///   the rest is never read;
/// * an answer is **never quoted** in a log line, a record's `error` or a manual item's
///   `detail` ([`super::AnswerDetail`]: status, content type, length and a keyed digest); only
///   `gatectl lookup` prints one, to the operator's terminal, scrubbed
///   ([`SlotTerminal::show_lookup_at`]);
/// * `401` is transient: the token was refused, which says nothing about the event. The token is
///   read once per cold start, so after a rotation the events wait (redelivery, then the
///   reconciler) until a new execution environment reads the new token; past the key's retention
///   a person gets them.
#[derive(Debug, Clone)]
pub struct HttpTerminal {
    /// Pooled for every request; a claim whose connection failed after it may have been sent
    /// is sent once more on a new connection ([`gate_http::ServerClient`]).
    clients: gate_http::ServerClient,
    config: HttpTerminalConfig,
}

/// Building the HTTP client failed (TLS backend initialisation).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the terminal HTTP client: {0}")]
pub struct HttpTerminalError(String);

/// The field of a stored claim request the client reads back: the PIN (no slot id may quote it).
#[derive(Deserialize, Default)]
struct RequestFields {
    pin: Option<String>,
}

impl RequestFields {
    fn of(request: &[u8]) -> Self {
        serde_json::from_slice(request).unwrap_or_default()
    }
}

impl HttpTerminal {
    /// Builds the client once (at cold start).
    ///
    /// # Errors
    /// [`HttpTerminalError`] if reqwest cannot build a client.
    pub fn new(config: HttpTerminalConfig) -> Result<Self, HttpTerminalError> {
        // A claim and its one re-send end within one request timeout: the lease and the
        // deadline margin are sized for one.
        let clients = gate_http::ServerClient::build(USER_AGENT, |b| {
            b.connect_timeout(config.connect_timeout)
                .timeout(config.request_timeout)
        })
        .map_err(|e| HttpTerminalError(e.to_string()))?
        .with_exchange_limit(config.request_timeout);
        Ok(Self { clients, config })
    }

    fn authorise(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        // `bearer_auth` marks the header sensitive: reqwest's and hyper's `Debug` hide it.
        match &self.config.token {
            Some(token) => req.bearer_auth(token.expose()),
            None => req,
        }
    }

    /// How an answer about `request` is read: checked against the token and the request's PIN
    /// (the secrets no quoted text may hold) and the request's container, in the terminal's API
    /// shape.
    fn answers<'a>(&'a self, request: &'a RequestFields) -> TerminalAnswers<'a> {
        let mut secrets = Vec::new();
        if let Some(token) = &self.config.token {
            secrets.push(token.expose());
        }
        if let Some(pin) = request.pin.as_deref() {
            secrets.push(pin);
        }
        TerminalAnswers {
            secrets,
            slot_id_format: self.config.slot_id_format.clone(),
            api: self.config.api,
        }
    }
}

#[async_trait]
impl SlotTerminal for HttpTerminal {
    async fn claim(&self, op_key: &str, request: &[u8]) -> CallOutcome {
        let (url, body) = match self.config.api {
            TerminalApi::Slots => (format!("{}/slots", self.config.base_url), request.to_vec()),
            TerminalApi::AppointmentsV2 => match appointments_v2_body(request) {
                Ok(body) => (format!("{}/v2/appointments", self.config.base_url), body),
                Err(why) => {
                    return CallOutcome::Permanent {
                        status: 0,
                        detail: AnswerDetail::new(why),
                    }
                }
            },
        };
        let req = self
            .clients
            .pooled()
            .post(url)
            .header("Content-Type", "application/json")
            .body(body);
        let fields = RequestFields::of(request);
        self.clients
            .call(self.authorise(req), op_key, &self.answers(&fields))
            .await
    }

    async fn lookup(&self, op_key: &str, request: &[u8]) -> LookupOutcome {
        let fields = RequestFields::of(request);
        gate_http::lookup(self.lookup_request(op_key), &self.answers(&fields)).await
    }

    async fn show_lookup_at(
        &self,
        _terminal: &str,
        op_key: &str,
        request: &[u8],
    ) -> Option<String> {
        let fields = RequestFields::of(request);
        let answers = self.answers(&fields);
        Some(
            match gate_http::exchange(self.lookup_request(op_key)).await {
                Ok(received) => format!(
                    "the terminal answered {}:\n{}",
                    gate::idempotency_key::describe(&received.answer()),
                    for_the_operator(&received.body, &answers.secrets)
                ),
                Err(failure) => format!("the lookup got no answer ({failure:?})"),
            },
        )
    }
}

impl HttpTerminal {
    /// The lookup request under `op_key`, authorised, in the terminal's API shape.
    fn lookup_request(&self, op_key: &str) -> reqwest::RequestBuilder {
        let req = match self.config.api {
            TerminalApi::Slots => self
                .clients
                .pooled()
                .get(format!("{}/slots", self.config.base_url))
                .query(&[("idempotency_key", op_key)]),
            TerminalApi::AppointmentsV2 => self.clients.pooled().get(format!(
                "{}/v2/appointments/by-key/{}",
                self.config.base_url,
                path_segment(op_key)
            )),
        };
        self.authorise(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
