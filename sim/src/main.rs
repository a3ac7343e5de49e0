//! `sim`: replay scenarios through the gate or the naive handler, run the deterministic
//! simulation, and print their figures. The command line is `cli`; the work of each subcommand
//! lives in the library.

mod cli;

use clap::{CommandFactory, FromArgMatches};
use cli::{embedded_scenarios_help, Cli, Command};
use sim::replay::{self, HandlerKind, ReplayOptions};
use sim::report;
use sim::scenario::Scenario;
use sim::stores;

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
