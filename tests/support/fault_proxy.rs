//! A fault proxy in front of moto, on loopback: every request is forwarded as is and its answer
//! returned, except where a rule says otherwise:
//!
//! * [`Fault`]s on the first `n` requests of an operation (matched on the end of
//!   `X-Amz-Target`, e.g. `PutItem`): an answer held back after moto applied the write (the
//!   client's attempt times out and the SDK retries a request whose write already landed), an
//!   answer lost after it applied (a 500), or an error answered instead of forwarding (a write
//!   that meets a running transaction: `TransactionConflictException`, a cancellation
//!   `[None, TransactionConflict, None]`);
//! * DynamoDB's `ClientRequestToken` rules for `TransactWriteItems`, which moto lacks
//!   ([`crate::token_double`]), when started with [`FaultProxy::with_tokens`];
//! * a store that silently stops being conditional ([`FaultProxy::strip_conditions`]): every
//!   `PutItem` forwarded without its `ConditionExpression`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use crate::token_double::{
    cancellation_answer, error_answer, Answer, Decision, TokenDouble, TokenHash,
};

/// What the proxy does to a request a rule matches.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Applied upstream; the answer held back this long (past the client's attempt timeout).
    HoldAnswer(Duration),
    /// Applied upstream; the answer replaced by a 500 `InternalServerError`: the client cannot
    /// tell whether the write happened.
    LoseAnswer,
    /// Not forwarded: a 400 with this DynamoDB error code (e.g. `TransactionConflictException`:
    /// a plain write that met a running transaction). Nothing is written.
    Refuse(&'static str),
    /// Not forwarded: a `TransactionCanceledException` with these reason codes, one per item of
    /// the request in its order. Nothing is written.
    Cancel(Vec<&'static str>),
    /// Forwarded with the keys of its JSON objects in another order than the client serialised
    /// them: the same request built again, its maps iterated in another order (a `HashMap`'s
    /// order differs from one build to the next).
    ReorderMaps,
}

struct Rule {
    operation: String,
    left: usize,
    fault: Fault,
}

/// The proxy's rules and what it saw.
pub struct FaultProxy {
    upstream: String,
    client: reqwest::Client,
    rules: Mutex<Vec<Rule>>,
    tokens: Option<TokenDouble>,
    strip_conditions: AtomicBool,
    seen: Mutex<Vec<String>>,
    exchanges: Mutex<Vec<Exchange>>,
}

/// One request the proxy answered, and its answer.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// The operation (`PutItem`, `TransactWriteItems`, ...).
    pub operation: String,
    /// The request body as the client sent it.
    pub request: Bytes,
    /// The answer's HTTP status, as the client got it.
    pub status: u16,
    /// The answer's DynamoDB error code (the `__type` after `#`), if it is an error.
    pub error: Option<String>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` (e.g. moto's endpoint) on a free loopback port that holds
    /// the answers of the first `n` `operation` requests (`"PutItem"`, `"TransactWriteItems"`,
    /// ...) for `hold` after they were applied. Returns it and its endpoint URL.
    ///
    /// # Panics
    /// If the loopback port cannot be bound (test wiring).
    pub async fn start(
        upstream: &str,
        operation: &str,
        n: usize,
        hold: Duration,
    ) -> (Arc<Self>, String) {
        let (proxy, endpoint) = Self::serve(upstream, None).await;
        proxy.inject(operation, n, Fault::HoldAnswer(hold));
        (proxy, endpoint)
    }

    /// Starts a proxy to `upstream` with no fault rules that applies DynamoDB's
    /// `ClientRequestToken` rules to `TransactWriteItems`, comparing parameters as `hash` says.
    ///
    /// # Panics
    /// If the loopback port cannot be bound (test wiring).
    pub async fn with_tokens(upstream: &str, hash: TokenHash) -> (Arc<Self>, String) {
        Self::serve(upstream, Some(TokenDouble::new(hash))).await
    }

    /// Starts a proxy to `upstream` that forwards everything (add rules with
    /// [`FaultProxy::inject`]).
    ///
    /// # Panics
    /// If the loopback port cannot be bound (test wiring).
    pub async fn plain(upstream: &str) -> (Arc<Self>, String) {
        Self::serve(upstream, None).await
    }

    async fn serve(upstream: &str, tokens: Option<TokenDouble>) -> (Arc<Self>, String) {
        let proxy = Arc::new(Self {
            upstream: upstream.trim_end_matches('/').to_string(),
            client: reqwest::Client::new(),
            rules: Mutex::new(Vec::new()),
            tokens,
            strip_conditions: AtomicBool::new(false),
            seen: Mutex::new(Vec::new()),
            exchanges: Mutex::new(Vec::new()),
        });
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(proxy.clone());
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .expect("bind the fault proxy");
        let addr = listener.local_addr().expect("proxy address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (proxy, format!("http://{addr}"))
    }

    /// Adds a rule: the next `n` requests of `operation` meet `fault` (rules are tried in the
    /// order they were added; the first with requests left applies).
    pub fn inject(&self, operation: &str, n: usize, fault: Fault) {
        self.rules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Rule {
                operation: operation.to_string(),
                left: n,
                fault,
            });
    }

    /// From now on, forwards every `PutItem` without its `ConditionExpression` (and the
    /// expression attribute names and values only a condition of a `PutItem` can use): a store
    /// layer that silently makes every write unconditional.
    pub fn strip_conditions(&self, on: bool) {
        self.strip_conditions.store(on, Ordering::SeqCst);
    }

    /// The `ClientRequestToken` double, when started [`FaultProxy::with_tokens`].
    pub fn tokens(&self) -> Option<&TokenDouble> {
        self.tokens.as_ref()
    }

    /// The operations of every request the proxy received, in order (`PutItem`, ...).
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// How many requests of `operation` the proxy received.
    pub fn count(&self, operation: &str) -> usize {
        self.seen().iter().filter(|op| *op == operation).count()
    }

    /// Every request the proxy answered, with its answer, in order.
    pub fn exchanges(&self) -> Vec<Exchange> {
        self.exchanges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The answers to `operation`, in order: `Ok(status)` for a success, `Err(code)` for an
    /// error (`"TransactionCanceledException"`, ...).
    pub fn answers(&self, operation: &str) -> Vec<Result<u16, String>> {
        self.exchanges()
            .into_iter()
            .filter(|x| x.operation == operation)
            .map(|x| match x.error {
                Some(code) => Err(code),
                None => Ok(x.status),
            })
            .collect()
    }

    fn record(&self, operation: &str, request: &Bytes, answer: &Answer) {
        let error = (answer.status >= 400).then(|| {
            serde_json::from_slice::<serde_json::Value>(&answer.body)
                .ok()
                .and_then(|v| {
                    let t = v.get("__type")?.as_str()?;
                    Some(t.rsplit('#').next().unwrap_or(t).to_string())
                })
                .unwrap_or_else(|| format!("HTTP {}", answer.status))
        });
        self.exchanges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Exchange {
                operation: operation.to_string(),
                request: request.clone(),
                status: answer.status,
                error,
            });
    }

    fn take_fault(&self, operation: &str) -> Option<Fault> {
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        let rule = rules
            .iter_mut()
            .find(|r| r.operation == operation && r.left > 0)?;
        rule.left -= 1;
        Some(rule.fault.clone())
    }
}

fn respond(answer: Answer, headers: &HeaderMap) -> Response {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut response = (status, answer.body).into_response();
    for (name, value) in headers {
        if name != "content-length" && name != "transfer-encoding" && name != "connection" {
            response.headers_mut().insert(name, value.clone());
        }
    }
    if let Some(ct) = answer
        .content_type
        .and_then(|ct| HeaderValue::from_str(&ct).ok())
    {
        response.headers_mut().insert("content-type", ct);
    }
    response
}

/// `body` (a `PutItem` request) without its condition.
fn without_condition(body: &Bytes) -> Bytes {
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return body.clone();
    };
    if let Some(map) = value.as_object_mut() {
        for key in [
            "ConditionExpression",
            "ExpressionAttributeNames",
            "ExpressionAttributeValues",
        ] {
            map.remove(key);
        }
    }
    Bytes::from(value.to_string())
}

/// `body` with the keys of its JSON objects in another order: reversed, or, if that gives the
/// same bytes, in the order the parser keeps them (one of the two differs whenever an object
/// has two keys).
fn reordered(body: &Bytes) -> Bytes {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return body.clone();
    };
    let reversed = write_json(&value, true);
    if reversed.as_bytes() != body.as_ref() {
        return Bytes::from(reversed);
    }
    Bytes::from(write_json(&value, false))
}

/// `value` as compact JSON, each object's keys in the parser's order or reversed.
fn write_json(value: &serde_json::Value, reverse: bool) -> String {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<(&String, &serde_json::Value)> = map.iter().collect();
            if reverse {
                entries.reverse();
            }
            let fields: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| {
                    format!(
                        "{}:{}",
                        serde_json::Value::from(k.as_str()),
                        write_json(v, reverse)
                    )
                })
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        serde_json::Value::Array(items) => {
            let items: Vec<String> = items.iter().map(|v| write_json(v, reverse)).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}

async fn forward(
    State(proxy): State<Arc<FaultProxy>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let operation = headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.rsplit('.').next())
        .unwrap_or("?")
        .to_string();
    proxy
        .seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(operation.clone());
    let fault = proxy.take_fault(&operation);
    let (answer, answer_headers, ran) = answer_for(
        &proxy,
        &operation,
        fault.as_ref(),
        method,
        &uri,
        &headers,
        &body,
    )
    .await;
    let answer = match fault {
        Some(Fault::HoldAnswer(hold)) if ran => {
            // Applied upstream; the answer is held past the client's attempt timeout.
            tokio::time::sleep(hold).await;
            answer
        }
        Some(Fault::LoseAnswer) if ran => error_answer(
            500,
            "InternalServerError",
            "the answer was lost (injected by the fault proxy after the request ran)",
        ),
        _ => answer,
    };
    proxy.record(&operation, &body, &answer);
    respond(answer, &answer_headers)
}

/// The answer to one request before the faults that act after it ran: the answer, its headers,
/// and whether the request ran (upstream, or answered from the token table as if it had).
async fn answer_for(
    proxy: &FaultProxy,
    operation: &str,
    fault: Option<&Fault>,
    method: Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
) -> (Answer, HeaderMap, bool) {
    match fault {
        Some(Fault::Refuse(code)) => {
            let message = format!("{code} (injected by the fault proxy)");
            return (error_answer(400, code, &message), HeaderMap::new(), false);
        }
        Some(Fault::Cancel(codes)) => return (cancellation_answer(codes), HeaderMap::new(), false),
        _ => {}
    }
    let body = if operation == "PutItem" && proxy.strip_conditions.load(Ordering::SeqCst) {
        without_condition(body)
    } else if matches!(fault, Some(Fault::ReorderMaps)) {
        reordered(body)
    } else {
        body.clone()
    };
    // The token double decides before moto sees the request.
    let mut remember: Option<(String, String)> = None;
    if let (Some(tokens), "TransactWriteItems") = (proxy.tokens(), operation) {
        match tokens.decide(&body) {
            Decision::NoToken => {}
            Decision::Forward { token, hash } => remember = Some((token, hash)),
            Decision::Replay(answer) => return (answer, HeaderMap::new(), true),
            Decision::Mismatch => {
                let answer = error_answer(
                    400,
                    "IdempotentParameterMismatchException",
                    "the ClientRequestToken names another request (token double)",
                );
                return (answer, HeaderMap::new(), false);
            }
            Decision::InProgress => {
                let answer = error_answer(
                    400,
                    "TransactionInProgressException",
                    "the transaction with this ClientRequestToken is still running (token double)",
                );
                return (answer, HeaderMap::new(), false);
            }
        }
    }
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut request = proxy
        .client
        .request(method, format!("{}{path}", proxy.upstream))
        .body(body);
    for (name, value) in headers {
        if name != "host" && name != "content-length" {
            request = request.header(name, value);
        }
    }
    let upstream = match request.send().await {
        Ok(a) => a,
        Err(e) => {
            if let (Some(tokens), Some((token, _))) = (proxy.tokens(), &remember) {
                tokens.abandon(token);
            }
            let answer = Answer {
                status: StatusCode::BAD_GATEWAY.as_u16(),
                content_type: None,
                body: Bytes::from(e.to_string()),
            };
            return (answer, HeaderMap::new(), false);
        }
    };
    let status = upstream.status();
    let answer_headers = upstream.headers().clone();
    let bytes = upstream.bytes().await.unwrap_or_default();
    let answer = Answer {
        status: status.as_u16(),
        content_type: answer_headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        body: bytes,
    };
    if let (Some(tokens), Some((token, hash))) = (proxy.tokens(), &remember) {
        tokens.complete(token, hash, &answer);
    }
    (answer, answer_headers, true)
}

/// A `DynamoStore` on fresh tables named after `name`, whose client talks to moto through
/// `endpoint` (a [`FaultProxy`]) with the consumer function's SDK settings: standard retries, 4
/// attempts, 3 s per attempt, 10 s per operation (`gate_lambda::runner`).
pub async fn store_via(endpoint: &str, name: &str) -> gate_dynamo::DynamoStore {
    store_via_with(endpoint, name, 4).await
}

/// As [`store_via`] with `attempts` attempts per request (1: the SDK never retries, so a lost
/// answer reaches the store's own code).
pub async fn store_via_with(endpoint: &str, name: &str, attempts: u32) -> gate_dynamo::DynamoStore {
    let client = client_via(endpoint, attempts).await;
    let (table, bookings) = crate::fresh_tables(&crate::dynamo_client().await, name).await;
    gate_dynamo::DynamoStore::new(client, table, bookings)
}

/// A DynamoDB client for `endpoint` with the consumer function's timeouts and `attempts`
/// attempts per request.
pub async fn client_via(endpoint: &str, attempts: u32) -> aws_sdk_dynamodb::Client {
    use aws_config::retry::RetryConfig;
    use aws_config::timeout::TimeoutConfig;
    let config = aws_sdk_dynamodb::config::Builder::from(&crate::sdk_config().await)
        .endpoint_url(endpoint)
        .retry_config(RetryConfig::standard().with_max_attempts(attempts))
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(2))
                .operation_attempt_timeout(Duration::from_secs(3))
                .operation_timeout(Duration::from_secs(10))
                .build(),
        )
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}
