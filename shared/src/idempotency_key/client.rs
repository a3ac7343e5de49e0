//! The reqwest side of the `Idempotency-Key` contract (cargo feature `http`): a client builder
//! that follows no redirect, an answer read up to [`MAX_ANSWER_BYTES`], a failed request named by
//! its kind only, and [`call`] / [`lookup`], which send a request and classify what came back
//! with [`super::classify_call`] / [`super::classify_lookup`] ([`call_with`] for a server whose
//! documented statuses depart from the draft). [`exchange`] sends a request as it is: it adds no
//! `Idempotency-Key`, so a call under a key goes through [`call`] or [`call_with`].
//!
//! An integration builds its request (URL, method, body, its own headers such as the bearer
//! token, which reqwest's `bearer_auth` marks sensitive) and hands it here:
//!
//! ```no_run
//! # async fn example(record: &gate::record::IdempotencyRecord) -> Result<(), reqwest::Error> {
//! use gate::idempotency_key::{client, JsonIdAt};
//! const JOBS: JsonIdAt = JsonIdAt::new("job server", "/id");
//! let http = client::builder("my-integration/1").build()?;
//! let request = http.post("https://jobs.example/jobs").body(record.request.clone());
//! let outcome = client::call(request, &record.op_key, &JOBS).await;
//! # let _ = outcome; Ok(()) }
//! ```

use reqwest::header::CONTENT_TYPE;
use reqwest::{RequestBuilder, Response, Url};
use std::net::IpAddr;

use super::classify::{
    classify_call, classify_call_failure, classify_lookup, classify_lookup_failure, Answer,
    AnswerReader, RequestFailure,
};
use super::{header_value, HEADER};
use crate::effect::{AnswerDetail, CallOutcome, LookupOutcome};

/// Largest answer body read, in bytes (64 KiB); the rest is never read. A `2xx` cut there is not
/// JSON: transient.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// A reqwest client builder for a server under `Idempotency-Key`: it sends `user_agent` and
/// follows **no** redirect (a `3xx` is an answer, transient, never a second request that would
/// carry the credentials and the request's secrets to a host the configuration did not name).
/// Add the timeouts (keep the whole request well under the lease) and build.
pub fn builder(user_agent: &str) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(user_agent)
}

/// Whether `url` may be used as a server's base URL: `https://` with a host, or `http://` to
/// a loopback host (`localhost`, `127.0.0.0/8`, `[::1]`) for local runs and tests. The URL is
/// parsed (WHATWG URL rules, as reqwest sends it), so `http://127.0.0.1:80@evil.example` is a
/// request to `evil.example` and refused. Never allowed: user info (`user:password@`, a
/// credential in a URL ends up in logs and error messages), a query or a fragment (the client
/// appends its path and query), white space or a control character anywhere (the parser
/// strips a trailing space that a client, appending its path, would send as `%20`).
pub fn base_url_allowed(url: &str) -> bool {
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return false;
    }
    let Ok(parsed) = Url::parse(url) else {
        return false;
    };
    if !parsed.username().is_empty()
        || parsed.password().is_some()
        || parsed.query().is_some()
        || parsed.fragment().is_some()
    {
        return false;
    }
    let Some(host) = parsed.host_str().filter(|h| !h.is_empty()) else {
        return false;
    };
    match parsed.scheme() {
        "https" => true,
        "http" => {
            host.eq_ignore_ascii_case("localhost")
                || host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
        _ => false,
    }
}

/// An answer as read: status, `Content-Type` and at most [`MAX_ANSWER_BYTES`] of the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The HTTP status code.
    pub status: u16,
    /// The `Content-Type` header, if it is visible ASCII.
    pub content_type: Option<String>,
    /// The body, cut at [`MAX_ANSWER_BYTES`].
    pub body: Vec<u8>,
}

impl Received {
    /// The answer for the classification.
    pub fn answer(&self) -> Answer<'_> {
        Answer::new(self.status, &self.body).with_content_type(self.content_type.as_deref())
    }
}

/// The kind of a reqwest error; nothing of its text (the URL of a lookup carries the key, a base
/// URL is configuration, and an error's source may quote what the server sent).
pub fn failure_of(error: &reqwest::Error, status: Option<u16>) -> RequestFailure {
    match status {
        Some(status) if error.is_body() || error.is_decode() || error.is_timeout() => {
            RequestFailure::Body { status }
        }
        _ if error.is_timeout() => RequestFailure::Timeout,
        _ if error.is_connect() => RequestFailure::Connect,
        Some(status) => RequestFailure::Body { status },
        None => RequestFailure::Other,
    }
}

/// Sends `request` as it is (no `Idempotency-Key` added: a side effect goes through [`call`] or
/// [`call_with`], which send the key) and reads its answer, at most [`MAX_ANSWER_BYTES`] of the
/// body.
///
/// # Errors
/// The [`RequestFailure`] kind when no whole answer came back.
pub async fn exchange(request: RequestBuilder) -> Result<Received, RequestFailure> {
    let response = request.send().await.map_err(|e| failure_of(&e, None))?;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = read_capped(response)
        .await
        .map_err(|e| failure_of(&e, Some(status)))?;
    Ok(Received {
        status,
        content_type,
        body,
    })
}

async fn read_capped(mut response: Response) -> Result<Vec<u8>, reqwest::Error> {
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

/// Sends `request` with `Idempotency-Key: "key"` ([`header_value`]) and classifies the answer
/// ([`classify_call`]) or the failure ([`classify_call_failure`]). A key the header cannot carry
/// is never sent: [`CallOutcome::Permanent`] with status `0` (the key does not change, so no
/// retry could send it; nothing was made).
pub async fn call<R: AnswerReader + ?Sized>(
    request: RequestBuilder,
    key: &str,
    reader: &R,
) -> CallOutcome {
    call_with(request, key, reader, |_| None).await
}

/// [`call`] for a server that departs from the draft on statuses its documentation names (a
/// `422` that refuses the operation rather than the key, a `409` for any reused key): sends
/// `request` with `Idempotency-Key: "key"` exactly as [`call`] does, then asks `departs` first
/// about a whole answer. `Some(outcome)` is the server's meaning; `None` hands the answer to the
/// draft's table ([`classify_call`]). A failed request (no whole answer) is always
/// [`classify_call_failure`]'s. Keep `departs` to the statuses the server documents.
///
/// ```no_run
/// # async fn example(request: reqwest::RequestBuilder, record: &gate::record::IdempotencyRecord) {
/// use gate::effect::{AnswerDetail, CallOutcome};
/// use gate::idempotency_key::{client, JsonIdAt};
/// const REFUNDS: JsonIdAt = JsonIdAt::new("payments API", "/id");
/// let outcome = client::call_with(request, &record.op_key, &REFUNDS, |answer| {
///     (answer.status == 422).then(|| CallOutcome::Declined {
///         status: 422,
///         detail: AnswerDetail::new("payments API answered 422: the refund was refused"),
///     })
/// })
/// .await;
/// # let _ = outcome; }
/// ```
pub async fn call_with<R, F>(
    request: RequestBuilder,
    key: &str,
    reader: &R,
    departs: F,
) -> CallOutcome
where
    R: AnswerReader + ?Sized,
    F: FnOnce(&Received) -> Option<CallOutcome>,
{
    let value = match header_value(key) {
        Ok(value) => value,
        Err(why) => {
            return CallOutcome::Permanent {
                status: 0,
                detail: AnswerDetail::new(format!("nothing sent to {}: {why}", reader.server())),
            }
        }
    };
    match exchange(request.header(HEADER, value)).await {
        Ok(received) => {
            departs(&received).unwrap_or_else(|| classify_call(&received.answer(), reader))
        }
        Err(failure) => classify_call_failure(failure, reader),
    }
}

/// Sends a lookup `request` (the integration puts the key where its server wants it: a query, a
/// path segment) and classifies the answer ([`classify_lookup`]) or the failure.
pub async fn lookup<R: AnswerReader + ?Sized>(
    request: RequestBuilder,
    reader: &R,
) -> LookupOutcome {
    match exchange(request).await {
        Ok(received) => classify_lookup(&received.answer(), reader),
        Err(failure) => classify_lookup_failure(failure, reader),
    }
}
