//! What every handler's phase shares: which handler, a phase's figures, the processes it runs
//! against, and the small steps each phase takes (an SQS event of deliveries, a table, the
//! terminal's slot count, an invocation, an outcome's name).

use std::collections::BTreeMap;
use std::path::PathBuf;

use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use gate::clock::{Clock, SystemClock};
use gate::consumer::{Invocation, RecordOutcome};
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
