//! The store decorator of the `stores` part: it times each port call of the store it wraps and
//! counts them by operation, so it forwards every port method of [`IdempotencyStore`].

use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use gate::record::{BusinessRow, IdempotencyRecord, NaturalKey, RecordStatus};
use gate::store::{
    CommitOutcome, FinishGuard, FinishOutcome, GuardOutcome, IdempotencyStore, Reservation,
    ReserveAndGuard, StoreError, TakeOver,
};

/// The store decorator that times each port call (µs) and counts them by operation.
pub struct Timed {
    inner: Arc<dyn IdempotencyStore>,
    calls: Mutex<Vec<(&'static str, u64)>>,
}

impl Timed {
    pub(super) fn new(inner: Arc<dyn IdempotencyStore>) -> Self {
        Self {
            inner,
            calls: Mutex::new(Vec::new()),
        }
    }

    /// The calls since the last `take`, in order: (operation, µs).
    pub(super) fn take(&self) -> Vec<(&'static str, u64)> {
        std::mem::take(&mut *self.calls.lock().unwrap_or_else(|e| e.into_inner()))
    }

    async fn time<T>(&self, op: &'static str, f: impl std::future::Future<Output = T>) -> T {
        let t = Instant::now();
        let r = f.await;
        let us = t.elapsed().as_micros() as u64;
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((op, us));
        r
    }
}

#[async_trait]
impl IdempotencyStore for Timed {
    async fn reserve(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> Result<Reservation, StoreError> {
        self.time("reserve", self.inner.reserve(record, now_ms))
            .await
    }

    /// Timed as one call (the consumer's step 2 with its guard): the inner store's own, so
    /// PostgreSQL's one statement stays one.
    async fn reserve_with_guard(
        &self,
        record: &IdempotencyRecord,
        natural_key: Option<&NaturalKey>,
        now_ms: i64,
    ) -> Result<ReserveAndGuard, StoreError> {
        let f = self.inner.reserve_with_guard(record, natural_key, now_ms);
        self.time("reserve_with_guard", f).await
    }

    async fn take_over(
        &self,
        pk: &str,
        old_owner: &str,
        new_owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<TakeOver, StoreError> {
        let f = self
            .inner
            .take_over(pk, old_owner, new_owner, lease_until_ms, now_ms);
        self.time("take_over", f).await
    }

    async fn commit(
        &self,
        pk: &str,
        owner: &str,
        effect_id: &str,
        booking: &BusinessRow,
        now_ms: i64,
    ) -> Result<CommitOutcome, StoreError> {
        let f = self.inner.commit(pk, owner, effect_id, booking, now_ms);
        self.time("commit", f).await
    }

    async fn guard(
        &self,
        record: &IdempotencyRecord,
        natural_key: &NaturalKey,
        now_ms: i64,
    ) -> Result<GuardOutcome, StoreError> {
        self.time("guard", self.inner.guard(record, natural_key, now_ms))
            .await
    }

    async fn release_lease(&self, pk: &str, owner: &str, now_ms: i64) -> Result<(), StoreError> {
        self.time("release_lease", self.inner.release_lease(pk, owner, now_ms))
            .await
    }

    async fn extend_lease(
        &self,
        pk: &str,
        owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let f = self.inner.extend_lease(pk, owner, lease_until_ms, now_ms);
        self.time("extend_lease", f).await
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
        let f = self
            .inner
            .finish(pk, owner, status, error, item, guard, now_ms);
        self.time("finish", f).await
    }

    async fn routed(&self, pk: &str, owner: &str, now_ms: i64) -> Result<bool, StoreError> {
        self.time("routed", self.inner.routed(pk, owner, now_ms))
            .await
    }

    async fn record_effect_id(
        &self,
        pk: &str,
        effect_id: &str,
        now_ms: i64,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let f = self.inner.record_effect_id(pk, effect_id, now_ms);
        self.time("record_effect_id", f).await
    }

    async fn get(&self, pk: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.time("get", self.inner.get(pk)).await
    }

    fn row_columns(&self) -> gate::record::RowColumns {
        self.inner.row_columns()
    }
}
