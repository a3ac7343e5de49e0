//! One webhook request, from the API Gateway HTTP API event (payload format 2.0) to its answer.
//! The checks, in order (the first that fails answers, logged and counted; nothing is queued):
//!
//! | check | answer | reason |
//! | --- | --- | --- |
//! | an HTTP API request whose headers' names and values are valid HTTP (no control character; [`crate::read`]) | `400` | `invalid_request`, `invalid_header` |
//! | a body API Gateway marked base64 decodes | `400` | `invalid_body` |
//! | body at most [`MAX_BODY_BYTES`] (64 KiB, the consumer's limit) | `413` | `body_too_large` |
//! | `Content-Type: application/json` (parameters allowed; a `charset` must be UTF-8) | `415` | `unsupported_media_type` |
//! | a body at all | `400` | `empty_body` |
//! | the three `webhook-*` headers present | `401` | `missing_signature_headers` |
//! | `webhook-id` 1 to 256 of `A-Z a-z 0-9 _ - . :` | `400` | `invalid_webhook_id` |
//! | `webhook-timestamp` integer epoch seconds | `400` | `invalid_timestamp` |
//! | `webhook-timestamp` within 5 minutes of now, either way | `400` | `stale_timestamp` |
//! | a `v1` signature matches an active secret (read again once if stale: [`SECRETS_REFRESH_INTERVAL_MS`]) | `401` | `invalid_signature` |
//! | the body is UTF-8 of characters SQS accepts | `400` | `invalid_body` |
//! | `SendMessage` succeeds | `503` | `queue_unavailable` |
//!
//! Then `202`: the body queued byte for byte (base64 undone), the `webhook-id` its attribute, never
//! parsed here; a retried webhook is queued again (the gate suppresses it by its event key).

use std::sync::{Arc, RwLock};
use std::time::Instant;

use async_trait::async_trait;
use aws_lambda_events::event::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use gate::clock::Clock;

use crate::problem::{self, Problem, Reason};
use crate::signature::{self, SecretSet, SignatureHeaders, VerifyError};

/// The least time between two reads of the secrets prompted by a failed verification,
/// milliseconds (a prober cannot make the function call Secrets Manager more often than this).
///
/// When no signature matches and the secrets were read longer ago than this, they are read again
/// once from their source and the request verified again: a secret added for a rotation is
/// picked up within a minute by every running environment, without a deploy.
pub const SECRETS_REFRESH_INTERVAL_MS: i64 = 60_000;

/// Largest body accepted, bytes: the consumer's integration's limit (truck-slot's
/// `notification::MAX_BODY_BYTES`, 64 KiB; SQS allows 1 MiB since August 2025, a DynamoDB item
/// 400 KB), so that a body the consumer would reject for its size (a 300 KB one, say) is refused
/// here with a `413` the sender sees, not queued.
/// `tests/tests/ingress.rs` checks the two limits agree.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The name of the SQS message attribute that carries the `webhook-id`.
pub const WEBHOOK_ID_ATTRIBUTE: &str = "webhook-id";

/// The metric counting queued webhooks.
pub const METRIC_ACCEPTED: &str = "WebhooksAccepted";
/// The metric counting refused webhooks, with the dimension [`METRIC_REASON_DIMENSION`].
pub const METRIC_REJECTED: &str = "WebhooksRejected";
/// The dimension of [`METRIC_REJECTED`]: a [`Reason`] code.
pub const METRIC_REASON_DIMENSION: &str = "Reason";

/// `SendMessage` failed; the text is the SDK's (no body in it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SendMessage failed: {0}")]
pub struct QueueError(pub String);

/// The notification queue port: `SendMessage` of a body with the `webhook-id` attribute.
#[async_trait]
pub trait NotificationQueue: Send + Sync {
    /// Queues `body` unchanged with the message attribute [`WEBHOOK_ID_ATTRIBUTE`] =
    /// `webhook_id`; returns the SQS message id once SQS accepted it.
    ///
    /// # Errors
    /// [`QueueError`] when SQS did not confirm the message (it may still have stored it: the
    /// sender retries and the gate suppresses the duplicate).
    async fn send(&self, body: &str, webhook_id: &str) -> Result<String, QueueError>;
}

/// Reading the secrets failed (the message names the source, never a value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SecretSourceError(pub String);

/// Where the active secrets come from: Secrets Manager in the cloud (`crate::secrets`).
#[async_trait]
pub trait SecretSource: Send + Sync {
    /// Reads the active secrets.
    ///
    /// # Errors
    /// [`SecretSourceError`], naming the source and what went wrong.
    async fn fetch(&self) -> Result<SecretSet, SecretSourceError>;
}

/// The active secrets, with when they were read (epoch ms) and where to read them again.
pub struct Secrets {
    current: RwLock<(Arc<SecretSet>, i64)>,
    source: Option<Arc<dyn SecretSource>>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (set, read_at_ms) = self.snapshot();
        f.debug_struct("Secrets")
            .field("current", &set)
            .field("read_at_ms", &read_at_ms)
            .field("refreshable", &self.source.is_some())
            .finish()
    }
}

impl Secrets {
    /// Fixed secrets (local runs, tests): never read again.
    pub fn fixed(set: SecretSet) -> Self {
        Self {
            current: RwLock::new((Arc::new(set), i64::MIN)),
            source: None,
        }
    }

    /// Secrets read at `read_at_ms` (epoch ms) from `source`, read again after a failed
    /// verification at most every [`SECRETS_REFRESH_INTERVAL_MS`].
    pub fn refreshable(set: SecretSet, read_at_ms: i64, source: Arc<dyn SecretSource>) -> Self {
        Self {
            current: RwLock::new((Arc::new(set), read_at_ms)),
            source: Some(source),
        }
    }

    /// The current set and when it was read.
    pub fn snapshot(&self) -> (Arc<SecretSet>, i64) {
        match self.current.read() {
            Ok(guard) => (guard.0.clone(), guard.1),
            Err(poisoned) => {
                let guard = poisoned.into_inner();
                (guard.0.clone(), guard.1)
            }
        }
    }

    /// Reads the secrets again if they are refreshable and older than the interval at `now_ms`;
    /// returns the new set when it was read. The read is claimed (its time recorded) before it
    /// is sent, so of the concurrent invocations of one environment (Lambda Managed Instances)
    /// only one reads per interval. A failed read is logged and leaves the set as is (and counts
    /// as a read, so a broken source is not hammered).
    async fn refresh(&self, now_ms: i64) -> Option<Arc<SecretSet>> {
        let source = self.source.as_ref()?;
        {
            let mut guard = self.write();
            if now_ms.saturating_sub(guard.1) < SECRETS_REFRESH_INTERVAL_MS {
                return None;
            }
            guard.1 = now_ms;
        }
        match source.fetch().await {
            Ok(set) => {
                let set = Arc::new(set);
                self.write().0 = set.clone();
                tracing::info!(active_secrets = set.len(), "webhook secrets read again");
                Some(set)
            }
            Err(e) => {
                tracing::warn!(error = %e, "webhook secrets could not be read again; keeping the ones read before");
                None
            }
        }
    }

    /// The set and its read time, for writing (a poisoned lock's value is still the last one
    /// written whole: each write replaces one field).
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, (Arc<SecretSet>, i64)> {
        match self.current.write() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// The ingress: the secrets, the queue, the clock.
pub struct Ingress {
    /// The active secrets.
    pub secrets: Secrets,
    /// The notification queue.
    pub queue: Arc<dyn NotificationQueue>,
    /// The clock (epoch ms; the timestamp check uses its seconds).
    pub clock: Arc<dyn Clock>,
}

/// What one request came to: the answer and what the log line says.
#[derive(Debug, Clone)]
pub struct Handled {
    /// The answer to API Gateway.
    pub response: ApiGatewayV2httpResponse,
    /// `None` when queued (`202`), else the reason.
    pub rejected: Option<Reason>,
    /// The `webhook-id`, when it is a valid one (logged as it is only when the signature
    /// verified; otherwise by its keyed digest).
    pub webhook_id: Option<String>,
    /// The SQS message id, when queued.
    pub message_id: Option<String>,
    /// Which active secret verified the request.
    pub secret_index: Option<usize>,
    /// The body's size in bytes (as decoded).
    pub body_bytes: usize,
}

impl Handled {
    /// The HTTP status answered.
    pub fn status(&self) -> u16 {
        u16::try_from(self.response.status_code).unwrap_or(500)
    }

    /// The outcome code: `accepted` or the reason's code.
    pub fn outcome(&self) -> &'static str {
        self.rejected.map_or("accepted", Reason::code)
    }
}

/// A header's value as text, if present and visible ASCII (API Gateway joins repeated headers
/// with commas).
fn header<'a>(request: &'a ApiGatewayV2httpRequest, name: &str) -> Option<&'a str> {
    request.headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether `content_type` is `application/json`, with at most a `charset` parameter of UTF-8
/// (RFC 8259 §11: JSON has no other charset; other parameters are ignored).
pub fn is_json_media_type(content_type: &str) -> bool {
    let mut parts = content_type.split(';');
    let essence = parts.next().unwrap_or_default().trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return false;
    }
    parts.all(|param| match param.split_once('=') {
        Some((name, value)) if name.trim().eq_ignore_ascii_case("charset") => {
            let value = value.trim().trim_matches('"');
            value.eq_ignore_ascii_case("utf-8") || value.eq_ignore_ascii_case("utf8")
        }
        _ => true,
    })
}

/// Whether SQS accepts `body` as a message body: only `#x9 | #xA | #xD | #x20-#xD7FF |
/// #xE000-#xFFFD | #x10000-#x10FFFF` (SQS API Reference, `SendMessage`, `MessageBody`).
pub fn sqs_accepts(body: &str) -> bool {
    body.chars().all(|c| {
        matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..='\u{10FFFF}')
    })
}

impl Ingress {
    /// Answers one request (the checks of the module's table), without logging or counting it
    /// ([`Ingress::respond`] does both).
    pub async fn handle(&self, request: &ApiGatewayV2httpRequest) -> Handled {
        let raw = request.body.as_deref().unwrap_or_default();
        let mut handled = Handled {
            response: ApiGatewayV2httpResponse::default(),
            rejected: None,
            webhook_id: header(request, signature::HEADER_ID)
                .filter(|id| signature::valid_webhook_id(id))
                .map(str::to_string),
            message_id: None,
            secret_index: None,
            body_bytes: raw.len(),
        };
        let reject = |mut handled: Handled, reason: Reason, detail: String| {
            handled.response = Problem::new(reason, detail).response();
            handled.rejected = Some(reason);
            handled
        };
        let body: Vec<u8> = if request.is_base64_encoded {
            match STANDARD.decode(raw) {
                Ok(bytes) => bytes,
                Err(_) => {
                    return reject(
                        handled,
                        Reason::InvalidBody,
                        "the body is marked base64 but does not decode".into(),
                    )
                }
            }
        } else {
            raw.as_bytes().to_vec()
        };
        handled.body_bytes = body.len();
        if body.len() > MAX_BODY_BYTES {
            let detail = format!(
                "the body has {} bytes; the limit is {MAX_BODY_BYTES}",
                body.len()
            );
            return reject(handled, Reason::BodyTooLarge, detail);
        }
        if !header(request, "content-type").is_some_and(is_json_media_type) {
            return reject(
                handled,
                Reason::UnsupportedMediaType,
                "the content type must be application/json (UTF-8)".into(),
            );
        }
        if body.is_empty() {
            return reject(handled, Reason::EmptyBody, "the body is empty".into());
        }
        let headers = SignatureHeaders {
            id: header(request, signature::HEADER_ID),
            timestamp: header(request, signature::HEADER_TIMESTAMP),
            signature: header(request, signature::HEADER_SIGNATURE),
        };
        let now_ms = self.clock.now_ms();
        let now_s = now_ms.div_euclid(1000);
        let (set, _) = self.secrets.snapshot();
        let mut verified = signature::verify(&set, &headers, &body, now_s);
        if verified == Err(VerifyError::InvalidSignature) {
            if let Some(fresh) = self.secrets.refresh(now_ms).await {
                verified = signature::verify(&fresh, &headers, &body, now_s);
            }
        }
        match verified {
            Ok(v) => handled.secret_index = Some(v.secret_index),
            Err(e) => {
                let reason = match e {
                    VerifyError::MissingHeader(_) => Reason::MissingSignatureHeaders,
                    VerifyError::InvalidWebhookId => Reason::InvalidWebhookId,
                    VerifyError::InvalidTimestamp => Reason::InvalidTimestamp,
                    VerifyError::StaleTimestamp { .. } => Reason::StaleTimestamp,
                    VerifyError::InvalidSignature => Reason::InvalidSignature,
                };
                return reject(handled, reason, e.to_string());
            }
        }
        let (Some(webhook_id), Ok(text)) = (handled.webhook_id.clone(), std::str::from_utf8(&body))
        else {
            return reject(
                handled,
                Reason::InvalidBody,
                "the body is not UTF-8 text; SQS carries text only".into(),
            );
        };
        if !sqs_accepts(text) {
            return reject(
                handled,
                Reason::InvalidBody,
                "the body holds characters SQS does not accept (control characters other than tab, LF, CR)".into(),
            );
        }
        match self.queue.send(text, &webhook_id).await {
            Ok(message_id) => {
                handled.response = problem::accepted(&message_id);
                handled.message_id = Some(message_id);
                handled
            }
            Err(e) => {
                tracing::warn!(error = %e, webhook_id = %webhook_id, "the notification queue refused the webhook");
                reject(
                    handled,
                    Reason::QueueUnavailable,
                    "the notification could not be queued; retry later".into(),
                )
            }
        }
    }

    /// Answers one invocation's event, read by the ingress itself ([`crate::read::read_event`]):
    /// a request that reads is answered as [`Ingress::answer`] does; one whose headers (or
    /// shape) the typed deserialiser would refuse is answered `400` (`invalid_header` or
    /// `invalid_request`), logged the same way, and never quoted. What it came to, for the
    /// invocation's counters ([`counters`]).
    pub async fn answer_event(&self, event: serde_json::Value) -> Handled {
        let started = Instant::now();
        match crate::read::read_event(event) {
            Ok(request) => self.answer(&request).await,
            Err(unreadable) => {
                let handled = Handled {
                    response: Problem::new(unreadable.reason, unreadable.detail).response(),
                    rejected: Some(unreadable.reason),
                    webhook_id: unreadable.webhook_id,
                    message_id: None,
                    secret_index: None,
                    body_bytes: unreadable.body_bytes,
                };
                let request_id = unreadable.api_request_id.unwrap_or_default();
                record(&handled, started, &request_id);
                handled
            }
        }
    }

    /// [`Ingress::answer_event`]'s answer alone.
    pub async fn respond_event(&self, event: serde_json::Value) -> ApiGatewayV2httpResponse {
        self.answer_event(event).await.response
    }

    /// Answers one request and logs its one line (outcome, status, `webhook-id` when valid and
    /// signed (else its keyed digest), SQS message id, the secret's index, body bytes, latency in
    /// ms). What it came to, for the invocation's counters ([`counters`]).
    pub async fn answer(&self, request: &ApiGatewayV2httpRequest) -> Handled {
        let started = Instant::now();
        let handled = self.handle(request).await;
        let request_id = request.request_context.request_id.as_deref().unwrap_or("");
        record(&handled, started, request_id);
        handled
    }

    /// [`Ingress::answer`]'s answer alone.
    pub async fn respond(&self, request: &ApiGatewayV2httpRequest) -> ApiGatewayV2httpResponse {
        self.answer(request).await.response
    }
}

/// The counters of one answered request, as the Lambda wiring writes them in the invocation's
/// EMF documents: `(metric, Reason dimension, value)`. [`METRIC_ACCEPTED`] always (0 or 1, an
/// explicit zero for the dashboards' sums) with no `Reason`; [`METRIC_REJECTED`] = 1 with its
/// [`METRIC_REASON_DIMENSION`] when refused.
pub fn counters(handled: &Handled) -> Vec<(&'static str, Option<&'static str>, u64)> {
    let mut counters = vec![(METRIC_ACCEPTED, None, u64::from(handled.rejected.is_none()))];
    if let Some(reason) = handled.rejected {
        counters.push((METRIC_REJECTED, Some(reason.code()), 1));
    }
    counters
}

/// Logs the one line of a request answered since `started` (see [`Ingress::answer`]).
fn record(handled: &Handled, started: Instant, api_request_id: &str) {
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    // The `webhook-id` is the sender's text: logged as it is only from a sender whose signature
    // verified (and in its declared format, `signature::valid_webhook_id`); from anyone else only
    // by its keyed digest (no text an unauthenticated party chose reaches a log line).
    let verified = handled.secret_index.is_some();
    let unverified_id = handled
        .webhook_id
        .as_deref()
        .filter(|_| !verified)
        .map(|id| gate::idempotency_key::answer_digest(id.as_bytes()));
    tracing::info!(
        outcome = handled.outcome(),
        status = handled.status(),
        webhook_id = handled
            .webhook_id
            .as_deref()
            .filter(|_| verified)
            .unwrap_or(""),
        webhook_id_digest = unverified_id.as_deref().unwrap_or(""),
        message_id = handled.message_id.as_deref().unwrap_or(""),
        secret_index = handled.secret_index.map_or(-1, |i| i as i64),
        body_bytes = handled.body_bytes,
        latency_ms = (latency_ms * 1000.0).round() / 1000.0,
        api_request_id,
        "webhook"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request's counters: accepted always (0 or 1), rejected with its reason when refused.
    #[test]
    fn the_counters_of_one_request() {
        let handled = |rejected| Handled {
            response: ApiGatewayV2httpResponse::default(),
            rejected,
            webhook_id: None,
            message_id: None,
            secret_index: None,
            body_bytes: 0,
        };
        assert_eq!(counters(&handled(None)), [(METRIC_ACCEPTED, None, 1)]);
        assert_eq!(
            counters(&handled(Some(Reason::StaleTimestamp))),
            [
                (METRIC_ACCEPTED, None, 0),
                (METRIC_REJECTED, Some("stale_timestamp"), 1)
            ]
        );
    }

    #[test]
    fn media_types() {
        for ok in [
            "application/json",
            "Application/JSON",
            "application/json; charset=utf-8",
            "application/json;charset=\"UTF-8\"",
            "application/json; foo=bar",
        ] {
            assert!(is_json_media_type(ok), "{ok}");
        }
        for bad in [
            "",
            "text/plain",
            "application/jsonx",
            "application/x-www-form-urlencoded",
            "application/json; charset=latin1",
            "application/problem+json",
        ] {
            assert!(!is_json_media_type(bad), "{bad}");
        }
    }

    #[test]
    fn sqs_characters() {
        assert!(sqs_accepts("{\"a\":\"tab\there\\n ü €  😀\"}\r\n"));
        assert!(!sqs_accepts("a\u{0}b"));
        assert!(!sqs_accepts("a\u{1B}b"));
        assert!(!sqs_accepts("a\u{FFFE}b"));
    }
}
