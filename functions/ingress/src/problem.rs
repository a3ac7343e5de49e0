//! The ingress's answers: `202` with `{"queued": true, "message_id": ...}` once SQS accepted the
//! body, else an RFC 9457 problem document (`Content-Type: application/problem+json`) whose
//! `type` names the reason (a `tag:` URI, RFC 4151, not dereferenceable), with `title`, `status`,
//! `detail` and the extension member `reason` (the same code as the log line's `outcome` and the
//! `WebhooksRejected` metric's `Reason` dimension). A problem never echoes request content.

use aws_lambda_events::encodings::Body;
use aws_lambda_events::event::apigw::ApiGatewayV2httpResponse;
use http::header::{HeaderValue, CONTENT_TYPE, WWW_AUTHENTICATE};
use serde::Serialize;

/// Why a request was not accepted: the outcome code of the log line and the `Reason` dimension
/// of `WebhooksRejected`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// `401`: `webhook-id`, `webhook-timestamp` or `webhook-signature` missing.
    MissingSignatureHeaders,
    /// `401`: no signature matches an active secret.
    InvalidSignature,
    /// `400`: `webhook-id` is not 1 to 256 characters of `A-Z a-z 0-9 _ - . :`.
    InvalidWebhookId,
    /// `400`: `webhook-timestamp` is not integer epoch seconds.
    InvalidTimestamp,
    /// `400`: `webhook-timestamp` is more than 5 minutes from the receiver's clock.
    StaleTimestamp,
    /// `400`: no body.
    EmptyBody,
    /// `400`: a body API Gateway marked base64 that does not decode, or (signed) a body SQS
    /// cannot carry: not UTF-8, or characters outside SQS's allowed set.
    InvalidBody,
    /// `413`: the body is larger than the consumer's limit (`crate::handler::MAX_BODY_BYTES`).
    BodyTooLarge,
    /// `415`: the content type is not `application/json` (UTF-8).
    UnsupportedMediaType,
    /// `503`: `SendMessage` failed; the sender retries.
    QueueUnavailable,
    /// `400`: a header's name or value is not valid HTTP (a control character such as NUL,
    /// U+0001 or a line break in the value; RFC 9110 §5.5): the event is read by the ingress
    /// itself, never by the typed deserialiser, which would fail the invocation
    /// (`crate::read`).
    InvalidHeader,
    /// `400`: the event is not an API Gateway HTTP API request the ingress can read (a field of
    /// another type than payload format 2.0 gives it).
    InvalidRequest,
}

impl Reason {
    /// Every reason, for documentation and tests.
    pub const ALL: [Reason; 12] = [
        Reason::MissingSignatureHeaders,
        Reason::InvalidSignature,
        Reason::InvalidWebhookId,
        Reason::InvalidTimestamp,
        Reason::StaleTimestamp,
        Reason::EmptyBody,
        Reason::InvalidBody,
        Reason::BodyTooLarge,
        Reason::UnsupportedMediaType,
        Reason::QueueUnavailable,
        Reason::InvalidHeader,
        Reason::InvalidRequest,
    ];

    /// The code (`snake_case`), as logged and as the metric dimension.
    pub fn code(self) -> &'static str {
        match self {
            Reason::MissingSignatureHeaders => "missing_signature_headers",
            Reason::InvalidSignature => "invalid_signature",
            Reason::InvalidWebhookId => "invalid_webhook_id",
            Reason::InvalidTimestamp => "invalid_timestamp",
            Reason::StaleTimestamp => "stale_timestamp",
            Reason::EmptyBody => "empty_body",
            Reason::InvalidBody => "invalid_body",
            Reason::BodyTooLarge => "body_too_large",
            Reason::UnsupportedMediaType => "unsupported_media_type",
            Reason::QueueUnavailable => "queue_unavailable",
            Reason::InvalidHeader => "invalid_header",
            Reason::InvalidRequest => "invalid_request",
        }
    }

    /// The HTTP status.
    pub fn status(self) -> u16 {
        match self {
            Reason::MissingSignatureHeaders | Reason::InvalidSignature => 401,
            Reason::InvalidWebhookId
            | Reason::InvalidTimestamp
            | Reason::StaleTimestamp
            | Reason::EmptyBody
            | Reason::InvalidBody
            | Reason::InvalidHeader
            | Reason::InvalidRequest => 400,
            Reason::BodyTooLarge => 413,
            Reason::UnsupportedMediaType => 415,
            Reason::QueueUnavailable => 503,
        }
    }

    /// The problem's short, fixed summary.
    pub fn title(self) -> &'static str {
        match self {
            Reason::MissingSignatureHeaders => "Missing Standard Webhooks signature headers",
            Reason::InvalidSignature => "Invalid webhook signature",
            Reason::InvalidWebhookId => "Invalid webhook-id",
            Reason::InvalidTimestamp => "Invalid webhook-timestamp",
            Reason::StaleTimestamp => "Stale webhook-timestamp",
            Reason::EmptyBody => "Empty body",
            Reason::InvalidBody => "Body cannot be queued",
            Reason::BodyTooLarge => "Body too large",
            Reason::UnsupportedMediaType => "Unsupported media type",
            Reason::QueueUnavailable => "Notification queue unavailable",
            Reason::InvalidHeader => "Invalid header",
            Reason::InvalidRequest => "Request cannot be read",
        }
    }

    /// The problem's `type` URI: `tag:exactly-once-gate,2026:webhooks/{code with '-'}`.
    pub fn type_uri(self) -> String {
        format!(
            "tag:exactly-once-gate,2026:webhooks/{}",
            self.code().replace('_', "-")
        )
    }
}

/// An RFC 9457 problem document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The problem type (URI).
    #[serde(rename = "type")]
    pub type_uri: String,
    /// The type's short summary.
    pub title: &'static str,
    /// The HTTP status.
    pub status: u16,
    /// This occurrence, in words; never request content.
    pub detail: String,
    /// Extension member: the reason code.
    pub reason: Reason,
}

impl Problem {
    /// The problem for `reason` with `detail`.
    pub fn new(reason: Reason, detail: impl Into<String>) -> Self {
        Self {
            type_uri: reason.type_uri(),
            title: reason.title(),
            status: reason.status(),
            detail: detail.into(),
            reason,
        }
    }

    /// The API Gateway (HTTP API, payload 2.0) response: the status, `application/problem+json`,
    /// and on a `401` the challenge `WWW-Authenticate: StandardWebhooks` (RFC 9110 §15.5.2
    /// requires one).
    pub fn response(&self) -> ApiGatewayV2httpResponse {
        let body = serde_json::to_string(self).unwrap_or_default();
        let mut response = json_response(self.status, "application/problem+json", body);
        if self.status == 401 {
            response.headers.insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("StandardWebhooks realm=\"webhooks/portbase\""),
            );
        }
        response
    }
}

/// The `202` answer once SQS accepted the body: `{"queued": true, "message_id": SQS message id}`.
pub fn accepted(message_id: &str) -> ApiGatewayV2httpResponse {
    let body = serde_json::json!({ "queued": true, "message_id": message_id }).to_string();
    json_response(202, "application/json", body)
}

/// A response with a JSON body of `content_type`.
fn json_response(
    status: u16,
    content_type: &'static str,
    body: String,
) -> ApiGatewayV2httpResponse {
    let mut response = ApiGatewayV2httpResponse::default();
    response.status_code = i64::from(status);
    response
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response.body = Some(Body::Text(body));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_is_rfc_9457_json() {
        let r = Problem::new(Reason::InvalidSignature, "no signature matches").response();
        assert_eq!(r.status_code, 401);
        assert_eq!(r.headers["content-type"], "application/problem+json");
        assert_eq!(
            r.headers["www-authenticate"],
            "StandardWebhooks realm=\"webhooks/portbase\""
        );
        let Some(Body::Text(body)) = r.body else {
            panic!("no body")
        };
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&body).unwrap(),
            serde_json::json!({
                "type": "tag:exactly-once-gate,2026:webhooks/invalid-signature",
                "title": "Invalid webhook signature",
                "status": 401,
                "detail": "no signature matches",
                "reason": "invalid_signature"
            })
        );
    }

    #[test]
    fn every_reason_has_its_status_and_a_distinct_code() {
        let statuses: Vec<(&str, u16)> =
            Reason::ALL.iter().map(|r| (r.code(), r.status())).collect();
        assert_eq!(
            statuses,
            vec![
                ("missing_signature_headers", 401),
                ("invalid_signature", 401),
                ("invalid_webhook_id", 400),
                ("invalid_timestamp", 400),
                ("stale_timestamp", 400),
                ("empty_body", 400),
                ("invalid_body", 400),
                ("body_too_large", 413),
                ("unsupported_media_type", 415),
                ("queue_unavailable", 503),
                ("invalid_header", 400),
                ("invalid_request", 400),
            ]
        );
        for r in Reason::ALL {
            assert_eq!(serde_json::to_value(r).unwrap(), r.code());
        }
    }
}
