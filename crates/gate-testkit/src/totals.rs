//! [`Totals`] over many [`Harness`](super::Harness) runs, and [`run_parallel`]: what `sim check
//! --integration NAME` prints for any integration's scenario.

use std::future::Future;

use super::harness::RunReport;
use gate::manual::ManualReason;

/// What many runs did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    /// Runs.
    pub seeds: u64,
    /// Each run with a violation: its seed and its violations.
    pub failures: Vec<(u64, Vec<String>)>,
    /// Effects the server made.
    pub effects: usize,
    /// Records committed.
    pub committed: usize,
    /// Distinct cases a person got, all reasons ([`RunReport::cases`]).
    pub to_a_person: usize,
    /// SQS deliveries, redeliveries included.
    pub deliveries: usize,
    /// Failed messages that never came back ([`RunReport::lost`]).
    pub lost: usize,
    /// Records the reconciler committed.
    pub reconciled: usize,
    /// Store faults: workers that crashed.
    pub crashes: usize,
    /// Store faults: writes echoed (a lost answer retried).
    pub echoes: usize,
    /// Store faults: workers stalled past their lease.
    pub stalls: usize,
    /// The largest clock skew drawn in any run, absolute, **milliseconds**.
    pub max_skew_ms: i64,
}

impl Totals {
    /// The totals of `reports`.
    pub fn of(reports: &[RunReport]) -> Self {
        let mut t = Totals::default();
        for r in reports {
            t.seeds += 1;
            if !r.violations.is_empty() {
                t.failures.push((r.seed, r.violations.clone()));
            }
            t.effects += r.effects.values().map(Vec::len).sum::<usize>();
            t.committed += r.committed();
            t.to_a_person += ManualReason::ALL.iter().map(|&x| r.cases(x)).sum::<usize>();
            t.deliveries += r.deliveries;
            t.lost += r.lost;
            t.reconciled += r.reconciled;
            t.crashes += r.faults.crashes;
            t.echoes += r.faults.echoes;
            t.stalls += r.faults.stalls;
            t.max_skew_ms = t.max_skew_ms.max(r.max_skew_seen_ms);
        }
        t
    }
}

/// Runs `run(seed)` for every seed of `seeds`, `parallel` at a time on this task (each run with
/// its own server, store and clock is independent, so each seed replays alike; their waits on
/// the loopback overlap), and returns the reports in seed order.
pub async fn run_parallel<F, Fut>(
    seeds: std::ops::Range<u64>,
    parallel: usize,
    run: F,
) -> Vec<RunReport>
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = RunReport>,
{
    let mut reports = Vec::new();
    let seeds: Vec<u64> = seeds.collect();
    for chunk in seeds.chunks(parallel.max(1)) {
        reports.extend(futures::future::join_all(chunk.iter().map(|&s| run(s))).await);
    }
    reports
}
