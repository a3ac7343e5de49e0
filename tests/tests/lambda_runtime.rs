//! The Lambda runtime path: the real consumer binary under `cargo lambda watch`, against moto
//! (tables and queues created here) and the terminal simulator, invoked with the `events/` files
//! (dated for today first, as `docs/LOCAL_RUNS.md` does: `sim::sample_events`) through
//! `cargo lambda invoke`; and a function started without its configuration, which must fail the
//! invocation at once naming every missing variable. Needs `cargo-lambda` on PATH (`make test`
//! installs it into `.venv`) and `MOTO_ENDPOINT`.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gate::clock::{Clock, SystemClock};
use gate::record::RecordStatus;
use gate::store::BusinessRows;
use gate::store::IdempotencyStore;
use integration_tests::lambda_watch::{
    dated_events, invoke, workspace_root, MotoStore, Watch, WatchCommand,
};
use sim::terminal::{self, TerminalConfig, TerminalCore};

/// One `cargo lambda watch` of this file at a time: run side by side on a loaded machine, an
/// invocation of one test was once answered by the other test's unconfigured consumer (two
/// watchers on one loopback port: `free_port` releases the port before the watcher binds it).
static ONE_WATCHER: Mutex<()> = Mutex::new(());

fn one_watcher_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_WATCHER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn the_consumer_binary_processes_the_event_files_exactly_once() {
    let _one = one_watcher_at_a_time();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(consumer_binary_case());
}

async fn consumer_binary_case() {
    let moto = MotoStore::fresh("lambda").await;
    let core = TerminalCore::new(
        TerminalConfig::default(),
        Arc::new(SystemClock) as Arc<dyn Clock>,
    );
    let (terminal_addr, _server) = terminal::spawn(core.clone()).await.expect("terminal");

    let mut watch = WatchCommand::new();
    let port = watch.port();
    watch
        .against_moto()
        .consumer_of(&moto, "lambda-test", &format!("http://{terminal_addr}"))
        .command()
        .env("AWS_LAMBDA_LOG_FORMAT", "JSON");
    let _watch = watch.spawn(Stdio::null(), Stdio::null());

    let events = dated_events("gate-events");
    let (notification, batch_file) = (
        events.join("notification.json"),
        events.join("batch-duplicates-poison.json"),
    );

    let empty = serde_json::json!({ "batchItemFailures": [] });
    let file = notification.clone();
    let first = tokio::task::spawn_blocking(move || invoke(port, "consumer", file))
        .await
        .unwrap();
    assert_eq!(first, empty);
    let batch = tokio::task::spawn_blocking(move || invoke(port, "consumer", batch_file))
        .await
        .unwrap();
    assert_eq!(batch, empty, "the poison body is routed, not retried");
    let again = tokio::task::spawn_blocking(move || invoke(port, "consumer", notification))
        .await
        .unwrap();
    assert_eq!(again, empty);

    // The terminal: one slot per container, three containers.
    assert_eq!(core.slots_issued(), 3);
    let mut containers: Vec<String> = core
        .slots()
        .into_iter()
        .map(|s| s.equipment_number)
        .collect();
    containers.sort();
    assert_eq!(
        containers,
        vec!["CSQU3054383", "MSKU1234565", "MWCU6059784"]
    );

    // The tables: three committed records with their bookings, the slot ids matching.
    let store =
        gate_dynamo::DynamoStore::new(moto.dynamo.clone(), &moto.idempotency, &moto.bookings);
    for slot in core.slots() {
        let key = truck_slot::keys::event_key_of(
            &notification_id(&slot.equipment_number),
            &slot.equipment_number,
        );
        let record = store
            .get(&gate::record::record_pk("lambda-test", &key))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no record for {}", slot.equipment_number));
        assert_eq!(record.status, RecordStatus::Committed);
        assert_eq!(record.effect_id.as_deref(), Some(slot.effect_id.as_str()));
        let booking = store.business_row(&key).await.unwrap().unwrap();
        assert_eq!(booking.effect_id, slot.effect_id);
    }
    let scanned = moto
        .dynamo
        .scan()
        .table_name(&moto.bookings)
        .send()
        .await
        .unwrap();
    assert_eq!(scanned.count(), 3);

    // The reconciler binary: a record stranded three minutes ago (reserved, lease expired, the
    // claim never sent) is claimed once with its key and committed.
    let now = SystemClock.now_ms();
    // Tomorrow's window, whatever today is.
    let window = |hours: i64| {
        (chrono::Utc::now() + chrono::Duration::hours(hours))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let stranded_body = serde_json::json!({
        "notificationId": "PCS-CIS-20261201-000099",
        "equipment_number": "ABCD1234560",
        "preferred_window": {"start": window(24), "end": window(26)},
        "terminal": "ECT-DELTA",
        "pin": "RLS-999999"
    })
    .to_string();
    let notification = truck_slot::notification::parse_notification(
        &stranded_body,
        now,
        &["ECT-DELTA".to_string()],
    )
    .unwrap();
    let keys = truck_slot::derive_keys(&notification).unwrap();
    let helper = gate::consumer::Gate {
        config: gate::consumer::GateConfig::new("lambda-test"),
        store: Arc::new(store.clone()),
        integration: Arc::new(truck_slot::TruckSlot::new(
            Arc::new(
                truck_slot::terminal::HttpTerminal::new(
                    truck_slot::terminal::HttpTerminalConfig::new(format!(
                        "http://{terminal_addr}"
                    )),
                )
                .unwrap(),
            ),
            vec!["ECT-DELTA".into()],
        )),
        manual: Arc::new(gate::manual::MemoryManualQueue::new()),
        clock: Arc::new(SystemClock),
    };
    let dead = gate::consumer::Invocation {
        request_id: "inv-dead".into(),
        deadline_ms: now - 170_000,
    };
    let mut stranded = helper.config.new_record(
        &truck_slot::event(&notification).unwrap(),
        &keys,
        &dead,
        now - 200_000,
    );
    stranded.lease_until_ms = Some(now - 170_000);
    store.reserve(&stranded, now).await.unwrap();
    let report = tokio::task::spawn_blocking(move || {
        invoke(port, "reconciler", "events/scheduled-reconcile.json")
    })
    .await
    .unwrap();
    assert_eq!(report["reconciled"], 1, "{report}");
    assert_eq!(report["found_by_lookup"], 0, "{report}");
    let after = store.get(&stranded.pk).await.unwrap().unwrap();
    assert_eq!(after.status, RecordStatus::Committed);
    let abcd: Vec<_> = core
        .slots()
        .into_iter()
        .filter(|s| s.equipment_number == "ABCD1234560")
        .collect();
    assert_eq!(abcd.len(), 1);
    assert_eq!(
        abcd[0].idempotency_key.as_deref(),
        Some(stranded.op_key.as_str())
    );
    assert_eq!(after.effect_id.as_deref(), Some(abcd[0].effect_id.as_str()));

    // The metrics binary: nothing is in_flight any more, no key has two slot ids.
    let signals = tokio::task::spawn_blocking(move || {
        invoke(port, "metrics-publisher", "events/scheduled-metrics.json")
    })
    .await
    .unwrap();
    assert_eq!(
        signals,
        serde_json::json!({
            "oldest_in_flight_age_s": 0,
            "in_flight_older_than_10m": 0,
            "multi_effect_keys": 0
        })
    );

    // The manual queue: exactly the poison body, with its reason.
    let received = moto
        .sqs
        .receive_message()
        .queue_url(&moto.manual_url)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap();
    let messages = received.messages();
    assert_eq!(messages.len(), 1);
    let body: serde_json::Value = serde_json::from_str(messages[0].body().unwrap()).unwrap();
    assert_eq!(body["original_body"], "{bad");
    assert_eq!(body["reason"], "rejected");
    let _ = std::fs::remove_dir_all(&events);
}

/// Every variable the functions read (`gate_lambda::config`, `truck_slot::config`), removed from the watcher's environment
/// so that a developer's own exports cannot configure the function under test.
const CONFIG_VARIABLES: &[&str] = &[
    "INTEGRATION_NAME",
    "IDEMPOTENCY_TABLE",
    "BOOKINGS_TABLE",
    "MANUAL_QUEUE_URL",
    "TERMINAL_BASE_URL",
    "TERMINAL_API_TOKEN_SECRET_ARN",
    "TERMINAL_API_TOKEN",
    "TERMINAL_SUPPORTS_IDEMPOTENCY_KEY",
    "KNOWN_TERMINALS",
    "KEY_TTL_SECONDS",
    "LEASE_FLOOR_MS",
    "MAX_CONCURRENCY",
    "DEADLINE_MARGIN_MS",
    "TERMINAL_CONNECT_TIMEOUT_MS",
    "TERMINAL_REQUEST_TIMEOUT_MS",
    "RECONCILE_MIN_AGE_SECONDS",
    "RECONCILE_SWEEP_INTERVAL_SECONDS",
    "SERVER_KEY_RETENTION_SECONDS",
    "RETENTION_MARGIN_SECONDS",
    "RECONCILE_PAGE_SIZE",
    "LOG_SENSITIVE_BODIES",
    "NOTIFICATION_QUEUE_URL",
    "WEBHOOK_SECRET_ARN",
    "WEBHOOK_SECRETS",
];

/// Started without configuration (LOCAL_RUNS.md's step 3 forgotten), each function reports its
/// init error to the Runtime API and the invocation fails at once with it, every missing
/// variable named in one message, instead of waiting forever for a runtime that never asks for
/// its event. Timed from the function's start (the watcher's `Running` line), not from the
/// invocation, so that the watcher's first build does not count. One watcher per function:
/// `cargo lambda watch` (1.9) hands an init error to the oldest waiting invocation of any
/// function, not necessarily the one that failed.
#[test]
fn a_function_without_configuration_fails_the_invocation_at_once_naming_every_variable() {
    let _one = one_watcher_at_a_time();
    let four = "invalid configuration: 4 problems: TERMINAL_BASE_URL: missing (required); \
                IDEMPOTENCY_TABLE: missing (required); BOOKINGS_TABLE: missing (required); \
                MANUAL_QUEUE_URL: missing (required)";
    for (function, message) in [
        ("consumer", four),
        ("reconciler", four),
        (
            "metrics-publisher",
            "invalid configuration: 1 problem: IDEMPOTENCY_TABLE: missing (required)",
        ),
        (
            "ingress",
            "invalid configuration: 2 problems: NOTIFICATION_QUEUE_URL: missing (required); \
             WEBHOOK_SECRET_ARN: missing (required; or WEBHOOK_SECRETS for local runs)",
        ),
    ] {
        let mut watch = WatchCommand::new();
        let port = watch.port();
        for variable in CONFIG_VARIABLES {
            watch.command().env_remove(variable);
        }
        let mut watch = watch.spawn(Stdio::piped(), Stdio::piped());
        let log = WatchLog::follow(&mut watch);

        let (answer, after_start) = invoke_timed(port, function, &log);
        assert!(
            after_start < Duration::from_secs(30),
            "{function}: answered {after_start:?} after the function started"
        );
        assert_eq!(
            answer,
            serde_json::json!({
                "errorType": "Runtime.InvalidConfiguration",
                "errorMessage": message
            }),
            "{function}"
        );
        assert!(
            log.text().contains(message),
            "{function}: the message is logged too:\n{}",
            log.text()
        );
    }
}

/// The watcher's output, followed line by line, with the time each function binary started
/// (cargo's `Running `target/debug/NAME`` line, the target directory wherever it is).
#[derive(Clone, Default)]
struct WatchLog(Arc<Mutex<Followed>>);

/// The text so far, and each binary's start (name, when).
type Followed = (String, Vec<(String, Instant)>);

impl WatchLog {
    fn follow(watch: &mut Watch) -> Self {
        let log = Self::default();
        let streams: Vec<Box<dyn Read + Send>> = vec![
            Box::new(watch.0.stdout.take().expect("stdout piped")),
            Box::new(watch.0.stderr.take().expect("stderr piped")),
        ];
        for stream in streams {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let mut inner = log.0.lock().unwrap();
                    // `target/debug/NAME`, or under `CARGO_TARGET_DIR` (`/some/dir/debug/NAME`).
                    if let Some(binary) = line
                        .trim()
                        .strip_prefix("Running `")
                        .and_then(|rest| rest.strip_suffix('`'))
                        .and_then(|path| path.rsplit_once("debug/"))
                        .map(|(_, name)| name)
                    {
                        inner.1.push((binary.to_string(), Instant::now()));
                    }
                    inner.0.push_str(&line);
                    inner.0.push('\n');
                }
            });
        }
        log
    }

    fn text(&self) -> String {
        self.0.lock().unwrap().0.clone()
    }

    /// When `function` last started, if it did.
    fn started(&self, function: &str) -> Option<Instant> {
        let inner = self.0.lock().unwrap();
        inner
            .1
            .iter()
            .rev()
            .find(|(b, _)| b == function)
            .map(|(_, t)| *t)
    }
}

/// `cargo lambda invoke FUNCTION` with `events/notification.json`, retried while the watcher is
/// not listening yet; returns the answer (JSON) and how long after the function's start it came.
///
/// # Panics
/// If no answer comes within 30 s of the function's start (or 15 minutes in all, for the
/// watcher's first build), or the answer is not JSON.
fn invoke_timed(port: u16, function: &str, log: &WatchLog) -> (serde_json::Value, Duration) {
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let mut child = Command::new("cargo")
            .current_dir(workspace_root())
            .args(["lambda", "invoke", function, "-A", "127.0.0.1", "-P"])
            .arg(port.to_string())
            .args([
                "--output-format",
                "json",
                "--data-file",
                "events/notification.json",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cargo lambda invoke runs");
        let status = loop {
            if let Some(status) = child.try_wait().expect("invoke waits") {
                break status;
            }
            let hung = log
                .started(function)
                .is_some_and(|t| t.elapsed() > Duration::from_secs(30));
            if hung || Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{function}: the invocation got no answer (started: {:?} ago); a function that \
                     cannot start must report its init error. Watcher log:\n{}",
                    log.started(function).map(|t| t.elapsed()),
                    log.text()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let mut stdout = String::new();
        let mut stderr = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        if status.success() {
            let started = log.started(function).unwrap_or_else(|| {
                panic!(
                    "{function}: answered, but never started? Log:\n{}",
                    log.text()
                )
            });
            let answer = serde_json::from_str(stdout.trim())
                .unwrap_or_else(|e| panic!("{function}: answer is not JSON ({e}): {stdout}"));
            return (answer, started.elapsed());
        }
        // Only "the watcher is not listening yet" is worth another try.
        assert!(
            stderr.contains("error sending request to the runtime emulator")
                && Instant::now() < deadline,
            "{function}: cargo lambda invoke failed: {stderr}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The notification ids the event files use, by container.
fn notification_id(container: &str) -> String {
    let text =
        std::fs::read_to_string(workspace_root().join("events/batch-duplicates-poison.json"))
            .unwrap()
            + &std::fs::read_to_string(workspace_root().join("events/notification.json")).unwrap();
    let events: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&text)
        .into_iter::<serde_json::Value>()
        .map(|v| v.unwrap())
        .collect();
    for event in events {
        for record in event["Records"].as_array().unwrap() {
            if let Ok(body) =
                serde_json::from_str::<serde_json::Value>(record["body"].as_str().unwrap())
            {
                if body["equipment_number"] == container {
                    return body["notificationId"].as_str().unwrap().to_string();
                }
            }
        }
    }
    panic!("no notification for {container}")
}
