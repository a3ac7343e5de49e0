//! The webhook ingress: its client CPU and latency per request against SQS on moto,
//! and the release binary's init time under the fake Lambda Runtime API, to set next to the
//! consumer's figures (`--parts compare,cold` in the same run).
//!
//! Per request: `Ingress::respond` (verify the Standard Webhooks signature, one `SendMessage`,
//! the log line and the counters), in process, with the function's own SDK settings
//! (`ingress::lambda::aws_loader`) pointed at moto; the requests (bodies of the workload, each a
//! webhook of its own signed now) are built before the measured loop, which is the handler's
//! alone. Client CPU is `getrusage(RUSAGE_SELF)` around the loop; moto is another process. Every
//! 100 requests go to a fresh queue, created outside the measurement (moto's `SendMessage` slows
//! down as its queue grows).
//!
//! Init: the ingress binary spawned against the fake Runtime API (`crate::coldstart`) with
//! `NOTIFICATION_QUEUE_URL` on moto and `WEBHOOK_SECRETS`: spawn to its first
//! `GET .../invocation/next`; that is answered with one signed webhook event, whose `202` answer
//! gives the first request's latency (the connection to SQS opened on the way); then its peak RSS.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_config::Region;
use aws_lambda_events::event::apigw::ApiGatewayV2httpRequest;
use aws_sdk_sqs::config::Credentials;
use axum::Router;
use ingress::config::{IngressConfig, SecretsConfig};
use ingress::event::SignedWebhook;
use ingress::signature::{SecretSet, WebhookSecret};
use ingress::sqs::SqsNotificationQueue;
use serde::Serialize;
use tokio::sync::{mpsc, Mutex};

use crate::coldstart::{expect, runtime_api, Api, Seen};
use crate::handlers::Env;
use crate::procs::ChildGuard;
use crate::stats::{cpu_time, median, quantile, rss_kb};
use crate::workload::deliveries;

/// Requests sent to one queue before the next (see [`per_request`]).
const QUEUE_EVERY: usize = 100;

/// The figures of one per-request run.
#[derive(Debug, Clone, Serialize)]
pub struct PerRequest {
    /// Requests measured.
    pub requests: usize,
    /// Requests per second (one at a time).
    pub requests_per_s: f64,
    /// Client CPU per request, µs.
    pub cpu_us_per_request: f64,
    /// Latency p50, ms.
    pub p50_ms: f64,
    /// Latency p99, ms.
    pub p99_ms: f64,
}

/// One cold start of the binary.
#[derive(Debug, Clone, Serialize)]
pub struct ColdTrial {
    /// Spawn to first `next`, ms.
    pub init_ms: f64,
    /// The first request (cold), `next` answered to `response`, ms.
    pub first_request_ms: f64,
    /// Peak resident set after it, kB.
    pub peak_rss_kb: u64,
}

/// The ingress's figures.
#[derive(Debug, Clone, Serialize)]
pub struct IngressResults {
    /// Each per-request run.
    pub runs: Vec<PerRequest>,
    /// Medians over the runs: CPU per request (µs), p50 and p99 (ms), requests/s.
    pub cpu_us_per_request: f64,
    /// Median p50, ms.
    pub p50_ms: f64,
    /// Median p99, ms.
    pub p99_ms: f64,
    /// Median requests/s.
    pub requests_per_s: f64,
    /// The binary measured for the cold start, if any.
    pub binary: Option<String>,
    /// Every cold start.
    pub cold: Vec<ColdTrial>,
    /// Median init, ms.
    pub init_ms: f64,
    /// Median first (cold) request, ms.
    pub first_request_ms: f64,
    /// Median peak RSS, MB (10^6 bytes).
    pub peak_rss_mb: f64,
}

/// 32 fixed bytes: a benchmark key, not a secret.
fn secret() -> Result<WebhookSecret, String> {
    WebhookSecret::from_bytes(b"gate-bench-webhook-signing-key!!".to_vec())
        .map_err(|e| e.to_string())
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

async fn queue(env: &Env, name: &str) -> Result<(aws_config::SdkConfig, String), String> {
    let aws = ingress::lambda::aws_loader()
        .endpoint_url(&env.moto)
        .region(Region::new("eu-west-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "moto"))
        .load()
        .await;
    let url = aws_sdk_sqs::Client::new(&aws)
        .create_queue()
        .queue_name(name)
        .send()
        .await
        .map_err(|e| format!("create queue {name}: {e:?}"))?
        .queue_url()
        .unwrap_or_default()
        .to_string();
    Ok((aws, url))
}

/// `n` requests, each a webhook of its own with a body of the workload, signed now.
fn requests(
    tag: &str,
    n: usize,
    window: &(String, String),
) -> Result<Vec<ApiGatewayV2httpRequest>, String> {
    let key = secret()?;
    let now = now_s();
    deliveries(tag, n, 0.0, window, 16)
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            let signed = SignedWebhook::sign(
                std::slice::from_ref(&key),
                &format!("msg_{tag}_{i}"),
                now,
                &d.body,
            );
            serde_json::from_value(signed.http_api_event(now * 1000, &format!("req-{i}")))
                .map_err(|e| e.to_string())
        })
        .collect()
}

/// `runs` runs of `n` requests (after `warmup` unmeasured ones), one at a time.
///
/// # Errors
/// The queue cannot be created, or a request is not answered `202`.
pub async fn per_request(
    env: &Env,
    tag: &str,
    runs: usize,
    n: usize,
    warmup: usize,
    window: &(String, String),
) -> Result<Vec<PerRequest>, String> {
    let (aws, url) = queue(env, &format!("{tag}-ingress")).await?;
    let sqs = aws_sdk_sqs::Client::new(&aws);
    let config = IngressConfig {
        queue_url: url.clone(),
        secrets: SecretsConfig::Local(SecretSet::new(vec![secret()?]).map_err(|e| e.to_string())?),
        integration: "bench".into(),
    };
    let mut ingress = ingress::lambda::build(&config, &aws)
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for run in 0..runs {
        let warm = requests(&format!("{tag}-w{run}"), warmup, window)?;
        for r in &warm {
            ingress.respond(r).await;
        }
        let measured = requests(&format!("{tag}-r{run}"), n, window)?;
        let mut latencies_us = Vec::with_capacity(n);
        let (mut wall, mut cpu) = (0.0, 0.0);
        // moto's SendMessage slows down as its queue grows (tens of ms at a few thousand
        // messages), which a real queue does not: every QUEUE_EVERY requests go to a fresh
        // queue, created outside the measured time and CPU (moto allows one PurgeQueue a minute).
        for (k, chunk) in measured.chunks(QUEUE_EVERY).enumerate() {
            let fresh = sqs
                .create_queue()
                .queue_name(format!("{tag}-r{run}-c{k}"))
                .send()
                .await
                .map_err(|e| format!("CreateQueue: {e:?}"))?;
            ingress.queue = Arc::new(SqsNotificationQueue::new(
                sqs.clone(),
                fresh.queue_url().unwrap_or_default(),
            ));
            let cpu0 = cpu_time();
            let t0 = Instant::now();
            for r in chunk {
                let start = Instant::now();
                let answer = ingress.respond(r).await;
                latencies_us.push(start.elapsed().as_micros() as u64);
                if answer.status_code != 202 {
                    return Err(format!(
                        "the ingress answered {}: {:?}",
                        answer.status_code, answer.body
                    ));
                }
            }
            wall += t0.elapsed().as_secs_f64();
            cpu += (cpu_time() - cpu0).as_secs_f64();
        }
        let p = PerRequest {
            requests: n,
            requests_per_s: n as f64 / wall,
            cpu_us_per_request: cpu * 1e6 / n as f64,
            p50_ms: quantile(&latencies_us, 0.5) as f64 / 1000.0,
            p99_ms: quantile(&latencies_us, 0.99) as f64 / 1000.0,
        };
        eprintln!(
            "bench: ingress run {}: {:.0} requests/s, {:.0} µs CPU/request, p50 {:.2} ms, p99 {:.2} ms",
            run + 1,
            p.requests_per_s,
            p.cpu_us_per_request,
            p.p50_ms,
            p.p99_ms
        );
        out.push(p);
    }
    Ok(out)
}

async fn cold_trial(
    binary: &Path,
    env: &Env,
    queue_url: &str,
    window: &(String, String),
    i: usize,
) -> Result<ColdTrial, String> {
    let event = requests(&format!("cold{i}"), 1, window)?
        .pop()
        .ok_or("no request")?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let api = Arc::new(Api {
        seen: tx,
        events: Mutex::new(
            vec![(
                format!("cold-ingress-{i}"),
                serde_json::to_vec(&event).map_err(|e| e.to_string())?,
            )]
            .into(),
        ),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let server = tokio::spawn(async move {
        let app = Router::new().fallback(runtime_api).with_state(api);
        let _ = axum::serve(listener, app).await;
    });
    let secrets = serde_json::json!({ "active": [secret()?.to_written()] }).to_string();
    let mut cmd = Command::new(binary);
    cmd.env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", "ingress")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/ingress")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
        .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
        .env("AWS_REGION", "eu-west-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_SESSION_TOKEN", "test")
        .env("AWS_ENDPOINT_URL", &env.moto)
        .env("NOTIFICATION_QUEUE_URL", queue_url)
        .env("WEBHOOK_SECRETS", secrets)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let t0 = Instant::now();
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let child = ChildGuard::new(child, "ingress");
    let result = async {
        let (first, go) = expect(&mut rx, "first next", |s| match s {
            Seen::Next(t, go) => Ok((t, go)),
            o => Err(o),
        })
        .await?;
        let _ = go.send(());
        expect(&mut rx, "the event handed out", |s| match s {
            Seen::Handed(t) => Ok(t),
            o => Err(o),
        })
        .await?;
        let (done, body) = expect(&mut rx, "response", |s| match s {
            Seen::Response(t, b) => Ok((t, b)),
            o => Err(o),
        })
        .await?;
        expect(&mut rx, "second next", |s| match s {
            Seen::Next(t, _) => Ok(t),
            o => Err(o),
        })
        .await?;
        let status = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["statusCode"].as_i64());
        if status != Some(202) {
            return Err(format!(
                "the ingress answered {}",
                String::from_utf8_lossy(&body)
            ));
        }
        let (peak, _) = rss_kb(child.pid()).ok_or("cannot read /proc/PID/status")?;
        Ok(ColdTrial {
            init_ms: (first - t0).as_secs_f64() * 1000.0,
            first_request_ms: (done - first).as_secs_f64() * 1000.0,
            peak_rss_kb: peak,
        })
    }
    .await;
    drop(child);
    server.abort();
    result
}

/// `trials` cold starts of the ingress binary, each answering one webhook.
///
/// # Errors
/// The binary does not start or does not answer `202`.
pub async fn cold(
    binary: &Path,
    env: &Env,
    tag: &str,
    trials: usize,
    window: &(String, String),
) -> Result<Vec<ColdTrial>, String> {
    let (_, url) = queue(env, &format!("{tag}-ingress-cold")).await?;
    let mut out = Vec::new();
    for i in 0..trials {
        out.push(cold_trial(binary, env, &url, window, i).await?);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(out)
}

/// The medians of `runs` and `cold`.
pub fn results(
    runs: Vec<PerRequest>,
    binary: Option<String>,
    cold: Vec<ColdTrial>,
) -> IngressResults {
    let m = |f: fn(&PerRequest) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
    let c = |f: fn(&ColdTrial) -> f64| median(&cold.iter().map(f).collect::<Vec<_>>());
    IngressResults {
        cpu_us_per_request: m(|r| r.cpu_us_per_request),
        p50_ms: m(|r| r.p50_ms),
        p99_ms: m(|r| r.p99_ms),
        requests_per_s: m(|r| r.requests_per_s),
        init_ms: c(|t| t.init_ms),
        first_request_ms: c(|t| t.first_request_ms),
        peak_rss_mb: c(|t| t.peak_rss_kb as f64 * 1024.0 / 1e6),
        runs,
        binary,
        cold,
    }
}
