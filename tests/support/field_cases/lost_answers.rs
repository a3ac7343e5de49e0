//! A store double whose writes land and lose their answer, as after an SDK attempt timeout.

use super::*;

/// A store (the write path, [`IdempotencyStore`]) whose writes of the named kinds land and then
/// lose their answer: each such call is
/// applied, then sent again as the client's retry, and the caller gets the retry's answer (what
/// the SDK does after an attempt timeout). Kinds: `reserve`, `take_over`, `commit`,
/// `release_lease`, `finish`, `routed`, `record_effect_id`. `times` bounds how many calls get the
/// fault (`usize::MAX` for all).
pub struct LostAnswers {
    inner: Arc<dyn IdempotencyStore>,
    kinds: Vec<&'static str>,
    left: std::sync::atomic::AtomicUsize,
    /// How many calls were retried, by kind, in order.
    pub retried: std::sync::Mutex<Vec<&'static str>>,
}

impl LostAnswers {
    /// Wraps `inner`: the first `times` calls of `kinds` lose their answer.
    pub fn new(inner: Arc<dyn IdempotencyStore>, kinds: &[&'static str], times: usize) -> Self {
        Self {
            inner,
            kinds: kinds.to_vec(),
            left: times.into(),
            retried: Default::default(),
        }
    }

    fn lose(&self, kind: &'static str) -> bool {
        use std::sync::atomic::Ordering;
        let hit = self.kinds.contains(&kind)
            && self
                .left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        if hit {
            self.retried
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(kind);
        }
        hit
    }
}

/// Applies `$call`, and when the fault hits, applies it again and answers with the retry.
macro_rules! twice_if {
    ($self:ident, $kind:literal, $call:expr) => {{
        let first = $call;
        if $self.lose($kind) {
            $call
        } else {
            first
        }
    }};
}

#[async_trait]
impl IdempotencyStore for LostAnswers {
    async fn reserve(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> Result<Reservation, gate::store::StoreError> {
        twice_if!(self, "reserve", self.inner.reserve(record, now_ms).await)
    }
    async fn take_over(
        &self,
        pk: &str,
        old_owner: &str,
        new_owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<gate::store::TakeOver, gate::store::StoreError> {
        twice_if!(
            self,
            "take_over",
            self.inner
                .take_over(pk, old_owner, new_owner, lease_until_ms, now_ms)
                .await
        )
    }
    async fn commit(
        &self,
        pk: &str,
        owner: &str,
        effect_id: &str,
        booking: &BusinessRow,
        now_ms: i64,
    ) -> Result<gate::store::CommitOutcome, gate::store::StoreError> {
        twice_if!(
            self,
            "commit",
            self.inner
                .commit(pk, owner, effect_id, booking, now_ms)
                .await
        )
    }
    async fn guard(
        &self,
        record: &IdempotencyRecord,
        natural_key: &NaturalKey,
        now_ms: i64,
    ) -> Result<gate::store::GuardOutcome, gate::store::StoreError> {
        twice_if!(
            self,
            "guard",
            self.inner.guard(record, natural_key, now_ms).await
        )
    }
    async fn release_lease(
        &self,
        pk: &str,
        owner: &str,
        now_ms: i64,
    ) -> Result<(), gate::store::StoreError> {
        twice_if!(
            self,
            "release_lease",
            self.inner.release_lease(pk, owner, now_ms).await
        )
    }
    async fn extend_lease(
        &self,
        pk: &str,
        owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<bool, gate::store::StoreError> {
        twice_if!(
            self,
            "extend_lease",
            self.inner
                .extend_lease(pk, owner, lease_until_ms, now_ms)
                .await
        )
    }
    async fn finish(
        &self,
        pk: &str,
        owner: &str,
        status: RecordStatus,
        error: &str,
        item: &[u8],
        guard: gate::store::FinishGuard,
        now_ms: i64,
    ) -> Result<gate::store::FinishOutcome, gate::store::StoreError> {
        twice_if!(
            self,
            "finish",
            self.inner
                .finish(pk, owner, status, error, item, guard, now_ms)
                .await
        )
    }
    async fn routed(
        &self,
        pk: &str,
        owner: &str,
        now_ms: i64,
    ) -> Result<bool, gate::store::StoreError> {
        // A confirmation retried after it landed is refused and ignored: the caller's answer is
        // the retry's (`false`), which the gate treats as "confirmed or taken over".
        twice_if!(self, "routed", self.inner.routed(pk, owner, now_ms).await)
    }
    async fn record_effect_id(
        &self,
        pk: &str,
        effect_id: &str,
        now_ms: i64,
    ) -> Result<Option<IdempotencyRecord>, gate::store::StoreError> {
        twice_if!(
            self,
            "record_effect_id",
            self.inner.record_effect_id(pk, effect_id, now_ms).await
        )
    }
    async fn get(&self, pk: &str) -> Result<Option<IdempotencyRecord>, gate::store::StoreError> {
        self.inner.get(pk).await
    }
    fn row_columns(&self) -> gate::record::RowColumns {
        self.inner.row_columns()
    }
}
