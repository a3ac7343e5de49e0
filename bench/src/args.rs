//! `gate-bench`'s command line, the handlers it names, and the workload each run measures.

use std::path::PathBuf;

use clap::Parser;

use crate::handlers::Kind;
use crate::workload;

/// The gate, the naive handler and Powertools side by side on one moto server.
#[derive(Debug, Parser)]
#[command(name = "gate-bench")]
pub(crate) struct Args {
    /// Deliveries per handler and run (moto serves roughly 200-400 requests/s: 2,000 take about
    /// a minute per run for all three).
    #[arg(long, default_value_t = 2000)]
    pub events: usize,
    /// Share of deliveries that are redeliveries of an earlier event.
    #[arg(long, default_value_t = 0.03)]
    pub duplicate_rate: f64,
    /// Runs of the three-way comparison (medians are over runs).
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// Unmeasured deliveries before each handler's measured loop (connections, caches).
    #[arg(long, default_value_t = 50)]
    pub warmup: usize,
    /// The terminal simulator's fixed latency per slot claim, ms.
    #[arg(long, default_value_t = 2)]
    pub terminal_latency_ms: u64,
    /// Pairs (one record, a batch of 10) per store in the batch measurement.
    #[arg(long, default_value_t = 20)]
    pub batch_trials: usize,
    /// The latency model's delay per DynamoDB call, ms (batch measurement).
    #[arg(long, default_value_t = 5)]
    pub store_latency_ms: u64,
    /// New events per configuration in the CPU breakdown.
    #[arg(long, default_value_t = 500)]
    pub breakdown_events: usize,
    /// Cold starts of the consumer binary.
    #[arg(long, default_value_t = 10)]
    pub cold_trials: usize,
    /// The consumer binary for the cold start (default: `target/lambda/consumer/bootstrap`, else
    /// `consumer` next to this binary).
    #[arg(long)]
    pub consumer_bin: Option<PathBuf>,
    /// Requests per run of the ingress measurement (`--runs` runs).
    #[arg(long, default_value_t = 1000)]
    pub ingress_requests: usize,
    /// The ingress binary for its cold start (default: `target/lambda/ingress/bootstrap`, else
    /// `ingress` next to this binary; none: no cold start).
    #[arg(long)]
    pub ingress_bin: Option<PathBuf>,
    /// `LABEL=PATH` of a binary whose size to report (repeatable), e.g.
    /// `x86_64=target/lambda-x86_64/consumer/bootstrap`.
    #[arg(long = "binary")]
    pub binaries: Vec<String>,
    /// Parts to run: `compare`, `breakdown`, `batch`, `cold`, `ingress`, `cost`, `capacity`,
    /// and, not by default, `stores` (it needs `--database-url`) and `paired` (the gate and its
    /// floor alternating delivery by delivery, `--runs` x `--events`) (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "compare,breakdown,batch,cold,ingress,cost,capacity"
    )]
    pub parts: Vec<String>,
    /// Handlers in the comparison (comma-separated): `naive`, `gate`, `powertools`, `floor`, and
    /// the floor with other client settings: `floor-nostall` (stalled-stream protection off),
    /// `floor-noreuse` (no idle connection kept to DynamoDB); `gate-1thread` and `floor-1thread`
    /// (each on a current-thread runtime of its own, as the functions run).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "naive,gate,powertools,floor"
    )]
    pub handlers: Vec<String>,
    /// Batches of 10 new events (and as many of duplicates) per handler and memory size in the
    /// cost measurement.
    #[arg(long, default_value_t = 10)]
    pub cost_batches: usize,
    /// Memory sizes (MB) at which Powertools is measured for its cost; the smallest whose batch
    /// of new events takes at most 10 % longer than at the fastest size is priced.
    #[arg(long, value_delimiter = ',', default_value = "128,256,512,1024,1769")]
    pub powertools_memory: Vec<u32>,
    /// The latency floor of moto in the cost measurement, ms (a DynamoDB call).
    #[arg(long, default_value_t = 5)]
    pub cost_store_latency_ms: u64,
    /// The functions measured in `cold` (gate, powertools) and `cost` (naive, gate, powertools,
    /// fair-peer: Powertools with its booking and its completion in one transaction).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "naive,gate,powertools,fair-peer"
    )]
    pub lambdas: Vec<String>,
    /// Shares of duplicates at which `cost` prices every handler, side by side.
    #[arg(long, value_delimiter = ',', default_value = "0.01,0.03")]
    pub cost_duplicate_rates: Vec<f64>,
    /// Run as the naive handler's Lambda function (the cost measurement starts this binary so
    /// under its fake Runtime API); reads BOOKINGS_TABLE, TERMINAL_BASE_URL, AWS_ENDPOINT_URL.
    #[arg(long, hide = true)]
    pub serve_naive_lambda: bool,
    /// Draw `cold-and-cost.png` into `--out` from a `results.json` of an earlier run (its
    /// `cold_start` and `cost`), measuring nothing.
    #[arg(long, value_name = "results.json")]
    pub replot: Option<PathBuf>,
    /// A moto_server executable to use as it is. By default the harness runs
    /// `bench/moto_server.py` (moto with TransactWriteItems in O(items touched), see there) with
    /// `--python`.
    #[arg(long)]
    pub moto: Option<PathBuf>,
    /// Python with Powertools (default `.venv/bin/python`).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// The terminal simulator binary (default `terminal-sim` next to this binary).
    #[arg(long)]
    pub terminal_sim: Option<PathBuf>,
    /// Where `latency.png` and `results.json` go (default `bench/`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Workload seed.
    #[arg(long, default_value_t = 8)]
    pub seed: u64,
    /// The PostgreSQL server of `--parts stores`, `postgresql://user@IP:PORT/db?sslmode=disable`
    /// (secret; `scripts/with-postgres.sh` starts a throwaway one and sets
    /// GATE_TEST_DATABASE_URL). The harness works in a schema of its own and drops it.
    #[arg(long, env = "GATE_TEST_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// New events per store and run in `stores` (`--runs` runs).
    #[arg(long, default_value_t = 2000)]
    pub store_events: usize,
    /// Duplicates per store and run in `stores` (redeliveries of the first new events).
    #[arg(long, default_value_t = 500)]
    pub store_duplicates: usize,
}

/// The handlers `--handlers` names, in its order.
pub(crate) fn kinds(names: &[String]) -> Result<Vec<Kind>, String> {
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

/// Run `run`'s measured deliveries (`--events`, `--duplicate-rate`, seeded by `--seed` plus
/// the run) and its warm-up (`--warmup` new events), both tagged `tag`.
pub(crate) fn run_workload(
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
