//! Over 600 lines (near 700): the handlers are one concern, each a phase over the same
//! deliveries, kept side by side so that what each one measures stays comparable.
//!
//! The handlers, each run over the same deliveries as one phase: the naive handler and the
//! gate in this process (CPU from `getrusage`), Powertools in a Python child process (which
//! reports its own `time.process_time`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use gate::clock::{Clock, SystemClock};
use gate::consumer::{Gate, GateConfig, Invocation, RecordOutcome};
use gate::manual::MemoryManualQueue;
use gate_dynamo::create_tables;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use truck_slot::terminal::{HttpTerminal, HttpTerminalConfig};

use crate::counter::{dynamo_client, dynamo_client_with, CallRecorder, ClientSettings};
use crate::stats;
use crate::workload::Delivery;

/// Which handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Kind {
    /// Claim + booking `PutItem`, no key.
    Naive,
    /// `Gate::handle_batch` over `DynamoStore` and `HttpTerminal`.
    Gate,
    /// Python, Powertools `idempotent_function` + `DynamoDBPersistenceLayer`.
    Powertools,
    /// The floor: the DynamoDB requests and the terminal call the gate sends per delivery,
    /// through the same clients and the same public store methods (`DynamoStore`, `HttpTerminal`)
    /// in a bare loop: per new event the reserve `PutItem`, the natural key's guard `PutItem`
    /// (`IdempotencyStore::guard`), the claim and the commit `TransactWriteItems`; per duplicate
    /// the reserve alone. Records are built before the measured loop: no parse, no keys, no
    /// outcome logic, no log line.
    Floor,
    /// The floor with the SDK's stalled-stream protection off (on by default with
    /// `BehaviorVersion::latest()`): what that setting costs per request.
    FloorNoStall,
    /// The floor with no idle connection kept to DynamoDB (`pool_max_idle_per_host(0)`): every
    /// request opens a new TCP connection, as an invocation does after the pool's idle timeout
    /// (90 s). Plain HTTP to moto, so without the TLS handshake a real endpoint adds.
    FloorNoReuse,
    /// The gate on a current-thread runtime of its own, as the functions run
    /// (`#[tokio::main(flavor = "current_thread")]`); the other handlers run on the harness's
    /// multi-thread runtime.
    GateCurrentThread,
    /// The floor on a current-thread runtime of its own (as [`Kind::GateCurrentThread`]): what
    /// the runtime's flavour costs per event.
    FloorCurrentThread,
}

impl Kind {
    /// All of them, in table order.
    pub const ALL: [Kind; 8] = [
        Kind::Naive,
        Kind::Gate,
        Kind::Powertools,
        Kind::Floor,
        Kind::FloorNoStall,
        Kind::FloorNoReuse,
        Kind::GateCurrentThread,
        Kind::FloorCurrentThread,
    ];

    /// The short name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Naive => "naive",
            Kind::Gate => "gate",
            Kind::Powertools => "powertools",
            Kind::Floor => "floor",
            Kind::FloorNoStall => "floor-nostall",
            Kind::FloorNoReuse => "floor-noreuse",
            Kind::GateCurrentThread => "gate-1thread",
            Kind::FloorCurrentThread => "floor-1thread",
        }
    }
}

/// What one handler did over one workload.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Phase {
    /// Deliveries processed.
    pub events: usize,
    /// Wall time of the measured loop, seconds.
    pub wall_s: f64,
    /// The client process's CPU (user + system) during the loop, seconds.
    pub cpu_s: f64,
    /// Per-delivery latency, microseconds, in delivery order.
    pub latencies_us: Vec<u64>,
    /// DynamoDB requests by operation.
    pub calls: BTreeMap<String, u64>,
    /// Outcomes by name (`committed`, `duplicate`, ...).
    pub outcomes: BTreeMap<String, u64>,
    /// Slots the terminal issued during the measured loop.
    #[serde(default)]
    pub slots_issued: usize,
}

impl Phase {
    /// Deliveries per second.
    pub fn events_per_s(&self) -> f64 {
        self.events as f64 / self.wall_s
    }

    /// CPU microseconds per delivery.
    pub fn cpu_us_per_event(&self) -> f64 {
        self.cpu_s * 1e6 / self.events as f64
    }

    /// DynamoDB requests per delivery.
    pub fn calls_per_event(&self) -> f64 {
        self.calls.values().sum::<u64>() as f64 / self.events as f64
    }

    /// Latency quantile in milliseconds.
    pub fn latency_ms(&self, q: f64) -> f64 {
        stats::quantile(&self.latencies_us, q) as f64 / 1000.0
    }
}

/// Where the handlers talk to.
#[derive(Debug, Clone)]
pub struct Env {
    /// The moto endpoint.
    pub moto: String,
    /// The terminal simulator's base URL.
    pub terminal: String,
    /// The Python interpreter with Powertools installed.
    pub python: PathBuf,
    /// `bench/powertools/handler.py`.
    pub handler_py: PathBuf,
    /// A directory for the workload files handed to Python.
    pub work_dir: PathBuf,
}

/// An SQS event of one delivery, built outside the timed section.
pub fn sqs_event(deliveries: &[&Delivery]) -> SqsEvent {
    let records: Vec<Value> = deliveries
        .iter()
        .map(|d| {
            serde_json::json!({
                "messageId": d.message_id,
                "body": d.body,
                "eventSource": "aws:sqs",
                "awsRegion": "eu-west-1",
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({ "Records": records })).unwrap_or_default()
}

/// Creates a PAY_PER_REQUEST table with a string partition key `key`.
///
/// # Errors
/// When moto refuses.
pub async fn create_table(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
    key: &str,
) -> Result<(), String> {
    let attr = AttributeDefinition::builder()
        .attribute_name(key)
        .attribute_type(ScalarAttributeType::S)
        .build()
        .map_err(|e| e.to_string())?;
    let schema = KeySchemaElement::builder()
        .attribute_name(key)
        .key_type(KeyType::Hash)
        .build()
        .map_err(|e| e.to_string())?;
    client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attr)
        .key_schema(schema)
        .send()
        .await
        .map_err(|e| format!("create table {name}: {e:?}"))?;
    Ok(())
}

/// Slots the terminal simulator has issued so far (`GET /slots`).
pub async fn slots_issued(http: &reqwest::Client, terminal: &str) -> usize {
    let Ok(resp) = http.get(format!("{terminal}/slots")).send().await else {
        return 0;
    };
    let Ok(bytes) = resp.bytes().await else {
        return 0;
    };
    serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| v.get("slots").and_then(Value::as_array).map(Vec::len))
        .unwrap_or(0)
}

/// The naive handler: for each record, claim a slot (no `Idempotency-Key`) and `PutItem` the
/// booking keyed by the SQS message id. No key, no reserve, no transaction.
pub struct Naive {
    http: reqwest::Client,
    slots_url: String,
    client: aws_sdk_dynamodb::Client,
    table: String,
}

impl Naive {
    /// The naive handler booking into `table` over `client`, claiming at `terminal`.
    pub fn new(client: aws_sdk_dynamodb::Client, table: String, terminal: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            slots_url: format!("{terminal}/slots"),
            client,
            table,
        }
    }

    /// Handles a batch record by record; returns how many records succeeded.
    pub async fn handle(&self, event: SqsEvent) -> usize {
        let mut ok = 0;
        for record in event.records {
            if self.record(record).await.is_ok() {
                ok += 1;
            }
        }
        ok
    }

    async fn record(
        &self,
        record: aws_lambda_events::event::sqs::SqsMessage,
    ) -> Result<(), String> {
        let body: Value = serde_json::from_str(record.body.as_deref().unwrap_or(""))
            .map_err(|e| e.to_string())?;
        let field = |p: &str| body.pointer(p).and_then(Value::as_str).unwrap_or("");
        let request = serde_json::json!({
            "equipment_number": field("/equipment_number"),
            "window_start": field("/preferred_window/start"),
            "window_end": field("/preferred_window/end"),
            "pin": field("/pin"),
        });
        let response = self
            .http
            .post(&self.slots_url)
            .header("Content-Type", "application/json")
            .body(request.to_string())
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let bytes = response.bytes().await.map_err(|e| e.to_string())?;
        let answer: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        let slot = answer
            .get("slot_id")
            .and_then(Value::as_str)
            .ok_or("no slot_id")?;
        let s = |v: &str| aws_sdk_dynamodb::types::AttributeValue::S(v.to_string());
        self.client
            .put_item()
            .table_name(&self.table)
            .item(
                "source_event",
                s(record.message_id.as_deref().unwrap_or("")),
            )
            .item("container", s(field("/equipment_number")))
            .item("slot_id", s(slot))
            .item("terminal", s(field("/terminal")))
            .item("window_start", s(field("/preferred_window/start")))
            .item("window_end", s(field("/preferred_window/end")))
            .item(
                "booked_at",
                aws_sdk_dynamodb::types::AttributeValue::N(SystemClock.now_ms().to_string()),
            )
            .send()
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// A gate over fresh DynamoDB tables on moto and the terminal simulator over HTTP.
///
/// # Errors
/// When the tables cannot be created.
pub async fn build_gate(
    env: &Env,
    tag: &str,
    counter: &CallRecorder,
    max_concurrency: usize,
) -> Result<Gate, String> {
    let client = dynamo_client(&env.moto, counter).await;
    build_gate_with(client, env, tag, max_concurrency).await
}

/// [`build_gate`] over `client`.
pub(crate) async fn build_gate_with(
    client: aws_sdk_dynamodb::Client,
    env: &Env,
    tag: &str,
    max_concurrency: usize,
) -> Result<Gate, String> {
    let (idem, book) = (format!("{tag}-gate-idem"), format!("{tag}-gate-book"));
    create_tables(&client, &idem, &book)
        .await
        .map_err(|e| e.to_string())?;
    let terminal = HttpTerminal::new(HttpTerminalConfig::new(env.terminal.clone()))
        .map_err(|e| e.to_string())?;
    let mut config = GateConfig::new(format!("bench-{tag}"));
    config.max_concurrency = max_concurrency;
    Ok(Gate {
        config,
        store: Arc::new(sim::stores::dynamo_store(client, idem, book)),
        integration: Arc::new(truck_slot::TruckSlot::new(
            Arc::new(terminal),
            vec!["ECT-DELTA".to_string()],
        )),
        manual: Arc::new(MemoryManualQueue::new()),
        clock: Arc::new(SystemClock),
    })
}

/// An invocation with a 60 s deadline from now.
pub fn invocation(request_id: &str) -> Invocation {
    Invocation {
        request_id: request_id.to_string(),
        deadline_ms: SystemClock.now_ms() + 60_000,
    }
}

pub(crate) fn outcome_name(outcome: &RecordOutcome) -> String {
    match outcome {
        RecordOutcome::Committed { .. } => "committed".into(),
        o if o.is_duplicate() => "duplicate".into(),
        RecordOutcome::Retry(_) => "retry".into(),
        o => format!("{o:?}")
            .split(['(', ' ', '{'])
            .next()
            .unwrap_or("other")
            .to_string(),
    }
}

/// Runs one handler over `warmup` (not measured) and then `deliveries`, one delivery per batch.
///
/// # Errors
/// When the handler's tables cannot be created or the Python side fails.
pub async fn run_phase(
    kind: Kind,
    env: &Env,
    tag: &str,
    warmup: &[Delivery],
    deliveries: &[Delivery],
) -> Result<Phase, String> {
    let http = reqwest::Client::new();
    let slots_before = slots_issued(&http, &env.terminal).await;
    let mut phase = match kind {
        Kind::Naive => run_naive(env, tag, warmup, deliveries).await?,
        Kind::Gate => run_gate(env, tag, warmup, deliveries).await?,
        Kind::Powertools => run_powertools(env, tag, warmup, deliveries).await?,
        Kind::Floor | Kind::FloorNoStall | Kind::FloorNoReuse => {
            run_floor(kind, env, tag, warmup, deliveries).await?
        }
        Kind::GateCurrentThread | Kind::FloorCurrentThread => {
            on_current_thread(kind, env, tag, warmup, deliveries).await?
        }
    };
    // Every warm-up delivery is a new event: one slot each, whichever the handler.
    phase.slots_issued = slots_issued(&http, &env.terminal)
        .await
        .saturating_sub(slots_before + warmup.len());
    Ok(phase)
}

async fn run_naive(
    env: &Env,
    tag: &str,
    warmup: &[Delivery],
    deliveries: &[Delivery],
) -> Result<Phase, String> {
    let counter = CallRecorder::default();
    let client = dynamo_client(&env.moto, &counter).await;
    let table = format!("{tag}-naive-book");
    create_table(&client, &table, "source_event").await?;
    let naive = Naive {
        http: reqwest::Client::new(),
        slots_url: format!("{}/slots", env.terminal),
        client,
        table,
    };
    for d in warmup {
        naive.handle(sqs_event(&[d])).await;
    }
    let events: Vec<SqsEvent> = deliveries.iter().map(|d| sqs_event(&[d])).collect();
    counter.clear();
    let mut phase = Phase {
        events: deliveries.len(),
        ..Phase::default()
    };
    let (cpu0, wall0) = (stats::cpu_time(), Instant::now());
    for event in events {
        let t = Instant::now();
        let ok = naive.handle(event).await;
        phase.latencies_us.push(t.elapsed().as_micros() as u64);
        *phase
            .outcomes
            .entry(if ok == 1 { "committed" } else { "failed" }.into())
            .or_default() += 1;
    }
    phase.wall_s = wall0.elapsed().as_secs_f64();
    phase.cpu_s = (stats::cpu_time() - cpu0).as_secs_f64();
    phase.calls = counter.counts();
    Ok(phase)
}

async fn run_gate(
    env: &Env,
    tag: &str,
    warmup: &[Delivery],
    deliveries: &[Delivery],
) -> Result<Phase, String> {
    let counter = CallRecorder::default();
    let gate = build_gate(env, tag, &counter, 10).await?;
    warm_gate(&gate, warmup).await;
    let events: Vec<SqsEvent> = deliveries.iter().map(|d| sqs_event(&[d])).collect();
    counter.clear();
    let mut phase = Phase {
        events: deliveries.len(),
        ..Phase::default()
    };
    let (cpu0, wall0) = (stats::cpu_time(), Instant::now());
    for (event, d) in events.into_iter().zip(deliveries) {
        let t = Instant::now();
        let report = gate.handle_batch(event, &invocation(&d.message_id)).await;
        phase.latencies_us.push(t.elapsed().as_micros() as u64);
        for r in &report.records {
            *phase.outcomes.entry(outcome_name(&r.outcome)).or_default() += 1;
        }
    }
    phase.wall_s = wall0.elapsed().as_secs_f64();
    phase.cpu_s = (stats::cpu_time() - cpu0).as_secs_f64();
    phase.calls = counter.counts();
    Ok(phase)
}

/// Runs the phase of `kind` ([`Kind::GateCurrentThread`] or [`Kind::FloorCurrentThread`]) on a
/// current-thread runtime of its own, on a thread of its own, as the functions run: its clients
/// are built in that runtime (their connections' tasks live there), and the harness's
/// multi-thread runtime has no work while it waits. The process's CPU (`getrusage`) still counts
/// every thread, so the two runtimes are measured alike.
///
/// # Errors
/// When the runtime cannot be built, or the phase's own errors.
async fn on_current_thread(
    kind: Kind,
    env: &Env,
    tag: &str,
    warmup: &[Delivery],
    deliveries: &[Delivery],
) -> Result<Phase, String> {
    let (env, tag) = (env.clone(), tag.to_string());
    // The gate's own notification ids, as the floor's (`run_floor`): the multi-thread gate's
    // phase sent the same operation keys, and the terminal would answer them as replays.
    let (warmup, deliveries) = if kind == Kind::GateCurrentThread {
        (own(warmup, "\"PCG-"), own(deliveries, "\"PCG-"))
    } else {
        (warmup.to_vec(), deliveries.to_vec())
    };
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("current-thread runtime: {e}"))?;
        runtime.block_on(async {
            if kind == Kind::GateCurrentThread {
                run_gate(&env, &tag, &warmup, &deliveries).await
            } else {
                run_floor(kind, &env, &tag, &warmup, &deliveries).await
            }
        })
    })
    .await
    .map_err(|e| e.to_string())?
}

/// The gate's warm-up: each of `warmup` handled as a one-record batch, outcomes unread.
pub(crate) async fn warm_gate(gate: &Gate, warmup: &[Delivery]) {
    for d in warmup {
        gate.handle_batch(sqs_event(&[d]), &invocation(&d.message_id))
            .await;
    }
}

/// The floor's warm-up (each of `warmup` run through [`floor_one`]) and the records of
/// `deliveries` it will run, measured, afterwards.
///
/// # Errors
/// When a delivery does not parse as an event of the gate's integration.
pub(crate) async fn prepare_floor(
    gate: &Gate,
    warmup: &[Delivery],
    deliveries: &[Delivery],
) -> Result<Vec<gate::record::IdempotencyRecord>, String> {
    for r in floor_records(gate, warmup)? {
        floor_one(gate, &r).await;
    }
    floor_records(gate, deliveries)
}

/// The floor's inputs of one delivery: its record (built as the gate builds it), prepared
/// outside the measured loop.
pub(crate) fn floor_records(
    gate: &Gate,
    deliveries: &[Delivery],
) -> Result<Vec<gate::record::IdempotencyRecord>, String> {
    let now = SystemClock.now_ms();
    let terminals = vec!["ECT-DELTA".to_string()];
    deliveries
        .iter()
        .map(|d| {
            let n = truck_slot::notification::parse_notification(&d.body, now, &terminals)
                .map_err(|e| format!("floor: {e:?}"))?;
            let event = truck_slot::integration::event(&n).map_err(|e| e.to_string())?;
            let keys = truck_slot::derive_keys(&n).map_err(|e| e.to_string())?;
            Ok(gate
                .config
                .new_record(&event, &keys, &invocation(&d.message_id), now))
        })
        .collect()
}

/// One delivery of the floor: reserve, the natural key's guard, claim, commit through the gate's
/// own store and integration, nothing else.
pub(crate) async fn floor_one(
    gate: &Gate,
    record: &gate::record::IdempotencyRecord,
) -> &'static str {
    use gate::effect::CallOutcome;
    use gate::store::Reservation;
    let now = SystemClock.now_ms();
    match gate.store.reserve(record, now).await {
        Ok(Reservation::Reserved) => {}
        Ok(Reservation::Conflict(_)) => return "duplicate",
        Err(_) => return "failed",
    }
    if let Some(key) = gate.integration.natural_key(record, now) {
        match gate.store.guard(record, &key, now).await {
            Ok(gate::store::GuardOutcome::Held) => {}
            Ok(gate::store::GuardOutcome::Collision { .. }) => return "collision",
            Err(_) => return "failed",
        }
    }
    let slot = match gate.integration.call(&gate::Held::for_tests(record)).await {
        CallOutcome::Done(c) => c.effect_id,
        _ => return "failed",
    };
    let owner = record.lease_owner.as_deref().unwrap_or_default();
    let row = gate.integration.business_row(record, &slot, now);
    match gate.store.commit(&record.pk, owner, &slot, &row, now).await {
        Ok(_) => "committed",
        Err(_) => "failed",
    }
}

async fn run_floor(
    kind: Kind,
    env: &Env,
    tag: &str,
    warmup: &[Delivery],
    deliveries: &[Delivery],
) -> Result<Phase, String> {
    let counter = CallRecorder::default();
    let settings = match kind {
        Kind::FloorNoStall => ClientSettings::NoStalledStreamProtection,
        Kind::FloorNoReuse => ClientSettings::NoIdleConnections,
        _ => ClientSettings::AsTheFunctions,
    };
    let client = dynamo_client_with(&env.moto, &counter, settings).await;
    let tag = format!("{tag}-{}", kind.name());
    let gate = build_gate_with(client, env, &tag, 1).await?;
    // Its own notification ids, one prefix per variant: the gate's run of the same workload
    // (and each other floor variant's) would otherwise send the same operation keys, and the
    // terminal would answer the claims as replays (without its latency, and no slot issued).
    let prefix = match kind {
        Kind::FloorNoStall => "\"PCN-",
        Kind::FloorNoReuse => "\"PCR-",
        Kind::FloorCurrentThread => "\"PCT-",
        _ => "\"PCF-",
    };
    let (warmup, deliveries) = (own(warmup, prefix), own(deliveries, prefix));
    let records = prepare_floor(&gate, &warmup, &deliveries).await?;
    counter.clear();
    let mut phase = Phase {
        events: deliveries.len(),
        ..Phase::default()
    };
    let (cpu0, wall0) = (stats::cpu_time(), Instant::now());
    for r in &records {
        let t = Instant::now();
        let outcome = floor_one(&gate, r).await;
        phase.latencies_us.push(t.elapsed().as_micros() as u64);
        *phase.outcomes.entry(outcome.to_string()).or_default() += 1;
    }
    phase.wall_s = wall0.elapsed().as_secs_f64();
    phase.cpu_s = (stats::cpu_time() - cpu0).as_secs_f64();
    phase.calls = counter.counts();
    Ok(phase)
}

fn write_json(path: &Path, value: &impl Serialize) -> Result<(), String> {
    let bytes = serde_json::to_vec(value).map_err(|e| e.to_string())?;
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// What the Python side prints.
#[derive(Debug, Deserialize)]
struct PythonOut {
    events: usize,
    wall_s: f64,
    cpu_s: f64,
    latencies_us: Vec<u64>,
    calls: BTreeMap<String, u64>,
    outcomes: BTreeMap<String, u64>,
}

async fn run_powertools(
    env: &Env,
    tag: &str,
    warmup: &[Delivery],
    deliveries: &[Delivery],
) -> Result<Phase, String> {
    let client = dynamo_client(&env.moto, &CallRecorder::default()).await;
    let (table, bookings) = (format!("{tag}-pt-idem"), format!("{tag}-pt-book"));
    create_table(&client, &table, "id").await?;
    create_table(&client, &bookings, "source_event").await?;
    let warm_path = env.work_dir.join(format!("{tag}-warmup.json"));
    let path = env.work_dir.join(format!("{tag}-deliveries.json"));
    write_json(&warm_path, &warmup)?;
    write_json(&path, &deliveries)?;
    let python = env.python.clone();
    let mut cmd = Command::new(&python);
    cmd.arg(&env.handler_py)
        .args(["--endpoint", &env.moto, "--table", &table])
        .args(["--bookings", &bookings, "--terminal", &env.terminal])
        .arg("--deliveries")
        .arg(&path)
        .arg("--warmup")
        .arg(&warm_path)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_DEFAULT_REGION", "eu-west-1")
        .env("AWS_LAMBDA_FUNCTION_NAME", "powertools-bench");
    let output = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    let _ = std::fs::remove_file(&warm_path);
    let _ = std::fs::remove_file(&path);
    if !output.status.success() {
        return Err(format!(
            "powertools handler failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let out: PythonOut = serde_json::from_slice(&output.stdout).map_err(|e| {
        format!(
            "powertools handler output: {e}: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })?;
    Ok(Phase {
        events: out.events,
        wall_s: out.wall_s,
        cpu_s: out.cpu_s,
        latencies_us: out.latencies_us,
        calls: out.calls,
        outcomes: out.outcomes,
        slots_issued: 0,
    })
}

/// The notification ids of one side: the workload's `PCS-` prefix replaced by `prefix`.
pub(crate) fn own(deliveries: &[Delivery], prefix: &str) -> Vec<Delivery> {
    deliveries
        .iter()
        .map(|d| Delivery {
            body: d.body.replacen("\"PCS-", prefix, 1),
            ..d.clone()
        })
        .collect()
}
