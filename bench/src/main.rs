// Over 600 lines: the harness's command line and the orchestration of its parts (compare, batch,
// cold start, cost, capacity, ingress, stores) in one place; each part's work lives in its own module.
//! `gate-bench`: the gate's cost per event side by side with the naive handler and with
//! Powertools for AWS Lambda (Python), in one run against one moto server (issue 8). See
//! `docs/BENCHMARKS.md` for the figures and the commands that produced them.
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
//! 5. `cold`: cold start and footprint of the gate (the release consumer binary) and of
//!    Powertools (`python -m awslambdaric`, the runtime interface client) under the same fake
//!    Lambda Runtime API, `--cold-trials` each, and their ratio; the sizes of the binaries given
//!    with `--binary` (issue 18, item 1);
//! 6. `ingress`: the webhook ingress's client CPU and latency per request against SQS on moto,
//!    and its release binary's init time (`--ingress-bin`), next to the consumer's (issue 16);
//! 7. `cost`: dollars per million events, naive, gate and Powertools, each a Lambda process with
//!    the CPU share of its memory size, over moto behind a 5 ms latency floor (issue 18, item 2;
//!    `cost.rs`);
//! 8. `capacity`: the capacity model against the sustained-rate replay of the simulator (`sim
//!    sustained`, issue 18, item 3);
//! 9. `stores` (not in the default parts; needs `--database-url`): the store on PostgreSQL and on
//!    DynamoDB (moto) side by side, round trips and latency per new event and per duplicate
//!    (issue 26, item 6; `stores.rs`);
//! 10. `paired` (not in the default parts): the gate and its floor alternating delivery by
//!     delivery on one current-thread runtime, the thread's CPU per delivery (issue 24, item 5;
//!     `paired.rs`).
//!
//! The handler `floor` (in `compare`) is the gate's DynamoDB requests (reserve, the natural key's
//! guard, commit) and terminal call in a bare loop (issue 18, item 4; issue 24, item 5).
//!
//! Writes `results.json` (figures without the raw latencies), `latency.png` and
//! `cold-and-cost.png` to `--out`.

mod cost;

mod batch;
mod breakdown;
mod coldstart;
mod counter;
mod handlers;
mod ingress;
mod paired;
mod pg_wire;
mod plot;
mod procs;
mod stats;
mod stores;
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
    /// Parts to run: `compare`, `breakdown`, `batch`, `cold`, `ingress`, `cost`, `capacity`,
    /// and, not by default, `stores` (it needs `--database-url`) and `paired` (the gate and its
    /// floor alternating delivery by delivery, `--runs` x `--events`) (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "compare,breakdown,batch,cold,ingress,cost,capacity"
    )]
    parts: Vec<String>,
    /// Handlers in the comparison (comma-separated): `naive`, `gate`, `powertools`, `floor`, and
    /// the floor with other client settings: `floor-nostall` (stalled-stream protection off),
    /// `floor-noreuse` (no idle connection kept to DynamoDB); `gate-1thread` and `floor-1thread`
    /// (each on a current-thread runtime of its own, as the functions run).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "naive,gate,powertools,floor"
    )]
    handlers: Vec<String>,
    /// Batches of 10 new events (and as many of duplicates) per handler and memory size in the
    /// cost measurement.
    #[arg(long, default_value_t = 10)]
    cost_batches: usize,
    /// Memory sizes (MB) at which Powertools is measured for its cost; the smallest whose batch
    /// of new events takes at most 10 % longer than at the fastest size is priced.
    #[arg(long, value_delimiter = ',', default_value = "128,256,512,1024,1769")]
    powertools_memory: Vec<u32>,
    /// The latency floor of moto in the cost measurement, ms (a DynamoDB call).
    #[arg(long, default_value_t = 5)]
    cost_store_latency_ms: u64,
    /// The functions measured in `cold` (gate, powertools) and `cost` (naive, gate, powertools,
    /// fair-peer: Powertools with its booking and its completion in one transaction).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "naive,gate,powertools,fair-peer"
    )]
    lambdas: Vec<String>,
    /// Shares of duplicates at which `cost` prices every handler, side by side (issue 24 item 2).
    #[arg(long, value_delimiter = ',', default_value = "0.01,0.03")]
    cost_duplicate_rates: Vec<f64>,
    /// Run as the naive handler's Lambda function (the cost measurement starts this binary so
    /// under its fake Runtime API); reads BOOKINGS_TABLE, TERMINAL_BASE_URL, AWS_ENDPOINT_URL.
    #[arg(long, hide = true)]
    serve_naive_lambda: bool,
    /// Draw `cold-and-cost.png` into `--out` from a `results.json` of an earlier run (its
    /// `cold_start` and `cost`), measuring nothing.
    #[arg(long, value_name = "results.json")]
    replot: Option<PathBuf>,
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
    /// The PostgreSQL server of `--parts stores`, `postgresql://user@IP:PORT/db?sslmode=disable`
    /// (secret; `scripts/with-postgres.sh` starts a throwaway one and sets
    /// GATE_TEST_DATABASE_URL). The harness works in a schema of its own and drops it.
    #[arg(long, env = "GATE_TEST_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// New events per store and run in `stores` (`--runs` runs).
    #[arg(long, default_value_t = 2000)]
    store_events: usize,
    /// Duplicates per store and run in `stores` (redeliveries of the first new events).
    #[arg(long, default_value_t = 500)]
    store_duplicates: usize,
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
    cold_start: Vec<coldstart::ColdStart>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ingress: Option<ingress::IngressResults>,
    binary_sizes: BTreeMap<String, u64>,
    cost_runs: Vec<cost::CostRun>,
    cost: Vec<cost::CostRow>,
    /// The priced rows at each of `--cost-duplicate-rates`.
    cost_by_rate: Vec<CostAt>,
    item_bytes: BTreeMap<String, usize>,
    prices: cost::Prices,
    capacity: Vec<sim::sustained::SustainedReport>,
    /// `paired`: the gate against its floor, delivery by delivery, one summary per run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    paired: Vec<paired::RunSummary>,
}

/// The priced rows at one share of duplicates.
#[derive(Debug, Serialize)]
struct CostAt {
    duplicate_rate: f64,
    rows: Vec<cost::CostRow>,
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

/// Run `run`'s measured deliveries (`--events`, `--duplicate-rate`, seeded by `--seed` plus
/// the run) and its warm-up (`--warmup` new events), both tagged `tag`.
fn run_workload(
    args: &Args,
    tag: &str,
    run: usize,
    window: &(String, String),
) -> (Vec<workload::Delivery>, Vec<workload::Delivery>) {
    let deliveries = workload::deliveries(
        tag,
        args.events,
        args.duplicate_rate,
        window,
        args.seed + run as u64,
    );
    let warmup = workload::deliveries(&format!("{tag}-warm"), args.warmup, 0.0, window, 99);
    (deliveries, warmup)
}

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
fn print_run_ratios(runs: &[BTreeMap<&'static str, Summary>]) {
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

/// The cold-start table: gate and Powertools, medians, and the ratio.
fn print_cold(cold: &[coldstart::ColdStart]) {
    let Some(trials) = cold.first().map(|c| c.trials.len()) else {
        return;
    };
    println!(
        "\nCold start under the same fake Runtime API ({trials} trials each, medians; spread lowest-highest):\n"
    );
    println!("| function | init to first `next` | first batch of 10 (cold) | peak RSS |");
    println!("| --- | ---: | ---: | ---: |");
    let spread = |c: &coldstart::ColdStart, f: fn(&coldstart::Trial) -> f64| {
        let v: Vec<f64> = c.trials.iter().map(f).collect();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!("{lo:.1}-{hi:.1}")
    };
    for c in cold {
        println!(
            "| {} | {:.1} ms ({}) | {:.1} ms ({}) | {:.1} MB ({}) |",
            c.label,
            c.init_ms,
            spread(c, |t| t.init_ms),
            c.batch_ms,
            spread(c, |t| t.batch_ms),
            c.peak_rss_mb,
            spread(c, |t| t.peak_rss_kb as f64 * 1024.0 / 1e6),
        );
    }
    if let (Some(g), Some(p)) = (
        cold.iter().find(|c| c.label == "gate"),
        cold.iter().find(|c| c.label == "powertools"),
    ) {
        println!(
            "| **gate / Powertools** | **{:.3}x** | **{:.2}x** | **{:.2}x** |",
            g.init_ms / p.init_ms,
            g.batch_ms / p.batch_ms,
            g.peak_rss_mb / p.peak_rss_mb
        );
    }
}

/// The priced rows: naive and the gate at 128 MB, Powertools and the fair peer each at the
/// smallest measured memory whose batch of new events takes at most 10 % longer than at its
/// fastest size (the fastest, not the largest: on a shared machine one size's run can be slow for
/// reasons of its own).
fn cost_rows(
    runs: &[cost::CostRun],
    sizes: &BTreeMap<String, usize>,
    duplicate_rate: f64,
) -> Vec<cost::CostRow> {
    let largest = |kind: &str| {
        sizes
            .iter()
            .filter(|(k, _)| k.starts_with(kind))
            .map(|(_, v)| *v)
            .max()
            .unwrap_or(0)
    };
    let mut rows = Vec::new();
    for kind in ["naive", "gate"] {
        if let Some(r) = runs
            .iter()
            .find(|r| r.handler == kind && r.memory_mb == 128)
        {
            rows.push(cost::row(r, largest(kind), duplicate_rate));
        }
    }
    for kind in ["powertools", "fair-peer"] {
        let pt: Vec<&cost::CostRun> = runs.iter().filter(|r| r.handler == kind).collect();
        let fastest = pt
            .iter()
            .map(|r| r.new_batch_ms)
            .fold(f64::INFINITY, f64::min);
        if let Some(chosen) = pt
            .iter()
            .filter(|r| r.new_batch_ms <= 1.1 * fastest)
            .min_by_key(|r| r.memory_mb)
        {
            rows.push(cost::row(chosen, largest(kind), duplicate_rate));
        }
    }
    rows
}

fn print_cost(
    runs: &[cost::CostRun],
    rows: &[cost::CostRow],
    sizes: &BTreeMap<String, usize>,
    duplicate_rate: f64,
) {
    let p = &cost::PRICES;
    println!(
        "\nMeasured per batch of 10 (medians; each function with the CPU share of its memory; moto behind a 5 ms latency floor; terminal simulator):\n"
    );
    println!("| handler | memory | new: duration (lowest-highest) / billed / CPU | duplicates: duration (lowest-highest) / billed / CPU | DynamoDB requests per new event / per duplicate | peak RSS |");
    println!("| --- | ---: | ---: | ---: | --- | ---: |");
    let ops = |m: &BTreeMap<String, f64>| {
        m.iter()
            .map(|(k, v)| format!("{v:.2} {k}"))
            .collect::<Vec<_>>()
            .join(" + ")
    };
    for r in runs {
        println!(
            "| {} | {} MB | {:.1} ({:.0}-{:.0}) / {:.0} / {:.1} ms | {:.1} ({:.0}-{:.0}) / {:.0} / {:.1} ms | {} / {} | {:.1} MB |",
            r.handler,
            r.memory_mb,
            r.new_batch_ms,
            r.new_batch_range_ms.0,
            r.new_batch_range_ms.1,
            r.new_billed_ms,
            r.new_cpu_ms,
            r.dup_batch_ms,
            r.dup_batch_range_ms.0,
            r.dup_batch_range_ms.1,
            r.dup_billed_ms,
            r.dup_cpu_ms,
            ops(&r.calls_per_new),
            ops(&r.calls_per_dup),
            r.peak_rss_mb
        );
    }
    println!("\nLargest item written (bytes, DynamoDB's item size rules): {sizes:?}");
    println!(
        "\nDollars per million events at {:.0} % duplicates (Lambda arm64 ${}/GB-s, ${}/M requests, batches of 10; DynamoDB on-demand ${}/M WRU, ${}/M RRU; {} prices read {}):\n",
        duplicate_rate * 100.0,
        p.lambda_arm64_gb_s,
        p.lambda_requests_per_million,
        p.dynamodb_wru_per_million,
        p.dynamodb_rru_per_million,
        p.region,
        p.read_on
    );
    println!("| handler | memory | billed ms per new event / duplicate | WRU per new event / duplicate | Lambda duration | Lambda requests | DynamoDB | **total per million events** |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in rows {
        println!(
            "| {} | {} MB | {:.2} / {:.2} | {:.0} / {:.0} | ${:.3} | ${:.3} | ${:.3} | **${:.2}** |",
            r.handler,
            r.memory_mb,
            r.billed_ms_new,
            r.billed_ms_dup,
            r.units_new.wru,
            r.units_dup.wru,
            r.lambda_duration_usd,
            r.lambda_requests_usd,
            r.dynamodb_usd,
            r.total_usd
        );
    }
    let get = |k: &str| rows.iter().find(|r| r.handler == k);
    if let (Some(g), Some(p), Some(n)) = (get("gate"), get("powertools"), get("naive")) {
        println!(
            "\ngate / Powertools: {:.2}x; gate / naive: {:.2}x",
            g.total_usd / p.total_usd,
            g.total_usd / n.total_usd
        );
    }
    if let (Some(g), Some(f)) = (get("gate"), get("fair-peer")) {
        println!("gate / fair peer: {:.2}x", g.total_usd / f.total_usd);
    }
}

/// The side-by-side table of issue 24 item 2: each handler's total at each share of duplicates.
fn print_cost_side_by_side(by_rate: &[CostAt]) {
    let Some(first) = by_rate.first() else {
        return;
    };
    let rates: Vec<String> = by_rate
        .iter()
        .map(|c| format!("{:.0} %", c.duplicate_rate * 100.0))
        .collect();
    println!(
        "\nSide by side, one run ({} prices read {}), total per million events at {}:\n",
        cost::PRICES.region,
        cost::PRICES.read_on,
        rates.join(" / ")
    );
    println!(
        "| handler | memory | WRU per new event / duplicate | DynamoDB at {r} | Lambda at {r} | **total at {r}** |",
        r = rates.join(" / ")
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    let join = |f: &dyn Fn(&cost::CostRow) -> f64, handler: &str, bold: bool| {
        by_rate
            .iter()
            .filter_map(|c| c.rows.iter().find(|r| r.handler == handler))
            .map(|r| {
                if bold {
                    format!("${:.2}", f(r))
                } else {
                    format!("${:.3}", f(r))
                }
            })
            .collect::<Vec<_>>()
            .join(" / ")
    };
    for r in &first.rows {
        println!(
            "| {} | {} MB | {:.0} / {:.0} | {} | {} | **{}** |",
            r.handler,
            r.memory_mb,
            r.units_new.wru,
            r.units_dup.wru,
            join(&|x| x.dynamodb_usd, &r.handler, false),
            join(
                &|x| x.lambda_duration_usd + x.lambda_requests_usd,
                &r.handler,
                false
            ),
            join(&|x| x.total_usd, &r.handler, true),
        );
    }
    for c in by_rate {
        let get = |k: &str| c.rows.iter().find(|r| r.handler == k).map(|r| r.total_usd);
        if let Some(g) = get("gate") {
            let ratio = |k: &str| {
                get(k)
                    .map(|x| format!("{:.2}x", g / x))
                    .unwrap_or_else(|| "-".into())
            };
            println!(
                "at {:.0} %: gate / fair peer {}, gate / Powertools {}",
                c.duplicate_rate * 100.0,
                ratio("fair-peer"),
                ratio("powertools")
            );
        }
    }
}

/// The capacity model against the simulator: the run and the deployments around it.
fn capacity_runs() -> Result<Vec<sim::sustained::SustainedReport>, String> {
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

fn print_capacity(runs: &[sim::sustained::SustainedReport]) {
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

/// The naive handler as a Lambda function (`--serve-naive-lambda`).
async fn serve_naive_lambda() -> Result<(), String> {
    use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
    use lambda_runtime::{service_fn, LambdaEvent};
    let var = |k: &str| std::env::var(k).map_err(|_| format!("{k} is not set"));
    let client = counter::dynamo_client(&var("AWS_ENDPOINT_URL")?, &Default::default()).await;
    let naive = handlers::Naive::new(client, var("BOOKINGS_TABLE")?, &var("TERMINAL_BASE_URL")?);
    let naive = &naive;
    lambda_runtime::run(service_fn(move |e: LambdaEvent<SqsEvent>| async move {
        naive.handle(e.payload).await;
        Ok::<_, lambda_runtime::Error>(SqsBatchResponse::default())
    }))
    .await
    .map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args = Args::parse();
    if args.serve_naive_lambda {
        return serve_naive_lambda().await;
    }
    if let Some(path) = &args.replot {
        #[derive(serde::Deserialize)]
        struct Saved {
            cold_start: Vec<coldstart::ColdStart>,
            cost: Vec<cost::CostRow>,
        }
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let saved: Saved =
            serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        let out = args.out.clone().unwrap_or_else(|| PathBuf::from("bench"));
        let png = out.join("cold-and-cost.png");
        plot::cold_and_cost_png(&png, &saved.cold_start, &saved.cost)?;
        eprintln!("bench: wrote {}", png.display());
        return Ok(());
    }
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
    let stamp = format!("b{}", std::process::id());
    if args.parts.iter().any(|p| p.trim() == "stores") {
        let url = args.database_url.as_deref().ok_or(
            "--parts stores needs --database-url or GATE_TEST_DATABASE_URL \
             (scripts/with-postgres.sh starts a throwaway server)",
        )?;
        let moto = procs::start_moto(&moto_command).await?;
        let plan = stores::Plan {
            events: args.store_events,
            duplicates: args.store_duplicates,
            warmup: args.warmup,
            runs: args.runs,
        };
        let runs = stores::run(url, &moto.endpoint, &stamp, &plan, &window()).await?;
        stores::print(&runs, &plan);
        let json = serde_json::to_vec_pretty(&serde_json::json!({
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "machine": machine(),
            "runs": runs,
        }))
        .map_err(|e| e.to_string())?;
        let path = out.join("stores.json");
        std::fs::write(&path, json).map_err(|e| e.to_string())?;
        eprintln!("bench: wrote {}", path.display());
        drop(moto);
        if args.parts.iter().all(|p| p.trim() == "stores") {
            return Ok(());
        }
    }
    let terminal_path = args
        .terminal_sim
        .clone()
        .or_else(|| procs::sibling("terminal-sim"))
        .ok_or("terminal-sim not found next to gate-bench: cargo build --release -p sim")?;
    let part = |p: &str| args.parts.iter().any(|x| x.trim() == p);
    let lambda = |l: &str| args.lambdas.iter().any(|x| x.trim() == l);
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
        cold_start: Vec::new(),
        ingress: None,
        binary_sizes: BTreeMap::new(),
        cost_runs: Vec::new(),
        cost: Vec::new(),
        cost_by_rate: Vec::new(),
        item_bytes: BTreeMap::new(),
        prices: cost::PRICES,
        capacity: Vec::new(),
        paired: Vec::new(),
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
            let (deliveries, warmup) = run_workload(&args, &tag, run, &window);
            unique = deliveries.iter().filter(|d| !d.duplicate).count();
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
        print_run_ratios(&results.runs);
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

    if part("paired") {
        for run in 0..args.runs {
            let tag = format!("{stamp}-p{run}");
            let (deliveries, warmup) = run_workload(&args, &tag, run, &window);
            eprintln!(
                "bench: paired run {} of {}: gate and floor, {} deliveries ...",
                run + 1,
                args.runs,
                deliveries.len()
            );
            let r = paired::run(&env, &tag, &warmup, &deliveries).await?;
            let s = r.summary();
            eprintln!(
                "bench:   gate {:.0} µs/delivery (p50 {:.0}), floor {:.0} (p50 {:.0}): {:.2}x; outcomes {:?} / {:?}",
                s.gate.mean_us, s.gate.p50_us, s.floor.mean_us, s.floor.p50_us, s.ratio_mean,
                r.gate.outcomes, r.floor.outcomes
            );
            results.paired.push(s);
        }
        paired::print(&results.paired, args.events, args.duplicate_rate);
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

    let consumer = args
        .consumer_bin
        .clone()
        .or_else(|| {
            let p = root.join("target/lambda/consumer/bootstrap");
            p.exists().then_some(p)
        })
        .or_else(|| procs::sibling("consumer"));
    if part("cold") {
        let consumer = consumer
            .clone()
            .ok_or("no consumer binary: cargo lambda build --release -p consumer")?;
        let client = counter::dynamo_client(&env.moto, &counter::CallRecorder::default()).await;
        let gate_tables = (format!("{stamp}-cold-idem"), format!("{stamp}-cold-book"));
        gate_dynamo::create_tables(&client, &gate_tables.0, &gate_tables.1)
            .await
            .map_err(|e| e.to_string())?;
        let pt_tables = (
            format!("{stamp}-coldpt-idem"),
            format!("{stamp}-coldpt-book"),
        );
        handlers::create_table(&client, &pt_tables.0, "id").await?;
        handlers::create_table(&client, &pt_tables.1, "source_event").await?;
        let specs = [
            coldstart::gate_spec(&consumer, &env, &gate_tables),
            coldstart::powertools_spec(&env, &pt_tables),
        ];
        for spec in specs.iter().filter(|s| lambda(&s.label)) {
            eprintln!("bench: cold starts of {} ...", spec.label);
            let cold = coldstart::run(
                spec,
                &format!("{stamp}-{}", spec.label),
                args.cold_trials,
                &window,
            )
            .await?;
            results.cold_start.push(cold);
        }
        print_cold(&results.cold_start);
    }
    if part("cost") {
        let consumer = consumer
            .clone()
            .ok_or("no consumer binary: cargo lambda build --release -p consumer")?;
        let mut command = moto_command.clone();
        if args.moto.is_none() {
            command.push("--latency-ms".into());
            command.push(args.cost_store_latency_ms.to_string().into());
        }
        let slow = procs::start_moto(&command).await?;
        eprintln!(
            "bench: cost: moto with a {} ms latency floor at {} (pid {})",
            args.cost_store_latency_ms,
            slow.endpoint,
            slow.child.pid()
        );
        let cost_env = Env {
            moto: slow.endpoint.clone(),
            ..env.clone()
        };
        let mut plan: Vec<(&str, u32)> = vec![("naive", 128), ("gate", 128), ("gate", 1769)];
        for m in &args.powertools_memory {
            plan.push(("powertools", *m));
            plan.push(("fair-peer", *m));
        }
        for (kind, memory) in plan.into_iter().filter(|(k, _)| lambda(k)) {
            eprintln!("bench: cost: {kind} at {memory} MB ...");
            let (run, sizes) = cost::measure(
                kind,
                &cost_env,
                &consumer,
                &format!("{stamp}-cost-{kind}-{memory}"),
                memory,
                args.cost_batches,
                &window,
            )
            .await?;
            eprintln!(
                "bench:   new batch {:.1} ms (CPU {:.1} ms), duplicates {:.1} ms, calls {:?} / {:?}",
                run.new_batch_ms,
                run.new_cpu_ms,
                run.dup_batch_ms,
                run.calls_per_new,
                run.calls_per_dup
            );
            for (k, v) in sizes {
                let e = results.item_bytes.entry(k).or_insert(0);
                *e = (*e).max(v);
            }
            results.cost_runs.push(run);
        }
        drop(slow);
        results.cost = cost_rows(&results.cost_runs, &results.item_bytes, args.duplicate_rate);
        print_cost(
            &results.cost_runs,
            &results.cost,
            &results.item_bytes,
            args.duplicate_rate,
        );
        results.cost_by_rate = args
            .cost_duplicate_rates
            .iter()
            .map(|rate| CostAt {
                duplicate_rate: *rate,
                rows: cost_rows(&results.cost_runs, &results.item_bytes, *rate),
            })
            .collect();
        print_cost_side_by_side(&results.cost_by_rate);
    }
    if part("capacity") {
        results.capacity = capacity_runs()?;
        print_capacity(&results.capacity);
    }
    if !results.cold_start.is_empty() && !results.cost.is_empty() {
        let png = out.join("cold-and-cost.png");
        plot::cold_and_cost_png(&png, &results.cold_start, &results.cost)?;
        eprintln!("bench: wrote {}", png.display());
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
