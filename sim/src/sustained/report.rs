//! What a sustained run reports, the capacity model of `docs/BENCHMARKS.md` it is held against,
//! and the report as a Markdown table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::config::SustainedConfig;

/// Medians and tails of a sample, ms.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Quantiles {
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Maximum.
    pub max_ms: f64,
}

impl Quantiles {
    pub(super) fn of(values: &mut [i64]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        values.sort_unstable();
        let at = |q: f64| {
            let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
            values[rank - 1] as f64
        };
        Self {
            p50_ms: at(0.5),
            p99_ms: at(0.99),
            max_ms: values[values.len() - 1] as f64,
        }
    }
}

/// What a sustained run did.
#[derive(Debug, Clone, Serialize)]
pub struct SustainedReport {
    /// The configuration.
    pub config: SustainedConfig,
    /// Messages sent (distinct notifications plus redeliveries).
    pub messages: usize,
    /// Distinct notifications.
    pub events: usize,
    /// Redeliveries sent.
    pub redeliveries: usize,
    /// Records handed to invocations (every receive).
    pub deliveries: usize,
    /// Consumer invocations.
    pub invocations: usize,
    /// Mean records per invocation.
    pub mean_batch: f64,
    /// Invocation duration (the billed part), ms.
    pub invocation: Quantiles,
    /// Arrival on the queue to acknowledgement, ms.
    pub end_to_end: Quantiles,
    /// Events acknowledged per simulated second of arrivals (messages / duration).
    pub achieved_per_s: f64,
    /// The backlog (visible messages not yet received) every simulated second.
    pub backlog: Vec<usize>,
    /// The backlog's largest sample.
    pub backlog_max: usize,
    /// The backlog's mean over each simulated minute of arrivals.
    pub backlog_mean_per_minute: Vec<f64>,
    /// Invocations running at once: the largest sample, and the mean over the arrivals.
    pub concurrency_max: usize,
    /// Mean invocations running at once while notifications arrived.
    pub concurrency_mean: f64,
    /// Slot claims the terminal served.
    pub slots: usize,
    /// Outcomes by name.
    pub outcomes: BTreeMap<String, usize>,
    /// Seconds from the last arrival until the queue was empty.
    pub drained_after_s: f64,
    /// Whether the backlog grew (see the module docs).
    pub queue_grew: bool,
    /// Invariant violations (empty: all held).
    pub violations: Vec<String>,
}

/// The capacity model of `docs/BENCHMARKS.md` for `config`: the duration of a full batch and the
/// events per second the deployment holds, `(batch_ms, events_per_s)`.
///
/// A record takes one reserve, one claim and one commit in sequence
/// (`2 * store + terminal` ms); a batch of `b` records with `RecordConcurrency` `c` runs
/// `ceil(b / c)` such waves; `MaximumConcurrency` `m` invocations run at once: the deployment
/// holds `m * b / batch_ms` events per second. A terminal limit of `k` claims at once caps it at
/// `k / terminal` claims per second.
pub fn capacity(config: &SustainedConfig) -> (f64, f64) {
    let per_record = 2.0 * config.store_latency_ms as f64 + config.terminal_latency_ms as f64;
    let b = config.batch_size.max(1) as f64;
    let waves = (b / config.record_concurrency.max(1) as f64).ceil();
    let batch_ms = waves * per_record;
    let mut rate = config.maximum_concurrency as f64 * b * 1000.0 / batch_ms;
    if let Some(k) = config.terminal_concurrency {
        rate = rate.min(k as f64 * 1000.0 / config.terminal_latency_ms.max(1) as f64);
    }
    (batch_ms, rate)
}

/// The report as a Markdown table with the model's prediction, then the violations.
pub fn render(r: &SustainedReport) -> String {
    let c = &r.config;
    let (batch_ms, capacity) = capacity(c);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Sustained replay: {:.0} events/s for {} s, {:.0} % redeliveries, MaximumConcurrency {}, \
         BatchSize {}, window {} ms, RecordConcurrency {}, terminal {} ms{}, DynamoDB {} ms\n",
        c.rate_per_s,
        c.duration_s,
        c.duplicate_rate * 100.0,
        c.maximum_concurrency,
        c.batch_size,
        c.batching_window_ms,
        c.record_concurrency,
        c.terminal_latency_ms,
        c.terminal_concurrency
            .map(|k| format!(" (at most {k} at once)"))
            .unwrap_or_default(),
        c.store_latency_ms
    );
    let minutes: Vec<String> = r
        .backlog_mean_per_minute
        .iter()
        .map(|m| format!("{m:.1}"))
        .collect();
    let rows = [
        (
            "model: full batch / capacity",
            format!("{batch_ms:.0} ms / {capacity:.0} events/s"),
        ),
        (
            "messages (events + redeliveries)",
            format!("{} ({} + {})", r.messages, r.events, r.redeliveries),
        ),
        (
            "acknowledged per second of arrivals",
            format!("{:.1}", r.achieved_per_s),
        ),
        (
            "invocations, mean batch",
            format!("{}, {:.2}", r.invocations, r.mean_batch),
        ),
        (
            "invocation duration p50 / p99 / max",
            format!(
                "{:.0} / {:.0} / {:.0} ms",
                r.invocation.p50_ms, r.invocation.p99_ms, r.invocation.max_ms
            ),
        ),
        (
            "arrival to acknowledgement p50 / p99 / max",
            format!(
                "{:.0} / {:.0} / {:.0} ms",
                r.end_to_end.p50_ms, r.end_to_end.p99_ms, r.end_to_end.max_ms
            ),
        ),
        (
            "invocations at once: mean / max",
            format!("{:.2} / {}", r.concurrency_mean, r.concurrency_max),
        ),
        (
            "backlog (visible, waiting): max",
            format!("{}", r.backlog_max),
        ),
        ("backlog: mean per minute", minutes.join(", ")),
        (
            "queue drained after the last arrival",
            format!("{:.2} s", r.drained_after_s),
        ),
        ("slots issued", format!("{}", r.slots)),
        ("outcomes", format!("{:?}", r.outcomes)),
        (
            "queue growth",
            if r.queue_grew { "yes" } else { "none" }.to_string(),
        ),
        (
            "invariants",
            if r.violations.is_empty() {
                "all held".to_string()
            } else {
                format!("{} violated", r.violations.len())
            },
        ),
    ];
    let _ = writeln!(out, "| figure | value |\n| --- | ---: |");
    for (k, v) in rows {
        let _ = writeln!(out, "| {k} | {v} |");
    }
    for v in &r.violations {
        let _ = writeln!(out, "VIOLATION: {v}");
    }
    out
}
