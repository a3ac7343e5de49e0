//! `gate-http`: the reqwest side of the `Idempotency-Key` contract. Depends on `gate` (the
//! classification) and `reqwest`; no features. A client builder that follows no redirect, an
//! answer read up to [`MAX_ANSWER_BYTES`], a failed request named by its kind only, and [`call`]
//! / [`lookup`], which send a request and classify what came back with
//! [`gate::idempotency_key::classify_call`] / [`gate::idempotency_key::classify_lookup`]
//! ([`call_with`] for a server whose documented statuses depart from the draft). [`exchange`]
//! sends a request as it is, adding no `Idempotency-Key`. A call whose connection failed after
//! the request may have been sent is sent once more, the same bytes under the same key
//! ([`is_lost_connection`]; on a new connection through [`ServerClient`]).
//!
//! Use: an integration builds its request and hands it to [`call`] (an example there).
#![warn(missing_docs)]

use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};
use reqwest::{RequestBuilder, Response, Url};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use gate::effect::{AnswerDetail, CallOutcome, LookupOutcome};
use gate::idempotency_key::{
    classify_call, classify_call_failure, classify_lookup, classify_lookup_failure, Answer,
    AnswerReader, RequestFailure,
};
use gate::idempotency_key::{header_value, HEADER};

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
    /// The `Retry-After` header (RFC 9110 §10.2.3), if it is visible ASCII: the classification
    /// reads it on a `429` or a `503` ([`gate::idempotency_key::parse_retry_after`]).
    pub retry_after: Option<String>,
}

impl Received {
    /// The answer for the classification.
    pub fn answer(&self) -> Answer<'_> {
        Answer::new(self.status, &self.body)
            .with_content_type(self.content_type.as_deref())
            .with_retry_after(self.retry_after.as_deref())
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
    read_answer(request.send())
        .await
        .map_err(|(e, status)| failure_of(&e, status))
}

/// A failed request: reqwest's error and the answer's status if it had arrived.
type Failed = (reqwest::Error, Option<u16>);

/// The answer of `sent`, read up to [`MAX_ANSWER_BYTES`].
async fn read_answer(
    sent: impl std::future::Future<Output = Result<Response, reqwest::Error>>,
) -> Result<Received, Failed> {
    let response = sent.await.map_err(|e| (e, None))?;
    let status = response.status().as_u16();
    let header = |name| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let content_type = header(CONTENT_TYPE);
    let retry_after = header(RETRY_AFTER);
    let body = read_capped(response).await.map_err(|e| (e, Some(status)))?;
    Ok(Received {
        status,
        content_type,
        body,
        retry_after,
    })
}

/// Whether a request failed on its connection after it may have been sent, before any answer
/// came: the connection reset or closed before the answer (hyper's `IncompleteMessage`, a
/// keep-alive connection that died while the Lambda environment was frozen: aws-lambda-web-adapter
/// #830), an HTTP/2 `GOAWAY`. Not a timeout (the server may still be working: a re-send would
/// wait as long again), not a connect failure (nothing was sent), not a request reqwest could not
/// build.
pub fn is_lost_connection(error: &reqwest::Error, status: Option<u16>) -> bool {
    status.is_none()
        && error.is_request()
        && !error.is_timeout()
        && !error.is_connect()
        && !error.is_builder()
}

/// How the one re-send after a lost connection goes.
#[derive(Debug, Clone, Copy, Default)]
struct Resend<'a> {
    /// A client that keeps no idle connection (so a new connection); `None`: the request's own.
    fresh: Option<&'a reqwest::Client>,
    /// The first request and its re-send together end within this: the re-send gets what is
    /// left of it, and is not sent when nothing is. `None`: the client's own timeout each.
    limit: Option<Duration>,
}

/// Sends `request` and reads its answer as [`exchange`] does; when the connection failed after
/// the request may have been sent ([`is_lost_connection`]), sends the same request once more:
/// the same bytes and headers (its `Idempotency-Key` among them), through `resend.fresh` (a
/// client that keeps no idle connection, so a new connection: [`ServerClient`]) or else through
/// the client that built `request` (the failed connection is never reused; another idle one may
/// be), within what is left of `resend.limit`. A server that honours the key answers the re-send
/// with the first request's stored answer if it ran, or runs it once if it had not: never a
/// second effect.
async fn exchange_resending(
    request: RequestBuilder,
    resend: Resend<'_>,
) -> Result<Received, RequestFailure> {
    let started = Instant::now();
    let again = request.try_clone();
    let first = read_answer(request.send()).await;
    let (error, status) = match first {
        Ok(received) => return Ok(received),
        Err(failed) => failed,
    };
    let Some(mut again) = again.filter(|_| is_lost_connection(&error, status)) else {
        return Err(failure_of(&error, status));
    };
    if let Some(limit) = resend.limit {
        let left = limit.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(failure_of(&error, status));
        }
        again = again.timeout(left);
    }
    tracing::warn!(
        failure = ?failure_of(&error, status),
        "the connection failed after the request may have been sent: sent once more under the \
         same key on a new connection"
    );
    let second = match resend.fresh {
        Some(fresh) => match again.build_split() {
            (_, Ok(built)) => read_answer(fresh.execute(built)).await,
            (_, Err(e)) => Err((e, None)),
        },
        None => read_answer(again.send()).await,
    };
    second.map_err(|(e, status)| failure_of(&e, status))
}

/// A server's reqwest clients: every request through a pooled client (connections kept alive),
/// and the one re-send after a lost connection ([`is_lost_connection`]) through a second client
/// with the same settings that keeps no idle connection, so the re-send never meets a pooled
/// connection that died with the first (a Lambda environment frozen between invocations kills
/// them all at once). [`ServerClient::call`] and [`ServerClient::call_with`] are [`call`] and
/// [`call_with`] with that re-send.
#[derive(Debug, Clone)]
pub struct ServerClient {
    pooled: reqwest::Client,
    fresh: reqwest::Client,
    limit: Option<Duration>,
}

impl ServerClient {
    /// Both clients from [`builder`]`(user_agent)` with `configure` applied (timeouts, TLS
    /// roots); the re-send's with `pool_max_idle_per_host(0)` besides.
    ///
    /// # Errors
    /// reqwest's, if a client cannot be built.
    pub fn build(
        user_agent: &str,
        configure: impl Fn(reqwest::ClientBuilder) -> reqwest::ClientBuilder,
    ) -> Result<Self, reqwest::Error> {
        Ok(Self {
            pooled: configure(builder(user_agent)).build()?,
            fresh: configure(builder(user_agent))
                .pool_max_idle_per_host(0)
                .build()?,
            limit: None,
        })
    }

    /// The same clients, with a call and its re-send ending together within `limit` (the
    /// re-send gets what is left of it, none when nothing is): a caller that sized its lease
    /// and its deadline margin for one request passes that request's timeout, so the re-send
    /// never outlives them.
    pub fn with_exchange_limit(mut self, limit: Duration) -> Self {
        self.limit = Some(limit);
        self
    }

    /// The pooled client, to build requests with.
    pub fn pooled(&self) -> &reqwest::Client {
        &self.pooled
    }

    /// [`call`], re-sending once on a new connection after a lost connection.
    pub async fn call<R: AnswerReader + ?Sized>(
        &self,
        request: RequestBuilder,
        key: &str,
        reader: &R,
    ) -> CallOutcome {
        self.call_with(request, key, reader, |_| None).await
    }

    /// [`call_with`], re-sending once on a new connection after a lost connection.
    pub async fn call_with<R, F>(
        &self,
        request: RequestBuilder,
        key: &str,
        reader: &R,
        departs: F,
    ) -> CallOutcome
    where
        R: AnswerReader + ?Sized,
        F: FnOnce(&Received) -> Option<CallOutcome>,
    {
        let resend = Resend {
            fresh: Some(&self.fresh),
            limit: self.limit,
        };
        keyed_call(request, key, reader, departs, resend).await
    }
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
/// retry could send it; nothing was made). A connection that failed after the request may have
/// been sent gets one re-send of the same bytes under the same key (on the same client;
/// [`ServerClient::call`] makes it on a new connection).
///
/// An integration builds its request (URL, method, body, its own headers such as the bearer
/// token, which reqwest's `bearer_auth` marks sensitive) and hands it here:
///
/// ```no_run
/// # async fn example(record: &gate::record::IdempotencyRecord) -> Result<(), reqwest::Error> {
/// use gate::idempotency_key::JsonIdAt;
/// const JOBS: JsonIdAt = JsonIdAt::new("job server", "/id");
/// let http = gate_http::builder("my-integration/1").build()?;
/// let request = http.post("https://jobs.example/jobs").body(record.request.clone());
/// let outcome = gate_http::call(request, &record.op_key, &JOBS).await;
/// # let _ = outcome; Ok(()) }
/// ```
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
/// use gate::idempotency_key::JsonIdAt;
/// const REFUNDS: JsonIdAt = JsonIdAt::new("payments API", "/id");
/// let outcome = gate_http::call_with(request, &record.op_key, &REFUNDS, |answer| {
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
    keyed_call(request, key, reader, departs, Resend::default()).await
}

/// [`call_with`]'s body; the re-send after a lost connection through `fresh` if given.
async fn keyed_call<R, F>(
    request: RequestBuilder,
    key: &str,
    reader: &R,
    departs: F,
    resend: Resend<'_>,
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
    match exchange_resending(request.header(HEADER, value), resend).await {
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
