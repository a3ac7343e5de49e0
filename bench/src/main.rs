//! `gate-bench`: the gate's cost per event side by side with the naive handler and with
//! Powertools for AWS Lambda (Python), in one run against one moto server (issue 8). See
//! `BENCHMARKS.md` for the figures and the commands that produced them.
//!
//! What it does:
//!
//! 1. starts one moto server (`bench/moto_server.py`: moto 5.2.5 served with keep-alive and a
//!    TransactWriteItems that does not copy whole tables, see there) on a free loopback port and
//!    the terminal simulator (`terminal-sim`, a fixed latency per claim), each its own process;
//! 2. `compare`: processes the same N deliveries (default 2,000, 3 % redeliveries) three ways,
//!    one delivery per batch, `--runs` times (the order of the handlers rotates per run): the
//!    naive handler, the gate, and Powertools' `idempotent_function` (Python); prints per run and
//!    the medians: events/s, client CPU per event, latency p50/p99, DynamoDB calls per event,
//!    slots issued, and the ratios gate/naive and gate/Powertools; writes `latency.png`;
//! 3. `breakdown`: the gate's client CPU per event with each port real or in process;
//! 4. `batch`: a batch of 10 new records against one record, on moto and on a latency model of
//!    DynamoDB;
//! 5. `cold`: the release consumer binary's init time, batch latency and peak RSS under a fake
//!    Lambda Runtime API, and the sizes of the binaries given with `--binary`;
//! 6. `ingress`: the webhook ingress's client CPU and latency per request against SQS on moto,
//!    and its release binary's init time (`--ingress-bin`), next to the consumer's (issue 16).
//!
//! Writes `results.json` (figures without the raw latencies) and `latency.png` to `--out`.

mod batch;
mod breakdown;
mod coldstart;
mod counter;
mod handlers;
mod ingress;
mod plot;
mod procs;
mod stats;
mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Parser;
use serde::Serialize;

use handlers::{Env, Kind, Phase};
use stats::median;

/// The gate, the naive handler and Powertools side by side on one moto server.
#[derive(Debug, Parser)]
#[command(name = "gate-bench")]
struct Args {
    /// Deliveries per handler and run (moto serves roughly 200-400 requests/s: 2,000 take about
    /// a minute per run for all three).
    #[arg(long, default_value_t = 2000)]
    events: usize,
    /// Share of deliveries that are redeliveries of an earlier event.
    #[arg(long, default_value_t = 0.03)]
    duplicate_rate: f64,
    /// Runs of the three-way comparison (medians are over runs).
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Unmeasured deliveries before each handler's measured loop (connections, caches).
    #[arg(long, default_value_t = 50)]
    warmup: usize,
    /// The terminal simulator's fixed latency per slot claim, ms.
    #[arg(long, default_value_t = 2)]
    terminal_latency_ms: u64,
    /// Pairs (one record, a batch of 10) per store in the batch measurement.
    #[arg(long, default_value_t = 20)]
    batch_trials: usize,
    /// The latency model's delay per DynamoDB call, ms (batch measurement).
    #[arg(long, default_value_t = 5)]
    store_latency_ms: u64,
    /// New events per configuration in the CPU breakdown.
    #[arg(long, default_value_t = 500)]
    breakdown_events: usize,
    /// Cold starts of the consumer binary.
    #[arg(long, default_value_t = 10)]
    cold_trials: usize,
    /// The consumer binary for the cold start (default: `target/lambda/consumer/bootstrap`, else
    /// `consumer` next to this binary).
    #[arg(long)]
    consumer_bin: Option<PathBuf>,
    /// Requests per run of the ingress measurement (`--runs` runs).
    #[arg(long, default_value_t = 1000)]
    ingress_requests: usize,
    /// The ingress binary for its cold start (default: `target/lambda/ingress/bootstrap`, else
    /// `ingress` next to this binary; none: no cold start).
    #[arg(long)]
    ingress_bin: Option<PathBuf>,
    /// `LABEL=PATH` of a binary whose size to report (repeatable), e.g.
    /// `x86_64=target/lambda-x86_64/consumer/bootstrap`.
    #[arg(long = "binary")]
    binaries: Vec<String>,
    /// Parts to run: `compare`, `breakdown`, `batch`, `cold`, `ingress` (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "compare,breakdown,batch,cold,ingress"
    )]
    parts: Vec<String>,
    /// Handlers in the comparison (comma-separated): `naive`, `gate`, `powertools`.
    #[arg(long, value_delimiter = ',', default_value = "naive,gate,powertools")]
    handlers: Vec<String>,
    /// A moto_server executable to use as it is. By default the harness runs
    /// `bench/moto_server.py` (moto with TransactWriteItems in O(items touched), see there) with
    /// `--python`.
    #[arg(long)]
    moto: Option<PathBuf>,
    /// Python with Powertools (default `.venv/bin/python`).
    #[arg(long)]
    python: Option<PathBuf>,
    /// The terminal simulator binary (default `terminal-sim` next to this binary).
    #[arg(long)]
    terminal_sim: Option<PathBuf>,
    /// Where `latency.png` and `results.json` go (default `bench/`).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Workload seed.
    #[arg(long, default_value_t = 8)]
    seed: u64,
}

/// A phase's figures without its raw latencies.
#[derive(Debug, Clone, Serialize)]
struct Summary {
    events: usize,
    events_per_s: f64,
    cpu_us_per_event: f64,
    p50_ms: f64,
    p99_ms: f64,
    calls_per_event: f64,
    calls: BTreeMap<String, u64>,
    outcomes: BTreeMap<String, u64>,
    slots_issued: usize,
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

#[derive(Debug, Serialize)]
struct Machine {
    nproc: usize,
    cpu: String,
    os: String,
}

#[derive(Debug, Serialize)]
struct Results {
    command: String,
    machine: Machine,
    events: usize,
    duplicate_rate: f64,
    terminal_latency_ms: u64,
    runs: Vec<BTreeMap<&'static str, Summary>>,
    medians: BTreeMap<&'static str, BTreeMap<&'static str, f64>>,
    breakdown: Vec<breakdown::Row>,
    batch: Vec<batch::BatchResult>,
    cold_start: Option<coldstart::ColdStart>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ingress: Option<ingress::IngressResults>,
    binary_sizes: BTreeMap<String, u64>,
}

fn machine() -> Machine {
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

/// Tomorrow 08:00-10:00 UTC, RFC 3339: a window that has not ended.
fn window() -> (String, String) {
    let day = chrono::Utc::now().date_naive() + chrono::Days::new(1);
    (format!("{day}T08:00:00Z"), format!("{day}T10:00:00Z"))
}

const METRICS: [&str; 6] = [
    "events_per_s",
    "cpu_us_per_event",
    "p50_ms",
    "p99_ms",
    "calls_per_event",
    "slots_issued",
];

fn metric(s: &Summary, m: &str) -> f64 {
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

fn print_table(title: &str, rows: &[(&'static str, BTreeMap<&'static str, f64>)], unique: usize) {
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
    for other in ["naive", "powertools"] {
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
}

fn kinds(names: &[String]) -> Result<Vec<Kind>, String> {
    names
        .iter()
        .map(|n| {
            Kind::ALL
                .into_iter()
                .find(|k| k.name() == n.trim())
                .ok_or_else(|| format!("unknown handler {n:?}"))
        })
        .collect()
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args = Args::parse();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    let out = args.out.clone().unwrap_or_else(|| root.join("bench"));
    std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    let python = args
        .python
        .clone()
        .unwrap_or_else(|| root.join(".venv/bin/python"));
    let moto_command: Vec<PathBuf> = match &args.moto {
        Some(path) => vec![path.clone()],
        None => vec![python.clone(), root.join("bench/moto_server.py")],
    };
    let terminal_path = args
        .terminal_sim
        .clone()
        .or_else(|| procs::sibling("terminal-sim"))
        .ok_or("terminal-sim not found next to gate-bench: cargo build --release -p sim")?;
    let part = |p: &str| args.parts.iter().any(|x| x.trim() == p);
    let handlers = kinds(&args.handlers)?;
    let window = window();

    let moto = procs::start_moto(&moto_command).await?;
    let terminal = procs::start_terminal(&terminal_path, args.terminal_latency_ms)?;
    eprintln!(
        "bench: moto at {} (pid {}), terminal simulator at {} ({} ms per claim, pid {})",
        moto.endpoint,
        moto.child.pid(),
        terminal.base_url,
        args.terminal_latency_ms,
        terminal.child.pid()
    );
    let work_dir = std::env::temp_dir().join(format!("gate-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work_dir).map_err(|e| e.to_string())?;
    let env = Env {
        moto: moto.endpoint.clone(),
        terminal: terminal.base_url.clone(),
        python,
        handler_py: root.join("bench/powertools/handler.py"),
        work_dir: work_dir.clone(),
    };
    let stamp = format!("b{}", std::process::id());

    let mut results = Results {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine: machine(),
        events: args.events,
        duplicate_rate: args.duplicate_rate,
        terminal_latency_ms: args.terminal_latency_ms,
        runs: Vec::new(),
        medians: BTreeMap::new(),
        breakdown: Vec::new(),
        batch: Vec::new(),
        cold_start: None,
        ingress: None,
        binary_sizes: BTreeMap::new(),
    };
    eprintln!(
        "bench: {} cores, {}",
        results.machine.nproc, results.machine.cpu
    );

    if part("compare") {
        let mut pooled: BTreeMap<Kind, Vec<u64>> = BTreeMap::new();
        let mut unique = 0;
        for run in 0..args.runs {
            let tag = format!("{stamp}-r{run}");
            let deliveries = workload::deliveries(
                &tag,
                args.events,
                args.duplicate_rate,
                &window,
                args.seed + run as u64,
            );
            unique = deliveries.iter().filter(|d| !d.duplicate).count();
            let warmup =
                workload::deliveries(&format!("{tag}-warm"), args.warmup, 0.0, &window, 99);
            let mut summaries = BTreeMap::new();
            let mut order = handlers.clone();
            let shift = run % order.len().max(1);
            order.rotate_left(shift);
            for kind in order {
                let phase_tag = format!("{tag}-{}", kind.name());
                eprintln!(
                    "bench: run {} of {}: {} ...",
                    run + 1,
                    args.runs,
                    kind.name()
                );
                let phase =
                    handlers::run_phase(kind, &env, &phase_tag, &warmup, &deliveries).await?;
                let s = Summary::from(&phase);
                eprintln!(
                    "bench:   {:.0} events/s, {:.0} µs CPU/event, p50 {:.2} ms, p99 {:.2} ms, {:.3} calls/event {:?}, outcomes {:?}",
                    s.events_per_s, s.cpu_us_per_event, s.p50_ms, s.p99_ms, s.calls_per_event, s.calls, s.outcomes
                );
                pooled
                    .entry(kind)
                    .or_default()
                    .extend_from_slice(&phase.latencies_us);
                summaries.insert(kind.name(), s);
            }
            results.runs.push(summaries);
        }
        let mut rows = Vec::new();
        for kind in &handlers {
            let mut m = BTreeMap::new();
            for metric_name in METRICS {
                let values: Vec<f64> = results
                    .runs
                    .iter()
                    .filter_map(|r| r.get(kind.name()))
                    .map(|s| metric(s, metric_name))
                    .collect();
                m.insert(metric_name, median(&values));
            }
            results.medians.insert(kind.name(), m.clone());
            rows.push((kind.name(), m));
        }
        print_table(
            &format!(
                "Medians over {} run(s) of {} deliveries ({:.0} % redeliveries), one delivery per batch, terminal latency {} ms:",
                args.runs,
                args.events,
                args.duplicate_rate * 100.0,
                args.terminal_latency_ms
            ),
            &rows,
            unique,
        );
        let series: Vec<(String, Vec<u64>)> = pooled
            .into_iter()
            .map(|(k, v)| (k.name().to_string(), v))
            .collect();
        let png = out.join("latency.png");
        plot::latency_png(
            &png,
            &format!(
                "Latency per event on moto: {} runs x {} deliveries, {:.0} % redeliveries, terminal {} ms",
                args.runs,
                args.events,
                args.duplicate_rate * 100.0,
                args.terminal_latency_ms
            ),
            &series,
        )?;
        eprintln!("bench: wrote {}", png.display());
    }

    if part("breakdown") {
        eprintln!("bench: CPU breakdown ...");
        results.breakdown = breakdown::run(&env, &stamp, args.breakdown_events, &window).await?;
        println!(
            "\nWhere the gate's client CPU goes ({} new events per row, one per batch):\n",
            args.breakdown_events
        );
        println!("| store | terminal | client CPU µs/event | p50 ms |");
        println!("| --- | --- | ---: | ---: |");
        for r in &results.breakdown {
            println!(
                "| {} | {} | {:.0} | {:.2} |",
                r.store, r.terminal, r.cpu_us_per_event, r.p50_ms
            );
        }
    }

    if part("batch") {
        eprintln!("bench: batch behaviour ...");
        results.batch = batch::run(
            &env,
            &stamp,
            args.batch_trials,
            args.store_latency_ms,
            &window,
        )
        .await?;
        println!("\nBatch of 10 new records against one record (gate, max_concurrency 10), medians of {} pairs:\n", args.batch_trials);
        println!("| store | one record ms | batch of 10 ms | ratio |");
        println!("| --- | ---: | ---: | ---: |");
        for b in &results.batch {
            println!(
                "| {} | {:.2} | {:.2} | {:.2}x |",
                b.store,
                b.single_ms,
                b.batch_ms,
                b.ratio()
            );
        }
    }

    if part("cold") {
        let consumer = args
            .consumer_bin
            .clone()
            .or_else(|| {
                let p = root.join("target/lambda/consumer/bootstrap");
                p.exists().then_some(p)
            })
            .or_else(|| procs::sibling("consumer"))
            .ok_or("no consumer binary: cargo lambda build --release -p consumer")?;
        eprintln!("bench: cold starts of {} ...", consumer.display());
        let cold = coldstart::run(&consumer, &env, &stamp, args.cold_trials, &window).await?;
        println!(
            "\nCold start of {} ({} trials, medians): init {:.1} ms, batch of 10 {:.1} ms, peak RSS {:.1} MB, binary {:.1} MB",
            cold.binary,
            cold.trials.len(),
            cold.init_ms,
            cold.batch_ms,
            cold.peak_rss_mb,
            cold.binary_bytes as f64 / 1e6
        );
        results.cold_start = Some(cold);
    }
    if part("ingress") {
        eprintln!(
            "bench: the webhook ingress, {} requests per run ...",
            args.ingress_requests
        );
        let runs = ingress::per_request(
            &env,
            &stamp,
            args.runs,
            args.ingress_requests,
            args.warmup,
            &window,
        )
        .await?;
        let binary = args
            .ingress_bin
            .clone()
            .or_else(|| {
                let p = root.join("target/lambda/ingress/bootstrap");
                p.exists().then_some(p)
            })
            .or_else(|| procs::sibling("ingress"));
        let cold = match &binary {
            Some(b) => {
                eprintln!("bench: cold starts of {} ...", b.display());
                ingress::cold(b, &env, &stamp, args.cold_trials, &window).await?
            }
            None => Vec::new(),
        };
        let r = ingress::results(runs, binary.map(|b| b.display().to_string()), cold);
        println!(
            "\nWebhook ingress, medians of {} run(s) of {} requests: {:.0} requests/s, client CPU {:.0} µs/request, p50 {:.2} ms, p99 {:.2} ms",
            r.runs.len(),
            args.ingress_requests,
            r.requests_per_s,
            r.cpu_us_per_request,
            r.p50_ms,
            r.p99_ms
        );
        if let Some(b) = &r.binary {
            println!(
                "Cold start of {b} ({} trials, medians): init {:.1} ms, first request {:.1} ms, peak RSS {:.1} MB",
                r.cold.len(),
                r.init_ms,
                r.first_request_ms,
                r.peak_rss_mb
            );
        }
        results.ingress = Some(r);
    }
    for spec in &args.binaries {
        let (label, path) = spec
            .split_once('=')
            .ok_or_else(|| format!("--binary {spec:?}: expected LABEL=PATH"))?;
        let bytes = std::fs::metadata(path)
            .map_err(|e| format!("{path}: {e}"))?
            .len();
        println!(
            "binary {label}: {path}: {:.2} MB ({bytes} bytes)",
            bytes as f64 / 1e6
        );
        results.binary_sizes.insert(label.to_string(), bytes);
    }

    let json = serde_json::to_vec_pretty(&results).map_err(|e| e.to_string())?;
    let path = out.join("results.json");
    std::fs::write(&path, json).map_err(|e| e.to_string())?;
    eprintln!("bench: wrote {}", path.display());
    let _ = std::fs::remove_dir_all(&work_dir);
    drop(terminal);
    drop(moto);
    Ok(())
}
