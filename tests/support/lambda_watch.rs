//! Running the real Lambda binaries under `cargo lambda watch` and invoking them with
//! `cargo lambda invoke`: the pieces every runtime-path test shares (the watcher's command
//! against moto, its output captured, the sample events dated, the invocation). `cargo-lambda`
//! must be on PATH (`make test` installs it into `.venv`).

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use gate::clock::{Clock, SystemClock};

use crate::{dynamo_client, fresh_queue, fresh_tables, moto_endpoint, sqs_client, unique, REGION};

/// The workspace root (where `cargo lambda` finds the function binaries and `events/`).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The ports `free_port` has handed out in this process.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A loopback port free at the time of the call and never handed out before in this process:
/// the port is released before a watcher or a server binds it, and two tests running side by
/// side could otherwise be given the same one (the kernel picks among about 14,000).
pub fn free_port() -> u16 {
    let mut handed_out = HANDED_OUT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        if handed_out.insert(port) {
            return port;
        }
    }
}

/// `cargo lambda watch`, spawned in its own process group (`process_group(0)`), killed group and
/// all on drop, also when the test fails.
pub struct Watch(pub Child);

impl Drop for Watch {
    fn drop(&mut self) {
        let pgid = self.0.id();
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{pgid}")])
            .status();
        std::thread::sleep(Duration::from_millis(300));
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pgid}")])
            .status();
        let _ = self.0.wait();
    }
}

/// `cargo lambda watch` before it starts: `cargo lambda watch --ignore-changes -A 127.0.0.1 -P
/// PORT` in the workspace root on a free loopback port (built once, not rebuilt when files change
/// while the test runs), stdin closed, in its own process group (so [`Watch`] stops it and the
/// function processes it runs). The functions' environment is the test's unless set through
/// [`Self::command`], [`Self::against_moto`], [`Self::consumer_of`], [`Self::ingress_to`] or
/// [`Self::json_logs`].
pub struct WatchCommand {
    command: Command,
    port: u16,
}

impl WatchCommand {
    /// The command on a free port (the struct docs).
    pub fn new() -> Self {
        let port = free_port();
        let mut command = Command::new("cargo");
        command
            .current_dir(workspace_root())
            .args([
                "lambda",
                "watch",
                "--ignore-changes",
                "-A",
                "127.0.0.1",
                "-P",
            ])
            .arg(port.to_string())
            .stdin(Stdio::null())
            .process_group(0);
        Self { command, port }
    }

    /// The port the watcher will listen on (for [`invoke`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The command, to set the functions' environment (`env`, `env_remove`).
    pub fn command(&mut self) -> &mut Command {
        &mut self.command
    }

    /// The functions' AWS SDK pointed at moto (`MOTO_ENDPOINT`): `AWS_ENDPOINT_URL`, dummy
    /// static credentials (`test`/`test`), region [`REGION`].
    pub fn against_moto(&mut self) -> &mut Self {
        self.command
            .env("AWS_ENDPOINT_URL", moto_endpoint())
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", REGION);
        self
    }

    /// The consumer's and reconciler's wiring: the store and manual queue of `moto`
    /// (`IDEMPOTENCY_TABLE`, `BOOKINGS_TABLE`, `MANUAL_QUEUE_URL`), `INTEGRATION_NAME`
    /// `integration`, `TERMINAL_BASE_URL` `terminal_base_url`.
    pub fn consumer_of(
        &mut self,
        moto: &MotoStore,
        integration: &str,
        terminal_base_url: &str,
    ) -> &mut Self {
        self.command
            .env("IDEMPOTENCY_TABLE", &moto.idempotency)
            .env("BOOKINGS_TABLE", &moto.bookings)
            .env("MANUAL_QUEUE_URL", &moto.manual_url)
            .env("INTEGRATION_NAME", integration)
            .env("TERMINAL_BASE_URL", terminal_base_url);
        self
    }

    /// The ingress's wiring: it queues to `queue_url` (`NOTIFICATION_QUEUE_URL`) and verifies
    /// with the sample events' local secret (`WEBHOOK_SECRETS`,
    /// [`ingress::event::LOCAL_SAMPLE_SECRET`]; `WEBHOOK_SECRET_ARN` unset).
    pub fn ingress_to(&mut self, queue_url: &str) -> &mut Self {
        self.command
            .env("NOTIFICATION_QUEUE_URL", queue_url)
            .env(
                "WEBHOOK_SECRETS",
                serde_json::json!({ "active": [ingress::event::LOCAL_SAMPLE_SECRET] }).to_string(),
            )
            .env_remove("WEBHOOK_SECRET_ARN");
        self
    }

    /// JSON log lines as Lambda's `LoggingConfig: JSON` gives them (`AWS_LAMBDA_LOG_FORMAT=JSON`)
    /// at `level` (`AWS_LAMBDA_LOG_LEVEL`; `None`: unset, the functions' default), `RUST_LOG`
    /// unset so the test's own does not reach them.
    pub fn json_logs(&mut self, level: Option<&str>) -> &mut Self {
        self.command
            .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
            .env_remove("RUST_LOG");
        match level {
            Some(level) => self.command.env("AWS_LAMBDA_LOG_LEVEL", level),
            None => self.command.env_remove("AWS_LAMBDA_LOG_LEVEL"),
        };
        self
    }

    /// Starts the watcher with its stdout and stderr going to `stdout` and `stderr`.
    ///
    /// # Panics
    /// When `cargo` cannot be started.
    pub fn spawn(mut self, stdout: Stdio, stderr: Stdio) -> Watch {
        let child = self
            .command
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("cargo lambda watch starts (is cargo-lambda installed? run `make test`)");
        Watch(child)
    }

    /// Starts the watcher with its stdout and stderr written to the files `watch.stdout` and
    /// `watch.stderr` in `dir` (created if missing), read back by [`LoggedWatch::stop`].
    ///
    /// # Panics
    /// When a file cannot be created or `cargo` cannot be started.
    pub fn spawn_logged(self, dir: &Path) -> LoggedWatch {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let (stdout, stderr) = (dir.join("watch.stdout"), dir.join("watch.stderr"));
        let create = |path: &Path| {
            std::fs::File::create(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        };
        let watch = self.spawn(create(&stdout).into(), create(&stderr).into());
        LoggedWatch {
            watch,
            stdout,
            stderr,
        }
    }
}

impl Default for WatchCommand {
    fn default() -> Self {
        Self::new()
    }
}

/// A running watcher whose output goes to two files ([`WatchCommand::spawn_logged`]).
pub struct LoggedWatch {
    watch: Watch,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl LoggedWatch {
    /// Lets the last lines reach the files (500 ms), stops the watcher and returns what it wrote:
    /// `(stdout, stderr)`, each empty if its file cannot be read.
    pub async fn stop(self) -> (String, String) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        drop(self.watch);
        (
            std::fs::read_to_string(&self.stdout).unwrap_or_default(),
            std::fs::read_to_string(&self.stderr).unwrap_or_default(),
        )
    }
}

/// The consumer's and reconciler's resources in moto, fresh: the idempotency and bookings
/// tables ([`fresh_tables`]) and the manual queue, with the clients that made them.
pub struct MotoStore {
    /// The DynamoDB client for moto.
    pub dynamo: aws_sdk_dynamodb::Client,
    /// The SQS client for moto.
    pub sqs: aws_sdk_sqs::Client,
    /// The idempotency table's name.
    pub idempotency: String,
    /// The bookings table's name.
    pub bookings: String,
    /// The manual queue's URL.
    pub manual_url: String,
}

impl MotoStore {
    /// Tables named after `base` and a queue named after `{base}-manual`.
    ///
    /// # Panics
    /// When moto refuses.
    pub async fn fresh(base: &str) -> Self {
        let dynamo = dynamo_client().await;
        let (idempotency, bookings) = fresh_tables(&dynamo, base).await;
        let sqs = sqs_client().await;
        let manual_url = fresh_queue(&sqs, &format!("{base}-manual")).await;
        Self {
            dynamo,
            sqs,
            idempotency,
            bookings,
            manual_url,
        }
    }
}

/// The `events/` files dated for now (`sim::sample_events`, as `docs/LOCAL_RUNS.md` does: their
/// windows as written end on a fixed day) in a fresh directory under the system's temporary one,
/// named after `base`; returns the directory.
///
/// # Panics
/// When the files cannot be read or written.
pub fn dated_events(base: &str) -> PathBuf {
    let events = std::env::temp_dir().join(unique(base));
    sim::sample_events::date_dir(
        &workspace_root().join("events"),
        &events,
        SystemClock.now_ms(),
    )
    .expect("sample events dated");
    events
}

/// `cargo lambda invoke FUNCTION -A 127.0.0.1 -P PORT --data-file FILE` (relative to the
/// workspace root), the answer parsed as JSON. Retries every 2 s for up to 15 minutes while the
/// watcher is not listening yet or compiles the function on its first invocation.
///
/// # Panics
/// If the invocation keeps failing, or its answer is not JSON.
pub fn invoke(port: u16, function: &str, data_file: impl AsRef<OsStr>) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let out = Command::new("cargo")
            .current_dir(workspace_root())
            .args(["lambda", "invoke", function, "-A", "127.0.0.1", "-P"])
            .arg(port.to_string())
            .args(["--output-format", "json", "--data-file"])
            .arg(data_file.as_ref())
            .output()
            .expect("cargo lambda invoke runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        if out.status.success() {
            return serde_json::from_str(stdout.trim())
                .unwrap_or_else(|e| panic!("invoke answer is not JSON ({e}): {stdout}"));
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            Instant::now() < deadline,
            "cargo lambda invoke kept failing: {stderr}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}
