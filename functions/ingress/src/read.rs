//! Reading the invocation's event ourselves, so that no request fails before the ingress's own
//! checks run.
//!
//! `lambda_runtime` deserialises the event into the handler's type before the handler is called.
//! `aws_lambda_events` reads each header into an `http::HeaderValue`, which refuses a control
//! character (NUL, U+0001 to U+001F other than tab, DEL; RFC 9110 §5.5); the error it raises
//! quotes the refused value (`invalid value: string "...", expected ...`), the runtime logs that
//! error at ERROR and reports it to the Runtime API, and API Gateway answers `500`, which a
//! sender retries for ever, uncounted. So the function takes the event as any JSON
//! (`serde_json::Value`, which cannot fail), and [`read_event`] checks every header name and
//! value with `http`'s own rules before the typed deserialisation: a header it refuses is a `400`
//! `invalid_header`, an event that still does not read as an HTTP API request a `400`
//! `invalid_request`. Neither quotes a value: the problem and the log line name the header only
//! when it is one of [`NAMED_HEADERS`], and carry the `webhook-id` only when it is valid.

use aws_lambda_events::event::apigw::ApiGatewayV2httpRequest;
use http::{HeaderName, HeaderValue};
use serde_json::Value;

use crate::problem::Reason;
use crate::signature;

/// The headers a problem or a log line may name (their names are the ingress's, not the
/// sender's); any other is "another header".
pub const NAMED_HEADERS: [&str; 5] = [
    signature::HEADER_ID,
    signature::HEADER_TIMESTAMP,
    signature::HEADER_SIGNATURE,
    "content-type",
    "content-length",
];

/// Most header fields (names, and each value of a list) an event may carry. `http`'s `HeaderMap`,
/// which the typed deserialiser fills, panics past 24,576 fields (its `MAX_SIZE`, 32,768 slots);
/// API Gateway's HTTP API limits a request's header values to 10,240 bytes together (AWS, "Quotas
/// for HTTP APIs"), so no request it forwards comes near this bound.
pub const MAX_HEADER_FIELDS: usize = 1024;

/// An event the ingress refuses before its checks: the reason, the problem's detail, and what the
/// log line may carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// [`Reason::InvalidHeader`] or [`Reason::InvalidRequest`].
    pub reason: Reason,
    /// The problem's detail (no value of the request).
    pub detail: String,
    /// The `webhook-id`, when present and valid (`signature::valid_webhook_id`).
    pub webhook_id: Option<String>,
    /// API Gateway's request id (`requestContext.requestId`), when it is a string.
    pub api_request_id: Option<String>,
    /// The body's length in bytes as API Gateway sent it (before any base64 decoding), when it
    /// is a string; else 0.
    pub body_bytes: usize,
}

/// The name a problem may give the header `name`: itself when it is one of
/// [`NAMED_HEADERS`] (compared case-insensitively), else `None`.
fn nameable(name: &str) -> Option<&'static str> {
    NAMED_HEADERS
        .into_iter()
        .find(|known| known.eq_ignore_ascii_case(name))
}

/// Whether `value` is a header value `aws_lambda_events` reads: a string `http` accepts, or a
/// list of them.
fn valid_value(value: &Value) -> bool {
    let one = |v: &Value| v.as_str().is_some_and(|s| HeaderValue::from_str(s).is_ok());
    match value {
        Value::Array(values) => values.iter().all(one),
        other => one(other),
    }
}

/// The first header of `headers` (`headers` or `multiValueHeaders`: null or an object) that
/// `aws_lambda_events` would refuse: its problem detail.
fn header_problem(headers: Option<&Value>) -> Option<String> {
    let map = match headers {
        None | Some(Value::Null) => return None,
        Some(Value::Object(map)) => map,
        Some(_) => return Some("the headers are not a map of names to values".into()),
    };
    let fields: usize = map.values().map(|v| v.as_array().map_or(1, Vec::len)).sum();
    if fields > MAX_HEADER_FIELDS {
        return Some(format!(
            "the request has {fields} header fields; the limit is {MAX_HEADER_FIELDS}"
        ));
    }
    for (name, value) in map {
        let named = nameable(name);
        if HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Some("a header name is not an HTTP token (RFC 9110 §5.1)".into());
        }
        if !valid_value(value) {
            let which = named.map_or("another header".to_string(), |n| format!("header `{n}`"));
            return Some(format!(
                "the value of {which} is not a valid HTTP field value: it holds a control \
                 character (NUL, U+0001 to U+001F other than tab, a line break, or DEL; RFC 9110 \
                 §5.5) or is not text"
            ));
        }
    }
    None
}

/// Reads one invocation's event as an HTTP API request (payload format 2.0), or says why it
/// cannot be read (module docs). Never panics, never quotes a value.
///
/// # Errors
/// [`Unreadable`]: a header `http` refuses (`invalid_header`), or an event that is not an HTTP
/// API request (`invalid_request`).
pub fn read_event(event: Value) -> Result<ApiGatewayV2httpRequest, Unreadable> {
    let webhook_id = event
        .get("headers")
        .and_then(|h| h.get(signature::HEADER_ID))
        .and_then(Value::as_str)
        .filter(|id| signature::valid_webhook_id(id))
        .map(str::to_string);
    let api_request_id = event
        .get("requestContext")
        .and_then(|c| c.get("requestId"))
        .and_then(Value::as_str)
        .filter(|id| id.len() <= 128 && id.chars().all(|c| c.is_ascii_graphic()))
        .map(str::to_string);
    let body_bytes = event
        .get("body")
        .and_then(Value::as_str)
        .map_or(0, str::len);
    let unreadable = |reason, detail| Unreadable {
        reason,
        detail,
        webhook_id: webhook_id.clone(),
        api_request_id: api_request_id.clone(),
        body_bytes,
    };
    if !event.is_object() {
        return Err(unreadable(
            Reason::InvalidRequest,
            "the event is not an API Gateway HTTP API request".into(),
        ));
    }
    for field in ["headers", "multiValueHeaders"] {
        if let Some(detail) = header_problem(event.get(field)) {
            return Err(unreadable(Reason::InvalidHeader, detail));
        }
    }
    serde_json::from_value::<ApiGatewayV2httpRequest>(event).map_err(|_| {
        unreadable(
            Reason::InvalidRequest,
            "the event is not an API Gateway HTTP API request (payload format 2.0): a field has \
             another type"
                .into(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::SignedWebhook;
    use crate::signature::WebhookSecret;

    fn event() -> Value {
        let secret = WebhookSecret::parse(crate::event::LOCAL_SAMPLE_SECRET).unwrap();
        SignedWebhook::sign(&[secret], "msg_1", 1_800_000_000, "{}")
            .http_api_event(1_800_000_000_123, "req-1")
    }

    #[test]
    fn a_sound_event_reads_as_the_typed_request() {
        let request = read_event(event()).unwrap();
        assert_eq!(request.headers["webhook-id"], "msg_1");
        assert_eq!(request.body.as_deref(), Some("{}"));
    }

    /// Every control character the typed deserialiser refuses, in each kind of header: an
    /// `invalid_header` naming the header (or "another header"), never the value; the
    /// `webhook-id` kept only when it is valid.
    #[test]
    fn a_control_character_in_any_header_is_invalid_header() {
        for bad in ["\u{1}", "\u{0}", "\n", "\r\n", "\u{7f}"] {
            for (header, named) in [
                ("webhook-signature", "header `webhook-signature`"),
                ("webhook-id", "header `webhook-id`"),
                ("webhook-timestamp", "header `webhook-timestamp`"),
                ("x-custom", "another header"),
            ] {
                let mut e = event();
                let value = format!("SECRET{bad}VALUE");
                e["headers"][header] = Value::String(value.clone());
                assert!(
                    serde_json::from_value::<ApiGatewayV2httpRequest>(e.clone()).is_err(),
                    "the typed deserialiser refuses {bad:?}"
                );
                let u = read_event(e).unwrap_err();
                assert_eq!(u.reason, Reason::InvalidHeader);
                assert!(u.detail.contains(named), "{}", u.detail);
                assert!(!u.detail.contains("SECRET"), "{}", u.detail);
                let id = (header != "webhook-id").then(|| "msg_1".to_string());
                assert_eq!(u.webhook_id, id);
                assert_eq!(u.api_request_id.as_deref(), Some("req-1"));
            }
        }
        // A tab and non-ASCII text are valid field values.
        let mut e = event();
        e["headers"]["x-custom"] = Value::String("a\tb ü".into());
        assert!(read_event(e).is_ok());
    }

    #[test]
    fn other_unreadable_events_are_invalid_request() {
        let mut bad_name = event();
        bad_name["headers"]["bad name"] = Value::String("x".into());
        assert_eq!(
            read_event(bad_name).unwrap_err().reason,
            Reason::InvalidHeader
        );
        let mut bad_type = event();
        bad_type["isBase64Encoded"] = Value::String("SECRET".into());
        let u = read_event(bad_type).unwrap_err();
        assert_eq!(u.reason, Reason::InvalidRequest);
        assert!(!u.detail.contains("SECRET"));
        assert_eq!(u.webhook_id.as_deref(), Some("msg_1"));
        assert_eq!(
            read_event(Value::String("SECRET".into()))
                .unwrap_err()
                .reason,
            Reason::InvalidRequest
        );
    }
}
