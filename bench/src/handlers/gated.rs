//! The gate's phase: `Gate::handle_batch` over `DynamoStore` on moto and `HttpTerminal` on the
//! terminal simulator, one delivery per batch.

use std::sync::Arc;
use std::time::Instant;

use aws_lambda_events::event::sqs::SqsEvent;
use gate::clock::SystemClock;
use gate::consumer::{Gate, GateConfig};
use gate::manual::MemoryManualQueue;
use gate_dynamo::create_tables;
use truck_slot::terminal::{HttpTerminal, HttpTerminalConfig};

use super::common::{invocation, outcome_name, sqs_event, Env, Phase};
use crate::counter::{dynamo_client, CallRecorder};
use crate::stats;
use crate::workload::Delivery;

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
pub(super) async fn build_gate_with(
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

pub(super) async fn run_gate(
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

/// The gate's warm-up: each of `warmup` handled as a one-record batch, outcomes unread.
pub(crate) async fn warm_gate(gate: &Gate, warmup: &[Delivery]) {
    for d in warmup {
        gate.handle_batch(sqs_event(&[d]), &invocation(&d.message_id))
            .await;
    }
}
