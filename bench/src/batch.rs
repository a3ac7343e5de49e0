//! Batch behaviour: the latency of a batch of 10 new records against the
//! latency of one, the records of a batch running concurrently (`max_concurrency` 10).
//!
//! Measured twice: on moto (one Python process: it serves requests one at a time, so concurrent
//! records queue there) and on a latency model of DynamoDB (the in-memory store behind a fixed
//! delay per call, which like DynamoDB serves concurrent calls in parallel). The terminal is the
//! simulator over HTTP in both.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use gate::consumer::Gate;
use gate_testkit::{DelayedStore, Pause};
use serde::Serialize;

use crate::counter::CallRecorder;
use crate::handlers::{build_gate, invocation, sqs_event, Env};
use crate::stats::median;
use crate::workload::{deliveries, Delivery};

/// One batch measurement.
#[derive(Debug, Clone, Serialize)]
pub struct BatchResult {
    /// `moto` or `model-{ms}ms`.
    pub store: String,
    /// Pairs measured.
    pub trials: usize,
    /// Median latency of one record, ms.
    pub single_ms: f64,
    /// Median latency of a batch of 10 records, ms.
    pub batch_ms: f64,
}

impl BatchResult {
    /// Batch latency over single latency.
    pub fn ratio(&self) -> f64 {
        self.batch_ms / self.single_ms
    }
}

/// A fixed delay per store request (a tokio sleep): with [`DelayedStore`] over the memory store,
/// a latency model of DynamoDB, which serves concurrent calls in parallel.
pub struct Sleep(pub Duration);

#[async_trait]
impl Pause for Sleep {
    async fn pause(&self) {
        tokio::time::sleep(self.0).await;
    }
}

async fn time_batch(gate: &Gate, batch: &[Delivery], request_id: &str) -> Result<f64, String> {
    let refs: Vec<&Delivery> = batch.iter().collect();
    let event = sqs_event(&refs);
    let t = Instant::now();
    let report = gate.handle_batch(event, &invocation(request_id)).await;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    if !report.response.batch_item_failures.is_empty() {
        return Err(format!(
            "batch of {} had failures: {:?}",
            batch.len(),
            report.response.batch_item_failures
        ));
    }
    Ok(ms)
}

/// Alternates one-record batches and ten-record batches of new events, `trials` of each, after
/// five unmeasured ones; returns the medians.
async fn measure(
    gate: &Gate,
    store: String,
    tag: &str,
    trials: usize,
    window: &(String, String),
) -> Result<BatchResult, String> {
    let events = deliveries(tag, 5 + trials * 11, 0.0, window, 1);
    let (warm, rest) = events.split_at(5);
    for d in warm {
        time_batch(gate, std::slice::from_ref(d), &d.message_id).await?;
    }
    let (mut singles, mut batches) = (Vec::new(), Vec::new());
    for (i, chunk) in rest.chunks(11).enumerate() {
        let (one, ten) = chunk.split_at(1);
        singles.push(time_batch(gate, one, &format!("{tag}-1-{i}")).await?);
        batches.push(time_batch(gate, ten, &format!("{tag}-10-{i}")).await?);
    }
    Ok(BatchResult {
        store,
        trials,
        single_ms: median(&singles),
        batch_ms: median(&batches),
    })
}

/// The batch measurement on moto and on the latency model (`store_latency_ms` per call).
///
/// # Errors
/// When tables cannot be created or a batch fails.
pub async fn run(
    env: &Env,
    tag: &str,
    trials: usize,
    store_latency_ms: u64,
    window: &(String, String),
) -> Result<Vec<BatchResult>, String> {
    let moto_gate = build_gate(env, &format!("{tag}-batch"), &CallRecorder::default(), 10).await?;
    let on_moto = measure(
        &moto_gate,
        "moto".into(),
        &format!("{tag}-bm"),
        trials,
        window,
    )
    .await?;
    let mut model_gate = moto_gate.clone();
    model_gate.store = Arc::new(DelayedStore {
        inner: Arc::new(sim::stores::memory_store()),
        pause: Sleep(Duration::from_millis(store_latency_ms)),
    });
    let on_model = measure(
        &model_gate,
        format!("model-{store_latency_ms}ms"),
        &format!("{tag}-bl"),
        trials,
        window,
    )
    .await?;
    Ok(vec![on_moto, on_model])
}
