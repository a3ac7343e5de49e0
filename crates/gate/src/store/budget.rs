//! The time an invocation has left for the store: every store call made inside [`scope`] ends
//! before the invocation must answer, whatever the store does (a black-holed network answers
//! nothing and closes nothing).
//!
//! The Lambda wiring opens one scope per invocation with the instant by which the handler must
//! have its answer ready (the deadline minus the time to answer). [`Bounded`] cuts every call of
//! the store it wraps at that instant ([`StoreError::Unavailable`], outcome unknown: every write
//! recognises itself on its retry) and, once a call was cut, skips the releases of that invocation
//! (a lease runs out by itself; a release to a store that stopped answering would only wait).
//! Adapters read [`remaining`] to bound their own attempts (PostgreSQL: the connect and the
//! statement). The scope is a tokio task-local: concurrent invocations in one process each have
//! their own, and outside a scope (tests, tools) nothing is cut.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{
    BusinessRows, CommitOutcome, FinishGuard, FinishOutcome, GuardOutcome, IdempotencyStore,
    InFlightIndex, InFlightPage, Purge, PurgeCount, Reservation, ReserveAndGuard, StoreError,
    TakeOver,
};
use crate::record::{BusinessRow, IdempotencyRecord, NaturalKey, RecordStatus, RowColumns};

/// One invocation's budget: the instant its store calls must end by, and whether one of them
/// was already cut (the store stopped answering).
#[derive(Debug)]
pub struct Budget {
    until: Instant,
    stalled: AtomicBool,
}

tokio::task_local! {
    static BUDGET: Arc<Budget>;
}

impl Budget {
    /// A budget that ends `left` from now.
    pub fn for_next(left: Duration) -> Self {
        Self {
            until: Instant::now() + left,
            stalled: AtomicBool::new(false),
        }
    }

    /// A budget that ends at `until_ms` (epoch **milliseconds**) read at `now_ms` (epoch ms): a
    /// past instant gives an empty budget.
    pub fn until_epoch_ms(until_ms: i64, now_ms: i64) -> Self {
        let left = u64::try_from(until_ms.saturating_sub(now_ms)).unwrap_or(0);
        Self::for_next(Duration::from_millis(left))
    }
}

/// Runs `work` with `budget` as the store budget of every store call it makes.
pub async fn scope<F: Future>(budget: Budget, work: F) -> F::Output {
    BUDGET.scope(Arc::new(budget), work).await
}

/// What is left of the current budget: `None` outside a [`scope`], `Some(ZERO)` once it ended.
pub fn remaining() -> Option<Duration> {
    BUDGET
        .try_with(|b| b.until.saturating_duration_since(Instant::now()))
        .ok()
}

/// Marks the current budget's store as not answering (a call was cut, or an adapter's attempt
/// timed out): the releases of this invocation are skipped. No effect outside a [`scope`].
pub fn mark_stalled() {
    let _ = BUDGET.try_with(|b| b.stalled.store(true, Ordering::Relaxed));
}

/// Whether a store call of the current budget was cut or timed out ([`mark_stalled`]).
pub fn stalled() -> bool {
    BUDGET
        .try_with(|b| b.stalled.load(Ordering::Relaxed))
        .unwrap_or(false)
}

/// `call` of operation `op`, cut when the current budget ends (see the module docs).
///
/// # Errors
/// `call`'s own, or [`StoreError::Unavailable`] when the budget ended first (the outcome of a
/// write is then unknown).
pub async fn bounded<T>(
    op: &str,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    let Some(left) = remaining() else {
        return call.await;
    };
    match tokio::time::timeout(left, call).await {
        Ok(result) => result,
        Err(_) => {
            mark_stalled();
            Err(StoreError::Unavailable(
                format!(
                "{op}: no answer before the invocation's deadline ({} ms left), outcome unknown",
                left.as_millis()
            )
                .into(),
            ))
        }
    }
}

/// A store whose every call is [`bounded`] by the invocation's budget, and whose releases are
/// skipped once the store stopped answering in that invocation. Wraps any
/// [`IdempotencyStore`] and, for the reconciler and the metrics function, any [`InFlightIndex`].
#[derive(Debug, Clone)]
pub struct Bounded<S: ?Sized> {
    inner: Arc<S>,
}

impl<S: ?Sized> Bounded<S> {
    /// `inner`, bounded.
    pub fn new(inner: Arc<S>) -> Self {
        Self { inner }
    }
}

#[async_trait]
impl<S: IdempotencyStore + ?Sized> IdempotencyStore for Bounded<S> {
    async fn reserve(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> Result<Reservation, StoreError> {
        bounded("reserve", self.inner.reserve(record, now_ms)).await
    }

    /// Forwarded whole, so an inner store that writes both in one request still does.
    async fn reserve_with_guard(
        &self,
        record: &IdempotencyRecord,
        natural_key: Option<&NaturalKey>,
        now_ms: i64,
    ) -> Result<ReserveAndGuard, StoreError> {
        let call = self.inner.reserve_with_guard(record, natural_key, now_ms);
        bounded("reserve_with_guard", call).await
    }

    async fn take_over(
        &self,
        pk: &str,
        old_owner: &str,
        new_owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<TakeOver, StoreError> {
        let call = self
            .inner
            .take_over(pk, old_owner, new_owner, lease_until_ms, now_ms);
        bounded("take_over", call).await
    }

    async fn commit(
        &self,
        pk: &str,
        owner: &str,
        effect_id: &str,
        row: &BusinessRow,
        now_ms: i64,
    ) -> Result<CommitOutcome, StoreError> {
        bounded(
            "commit",
            self.inner.commit(pk, owner, effect_id, row, now_ms),
        )
        .await
    }

    async fn guard(
        &self,
        record: &IdempotencyRecord,
        natural_key: &NaturalKey,
        now_ms: i64,
    ) -> Result<GuardOutcome, StoreError> {
        bounded("guard", self.inner.guard(record, natural_key, now_ms)).await
    }

    /// Skipped once a call of this invocation was cut: the lease runs out by itself.
    async fn release_lease(&self, pk: &str, owner: &str, now_ms: i64) -> Result<(), StoreError> {
        if stalled() {
            return Err(StoreError::Unavailable(
                "release_lease: skipped, the store stopped answering in this invocation"
                    .to_string()
                    .into(),
            ));
        }
        bounded("release_lease", self.inner.release_lease(pk, owner, now_ms)).await
    }

    async fn extend_lease(
        &self,
        pk: &str,
        owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let call = self.inner.extend_lease(pk, owner, lease_until_ms, now_ms);
        bounded("extend_lease", call).await
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
        let call = self
            .inner
            .finish(pk, owner, status, error, item, guard, now_ms);
        bounded("finish", call).await
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
        let call = self.inner.finish_without_effect(
            record,
            owner,
            status,
            error,
            item,
            natural_key,
            now_ms,
        );
        bounded("finish", call).await
    }

    async fn routed(&self, pk: &str, owner: &str, now_ms: i64) -> Result<bool, StoreError> {
        bounded("routed", self.inner.routed(pk, owner, now_ms)).await
    }

    async fn record_effect_id(
        &self,
        pk: &str,
        effect_id: &str,
        now_ms: i64,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let call = self.inner.record_effect_id(pk, effect_id, now_ms);
        bounded("record_effect_id", call).await
    }

    async fn get(&self, pk: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        bounded("get", self.inner.get(pk)).await
    }

    fn row_columns(&self) -> RowColumns {
        self.inner.row_columns()
    }
}

#[async_trait]
impl<S: BusinessRows + ?Sized> BusinessRows for Bounded<S> {
    async fn business_row(&self, source_event: &str) -> Result<Option<BusinessRow>, StoreError> {
        bounded("business_row", self.inner.business_row(source_event)).await
    }
}

#[async_trait]
impl<S: Purge + ?Sized> Purge for Bounded<S> {
    async fn purge_expired(
        &self,
        now_ms: i64,
        limit: usize,
    ) -> Result<Option<PurgeCount>, StoreError> {
        bounded("purge_expired", self.inner.purge_expired(now_ms, limit)).await
    }
}

#[async_trait]
impl<S: InFlightIndex + ?Sized> InFlightIndex for Bounded<S> {
    async fn multi_effect_keys(&self) -> Result<usize, StoreError> {
        bounded("multi_effect_keys", self.inner.multi_effect_keys()).await
    }

    async fn stale_in_flight(
        &self,
        shard: &str,
        created_before_ms: i64,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<InFlightPage, StoreError> {
        let call = self
            .inner
            .stale_in_flight(shard, created_before_ms, cursor, limit);
        bounded("stale_in_flight", call).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

    /// A store that never answers (a black-holed network).
    struct Silent;

    #[async_trait]
    impl InFlightIndex for Silent {
        async fn multi_effect_keys(&self) -> Result<usize, StoreError> {
            std::future::pending().await
        }
        async fn stale_in_flight(
            &self,
            _: &str,
            _: i64,
            _: Option<String>,
            _: usize,
        ) -> Result<InFlightPage, StoreError> {
            std::future::pending().await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_never_answers_ends_with_the_budget_and_marks_the_store_stalled() {
        let store = Bounded::new(Arc::new(Silent));
        let started = Instant::now();
        let (result, was_stalled) = scope(Budget::for_next(Duration::from_secs(3)), async {
            let r = store.multi_effect_keys().await;
            (r, stalled())
        })
        .await;
        assert!(
            matches!(result, Err(StoreError::Unavailable(_))),
            "{result:?}"
        );
        assert_eq!(started.elapsed(), Duration::from_secs(3));
        assert!(was_stalled);
    }

    #[tokio::test]
    async fn a_release_after_a_cut_call_is_skipped_and_outside_a_scope_nothing_is_cut() {
        let memory = Arc::new(MemoryStore::new());
        let store = Bounded::new(memory.clone());
        let skipped = scope(Budget::for_next(Duration::from_secs(60)), async {
            mark_stalled();
            store.release_lease("k", "owner", 0).await
        })
        .await;
        assert!(
            matches!(skipped, Err(StoreError::Unavailable(ref m)) if m.message().contains("skipped"))
        );
        assert_eq!(remaining(), None);
        assert!(!stalled());
        assert!(store.release_lease("k", "owner", 0).await.is_ok());
    }

    #[test]
    fn a_budget_past_its_end_is_empty() {
        let budget = Budget::until_epoch_ms(1_000, 5_000);
        assert!(budget.until <= Instant::now());
    }
}
