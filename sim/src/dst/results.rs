//! What the simulation reports: one seed's figures, violations, faults and trace, and the totals
//! over many seeds.

use std::collections::BTreeMap;

/// Figures of one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Distinct bodies in the schedule.
    pub bodies: u64,
    /// Message copies sent.
    pub messages: u64,
    /// Records delivered to consumers (every receive).
    pub deliveries: u64,
    /// Consumer invocations.
    pub invocations: u64,
    /// Reconciler invocations.
    pub reconciler_runs: u64,
    /// Tasks that died (crash or Lambda timeout).
    pub crashes: u64,
    /// Slots the terminal issued.
    pub slots: u64,
    /// Records `committed`.
    pub committed: u64,
    /// Items in the manual queue.
    pub manual_items: u64,
    /// Copies in the DLQ.
    pub dead_lettered: u64,
    /// Simulated time from start to quiescence, ms.
    pub simulated_ms: i64,
    /// Events the driver processed.
    pub steps: u64,
    /// The longest any record stayed `in_flight` after the faults healed, in thousandths of the
    /// schedule's liveness bound (the largest over runs when summed up; above 1000 is a
    /// violation).
    pub liveness_bound_used_permille: u64,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.bodies += o.bodies;
        self.messages += o.messages;
        self.deliveries += o.deliveries;
        self.invocations += o.invocations;
        self.reconciler_runs += o.reconciler_runs;
        self.crashes += o.crashes;
        self.slots += o.slots;
        self.committed += o.committed;
        self.manual_items += o.manual_items;
        self.dead_lettered += o.dead_lettered;
        self.simulated_ms += o.simulated_ms;
        self.steps += o.steps;
        self.liveness_bound_used_permille = self
            .liveness_bound_used_permille
            .max(o.liveness_bound_used_permille);
    }
}

/// The result of one seed.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The seed.
    pub seed: u64,
    /// Invariant violations (empty: the schedule passed).
    pub violations: Vec<String>,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, u64>,
    /// The schedule's trace (only when recorded): the schedule, then one line per event,
    /// prefixed with the simulated epoch ms.
    pub trace: Vec<String>,
    /// Figures.
    pub stats: Stats,
}

impl RunResult {
    /// The trace without the per-call grant lines: the schedule, receives, crashes, claims,
    /// manual sends, outcomes. At most `max` lines (the first half and the last half).
    pub fn short_trace(&self, max: usize) -> Vec<String> {
        let lines: Vec<&String> = self
            .trace
            .iter()
            .filter(|l| {
                let body = l.split_once(' ').map_or(l.as_str(), |(_, b)| b);
                !(body.starts_with('T') && body.split_whitespace().count() == 2)
            })
            .collect();
        if lines.len() <= max {
            return lines.into_iter().cloned().collect();
        }
        let half = max / 2;
        let mut out: Vec<String> = lines[..half].iter().map(|l| (*l).clone()).collect();
        out.push(format!("... {} lines ...", lines.len() - 2 * half));
        out.extend(lines[lines.len() - half..].iter().map(|l| (*l).clone()));
        out
    }
}

/// Totals over many seeds.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Schedules run.
    pub schedules: u64,
    /// Faults injected, by kind, over all schedules.
    pub faults: BTreeMap<String, u64>,
    /// Figures summed over all schedules.
    pub stats: Stats,
    /// Seeds that violated an invariant, with their violations.
    pub failures: Vec<(u64, Vec<String>)>,
}

impl Summary {
    /// Adds one run.
    pub fn add(&mut self, r: &RunResult) {
        self.schedules += 1;
        for (k, n) in &r.faults {
            *self.faults.entry(k.clone()).or_insert(0) += n;
        }
        self.stats.add(&r.stats);
        if !r.violations.is_empty() {
            self.failures.push((r.seed, r.violations.clone()));
        }
    }

    /// Merges another summary.
    pub fn merge(&mut self, o: Summary) {
        self.schedules += o.schedules;
        for (k, n) in o.faults {
            *self.faults.entry(k).or_insert(0) += n;
        }
        self.stats.add(&o.stats);
        self.failures.extend(o.failures);
        self.failures.sort_by_key(|(s, _)| *s);
    }
}
