//! The paired measurement of the gate's client CPU against its floor: `gate-bench --parts paired`.
//!
//! The phases of `compare` run one handler after another, minutes apart; on a shared machine the
//! load moves in between, and a ratio of two phases carries that drift. Here the gate
//! (`Gate::handle_batch`, one delivery per batch) and the floor (`handlers::floor_one`: the same
//! DynamoDB requests and terminal call in a bare loop) take turns delivery by delivery over the
//! same workload, on one current-thread runtime on one thread of its own, as the functions run.
//! Delivery `i` goes to both; for even `i` the gate goes first, for odd `i` the floor. Each side
//! has its own DynamoDB client, its own tables and its own notification ids (the terminal would
//! answer the same operation key as a replay).
//!
//! Around each delivery the harness reads the thread's CPU clock
//! (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`, nanoseconds) and the process's
//! (`CLOCK_PROCESS_CPUTIME_ID`). On a current-thread runtime the clients' tasks run on the thread
//! that drives `block_on`, so the thread's clock counts the SDK's, hyper's and the gate's work;
//! the report prints the share of the process's CPU that was not on the measuring thread, so
//! that no work is left uncounted unseen. moto and the terminal simulator are processes of their
//! own and counted by neither.

use std::collections::BTreeMap;

use aws_lambda_events::event::sqs::SqsEvent;
use gate::consumer::{Gate, Invocation};
use gate::record::IdempotencyRecord;
use serde::Serialize;

use crate::counter::CallRecorder;
use crate::handlers::{self, Env};
use crate::stats;
use crate::workload::Delivery;

/// What one side (gate or floor) used, delivery by delivery, in one run.
#[derive(Debug, Clone, Default)]
pub struct Side {
    /// The measuring thread's CPU per delivery, nanoseconds, in delivery order.
    pub thread_cpu_ns: Vec<u64>,
    /// The process's CPU per delivery (every thread), nanoseconds, in delivery order.
    pub process_cpu_ns: Vec<u64>,
    /// Outcomes by name (`committed`, `duplicate`, ...).
    pub outcomes: BTreeMap<String, u64>,
    /// DynamoDB requests by operation during the measured deliveries.
    pub calls: BTreeMap<String, u64>,
}

/// One run: both sides over the same deliveries.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// Whether delivery `i` was a redelivery of an earlier event (the same for both sides).
    pub duplicate: Vec<bool>,
    /// The gate.
    pub gate: Side,
    /// The floor.
    pub floor: Side,
}

/// A distribution of per-delivery CPU in microseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Dist {
    /// Deliveries counted.
    pub n: usize,
    /// Mean, µs (total CPU over deliveries: what `compare`'s "client CPU µs/event" is).
    pub mean_us: f64,
    /// Median, µs.
    pub p50_us: f64,
    /// 90th percentile, µs.
    pub p90_us: f64,
}

impl Dist {
    fn of(ns: &[u64]) -> Self {
        let n = ns.len();
        let mean_us = if n == 0 {
            f64::NAN
        } else {
            ns.iter().sum::<u64>() as f64 / n as f64 / 1000.0
        };
        Self {
            n,
            mean_us,
            p50_us: stats::quantile(ns, 0.5) as f64 / 1000.0,
            p90_us: stats::quantile(ns, 0.9) as f64 / 1000.0,
        }
    }
}

/// A run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// The gate's thread CPU per delivery, all deliveries.
    pub gate: Dist,
    /// The floor's thread CPU per delivery, all deliveries.
    pub floor: Dist,
    /// The gate's thread CPU per new event.
    pub gate_new: Dist,
    /// The floor's thread CPU per new event.
    pub floor_new: Dist,
    /// The gate's thread CPU per duplicate.
    pub gate_duplicate: Dist,
    /// The floor's thread CPU per duplicate.
    pub floor_duplicate: Dist,
    /// Gate over floor, means of thread CPU.
    pub ratio_mean: f64,
    /// Gate over floor, medians of thread CPU.
    pub ratio_median: f64,
    /// The median over deliveries of (gate's − floor's thread CPU) of the same delivery, µs.
    pub paired_difference_p50_us: f64,
    /// Gate over floor, means of the process's CPU.
    pub process_ratio_mean: f64,
    /// The share of the process's CPU during the measured deliveries that was not on the
    /// measuring thread (both sides together), 0..1.
    pub other_threads_share: f64,
    /// Gate's and floor's DynamoDB requests per delivery.
    pub calls_per_delivery: (f64, f64),
}

impl Run {
    /// The run's figures.
    pub fn summary(&self) -> RunSummary {
        let pick = |side: &Side, duplicate: bool| -> Vec<u64> {
            side.thread_cpu_ns
                .iter()
                .zip(&self.duplicate)
                .filter(|(_, d)| **d == duplicate)
                .map(|(c, _)| *c)
                .collect()
        };
        let (gate, floor) = (
            Dist::of(&self.gate.thread_cpu_ns),
            Dist::of(&self.floor.thread_cpu_ns),
        );
        let differences: Vec<f64> = self
            .gate
            .thread_cpu_ns
            .iter()
            .zip(&self.floor.thread_cpu_ns)
            .map(|(g, f)| (*g as f64 - *f as f64) / 1000.0)
            .collect();
        let sum = |v: &[u64]| v.iter().sum::<u64>() as f64;
        let process = sum(&self.gate.process_cpu_ns) + sum(&self.floor.process_cpu_ns);
        let thread = sum(&self.gate.thread_cpu_ns) + sum(&self.floor.thread_cpu_ns);
        let per_delivery =
            |s: &Side| s.calls.values().sum::<u64>() as f64 / s.thread_cpu_ns.len().max(1) as f64;
        RunSummary {
            gate,
            floor,
            gate_new: Dist::of(&pick(&self.gate, false)),
            floor_new: Dist::of(&pick(&self.floor, false)),
            gate_duplicate: Dist::of(&pick(&self.gate, true)),
            floor_duplicate: Dist::of(&pick(&self.floor, true)),
            ratio_mean: gate.mean_us / floor.mean_us,
            ratio_median: gate.p50_us / floor.p50_us,
            paired_difference_p50_us: stats::median(&differences),
            process_ratio_mean: sum(&self.gate.process_cpu_ns) / sum(&self.floor.process_cpu_ns),
            other_threads_share: if process > 0.0 {
                ((process - thread) / process).max(0.0)
            } else {
                f64::NAN
            },
            calls_per_delivery: (per_delivery(&self.gate), per_delivery(&self.floor)),
        }
    }
}

/// The CPU clocks, read before a delivery.
struct Mark {
    thread: u64,
    process: u64,
}

impl Mark {
    fn now() -> Self {
        Self {
            thread: stats::thread_cpu_ns(),
            process: stats::process_cpu_ns(),
        }
    }

    /// Records what was used since `self` into `side`.
    fn record(self, side: &mut Side) {
        let (thread, process) = (stats::thread_cpu_ns(), stats::process_cpu_ns());
        side.thread_cpu_ns.push(thread.saturating_sub(self.thread));
        side.process_cpu_ns
            .push(process.saturating_sub(self.process));
    }
}

/// One side, ready to run: the gate with its events, or the floor with its records.
struct Prepared {
    gate: Gate,
    counter: CallRecorder,
    /// The gate's events (built before the measured loop), taken as they run.
    events: Vec<Option<(SqsEvent, String)>>,
    /// The floor's records (built before the measured loop, as `Gate::new_record` builds them).
    records: Vec<IdempotencyRecord>,
}

async fn prepare(
    env: &Env,
    tag: &str,
    floor: bool,
    warmup: &[Delivery],
    deliveries: &[Delivery],
) -> Result<Prepared, String> {
    let counter = CallRecorder::default();
    let (prefix, max_concurrency) = if floor { ("\"PPF-", 1) } else { ("\"PPG-", 10) };
    let gate = handlers::build_gate(env, tag, &counter, max_concurrency).await?;
    let (warmup, deliveries) = (
        handlers::own(warmup, prefix),
        handlers::own(deliveries, prefix),
    );
    let mut prepared = Prepared {
        gate,
        counter,
        events: Vec::new(),
        records: Vec::new(),
    };
    if floor {
        prepared.records = handlers::prepare_floor(&prepared.gate, &warmup, &deliveries).await?;
    } else {
        handlers::warm_gate(&prepared.gate, &warmup).await;
        prepared.events = deliveries
            .iter()
            .map(|d| Some((handlers::sqs_event(&[d]), d.message_id.clone())))
            .collect();
    }
    Ok(prepared)
}

/// Delivery `i` to the gate: `handle_batch` of its one-record event, measured.
async fn gate_delivery(p: &mut Prepared, i: usize, side: &mut Side) {
    let Some((event, message_id)) = p.events.get_mut(i).and_then(Option::take) else {
        return;
    };
    // The deadline (60 s) from now, not from before the loop: a run takes minutes, and a record
    // within `deadline_margin_ms` of its deadline is not started.
    let invocation: Invocation = handlers::invocation(&message_id);
    let mark = Mark::now();
    let report = p.gate.handle_batch(event, &invocation).await;
    mark.record(side);
    for r in &report.records {
        *side
            .outcomes
            .entry(handlers::outcome_name(&r.outcome))
            .or_default() += 1;
    }
}

/// Delivery `i` to the floor, measured.
async fn floor_delivery(p: &Prepared, i: usize, side: &mut Side) {
    let Some(record) = p.records.get(i) else {
        return;
    };
    let mark = Mark::now();
    let outcome = handlers::floor_one(&p.gate, record).await;
    mark.record(side);
    *side.outcomes.entry(outcome.to_string()).or_default() += 1;
}

/// Both sides over `deliveries` (after `warmup` each, not measured), alternating delivery by
/// delivery, on the calling thread's current-thread runtime.
async fn run_here(
    env: &Env,
    tag: &str,
    warmup: &[Delivery],
    deliveries: &[Delivery],
) -> Result<Run, String> {
    let mut gate = prepare(env, &format!("{tag}-pg"), false, warmup, deliveries).await?;
    let floor = prepare(env, &format!("{tag}-pf"), true, warmup, deliveries).await?;
    gate.counter.clear();
    floor.counter.clear();
    let mut run = Run {
        duplicate: deliveries.iter().map(|d| d.duplicate).collect(),
        ..Run::default()
    };
    for i in 0..deliveries.len() {
        if i % 2 == 0 {
            gate_delivery(&mut gate, i, &mut run.gate).await;
            floor_delivery(&floor, i, &mut run.floor).await;
        } else {
            floor_delivery(&floor, i, &mut run.floor).await;
            gate_delivery(&mut gate, i, &mut run.gate).await;
        }
    }
    run.gate.calls = gate.counter.counts();
    run.floor.calls = floor.counter.counts();
    Ok(run)
}

/// One paired run on a current-thread runtime on a thread of its own (its clients are built
/// there, so their connections' tasks run on it).
///
/// # Errors
/// When the runtime cannot be built, a side's tables cannot be created, or the floor's records
/// cannot be built.
pub async fn run(
    env: &Env,
    tag: &str,
    warmup: &[Delivery],
    deliveries: &[Delivery],
) -> Result<Run, String> {
    let (env, tag) = (env.clone(), tag.to_string());
    let (warmup, deliveries) = (warmup.to_vec(), deliveries.to_vec());
    let thread = std::thread::Builder::new()
        .name("paired".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("current-thread runtime: {e}"))?;
            runtime.block_on(run_here(&env, &tag, &warmup, &deliveries))
        })
        .map_err(|e| format!("paired thread: {e}"))?;
    tokio::task::spawn_blocking(move || thread.join())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|_| "the paired thread panicked".to_string())?
}

/// Prints the runs' figures and their medians.
pub fn print(summaries: &[RunSummary], events: usize, duplicate_rate: f64) {
    println!(
        "\nThe gate against its floor, paired: {} run(s) of {events} deliveries ({:.0} % redeliveries), one delivery per batch, alternating delivery by delivery on one current-thread runtime; the thread's CPU per delivery (µs):\n",
        summaries.len(),
        duplicate_rate * 100.0
    );
    println!("| run | gate mean | gate p50 | gate p90 | floor mean | floor p50 | floor p90 | gate/floor (means) | gate/floor (p50) | gate − floor per delivery, p50 | new: gate / floor p50 | duplicate: gate / floor p50 | process CPU gate/floor | CPU on other threads | calls/delivery gate, floor |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (i, s) in summaries.iter().enumerate() {
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2}x | {:.2}x | {:.0} | {:.0} / {:.0} | {:.0} / {:.0} | {:.2}x | {:.1} % | {:.2}, {:.2} |",
            i + 1,
            s.gate.mean_us,
            s.gate.p50_us,
            s.gate.p90_us,
            s.floor.mean_us,
            s.floor.p50_us,
            s.floor.p90_us,
            s.ratio_mean,
            s.ratio_median,
            s.paired_difference_p50_us,
            s.gate_new.p50_us,
            s.floor_new.p50_us,
            s.gate_duplicate.p50_us,
            s.floor_duplicate.p50_us,
            s.process_ratio_mean,
            s.other_threads_share * 100.0,
            s.calls_per_delivery.0,
            s.calls_per_delivery.1,
        );
    }
    let m = |f: fn(&RunSummary) -> f64| stats::median(&summaries.iter().map(f).collect::<Vec<_>>());
    println!(
        "\nMedians over the runs: gate {:.0} µs/delivery (mean), floor {:.0}: gate/floor {:.2}x by the means, {:.2}x by the medians (p50 {:.0} against {:.0} µs), the gate {:.0} µs above the floor per delivery at the median",
        m(|s| s.gate.mean_us),
        m(|s| s.floor.mean_us),
        m(|s| s.ratio_mean),
        m(|s| s.ratio_median),
        m(|s| s.gate.p50_us),
        m(|s| s.floor.p50_us),
        m(|s| s.paired_difference_p50_us),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(cpu_us: &[u64], process_us: &[u64]) -> Side {
        Side {
            thread_cpu_ns: cpu_us.iter().map(|u| u * 1000).collect(),
            process_cpu_ns: process_us.iter().map(|u| u * 1000).collect(),
            ..Side::default()
        }
    }

    #[test]
    fn a_run_pairs_deliveries_and_splits_new_from_duplicates() {
        let run = Run {
            duplicate: vec![false, false, true, false],
            gate: side(&[110, 220, 40, 330], &[120, 220, 40, 340]),
            floor: side(&[100, 200, 30, 300], &[100, 200, 30, 300]),
        };
        let s = run.summary();
        assert_eq!(s.gate.mean_us, 175.0);
        assert_eq!(s.floor.mean_us, 157.5);
        assert_eq!(s.ratio_mean, 175.0 / 157.5);
        // Nearest-rank medians: the 2nd of 4.
        assert_eq!((s.gate.p50_us, s.floor.p50_us), (110.0, 100.0));
        assert_eq!(s.gate_new.p50_us, 220.0);
        assert_eq!(s.floor_duplicate.n, 1);
        assert_eq!(s.floor_duplicate.p50_us, 30.0);
        // Differences 10, 20, 10, 30: median 15.
        assert_eq!(s.paired_difference_p50_us, 15.0);
        // Process 1,350 µs, thread 1,330 µs.
        assert!((s.other_threads_share - 20.0 / 1350.0).abs() < 1e-12);
    }

    #[test]
    fn the_thread_clock_counts_this_threads_work() {
        let before = stats::thread_cpu_ns();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let thread = stats::thread_cpu_ns();
        assert!(thread > before);
        // The process's clock counts this thread's time too (read after it).
        assert!(stats::process_cpu_ns() >= thread);
    }
}
