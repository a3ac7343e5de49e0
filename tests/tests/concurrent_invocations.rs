//! Several invocations at once in one process, as Lambda Managed Instances run them
//! (`AWS_LAMBDA_MAX_CONCURRENCY`; `gate_lambda::concurrency`): the real consumer binary, one
//! process with `AWS_LAMBDA_MAX_CONCURRENCY=2`, against moto and the terminal simulator, driven
//! by a Runtime API served here that hands out two invocations only once two `GET .../next`
//! requests of the process are waiting, so both are in the process at the same time (a process
//! that polls for one invocation at a time never gets them, and the case fails saying so).
//!
//! * the same notification in both: one slot, one booking, one `Committed` and one duplicate;
//! * different notifications (one in the first, two in the second): each booked once; each
//!   invocation's EMF document carries its own request id and its own counts, each record's log
//!   line the request id of the invocation that carried it (its span), each record the lease
//!   token of that invocation (`{request id}/{nonce}#{n}`);
//! * different deadlines: a record of the invocation with 5 s left is not started (a batch item
//!   failure, nothing reserved) while the other's, with 60 s, is booked: each invocation runs to
//!   its own deadline.
//!
//! Needs `MOTO_ENDPOINT` (`scripts/with-moto.sh`); builds the consumer binary
//! (`lambda_env::function_binaries`).

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::routing::{get, post};
use gate::clock::{Clock, SystemClock};
use gate::record::RecordStatus;
use gate::store::BusinessRows;
use gate::store::IdempotencyStore;
use gate_dynamo::DynamoStore;
use integration_tests::lambda_env::function_binaries;
use integration_tests::lambda_watch::MotoStore;
use integration_tests::{moto_endpoint, unique, REGION};
use serde_json::{json, Value};
use sim::terminal::{self, TerminalConfig, TerminalCore};
use tokio::sync::{mpsc, oneshot};

/// The integration's name (the records' key prefix, the EMF dimension).
const INTEGRATION: &str = "concurrent";

/// How long the case waits for the process to ask for an invocation: a cold start included.
const PICKUP_WAIT: Duration = Duration::from_secs(60);

/// How long the case waits for an answer (far above the longest deadline handed out).
const ANSWER_WAIT: Duration = Duration::from_secs(180);

/// An invocation handed out: its request id, its deadline (epoch ms), its event.
struct Handout {
    id: String,
    deadline_ms: i64,
    payload: Vec<u8>,
}

/// The Runtime API's state: the `next` requests waiting for an invocation, the answers awaited,
/// an init error if the process reported one.
#[derive(Clone)]
struct Api {
    pollers: mpsc::UnboundedSender<oneshot::Sender<Handout>>,
    answers: Arc<Mutex<HashMap<String, oneshot::Sender<Value>>>>,
    init_error: Arc<Mutex<Option<String>>>,
}

async fn next(State(api): State<Api>) -> (StatusCode, HeaderMap, Vec<u8>) {
    let (tx, rx) = oneshot::channel();
    if api.pollers.send(tx).is_err() {
        return (StatusCode::GONE, HeaderMap::new(), Vec::new());
    }
    let Ok(handout) = rx.await else {
        return (StatusCode::GONE, HeaderMap::new(), Vec::new());
    };
    let mut headers = HeaderMap::new();
    let value = |s: String| HeaderValue::from_str(&s).expect("header value");
    headers.insert("lambda-runtime-aws-request-id", value(handout.id));
    headers.insert(
        "lambda-runtime-deadline-ms",
        value(handout.deadline_ms.to_string()),
    );
    headers.insert(
        "lambda-runtime-invoked-function-arn",
        value("arn:aws:lambda:eu-west-1:123456789012:function:consumer".into()),
    );
    headers.insert("content-type", value("application/json".into()));
    (StatusCode::OK, headers, handout.payload)
}

fn answer(api: &Api, id: &str, value: Value) -> StatusCode {
    if let Some(tx) = api.answers.lock().unwrap().remove(id) {
        let _ = tx.send(value);
    }
    StatusCode::ACCEPTED
}

async fn response(State(api): State<Api>, UrlPath(id): UrlPath<String>, body: Bytes) -> StatusCode {
    let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    answer(&api, &id, value)
}

async fn error(State(api): State<Api>, UrlPath(id): UrlPath<String>, body: Bytes) -> StatusCode {
    answer(
        &api,
        &id,
        json!({ "error": String::from_utf8_lossy(&body) }),
    )
}

async fn init_error(State(api): State<Api>, body: Bytes) -> StatusCode {
    *api.init_error.lock().unwrap() = Some(String::from_utf8_lossy(&body).into_owned());
    StatusCode::ACCEPTED
}

/// The consumer process, killed (its process group) when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.0.wait();
    }
}

/// One consumer process with its Runtime API.
struct Environment {
    api: Api,
    pollers: tokio::sync::Mutex<mpsc::UnboundedReceiver<oneshot::Sender<Handout>>>,
    log: PathBuf,
    _process: Process,
    _server: tokio::task::JoinHandle<()>,
}

impl Environment {
    /// Starts the consumer binary with `AWS_LAMBDA_MAX_CONCURRENCY=2` against `moto` and the
    /// terminal at `terminal_url`, its output in `log`.
    async fn start(moto: &MotoStore, terminal_url: &str, log: PathBuf) -> Self {
        let (pollers_tx, pollers_rx) = mpsc::unbounded_channel();
        let api = Api {
            pollers: pollers_tx,
            answers: Arc::default(),
            init_error: Arc::default(),
        };
        let app = axum::Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(response),
            )
            .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
            .route("/2018-06-01/runtime/init/error", post(init_error))
            .with_state(api.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the runtime API");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let binary = function_binaries(&["consumer"]).join("consumer");
        let out = std::fs::File::create(&log).expect("log file");
        let child = Command::new(&binary)
            .env_remove("RUST_LOG")
            .env_remove("AWS_LAMBDA_LOG_LEVEL")
            .env("AWS_LAMBDA_MAX_CONCURRENCY", "2")
            .env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
            .env("AWS_LAMBDA_FUNCTION_NAME", "consumer")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "concurrent")
            .env("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/consumer")
            .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
            .env("AWS_ENDPOINT_URL", moto_endpoint())
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", REGION)
            .env("IDEMPOTENCY_TABLE", &moto.idempotency)
            .env("BOOKINGS_TABLE", &moto.bookings)
            .env("MANUAL_QUEUE_URL", &moto.manual_url)
            .env("INTEGRATION_NAME", INTEGRATION)
            .env("TERMINAL_BASE_URL", terminal_url)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", binary.display()));
        Self {
            api,
            pollers: tokio::sync::Mutex::new(pollers_rx),
            log,
            _process: Process(child),
            _server: server,
        }
    }

    /// Hands out `invocations` (request id, time left in ms, event) at once, after as many
    /// `next` requests of the process are waiting; returns their answers in the same order.
    async fn invoke_together(&self, invocations: Vec<(&str, i64, Value)>) -> Vec<Value> {
        let mut pollers = self.pollers.lock().await;
        let mut waiting = Vec::new();
        for _ in &invocations {
            match tokio::time::timeout(PICKUP_WAIT, pollers.recv()).await {
                Ok(Some(poller)) => waiting.push(poller),
                _ => panic!(
                    "the process asked for {} invocation(s) at once, not {}: it does not run \
                     invocations concurrently (init error: {:?}; log {})",
                    waiting.len(),
                    invocations.len(),
                    self.api.init_error.lock().unwrap(),
                    self.log.display()
                ),
            }
        }
        let mut answers = Vec::new();
        for (poller, (id, left_ms, event)) in waiting.into_iter().zip(invocations) {
            let (tx, rx) = oneshot::channel();
            self.api.answers.lock().unwrap().insert(id.to_string(), tx);
            let handout = Handout {
                id: id.to_string(),
                deadline_ms: SystemClock.now_ms() + left_ms,
                payload: serde_json::to_vec(&event).expect("event"),
            };
            assert!(
                poller.send(handout).is_ok(),
                "the next request of {id} is gone"
            );
            answers.push((id.to_string(), rx));
        }
        let mut out = Vec::new();
        for (id, rx) in answers {
            let answer = tokio::time::timeout(ANSWER_WAIT, rx)
                .await
                .unwrap_or_else(|_| panic!("no answer to {id} (log {})", self.log.display()))
                .expect("answer");
            out.push(answer);
        }
        out
    }

    /// The process's JSON lines so far.
    fn lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// A notification `id` for `container`, its window `offset_h` hours after the next full hour a
/// day from now (so that no two notifications of the case share a container's window, the
/// natural key).
fn body(id: &str, container: &str, offset_h: i64) -> String {
    let hour_ms = 3_600_000;
    let start_ms = (SystemClock.now_ms() / hour_ms + 24 + offset_h) * hour_ms;
    let at = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .expect("time")
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    };
    json!({
        "notificationId": id,
        "equipment_number": container,
        "preferred_window": {"start": at(start_ms), "end": at(start_ms + 2 * hour_ms)},
        "terminal": "ECT-DELTA",
        "pin": "RLS-104233",
        "gross_mass_kg": 25000,
    })
    .to_string()
}

/// An SQS event of `(message id, body)` records.
fn event(records: &[(&str, &str)]) -> Value {
    serde_json::to_value(gate_testkit::sqs_event(records)).expect("event")
}

fn no_failures() -> Value {
    json!({ "batchItemFailures": [] })
}

/// The request id of a JSON log line's span (`lambda_runtime`'s per-invocation span).
fn request_id_of(line: &Value) -> Option<&str> {
    line["span"]["requestId"].as_str().or_else(|| {
        line["spans"]
            .as_array()?
            .iter()
            .find_map(|s| s["requestId"].as_str())
    })
}

/// The `record processed` lines: message id → (outcome, the span's request id).
fn record_lines(lines: &[Value]) -> HashMap<String, (String, String)> {
    lines
        .iter()
        .filter(|l| l["fields"]["message"] == "record processed")
        .map(|l| {
            let field = |k: &str| l["fields"][k].as_str().unwrap_or_default().to_string();
            (
                field("message_id"),
                (
                    field("outcome"),
                    request_id_of(l).unwrap_or_default().to_string(),
                ),
            )
        })
        .collect()
}

/// The EMF counter documents of the invocation `request_id`.
fn emf_of<'a>(lines: &'a [Value], request_id: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| l.get("_aws").is_some() && l["RequestId"] == request_id)
        .filter(|l| l.get("Received").is_some())
        .collect()
}

/// Slots the terminal issued for `container` in the window of `body`.
fn slots_for(core: &TerminalCore, container: &str, body: &str) -> usize {
    let window: Value =
        serde_json::from_str::<Value>(body).expect("body")["preferred_window"]["start"].clone();
    core.slots()
        .iter()
        .filter(|s| s.equipment_number == container && window == s.window_start.as_str())
        .count()
}

/// The stored record of the notification `id` for `container`.
async fn record_of(
    store: &DynamoStore,
    id: &str,
    container: &str,
) -> Option<gate::record::IdempotencyRecord> {
    let key = truck_slot::keys::event_key_of(id, container);
    store
        .get(&gate::record::record_pk(INTEGRATION, &key))
        .await
        .expect("GetItem")
}

#[test]
fn two_invocations_at_once_in_one_process() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(two_invocations_at_once_case());
}

async fn two_invocations_at_once_case() {
    let moto = MotoStore::fresh("concurrent").await;
    // Each claim takes 500 ms, so the second copy of one notification meets the first in flight.
    let core = TerminalCore::new(
        TerminalConfig {
            latency_ms: 500,
            ..TerminalConfig::default()
        },
        Arc::new(SystemClock) as Arc<dyn Clock>,
    );
    let (terminal_addr, _terminal) = terminal::spawn(core.clone()).await.expect("terminal");
    let dir = std::env::temp_dir().join(unique("concurrent-invocations"));
    std::fs::create_dir_all(&dir).expect("dir");
    let env = Environment::start(
        &moto,
        &format!("http://{terminal_addr}"),
        dir.join("consumer.log"),
    )
    .await;
    let store = DynamoStore::new(moto.dynamo.clone(), &moto.idempotency, &moto.bookings);

    // 1. The same notification in both invocations: one slot, one booking.
    let same = body("PCS-CONC-000001", "CSQU3054383", 0);
    let answers = env
        .invoke_together(vec![
            ("same-a", 60_000, event(&[("m-same-a", &same)])),
            ("same-b", 60_000, event(&[("m-same-b", &same)])),
        ])
        .await;
    assert_eq!(answers, [no_failures(), no_failures()]);
    assert_eq!(slots_for(&core, "CSQU3054383", &same), 1, "one slot");
    let record = record_of(&store, "PCS-CONC-000001", "CSQU3054383")
        .await
        .expect("the record");
    assert_eq!(record.status, RecordStatus::Committed);
    let key = truck_slot::keys::event_key_of("PCS-CONC-000001", "CSQU3054383");
    assert!(store.business_row(&key).await.expect("GetItem").is_some());
    let lines = env.lines();
    let records = record_lines(&lines);
    let mut outcomes: Vec<&str> = ["m-same-a", "m-same-b"]
        .iter()
        .map(|m| records.get(*m).map_or("no line", |(o, _)| o.as_str()))
        .collect();
    println!("the same notification twice at once: {outcomes:?}");
    outcomes.sort_unstable();
    assert!(
        outcomes == ["Committed", "Duplicate"] || outcomes == ["Committed", "DuplicateInFlight"],
        "one commit and one duplicate: {outcomes:?}"
    );
    for id in ["same-a", "same-b"] {
        let docs = emf_of(&lines, id);
        assert_eq!(docs.len(), 1, "one EMF document of {id}: {docs:?}");
        assert_eq!(docs[0]["Received"], 1, "{id}: {:?}", docs[0]);
    }
    let committed: i64 = ["same-a", "same-b"]
        .iter()
        .map(|id| emf_of(&lines, id)[0]["Committed"].as_i64().unwrap_or(-1))
        .sum();
    assert_eq!(committed, 1);

    // 2. Different notifications: one in the first invocation, two in the second.
    let a = body("PCS-CONC-000002", "MWCU6059784", 2);
    let b1 = body("PCS-CONC-000003", "MSKU1234565", 2);
    let b2 = body("PCS-CONC-000004", "TGHU9876542", 2);
    let answers = env
        .invoke_together(vec![
            ("diff-a", 60_000, event(&[("m-diff-a", &a)])),
            (
                "diff-b",
                60_000,
                event(&[("m-diff-b1", &b1), ("m-diff-b2", &b2)]),
            ),
        ])
        .await;
    assert_eq!(answers, [no_failures(), no_failures()]);
    let lines = env.lines();
    let records = record_lines(&lines);
    for (id, container, text, message, invocation) in [
        ("PCS-CONC-000002", "MWCU6059784", &a, "m-diff-a", "diff-a"),
        ("PCS-CONC-000003", "MSKU1234565", &b1, "m-diff-b1", "diff-b"),
        ("PCS-CONC-000004", "TGHU9876542", &b2, "m-diff-b2", "diff-b"),
    ] {
        assert_eq!(slots_for(&core, container, text), 1, "{id}: one slot");
        let record = record_of(&store, id, container).await.expect("record");
        assert_eq!(record.status, RecordStatus::Committed, "{id}");
        let owner = record.lease_owner.clone().unwrap_or_default();
        assert!(
            owner.starts_with(&format!("{invocation}/")),
            "{id}: the lease token of {invocation}, not {owner:?}"
        );
        let key = truck_slot::keys::event_key_of(id, container);
        let row = store.business_row(&key).await.expect("GetItem");
        assert_eq!(
            row.map(|r| r.effect_id),
            record.effect_id.clone(),
            "{id}: its booking"
        );
        assert_eq!(
            records.get(message),
            Some(&("Committed".to_string(), invocation.to_string())),
            "{message}: its line in the span of {invocation}"
        );
    }
    for (id, received) in [("diff-a", 1), ("diff-b", 2)] {
        let docs = emf_of(&lines, id);
        assert_eq!(docs.len(), 1, "one EMF document of {id}: {docs:?}");
        assert_eq!(
            (docs[0]["Received"].as_i64(), docs[0]["Committed"].as_i64()),
            (Some(received), Some(received)),
            "{id}: its own counts: {:?}",
            docs[0]
        );
    }

    // 3. Different deadlines: 60 s left and 5 s left (less than the deadline margin, 12 s).
    let long = body("PCS-CONC-000005", "CSQU3054383", 4);
    let short = body("PCS-CONC-000006", "MWCU6059784", 4);
    let answers = env
        .invoke_together(vec![
            ("late-a", 60_000, event(&[("m-late-a", &long)])),
            ("late-b", 5_000, event(&[("m-late-b", &short)])),
        ])
        .await;
    assert_eq!(
        answers,
        [
            no_failures(),
            json!({ "batchItemFailures": [{ "itemIdentifier": "m-late-b" }] })
        ]
    );
    assert_eq!(slots_for(&core, "CSQU3054383", &long), 1);
    assert_eq!(slots_for(&core, "MWCU6059784", &short), 0);
    assert!(record_of(&store, "PCS-CONC-000006", "MWCU6059784")
        .await
        .is_none());
    let records = record_lines(&env.lines());
    assert_eq!(
        records.get("m-late-b"),
        Some(&("NotStarted".to_string(), "late-b".to_string()))
    );
    assert_eq!(core.slots_issued(), 5, "one slot per booked notification");
    let _ = std::fs::remove_dir_all(&dir);
}
