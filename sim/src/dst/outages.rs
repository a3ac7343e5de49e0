//! Two store faults seen on a real PostgreSQL failover and a stalled network, each drawn from its
//! own RNG stream ([`super::profile::OUTAGE_STREAM`]), so a schedule without them does not depend
//! on them. docs/SIMULATION.md ("Deterministic simulation") names each fault kind.
//!
//! * **A connection that answers but cannot write** (PostgreSQL schedules only): from the
//!   failover's instant, each host's pool holds 1 to [`POOL_SIZE`] connections still on the
//!   demoted writer, which answer reads and refuse every write with SQLSTATE `25006`, nothing
//!   applied. The adapter drops such a connection and runs the statement again on a fresh one
//!   after its backoff; when every attempt met one, the gate gets `Unavailable`.
//! * **A store that stops answering** (any schedule): for 10 to 90 s every call that starts then
//!   gets no answer and no error. Each attempt waits the adapter's attempt timeout
//!   ([`ATTEMPT_TIMEOUT_PG_MS`], [`ATTEMPT_TIMEOUT_DYNAMO_MS`]) bounded by what the invocation has
//!   left before its deadline less [`ANSWER_MARGIN_MS`] (`gate::store::budget`); spent attempts
//!   or budget give `Unavailable`. A write that applied as the stall began loses its answer. Once
//!   a call of an invocation was cut, its releases are skipped, as `gate::store::budget::Bounded`
//!   does.
//!
//! Each wait is a parked call (`{op}:stalled`), so the scheduler interleaves other tasks with it
//! and may crash the task there; a wait never draws the `slow` fault (the budget bounds it).

use gate::store::StoreError;
use gate_postgres::RETRY_BACKOFF_MS;
use rand::Rng;

use super::shared::TaskId;
use super::store::SimStore;

/// The most connections a host's pool holds (`PostgresConfig`'s default pool size).
pub(crate) const POOL_SIZE: u32 = 4;

/// The PostgreSQL adapter's client-side limit per attempt, ms: the statement timeout (5 s) plus
/// 2 s.
const ATTEMPT_TIMEOUT_PG_MS: i64 = 7_000;

/// The DynamoDB client's attempt timeout, ms (the functions' SDK settings: 3 s per attempt).
const ATTEMPT_TIMEOUT_DYNAMO_MS: i64 = 3_000;

/// Attempts per call before the error is surfaced: the first and one per backoff (the
/// PostgreSQL adapter's; the functions' SDK retry configuration makes 4 attempts too).
const ATTEMPTS: usize = RETRY_BACKOFF_MS.len() + 1;

/// What an invocation keeps for its answer after its store calls, ms
/// (`gate_lambda::runner::ANSWER_MARGIN_MS`).
pub(crate) const ANSWER_MARGIN_MS: i64 = 1_000;

/// The host key of the reconciler's environment (consumer hosts are `0..workers`).
pub(crate) const RECONCILER_HOST: usize = usize::MAX;

impl SimStore {
    /// Whether the store is stalled for a call starting now.
    fn in_stall(&self) -> bool {
        let now = self.shared.now();
        let st = self.shared.state();
        st.faults_on
            && st
                .profile
                .store_stall
                .is_some_and(|(from, until)| from <= now && now < until)
    }

    /// The attempt timeout of this schedule's store, ms.
    fn attempt_timeout_ms(&self) -> i64 {
        let st = self.shared.state();
        if st.profile.pg_conflict > 0.0 || st.profile.pg_outcome_unknown > 0.0 {
            ATTEMPT_TIMEOUT_PG_MS
        } else {
            ATTEMPT_TIMEOUT_DYNAMO_MS
        }
    }

    /// What the task's store budget has left now, ms (its true deadline less the answer margin).
    fn budget_left_ms(&self) -> i64 {
        let now = self.shared.now();
        let deadline = self
            .shared
            .state()
            .task_deadlines
            .get(&self.task)
            .copied()
            .unwrap_or(i64::MAX);
        deadline
            .saturating_sub(ANSWER_MARGIN_MS)
            .saturating_sub(now)
    }

    /// Books `kind` as this task's fault at step `label` and marks its store as not answering.
    fn stalled_fault(&self, label: &'static str, kind: &str) {
        let mut st = self.shared.state();
        st.last_label.insert(self.task, label);
        st.stalled_tasks.insert(self.task);
        st.count(kind);
    }

    /// Before a call of `op` reaches the store: while the store is stalled, the adapter's
    /// attempts each wait their timeout bounded by the budget, and the call fails when they or
    /// the budget are spent. `Ok` when an attempt finds the store answering (at once, when there
    /// is no stall).
    pub(super) async fn through_stall(&self, op: &'static str) -> Result<(), StoreError> {
        if !self.in_stall() {
            return Ok(());
        }
        let label = stalled_label(op);
        let timeout = self.attempt_timeout_ms();
        for attempt in 0..ATTEMPTS {
            if !self.in_stall() {
                return Ok(());
            }
            let left = self.budget_left_ms();
            if left <= 0 {
                break;
            }
            let backoff = if attempt == 0 {
                0
            } else {
                RETRY_BACKOFF_MS
                    .get(attempt - 1)
                    .map_or(0, |ms| i64::try_from(*ms).unwrap_or(0))
            };
            let wait = (backoff + timeout).min(left);
            self.stalled_fault(label, "store_stalled_attempt_timed_out");
            self.shared.park_exact(self.task, label, wait).await;
        }
        if !self.in_stall() {
            return Ok(());
        }
        self.stalled_fault(label, "store_stalled_surfaced");
        Err(StoreError::Unavailable(
            format!(
                "{op}: no answer within the attempt timeout or the invocation's budget, store not \
             answering (simulated)"
            )
            .into(),
        ))
    }

    /// After a write of `op` applied: whether its answer is lost in a stall (then the caller
    /// waited the attempt timeout bounded by the budget, and gets an error with the write
    /// applied).
    pub(super) async fn answer_lost_in_stall(&self, op: &'static str) -> bool {
        if !self.in_stall() {
            return false;
        }
        let label = stalled_label(op);
        let wait = self.attempt_timeout_ms().min(self.budget_left_ms()).max(0);
        self.stalled_fault(label, "store_stalled_answer_lost");
        self.shared.park_exact(self.task, label, wait).await;
        true
    }

    /// A release after a call of this invocation was cut is skipped (`Some(error)`), as
    /// `gate::store::budget::Bounded` skips it.
    pub(super) fn release_skipped(&self) -> Option<StoreError> {
        if !self.shared.state().stalled_tasks.contains(&self.task) {
            return None;
        }
        self.stalled_fault("release_lease:skipped", "store_stalled_release_skipped");
        Some(StoreError::Unavailable(
            "release_lease: skipped, the store stopped answering in this invocation (simulated)"
                .into(),
        ))
    }

    /// Whether this write attempt's connection is one still on the demoted writer (it refuses
    /// the write with `25006`, nothing applied, and is dropped from the host's pool). Draws the
    /// host's count of such connections at its first write after the failover.
    pub(super) fn read_only_connection(&self) -> bool {
        let now = self.shared.now();
        let mut st = self.shared.state();
        let Some(at) = st.profile.pg_failover_at_ms else {
            return false;
        };
        if !st.faults_on || now < at {
            return false;
        }
        let host = st
            .task_hosts
            .get(&self.task)
            .copied()
            .unwrap_or(RECONCILER_HOST);
        let left = match st.read_only_left.get(&host) {
            Some(n) => *n,
            None => st.outage_rng.random_range(1..=POOL_SIZE),
        };
        if left == 0 {
            st.read_only_left.insert(host, 0);
            return false;
        }
        st.read_only_left.insert(host, left - 1);
        true
    }
}

/// The registry the driver keeps for these faults: each task's host and true deadline.
pub(crate) fn register_task(
    st: &mut super::shared::State,
    task: TaskId,
    host: usize,
    deadline_ms: i64,
) {
    st.task_hosts.insert(task, host);
    st.task_deadlines.insert(task, deadline_ms);
}

/// The step name of a stalled wait of `op`.
fn stalled_label(op: &'static str) -> &'static str {
    match op {
        "reserve" => "reserve:stalled",
        "take_over" => "take_over:stalled",
        "commit" => "commit:stalled",
        "release_lease" => "release_lease:stalled",
        "extend_lease" => "extend_lease:stalled",
        "finish" => "finish:stalled",
        "routed" => "routed:stalled",
        "record_effect_id" => "record_effect_id:stalled",
        "get" => "get:stalled",
        "booking" => "booking:stalled",
        "multi_effect_keys" => "multi_effect_keys:stalled",
        "stale_in_flight" => "stale_in_flight:stalled",
        _ => "store:stalled",
    }
}
