//! A fault proxy in front of moto, on loopback: every request is forwarded as is and its answer
//! returned, except that the answers of the first `n` requests whose `X-Amz-Target` ends with a
//! chosen operation (e.g. `PutItem`) are held back for a while after moto applied them: the
//! client's attempt times out and the SDK retries a request whose write already landed.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// The proxy's rule and what it saw.
pub struct FaultProxy {
    upstream: String,
    client: reqwest::Client,
    operation: String,
    hold: Duration,
    left: Mutex<usize>,
    seen: Mutex<Vec<String>>,
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
        let proxy = Arc::new(Self {
            upstream: upstream.trim_end_matches('/').to_string(),
            client: reqwest::Client::new(),
            operation: operation.to_string(),
            hold,
            left: Mutex::new(n),
            seen: Mutex::new(Vec::new()),
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

    /// The operations of every request the proxy forwarded, in order (`PutItem`, ...).
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn take_fault(&self, operation: &str) -> bool {
        let mut left = self.left.lock().unwrap_or_else(|e| e.into_inner());
        if operation == self.operation && *left > 0 {
            *left -= 1;
            true
        } else {
            false
        }
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
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut request = proxy
        .client
        .request(method, format!("{}{path}", proxy.upstream))
        .body(body);
    for (name, value) in &headers {
        if name != "host" && name != "content-length" {
            request = request.header(name, value);
        }
    }
    let answer = match request.send().await {
        Ok(a) => a,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let status = answer.status();
    let answer_headers = answer.headers().clone();
    let bytes = answer.bytes().await.unwrap_or_default();
    if proxy.take_fault(&operation) {
        // Applied upstream; the answer is held past the client's attempt timeout.
        tokio::time::sleep(proxy.hold).await;
    }
    let mut response = (status, bytes).into_response();
    for (name, value) in &answer_headers {
        if name != "content-length" && name != "transfer-encoding" && name != "connection" {
            response.headers_mut().insert(name, value.clone());
        }
    }
    response
}

/// A `DynamoStore` on fresh tables named after `name`, whose client talks to moto through
/// `endpoint` (a [`FaultProxy`]) with the consumer function's SDK settings: standard retries, 4
/// attempts, 3 s per attempt, 10 s per operation (`gate::lambda::runner`).
pub async fn store_via(endpoint: &str, name: &str) -> gate::store::dynamo::DynamoStore {
    use aws_config::retry::RetryConfig;
    use aws_config::timeout::TimeoutConfig;
    let config = aws_sdk_dynamodb::config::Builder::from(&crate::sdk_config().await)
        .endpoint_url(endpoint)
        .retry_config(RetryConfig::standard().with_max_attempts(4))
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(2))
                .operation_attempt_timeout(Duration::from_secs(3))
                .operation_timeout(Duration::from_secs(10))
                .build(),
        )
        .build();
    let client = aws_sdk_dynamodb::Client::from_conf(config);
    let (table, bookings) = crate::fresh_tables(&crate::dynamo_client().await, name).await;
    gate::store::dynamo::DynamoStore::new(client, table, bookings)
}
