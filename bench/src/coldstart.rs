//! Cold start and footprint (issue 8, item 5): the release consumer binary run against a fake
//! Lambda Runtime API served here on loopback.
//!
//! Per trial: spawn the binary with the function's environment; init time is from just before the
//! spawn to its first `GET /2018-06-01/runtime/invocation/next` (configuration read, AWS SDK and
//! terminal clients built, runtime loop entered). That request is answered with an SQS batch of
//! 10 new notifications; the batch latency is from there to the `POST .../response`; when the
//! binary asks for its next invocation, its peak resident set (`VmHWM` of `/proc/PID/status`) is
//! read and the process is stopped. What Lambda adds before the process starts (the sandbox, the
//! download of the code) is not part of these figures.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde::Serialize;
use tokio::sync::{mpsc, Mutex};

use crate::handlers::Env;
use crate::procs::ChildGuard;
use crate::stats::{median, rss_kb};
use crate::workload::{deliveries, Delivery};

/// What the fake runtime API saw, with when.
#[derive(Debug)]
pub(crate) enum Seen {
    Next(Instant),
    Response(Instant, Bytes),
    Error(String),
}

pub(crate) struct Api {
    pub(crate) seen: mpsc::UnboundedSender<Seen>,
    /// The invocation to hand out on the first `next`; later `next` calls wait forever.
    pub(crate) event: Mutex<Option<(String, Vec<u8>)>>,
}

pub(crate) async fn runtime_api(State(api): State<Arc<Api>>, uri: Uri, body: Bytes) -> Response {
    let now = Instant::now();
    let path = uri.path();
    if path.ends_with("/runtime/invocation/next") {
        let _ = api.seen.send(Seen::Next(now));
        let event = api.event.lock().await.take();
        let Some((request_id, body)) = event else {
            std::future::pending::<()>().await;
            return StatusCode::GONE.into_response();
        };
        let deadline = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64 + 60_000)
            .unwrap_or(0);
        let mut headers = HeaderMap::new();
        let pairs = [
            ("lambda-runtime-aws-request-id", request_id),
            ("lambda-runtime-deadline-ms", deadline.to_string()),
            (
                "lambda-runtime-invoked-function-arn",
                "arn:aws:lambda:eu-west-1:123456789012:function:consumer".to_string(),
            ),
            (
                "lambda-runtime-trace-id",
                "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1".to_string(),
            ),
            ("content-type", "application/json".to_string()),
        ];
        for (k, v) in pairs {
            if let Ok(v) = v.parse() {
                headers.insert(k, v);
            }
        }
        return (StatusCode::OK, headers, body).into_response();
    }
    if path.ends_with("/response") {
        let _ = api.seen.send(Seen::Response(now, body));
    } else {
        let _ = api.seen.send(Seen::Error(format!(
            "{path}: {}",
            String::from_utf8_lossy(&body)
        )));
    }
    (StatusCode::ACCEPTED, "{\"status\":\"OK\"}").into_response()
}

/// One cold start.
#[derive(Debug, Clone, Serialize)]
pub struct Trial {
    /// Spawn to first `next`, ms.
    pub init_ms: f64,
    /// First `next` answered to `response` received (a batch of 10 new events), ms.
    pub batch_ms: f64,
    /// Peak resident set after the batch, kB.
    pub peak_rss_kb: u64,
    /// The records the batch reported as failures (should be 0).
    pub batch_item_failures: usize,
}

/// The cold-start figures: each trial and the medians.
#[derive(Debug, Clone, Serialize)]
pub struct ColdStart {
    /// The binary measured.
    pub binary: String,
    /// Its size in bytes.
    pub binary_bytes: u64,
    /// Every trial.
    pub trials: Vec<Trial>,
    /// Median init, ms.
    pub init_ms: f64,
    /// Median batch latency, ms.
    pub batch_ms: f64,
    /// Median peak RSS, MB (10^6 bytes).
    pub peak_rss_mb: f64,
}

fn sqs_body(batch: &[Delivery]) -> Vec<u8> {
    let records: Vec<serde_json::Value> = batch
        .iter()
        .map(|d| {
            serde_json::json!({
                "messageId": d.message_id,
                "receiptHandle": format!("rh-{}", d.message_id),
                "body": d.body,
                "attributes": {"ApproximateReceiveCount": "1"},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:eu-west-1:123456789012:notifications",
                "awsRegion": "eu-west-1",
            })
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({ "Records": records })).unwrap_or_default()
}

pub(crate) async fn expect<T>(
    rx: &mut mpsc::UnboundedReceiver<Seen>,
    what: &str,
    pick: impl Fn(Seen) -> Result<T, Seen>,
) -> Result<T, String> {
    match tokio::time::timeout(Duration::from_secs(20), rx.recv()).await {
        Err(_) => Err(format!("no {what} within 20 s")),
        Ok(None) => Err("runtime API closed".into()),
        Ok(Some(Seen::Error(e))) => Err(format!("the function reported {e}")),
        Ok(Some(seen)) => pick(seen).map_err(|other| format!("expected {what}, got {other:?}")),
    }
}

async fn trial(
    binary: &Path,
    env: &Env,
    tables: &(String, String),
    batch: &[Delivery],
) -> Result<Trial, String> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let api = Arc::new(Api {
        seen: tx,
        event: Mutex::new(Some((
            format!("cold-{}", batch[0].message_id),
            sqs_body(batch),
        ))),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let server = tokio::spawn(async move {
        let app = Router::new().fallback(runtime_api).with_state(api);
        let _ = axum::serve(listener, app).await;
    });

    let mut cmd = Command::new(binary);
    cmd.env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", "consumer")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/consumer")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
        .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
        .env("AWS_REGION", "eu-west-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_SESSION_TOKEN", "test")
        .env("AWS_ENDPOINT_URL", &env.moto)
        .env("IDEMPOTENCY_TABLE", &tables.0)
        .env("BOOKINGS_TABLE", &tables.1)
        .env(
            "MANUAL_QUEUE_URL",
            format!("{}/123456789012/manual", env.moto),
        )
        .env("TERMINAL_BASE_URL", &env.terminal)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let t0 = Instant::now();
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let child = ChildGuard::new(child, "consumer");
    let result = async {
        let first = expect(&mut rx, "first next", |s| match s {
            Seen::Next(t) => Ok(t),
            o => Err(o),
        })
        .await?;
        let (done, body) = expect(&mut rx, "response", |s| match s {
            Seen::Response(t, b) => Ok((t, b)),
            o => Err(o),
        })
        .await?;
        expect(&mut rx, "second next", |s| match s {
            Seen::Next(t) => Ok(t),
            o => Err(o),
        })
        .await?;
        let (peak, _) = rss_kb(child.pid()).ok_or("cannot read /proc/PID/status")?;
        let failures = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["batchItemFailures"].as_array().map(Vec::len))
            .unwrap_or(usize::MAX);
        Ok(Trial {
            init_ms: (first - t0).as_secs_f64() * 1000.0,
            batch_ms: (done - first).as_secs_f64() * 1000.0,
            peak_rss_kb: peak,
            batch_item_failures: failures,
        })
    }
    .await;
    drop(child);
    server.abort();
    result
}

/// Runs `trials` cold starts of `binary`, each processing a batch of 10 new events.
///
/// # Errors
/// When the binary does not start, fails a batch, or the tables cannot be created.
pub async fn run(
    binary: &Path,
    env: &Env,
    tag: &str,
    trials: usize,
    window: &(String, String),
) -> Result<ColdStart, String> {
    let client =
        crate::counter::dynamo_client(&env.moto, &crate::counter::CallRecorder::default()).await;
    let tables = (format!("{tag}-cold-idem"), format!("{tag}-cold-book"));
    gate::store::dynamo::create_tables(&client, &tables.0, &tables.1)
        .await
        .map_err(|e| e.to_string())?;
    let events = deliveries(&format!("{tag}-cold"), trials * 10, 0.0, window, 3);
    let mut all = Vec::new();
    for batch in events.chunks(10) {
        let t = trial(binary, env, &tables, batch).await?;
        if t.batch_item_failures != 0 {
            return Err(format!("cold-start batch reported failures: {t:?}"));
        }
        all.push(t);
    }
    let binary_bytes = std::fs::metadata(binary).map(|m| m.len()).unwrap_or(0);
    Ok(ColdStart {
        binary: binary.display().to_string(),
        binary_bytes,
        init_ms: median(&all.iter().map(|t| t.init_ms).collect::<Vec<_>>()),
        batch_ms: median(&all.iter().map(|t| t.batch_ms).collect::<Vec<_>>()),
        peak_rss_mb: median(
            &all.iter()
                .map(|t| t.peak_rss_kb as f64 * 1024.0 / 1e6)
                .collect::<Vec<_>>(),
        ),
        trials: all,
    })
}
