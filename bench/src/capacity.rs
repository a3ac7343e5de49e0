//! The `capacity` part: the capacity model of `docs/BENCHMARKS.md` against the simulator's
//! sustained-rate replay, one run per deployment, and their table.

/// The capacity model against the simulator: the run and the deployments around it.
pub(crate) fn capacity_runs() -> Result<Vec<sim::sustained::SustainedReport>, String> {
    use sim::sustained::{run_blocking, SustainedConfig};
    let base = SustainedConfig::default();
    let configs = [
        SustainedConfig {
            maximum_concurrency: 2,
            ..base.clone()
        },
        SustainedConfig {
            maximum_concurrency: 3,
            ..base.clone()
        },
        base.clone(),
        SustainedConfig {
            record_concurrency: 2,
            ..base.clone()
        },
        SustainedConfig {
            terminal_concurrency: Some(15),
            ..base.clone()
        },
        SustainedConfig {
            rate_per_s: 1000.0,
            maximum_concurrency: 25,
            duration_s: 120,
            ..base.clone()
        },
    ];
    configs.into_iter().map(run_blocking).collect()
}

pub(crate) fn print_capacity(runs: &[sim::sustained::SustainedReport]) {
    println!(
        "\nThe scale it holds: the capacity model against `sim sustained` (Poisson arrivals, 3 % redeliveries, batches of 10, DynamoDB 5 ms, terminal 200 ms; simulated time):\n"
    );
    println!("| arrivals | MaximumConcurrency | RecordConcurrency | terminal limit | model: batch / capacity | simulated: acknowledged/s | mean batch | backlog mean, first / last minute (max) | p99 arrival to ack | queue growth | invariants |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |");
    for r in runs {
        let c = &r.config;
        let (batch_ms, capacity) = sim::sustained::capacity(c);
        println!(
            "| {:.0}/s for {} s | {} | {} | {} | {batch_ms:.0} ms / {capacity:.0}/s | {:.1} | {:.2} | {:.1} / {:.1} ({}) | {:.0} ms | {} | {} |",
            c.rate_per_s,
            c.duration_s,
            c.maximum_concurrency,
            c.record_concurrency,
            c.terminal_concurrency
                .map(|k| format!("{k} at once"))
                .unwrap_or_else(|| "none".into()),
            r.achieved_per_s,
            r.mean_batch,
            r.backlog_mean_per_minute.first().copied().unwrap_or(0.0),
            r.backlog_mean_per_minute.last().copied().unwrap_or(0.0),
            r.backlog_max,
            r.end_to_end.p99_ms,
            if r.queue_grew { "**grows**" } else { "none" },
            if r.violations.iter().all(|v| v.starts_with("the backlog grew") || v.starts_with("the queue drained")) {
                "all held"
            } else {
                "VIOLATED"
            },
        );
    }
}
