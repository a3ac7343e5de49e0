//! The job client on the gate's core, end to end against the test kit's Idempotency-Key server
//! (`gate_testkit::IdempotencyServer`: a replay on the same key and body, `409
//! idempotency_mismatch` on another body, answers lost after the job was made, `503`s): the store
//! conformance suite, and seeded runs of the kit's harness (`gate_testkit::Harness`:
//! redeliveries, duplicates, mismatched bodies, a poison body, workers that crash at every store
//! write or stall past their lease, workers that died after their reserve, skewed clocks, failed
//! messages back after their visibility timeout or lost, then the reconciler; `job_client::scenario`)
//! checked with the gate's safety and liveness invariants.

use std::collections::BTreeMap;
use std::sync::Arc;

use std::sync::atomic::{AtomicUsize, Ordering};

use gate::prelude::{CallOutcome, Held, IdempotencyRecord, Integration, Parsed};
use gate::store::memory::MemoryStore;
use gate_testkit::{exactly_once_violations, Harness, IdempotencyServer, Target};
use job_client::scenario::{self, job, job_server, JOBS, T0};
use job_client::JobClient;

// The suite every store passes, on the store the example runs on.
gate_testkit::store_conformance_tests!(_case => Arc::new(MemoryStore::new()));

/// Seeds the test runs (more: `sim check --integration job-client --seeds N`).
const SEEDS: u64 = 200;

/// The scenario (`job_client::scenario`: 24 jobs, three also with a mismatched copy, a poison
/// body; the first three stranded, the others delivered 1 to 3 times; seeded faults of the
/// server and the store, skewed clocks, visibility timeouts and lost messages; then the
/// reconciler). Every seed: no violation of the exactly-once and liveness invariants nor of the
/// scenario's own (every job made once and committed, a person got each mismatch and the poison
/// body, and nothing else).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_is_made_once_across_seeded_runs() {
    let reports = scenario::run_seeds(0..SEEDS, 8).await;
    for r in &reports {
        assert!(
            r.violations.is_empty(),
            "seed {}: {:#?}",
            r.seed,
            r.violations
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
    // Failed messages lost for good, and skewed clocks, happened too.
    let lost: usize = reports.iter().map(|r| r.lost).sum();
    assert!(lost > 0, "no message was lost in {} runs", reports.len());
    assert!(
        reports.iter().any(|r| r.max_skew_seen_ms > 0),
        "no clock was skewed"
    );
}

/// A planted bug: a client that sends a fresh `Idempotency-Key` on every call instead of the
/// record's (a retry after a lost answer makes the job again).
struct FreshKeyEveryCall {
    inner: JobClient,
    calls: AtomicUsize,
}

#[async_trait::async_trait]
impl Integration for FreshKeyEveryCall {
    fn operation(&self) -> &str {
        self.inner.operation()
    }
    fn parse(&self, body: &str, now_ms: i64) -> Parsed {
        self.inner.parse(body, now_ms)
    }
    async fn call(&self, held: &Held<'_>) -> CallOutcome {
        let mut record = held.record().clone();
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        record.op_key = format!("{}-{n}", record.op_key);
        self.inner.call(&Held::for_tests(&record)).await
    }
    fn lookup_by_key(&self) -> Option<&dyn gate::Lookup> {
        self.inner.lookup_by_key()
    }
    fn ends_at_ms(&self, record: &IdempotencyRecord) -> Option<i64> {
        self.inner.ends_at_ms(record)
    }
    fn label_names(&self) -> &[&'static str] {
        self.inner.label_names()
    }
}

/// The harness is not vacuous: with skewed clocks, visibility timeouts and lost messages on, a
/// client that ignores the record's key is reported with its seed, and `check_seeds` fails
/// naming the seed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_ignores_the_key_is_caught_with_its_seed() {
    let bodies: Vec<String> = (0..JOBS).map(|n| job(n, false)).collect();
    let mut harness = Harness::new("jobs", bodies);
    harness.config.start_ms = T0;
    harness.config.max_skew_ms = 30_000;
    harness.config.lost_rate = 0.5;
    let setup = async |seed: u64, clock: Arc<gate::clock::ManualClock>| {
        let server = IdempotencyServer::start(job_server(seed), clock)
            .await
            .expect("a loopback port");
        let inner = JobClient::new(server.url()).expect("an HTTP client");
        Target {
            integration: Arc::new(FreshKeyEveryCall {
                inner,
                calls: AtomicUsize::new(0),
            }),
            ledger: Arc::new(server),
        }
    };
    let mut caught = Vec::new();
    for seed in 0..10 {
        let report = harness.run(seed, &setup).await;
        assert_eq!(report.seed, seed);
        if report
            .violations
            .iter()
            .any(|v| v.contains("the server made"))
        {
            caught.push(seed);
        }
    }
    // A third of the answers are lost: a run without a retried call is not one of ten.
    assert!(caught.len() >= 5, "caught only in seeds {caught:?}");
    let first = caught[0];
    let panic = tokio::spawn(async move {
        harness.check_seeds(first..first + 1, setup).await;
    })
    .await
    .expect_err("check_seeds fails on the planted bug");
    let message = panic.into_panic();
    let text = message
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(text.starts_with(&format!("seed {first}:")), "{text}");
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
        written_at_ms: T0,
    };
    let v = exactly_once_violations(&[], &[row], &[], &effects);
    assert_eq!(v.len(), 2, "{v:?}");
}
