//! A Lambda execution environment emulated for the fault tests: the real
//! function binary (built once with `cargo build`, as `cargo lambda watch` runs it) started
//! against a Runtime API served here on loopback, kept warm from one invocation to the next (one
//! process across a database fault, as a Lambda environment outlives a failover), each
//! invocation given its **real** deadline (`Lambda-Runtime-Deadline-Ms`: the epoch-ms instant
//! the function picked it up plus the function's timeout; `cargo lambda watch` 1.9 hands every
//! invocation 600 s, which no store fault shorter than ten minutes runs into). An invocation not
//! answered by its deadline is a timeout, as Lambda counts it: the process is killed (SIGKILL,
//! its process group) and the next invocation cold-starts a new one. A cold start that does not
//! ask for its first invocation within [`INIT_TIMEOUT`] (Lambda's init limit) is killed the
//! same way and counted as a timeout.
//!
//! The Runtime API served: `GET /2018-06-01/runtime/invocation/next`, `POST
//! /2018-06-01/runtime/invocation/{id}/response` and `.../error`, `POST
//! /2018-06-01/runtime/init/error`. Each process has a server of its own, dropped with it, so a
//! killed process's requests cannot take the next one's invocation.

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use gate::clock::{Clock, SystemClock};
use tokio::sync::{mpsc, oneshot};

use crate::lambda_watch::workspace_root;

/// Lambda's limit on a cold start before its first invocation (its init phase): 10 s.
pub const INIT_TIMEOUT: Duration = Duration::from_secs(10);

/// The binaries of the workspace's functions `packages` (e.g. `["consumer", "reconciler"]`),
/// built once per test process with `cargo build -p ...` (the functions' own features, as `cargo
/// lambda watch` builds them) into the target directory of the running test; the directory.
///
/// # Panics
/// When the build fails (its output in the message).
pub fn function_binaries(packages: &[&str]) -> PathBuf {
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    // The test binary lives in `<target>/<profile>/deps/`.
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("<target>/<profile>")
        .to_path_buf();
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| !built.iter().any(|b| b == p))
        .collect();
    if !missing.is_empty() {
        let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        command.current_dir(workspace_root()).arg("build").arg("-q");
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            command.arg("--release");
        }
        for package in &missing {
            command.args(["-p", package]);
        }
        let out = command.output().expect("cargo build runs");
        assert!(
            out.status.success(),
            "cargo build {missing:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        built.extend(missing.iter().map(|p| p.to_string()));
    }
    profile_dir
}

/// How one invocation ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The function's answer (`/response`), as JSON.
    Answer(serde_json::Value),
    /// The function's error (`/error` or `/init/error`), as JSON.
    Error(serde_json::Value),
    /// No answer by the deadline (or no pickup within [`INIT_TIMEOUT`]): the process was killed.
    TimedOut,
    /// The process ended by itself without answering (its exit status).
    Exited(String),
}

/// A function: its binary, name, environment and timeout, and where its output goes.
#[derive(Debug, Clone)]
pub struct FunctionSpec {
    /// The binary.
    pub binary: PathBuf,
    /// `AWS_LAMBDA_FUNCTION_NAME`, and the log file's name.
    pub name: String,
    /// The function's environment (nothing of the test's is inherited but `PATH`).
    pub env: Vec<(String, String)>,
    /// The function's timeout: each invocation's deadline is its pickup plus this.
    pub timeout: Duration,
    /// The directory of `{name}.log` (stdout and stderr of every process, appended).
    pub log_dir: PathBuf,
}

/// An invocation handed to the process.
struct Pending {
    id: String,
    payload: Vec<u8>,
    picked_up: oneshot::Sender<i64>,
}

/// The Runtime API's state for one process.
#[derive(Clone)]
struct Runtime {
    next: Arc<tokio::sync::Mutex<mpsc::Receiver<Pending>>>,
    answers: Arc<Mutex<HashMap<String, oneshot::Sender<Outcome>>>>,
    init_error: Arc<Mutex<Option<serde_json::Value>>>,
    timeout: Duration,
}

/// One running process and its Runtime API.
struct Instance {
    child: Child,
    server: tokio::task::JoinHandle<()>,
    next: mpsc::Sender<Pending>,
    runtime: Runtime,
}

impl Instance {
    fn kill(mut self) {
        self.server.abort();
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The emulated execution environment of one function ([module docs](self)): at most one
/// process at a time, one invocation at a time (`MaximumConcurrency` 1).
pub struct LambdaEnv {
    spec: FunctionSpec,
    instance: tokio::sync::Mutex<Option<Instance>>,
    invocations: AtomicUsize,
    cold_starts: AtomicUsize,
    timeouts: AtomicUsize,
}

impl LambdaEnv {
    /// The environment of `spec`, no process yet (the first invocation cold-starts it).
    pub fn new(spec: FunctionSpec) -> Self {
        std::fs::create_dir_all(&spec.log_dir).expect("log dir");
        Self {
            spec,
            instance: tokio::sync::Mutex::new(None),
            invocations: AtomicUsize::new(0),
            cold_starts: AtomicUsize::new(0),
            timeouts: AtomicUsize::new(0),
        }
    }

    /// The function's log file.
    pub fn log_path(&self) -> PathBuf {
        self.spec.log_dir.join(format!("{}.log", self.spec.name))
    }

    /// Invocations so far.
    pub fn invocations(&self) -> usize {
        self.invocations.load(Ordering::SeqCst)
    }

    /// Processes started so far (cold starts).
    pub fn cold_starts(&self) -> usize {
        self.cold_starts.load(Ordering::SeqCst)
    }

    /// Invocations that ran into their deadline (or a cold start into [`INIT_TIMEOUT`]).
    pub fn timeouts(&self) -> usize {
        self.timeouts.load(Ordering::SeqCst)
    }

    /// Invokes the function with `payload` and waits for its outcome: at most the pickup
    /// ([`INIT_TIMEOUT`] after a cold start) plus the function's timeout.
    pub async fn invoke(&self, payload: &serde_json::Value) -> Outcome {
        let mut slot = self.instance.lock().await;
        let cold = match slot.as_mut().map(|i| i.child.try_wait()) {
            Some(Ok(None)) => false,
            Some(_) => {
                if let Some(dead) = slot.take() {
                    dead.kill();
                }
                true
            }
            None => true,
        };
        if cold {
            *slot = Some(self.spawn().await);
        }
        let n = self.invocations.fetch_add(1, Ordering::SeqCst);
        let instance = slot.as_mut().expect("an instance");
        let id = format!("{}-{n}-{}", self.spec.name, SystemClock.now_ms());
        let (answer_tx, mut answer) = oneshot::channel();
        let (picked_tx, mut picked) = oneshot::channel();
        instance
            .runtime
            .answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), answer_tx);
        let sent = instance
            .next
            .send(Pending {
                id,
                payload: serde_json::to_vec(payload).expect("payload"),
                picked_up: picked_tx,
            })
            .await;
        assert!(
            sent.is_ok(),
            "the runtime API of {} is gone",
            self.spec.name
        );
        let started = Instant::now();
        let mut deadline = tokio::time::Instant::now() + INIT_TIMEOUT + self.spec.timeout;
        let outcome = loop {
            tokio::select! {
                out = &mut answer => break out.unwrap_or(Outcome::Exited("dropped".into())),
                at = &mut picked, if !picked.is_terminated() => {
                    if let Ok(deadline_ms) = at {
                        let left = deadline_ms - SystemClock.now_ms();
                        deadline = tokio::time::Instant::now()
                            + Duration::from_millis(u64::try_from(left).unwrap_or(0));
                    }
                }
                () = tokio::time::sleep(Duration::from_millis(100)) => {
                    let pickup_late = !picked.is_terminated() && started.elapsed() > INIT_TIMEOUT;
                    if pickup_late || tokio::time::Instant::now() >= deadline {
                        break Outcome::TimedOut;
                    }
                    if let Some(error) = instance.runtime.init_error.lock()
                        .unwrap_or_else(|p| p.into_inner()).take() {
                        break Outcome::Error(error);
                    }
                    if let Ok(Some(status)) = instance.child.try_wait() {
                        break Outcome::Exited(status.to_string());
                    }
                }
            }
        };
        if !matches!(outcome, Outcome::Answer(_) | Outcome::Error(_)) {
            if outcome == Outcome::TimedOut {
                self.timeouts.fetch_add(1, Ordering::SeqCst);
            }
            if let Some(instance) = slot.take() {
                instance.kill();
            }
        }
        outcome
    }

    /// Starts a process with a Runtime API of its own.
    async fn spawn(&self) -> Instance {
        self.cold_starts.fetch_add(1, Ordering::SeqCst);
        let (next, receiver) = mpsc::channel(1);
        let runtime = Runtime {
            next: Arc::new(tokio::sync::Mutex::new(receiver)),
            answers: Arc::default(),
            init_error: Arc::default(),
            timeout: self.spec.timeout,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the runtime API");
        let addr = listener.local_addr().expect("local addr");
        let app = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next_invocation))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(response),
            )
            .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
            .route("/2018-06-01/runtime/init/error", post(init_error))
            .with_state(runtime.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("log file");
        let child = Command::new(&self.spec.binary)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(self.spec.env.iter().map(|(k, v)| (k, v)))
            .env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
            .env("AWS_LAMBDA_FUNCTION_NAME", &self.spec.name)
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "fault-test")
            .env(
                "AWS_LAMBDA_LOG_GROUP_NAME",
                format!("/aws/lambda/{}", self.spec.name),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", self.spec.binary.display()));
        Instance {
            child,
            server,
            next,
            runtime,
        }
    }
}

impl Drop for LambdaEnv {
    fn drop(&mut self) {
        if let Some(instance) = self.instance.get_mut().take() {
            instance.kill();
        }
    }
}

async fn next_invocation(State(rt): State<Runtime>) -> (StatusCode, HeaderMap, Vec<u8>) {
    let pending = rt.next.lock().await.recv().await;
    let Some(pending) = pending else {
        return (StatusCode::GONE, HeaderMap::new(), Vec::new());
    };
    let timeout_ms = i64::try_from(rt.timeout.as_millis()).unwrap_or(i64::MAX);
    let deadline_ms = SystemClock.now_ms().saturating_add(timeout_ms);
    let _ = pending.picked_up.send(deadline_ms);
    let mut headers = HeaderMap::new();
    let value = |s: String| HeaderValue::from_str(&s).expect("header value");
    headers.insert("lambda-runtime-aws-request-id", value(pending.id));
    headers.insert("lambda-runtime-deadline-ms", value(deadline_ms.to_string()));
    headers.insert(
        "lambda-runtime-invoked-function-arn",
        value("arn:aws:lambda:eu-west-1:123456789012:function:fault-test".into()),
    );
    headers.insert("content-type", value("application/json".into()));
    (StatusCode::OK, headers, pending.payload)
}

fn answer(rt: &Runtime, id: &str, outcome: Outcome) -> StatusCode {
    if let Some(tx) = rt
        .answers
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(id)
    {
        let _ = tx.send(outcome);
    }
    StatusCode::ACCEPTED
}

fn json_or_text(body: &Bytes) -> serde_json::Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(body).into_owned()))
}

async fn response(
    State(rt): State<Runtime>,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> StatusCode {
    answer(&rt, &id, Outcome::Answer(json_or_text(&body)))
}

async fn error(State(rt): State<Runtime>, UrlPath(id): UrlPath<String>, body: Bytes) -> StatusCode {
    answer(&rt, &id, Outcome::Error(json_or_text(&body)))
}

async fn init_error(State(rt): State<Runtime>, body: Bytes) -> StatusCode {
    *rt.init_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(json_or_text(&body));
    StatusCode::ACCEPTED
}

/// A process-wide lock for the fault cases: one emulated environment pair at a time on a shared
/// machine (deadlines stay meaningful).
pub fn one_case_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: OnceLock<Mutex<()>> = OnceLock::new();
    ONE.get_or_init(|| Mutex::new(()))
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}
