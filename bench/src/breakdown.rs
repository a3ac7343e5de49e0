//! Where the gate's client CPU per event goes: the same new events through `Gate::handle_batch`
//! with each port real or in process, so the differences are the cost of one port's I/O.
//!
//! | store | terminal | what the CPU per event is |
//! | --- | --- | --- |
//! | memory | in process | the gate's own work (parse, keys, records, the four steps) |
//! | memory | HTTP (simulator) | + the slot claim over HTTP (reqwest) |
//! | DynamoDB (moto) | in process | + reserve and commit through the AWS SDK |
//! | DynamoDB (moto) | HTTP (simulator) | all of it, as in the comparison |

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use gate::consumer::Gate;
use serde::Serialize;
use truck_slot::terminal::{CallOutcome, Effect, LookupOutcome, SlotTerminal};

use crate::counter::CallRecorder;
use crate::handlers::{build_gate, invocation, sqs_event, Env};
use crate::stats;
use crate::workload::deliveries;

/// A terminal in process: one slot per key, no I/O.
pub(crate) struct InProcessTerminal;

#[async_trait]
impl SlotTerminal for InProcessTerminal {
    async fn claim(&self, op_key: &str, _request: &[u8]) -> CallOutcome {
        CallOutcome::Done(Effect {
            effect_id: format!("MEM-{}", op_key.get(..12).unwrap_or(op_key)),
            subject: None,
        })
    }

    async fn lookup(&self, _op_key: &str, _request: &[u8]) -> LookupOutcome {
        LookupOutcome::NotFound
    }
}

/// One configuration's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `memory` or `dynamodb`.
    pub store: &'static str,
    /// `in-process` or `http`.
    pub terminal: &'static str,
    /// Client CPU per event, µs.
    pub cpu_us_per_event: f64,
    /// Median latency per event, ms.
    pub p50_ms: f64,
}

/// Runs `events` new events (after 30 unmeasured) through each configuration.
///
/// # Errors
/// When tables cannot be created or an event fails.
pub async fn run(
    env: &Env,
    tag: &str,
    events: usize,
    window: &(String, String),
) -> Result<Vec<Row>, String> {
    let dynamo_http = build_gate(env, &format!("{tag}-bd"), &CallRecorder::default(), 10).await?;
    let mut dynamo_mem = dynamo_http.clone();
    dynamo_mem.integration = Arc::new(truck_slot::TruckSlot::new(
        Arc::new(InProcessTerminal),
        vec!["ECT-DELTA".to_string()],
    ));
    let mut memory_http = dynamo_http.clone();
    memory_http.store = Arc::new(sim::stores::memory_store());
    let mut memory_mem = memory_http.clone();
    memory_mem.integration = Arc::new(truck_slot::TruckSlot::new(
        Arc::new(InProcessTerminal),
        vec!["ECT-DELTA".to_string()],
    ));
    let configs: [(&'static str, &'static str, &Gate); 4] = [
        ("memory", "in-process", &memory_mem),
        ("memory", "http", &memory_http),
        ("dynamodb", "in-process", &dynamo_mem),
        ("dynamodb", "http", &dynamo_http),
    ];
    let mut rows = Vec::new();
    for (i, (store, terminal, gate)) in configs.into_iter().enumerate() {
        let all = deliveries(&format!("{tag}-bd{i}"), events + 30, 0.0, window, 5);
        let (warm, measured) = all.split_at(30);
        for d in warm {
            gate.handle_batch(sqs_event(&[d]), &invocation(&d.message_id))
                .await;
        }
        let batches: Vec<_> = measured.iter().map(|d| sqs_event(&[d])).collect();
        let mut latencies = Vec::with_capacity(events);
        let cpu0 = stats::cpu_time();
        for (event, d) in batches.into_iter().zip(measured) {
            let t = Instant::now();
            let report = gate.handle_batch(event, &invocation(&d.message_id)).await;
            latencies.push(t.elapsed().as_micros() as u64);
            if !report.response.batch_item_failures.is_empty() {
                return Err(format!("breakdown {store}/{terminal}: a record failed"));
            }
        }
        let cpu = stats::cpu_time() - cpu0;
        rows.push(Row {
            store,
            terminal,
            cpu_us_per_event: cpu.as_secs_f64() * 1e6 / events.max(1) as f64,
            p50_ms: stats::quantile(&latencies, 0.5) as f64 / 1000.0,
        });
    }
    Ok(rows)
}
