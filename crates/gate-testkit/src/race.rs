//! [`RacedIndex`]: the reconciler's `InFlight` index with something done between the read of a
//! page and the reconciler's use of it: the race a second reconciler, a twice-delivered
//! scheduled event or a late consumer makes with the records the page names.

use std::sync::Arc;

use async_trait::async_trait;

use gate::store::{InFlightIndex, InFlightPage, StoreError};

/// What a [`RacedIndex`] does after its inner index answered a page with entries, before the
/// page is passed on (e.g. take the records over or commit them as "someone else", or wait at a
/// barrier for a second reconciler to read the same page).
#[async_trait]
pub trait AfterRead: Send + Sync {
    /// Runs once for each page holding at least one entry.
    ///
    /// # Errors
    /// Any [`StoreError`]: it is the index's answer for the page, the page is dropped.
    async fn after_read(&self, page: &InFlightPage) -> Result<(), StoreError>;
}

/// An [`InFlightIndex`] that answers as `inner` does, running [`AfterRead::after_read`] on every
/// page with entries before it is returned. `multi_effect_keys` passes through.
pub struct RacedIndex<A> {
    /// The index that answers.
    pub inner: Arc<dyn InFlightIndex>,
    /// What happens between the read and the reconciler's use of the page.
    pub after: A,
}

#[async_trait]
impl<A: AfterRead> InFlightIndex for RacedIndex<A> {
    async fn multi_effect_keys(&self) -> Result<usize, StoreError> {
        self.inner.multi_effect_keys().await
    }

    async fn stale_in_flight(
        &self,
        shard: &str,
        created_before_ms: i64,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<InFlightPage, StoreError> {
        let page = self
            .inner
            .stale_in_flight(shard, created_before_ms, cursor, limit)
            .await?;
        if !page.entries.is_empty() {
            self.after.after_read(&page).await?;
        }
        Ok(page)
    }
}
