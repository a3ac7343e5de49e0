//! No server call on a lease too short to finish it (the recovery review's finding 1), on the
//! memory store behind a scripted store double and a manual clock: a slow reserve, take-over or
//! natural-key guard leaves less lease than a call and a commit need
//! (`GateConfig::call_lease_ms`: the call's timeout + `COMMIT_ALLOWANCE_MS`), so the holder
//! extends its lease with a write fenced by its token before it calls. A holder whose record was
//! taken over meanwhile neither calls nor writes; an extension that fails is released and not
//! called; an extension whose answer was lost and retried recognises itself. With ample lease
//! there is no extra write.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{derive_keys, Gate, GateConfig, Invocation};
use gate::effect::{CallOutcome, Effect, LookupOutcome};
use gate::integration::{Held, Integration, Parsed};
use gate::manual::MemoryManualQueue;
use gate::reconciler::ReconcilerConfig;
use gate::record::{
    record_pk, BusinessRow, IdempotencyRecord, Labels, NaturalKey, RecordStatus, DEFAULT_KEY_TTL_S,
};
use gate::store::memory::MemoryStore;
use gate::store::{
    BusinessRows, CommitOutcome, FinishGuard, FinishOutcome, GuardOutcome, IdempotencyStore,
    Reservation, StoreError, TakeOver,
};
use gate::RecordOutcome;
use gate_testkit::{plain_event, reserve_stranded, sqs_event};

/// 2026-06-01T06:00:00Z, epoch ms.
const T0: i64 = 1_780_293_600_000;

/// What the script does at one store request.
#[derive(Clone)]
enum Act {
    /// The request takes this long (the manual clock moves on before it reaches the store).
    Slow(i64),
    /// Before the request, another holder (`owner`) takes the record over: its lease ran out.
    TakenOverBy(&'static str),
    /// The write lands, its answer is lost and the client sends it again (the SDK's retry): the
    /// second answer is returned.
    Echo,
    /// The write lands and the caller gets a timeout.
    LandedThenTimeout,
}

/// The memory store with a script per operation name (each request of that name takes the next
/// act; none left: a plain request), and every request's name in order.
struct Scripted {
    inner: Arc<MemoryStore>,
    clock: Arc<ManualClock>,
    script: Mutex<HashMap<&'static str, Vec<Act>>>,
    seen: Mutex<Vec<&'static str>>,
}

impl Scripted {
    fn new(inner: Arc<MemoryStore>, clock: Arc<ManualClock>) -> Self {
        Self {
            inner,
            clock,
            script: Mutex::default(),
            seen: Mutex::default(),
        }
    }

    fn then(&self, op: &'static str, act: Act) {
        self.script.lock().unwrap().entry(op).or_default().push(act);
    }

    fn seen(&self) -> Vec<&'static str> {
        self.seen.lock().unwrap().clone()
    }

    /// Runs the request `op` on the record `pk` as the script says.
    async fn run<T, F, Fut>(&self, op: &'static str, pk: &str, f: F) -> Result<T, StoreError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        self.seen.lock().unwrap().push(op);
        let act = {
            let mut script = self.script.lock().unwrap();
            script
                .get_mut(op)
                .filter(|acts| !acts.is_empty())
                .map(|acts| acts.remove(0))
        };
        match act {
            None => f().await,
            Some(Act::Slow(ms)) => {
                self.clock.advance_ms(ms);
                f().await
            }
            Some(Act::TakenOverBy(owner)) => {
                let now = self.clock.now_ms();
                let old = self.inner.get(pk).await?.expect("the record to take over");
                assert!(
                    !old.lease_is_live(now),
                    "the script takes over a live lease"
                );
                let taken = self
                    .inner
                    .take_over(
                        pk,
                        old.lease_owner.as_deref().unwrap_or_default(),
                        owner,
                        now + 15_000,
                        now,
                    )
                    .await?;
                assert!(matches!(taken, TakeOver::Taken(_)), "{taken:?}");
                f().await
            }
            Some(Act::Echo) => {
                let _lost = f().await;
                f().await
            }
            Some(Act::LandedThenTimeout) => {
                f().await?;
                Err(StoreError::Unavailable(format!("{op}: timed out").into()))
            }
        }
    }
}

#[async_trait]
impl IdempotencyStore for Scripted {
    async fn reserve(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> Result<Reservation, StoreError> {
        self.run("reserve", &record.pk, || self.inner.reserve(record, now_ms))
            .await
    }

    async fn take_over(
        &self,
        pk: &str,
        old_owner: &str,
        new_owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<TakeOver, StoreError> {
        self.run("take_over", pk, || {
            self.inner
                .take_over(pk, old_owner, new_owner, lease_until_ms, now_ms)
        })
        .await
    }

    async fn commit(
        &self,
        pk: &str,
        owner: &str,
        effect_id: &str,
        booking: &BusinessRow,
        now_ms: i64,
    ) -> Result<CommitOutcome, StoreError> {
        self.run("commit", pk, || {
            self.inner.commit(pk, owner, effect_id, booking, now_ms)
        })
        .await
    }

    async fn guard(
        &self,
        record: &IdempotencyRecord,
        natural_key: &NaturalKey,
        now_ms: i64,
    ) -> Result<GuardOutcome, StoreError> {
        self.run("guard", &record.pk, || {
            self.inner.guard(record, natural_key, now_ms)
        })
        .await
    }

    async fn release_lease(&self, pk: &str, owner: &str, now_ms: i64) -> Result<(), StoreError> {
        self.run("release_lease", pk, || {
            self.inner.release_lease(pk, owner, now_ms)
        })
        .await
    }

    async fn extend_lease(
        &self,
        pk: &str,
        owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        self.run("extend_lease", pk, || {
            self.inner.extend_lease(pk, owner, lease_until_ms, now_ms)
        })
        .await
    }

    async fn finish(
        &self,
        pk: &str,
        owner: &str,
        status: RecordStatus,
        error: &str,
        item: &[u8],
        guard: FinishGuard,
        now_ms: i64,
    ) -> Result<FinishOutcome, StoreError> {
        self.run("finish", pk, || {
            self.inner
                .finish(pk, owner, status, error, item, guard, now_ms)
        })
        .await
    }

    async fn routed(&self, pk: &str, owner: &str, now_ms: i64) -> Result<bool, StoreError> {
        self.run("routed", pk, || self.inner.routed(pk, owner, now_ms))
            .await
    }

    async fn record_effect_id(
        &self,
        pk: &str,
        effect_id: &str,
        now_ms: i64,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.run("record_effect_id", pk, || {
            self.inner.record_effect_id(pk, effect_id, now_ms)
        })
        .await
    }

    async fn get(&self, pk: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.inner.get(pk).await
    }

    fn row_columns(&self) -> gate::record::RowColumns {
        self.inner.row_columns()
    }
}

#[async_trait]
impl BusinessRows for Scripted {
    async fn business_row(&self, source_event: &str) -> Result<Option<BusinessRow>, StoreError> {
        self.inner.business_row(source_event).await
    }
}

/// One call as the server saw it: the clock, and the caller's lease owner and lease end as the
/// store held them at that moment (epoch ms).
type Call = (i64, Option<String>, Option<i64>);

/// A server that honours `Idempotency-Key`, with a natural key per body (so the guard is on the
/// path). Each call notes the caller's lease as the store holds it at that moment.
struct Jobs {
    store: Arc<MemoryStore>,
    clock: Arc<ManualClock>,
    calls: Mutex<Vec<Call>>,
}

#[async_trait]
impl Integration for Jobs {
    fn operation(&self) -> &str {
        "run-job"
    }

    fn parse(&self, body: &str, _now_ms: i64) -> Parsed {
        Parsed::Event(plain_event(body))
    }

    async fn call(&self, held: &Held<'_>) -> CallOutcome {
        let now = self.clock.now_ms();
        let stored = self
            .store
            .get(&held.record().pk)
            .await
            .unwrap()
            .expect("the held record");
        self.calls
            .lock()
            .unwrap()
            .push((now, stored.lease_owner, stored.lease_until_ms));
        CallOutcome::Done(Effect {
            effect_id: format!("job-{}", &held.record().op_key[..8]),
            subject: None,
        })
    }

    fn natural_key(&self, record: &IdempotencyRecord, _now_ms: i64) -> Option<NaturalKey> {
        Some(NaturalKey {
            key: format!("nk-{}", String::from_utf8_lossy(&record.request)),
            labels: Labels::new(),
            expires_at_s: T0 / 1000 + DEFAULT_KEY_TTL_S,
        })
    }

    fn lookup_by_key(&self) -> Option<&dyn gate::Lookup> {
        Some(self)
    }
}

#[async_trait]
impl gate::Lookup for Jobs {
    async fn lookup(&self, _held: &Held<'_>) -> LookupOutcome {
        LookupOutcome::Transient("not asked in these tests".into())
    }
}

struct World {
    gate: Gate,
    memory: Arc<MemoryStore>,
    store: Arc<Scripted>,
    clock: Arc<ManualClock>,
    jobs: Arc<Jobs>,
}

fn world() -> World {
    world_with(GateConfig::new("jobs"))
}

fn world_with(config: GateConfig) -> World {
    let memory = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::new(T0));
    let store = Arc::new(Scripted::new(memory.clone(), clock.clone()));
    let jobs = Arc::new(Jobs {
        store: memory.clone(),
        clock: clock.clone(),
        calls: Mutex::default(),
    });
    let gate = Gate {
        config,
        store: store.clone(),
        integration: jobs.clone(),
        manual: Arc::new(MemoryManualQueue::new()),
        clock: clock.clone(),
    };
    World {
        gate,
        memory,
        store,
        clock,
        jobs,
    }
}

impl World {
    /// The record key of `body`.
    fn pk(&self, body: &str) -> String {
        let Parsed::Event(event) = self.gate.integration.parse(body, T0) else {
            panic!("parse")
        };
        let keys = derive_keys(&event, "run-job").unwrap();
        record_pk(&self.gate.config.integration, &keys.event_key)
    }

    /// One delivery of `body` in invocation `request_id` (deadline 60 s away): its outcome.
    async fn deliver(&self, body: &str, request_id: &str) -> RecordOutcome {
        let invocation = Invocation {
            request_id: request_id.into(),
            deadline_ms: self.clock.now_ms() + 60_000,
        };
        let mut report = self
            .gate
            .handle_batch(sqs_event(&[("m-1", body)]), &invocation)
            .await;
        report.records.remove(0).outcome
    }

    fn calls(&self) -> Vec<Call> {
        self.jobs.calls.lock().unwrap().clone()
    }

    async fn record(&self, pk: &str) -> IdempotencyRecord {
        self.memory.get(pk).await.unwrap().expect("the record")
    }

    /// `body`'s record (`pk`) was released, still `in_flight`, for the redelivery, and the
    /// redelivery (invocation `inv-2`) takes it over at once and calls once.
    async fn released_then_the_redelivery_calls_once(&self, pk: &str, body: &str) {
        let released = self.record(pk).await;
        assert_eq!(released.status, RecordStatus::InFlight);
        assert_eq!(
            released.lease_until_ms,
            Some(0),
            "released for the redelivery"
        );
        let outcome = self.deliver(body, "inv-2").await;
        assert!(
            matches!(outcome, RecordOutcome::Committed { .. }),
            "{outcome:?}"
        );
        assert_eq!(self.calls().len(), 1);
        assert_eq!(self.calls()[0].1.as_deref(), Some("inv-2#0"));
    }
}

#[test]
fn a_call_needs_its_timeout_and_the_commit_allowance() {
    let config = GateConfig::new("jobs");
    assert_eq!(config.call_timeout_ms, 10_000);
    assert_eq!(gate::COMMIT_ALLOWANCE_MS, 2_000);
    assert_eq!(config.call_lease_ms(), 12_000);
}

#[tokio::test]
async fn an_ample_lease_costs_no_extra_write() {
    let w = world();
    // 3 s of the 15 s lease gone: 12 s left, exactly a call and a commit.
    w.store.then("reserve", Act::Slow(1_000));
    w.store.then("guard", Act::Slow(2_000));
    let outcome = w.deliver("a", "inv-1").await;
    assert!(
        matches!(outcome, RecordOutcome::Committed { .. }),
        "{outcome:?}"
    );
    assert_eq!(w.store.seen(), ["reserve", "guard", "commit"]);
    assert_eq!(
        w.calls(),
        [(T0 + 3_000, Some("inv-1#0".into()), Some(T0 + 15_000))]
    );
}

#[tokio::test]
async fn a_slow_reserve_and_guard_extend_the_lease_before_the_call() {
    let w = world();
    // The reserve is stamped at T0 (lease to T0 + 15 s) and takes 6 s, the guard 5 s: 4 s left.
    w.store.then("reserve", Act::Slow(6_000));
    w.store.then("guard", Act::Slow(5_000));
    let outcome = w.deliver("b", "inv-1").await;
    assert!(
        matches!(outcome, RecordOutcome::Committed { .. }),
        "{outcome:?}"
    );
    assert_eq!(
        w.store.seen(),
        ["reserve", "guard", "extend_lease", "commit"]
    );
    // The call ran on the extended lease: a whole lease from the extension (T0 + 11 s).
    assert_eq!(
        w.calls(),
        [(T0 + 11_000, Some("inv-1#0".into()), Some(T0 + 26_000))]
    );
    assert_eq!(w.record(&w.pk("b")).await.status, RecordStatus::Committed);
}

#[tokio::test]
async fn a_holder_whose_record_was_taken_over_neither_calls_nor_writes() {
    let w = world();
    let pk = w.pk("c");
    // The reserve takes 16 s: the lease ran out before its answer came; the reconciler takes the
    // record over before the holder's extension reaches the store.
    w.store.then("reserve", Act::Slow(16_000));
    w.store
        .then("extend_lease", Act::TakenOverBy("reconciler-1#0"));
    let outcome = w.deliver("c", "inv-1").await;
    assert_eq!(outcome, RecordOutcome::LeaseLost { effect_id: None });
    assert!(w.calls().is_empty(), "the old holder called");
    assert_eq!(w.store.seen(), ["reserve", "guard", "extend_lease"]);
    let now = w.record(&pk).await;
    assert_eq!(now.status, RecordStatus::InFlight);
    assert_eq!(now.lease_owner.as_deref(), Some("reconciler-1#0"));
    assert_eq!(
        now.lease_until_ms,
        Some(T0 + 31_000),
        "the new holder's lease"
    );
    assert!(now.effect_ids.is_empty());
}

#[tokio::test]
async fn an_extension_whose_answer_was_lost_and_retried_recognises_itself() {
    let w = world();
    w.store.then("reserve", Act::Slow(14_000));
    w.store.then("extend_lease", Act::Echo);
    let outcome = w.deliver("d", "inv-1").await;
    assert!(
        matches!(outcome, RecordOutcome::Committed { .. }),
        "{outcome:?}"
    );
    assert_eq!(
        w.calls(),
        [(T0 + 14_000, Some("inv-1#0".into()), Some(T0 + 29_000))]
    );
}

#[tokio::test]
async fn an_extension_that_fails_is_released_not_called_and_the_redelivery_calls_once() {
    let w = world();
    let pk = w.pk("e");
    w.store.then("reserve", Act::Slow(14_000));
    w.store.then("extend_lease", Act::LandedThenTimeout);
    let outcome = w.deliver("e", "inv-1").await;
    assert!(matches!(outcome, RecordOutcome::Retry(_)), "{outcome:?}");
    assert!(w.calls().is_empty(), "called without a confirmed lease");
    assert_eq!(
        w.store.seen(),
        ["reserve", "guard", "extend_lease", "release_lease"]
    );
    w.released_then_the_redelivery_calls_once(&pk, "e").await;
}

#[path = "lease_for_call/late_extensions.rs"]
mod late_extensions;
