//! Deterministic simulation testing of the gate, in the style of FoundationDB and TigerBeetle:
//! one seed drives a whole world (several consumer workers, the reconciler, the terminal
//! simulator's core in process, the real [`gate::store::memory::MemoryStore`], an SQS queue with a
//! DLQ) on simulated time, injects faults at every step boundary, runs it to quiescence and
//! checks the gate's promises. Same seed, same schedule, same result:
//! `cargo run --release -p sim -- check --seed S` replays one schedule with its trace;
//! `check --seeds N` runs many and prints schedules run, faults injected by kind and violations.
//! docs/SIMULATION.md ("Deterministic simulation") lists the faults and the invariants.
//!
//! * [`schedule`]: what a seed draws (bodies from `bodies`, copies, deployment, the `profile`);
//! * `shared`: the seeded RNG, parked port calls, fault bookkeeping and the trace;
//! * `store`, `ports`: the store, terminal and manual-queue decorators that park and inject
//!   faults, [`CoreTerminal`] (the terminal core as a `SlotTerminal`) and skewed clocks;
//! * `pg_faults`, `outages`: the store's PostgreSQL semantics, a failover and a stalled store;
//! * [`crate::sqs`] (shared with the replay): SQS Standard with visibility timeouts and a DLQ;
//! * `driver`: the executor and event loop; `observe`: the store's history as the run goes;
//! * `check`: the invariants at the end (documented there); `identity`: no mismatch for a body
//!   whose fingerprint every record of its event carried.

mod bodies;
mod check;
mod driver;
mod identity;
mod observe;
mod outages;
mod pg_faults;
mod ports;
mod profile;
mod results;
pub mod schedule;
mod shared;
mod store;

use std::collections::BTreeMap;

pub use driver::run_seed;
pub use ports::CoreTerminal;
pub use profile::FaultProfile;
pub use results::{RunResult, Stats, Summary};

/// Runs seeds `first..first + count` on `jobs` threads (each seed is independent and
/// deterministic) and sums them up.
pub fn run_seeds(first: u64, count: u64, jobs: usize) -> Summary {
    let jobs = jobs.max(1) as u64;
    let mut total = Summary::default();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..jobs)
            .map(|j| {
                s.spawn(move || {
                    let mut sum = Summary::default();
                    let mut seed = first + j;
                    while seed < first + count {
                        sum.add(&run_seed_caught(seed));
                        seed += jobs;
                    }
                    sum
                })
            })
            .collect();
        for h in handles {
            match h.join() {
                Ok(sum) => total.merge(sum),
                Err(_) => total
                    .failures
                    .push((u64::MAX, vec!["a worker thread panicked".into()])),
            }
        }
    });
    total
}

/// [`run_seed`] without a trace; a panic in the world is reported as the seed's violation.
pub fn run_seed_caught(seed: u64) -> RunResult {
    std::panic::catch_unwind(|| run_seed(seed, false)).unwrap_or_else(|e| {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        RunResult {
            seed,
            violations: vec![format!("panicked: {msg}")],
            faults: BTreeMap::new(),
            trace: Vec::new(),
            stats: Stats::default(),
        }
    })
}
