//! A Lambda function's process under a fake Lambda Runtime API served here on loopback: cold
//! start and footprint, and warm invocations for the billed duration of the cost measurement.
//!
//! A [`Spec`] says how to start a function as Lambda would: the release consumer binary (the gate),
//! `python -m awslambdaric lambda_function.lambda_handler` (Powertools, the runtime interface
//! client the managed Python runtime runs), or `gate-bench --serve-naive-lambda` (the naive
//! handler on `lambda_runtime`). A [`session`] spawns it with the function's environment and
//! hands it one SQS event per `GET /2018-06-01/runtime/invocation/next`:
//!
//! * init: from just before the spawn to its first `next`; what Lambda adds before the process
//!   starts (the sandbox, fetching the code) is not included;
//! * per invocation: the duration from the event handed out to its `POST .../response` (what
//!   Lambda bills, before rounding up to the millisecond) and the CPU time the process used
//!   meanwhile (the sum of `/proc/PID/task/*/schedstat` over its threads, read while it waits in
//!   `next`: the event is handed out only after the reading);
//! * peak RSS (`VmHWM` of `/proc/PID/status`) after the last invocation.
//!
//! With [`Spec::memory_mb`] the process runs in a cgroup (v1 `cpu`) whose CPU quota is the share
//! Lambda gives that memory size: `memory / 1,769 MB` of one vCPU (AWS: "at 1,769 MB, a function
//! has the equivalent of one vCPU"), over the kernel's default 100 ms period.

use std::collections::VecDeque;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, Mutex};

use crate::handlers::Env;
use crate::procs::ChildGuard;
use crate::stats::{median, rss_kb};
use crate::workload::{deliveries, Delivery};

/// Memory at which a Lambda function has one full vCPU (AWS Lambda documentation, "Memory and
/// computing power").
pub const FULL_VCPU_MB: u32 = 1769;

/// What the fake runtime API saw, with when.
#[derive(Debug)]
pub(crate) enum Seen {
    /// A `next` request; the event is handed out once `go` is sent.
    Next(Instant, oneshot::Sender<()>),
    /// The event was handed out.
    Handed(Instant),
    Response(Instant, Bytes),
    Error(String),
}

pub(crate) struct Api {
    pub(crate) seen: mpsc::UnboundedSender<Seen>,
    /// The invocations to hand out, in order; once empty, `next` waits forever.
    pub(crate) events: Mutex<VecDeque<(String, Vec<u8>)>>,
}

pub(crate) async fn runtime_api(State(api): State<Arc<Api>>, uri: Uri, body: Bytes) -> Response {
    let path = uri.path();
    if path.ends_with("/runtime/invocation/next") {
        let (go, wait) = oneshot::channel();
        let _ = api.seen.send(Seen::Next(Instant::now(), go));
        let _ = wait.await;
        let event = api.events.lock().await.pop_front();
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
        let _ = api.seen.send(Seen::Handed(Instant::now()));
        return (StatusCode::OK, headers, body).into_response();
    }
    let now = Instant::now();
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

/// How to start one function as Lambda would.
#[derive(Debug, Clone)]
pub struct Spec {
    /// `gate`, `powertools` or `naive`.
    pub label: String,
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its working directory.
    pub cwd: Option<PathBuf>,
    /// Its environment (nothing else is inherited but `PATH`).
    pub env: Vec<(String, String)>,
    /// Run it with the CPU share of this memory size (see the module docs); `None`: unlimited.
    pub memory_mb: Option<u32>,
}

/// One invocation.
#[derive(Debug, Clone, Serialize)]
pub struct Invoked {
    /// Event handed out to response received, ms.
    pub duration_ms: f64,
    /// CPU time of the process meanwhile, ms.
    pub cpu_ms: f64,
    /// Records reported in `batchItemFailures`.
    pub batch_item_failures: usize,
}

/// One process from spawn to its last invocation.
#[derive(Debug, Clone, Serialize)]
pub struct Session {
    /// Spawn to first `next`, ms.
    pub init_ms: f64,
    /// Every invocation, in order.
    pub invocations: Vec<Invoked>,
    /// Peak resident set after the last invocation, kB.
    pub peak_rss_kb: u64,
    /// moto's DynamoDB request counts by operation before each invocation and after the last
    /// (`count + 1` entries; empty unless counted).
    pub calls: Vec<std::collections::BTreeMap<String, u64>>,
}

/// CPU time of every thread of `pid` so far (`/proc/PID/task/*/schedstat`, first field, ns).
fn process_cpu(pid: u32) -> Duration {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Duration::ZERO;
    };
    let mut ns = 0u64;
    for t in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
            ns += s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Duration::from_nanos(ns)
}

/// A cgroup (v1 `cpu`) with the CPU quota of `memory_mb`, removed when dropped.
struct CpuGroup {
    path: PathBuf,
}

impl CpuGroup {
    fn new(name: &str, memory_mb: u32) -> Result<Self, String> {
        let path = PathBuf::from("/sys/fs/cgroup/cpu").join(name);
        std::fs::create_dir_all(&path).map_err(|e| {
            format!(
                "cannot create {} (the CPU share of a memory size needs the cgroup v1 cpu \
                 controller and root): {e}",
                path.display()
            )
        })?;
        let period = 100_000u64;
        let quota = (period * u64::from(memory_mb) / u64::from(FULL_VCPU_MB)).max(1_000);
        std::fs::write(path.join("cpu.cfs_period_us"), period.to_string())
            .and_then(|()| std::fs::write(path.join("cpu.cfs_quota_us"), quota.to_string()))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Self { path })
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.path);
    }
}

pub(crate) async fn expect<T>(
    rx: &mut mpsc::UnboundedReceiver<Seen>,
    what: &str,
    pick: impl Fn(Seen) -> Result<T, Seen>,
) -> Result<T, String> {
    match tokio::time::timeout(Duration::from_secs(60), rx.recv()).await {
        Err(_) => Err(format!("no {what} within 60 s")),
        Ok(None) => Err("runtime API closed".into()),
        Ok(Some(Seen::Error(e))) => Err(format!("the function reported {e}")),
        Ok(Some(seen)) => pick(seen).map_err(|other| format!("expected {what}, got {other:?}")),
    }
}

/// Starts `spec` against a fresh fake Runtime API, hands it `events` (request id, SQS event
/// JSON) one per `next`, and measures (module docs).
///
/// # Errors
/// When the process does not start, reports an error, or does not answer within 60 s.
pub async fn session(spec: &Spec, events: Vec<(String, Vec<u8>)>) -> Result<Session, String> {
    session_counted(spec, events, None).await
}

/// [`session`], reading moto's DynamoDB request counts (`GET {moto}/_bench/calls`, see
/// `bench/moto_server.py`) before each invocation when `moto` is given: [`Session::calls`].
///
/// # Errors
/// As [`session`].
pub async fn session_counted(
    spec: &Spec,
    events: Vec<(String, Vec<u8>)>,
    moto: Option<&str>,
) -> Result<Session, String> {
    let http = reqwest::Client::new();
    let count = events.len();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let api = Arc::new(Api {
        seen: tx,
        events: Mutex::new(events.into()),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let server = tokio::spawn(async move {
        let app = Router::new().fallback(runtime_api).with_state(api);
        let _ = axum::serve(listener, app).await;
    });
    let group = match spec.memory_mb {
        Some(mb) => Some(CpuGroup::new(
            &format!("gate-bench-{}-{}-{mb}", std::process::id(), spec.label),
            mb,
        )?),
        None => None,
    };
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", &spec.label)
        .env(
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
            spec.memory_mb.unwrap_or(512).to_string(),
        )
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env(
            "AWS_LAMBDA_LOG_GROUP_NAME",
            format!("/aws/lambda/{}", spec.label),
        )
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
        .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
        .env("AWS_REGION", "eu-west-1")
        .env("AWS_DEFAULT_REGION", "eu-west-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_SESSION_TOKEN", "test")
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(dir) = &spec.cwd {
        cmd.current_dir(dir);
    }
    if let Some(g) = &group {
        let procs = g.path.join("cgroup.procs");
        // SAFETY: between fork and exec the child only writes its own pid to a file (open,
        // write, close: async-signal-safe system calls through std's thin wrappers).
        unsafe {
            cmd.pre_exec(move || {
                std::fs::write(&procs, libc::getpid().to_string())?;
                Ok(())
            });
        }
    }
    let t0 = Instant::now();
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", spec.program.display()))?;
    let child = ChildGuard::new(child, "function under the fake Runtime API");
    let pid = child.pid();
    let result = async {
        let mut invocations = Vec::with_capacity(count);
        let mut calls = Vec::new();
        let mut init_ms = 0.0;
        let mut cpu_before = Duration::ZERO;
        for i in 0..=count {
            let (t, go) = expect(&mut rx, "next", |s| match s {
                Seen::Next(t, go) => Ok((t, go)),
                o => Err(o),
            })
            .await?;
            let cpu = process_cpu(pid);
            if let Some(moto) = moto {
                calls.push(moto_calls(&http, moto).await?);
            }
            if i == 0 {
                init_ms = (t - t0).as_secs_f64() * 1000.0;
            } else if let Some(last) = invocations.last_mut() {
                let last: &mut Invoked = last;
                last.cpu_ms = (cpu.saturating_sub(cpu_before)).as_secs_f64() * 1000.0;
            }
            if i == count {
                break;
            }
            cpu_before = process_cpu(pid);
            let _ = go.send(());
            let handed = expect(&mut rx, "the event handed out", |s| match s {
                Seen::Handed(t) => Ok(t),
                o => Err(o),
            })
            .await?;
            let (done, body) = expect(&mut rx, "response", |s| match s {
                Seen::Response(t, b) => Ok((t, b)),
                o => Err(o),
            })
            .await?;
            let failures = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["batchItemFailures"].as_array().map(Vec::len))
                .unwrap_or(usize::MAX);
            invocations.push(Invoked {
                duration_ms: (done - handed).as_secs_f64() * 1000.0,
                cpu_ms: 0.0,
                batch_item_failures: failures,
            });
        }
        let (peak, _) = rss_kb(pid).ok_or("cannot read /proc/PID/status")?;
        Ok(Session {
            init_ms,
            invocations,
            peak_rss_kb: peak,
            calls,
        })
    }
    .await;
    drop(child);
    drop(group);
    server.abort();
    result
}

/// moto's DynamoDB request counts so far, by operation.
///
/// # Errors
/// When moto does not answer.
pub async fn moto_calls(
    http: &reqwest::Client,
    moto: &str,
) -> Result<std::collections::BTreeMap<String, u64>, String> {
    let r = http
        .get(format!("{moto}/_bench/calls"))
        .send()
        .await
        .map_err(|e| format!("moto call counts: {e}"))?;
    let bytes = r.bytes().await.map_err(|e| e.to_string())?;
    serde_json::from_slice(&bytes).map_err(|e| format!("moto call counts: {e}"))
}

/// An SQS event of `batch` (as the event source mapping sends it).
pub fn sqs_body(batch: &[Delivery]) -> Vec<u8> {
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

/// One cold start.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Trial {
    /// Spawn to first `next`, ms.
    pub init_ms: f64,
    /// The first batch of 10 new events, handed out to response, ms.
    pub batch_ms: f64,
    /// Peak resident set after the batch, kB.
    pub peak_rss_kb: u64,
    /// The records the batch reported as failures (should be 0).
    pub batch_item_failures: usize,
}

/// The cold-start figures of one function: each trial and the medians.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ColdStart {
    /// `gate` or `powertools`.
    pub label: String,
    /// What was started.
    pub binary: String,
    /// Its size in bytes (the binary; for Powertools, 0: see the module docs of `main`).
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

/// The environment of a function: tables, terminal, moto.
pub fn function_env(env: &Env, tables: &(String, String)) -> Vec<(String, String)> {
    vec![
        ("AWS_ENDPOINT_URL".into(), env.moto.clone()),
        ("IDEMPOTENCY_TABLE".into(), tables.0.clone()),
        ("BOOKINGS_TABLE".into(), tables.1.clone()),
        (
            "MANUAL_QUEUE_URL".into(),
            format!("{}/123456789012/manual", env.moto),
        ),
        ("TERMINAL_BASE_URL".into(), env.terminal.clone()),
    ]
}

/// The gate: the release consumer binary.
pub fn gate_spec(binary: &Path, env: &Env, tables: &(String, String)) -> Spec {
    Spec {
        label: "gate".into(),
        program: binary.to_path_buf(),
        args: Vec::new(),
        cwd: None,
        env: function_env(env, tables),
        memory_mb: None,
    }
}

/// Powertools: `python -m awslambdaric lambda_function.lambda_handler` in `bench/powertools`.
pub fn powertools_spec(env: &Env, tables: &(String, String)) -> Spec {
    let dir = env
        .handler_py
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut vars = function_env(env, tables);
    vars.push(("LAMBDA_TASK_ROOT".into(), dir.display().to_string()));
    vars.push(("PYTHONPATH".into(), dir.display().to_string()));
    Spec {
        label: "powertools".into(),
        program: env.python.clone(),
        args: vec![
            "-m".into(),
            "awslambdaric".into(),
            "lambda_function.lambda_handler".into(),
        ],
        cwd: Some(dir),
        env: vars,
        memory_mb: None,
    }
}

/// The fair peer: the Powertools function with its booking written in one
/// `TransactWriteItems` with the completion of its record (`POWERTOOLS_ATOMIC_BOOKING=1`,
/// `bench/powertools/handler.py`, `AtomicBookingLayer`).
pub fn fair_peer_spec(env: &Env, tables: &(String, String)) -> Spec {
    let mut spec = powertools_spec(env, tables);
    spec.label = "fair-peer".into();
    spec.env
        .push(("POWERTOOLS_ATOMIC_BOOKING".into(), "1".into()));
    spec
}

/// The naive handler: this binary with `--serve-naive-lambda`.
pub fn naive_spec(env: &Env, tables: &(String, String)) -> Result<Spec, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    Ok(Spec {
        label: "naive".into(),
        program: me,
        args: vec!["--serve-naive-lambda".into()],
        cwd: None,
        env: function_env(env, tables),
        memory_mb: None,
    })
}

/// Runs `trials` cold starts of `spec` (its tables created by the caller), each handed a batch
/// of 10 new events.
///
/// # Errors
/// When the function does not start, fails a batch, or the tables cannot be created.
pub async fn run(
    spec: &Spec,
    tag: &str,
    trials: usize,
    window: &(String, String),
) -> Result<ColdStart, String> {
    let events = deliveries(&format!("{tag}-cold"), trials * 10, 0.0, window, 3);
    let mut all = Vec::new();
    for batch in events.chunks(10) {
        let s = session(
            spec,
            vec![(format!("cold-{}", batch[0].message_id), sqs_body(batch))],
        )
        .await?;
        let first = s.invocations.first().ok_or("no invocation")?;
        if first.batch_item_failures != 0 {
            return Err(format!(
                "{}: cold-start batch reported failures: {first:?}",
                spec.label
            ));
        }
        all.push(Trial {
            init_ms: s.init_ms,
            batch_ms: first.duration_ms,
            peak_rss_kb: s.peak_rss_kb,
            batch_item_failures: first.batch_item_failures,
        });
    }
    let binary_bytes = std::fs::metadata(&spec.program)
        .map(|m| m.len())
        .unwrap_or(0);
    Ok(ColdStart {
        label: spec.label.clone(),
        binary: format!("{} {}", spec.program.display(), spec.args.join(" ")),
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
