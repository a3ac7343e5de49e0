//! Batch behaviour (issue 8, item 4): the latency of a batch of 10 new records against the
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
use gate::record::{BusinessRow, IdempotencyRecord, NaturalKey, RecordStatus};
use gate::store::memory::MemoryStore;
use gate::store::{
    CommitOutcome, FinishGuard, FinishOutcome, IdempotencyStore, Reservation, StoreError, TakeOver,
};
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

/// The in-memory store behind a fixed delay per call: a latency model of DynamoDB, which serves
/// concurrent requests in parallel.
pub struct DelayStore {
    inner: MemoryStore,
    delay: Duration,
}

impl DelayStore {
    /// A store answering every call after `delay`.
    pub fn new(delay: Duration) -> Self {
        Self {
            inner: MemoryStore::new(),
            delay,
        }
    }

    async fn wait(&self) {
        tokio::time::sleep(self.delay).await;
    }
}

#[async_trait]
impl IdempotencyStore for DelayStore {
    async fn reserve(&self, r: &IdempotencyRecord, now: i64) -> Result<Reservation, StoreError> {
        self.wait().await;
        self.inner.reserve(r, now).await
    }
    async fn take_over(
        &self,
        pk: &str,
        old: &str,
        new: &str,
        until: i64,
        now: i64,
    ) -> Result<TakeOver, StoreError> {
        self.wait().await;
        self.inner.take_over(pk, old, new, until, now).await
    }
    async fn commit(
        &self,
        pk: &str,
        owner: &str,
        slot: &str,
        b: &BusinessRow,
        natural_key: Option<&NaturalKey>,
        now: i64,
    ) -> Result<CommitOutcome, StoreError> {
        self.wait().await;
        self.inner
            .commit(pk, owner, slot, b, natural_key, now)
            .await
    }
    async fn release_lease(&self, pk: &str, owner: &str, now: i64) -> Result<(), StoreError> {
        self.wait().await;
        self.inner.release_lease(pk, owner, now).await
    }
    async fn finish(
        &self,
        pk: &str,
        owner: &str,
        status: RecordStatus,
        error: &str,
        item: &[u8],
        guard: FinishGuard,
        now: i64,
    ) -> Result<FinishOutcome, StoreError> {
        self.wait().await;
        self.inner
            .finish(pk, owner, status, error, item, guard, now)
            .await
    }
    async fn routed(&self, pk: &str, owner: &str, now: i64) -> Result<bool, StoreError> {
        self.wait().await;
        self.inner.routed(pk, owner, now).await
    }
    async fn record_slot_id(
        &self,
        pk: &str,
        slot: &str,
        now: i64,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.wait().await;
        self.inner.record_slot_id(pk, slot, now).await
    }
    async fn get(&self, pk: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.wait().await;
        self.inner.get(pk).await
    }
    async fn booking(&self, source_event: &str) -> Result<Option<BusinessRow>, StoreError> {
        self.wait().await;
        self.inner.booking(source_event).await
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
    model_gate.store = Arc::new(DelayStore::new(Duration::from_millis(store_latency_ms)));
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
