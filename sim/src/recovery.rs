//! Crash to commit: for every worker crash a replay injects, how long until the crashed
//! notification's record was committed (or handed to a person), and by whom (the reconciler or
//! the message's redelivery). `sim recovery` prints the distribution
//! (docs/BENCHMARKS.md, "Recovery").
//!
//! The replay runs on simulated time and every invocation is instantaneous in it, so a figure is
//! the time from the crash to the sweep or delivery that finished the record: the lease, the wait
//! for a sweep or for the visibility timeout. The record's own work in production (a take-over,
//! the server call, the commit) comes on top; the document adds it to the bound.

use gate::record::{record_pk, RecordStatus};
use gate::store::IdempotencyStore;
use serde::Serialize;
use truck_slot::derive_keys;
use truck_slot::notification::parse_notification;

use crate::scenario::{CrashStep, Scenario};
use crate::stores::INTEGRATION;

/// Who finished a crashed notification's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishedBy {
    /// A reconciler sweep.
    Reconciler,
    /// A delivery of the notification's message (its redelivery, or the same batch for a crash
    /// after the commit).
    Delivery,
}

/// One injected crash and how it ended.
#[derive(Debug, Clone, Serialize)]
pub struct Recovery {
    /// The notification (index in the scenario) whose worker crashed.
    pub notification: usize,
    /// Where the worker died (`after_receive`, `after_reserve`, `after_claim`, `after_commit`).
    pub step: &'static str,
    /// Whether its message never came back.
    pub message_lost: bool,
    /// Simulated milliseconds since the scenario's start when the worker died.
    pub crash_at_ms: i64,
    /// Simulated milliseconds from the crash to the record's commit (or routing to a person);
    /// `None`: not finished by the end of the replay.
    pub finished_after_ms: Option<i64>,
    /// Who finished it.
    pub finished_by: Option<FinishedBy>,
    /// The record's status when finished (`committed`, or `manual`/`failed`: with a person).
    pub status: Option<&'static str>,
}

/// The crashes a replay is waiting on.
#[derive(Default)]
pub(crate) struct Tracker {
    pending: Vec<(Recovery, Option<String>)>,
    done: Vec<Recovery>,
}

impl Tracker {
    /// A worker died at `step` at `now_ms` (epoch ms) while handling `notification`.
    pub(crate) fn crashed(
        &mut self,
        scenario: &Scenario,
        notification: usize,
        step: CrashStep,
        now_ms: i64,
    ) {
        let n = &scenario.notifications[notification];
        let pk = parse_notification(&n.body_string(), now_ms, &scenario.terminals)
            .ok()
            .and_then(|p| derive_keys(&p).ok())
            .map(|k| record_pk(INTEGRATION, &k.event_key));
        self.pending.push((
            Recovery {
                notification,
                step: step.name(),
                message_lost: n.message_lost_after_crash,
                crash_at_ms: now_ms - scenario.start.timestamp_millis(),
                finished_after_ms: None,
                finished_by: None,
                status: None,
            },
            pk,
        ));
    }

    /// Whether a crash is still waiting for its record to finish.
    pub(crate) fn waiting(&self) -> bool {
        !self.pending.is_empty()
    }

    /// After a step of the replay at `now_ms` (epoch ms) done by `by`: the waiting records that
    /// are finished now.
    pub(crate) async fn check(
        &mut self,
        store: &dyn IdempotencyStore,
        start_ms: i64,
        now_ms: i64,
        by: FinishedBy,
    ) -> Result<(), String> {
        let mut still = Vec::new();
        for (mut r, pk) in std::mem::take(&mut self.pending) {
            let record = match &pk {
                Some(pk) => store.get(pk).await.map_err(|e| e.to_string())?,
                None => None,
            };
            match record.map(|r| r.status) {
                Some(
                    s @ (RecordStatus::Committed | RecordStatus::Manual | RecordStatus::Failed),
                ) => {
                    r.finished_after_ms = Some(now_ms - start_ms - r.crash_at_ms);
                    r.finished_by = Some(by);
                    r.status = Some(s.as_str());
                    self.done.push(r);
                }
                _ => still.push((r, pk)),
            }
        }
        self.pending = still;
        Ok(())
    }

    /// Every crash, finished or not, in the order they happened.
    pub(crate) fn into_recoveries(self) -> Vec<Recovery> {
        let mut all: Vec<Recovery> = self
            .done
            .into_iter()
            .chain(self.pending.into_iter().map(|(r, _)| r))
            .collect();
        all.sort_by_key(|r| (r.crash_at_ms, r.notification));
        all
    }
}

/// The distribution of crash-to-finish times of some crashes, simulated milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Distribution {
    /// Crashes counted.
    pub crashes: usize,
    /// Of those, not finished by the end of the replay.
    pub unfinished: usize,
    /// Finished by the reconciler.
    pub by_reconciler: usize,
    /// The median (nearest rank), ms.
    pub median_ms: i64,
    /// The 99th percentile (nearest rank), ms.
    pub p99_ms: i64,
    /// The longest, ms.
    pub max_ms: i64,
}

/// The nearest-rank percentile `p` (0-100) of sorted `values`; 0 when empty.
fn percentile(sorted: &[i64], p: usize) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// The distribution of `recoveries` (those finished; the unfinished counted apart).
pub fn distribution<'a>(recoveries: impl IntoIterator<Item = &'a Recovery>) -> Distribution {
    let mut times = Vec::new();
    let (mut crashes, mut unfinished, mut by_reconciler) = (0, 0, 0);
    for r in recoveries {
        crashes += 1;
        match r.finished_after_ms {
            Some(ms) => times.push(ms),
            None => unfinished += 1,
        }
        if r.finished_by == Some(FinishedBy::Reconciler) {
            by_reconciler += 1;
        }
    }
    times.sort_unstable();
    Distribution {
        crashes,
        unfinished,
        by_reconciler,
        median_ms: percentile(&times, 50),
        p99_ms: percentile(&times, 99),
        max_ms: times.last().copied().unwrap_or(0),
    }
}

/// The table `sim recovery` prints: one row per crash step (and lost messages apart), then all.
pub fn render(scenario: &str, recoveries: &[Recovery]) -> String {
    let mut out = format!(
        "{scenario}: crash to commit (simulated seconds)\n\
         {:<28} {:>7} {:>10} {:>10} {:>8} {:>8} {:>8}\n",
        "crash", "crashes", "unfinished", "reconciler", "median", "p99", "max"
    );
    let secs = |ms: i64| format!("{:.1}", ms as f64 / 1000.0);
    let mut row = |label: String, d: Distribution| {
        if d.crashes > 0 {
            out.push_str(&format!(
                "{label:<28} {:>7} {:>10} {:>10} {:>8} {:>8} {:>8}\n",
                d.crashes,
                d.unfinished,
                d.by_reconciler,
                secs(d.median_ms),
                secs(d.p99_ms),
                secs(d.max_ms)
            ));
        }
    };
    for step in CrashStep::ALL {
        for lost in [false, true] {
            let d = distribution(
                recoveries
                    .iter()
                    .filter(|r| r.step == step.name() && r.message_lost == lost),
            );
            let label = if lost {
                format!("{}, message lost", step.name())
            } else {
                step.name().to_string()
            };
            row(label, d);
        }
    }
    let stranded = distribution(recoveries.iter().filter(|r| {
        r.step == CrashStep::AfterReserve.name() || r.step == CrashStep::AfterClaim.name()
    }));
    row("records stranded (all)".into(), stranded);
    row("every crash".into(), distribution(recoveries));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(ms: Option<i64>) -> Recovery {
        Recovery {
            notification: 0,
            step: "after_claim",
            message_lost: false,
            crash_at_ms: 0,
            finished_after_ms: ms,
            finished_by: ms.map(|_| FinishedBy::Reconciler),
            status: ms.map(|_| "committed"),
        }
    }

    #[test]
    fn the_distribution_takes_nearest_ranks_and_counts_the_unfinished_apart() {
        let rs: Vec<Recovery> = (1..=200)
            .map(|s| finished(Some(s * 1000)))
            .chain([finished(None)])
            .collect();
        let d = distribution(&rs);
        assert_eq!(d.crashes, 201);
        assert_eq!(d.unfinished, 1);
        assert_eq!(d.by_reconciler, 200);
        // Nearest rank over the 200 finished: the 100th, the 198th and the 200th.
        assert_eq!(
            (d.median_ms, d.p99_ms, d.max_ms),
            (100_000, 198_000, 200_000)
        );
    }

    #[test]
    fn an_empty_distribution_is_zero() {
        let d = distribution(&[]);
        assert_eq!((d.crashes, d.median_ms, d.p99_ms, d.max_ms), (0, 0, 0, 0));
    }
}
