//! A sustained run's deployment and feed, and its simulated start.

use serde::Serialize;

/// 2025-06-09T05:00:00Z, the simulated start (epoch ms).
pub const START_MS: i64 = 1_749_445_200_000;

/// The deployment and the feed of one sustained run.
#[derive(Debug, Clone, Serialize)]
pub struct SustainedConfig {
    /// Mean arrivals per simulated second (Poisson).
    pub rate_per_s: f64,
    /// Simulated seconds of arrivals.
    pub duration_s: u64,
    /// Share of deliveries that are redeliveries of an earlier notification (0..1).
    pub duplicate_rate: f64,
    /// The event source mapping's `ScalingConfig.MaximumConcurrency`: invocations at once.
    pub maximum_concurrency: usize,
    /// The event source mapping's `BatchSize` (at most 10 for SQS without a batching window).
    pub batch_size: usize,
    /// `MaximumBatchingWindowInSeconds`, in ms: a poller that found fewer than `batch_size`
    /// messages waits this long for more. 0: it takes what is there.
    pub batching_window_ms: u64,
    /// The gate's `RecordConcurrency` ([`GateConfig::max_concurrency`]): records of one batch at
    /// once.
    pub record_concurrency: usize,
    /// Latency of one slot claim at the terminal, ms.
    pub terminal_latency_ms: u64,
    /// Claims the terminal serves at once (its limit); `None`: no limit.
    pub terminal_concurrency: Option<usize>,
    /// Latency of one DynamoDB call, ms (concurrent calls in parallel).
    pub store_latency_ms: u64,
    /// The queue's visibility timeout, s (a failed message is visible again after it).
    pub visibility_timeout_s: u64,
    /// The queue must be empty this long after the last arrival, s.
    pub drain_bound_s: u64,
    /// Seed of the arrivals and of which notifications are redelivered.
    pub seed: u64,
}

impl Default for SustainedConfig {
    /// The run: 100 events/s for 10 simulated minutes, 3 % redeliveries, terminal 200 ms,
    /// DynamoDB 5 ms, `MaximumConcurrency` 5, batches of 10, `RecordConcurrency` 10.
    fn default() -> Self {
        Self {
            rate_per_s: 100.0,
            duration_s: 600,
            duplicate_rate: 0.03,
            maximum_concurrency: 5,
            batch_size: 10,
            batching_window_ms: 0,
            record_concurrency: 10,
            terminal_latency_ms: 200,
            terminal_concurrency: None,
            store_latency_ms: 5,
            visibility_timeout_s: 360,
            drain_bound_s: 10,
            seed: 18,
        }
    }
}
