//! Over 600 lines: one decorator per port (store, server, manual queue), each small; they share the
//! parking and fault plumbing.
//!
//! The gate's ports as the simulation provides them: the terminal core in process
//! ([`CoreTerminal`]), and per-task decorators of the store, the terminal and the manual queue
//! that park at every call (so the scheduler interleaves them) and inject the seed's faults.
//! A [`SkewedClock`] gives each simulated host its own idea of now.

use std::sync::Arc;

use async_trait::async_trait;
use gate::idempotency_key::header_value;
use gate::manual::{ManualItem, ManualQueue, ManualQueueError};
use gate::record::{BusinessRow, IdempotencyRecord, NaturalKey, RecordStatus};
use gate::store::{
    settle_unknown_commit, BusinessRows, CommitOutcome, FinishGuard, FinishOutcome, GuardOutcome,
    IdempotencyStore, InFlightIndex, InFlightPage, Reservation, StoreError, TakeOver,
    UnknownCommit,
};
pub(crate) use gate_testkit::SkewedClock;
use rand::Rng;
use truck_slot::terminal::{
    classify_claim, classify_lookup, AnswerDetail, CallOutcome, LookupOutcome, SlotTerminal,
};

use super::check::{identity_of_item, pk_of_item};
use super::shared::{Deferred, OpenSend, Shared, TaskId};
use crate::terminal::TerminalCore;

/// The terminal simulator's core as a [`SlotTerminal`], in process: `POST /slots` with the
/// `Idempotency-Key` header classified by [`classify_claim`], and `GET
/// /slots?idempotency_key=K` (`200 {"slot": {...}}` or `404`). No HTTP, no real time.
#[derive(Clone)]
pub struct CoreTerminal {
    core: Arc<TerminalCore>,
}

impl CoreTerminal {
    /// Wraps a terminal core (configure it with latency 0 and no random faults for determinism).
    pub fn new(core: Arc<TerminalCore>) -> Self {
        Self { core }
    }
}

#[async_trait]
impl SlotTerminal for CoreTerminal {
    async fn claim(&self, op_key: &str, request: &[u8]) -> CallOutcome {
        let header = match header_value(op_key) {
            Ok(header) => header,
            Err(why) => {
                return CallOutcome::Permanent {
                    status: 0,
                    detail: AnswerDetail::new(format!("nothing sent: {why}")),
                }
            }
        };
        let r = self
            .core
            .handle("POST", "/slots", None, Some(&header), request)
            .await;
        classify_claim(r.status, &r.body)
    }

    async fn lookup(&self, op_key: &str, _request: &[u8]) -> LookupOutcome {
        let query = format!("idempotency_key={op_key}");
        let r = self
            .core
            .handle("GET", "/slots", Some(&query), None, b"")
            .await;
        classify_lookup(r.status, &r.body)
    }
}

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
/// does not wait that long, so the holder's lease and deadline are as they were).
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

    /// The guard is atomic here and no scheduling point: no latency, no fault, no draw. Each
    /// seed so keeps the schedule it had before the guard existed (the seeds of
    /// `sim/tests/regressions_dst.rs` name paths through those schedules). With latency and the
    /// store's faults at this step (a crash before and after it, its answer lost, an error), seeds
    /// 0 to 1,499 ran with no violation (issue 24).
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

/// What the terminal does with one claim, drawn from the seed.
enum TerminalFault {
    None,
    Unavailable,
    InFlight,
    RunsLater,
    /// A stored rejection: `true` for 409 `idempotency_mismatch`, `false` for 400.
    Rejected(bool),
    Lost,
}

/// The terminal as one task sees it: parks while the request travels and while the answer
/// travels back (a crash on `claim:ack` is "after the claim": the slot exists, the worker is
/// gone) and injects 5xx, 409 in flight, timeouts after which the terminal still runs the request
/// (latency beyond the lease), stored 4xx rejections and responses lost after the slot was made.
pub(crate) struct SimTerminal {
    pub shared: Arc<Shared>,
    pub task: TaskId,
    pub inner: CoreTerminal,
}

#[async_trait]
impl SlotTerminal for SimTerminal {
    async fn claim(&self, op_key: &str, request: &[u8]) -> CallOutcome {
        let latency = self.shared.state().between(30, 1_500);
        self.shared.park(self.task, "claim", latency).await;
        let has_slot = matches!(
            self.inner.lookup(op_key, request).await,
            LookupOutcome::Found(_)
        );
        let fault = {
            let mut st = self.shared.state();
            let p = st.profile.clone();
            let pending = st.deferred.iter().any(|d| d.op_key == op_key);
            if let Some(mismatch) = st.rejected_keys.get(op_key).filter(|_| !has_slot) {
                TerminalFault::Rejected(*mismatch)
            } else if st.fault(p.terminal_5xx, "terminal_5xx") {
                TerminalFault::Unavailable
            } else if st.fault(p.terminal_in_flight, "terminal_409_in_flight") {
                TerminalFault::InFlight
            } else if st.fault(p.terminal_timeout, "terminal_timeout_runs_later") {
                let at_ms = self.shared.now() + st.between(20_000, 300_000);
                st.deferred.push(Deferred {
                    at_ms,
                    op_key: op_key.to_string(),
                    request: request.to_vec(),
                });
                TerminalFault::RunsLater
            } else if !has_slot && !pending && st.fault(p.terminal_4xx, "terminal_4xx_stored") {
                // A 400, or a 409 `idempotency_mismatch`, stored under the key and replayed.
                let mismatch = st.between(0, 1) == 1;
                st.rejected_keys.insert(op_key.to_string(), mismatch);
                TerminalFault::Rejected(mismatch)
            } else if st.fault(p.terminal_lost, "terminal_response_lost") {
                TerminalFault::Lost
            } else {
                TerminalFault::None
            }
        };
        let outcome = match fault {
            TerminalFault::Unavailable => classify_claim(
                503,
                br#"{"type":"service_unavailable","title":"Service Unavailable","status":503}"#,
            ),
            TerminalFault::InFlight => classify_claim(
                409,
                br#"{"type":"idempotency_key_in_flight","title":"Conflict","status":409}"#,
            ),
            TerminalFault::RunsLater => {
                CallOutcome::Transient("claim request timed out (simulated)".into())
            }
            TerminalFault::Rejected(false) => classify_claim(
                400,
                br#"{"type":"invalid_request","title":"Bad Request","status":400,"detail":"release PIN refused (simulated)"}"#,
            ),
            TerminalFault::Rejected(true) => classify_claim(
                409,
                br#"{"type":"idempotency_mismatch","title":"Conflict","status":409,"detail":"key reused with another body (simulated)"}"#,
            ),
            TerminalFault::Lost => match self.inner.claim(op_key, request).await {
                CallOutcome::Done(_) => classify_claim(
                    504,
                    br#"{"type":"upstream_response_lost","title":"Gateway Timeout","status":504}"#,
                ),
                other => other,
            },
            TerminalFault::None => self.inner.claim(op_key, request).await,
        };
        self.shared
            .trace(|| format!("T{} claim {} -> {outcome:?}", self.task, short(op_key)));
        let latency = self.shared.state().between(1, 30);
        self.shared.park(self.task, "claim:ack", latency).await;
        outcome
    }

    async fn lookup(&self, op_key: &str, request: &[u8]) -> LookupOutcome {
        let latency = self.shared.state().between(20, 400);
        self.shared.park(self.task, "lookup", latency).await;
        let fail = {
            let mut st = self.shared.state();
            // Lookups are rare (a record resumed past its claim horizon or its event's end),
            // rarer since the reconciler takes a record as soon as its lease ends (issue 24):
            // a lookup fails five times as often as the profile's rate (the schedule, and so its
            // digest in `regressions_dst.rs`, stays as it was), so that every 500 seeds meet some.
            let p = (st.profile.lookup_error * 5.0).min(1.0);
            st.fault(p, "terminal_lookup_5xx")
        };
        let outcome = if fail {
            LookupOutcome::Transient("lookup answered 503 (simulated)".into())
        } else {
            self.inner.lookup(op_key, request).await
        };
        self.shared
            .trace(|| format!("T{} lookup {} -> {outcome:?}", self.task, short(op_key)));
        outcome
    }
}

/// The manual queue as one task sees it: parks before and after the send, refuses sends, or
/// takes a send and then reports an error. Every send that lands is booked as open until the
/// task's `finish` marks its record (see [`Shared`]), so the checker knows which extra items a
/// fault made legitimate.
pub(crate) struct SimManual {
    pub shared: Arc<Shared>,
    pub task: TaskId,
}

#[async_trait]
impl ManualQueue for SimManual {
    async fn send(&self, item: ManualItem) -> Result<(), ManualQueueError> {
        let latency = self.shared.state().between(5, 40);
        self.shared.park(self.task, "manual.send", latency).await;
        let (refused, ambiguous) = {
            let mut st = self.shared.state();
            let p = st.profile.clone();
            let refused = st.fault(p.manual_error, "manual_send_refused");
            let ambiguous = !refused && st.fault(p.manual_ambiguous, "manual_sent_then_error");
            (refused, ambiguous)
        };
        if refused {
            return Err(ManualQueueError(
                "simulated: manual queue unavailable".into(),
            ));
        }
        let identity = identity_of_item(&item, &self.shared.terminals);
        let pk = pk_of_item(&item, &self.shared.integration, &self.shared.terminals);
        self.shared.trace(|| {
            format!(
                "T{} manual.send {} {}",
                self.task,
                truck_slot::manual_reason_code(item.reason),
                short(&identity)
            )
        });
        let _ = self.shared.manual.send(item).await;
        {
            let mut st = self.shared.state();
            let open = OpenSend { identity, pk };
            if ambiguous {
                *st.ambiguous.entry(open.identity).or_insert(0) += 1;
            } else {
                st.open_sends.entry(self.task).or_default().push(open);
            }
        }
        let latency = self.shared.state().between(1, 10);
        self.shared
            .park(self.task, "manual.send:ack", latency)
            .await;
        if ambiguous {
            return Err(ManualQueueError(
                "simulated: send timed out after the queue took it".into(),
            ));
        }
        Ok(())
    }
}

/// The first 12 characters of a key, for traces.
pub(crate) fn short(key: &str) -> &str {
    key.get(..12.min(key.len())).unwrap_or(key)
}
