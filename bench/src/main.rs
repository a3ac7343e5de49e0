//! `gate-bench`: the gate's cost per event side by side with the naive handler and with
//! Powertools for AWS Lambda (Python), in one run against one moto server and the terminal
//! simulator, each its own process. `docs/BENCHMARKS.md` has the figures, the commands that
//! produced them and what each part measures.
//!
//! The parts (`--parts`), each in its module: `compare` (the same deliveries through every
//! handler, run by run; `compare`), `breakdown`, `batch`, `cold` (cold start and footprint,
//! `coldstart`), `ingress`, `cost` (dollars per million events; `cost`, `cold_and_cost`),
//! `capacity` (the model against the simulator's sustained replay), and, not by default,
//! `stores` (PostgreSQL against DynamoDB) and `paired` (the gate against its floor, delivery by
//! delivery). The handler `floor` is the gate's DynamoDB requests and terminal call in a bare
//! loop. This file is the orchestration; `args` the command line; `results` what is written.
//!
//! Writes `results.json` (figures without the raw latencies), `latency.png` and
//! `cold-and-cost.png` to `--out`.

mod args;
mod batch;
mod breakdown;
mod capacity;
mod cold_and_cost;
mod coldstart;
mod compare;
mod cost;
mod counter;
mod handlers;
mod ingress;
mod paired;
mod pg_wire;
mod plot;
mod procs;
mod results;
mod stats;
mod stores;
mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Parser;

use args::{kinds, run_workload, Args};
use capacity::{capacity_runs, print_capacity};
use cold_and_cost::{cost_rows, print_cold, print_cost, print_cost_side_by_side, CostAt};
use compare::{metric, print_run_ratios, print_table, Summary, METRICS};
use handlers::{Env, Kind};
use results::{machine, Results};
use stats::median;

/// Tomorrow 08:00-10:00 UTC, RFC 3339: a window that has not ended.
fn window() -> (String, String) {
    let day = chrono::Utc::now().date_naive() + chrono::Days::new(1);
    (format!("{day}T08:00:00Z"), format!("{day}T10:00:00Z"))
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
