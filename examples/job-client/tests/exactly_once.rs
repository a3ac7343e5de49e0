//! The job client on the gate's core, end to end against the test kit's Idempotency-Key server
//! (`gate::testkit::IdempotencyServer`: a replay on the same key and body, `409
//! idempotency_mismatch` on another body, answers lost after the job was made, `503`s): the store
//! conformance suite, and seeded runs of the kit's harness (`gate::testkit::Harness`:
//! redeliveries, duplicates, mismatched bodies, a poison body, workers that crash at every store
//! write or stall past their lease, workers that died after their reserve, then the reconciler)
//! checked with the gate's safety and liveness invariants.

use std::collections::BTreeMap;
use std::sync::Arc;

use gate::manual::ManualReason;
use gate::store::memory::MemoryStore;
use gate::testkit::{
    exactly_once_violations, Faults, Harness, IdempotencyServer, MismatchAnswer, ServerConfig,
    Target,
};
use job_client::JobClient;
use serde_json::json;

// The suite every store passes, on the store the example runs on.
gate::store_conformance_tests!(_case => Arc::new(MemoryStore::new()));

/// 2030-01-07T08:00:00Z in epoch ms: a fixed, simulated time.
const T0: i64 = 1_893_916_800_000;

/// Jobs in each run.
const JOBS: usize = 24;

/// Jobs that also get a copy with another payload (a mismatch): 1 in 8.
const MISMATCHED: [usize; 3] = [5, 13, 21];

fn job(n: usize, changed: bool) -> String {
    let payload = if changed {
        json!({"n": n, "priority": "high"})
    } else {
        json!({"n": n})
    };
    json!({"job_id": format!("J-{n}"), "payload": payload}).to_string()
}

/// The job server as the example's client expects it: `POST /jobs` answers `201 {"id": ...}`,
/// a reused key with another body `409 idempotency_mismatch`, `GET /jobs?idempotency_key=K` the
/// job; a third of the answers lost after the job was made and one POST in ten failing first.
fn server(seed: u64) -> ServerConfig {
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

/// 24 jobs (the first three reserved by a worker that died, the others delivered 1 to 3
/// times), three of them also with a mismatched copy, and a poison body; seeded faults of the
/// server and the store; then the reconciler. Every seed: no violation of the exactly-once and
/// liveness invariants, every job made once and committed, a person got each mismatch and the
/// poison body, and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_is_made_once_across_seeded_runs() {
    let bodies: Vec<String> = (0..JOBS)
        .map(|n| job(n, false))
        .chain(MISMATCHED.iter().map(|&n| job(n, true)))
        .chain(["{not json".to_string()])
        .collect();
    let mut harness = Harness::new("jobs", bodies);
    harness.config.start_ms = T0;
    let reports = harness
        .check_seeds(0..40, async |seed, clock| {
            let server = IdempotencyServer::start(server(seed), clock)
                .await
                .expect("a loopback port");
            let client = JobClient::new(server.url()).expect("an HTTP client");
            Target {
                integration: Arc::new(client),
                ledger: Arc::new(server),
            }
        })
        .await;
    for r in &reports {
        let seed = r.seed;
        assert_eq!(r.effects.len(), JOBS, "seed {seed}: one job per key");
        assert!(
            r.effects.values().all(|made| made.len() == 1),
            "seed {seed}"
        );
        assert_eq!(r.committed(), JOBS, "seed {seed}");
        assert_eq!(r.rows.len(), JOBS, "seed {seed}");
        assert_eq!(
            r.cases(ManualReason::Mismatch),
            MISMATCHED.len(),
            "seed {seed}"
        );
        assert_eq!(r.cases(ManualReason::Rejected), 1, "seed {seed}");
        let others: Vec<_> = r
            .manual
            .iter()
            .filter(|i| !matches!(i.reason, ManualReason::Mismatch | ManualReason::Rejected))
            .collect();
        assert!(others.is_empty(), "seed {seed}: {others:?}");
        // The three stranded jobs only the reconciler could finish.
        assert!(
            r.reconciled >= 3,
            "seed {seed}: reconciled {}",
            r.reconciled
        );
    }
    // The faults happened (not a run that passed because nothing went wrong).
    let crashes: usize = reports.iter().map(|r| r.faults.crashes).sum();
    let echoes: usize = reports.iter().map(|r| r.faults.echoes).sum();
    let stalls: usize = reports.iter().map(|r| r.faults.stalls).sum();
    assert!(
        crashes > 0 && echoes > 0 && stalls > 0,
        "{crashes} {echoes} {stalls}"
    );
}

/// The checker is not vacuous: a second effect under one key, a row without its record and a
/// committed event also sent to a person are each reported.
#[test]
fn the_invariants_catch_a_double_effect() {
    let effects = BTreeMap::from([("k".to_string(), vec!["JOB-1".into(), "JOB-2".into()])]);
    let row = gate::record::BusinessRow {
        source_event: "e".into(),
        effect_id: "JOB-1".into(),
        labels: Default::default(),
        booked_at_ms: T0,
    };
    let v = exactly_once_violations(&[], &[row], &[], &effects);
    assert_eq!(v.len(), 2, "{v:?}");
}
