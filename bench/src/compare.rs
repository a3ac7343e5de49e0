//! The `compare` part's figures: a phase summarised without its raw latencies, the medians table
//! with the ratios of the gate to each other handler, and the CPU ratios run by run.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::handlers::Phase;
use crate::stats::median;

/// A phase's figures without its raw latencies.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Summary {
    pub events: usize,
    pub events_per_s: f64,
    pub cpu_us_per_event: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub calls_per_event: f64,
    pub calls: BTreeMap<String, u64>,
    pub outcomes: BTreeMap<String, u64>,
    pub slots_issued: usize,
}

impl From<&Phase> for Summary {
    fn from(p: &Phase) -> Self {
        Self {
            events: p.events,
            events_per_s: p.events_per_s(),
            cpu_us_per_event: p.cpu_us_per_event(),
            p50_ms: p.latency_ms(0.5),
            p99_ms: p.latency_ms(0.99),
            calls_per_event: p.calls_per_event(),
            calls: p.calls.clone(),
            outcomes: p.outcomes.clone(),
            slots_issued: p.slots_issued,
        }
    }
}

pub(crate) const METRICS: [&str; 6] = [
    "events_per_s",
    "cpu_us_per_event",
    "p50_ms",
    "p99_ms",
    "calls_per_event",
    "slots_issued",
];

pub(crate) fn metric(s: &Summary, m: &str) -> f64 {
    match m {
        "events_per_s" => s.events_per_s,
        "cpu_us_per_event" => s.cpu_us_per_event,
        "p50_ms" => s.p50_ms,
        "p99_ms" => s.p99_ms,
        "calls_per_event" => s.calls_per_event,
        "slots_issued" => s.slots_issued as f64,
        _ => f64::NAN,
    }
}

pub(crate) fn print_table(
    title: &str,
    rows: &[(&'static str, BTreeMap<&'static str, f64>)],
    unique: usize,
) {
    println!("\n{title}\n");
    println!(
        "| handler | events/s | client CPU µs/event | p50 ms | p99 ms | DynamoDB calls/event | slots issued (unique events {unique}) |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (name, m) in rows {
        let slots = format!("{:.0}", m["slots_issued"]);
        println!(
            "| {name} | {:.0} | {:.0} | {:.2} | {:.2} | {:.3} | {slots} |",
            m["events_per_s"],
            m["cpu_us_per_event"],
            m["p50_ms"],
            m["p99_ms"],
            m["calls_per_event"]
        );
    }
    let get = |n: &str| rows.iter().find(|(k, _)| *k == n).map(|(_, m)| m);
    for other in ["naive", "powertools", "floor"] {
        if let (Some(g), Some(o)) = (get("gate"), get(other)) {
            println!(
                "\ngate/{other}: events/s {:.2}x, CPU/event {:.2}x, p50 {:.2}x, p99 {:.2}x, calls/event {:.2}x",
                g["events_per_s"] / o["events_per_s"],
                g["cpu_us_per_event"] / o["cpu_us_per_event"],
                g["p50_ms"] / o["p50_ms"],
                g["p99_ms"] / o["p99_ms"],
                g["calls_per_event"] / o["calls_per_event"],
            );
        }
    }
    for variant in ["floor-nostall", "floor-noreuse", "floor-1thread"] {
        if let (Some(f), Some(v)) = (get("floor"), get(variant)) {
            println!(
                "\n{variant}/floor: CPU/event {:.2}x, p50 {:.2}x, p99 {:.2}x",
                v["cpu_us_per_event"] / f["cpu_us_per_event"],
                v["p50_ms"] / f["p50_ms"],
                v["p99_ms"] / f["p99_ms"],
            );
        }
    }
}

/// Client CPU per event of one handler against another, run by run (the machine is shared: a
/// ratio within one run, where both ran minutes apart, is steadier than a ratio of medians).
const RUN_RATIOS: [(&str, &str); 5] = [
    ("gate", "floor"),
    ("gate-1thread", "floor-1thread"),
    ("floor-nostall", "floor"),
    ("floor-noreuse", "floor"),
    ("floor-1thread", "floor"),
];

/// Prints [`RUN_RATIOS`] for every run that has both handlers, and their median.
pub(crate) fn print_run_ratios(runs: &[BTreeMap<&'static str, Summary>]) {
    for (a, b) in RUN_RATIOS {
        let ratios: Vec<f64> = runs
            .iter()
            .filter_map(|r| Some(r.get(a)?.cpu_us_per_event / r.get(b)?.cpu_us_per_event))
            .collect();
        if ratios.is_empty() {
            continue;
        }
        let each: Vec<String> = ratios.iter().map(|x| format!("{x:.2}")).collect();
        println!(
            "
{a}/{b}, client CPU per event, run by run: {} (median {:.2}x)",
            each.join(", "),
            median(&ratios)
        );
    }
}
