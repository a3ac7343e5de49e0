//! [`DelayedStore`]: a latency model of the store, one decorator for the benchmark (tokio sleep)
//! and the simulator's sustained-rate replay (simulated time).

use async_trait::async_trait;

use gate::record::{BusinessRow, IdempotencyRecord, NaturalKey, RecordStatus};
use gate::store::{
    CommitOutcome, FinishGuard, FinishOutcome, GuardOutcome, IdempotencyStore, Reservation,
    StoreError, TakeOver,
};

/// What a [`DelayedStore`] waits before each request: a tokio sleep in a benchmark, simulated
/// time in the simulator.
#[async_trait]
pub trait Pause: Send + Sync {
    /// Waits once (one request's latency).
    async fn pause(&self);
}

/// A store that waits [`Pause::pause`] before passing each write-path request to `inner`: a
/// latency model of DynamoDB, which serves concurrent requests in parallel. One decorator for
/// the benchmark and the simulator's sustained-rate replay.
pub struct DelayedStore<P> {
    /// The store that answers.
    pub inner: std::sync::Arc<dyn IdempotencyStore>,
    /// What each request waits first.
    pub pause: P,
}

#[async_trait]
impl<P: Pause> IdempotencyStore for DelayedStore<P> {
    async fn reserve(&self, r: &IdempotencyRecord, now: i64) -> Result<Reservation, StoreError> {
        self.pause.pause().await;
        self.inner.reserve(r, now).await
    }
    async fn take_over(
        &self,
        pk: &str,
        old: &str,
        new: &str,
        until: i64,
        now: i64,
    ) -> Result<TakeOver, StoreError> {
        self.pause.pause().await;
        self.inner.take_over(pk, old, new, until, now).await
    }
    async fn commit(
        &self,
        pk: &str,
        owner: &str,
        effect: &str,
        b: &BusinessRow,
        now: i64,
    ) -> Result<CommitOutcome, StoreError> {
        self.pause.pause().await;
        self.inner.commit(pk, owner, effect, b, now).await
    }
    async fn guard(
        &self,
        record: &IdempotencyRecord,
        key: &NaturalKey,
        now: i64,
    ) -> Result<GuardOutcome, StoreError> {
        self.pause.pause().await;
        self.inner.guard(record, key, now).await
    }
    async fn release_lease(&self, pk: &str, owner: &str, now: i64) -> Result<(), StoreError> {
        self.pause.pause().await;
        self.inner.release_lease(pk, owner, now).await
    }
    async fn extend_lease(
        &self,
        pk: &str,
        owner: &str,
        until: i64,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.pause.pause().await;
        self.inner.extend_lease(pk, owner, until, now).await
    }
    async fn finish(
        &self,
        pk: &str,
        owner: &str,
        status: RecordStatus,
        error: &str,
        item: &[u8],
        guard: FinishGuard,
        now: i64,
    ) -> Result<FinishOutcome, StoreError> {
        self.pause.pause().await;
        self.inner
            .finish(pk, owner, status, error, item, guard, now)
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
        now: i64,
    ) -> Result<FinishOutcome, StoreError> {
        self.pause.pause().await;
        self.inner
            .finish_without_effect(record, owner, status, error, item, natural_key, now)
            .await
    }
    async fn routed(&self, pk: &str, owner: &str, now: i64) -> Result<bool, StoreError> {
        self.pause.pause().await;
        self.inner.routed(pk, owner, now).await
    }
    async fn record_effect_id(
        &self,
        pk: &str,
        effect: &str,
        now: i64,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.pause.pause().await;
        self.inner.record_effect_id(pk, effect, now).await
    }
    async fn get(&self, pk: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.pause.pause().await;
        self.inner.get(pk).await
    }

    fn row_columns(&self) -> gate::record::RowColumns {
        self.inner.row_columns()
    }
}
