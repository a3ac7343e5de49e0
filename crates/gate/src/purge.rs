//! The expired-row purge of a store whose database has no TTL (PostgreSQL), run by the
//! reconciler's scheduled invocation after its pass ([`Gate::purge_expired`]): batches of
//! [`PURGE_BATCH`] through [`Purge::purge_expired`] until a batch comes back short,
//! `PURGE_MAX_BATCHES` batches, or the invocation's deadline is near. On DynamoDB (its TTL
//! deletes expired items) and in memory the store answers `None` and nothing is done.
//!
//! What may go: a record expired (`expires_at < now`, epoch seconds, the DynamoDB TTL's test)
//! with nothing left to do, which has outlived the event it guards by the key TTL already
//! (`expires_at = max(reserve, event end) + ttl`); an `in_flight` record or a pending routing
//! is never deleted (the reconciler finishes it; the oldest-in-flight signal shows it).

use tracing::{info, warn};

use crate::gate::{Gate, Invocation};
use crate::store::{Purge, PurgeCount};

/// Rows per `DELETE` statement (records and natural keys each): short transactions and short
/// locks. With `PURGE_MAX_BATCHES`, a run (every minute) deletes at most 10,000 records and
/// 10,000 natural-key rows, far above the gate's event rate; a backlog is worked off over runs.
pub const PURGE_BATCH: usize = 500;

/// Batches per reconciler run at most (the next run goes on).
pub(crate) const PURGE_MAX_BATCHES: usize = 20;

/// What one run's purge did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PurgeReport {
    /// Rows deleted, summed over the batches.
    pub deleted: PurgeCount,
    /// `DELETE` batches run.
    pub batches: usize,
    /// Stopped with rows possibly left (the deadline was near, or the batch limit was reached
    /// with full batches): the next run goes on.
    pub left_for_next_run: bool,
    /// The store failed a batch (logged; the next run tries again).
    pub failed: bool,
}

impl Gate {
    /// Purges expired rows with nothing left to do through `purge` (the store's purge port, see
    /// the module docs), stopping before `invocation`'s deadline (`deadline_margin_ms`).
    /// Returns `None` when the store needs no purge.
    pub async fn purge_expired(
        &self,
        purge: &dyn Purge,
        invocation: &Invocation,
    ) -> Option<PurgeReport> {
        let mut report = PurgeReport::default();
        for _ in 0..PURGE_MAX_BATCHES {
            let now = self.clock.now_ms();
            if now.saturating_add(self.config.deadline_margin_ms) >= invocation.deadline_ms {
                report.left_for_next_run = true;
                break;
            }
            let count = match purge.purge_expired(now, PURGE_BATCH).await {
                Ok(Some(count)) => count,
                Ok(None) => return None,
                Err(e) => {
                    warn!(error = %e, "purge of expired rows failed; the next run tries again");
                    report.failed = true;
                    break;
                }
            };
            report.batches += 1;
            report.deleted.records += count.records;
            report.deleted.natural_keys += count.natural_keys;
            report.left_for_next_run =
                count.records >= PURGE_BATCH || count.natural_keys >= PURGE_BATCH;
            if !report.left_for_next_run {
                break;
            }
        }
        info!(
            records = report.deleted.records,
            natural_keys = report.deleted.natural_keys,
            batches = report.batches,
            left_for_next_run = report.left_for_next_run,
            "expired rows purged"
        );
        Some(report)
    }
}
