//! The reconciler's counters are written after every sweep of a scheduled run
//! (`gate_lambda::emit_sweep`), not once at its end: a run killed at its function timeout keeps
//! the counts of the sweeps it finished. On the memory store and a manual clock, three records
//! stranded so that the sweeps at 0, 30 and 45 s each commit one: four EMF documents, one per
//! sweep, whose `Reconciled` values are 1, 0, 1, 1 and add up to the run's report.

use std::sync::Arc;

use async_trait::async_trait;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation};
use gate::effect::{CallOutcome, Effect, LookupOutcome};
use gate::integration::{Held, Integration, Parsed};
use gate::manual::MemoryManualQueue;
use gate::reconciler::ReconcilerConfig;

use gate::store::memory::MemoryStore;
use gate_testkit::{plain_event, reserve_stranded};

/// 2026-06-01T06:00:00Z, epoch ms.
const T0: i64 = 1_780_293_600_000;

/// A server that honours `Idempotency-Key`: every call makes (or replays) job `job-{key}`.
struct Jobs;

#[async_trait]
impl Integration for Jobs {
    fn operation(&self) -> &str {
        "run-job"
    }

    fn parse(&self, body: &str, _now_ms: i64) -> Parsed {
        Parsed::Event(plain_event(body))
    }

    async fn call(&self, held: &Held<'_>) -> CallOutcome {
        CallOutcome::Done(Effect {
            effect_id: format!("job-{}", &held.record().op_key[..8]),
            subject: None,
        })
    }

    fn lookup_by_key(&self) -> Option<&dyn gate::Lookup> {
        Some(self)
    }
}

#[async_trait]
impl gate::Lookup for Jobs {
    async fn lookup(&self, _held: &Held<'_>) -> LookupOutcome {
        LookupOutcome::Transient("not asked in this test".into())
    }
}

/// A worker reserves `body` at `at_ms` (its lease: 15 s) and dies.
async fn strand(gate: &Gate, store: &MemoryStore, body: &str, at_ms: i64) {
    let worker = Invocation {
        request_id: format!("consumer-{body}#0"),
        deadline_ms: at_ms + 30_000,
    };
    reserve_stranded(gate, store, body, &worker, at_ms).await;
}

#[tokio::test]
async fn every_sweep_writes_its_own_counts() {
    let emf = gate_lambda::Emf::new("emf-sweeps");
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::new(T0));
    let gate = Gate {
        config: GateConfig::new("jobs"),
        store: store.clone(),
        integration: Arc::new(Jobs),
        manual: Arc::new(MemoryManualQueue::new()),
        clock: clock.clone(),
    };
    // Lease ended before the run: the sweep at 0 s. Lease to 16 s: the sweep at 30 s. Created
    // at 20 s, lease to 35 s: the sweep at 45 s.
    strand(&gate, &store, "a", T0 - 20_000).await;
    strand(&gate, &store, "b", T0 + 1_000).await;
    strand(&gate, &store, "c", T0 + 20_000).await;

    let invocation = Invocation {
        request_id: "reconciler-1".into(),
        deadline_ms: T0 + 75_000,
    };
    let mut out = Vec::new();
    let mut documents_after_sweep = Vec::new();
    let sleep_clock = clock.clone();
    let (report, sweeps) = gate
        .reconcile_run(
            store.as_ref(),
            &ReconcilerConfig::default(),
            &invocation,
            move |ms| {
                sleep_clock.advance_ms(i64::try_from(ms).unwrap());
                std::future::ready(())
            },
            |sweep| {
                gate_lambda::emit_sweep(sweep, &emf, "reconciler-1", &mut out);
                documents_after_sweep.push(String::from_utf8_lossy(&out).lines().count());
            },
        )
        .await;
    assert_eq!(sweeps, 4);
    assert_eq!(report.reconciled, 3, "{report:?}");
    // Each sweep's document is out before the next sweep starts.
    assert_eq!(documents_after_sweep, [1, 2, 3, 4]);

    let text = String::from_utf8(out).unwrap();
    let reconciled: Vec<i64> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("one JSON document a line"))
        .map(|doc| {
            assert_eq!(
                doc["_aws"]["CloudWatchMetrics"][0]["Namespace"],
                "ExactlyOnceGate"
            );
            assert_eq!(doc["Integration"], "emf-sweeps");
            assert_eq!(doc["RequestId"], "reconciler-1");
            doc["Reconciled"]
                .as_i64()
                .expect("Reconciled, zeros explicit")
        })
        .collect();
    assert_eq!(reconciled, [1, 0, 1, 1]);
    assert_eq!(
        reconciled.iter().sum::<i64>(),
        i64::try_from(report.reconciled).unwrap()
    );
    assert_eq!(clock.now_ms(), T0 + 45_000);
}
