//! What a run of `gate-bench` writes to `results.json`: every part's figures and the machine
//! they were measured on.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::cold_and_cost::CostAt;
use crate::compare::Summary;
use crate::{batch, breakdown, coldstart, cost, ingress, paired};

#[derive(Debug, Serialize)]
pub(crate) struct Machine {
    pub nproc: usize,
    pub cpu: String,
    pub os: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct Results {
    pub command: String,
    pub machine: Machine,
    pub events: usize,
    pub duplicate_rate: f64,
    pub terminal_latency_ms: u64,
    pub runs: Vec<BTreeMap<&'static str, Summary>>,
    pub medians: BTreeMap<&'static str, BTreeMap<&'static str, f64>>,
    pub breakdown: Vec<breakdown::Row>,
    pub batch: Vec<batch::BatchResult>,
    pub cold_start: Vec<coldstart::ColdStart>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ingress: Option<ingress::IngressResults>,
    pub binary_sizes: BTreeMap<String, u64>,
    pub cost_runs: Vec<cost::CostRun>,
    pub cost: Vec<cost::CostRow>,
    /// The priced rows at each of `--cost-duplicate-rates`.
    pub cost_by_rate: Vec<CostAt>,
    pub item_bytes: BTreeMap<String, usize>,
    pub prices: cost::Prices,
    pub capacity: Vec<sim::sustained::SustainedReport>,
    /// `paired`: the gate against its floor, delivery by delivery, one summary per run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paired: Vec<paired::RunSummary>,
}

pub(crate) fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let os = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| format!("Linux {}", s.trim()))
        .unwrap_or_default();
    Machine {
        nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu,
        os,
    }
}
