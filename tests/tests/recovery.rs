//! Recovery within a minute, on the memory adapters and a manual clock: the
//! lease covers one record's work and no more, the reconciler selects a stranded record by its
//! lease end (not its age), and one scheduled run sweeps every 15 s of its minute, so a record
//! stranded by a crash is committed at most lease + sweep interval after the crash (plus its own
//! work, which the manual clock does not advance).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation};
use gate::effect::{CallOutcome, Effect, LookupOutcome};
use gate::integration::{Held, Integration, Parsed};
use gate::manual::MemoryManualQueue;
use gate::reconciler::ReconcilerConfig;
use gate::record::{IdempotencyRecord, RecordStatus};
use gate::store::memory::MemoryStore;
use gate::store::IdempotencyStore;
use gate_testkit::{plain_event, reserve_stranded};

/// 2026-06-01T06:00:00Z, epoch ms.
const T0: i64 = 1_780_293_600_000;

/// A server that honours `Idempotency-Key`: the first call under a key makes job `job-{key}`,
/// a repeat replays it.
#[derive(Default)]
struct Jobs {
    calls: AtomicUsize,
    /// The clock readings (epoch ms) of the calls.
    at: Mutex<Vec<i64>>,
    clock: Option<Arc<ManualClock>>,
}

struct JobClient(Arc<Jobs>);

#[async_trait]
impl Integration for JobClient {
    fn operation(&self) -> &str {
        "run-job"
    }

    fn parse(&self, body: &str, _now_ms: i64) -> Parsed {
        Parsed::Event(plain_event(body))
    }

    async fn call(&self, held: &Held<'_>) -> CallOutcome {
        self.0.calls.fetch_add(1, Ordering::SeqCst);
        if let Some(clock) = &self.0.clock {
            self.0.at.lock().unwrap().push(clock.now_ms());
        }
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
impl gate::Lookup for JobClient {
    async fn lookup(&self, _held: &Held<'_>) -> LookupOutcome {
        LookupOutcome::Transient("not asked in these tests".into())
    }
}

struct World {
    gate: Gate,
    store: Arc<MemoryStore>,
    clock: Arc<ManualClock>,
    jobs: Arc<Jobs>,
}

fn world() -> World {
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::new(T0));
    let jobs = Arc::new(Jobs {
        clock: Some(clock.clone()),
        ..Jobs::default()
    });
    World {
        gate: Gate {
            config: GateConfig::new("jobs"),
            store: store.clone(),
            integration: Arc::new(JobClient(jobs.clone())),
            manual: Arc::new(MemoryManualQueue::new()),
            clock: clock.clone(),
        },
        store,
        clock,
        jobs,
    }
}

/// A worker of a 30 s invocation reserves `body` now and dies: the record is `in_flight`
/// under its lease.
async fn reserve_and_crash(w: &World, body: &str) -> IdempotencyRecord {
    let now = w.clock.now_ms();
    let worker = Invocation {
        request_id: format!("consumer-{body}#0"),
        deadline_ms: now + 30_000,
    };
    reserve_stranded(&w.gate, w.store.as_ref(), body, &worker, now).await
}

/// One scheduled run starting now, its sleeps moving the manual clock on.
async fn scheduled_run(
    w: &World,
    deadline_after_ms: i64,
) -> (gate::reconciler::ReconcileReport, u32) {
    let invocation = Invocation {
        request_id: "reconciler-1".into(),
        deadline_ms: w.clock.now_ms() + deadline_after_ms,
    };
    let clock = w.clock.clone();
    w.gate
        .reconcile_run(
            w.store.as_ref(),
            &ReconcilerConfig::default(),
            &invocation,
            move |ms| {
                clock.advance_ms(i64::try_from(ms).unwrap());
                std::future::ready(())
            },
            |_| {},
        )
        .await
}

#[tokio::test]
async fn the_lease_is_one_records_work_not_the_invocations_deadline() {
    let w = world();
    let record = reserve_and_crash(&w, "a").await;
    // 15 s (the default lease, above the 12 s deadline margin), not the worker's 30 s deadline.
    assert_eq!(record.lease_until_ms, Some(T0 + 15_000));
    let mut longer = w.gate.clone();
    longer.config.deadline_margin_ms = 22_000;
    assert_eq!(
        longer.config.lease_until(T0),
        T0 + 22_000,
        "at least one record's work"
    );
}

#[tokio::test]
async fn a_run_sweeps_every_15_s_and_commits_a_stranded_record_once_its_lease_ends() {
    let w = world();
    // The run starts at T0; a worker reserves at T0 + 1 s and dies: its lease ends at T0 + 16 s.
    w.clock.advance_ms(1_000);
    let record = reserve_and_crash(&w, "b").await;
    w.clock.set_ms(T0);
    let (report, sweeps) = scheduled_run(&w, 75_000).await;
    assert_eq!(sweeps, 4, "at 0, 15, 30 and 45 s");
    assert_eq!(report.reconciled, 1, "{report:?}");
    // Not there yet at 0 s (created at 1 s), skipped at 15 s (lease live), taken at 30 s.
    assert_eq!(report.live_lease, 1, "{report:?}");
    assert_eq!(*w.jobs.at.lock().unwrap(), vec![T0 + 30_000]);
    let after = w.store.get(&record.pk).await.unwrap().unwrap();
    assert_eq!(after.status, RecordStatus::Committed);
    assert_eq!(after.updated_at_ms, T0 + 30_000, "29 s after the crash");
    assert_eq!(w.jobs.calls.load(Ordering::SeqCst), 1);
    // The run ends after its last sweep, within the schedule's minute.
    assert_eq!(w.clock.now_ms(), T0 + 45_000);
}

#[tokio::test]
async fn a_young_record_whose_lease_ended_is_taken_at_once() {
    // The old selection waited until a record was 120 s old (by created_at); the lease decides now.
    let w = world();
    let record = reserve_and_crash(&w, "c").await;
    w.clock.advance_ms(16_000);
    let (report, _) = scheduled_run(&w, 75_000).await;
    assert_eq!(report.reconciled, 1, "{report:?}");
    assert_eq!(*w.jobs.at.lock().unwrap(), vec![T0 + 16_000]);
    let after = w.store.get(&record.pk).await.unwrap().unwrap();
    assert_eq!(after.status, RecordStatus::Committed);
}

#[tokio::test]
async fn no_sweep_starts_without_its_deadline_margin() {
    // A 40 s invocation and the 12 s margin: the sweeps at 0 and 15 s, not the one at 30 s.
    let w = world();
    let (report, sweeps) = scheduled_run(&w, 40_000).await;
    assert_eq!(sweeps, 2);
    assert_eq!(report.examined, 0);
    assert_eq!(w.clock.now_ms(), T0 + 15_000);
}
