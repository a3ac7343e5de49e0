//! `sim`'s command line: every subcommand with its arguments, and the embedded scenarios listed
//! under `replay --help` and `compare --help`.

use clap::{Parser, Subcommand};
use sim::stores::StoreKind;

#[derive(Parser)]
#[command(
    name = "sim",
    about = "The exactly-once gate's outside world: replays and scenarios"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Replay a scenario: a scenario file, or the name of an embedded one (listed below).
    Replay {
        /// Scenario file or embedded name.
        scenario: String,
        /// Run the incident's original handler instead of the gate.
        #[arg(long)]
        naive: bool,
        /// Print the report as one JSON object.
        #[arg(long)]
        json: bool,
        /// The idempotency store of the gated handler: in memory, DynamoDB (a fresh pair of
        /// tables `gate-replay-{epoch ms}-idempotency`/`-bookings` per run, left in place;
        /// without AWS_ACCESS_KEY_ID moto's dummy credentials, without AWS_REGION eu-west-1),
        /// or PostgreSQL (`--database-url`).
        #[arg(long, value_enum, default_value = "memory")]
        store: StoreKind,
        /// DynamoDB endpoint for `--store dynamodb`, e.g. a moto server `http://127.0.0.1:5000`
        /// (default: the SDK's, `AWS_ENDPOINT_URL` or the region's).
        #[arg(long)]
        endpoint: Option<String>,
        /// PostgreSQL connection string for `--store postgres` (a fresh schema
        /// `gate_replay_{epoch ms}` per run, migrated, left in place), e.g.
        /// `postgresql://gate@127.0.0.1:5432/gate?sslmode=disable` (without `sslmode` the
        /// store insists on `verify-full` TLS). Secret: read from GATE_DATABASE_URL when not
        /// given, never printed.
        #[arg(long, env = "GATE_DATABASE_URL", hide_env_values = true)]
        database_url: Option<String>,
        /// Draw each signal over simulated time, its threshold and the alarms' firings to this
        /// PNG (gated handler only).
        #[arg(long, value_name = "FILE.png", conflicts_with = "naive")]
        plot: Option<std::path::PathBuf>,
    },
    /// Replay a scenario with both handlers and print the reports side by side (a file, or the
    /// name of an embedded one, listed below).
    Compare {
        /// Scenario file or embedded name.
        #[arg(default_value = "monday-2025-06-09")]
        scenario: String,
        /// Print both reports as a JSON object `{naive, gated}`.
        #[arg(long)]
        json: bool,
    },
    /// The duplicate-ratio alarms' statistics: expected false pages a month on a healthy feed
    /// (binomial, `sim::alarm_stats`) and the chance a re-firing upstream breaches one period.
    Alarms {
        /// Print the rows as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Deterministic fault-injection simulation: `--seed S` replays one schedule and prints its
    /// trace on a violation; `--seeds N` runs N schedules and prints schedules run, faults
    /// injected by kind and violations. Exits non-zero on any violation.
    Check {
        /// Replay exactly this seed's schedule.
        #[arg(long, conflicts_with = "seeds")]
        seed: Option<u64>,
        /// Run this many seeds (from `--first`).
        #[arg(long)]
        seeds: Option<u64>,
        /// The first seed of `--seeds`.
        #[arg(long, default_value_t = 0)]
        first: u64,
        /// Threads for `--seeds` (default: the machine's cores).
        #[arg(long)]
        jobs: Option<usize>,
        /// With `--seed`: print the full trace (every step), even when the schedule passes.
        #[arg(long)]
        trace: bool,
        /// With `--seeds`: how many failing seeds to list.
        #[arg(long, default_value_t = 20)]
        list: usize,
        /// Which integration: `truck-slot` (the deterministic simulation above), `payments` or
        /// `job-client` (the example's scenario through the test kit's harness,
        /// `gate_testkit::Harness`: skewed clocks, visibility timeouts and lost messages, its
        /// exactly-once and liveness checkers and the scenario's own, on the kit's Idempotency-Key
        /// server shaped like the example's server; not the simulation's interleaving of
        /// concurrent workers; `--jobs` and `--trace` are the simulation's).
        #[arg(long, default_value = "truck-slot", value_parser = ["truck-slot", "payments", "job-client"])]
        integration: String,
    },
    /// Sustained-rate replay: the gate under a steady feed for minutes of simulated time (real
    /// `Gate::handle_batch`, the memory store behind a DynamoDB latency model, the terminal core
    /// with a fixed latency), checking the capacity model of docs/BENCHMARKS.md: no queue growth
    /// and the invariants of `check` that apply without faults. Exits non-zero on a violation.
    Sustained {
        /// Mean arrivals per simulated second (Poisson).
        #[arg(long, default_value_t = 100.0)]
        rate: f64,
        /// Simulated seconds of arrivals.
        #[arg(long, default_value_t = 600)]
        duration_s: u64,
        /// Share of deliveries that are redeliveries of an earlier notification.
        #[arg(long, default_value_t = 0.03)]
        duplicate_rate: f64,
        /// The event source mapping's ScalingConfig.MaximumConcurrency.
        #[arg(long, default_value_t = 5)]
        maximum_concurrency: usize,
        /// The event source mapping's BatchSize.
        #[arg(long, default_value_t = 10)]
        batch_size: usize,
        /// MaximumBatchingWindowInSeconds, in ms.
        #[arg(long, default_value_t = 0)]
        batching_window_ms: u64,
        /// The gate's RecordConcurrency (records of a batch at once).
        #[arg(long, default_value_t = 10)]
        record_concurrency: usize,
        /// Latency of one slot claim, ms.
        #[arg(long, default_value_t = 200)]
        terminal_latency_ms: u64,
        /// Claims the terminal serves at once (its limit; default none).
        #[arg(long)]
        terminal_concurrency: Option<usize>,
        /// Latency of one DynamoDB call, ms.
        #[arg(long, default_value_t = 5)]
        store_latency_ms: u64,
        /// Arrival seed.
        #[arg(long, default_value_t = 18)]
        seed: u64,
        /// Print the report as JSON (with the backlog every second).
        #[arg(long)]
        json: bool,
    },
    /// Sign a webhook body as Portbase's sender does (Standard Webhooks, `v1` HMAC-SHA256) and
    /// print the three headers (`webhook-id`, `webhook-timestamp`, `webhook-signature`), one per
    /// line for `curl -H @FILE`; with `--event`, the API Gateway HTTP API event for
    /// `cargo lambda invoke ingress --data-file`. The body is signed byte for byte as read: send
    /// it with `curl --data-binary @BODY_FILE`.
    SignWebhook {
        /// The body to sign (JSON, sent unchanged).
        body_file: std::path::PathBuf,
        /// A signing secret (`whsec_` + base64); repeat it to sign with several (a rotation).
        #[arg(
            long = "secret",
            env = "WEBHOOK_SIGNING_SECRET",
            value_delimiter = ' ',
            required = true,
            hide_env_values = true
        )]
        secrets: Vec<String>,
        /// The `webhook-id` (default: `msg_` and a random UUID); a retry sends the same id.
        #[arg(long)]
        id: Option<String>,
        /// The `webhook-timestamp`, epoch seconds (default: now).
        #[arg(long)]
        timestamp: Option<i64>,
        /// Print the API Gateway HTTP API event (payload 2.0) instead of the headers.
        #[arg(long)]
        event: bool,
    },
    /// The replay's wall time per simulated day at multiples of the forwarder's volume (243
    /// notifications a day, 2 % re-fired, six crashes after the claim, the reconciler on):
    /// medians over `--runs` runs. Prints figures, checks none (docs/BENCHMARKS.md section 8).
    BenchReplay {
        /// Simulated days per run.
        #[arg(long, default_value_t = 14)]
        days: u32,
        /// Multiples of the forwarder's volume, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
        volumes: Vec<u32>,
        /// Runs per volume (the median is reported).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Print the rows as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Crash to commit: replay a scenario through the gate (default `forwarder-recovery`: the
    /// forwarder's two months with crashes at every step and lost messages) and print, per crash
    /// step, how long each crashed notification's record took to be committed (or handed to a
    /// person): median, p99 and max, simulated seconds (docs/BENCHMARKS.md, "Recovery"). Fails
    /// if a crash's record is never finished.
    Recovery {
        /// Scenario file or embedded name.
        #[arg(default_value = "forwarder-recovery")]
        scenario: String,
        /// Print every crash as JSON instead.
        #[arg(long)]
        json: bool,
        /// Replace the scenario's reconciler: seconds between its sweeps (with `--min-age-s`:
        /// `--sweep-interval-s 60 --min-age-s 120` is the forwarder's first gate's).
        #[arg(long)]
        sweep_interval_s: Option<i64>,
        /// Replace the scenario's reconciler: the minimum age of a record it takes, seconds.
        #[arg(long)]
        min_age_s: Option<i64>,
    },
    /// Date the sample Lambda events for today: every window moves by whole days so the earliest
    /// starts tomorrow (UTC), md5OfBody is recomputed; the gate refuses a window that has ended
    /// or ends more than 366 days ahead, so the files in `events/` are not sent as written.
    SampleEvents {
        /// The directory of sample events.
        #[arg(long, default_value = "events")]
        from: std::path::PathBuf,
        /// Where the dated copies go (same file names).
        #[arg(long, default_value = "target/events")]
        out: std::path::PathBuf,
        /// Date them for this instant (RFC 3339) instead of now.
        #[arg(long)]
        now: Option<String>,
    },
}

/// The embedded scenarios, one per line with what each shows, for `replay --help` and
/// `compare --help` (from [`sim::scenarios::NAMES`], so the help cannot miss one).
pub(crate) fn embedded_scenarios_help() -> String {
    let width = sim::scenarios::NAMES
        .iter()
        .map(|(name, _)| name.len())
        .max()
        .unwrap_or(0);
    let mut help = String::from("Embedded scenarios:\n");
    for (name, what) in sim::scenarios::NAMES {
        help.push_str(&format!("  {name:<width$}  {what}\n"));
    }
    help
}
