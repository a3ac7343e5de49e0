//! The store port as one simulated task sees it: every call parks (the request in transit, and
//! for a write the answer in transit after it applied), so the scheduler interleaves calls and a
//! crash can fall on either side; the seed's store faults are injected here. PostgreSQL's own
//! semantics and outages are in `pg_faults` and `outages`.

use std::sync::Arc;

use async_trait::async_trait;
use gate::record::{BusinessRow, IdempotencyRecord, NaturalKey, RecordStatus};
use gate::store::{
    settle_unknown_commit, BusinessRows, CommitOutcome, FinishGuard, FinishOutcome, GuardOutcome,
    IdempotencyStore, InFlightIndex, InFlightPage, Reservation, StoreError, TakeOver,
    UnknownCommit,
};
use rand::Rng;

use super::shared::{Shared, TaskId};

/// The memory store as one task sees it: parks before each call (the request in transit) and,
/// for writes, after it applied (the answer in transit), so a crash can fall on either side;
/// injects throttling, transaction conflicts, outages and errors after an applied write.
pub(crate) struct SimStore {
    pub shared: Arc<Shared>,
    pub task: TaskId,
}

impl SimStore {
    async fn before(&self, label: &'static str, commit: bool) -> Result<(), StoreError> {
        // A store that stopped answering (`outages`; no draw without a stall).
        self.through_stall(label).await?;
        let latency = self.shared.state().between(2, 25);
        self.shared.park(self.task, label, latency).await;
        let mut st = self.shared.state();
        let p = st.profile.store_error;
        if st.draw(p) {
            let kind = st.between(0, 2);
            let (name, err) = match kind {
                0 => (
                    "store_throttled",
                    StoreError::Throttled(format!("{label}: simulated throttling").into()),
                ),
                // A write that met a running transaction: the commit's cancellation
                // `[None, TransactionConflict, None]` after the adapter's retries, or the reserve
                // `PutItem` / take-over `UpdateItem` answered `TransactionConflictException`.
                // Nothing was written; the gate retries the record (a batch item failure).
                1 if commit || matches!(label, "reserve" | "take_over") => (
                    "store_transaction_conflict",
                    StoreError::TransactionConflict(format!("{label}: simulated conflict").into()),
                ),
                _ => (
                    "store_unavailable",
                    StoreError::Unavailable(format!("{label}: simulated outage").into()),
                ),
            };
            st.count(name);
            return Err(err);
        }
        Ok(())
    }

    /// After a write applied: the answer travels back. [`Answer::Error`]: the caller gets an
    /// error (a timeout after the write); [`Answer::LostThenRetried`]: the answer is lost and the
    /// client (the SDK) sends the same request again, which meets the write it repeats; the
    /// caller gets the retry's answer. `kind` names the write in the fault table
    /// (`{kind}_answer_lost_retried`). A commit's lost answer is, in a third of the cases each,
    /// followed by a retry built again ([`Answer::LostThenRebuilt`]) within or after DynamoDB's
    /// 10-minute token window (`commit_answer_lost_rebuilt_retry_within_10_min`,
    /// `commit_answer_lost_rebuilt_retry_after_10_min`).
    async fn after(&self, label: &'static str, kind: &'static str) -> Answer {
        // The answer lost in a stall (`outages`; no draw without a stall).
        if self.answer_lost_in_stall(kind).await {
            return Answer::Error;
        }
        let (latency, answer) = {
            let mut st = self.shared.state();
            let p = st.profile.store_ambiguous;
            let q = st.profile.store_lost_retried;
            let answer = if st.fault(p, "store_applied_then_error") {
                Answer::Error
            } else if st.lost_answer_draw(q) {
                // The variant comes from the lost-answer stream too: the main one draws exactly
                // what it drew before.
                let variant = if kind == "commit" {
                    st.lost_answer_rng.random_range(0..3u8)
                } else {
                    0
                };
                match variant {
                    0 => {
                        st.count(&format!("{kind}_answer_lost_retried"));
                        Answer::LostThenRetried
                    }
                    1 => {
                        st.count("commit_answer_lost_rebuilt_retry_within_10_min");
                        Answer::LostThenRebuilt {
                            after_token_window: false,
                        }
                    }
                    _ => {
                        st.count("commit_answer_lost_rebuilt_retry_after_10_min");
                        Answer::LostThenRebuilt {
                            after_token_window: true,
                        }
                    }
                }
            } else {
                Answer::Delivered
            };
            (st.between(1, 5), answer)
        };
        self.shared.park(self.task, label, latency).await;
        if matches!(
            answer,
            Answer::LostThenRetried | Answer::LostThenRebuilt { .. }
        ) {
            // The SDK's attempt timeout, then the retry in transit (its own stream, see above).
            let latency = self
                .shared
                .state()
                .lost_answer_rng
                .random_range(1_000..=4_000);
            self.shared.park(self.task, "store:retry", latency).await;
        }
        answer
    }

    fn ambiguous_error(label: &str) -> StoreError {
        StoreError::Unavailable(format!("{label}: timed out after the write applied").into())
    }
}

/// What reaches the caller of a write that applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// The answer.
    Delivered,
    /// An error instead of the answer.
    Error,
    /// The answer is lost; the client's retry of the same request answers instead.
    LostThenRetried,
    /// A commit's answer is lost; the same holder sends the commit again with its items built
    /// again (a later `updated_at` and `booked_at`; on DynamoDB also maps in another order)
    /// under the same `ClientRequestToken`. Within 10 minutes of the first, DynamoDB answers
    /// `IdempotentParameterMismatchException` and the adapter settles the outcome with one
    /// consistent read ([`gate::store::settle_unknown_commit`]); after them the token is new
    /// and the request runs again.
    LostThenRebuilt {
        /// Whether the retry comes after the 10-minute token window.
        after_token_window: bool,
    },
}

/// How much later than the first the rebuilt commit is built, ms: 11 minutes, past DynamoDB's
/// 10-minute `ClientRequestToken` window (only the request's timestamps move; the simulation
/// does not wait that long, so the holder's lease and deadline do not move).
const REBUILT_AFTER_WINDOW_MS: i64 = 11 * 60_000;

/// How much later the rebuilt commit within the window is built, ms.
const REBUILT_WITHIN_WINDOW_MS: i64 = 2_000;

#[async_trait]
impl IdempotencyStore for SimStore {
    async fn reserve(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> Result<Reservation, StoreError> {
        self.before("reserve", false).await?;
        let store = &self.shared.store;
        let r = self
            .pg_attempts("reserve", || store.reserve(record, now_ms))
            .await?;
        let answer = match self.after("reserve:ack", "reserve").await {
            Answer::Delivered => r,
            Answer::Error => Err(Self::ambiguous_error("reserve")),
            Answer::LostThenRetried | Answer::LostThenRebuilt { .. } => {
                store.reserve(record, now_ms).await
            }
        };
        if let (Ok(Reservation::Reserved), Some(token)) = (&answer, &record.lease_owner) {
            self.shared.state().acquired(token, self.task);
        }
        answer
    }

    async fn take_over(
        &self,
        pk: &str,
        old_owner: &str,
        new_owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<TakeOver, StoreError> {
        self.before("take_over", false).await?;
        let store = &self.shared.store;
        let r = self
            .pg_attempts("take_over", || {
                store.take_over(pk, old_owner, new_owner, lease_until_ms, now_ms)
            })
            .await?;
        let answer = match self.after("take_over:ack", "take_over").await {
            Answer::Delivered => r,
            Answer::Error => Err(Self::ambiguous_error("take_over")),
            Answer::LostThenRetried | Answer::LostThenRebuilt { .. } => {
                store
                    .take_over(pk, old_owner, new_owner, lease_until_ms, now_ms)
                    .await
            }
        };
        if let Ok(TakeOver::Taken(_)) = &answer {
            self.shared.state().acquired(new_owner, self.task);
        }
        answer
    }

    async fn commit(
        &self,
        pk: &str,
        owner: &str,
        effect_id: &str,
        booking: &BusinessRow,
        now_ms: i64,
    ) -> Result<CommitOutcome, StoreError> {
        self.before("commit", true).await?;
        let store = &self.shared.store;
        let r = self
            .pg_attempts("commit", || {
                store.commit(pk, owner, effect_id, booking, now_ms)
            })
            .await?;
        match self.after("commit:ack", "commit").await {
            Answer::Delivered => r,
            Answer::Error => Err(Self::ambiguous_error("commit")),
            // DynamoDB would answer a retry within 10 minutes from its `ClientRequestToken`; the
            // memory store cannot, so the retry meets the committed record (the harder case).
            Answer::LostThenRetried => store.commit(pk, owner, effect_id, booking, now_ms).await,
            Answer::LostThenRebuilt { after_token_window } => {
                let later = now_ms
                    + if after_token_window {
                        REBUILT_AFTER_WINDOW_MS
                    } else {
                        REBUILT_WITHIN_WINDOW_MS
                    };
                let rebuilt = BusinessRow {
                    written_at_ms: later,
                    ..booking.clone()
                };
                if after_token_window {
                    // A new token: the transaction runs again and meets what the first did.
                    return store.commit(pk, owner, effect_id, &rebuilt, later).await;
                }
                // `IdempotentParameterMismatchException`: the adapter settles the outcome.
                match settle_unknown_commit(store.as_ref(), pk, owner, effect_id).await? {
                    UnknownCommit::Ours => Ok(CommitOutcome::Committed),
                    // Not landed: sent once more under a new token.
                    UnknownCommit::StillHeld => {
                        store.commit(pk, owner, effect_id, &rebuilt, later).await
                    }
                    UnknownCommit::Refused(record) => Ok(CommitOutcome::Refused(record)),
                }
            }
        }
    }

    /// The guard is atomic here and no scheduling point: no latency, no fault, no draw, so a
    /// seed's schedule does not depend on it (the seeds of `sim/tests/regressions_dst.rs` name
    /// paths through those schedules). With latency and the store's faults at this step (a crash
    /// before and after it, its answer lost, an error), seeds 0 to 1,499 ran with no violation.
    async fn guard(
        &self,
        record: &IdempotencyRecord,
        natural_key: &NaturalKey,
        now_ms: i64,
    ) -> Result<GuardOutcome, StoreError> {
        self.shared.store.guard(record, natural_key, now_ms).await
    }

    async fn release_lease(&self, pk: &str, owner: &str, now_ms: i64) -> Result<(), StoreError> {
        if let Some(skipped) = self.release_skipped() {
            return Err(skipped);
        }
        self.before("release_lease", false).await?;
        let store = &self.shared.store;
        let r = self
            .pg_attempts("release_lease", || store.release_lease(pk, owner, now_ms))
            .await?;
        match self.after("release_lease:ack", "release_lease").await {
            Answer::Delivered => r,
            Answer::Error => Err(Self::ambiguous_error("release_lease")),
            Answer::LostThenRetried | Answer::LostThenRebuilt { .. } => {
                store.release_lease(pk, owner, now_ms).await
            }
        }
    }

    /// Parks before and after like every fenced write, with the store's faults (an error, a lost
    /// answer retried): it runs only when a slow reserve, take-over or store retry (the `slow`
    /// fault) left the holder less lease than a call and a commit need, so a seed without such
    /// a delay keeps its schedule.
    async fn extend_lease(
        &self,
        pk: &str,
        owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        self.before("extend_lease", false).await?;
        let store = &self.shared.store;
        let r = self
            .pg_attempts("extend_lease", || {
                store.extend_lease(pk, owner, lease_until_ms, now_ms)
            })
            .await?;
        match self.after("extend_lease:ack", "extend_lease").await {
            Answer::Delivered => r,
            Answer::Error => Err(Self::ambiguous_error("extend_lease")),
            Answer::LostThenRetried | Answer::LostThenRebuilt { .. } => {
                store.extend_lease(pk, owner, lease_until_ms, now_ms).await
            }
        }
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
        // Mark first: nothing is sent yet, so a failed finish makes no item ambiguous.
        self.before("finish", false).await?;
        let store = &self.shared.store;
        let r = self
            .pg_attempts("finish", || {
                store.finish(pk, owner, status, error, item, guard, now_ms)
            })
            .await?;
        match self.after("finish:ack", "finish").await {
            Answer::Delivered => r,
            Answer::Error => Err(Self::ambiguous_error("finish")),
            Answer::LostThenRetried | Answer::LostThenRebuilt { .. } => {
                store
                    .finish(pk, owner, status, error, item, guard, now_ms)
                    .await
            }
        }
    }

    async fn routed(&self, pk: &str, owner: &str, now_ms: i64) -> Result<bool, StoreError> {
        if let Err(e) = self.before("routed", false).await {
            self.shared.state().ambiguate(self.task, Some(pk));
            return Err(e);
        }
        let store = &self.shared.store;
        // Whether an attempt's confirmation landed (a PostgreSQL retry of a landed one answers
        // `false`).
        let landed = std::sync::atomic::AtomicBool::new(false);
        let r = self
            .pg_attempts("routed", || async {
                let r = store.routed(pk, owner, now_ms).await;
                if matches!(r, Ok(true)) {
                    landed.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                r
            })
            .await;
        {
            // The confirmation landed (or not) now, whatever the caller hears: a send confirmed
            // will not be repeated; one not confirmed may be (whoever takes it over sends again).
            let mut st = self.shared.state();
            if landed.load(std::sync::atomic::Ordering::SeqCst) {
                st.close_sends(self.task, pk);
            } else {
                st.ambiguate(self.task, Some(pk));
            }
        }
        let r = r?;
        match self.after("routed:ack", "routed").await {
            Answer::Delivered => r,
            Answer::Error => Err(Self::ambiguous_error("routed")),
            Answer::LostThenRetried | Answer::LostThenRebuilt { .. } => {
                store.routed(pk, owner, now_ms).await
            }
        }
    }

    async fn record_effect_id(
        &self,
        pk: &str,
        effect_id: &str,
        now_ms: i64,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.before("record_effect_id", false).await?;
        let store = &self.shared.store;
        let r = self
            .pg_attempts("record_effect_id", || {
                store.record_effect_id(pk, effect_id, now_ms)
            })
            .await?;
        match self.after("record_effect_id:ack", "record_effect_id").await {
            Answer::Delivered => r,
            Answer::Error => Err(Self::ambiguous_error("record_effect_id")),
            Answer::LostThenRetried | Answer::LostThenRebuilt { .. } => {
                store.record_effect_id(pk, effect_id, now_ms).await
            }
        }
    }

    async fn get(&self, pk: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.before("get", false).await?;
        self.shared.store.get(pk).await
    }

    fn row_columns(&self) -> gate::record::RowColumns {
        self.shared.store.row_columns()
    }
}

#[async_trait]
impl BusinessRows for SimStore {
    async fn business_row(&self, source_event: &str) -> Result<Option<BusinessRow>, StoreError> {
        self.before("booking", false).await?;
        self.shared.store.business_row(source_event).await
    }
}

/// The index reads fail as the schedule draws, as the write path's calls do.
#[async_trait]
impl InFlightIndex for SimStore {
    async fn multi_effect_keys(&self) -> Result<usize, StoreError> {
        self.before("multi_effect_keys", false).await?;
        self.shared.store.multi_effect_keys().await
    }

    async fn stale_in_flight(
        &self,
        shard: &str,
        created_before_ms: i64,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<InFlightPage, StoreError> {
        self.before("stale_in_flight", false).await?;
        self.shared
            .store
            .stale_in_flight(shard, created_before_ms, cursor, limit)
            .await
    }
}
