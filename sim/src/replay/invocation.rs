//! One worker's invocation: the gated handler run on a batch (or killed when its fault trips),
//! how an invocation ended, and settling that on the queue and the counters.

use std::collections::HashSet;
use std::sync::Arc;

use aws_lambda_events::event::sqs::SqsEvent;
use gate::consumer::{Gate, Invocation};
use gate::signals::Counts as SignalCounts;
use tokio::sync::Notify;

use super::delivery::{Carried, Received};
use crate::signals::SignalRecorder;
use crate::sqs::Queue;

/// How one invocation ended.
pub enum InvocationOutcome {
    /// The handler returned: `acked` holds the message ids not in `batchItemFailures`.
    Finished {
        /// Acknowledged message ids.
        acked: HashSet<String>,
        /// Per-record outcomes (gated handler only).
        report: Vec<gate::consumer::RecordReport>,
    },
    /// The worker died: nothing is acknowledged.
    Crashed,
    /// The naive worker died after deleting some messages itself.
    Partial {
        /// Message ids the naive handler deleted before it died.
        deleted: HashSet<String>,
    },
}

pub(super) async fn run_gated(
    gate: Gate,
    event: SqsEvent,
    invocation: &Invocation,
    tripped: Arc<Notify>,
    stalls: bool,
) -> InvocationOutcome {
    let ids: Vec<String> = event
        .records
        .iter()
        .filter_map(|r| r.message_id.clone())
        .collect();
    let finish = |report: gate::consumer::BatchReport| {
        let failed: HashSet<String> = report
            .response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.clone())
            .collect();
        let acked = ids
            .iter()
            .filter(|id| !failed.contains(*id))
            .cloned()
            .collect();
        InvocationOutcome::Finished {
            acked,
            report: report.records,
        }
    };
    if stalls {
        // A stall pauses inside the terminal call and resumes; `tripped` only tells the replay.
        return finish(gate.handle_batch(event, invocation).await);
    }
    tokio::select! {
        report = gate.handle_batch(event, invocation) => finish(report),
        _ = tripped.notified() => InvocationOutcome::Crashed,
    }
}

/// Applies an invocation's outcome: deletes what it acknowledged (and lost messages), counts.
pub(super) fn settle(
    queue: &mut Queue<Carried>,
    counts: &mut Counts,
    recorder: &mut SignalRecorder,
    received: Vec<Received>,
    lost: Vec<usize>,
    at_ms: i64,
    outcome: InvocationOutcome,
) {
    for copy in lost {
        queue.purge(copy);
    }
    match outcome {
        InvocationOutcome::Crashed => counts.crashes += 1,
        InvocationOutcome::Finished { acked, report } => {
            for r in &received {
                if acked.contains(&r.message_id) {
                    queue.delete(r.copy, r.receipt);
                }
            }
            recorder.record(at_ms, SignalCounts::of_records(&report));
            counts.batch_item_failures +=
                report.iter().filter(|r| !r.outcome.acknowledged()).count();
        }
        InvocationOutcome::Partial { deleted } => {
            counts.crashes += 1;
            for r in &received {
                if deleted.contains(&r.message_id) {
                    queue.delete(r.copy, r.receipt);
                }
            }
        }
    }
}

/// What the replay counts itself; every per-record figure comes from the gate's own counters
/// ([`SignalRecorder::total`]), the same ones the Lambda functions emit.
#[derive(Default)]
pub(super) struct Counts {
    pub(super) crashes: usize,
    pub(super) reconciler_runs: usize,
    /// Records the consumer reported in `batchItemFailures` (the reconciler's transient
    /// failures are not batch item failures).
    pub(super) batch_item_failures: usize,
}
