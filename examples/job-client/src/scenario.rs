//! The exactly-once scenario of the job client (feature `testkit`), for its test
//! (`tests/exactly_once.rs`) and `cargo run --release -p sim -- check --integration job-client
//! --seeds N`: one run of the test kit's harness (`gate_testkit::Harness`) against the test
//! kit's Idempotency-Key server shaped like the job server (`POST /jobs` answers `201 {"id":
//! "JOB-000001"}`, a reused key with another body `409 idempotency_mismatch`, `GET
//! /jobs?idempotency_key=K` the job), with a third of the answers lost after the job was made
//! and one `POST` in ten failing first.
//!
//! The bodies: [`JOBS`] jobs, those in [`MISMATCHED`] also with another payload (a mismatch),
//! and one poison body. The harness delivers each 1 to 3 times, strands the first three jobs with
//! a worker that died after its reserve, crashes, echoes and stalls store writes, skews the
//! workers' clocks, redelivers failed messages after their visibility timeout or loses them, and
//! runs the reconciler; then [`expectation_violations`] adds this scenario's own checks to the
//! kit's safety and liveness invariants.

use std::sync::Arc;

use gate::clock::ManualClock;
use gate::manual::ManualReason;
use gate_testkit::{
    figure_misses, run_parallel, unexpected_manual_items, Faults, Harness, IdempotencyServer,
    MismatchAnswer, RunReport, ServerConfig, Target,
};
use serde_json::json;

use crate::JobClient;

/// 2030-01-07T08:00:00Z in epoch ms: a fixed, simulated start.
pub const T0: i64 = 1_893_916_800_000;
/// Jobs in each run.
pub const JOBS: usize = 24;
/// Jobs that also get a copy with another payload (a mismatch): 1 in 8.
pub const MISMATCHED: [usize; 3] = [5, 13, 21];
/// Bodies the parse rejects in each run.
pub const REJECTED: usize = 1;

/// Job `n`'s event; `changed`: with another payload.
pub fn job(n: usize, changed: bool) -> String {
    let payload = if changed {
        json!({"n": n, "priority": "high"})
    } else {
        json!({"n": n})
    };
    json!({"job_id": format!("J-{n}"), "payload": payload}).to_string()
}

/// Every body of a run, in order: the jobs, the mismatched copies, the poison body.
pub fn bodies() -> Vec<String> {
    (0..JOBS)
        .map(|n| job(n, false))
        .chain(MISMATCHED.iter().map(|&n| job(n, true)))
        .chain(["{not json".to_string()])
        .collect()
}

/// The job server as the client expects it (module docs); faults seeded with `seed`.
pub fn job_server(seed: u64) -> ServerConfig {
    ServerConfig::new("/jobs", "id")
        .id_prefix("JOB")
        .mismatch(MismatchAnswer::Conflict)
        .faults(Faults {
            lose_answer_rate: 0.33,
            unavailable_rate: 0.1,
            latency_ms: 0,
            seed,
        })
}

/// The harness for the scenario's bodies, starting at [`T0`].
pub fn harness() -> Harness {
    let mut harness = Harness::new("jobs", bodies());
    harness.config.start_ms = T0;
    harness
}

/// One run with `seed`: the kit's violations plus [`expectation_violations`].
///
/// # Panics
/// If no loopback port or HTTP client can be had.
pub async fn run(harness: &Harness, seed: u64) -> RunReport {
    let setup = async |seed: u64, clock: Arc<ManualClock>| {
        let server = IdempotencyServer::start(job_server(seed), clock)
            .await
            .expect("a loopback port for the test server");
        let client = JobClient::new(server.url()).expect("an HTTP client");
        Target {
            integration: Arc::new(client),
            ledger: Arc::new(server),
        }
    };
    let mut report = harness.run(seed, &setup).await;
    let more = expectation_violations(&report);
    report.violations.extend(more);
    report
}

/// Runs every seed of `seeds`, `parallel` at a time ([`gate_testkit::run_parallel`]), and
/// returns the reports in seed order.
pub async fn run_seeds(seeds: std::ops::Range<u64>, parallel: usize) -> Vec<RunReport> {
    let harness = harness();
    run_parallel(seeds, parallel, |seed| run(&harness, seed)).await
}

/// What this scenario must end with, beyond the kit's invariants; each miss in words: one job
/// per key, each committed with its row; a person got each mismatch and the poison body, and
/// nothing else; the three stranded jobs were finished by the reconciler.
pub fn expectation_violations(r: &RunReport) -> Vec<String> {
    let mut v = Vec::new();
    let made: usize = r.effects.values().map(Vec::len).sum();
    let figures = [
        ("jobs made", made, JOBS),
        ("keys with a job", r.effects.len(), JOBS),
        ("records committed", r.committed(), JOBS),
        ("business rows", r.rows.len(), JOBS),
        (
            "mismatches to a person",
            r.cases(ManualReason::Mismatch),
            MISMATCHED.len(),
        ),
        (
            "rejected to a person",
            r.cases(ManualReason::Rejected),
            REJECTED,
        ),
    ];
    v.extend(figure_misses(&figures));
    if r.reconciled < 3 {
        v.push(format!(
            "reconciled {}, expected at least the 3 stranded jobs",
            r.reconciled
        ));
    }
    v.extend(unexpected_manual_items(
        r,
        &[ManualReason::Mismatch, ManualReason::Rejected],
        |_| false,
    ));
    v
}
