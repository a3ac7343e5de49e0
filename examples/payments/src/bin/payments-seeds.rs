//! The payments scenario (`payments::scenario`) over many seeds, with figures: the benchmark of
//! the exactly-once proof (`make test` runs 1,000 seeds; this runs as many as you ask).
//!
//! `cargo run --release -p payments --features testkit --bin payments-seeds -- [SEEDS] [FIRST]`
//! (default 10000 seeds from 0). Prints the totals; exits 1 if any
//! seed had a violation (each is printed with its seed: run it alone to replay it).

use std::time::Instant;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>());
    let (seeds, first) = match (args.next(), args.next()) {
        (None, _) => (10_000, 0),
        (Some(Ok(n)), None) => (n, 0),
        (Some(Ok(n)), Some(Ok(f))) => (n, f),
        _ => {
            eprintln!("usage: payments-seeds [SEEDS] [FIRST]");
            return std::process::ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let (mut bad, mut charges, mut deliveries, mut reconciled) = (0u64, 0usize, 0usize, 0usize);
    let (mut crashes, mut echoes, mut stalls) = (0usize, 0usize, 0usize);
    for r in payments::scenario::run_seeds(first..first + seeds, 8).await {
        let seed = r.seed;
        if !r.violations.is_empty() {
            bad += 1;
            println!("seed {seed}: {:?}", r.violations);
        }
        charges += r.effects.values().map(Vec::len).sum::<usize>();
        deliveries += r.deliveries;
        reconciled += r.reconciled;
        crashes += r.faults.crashes;
        echoes += r.faults.echoes;
        stalls += r.faults.stalls;
    }
    println!(
        "seeds {seeds} (from {first}): {bad} with violations; charges {charges}, deliveries \
         {deliveries}, reconciled {reconciled}; store faults: crashes {crashes}, echoes {echoes}, \
         stalls {stalls}; {:.1} s, {:.2} ms per seed",
        started.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64() * 1_000.0 / seeds.max(1) as f64
    );
    if bad == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
