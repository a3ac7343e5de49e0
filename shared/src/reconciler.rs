//! The reconciler: finishes stranded `in_flight` records (a worker died between the side effect
//! and the commit and its message is not coming back). Runs every minute; never makes a second
//! effect.
//!
//! Per record of the sparse GSI `InFlight` (16 shards, paginated), older than the minimum age and
//! with an expired lease: take the lease (a conditional update, so two reconcilers, or a
//! reconciler and a slow consumer, never both hold it), then act on the one decision for a held
//! record ([`crate::decision`]), as the consumer does: inside the claim horizon (the server's key
//! retention minus a margin) and before the event's end, re-send the stored request bytes under
//! the same key and commit the answer (the server's replay of its first answer is the lookup);
//! past the horizon or after the event's end, never send: look the effect up under the key and
//! commit it, or without one (or without a lookup at the server) route the record to a person.
//! A routing record (a poison body, a mismatch or an ended event on its way to the manual
//! queue, see `crate::consumer`, "Routing to a person exactly once") is finished by sending the
//! item it stores, never sent to the server. This is the "completer" of Stripe-style idempotency
//! (Brandur Leach, "Implementing Stripe-like Idempotency Keys in Postgres", 2017): minimum age,
//! lease timeout, never a live lease.

use futures::stream::{self, StreamExt};
use tracing::{info, warn};

use crate::consumer::outcome::RecordOutcome;
use crate::decision::Holder;
use crate::gate::{Delivery, Gate, Invocation};
use crate::manual::ManualReason;
use crate::record::INFLIGHT_SHARDS;
use crate::store::{InFlightEntry, InFlightIndex, TakeOver};

/// The reconciler's settings. Durations in **milliseconds**.
#[derive(Debug, Clone)]
pub struct ReconcilerConfig {
    /// Only records created at least this long ago are examined (default 120 000 ms): younger ones
    /// belong to their consumer.
    pub min_age_ms: i64,
    /// How long the server keeps a key (default 24 h, the server's published key expiry, see
    /// the IETF Idempotency-Key draft). The wiring sets `GateConfig::claim_horizon_ms` from this
    /// and the margin ([`ReconcilerConfig::claim_horizon_ms`]); the reconciler itself decides
    /// with the gate's horizon, the one the consumer and `gatectl` read.
    pub key_retention_ms: i64,
    /// Safety margin before the retention ends (default 1 h): past `retention - margin` nothing
    /// is sent again.
    pub retention_margin_ms: i64,
    /// Records per GSI page (DynamoDB `Limit`), default 25.
    pub page_size: usize,
}

impl ReconcilerConfig {
    /// How old a record may be and still be sent, **milliseconds**: the key retention minus
    /// the margin. `GateConfig::claim_horizon_ms` is set from this (the one horizon the consumer,
    /// the reconciler and `gatectl` decide with).
    pub fn claim_horizon_ms(&self) -> i64 {
        self.key_retention_ms - self.retention_margin_ms
    }
}

impl Default for ReconcilerConfig {
    fn default() -> Self {
        Self {
            min_age_ms: 120_000,
            key_retention_ms: 24 * 3_600_000,
            retention_margin_ms: 3_600_000,
            page_size: 25,
        }
    }
}

/// What one reconciler run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReconcileReport {
    /// Stale `in_flight` records read from the index.
    pub examined: usize,
    /// Committed by this run (the stored request re-sent under the same key inside the claim
    /// horizon, or the effect found by a lookup past it or after the event's end).
    pub reconciled: usize,
    /// Of those, how many were found by a lookup (past the claim horizon or after the event's
    /// end: the first send had reached the server). A re-send inside the horizon is not counted
    /// here, though the server's replay answers it.
    pub found_by_lookup: usize,
    /// Someone else committed first.
    pub already_committed: usize,
    /// Skipped: a live lease (a consumer or another reconciler works on it).
    pub live_lease: usize,
    /// Of the examined, records past their TTL that still had work (not yet deleted by
    /// DynamoDB): worked on like the others (a reserve never replaces them), and counted here.
    pub expired: usize,
    /// Routed to the manual queue (past the horizon or the event's end without an effect found,
    /// no key support, permanent errors).
    pub manual: usize,
    /// Transient failures; the next run retries.
    pub transient: usize,
    /// Index items that could not be read (skipped, logged; see `UnreadableEntry`).
    pub unreadable: usize,
    /// Left for the next run because the deadline was near.
    pub left_for_next_run: bool,
    /// The most distinct effect ids seen for one key when committing or comparing (the
    /// distinct-effect signal; 0 when nothing was committed or compared).
    pub max_distinct_effect_ids: usize,
    /// Records that met another event key holding their natural key before the call: sent to a
    /// person, never called (signal 4).
    pub natural_key_collisions: usize,
}

impl Gate {
    /// One reconciler run over all 16 shards of `InFlight`, at most `max_concurrency` records at
    /// once, stopping before `invocation`'s deadline (less than `deadline_margin_ms` left). `index`
    /// is the read side of the same table as `self.store` (its `InFlight` index).
    pub async fn reconcile(
        &self,
        index: &dyn InFlightIndex,
        config: &ReconcilerConfig,
        invocation: &Invocation,
    ) -> ReconcileReport {
        let mut report = ReconcileReport::default();
        let concurrency = self.config.max_concurrency.max(1);
        'shards: for shard in 0..INFLIGHT_SHARDS {
            let shard = format!("{shard:02}");
            let mut cursor = None;
            loop {
                if self.deadline_near(invocation) {
                    report.left_for_next_run = true;
                    break 'shards;
                }
                let created_before = self.clock.now_ms() - config.min_age_ms;
                let page = match index
                    .stale_in_flight(&shard, created_before, cursor.take(), config.page_size)
                    .await
                {
                    Ok(page) => page,
                    Err(e) => {
                        warn!(shard, error = %e, "cannot read InFlight; next run retries");
                        report.transient += 1;
                        break;
                    }
                };
                for bad in &page.unreadable {
                    warn!(
                        shard,
                        pk = ?bad.pk,
                        error = %bad.error,
                        "unreadable InFlight entry skipped; a person must finish it (the \
                         oldest in_flight signal counts it)"
                    );
                }
                report.unreadable += page.unreadable.len();
                // Each record gets its own lease token (`{request_id}#{n}`, n unique in the run).
                let first = report.examined;
                report.examined += page.entries.len();
                let now = self.clock.now_ms();
                report.expired += page.entries.iter().filter(|e| e.is_expired(now)).count();
                let outcomes: Vec<Step> = stream::iter(page.entries.into_iter().enumerate())
                    .map(|(i, entry)| {
                        let held_as = invocation.for_record(first + i);
                        async move { self.reconcile_record(entry, &held_as).await }
                    })
                    .buffer_unordered(concurrency)
                    .collect()
                    .await;
                for step in outcomes {
                    report.add(step);
                }
                match page.cursor {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
        }
        info!(?report, "reconciler run finished");
        report
    }

    /// The reconciler's work on one `InFlight` entry now (whatever its age), as a run does it:
    /// a live lease is skipped, an expired one taken over for `invocation` and the record
    /// finished. The report counts this one record. For `gatectl reconcile` (one key, or each
    /// entry of a pass with its own audit line).
    pub async fn reconcile_entry(
        &self,
        entry: InFlightEntry,
        invocation: &Invocation,
    ) -> ReconcileReport {
        let mut report = ReconcileReport {
            examined: 1,
            expired: usize::from(entry.is_expired(self.clock.now_ms())),
            ..ReconcileReport::default()
        };
        report.add(self.reconcile_record(entry, invocation).await);
        report
    }

    fn deadline_near(&self, invocation: &Invocation) -> bool {
        self.clock
            .now_ms()
            .saturating_add(self.config.deadline_margin_ms)
            >= invocation.deadline_ms
    }

    async fn reconcile_record(&self, record: InFlightEntry, invocation: &Invocation) -> Step {
        if self.deadline_near(invocation) {
            return Step::Left;
        }
        let now = self.clock.now_ms();
        if record.is_expired(now) {
            // Its TTL has passed, but it still has work (a reserve never replaces such a record):
            // finish it like any other, before DynamoDB's TTL deletes it.
            warn!(
                event_key = %record.event_key,
                status = record.status.as_str(),
                expires_at_s = record.expires_at_s,
                "a record with work left is past its TTL; finishing it"
            );
        }
        if record.lease_is_live(now) {
            return Step::LiveLease;
        }
        let owner = invocation.request_id.as_str();
        let held = match self
            .take_over_for(&record.pk, record.lease_owner.as_deref(), invocation, now)
            .await
        {
            Ok(TakeOver::Taken(r)) => *r,
            Ok(TakeOver::Refused) => return Step::LiveLease,
            Err(e) => {
                warn!(event_key = %record.event_key, error = %e, "take-over failed");
                return Step::Transient;
            }
        };
        // The manual queue gets the stored request (the SQS body is not kept).
        let body = String::from_utf8_lossy(&held.request).into_owned();
        let message_id = format!("reconciler:{owner}");
        let d = Delivery {
            body: &body,
            message_id: &message_id,
            invocation,
        };
        // The one decision for a held record (`crate::decision`), as the consumer's.
        let (outcome, by_lookup) = self.proceed(&held, Holder::Reconciler, now, d).await;
        info!(event_key = %held.event_key, ?outcome, by_lookup, "reconciled a stranded record");
        Step::from_outcome(outcome, by_lookup)
    }
}

enum Step {
    Reconciled { by_lookup: bool },
    AlreadyCommitted { distinct_effect_ids: usize },
    LiveLease,
    Manual { collision: bool },
    Transient,
    Left,
}

impl Step {
    fn from_outcome(outcome: RecordOutcome, by_lookup: bool) -> Self {
        match outcome {
            RecordOutcome::Committed { .. } => Self::Reconciled { by_lookup },
            RecordOutcome::AlreadyCommitted {
                distinct_effect_ids,
                ..
            } => Self::AlreadyCommitted {
                distinct_effect_ids,
            },
            RecordOutcome::Manual(reason) => Self::Manual {
                collision: reason == ManualReason::NaturalKeyCollision,
            },
            // The fence held: another holder took the record over and finishes it.
            RecordOutcome::LeaseLost { .. } => Self::LiveLease,
            _ => Self::Transient,
        }
    }
}

impl ReconcileReport {
    fn add(&mut self, step: Step) {
        match step {
            Step::Reconciled { by_lookup } => {
                self.reconciled += 1;
                self.max_distinct_effect_ids = self.max_distinct_effect_ids.max(1);
                if by_lookup {
                    self.found_by_lookup += 1;
                }
            }
            Step::AlreadyCommitted {
                distinct_effect_ids,
            } => {
                self.already_committed += 1;
                self.max_distinct_effect_ids =
                    self.max_distinct_effect_ids.max(distinct_effect_ids);
            }
            Step::LiveLease => self.live_lease += 1,
            Step::Manual { collision } => {
                self.manual += 1;
                if collision {
                    self.natural_key_collisions += 1;
                }
            }
            Step::Transient => self.transient += 1,
            Step::Left => self.left_for_next_run = true,
        }
    }
}
