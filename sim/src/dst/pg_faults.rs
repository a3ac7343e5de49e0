//! The store double with PostgreSQL's semantics where they differ from DynamoDB's: a write
//! statement of the PostgreSQL adapter (`gate_postgres`) is retried by the adapter itself, and
//! the retry is a new statement against the table as it is then, with no request token. The
//! faults, each named by its kind in docs/SIMULATION.md ("Deterministic simulation"):
//!
//! * a **serialization failure** (`40001`) or a **deadlock** (`40P01`) on any write, nothing
//!   applied; the adapter sleeps [`RETRY_BACKOFF_MS`] and runs it again; contention persists (each
//!   retry fails again with probability 1/2); spent retries surface
//!   [`StoreError::TransactionConflict`];
//! * the **commit outcome unknown**: the connection lost after the statement's `COMMIT` (applied,
//!   answer lost), noticed at once or after the adapter's attempt timeout; the retry on a new
//!   connection (which a failover may refuse, probability 1/2) meets the write it repeats and
//!   must recognise it; spent retries surface [`StoreError::Unavailable`] with the write applied;
//! * a **connection still on the demoted writer** after a failover (`outages`): `25006`.
//!
//! Each wait is a parked call (`{op}:pg_retry`), so the scheduler interleaves other workers and
//! the reconciler with it and may crash the task there. The draws come from their own stream
//! (`State::pg_rng`), so a schedule without these faults does not depend on them.

use std::future::Future;

use gate::store::StoreError;
use gate_postgres::RETRY_BACKOFF_MS;
use rand::Rng;

use super::store::SimStore;

/// The adapter's attempts per statement: the first and one per backoff.
const ATTEMPTS: usize = RETRY_BACKOFF_MS.len() + 1;

/// The adapter's client-side limit per attempt, ms: `PostgresConfig`'s default statement timeout
/// (5 s) plus 2 s.
const ATTEMPT_TIMEOUT_MS: i64 = 7_000;

/// Why an attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failed {
    /// Serialization failure or deadlock: nothing applied.
    Conflict,
    /// The answer was lost after the write applied, or (after that) no connection.
    OutcomeUnknown,
    /// The connection is still on the demoted writer after a failover (`outages`): `25006`,
    /// nothing applied, the connection dropped.
    ReadOnly,
}

impl SimStore {
    /// Runs the write `op` (the statement `label`) as the PostgreSQL adapter's retry loop
    /// would, with the faults of the module docs. `Ok(result)`: the answer of the attempt that
    /// got one; `Err`: the error the adapter surfaces when its retries are spent. Without
    /// PostgreSQL semantics in the schedule, `op` once, nothing drawn.
    pub(super) async fn pg_attempts<T, F, Fut>(
        &self,
        label: &'static str,
        op: F,
    ) -> Result<Result<T, StoreError>, StoreError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let (conflict_p, unknown_p) = {
            let st = self.shared.state();
            (st.profile.pg_conflict, st.profile.pg_outcome_unknown)
        };
        if conflict_p <= 0.0 && unknown_p <= 0.0 {
            return Ok(op().await);
        }
        let mut last = Failed::Conflict;
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                let wait = self.pg_wait(last, attempt);
                self.shared.park(self.task, retry_label(label), wait).await;
            }
            let last_attempt = attempt + 1 == ATTEMPTS;
            if self.read_only_connection() {
                self.shared.state().count("pg_read_only_connection_dropped");
                last = Failed::ReadOnly;
                continue;
            }
            let failed = {
                let mut st = self.shared.state();
                let after_loss = attempt > 0 && last == Failed::OutcomeUnknown;
                let contended = attempt > 0 && last == Failed::Conflict;
                if after_loss && pg_draw(&mut st, 0.5) {
                    // A failover still in progress: no connection, nothing runs.
                    if !last_attempt {
                        st.count("pg_no_connection_retried");
                    }
                    Some(Failed::OutcomeUnknown)
                } else if pg_draw(&mut st, if contended { 0.5 } else { conflict_p }) {
                    if !last_attempt {
                        let deadlock = st.pg_rng.random_bool(0.5);
                        st.count(if deadlock {
                            "pg_deadlock_retried"
                        } else {
                            "pg_serialization_failure_retried"
                        });
                    }
                    Some(Failed::Conflict)
                } else {
                    None
                }
            };
            if let Some(f) = failed {
                last = f;
                continue;
            }
            let r = op().await;
            let lost = {
                let mut st = self.shared.state();
                let lost = pg_draw(&mut st, unknown_p);
                if lost && !last_attempt {
                    st.count("pg_commit_outcome_unknown_retried");
                }
                lost
            };
            if !lost {
                return Ok(r);
            }
            last = Failed::OutcomeUnknown;
        }
        // The last failure is noticed (an unknown outcome after the attempt timeout, maybe),
        // then surfaced.
        let wait = self.pg_wait(last, ATTEMPTS);
        self.shared.park(self.task, retry_label(label), wait).await;
        self.shared.state().count(match last {
            Failed::Conflict => "pg_transaction_conflict_surfaced",
            Failed::OutcomeUnknown => "pg_commit_outcome_unknown_surfaced",
            Failed::ReadOnly => "pg_read_only_surfaced",
        });
        Err(match last {
            Failed::Conflict => StoreError::TransactionConflict(
                format!(
                "{label}: serialization failure or deadlock after {ATTEMPTS} attempts (simulated)"
            )
                .into(),
            ),
            Failed::OutcomeUnknown => StoreError::Unavailable(
                format!(
                    "{label}: connection lost after COMMIT, no answer after {ATTEMPTS} attempts, \
                 outcome unknown (simulated)"
                )
                .into(),
            ),
            Failed::ReadOnly => StoreError::Unavailable(
                format!(
                    "{label}: ERROR (25006): cannot execute in a read-only transaction, on \
                 {ATTEMPTS} connections still on the demoted writer (simulated)"
                )
                .into(),
            ),
        })
    }

    /// Simulated ms from a failed attempt to the next (number `attempt`): the failure noticed
    /// (at once, or after the attempt timeout for a lost answer), then the adapter's backoff.
    fn pg_wait(&self, failed: Failed, attempt: usize) -> i64 {
        let backoff = RETRY_BACKOFF_MS
            .get(attempt.saturating_sub(1))
            .map_or(0, |ms| i64::try_from(*ms).unwrap_or(i64::MAX));
        let mut st = self.shared.state();
        let noticed = match failed {
            Failed::Conflict => st.pg_rng.random_range(1..=5),
            Failed::OutcomeUnknown if st.pg_rng.random_bool(0.5) => ATTEMPT_TIMEOUT_MS,
            Failed::OutcomeUnknown => st.pg_rng.random_range(1..=20),
            // Refused at once; from the failover's own stream (`outages`).
            Failed::ReadOnly => st.outage_rng.random_range(1..=5),
        };
        noticed + backoff
    }
}

/// Draws `p` from the PostgreSQL stream while faults are on.
fn pg_draw(st: &mut super::shared::State, p: f64) -> bool {
    st.faults_on && p > 0.0 && st.pg_rng.random::<f64>() < p
}

/// The step name of the wait before an adapter's retry of `label` (a crash may fall there).
fn retry_label(label: &'static str) -> &'static str {
    match label {
        "reserve" => "reserve:pg_retry",
        "take_over" => "take_over:pg_retry",
        "commit" => "commit:pg_retry",
        "release_lease" => "release_lease:pg_retry",
        "finish" => "finish:pg_retry",
        "routed" => "routed:pg_retry",
        "record_effect_id" => "record_effect_id:pg_retry",
        _ => "store:pg_retry",
    }
}
