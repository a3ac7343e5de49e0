//! How a task ends: it completes (its batch's messages acknowledged or left for redelivery, and
//! no live lease left behind unless a fault explains it), or it is killed (a crash or its
//! deadline), after which an operator may purge its messages.

use std::collections::BTreeSet;

use futures::FutureExt;
use gate::consumer::RecordOutcome;
use gate::store::IdempotencyStore;

use super::{Driver, Kind, Output, Task};
use crate::dst::check::own_record_durable;
use crate::dst::shared::{short, TaskId};
use crate::sqs::{MsgState, ReceiveEnd};

/// The fault kinds that, at these steps, leave the failing task holding a live lease it does not
/// know of or could not end: an error after the reserve or take-over applied (the caller never
/// learns it holds the lease), or a release that failed (the lease expires on its own). (A failed
/// routing confirmation releases the lease, as every other transient failure does.)
const LEASE_LEFT_BY: &[(&str, &str)] = &[
    ("reserve", "store_applied_then_error"),
    ("take_over", "store_applied_then_error"),
    ("release_lease", "store_throttled"),
    ("release_lease", "store_unavailable"),
    // The same after the PostgreSQL adapter's retry (`pg_faults`: the step is then its wait),
    // and the adapter surfacing an error once its retries are spent: after a reserve or
    // take-over that applied on an earlier attempt, or a release that never did.
    ("reserve:pg_retry", "store_applied_then_error"),
    ("take_over:pg_retry", "store_applied_then_error"),
    ("reserve:pg_retry", "pg_commit_outcome_unknown_surfaced"),
    ("reserve:pg_retry", "pg_transaction_conflict_surfaced"),
    ("take_over:pg_retry", "pg_commit_outcome_unknown_surfaced"),
    ("take_over:pg_retry", "pg_transaction_conflict_surfaced"),
    ("release_lease:pg_retry", "pg_transaction_conflict_surfaced"),
    // A connection still on the demoted writer on every attempt (`outages`): after a reserve or
    // take-over that applied on an earlier attempt, or a release that never did.
    ("reserve:pg_retry", "pg_read_only_surfaced"),
    ("take_over:pg_retry", "pg_read_only_surfaced"),
    ("release_lease:pg_retry", "pg_read_only_surfaced"),
    // A store that stopped answering (`outages`): a reserve or take-over whose answer was lost
    // in the stall, a release that waited in vain, or a release skipped after a cut call.
    ("reserve:stalled", "store_stalled_answer_lost"),
    ("take_over:stalled", "store_stalled_answer_lost"),
    ("release_lease:stalled", "store_stalled_surfaced"),
    ("release_lease:skipped", "store_stalled_release_skipped"),
];

impl Driver<'_> {
    pub(super) fn completed(&mut self, task: Task, out: Output) {
        let faults = {
            let mut st = self.shared.state();
            st.open_sends.remove(&task.id);
            st.last_label.remove(&task.id);
            st.task_faults.remove(&task.id).unwrap_or_default()
        };
        self.no_lease_left(&task, &faults);
        let report = match out {
            Output::Batch(report) => report,
            Output::Reconciled(r) => {
                self.shared
                    .trace(|| format!("T{} reconciler done: {r:?}", task.id));
                return;
            }
        };
        let Kind::Consumer { batch } = &task.kind else {
            return;
        };
        let failed: BTreeSet<String> = report
            .response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.clone())
            .collect();
        self.shared.trace(|| {
            let outcomes: Vec<String> = report
                .records
                .iter()
                .map(|r| format!("{}: {:?}", r.message_id, r.outcome))
                .collect();
            format!("T{} done: {}", task.id, outcomes.join("; "))
        });
        for (k, (i, receipt)) in batch.iter().enumerate() {
            let id = self.queue.msgs[*i].id.clone();
            let end = match report.records.get(k).map(|r| &r.outcome) {
                _ if !failed.contains(&id) => ReceiveEnd::Acknowledged,
                Some(RecordOutcome::NotStarted) => ReceiveEnd::NotStarted,
                _ => ReceiveEnd::Failed {
                    faulted: !faults.is_empty(),
                },
            };
            self.queue.end_receive(*i, *receipt, end);
            if !failed.contains(&id) && !self.queue.delete(*i, *receipt) {
                self.shared.trace(|| {
                    format!(
                        "T{} delete of {id}#{receipt} ignored (stale receipt)",
                        task.id
                    )
                });
            }
        }
    }

    /// Liveness: a task that ended normally holds no live lease (by its own clock), unless a
    /// fault of [`LEASE_LEFT_BY`] explains it.
    fn no_lease_left(&mut self, task: &Task, faults: &[(&'static str, String)]) {
        let own_now = self.shared.now() + task.skew_ms;
        let held: Vec<String> = self
            .shared
            .store
            .records()
            .iter()
            .filter(|r| {
                r.has_work()
                    && r.lease_owner.as_deref().is_some_and(|owner| {
                        // The invocation's request id, or a lease token of it ("{id}#{n}").
                        owner
                            .strip_prefix(task.request_id.as_str())
                            .is_some_and(|rest| rest.is_empty() || rest.starts_with('#'))
                    })
                    && r.lease_until_ms.is_some_and(|until| own_now <= until)
            })
            .map(|r| short(&r.event_key).to_string())
            .collect();
        let excused = faults
            .iter()
            .any(|(label, kind)| LEASE_LEFT_BY.iter().any(|(l, k)| l == label && k == kind));
        if !held.is_empty() && !excused {
            let faults: Vec<String> = faults.iter().map(|(l, k)| format!("{k}@{l}")).collect();
            self.violations.push(format!(
                "T{} ({}) ended normally still holding a live lease on {held:?} (its faults: \
                 {faults:?})",
                task.id, task.request_id
            ));
        }
    }

    pub(super) fn kill(&mut self, task_id: TaskId) {
        let Some(pos) = self.tasks.iter().position(|t| t.id == task_id) else {
            return;
        };
        let task = self.tasks.remove(pos);
        self.stats.crashes += 1;
        let Task { kind, fut, .. } = task;
        drop(fut);
        {
            let mut st = self.shared.state();
            st.ambiguate(task_id, None);
            st.open_sends.remove(&task_id);
            st.last_label.remove(&task_id);
            st.task_faults.remove(&task_id);
        }
        if let Kind::Consumer { batch } = kind {
            for (i, receipt) in batch {
                self.queue.end_receive(i, receipt, ReceiveEnd::Killed);
                let purge = {
                    let mut st = self.shared.state();
                    let p = st.profile.purge_after_crash;
                    st.draw(p)
                };
                if !purge {
                    continue;
                }
                let body = &self.schedule.bodies[self.queue.msgs[i].body].text;
                let store = &self.shared.store;
                let durable = own_record_durable(
                    body,
                    &self.shared.integration,
                    &self.shared.terminals,
                    |pk| store.get(pk).now_or_never().and_then(Result::ok).flatten(),
                );
                if durable && self.queue.msgs[i].state == MsgState::Live {
                    self.queue.purge(i);
                    self.shared.state().count("message_purged_after_crash");
                    let id = self.queue.msgs[i].id.clone();
                    self.shared.trace(|| format!("operator purges {id}"));
                }
            }
        }
    }
}
