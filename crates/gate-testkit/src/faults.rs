//! [`FaultyStore`]: the harness's store, a store (there a
//! [`MemoryStore`](gate::store::memory::MemoryStore)) behind three faults decided per lease
//! token (one record handled by one worker) from the run's seed, so a seed replays the same run:
//!
//! * **crash**: the worker dies before or after its k-th write (k in 1..=3: a reserve or
//!   take-over, a commit or a routing's mark, a routing's confirmation). After it every write of
//!   that token fails, as nothing of a dead worker reaches the store; a crash after the write is a
//!   write that landed and whose answer nobody saw;
//! * **echo**: a write lands, its answer is lost and the client sends it again (the SDK's retry):
//!   the store gets the same write twice and the second answer is returned; every conditional
//!   write must recognise itself;
//! * **stall**: a worker pauses before its commit or its routing's mark until its lease has
//!   expired, meanwhile the reconciler runs (a hook the harness installs) and takes the record
//!   over; then the worker's fenced write meets the new holder.
//!
//! One knob outside the seed: [`FaultyStore::fail_finishes`], the next `n` finishes refused
//! (a store that is down when a worker finishes). With [`FaultRates::NONE`] it is the only fault,
//! over any store (a test's DynamoDB on moto as well as memory).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use gate::record::{BusinessRow, IdempotencyRecord, NaturalKey, RecordStatus};
use gate::store::{
    CommitOutcome, FinishGuard, FinishOutcome, GuardOutcome, IdempotencyStore, Reservation,
    StoreError, TakeOver,
};

/// What the harness runs while a worker stalls (it advances the clock past the lease and runs
/// the reconciler).
pub type StallHook = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// How often each fault strikes, probabilities in `[0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultRates {
    /// Per lease token: the worker dies at one of its first three writes.
    pub crash: f64,
    /// Per write: applied twice (the answer of the first lost, the client retried).
    pub echo: f64,
    /// Per lease token of a consumer (`inv-...`): stalls past its lease before its commit or
    /// routing mark while the reconciler takes over.
    pub stall: f64,
}

impl FaultRates {
    /// No seeded fault: every write passes through once (for a test that wants only
    /// [`FaultyStore::fail_finishes`]).
    pub const NONE: Self = Self {
        crash: 0.0,
        echo: 0.0,
        stall: 0.0,
    };
}

impl Default for FaultRates {
    /// Crash 0.1, echo 0.1, stall 0.05.
    fn default() -> Self {
        Self {
            crash: 0.1,
            echo: 0.1,
            stall: 0.05,
        }
    }
}

/// What the faults did in one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Workers that died.
    pub crashes: usize,
    /// Writes applied twice.
    pub echoes: usize,
    /// Workers that stalled past their lease.
    pub stalls: usize,
}

#[derive(Default)]
struct State {
    writes: HashMap<String, usize>,
    dead: HashSet<String>,
    stalled: HashSet<String>,
    stalling: bool,
    counts: FaultCounts,
    /// Finishes still to refuse ([`FaultyStore::fail_finishes`]).
    failing_finishes: usize,
}

/// A store with seeded crashes, echoes and stalls, and finishes refused on demand (module docs).
/// Reads pass through.
pub struct FaultyStore {
    inner: Arc<dyn IdempotencyStore>,
    seed: u64,
    rates: FaultRates,
    /// The lease-token prefix of consumer workers (the only ones that stall).
    consumer_prefix: String,
    state: Mutex<State>,
    hook: Mutex<Option<StallHook>>,
}

impl std::fmt::Debug for FaultyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyStore")
            .field("seed", &self.seed)
            .field("rates", &self.rates)
            .finish_non_exhaustive()
    }
}

/// A number in `[0, 1)` drawn from the seed and `parts` (SHA-256): the same for the same inputs,
/// whatever order the draws happen in.
fn draw(seed: u64, parts: &[&str]) -> f64 {
    let mut h = Sha256::new();
    h.update(seed.to_be_bytes());
    for p in parts {
        h.update([0u8]);
        h.update(p.as_bytes());
    }
    let digest = h.finalize();
    let mut top = [0u8; 8];
    top.copy_from_slice(&digest[..8]);
    // 53 bits: exactly representable.
    (u64::from_be_bytes(top) >> 11) as f64 / (1u64 << 53) as f64
}

impl FaultyStore {
    /// `inner` with `rates`, drawn from `seed`; workers whose lease token starts with
    /// `consumer_prefix` may stall.
    pub fn new(
        inner: Arc<dyn IdempotencyStore>,
        seed: u64,
        rates: FaultRates,
        consumer_prefix: impl Into<String>,
    ) -> Self {
        Self {
            inner,
            seed,
            rates,
            consumer_prefix: consumer_prefix.into(),
            state: Mutex::new(State::default()),
            hook: Mutex::new(None),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Installs (or with `None` removes) what runs while a worker stalls.
    pub fn set_stall_hook(&self, hook: Option<StallHook>) {
        *self.hook.lock().unwrap_or_else(|e| e.into_inner()) = hook;
    }

    /// What the faults did so far.
    pub fn counts(&self) -> FaultCounts {
        self.lock().counts
    }

    /// Refuses the next `n` [`IdempotencyStore::finish`] calls with [`StoreError::Unavailable`]
    /// (`"injected: finish failed"`) without passing them on: nothing is written, as when the
    /// store is throttled or unreachable after the SDK's retries. Counted in none of
    /// [`FaultCounts`]; a worker's later writes are not affected.
    pub fn fail_finishes(&self, n: usize) {
        self.lock().failing_finishes = n;
    }

    /// The crash point of `token`: the k-th write (1..=3), and whether after it.
    fn crash_point(&self, token: &str) -> Option<(usize, bool)> {
        if draw(self.seed, &[token, "crash"]) >= self.rates.crash {
            return None;
        }
        let k = 1 + (draw(self.seed, &[token, "crash-at"]) * 3.0) as usize;
        Some((k.min(3), draw(self.seed, &[token, "crash-after"]) < 0.5))
    }

    /// Stalls `token` past its lease once, if drawn, running the hook.
    async fn maybe_stall(&self, token: &str) {
        if !token.starts_with(&self.consumer_prefix)
            || draw(self.seed, &[token, "stall"]) >= self.rates.stall
        {
            return;
        }
        {
            let mut st = self.lock();
            if st.stalling || !st.stalled.insert(token.to_string()) {
                return;
            }
            st.stalling = true;
            st.counts.stalls += 1;
        }
        let hook = self.hook.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(hook) = hook {
            hook().await;
        }
        self.lock().stalling = false;
    }

    /// One write of `token` through the faults.
    async fn write<T, F, Fut>(&self, token: &str, op: F) -> Result<T, StoreError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let (k, crash) = {
            let mut st = self.lock();
            if st.dead.contains(token) {
                return Err(StoreError::Unavailable(
                    format!("{token}: the worker crashed").into(),
                ));
            }
            let k = st.writes.entry(token.to_string()).or_default();
            *k += 1;
            (*k, self.crash_point(token))
        };
        if crash == Some((k, false)) {
            let mut st = self.lock();
            st.dead.insert(token.to_string());
            st.counts.crashes += 1;
            return Err(StoreError::Unavailable(
                format!("{token}: crashed before write {k}").into(),
            ));
        }
        let mut out = op().await;
        if out.is_ok() && draw(self.seed, &[token, "echo", &k.to_string()]) < self.rates.echo {
            self.lock().counts.echoes += 1;
            out = op().await;
        }
        if crash == Some((k, true)) {
            let mut st = self.lock();
            st.dead.insert(token.to_string());
            st.counts.crashes += 1;
            return Err(StoreError::Unavailable(
                format!("{token}: crashed after write {k} landed").into(),
            ));
        }
        out
    }
}

#[async_trait]
impl IdempotencyStore for FaultyStore {
    async fn reserve(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> Result<Reservation, StoreError> {
        let token = record.lease_owner.clone().unwrap_or_default();
        self.write(&token, || self.inner.reserve(record, now_ms))
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
        self.write(new_owner, || {
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
        self.maybe_stall(owner).await;
        self.write(owner, || {
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
        let token = record.lease_owner.clone().unwrap_or_default();
        self.write(&token, || self.inner.guard(record, natural_key, now_ms))
            .await
    }

    async fn release_lease(&self, pk: &str, owner: &str, now_ms: i64) -> Result<(), StoreError> {
        self.write(owner, || self.inner.release_lease(pk, owner, now_ms))
            .await
    }

    async fn extend_lease(
        &self,
        pk: &str,
        owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        self.write(owner, || {
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
        {
            let mut st = self.lock();
            if st.failing_finishes > 0 {
                st.failing_finishes -= 1;
                return Err(StoreError::Unavailable("injected: finish failed".into()));
            }
        }
        self.maybe_stall(owner).await;
        self.write(owner, || {
            self.inner
                .finish(pk, owner, status, error, item, guard, now_ms)
        })
        .await
    }

    async fn finish_without_effect(
        &self,
        record: &IdempotencyRecord,
        owner: &str,
        status: RecordStatus,
        error: &str,
        item: &[u8],
        natural_key: &NaturalKey,
        now_ms: i64,
    ) -> Result<FinishOutcome, StoreError> {
        {
            let mut st = self.lock();
            if st.failing_finishes > 0 {
                st.failing_finishes -= 1;
                return Err(StoreError::Unavailable("injected: finish failed".into()));
            }
        }
        self.maybe_stall(owner).await;
        self.write(owner, || {
            self.inner.finish_without_effect(
                record,
                owner,
                status,
                error,
                item,
                natural_key,
                now_ms,
            )
        })
        .await
    }

    async fn routed(&self, pk: &str, owner: &str, now_ms: i64) -> Result<bool, StoreError> {
        self.write(owner, || self.inner.routed(pk, owner, now_ms))
            .await
    }

    async fn record_effect_id(
        &self,
        pk: &str,
        effect_id: &str,
        now_ms: i64,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.inner.record_effect_id(pk, effect_id, now_ms).await
    }

    async fn get(&self, pk: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.inner.get(pk).await
    }

    fn row_columns(&self) -> gate::record::RowColumns {
        self.inner.row_columns()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gate::store::memory::MemoryStore;

    #[test]
    fn draws_depend_on_their_inputs_only() {
        let a = draw(7, &["inv-1#0", "crash"]);
        assert_eq!(a, draw(7, &["inv-1#0", "crash"]));
        assert_ne!(a, draw(8, &["inv-1#0", "crash"]));
        assert_ne!(a, draw(7, &["inv-1#1", "crash"]));
        assert!((0.0..1.0).contains(&a));
        // Over many tokens the rate is about right (a fixed set of inputs: not timed, not random).
        let hits = (0..10_000)
            .filter(|i| draw(1, &[&format!("inv-{i}#0"), "crash"]) < 0.1)
            .count();
        assert!((900..1100).contains(&hits), "{hits}");
    }

    #[tokio::test]
    async fn fail_finishes_refuses_that_many_finishes_without_writing() {
        let inner = Arc::new(MemoryStore::new());
        let store = FaultyStore::new(inner.clone(), 1, FaultRates::NONE, "inv-");
        let record = crate::conformance::sample_record("t", "finish", "inv-1#0", 0);
        assert_eq!(
            store.reserve(&record, 0).await.unwrap(),
            Reservation::Reserved
        );
        store.fail_finishes(1);
        let finish = || {
            store.finish(
                &record.pk,
                "inv-1#0",
                RecordStatus::Failed,
                "e",
                b"",
                FinishGuard::Lease,
                1,
            )
        };
        assert!(matches!(
            finish().await,
            Err(StoreError::Unavailable(m)) if m.message() == "injected: finish failed"
        ));
        let held = inner.get(&record.pk).await.unwrap().unwrap();
        assert_eq!(held.status, RecordStatus::InFlight, "nothing written");
        assert!(matches!(finish().await, Ok(FinishOutcome::Finished)));
        let done = inner.get(&record.pk).await.unwrap().unwrap();
        assert_eq!(done.status, RecordStatus::Failed);
        assert_eq!(store.counts(), FaultCounts::default());
    }
}
