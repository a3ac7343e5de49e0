//! Over 600 lines: the command line of every subcommand (replay, compare, check, recovery,
//! bench-replay, ...) and the printing of its figures; the work of each lives in the library.
//!
//! `sim`: replay scenarios through the gate or the naive handler.
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use sim::replay::{self, HandlerKind, ReplayOptions};
use sim::report;
use sim::scenario::Scenario;
use sim::stores::{self, StoreKind};

#[derive(Parser)]
#[command(
    name = "sim",
    about = "The exactly-once gate's outside world: replays and scenarios"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
        /// `--sweep-interval-s 60 --min-age-s 120` is the reconciler before issue 24).
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
fn embedded_scenarios_help() -> String {
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

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let help = embedded_scenarios_help();
    let matches = Cli::command()
        .mut_subcommand("replay", |c| c.after_help(help.clone()))
        .mut_subcommand("compare", |c| c.after_help(help.clone()))
        .get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Replay {
            scenario,
            naive,
            json,
            store,
            endpoint,
            database_url,
            plot,
        } => {
            let scenario = Scenario::load(&scenario).map_err(|e| e.to_string())?;
            let handler = if naive {
                HandlerKind::Naive
            } else {
                HandlerKind::Gated
            };
            let store = if naive {
                None
            } else {
                Some(stores::build_at(store, endpoint.as_deref(), database_url.as_deref()).await?)
            };
            let r = replay::run(&scenario, ReplayOptions { handler, store }).await?;
            if let (Some(path), Some(signals)) = (&plot, &r.signals) {
                let title = format!("{}: the signals and the alarms that fired", r.scenario);
                sim::plot::signals_png(path, &title, signals)?;
                eprintln!("plot written to {}", path.display());
            }
            if json {
                println!("{}", serde_json::to_string(&r).map_err(|e| e.to_string())?);
            } else {
                print!("{}", report::render(&r));
            }
        }
        Command::Check {
            seed,
            seeds,
            first,
            list,
            integration,
            ..
        } if integration != "truck-slot" => {
            check_integration(&integration, seed, seeds, first, list).await?
        }
        Command::Check {
            seed,
            seeds,
            first,
            jobs,
            trace,
            list,
            ..
        } => check(seed, seeds, first, jobs, trace, list)?,
        Command::SampleEvents { from, out, now } => {
            let now_ms = match now {
                Some(t) => chrono::DateTime::parse_from_rfc3339(&t)
                    .map_err(|e| format!("--now {t:?} is not RFC 3339: {e}"))?
                    .timestamp_millis(),
                None => chrono::Utc::now().timestamp_millis(),
            };
            let written =
                sim::sample_events::date_dir(&from, &out, now_ms).map_err(|e| e.to_string())?;
            for file in written {
                println!("{}", file.display());
            }
        }
        Command::SignWebhook {
            body_file,
            secrets,
            id,
            timestamp,
            event,
        } => print!(
            "{}",
            sign_webhook(&body_file, &secrets, id, timestamp, event)?
        ),
        Command::Alarms { json } => alarms(json)?,
        Command::Recovery {
            scenario,
            json,
            sweep_interval_s,
            min_age_s,
        } => {
            let mut scenario = Scenario::load(&scenario).map_err(|e| e.to_string())?;
            if let Some(r) = scenario.reconciler.as_mut() {
                r.sweep_interval_s = sweep_interval_s.unwrap_or(r.sweep_interval_s).max(1);
                r.min_age_s = min_age_s.unwrap_or(r.min_age_s).max(0);
            }
            let r = replay::run(&scenario, ReplayOptions::gated()).await?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string(&r.recoveries).map_err(|e| e.to_string())?
                );
            } else {
                print!("{}", sim::recovery::render(&scenario.name, &r.recoveries));
                println!(
                    "slots {}, TMS bookings {}, containers with extra slots {}, duplicates {}, \
                     still in_flight {}, reconciled {}, taken over {}, oldest in_flight max {} s",
                    r.slots_issued,
                    r.tms_bookings,
                    r.containers_with_extra_slots,
                    r.duplicates_suppressed,
                    r.still_in_flight,
                    r.reconciled,
                    r.taken_over,
                    r.signals
                        .as_ref()
                        .map_or(0, |s| s.max_oldest_in_flight_age_s)
                );
            }
            let unfinished = sim::recovery::distribution(&r.recoveries).unfinished;
            if unfinished > 0 {
                return Err(format!("{unfinished} crash(es) never finished"));
            }
        }
        Command::BenchReplay {
            days,
            volumes,
            runs,
            json,
        } => {
            let rows = sim::bench_replay::run(days, &volumes, runs).await?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string(&rows).map_err(|e| e.to_string())?
                );
            } else {
                print!("{}", sim::bench_replay::render(&rows));
            }
        }
        Command::Sustained {
            rate,
            duration_s,
            duplicate_rate,
            maximum_concurrency,
            batch_size,
            batching_window_ms,
            record_concurrency,
            terminal_latency_ms,
            terminal_concurrency,
            store_latency_ms,
            seed,
            json,
        } => {
            let config = sim::sustained::SustainedConfig {
                rate_per_s: rate,
                duration_s,
                duplicate_rate,
                maximum_concurrency,
                batch_size,
                batching_window_ms,
                record_concurrency,
                terminal_latency_ms,
                terminal_concurrency,
                store_latency_ms,
                seed,
                ..Default::default()
            };
            let r = sim::sustained::run_blocking(config)?;
            if json {
                println!("{}", serde_json::to_string(&r).map_err(|e| e.to_string())?);
            } else {
                print!("{}", sim::sustained::render(&r));
            }
            if !r.violations.is_empty() {
                return Err(format!("{} violation(s)", r.violations.len()));
            }
        }
        Command::Compare { scenario, json } => {
            let scenario = Scenario::load(&scenario).map_err(|e| e.to_string())?;
            let naive = replay::run(&scenario, ReplayOptions::naive()).await?;
            let gated = replay::run(&scenario, ReplayOptions::gated()).await?;
            if json {
                let both = serde_json::json!({ "naive": naive, "gated": gated });
                println!("{both}");
            } else {
                print!("{}", report::render_side_by_side(&naive, &gated));
            }
        }
    }
    Ok(())
}

/// `sim sign-webhook`: the headers (or the HTTP API event) of `body_file` signed with `secrets`.
fn sign_webhook(
    body_file: &std::path::Path,
    secrets: &[String],
    id: Option<String>,
    timestamp: Option<i64>,
    event: bool,
) -> Result<String, String> {
    use ingress::event::SignedWebhook;
    use ingress::signature::{valid_webhook_id, WebhookSecret};
    let body = std::fs::read(body_file)
        .map_err(|e| format!("cannot read {}: {e}", body_file.display()))?;
    let body = String::from_utf8(body)
        .map_err(|_| format!("{} is not UTF-8 text", body_file.display()))?;
    let secrets = secrets
        .iter()
        .filter(|s| !s.trim().is_empty())
        .map(|s| WebhookSecret::parse(s).map_err(|e| format!("--secret: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let id = id.unwrap_or_else(|| format!("msg_{}", uuid::Uuid::new_v4().simple()));
    if !valid_webhook_id(&id) {
        return Err(format!(
            "--id {id:?}: 1 to 256 characters of A-Z, a-z, 0-9, '_', '-', '.', ':'"
        ));
    }
    let now_ms = chrono::Utc::now().timestamp_millis();
    let timestamp = timestamp.unwrap_or(now_ms / 1000);
    let signed = SignedWebhook::sign(&secrets, &id, timestamp, &body);
    if event {
        let event = signed.http_api_event(timestamp.saturating_mul(1000), "sim-sign-webhook");
        return serde_json::to_string_pretty(&event)
            .map(|t| t + "\n")
            .map_err(|e| e.to_string());
    }
    Ok(signed
        .headers()
        .iter()
        .map(|(name, value)| format!("{name}: {value}\n"))
        .collect())
}

/// `sim alarms`: the false pages a month at 1 % and 3 % duplicates for 5 to 5,000 notifications an
/// hour, and the chance one period catches a third of the notifications sent twice.
fn alarms(json: bool) -> Result<(), String> {
    use gate::signals::RATIO_ALARMS;
    use sim::alarm_stats::{detection_probability, false_page_table};
    let volumes = [5.0, 10.0, 100.0, 1_000.0, 5_000.0];
    let rows = false_page_table(&RATIO_ALARMS, &volumes, &[0.01, 0.03]);
    if json {
        println!(
            "{}",
            serde_json::to_string(&rows).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    println!(
        "{:<28} {:>7} {:>5} {:>8} {:>12} {:>14}",
        "alarm", "per hour", "dup", "records", "P(period)", "pages/month"
    );
    for r in &rows {
        println!(
            "{:<28} {:>7} {:>4.0}% {:>8} {:>12.3e} {:>14.3e}",
            r.alarm,
            r.per_hour,
            r.duplicate_rate * 100.0,
            r.records_per_period,
            r.period_breach_probability,
            r.pages_per_month
        );
    }
    println!();
    println!("a third of the notifications sent twice for a whole period: chance it breaches");
    for a in RATIO_ALARMS
        .iter()
        .filter(|a| a.name.starts_with("DuplicateRatioHigh"))
    {
        let cells: Vec<String> = volumes
            .iter()
            .map(|v| format!("{v}/h {:.2}", detection_probability(a, *v, 1.0 / 3.0)))
            .collect();
        println!("  {:<28} {}", a.name, cells.join("  "));
    }
    Ok(())
}

/// `sim check --integration NAME`: the example's scenario (`payments::scenario`,
/// `job_client::scenario`) for one seed or many, eight at a time, with the test kit's
/// [`Totals`](gate_testkit::Totals); an error if any seed had a violation.
async fn check_integration(
    name: &str,
    seed: Option<u64>,
    seeds: Option<u64>,
    first: u64,
    list: usize,
) -> Result<(), String> {
    let range = match seed {
        Some(seed) => seed..seed + 1,
        None => first..first + seeds.unwrap_or(1_000),
    };
    let started = std::time::Instant::now();
    let reports = match name {
        "payments" => payments::scenario::run_seeds(range.clone(), 8).await,
        "job-client" => job_client::scenario::run_seeds(range.clone(), 8).await,
        other => return Err(format!("no harness scenario for the integration {other:?}")),
    };
    let t = gate_testkit::Totals::of(&reports);
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{name} runs: {} (seeds {}..{}) in {secs:.1} s, {:.1} ms a run",
        t.seeds,
        range.start,
        range.end,
        secs * 1_000.0 / t.seeds.max(1) as f64
    );
    println!(
        "totals: {} deliveries, {} effects made, {} committed, {} cases to a person, {} \
         committed by the reconciler",
        t.deliveries, t.effects, t.committed, t.to_a_person, t.reconciled
    );
    println!(
        "store faults: {} workers crashed, {} writes echoed, {} workers stalled past their lease",
        t.crashes, t.echoes, t.stalls
    );
    println!(
        "queue and clocks: {} failed messages lost (the reconciler finished them), clock skew up \
         to {} ms",
        t.lost, t.max_skew_ms
    );
    println!("violations: {} run(s)", t.failures.len());
    for (seed, vs) in t.failures.iter().take(list) {
        for v in vs.iter().take(3) {
            println!("  seed {seed}: {v}");
        }
        println!(
            "  replay: cargo run --release -p sim -- check --integration {name} --seed {seed}"
        );
    }
    match t.failures.len() {
        0 => Ok(()),
        n => Err(format!("{n} run(s) violated an invariant")),
    }
}

/// `sim check`: one seed with its trace, or many seeds with a summary.
fn check(
    seed: Option<u64>,
    seeds: Option<u64>,
    first: u64,
    jobs: Option<usize>,
    full_trace: bool,
    list: usize,
) -> Result<(), String> {
    use sim::dst;
    if let Some(seed) = seed {
        let r = dst::run_seed(seed, true);
        let lines = if full_trace {
            r.trace.clone()
        } else {
            r.short_trace(120)
        };
        if full_trace || !r.violations.is_empty() {
            for line in lines {
                println!("{line}");
            }
        }
        println!(
            "seed {seed}: {} events; faults injected {:?}",
            r.stats.steps, r.faults
        );
        println!("stats {:?}", r.stats);
        if r.violations.is_empty() {
            println!("seed {seed}: ok");
            return Ok(());
        }
        for v in &r.violations {
            println!("VIOLATION seed {seed}: {v}");
        }
        return Err(format!(
            "seed {seed} violated {} invariant(s)",
            r.violations.len()
        ));
    }
    let count = seeds.unwrap_or(1_000);
    let jobs = jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(std::num::NonZeroUsize::get)
            .unwrap_or(1)
    });
    let started = std::time::Instant::now();
    let summary = dst::run_seeds(first, count, jobs);
    println!(
        "schedules run: {} (seeds {first}..{}) in {:.1} s on {jobs} thread(s)",
        summary.schedules,
        first + count,
        started.elapsed().as_secs_f64()
    );
    println!("faults injected by kind:");
    for (kind, n) in &summary.faults {
        println!("  {kind:<40} {n}");
    }
    let s = &summary.stats;
    println!(
        "totals: {} messages, {} deliveries, {} invocations, {} reconciler runs, {} tasks died, \
         {} slots, {} committed, {} manual items, {} dead-lettered",
        s.messages,
        s.deliveries,
        s.invocations,
        s.reconciler_runs,
        s.crashes,
        s.slots,
        s.committed,
        s.manual_items,
        s.dead_lettered
    );
    println!(
        "liveness: the longest a record stayed in_flight after the faults healed used {:.1} % of \
         its schedule's bound",
        s.liveness_bound_used_permille as f64 / 10.0
    );
    println!("violations: {} schedule(s)", summary.failures.len());
    let mut kinds: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for (seed, vs) in &summary.failures {
        for v in vs {
            // The violation's words with keys, ids and figures shown as `_`.
            let kind: Vec<&str> = v
                .split_whitespace()
                .map(|w| {
                    if w.chars().any(|c| c.is_ascii_digit()) || w.contains('"') {
                        "_"
                    } else {
                        w
                    }
                })
                .take(12)
                .collect();
            kinds.entry(kind.join(" ")).or_insert((0, *seed)).0 += 1;
        }
    }
    for (kind, (n, seed)) in &kinds {
        println!("  {n:>6} x {kind} (first: seed {seed})");
    }
    for (seed, vs) in summary.failures.iter().take(list) {
        for v in vs.iter().take(3) {
            println!("  seed {seed}: {v}");
        }
        println!("  replay: cargo run --release -p sim -- check --seed {seed}");
    }
    if summary.failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} schedule(s) violated an invariant",
            summary.failures.len()
        ))
    }
}
