//! The reconciler: finishes stranded `in_flight` records (a worker died between the side effect
//! and the commit and its message is not coming back). Scheduled every minute, it sweeps every
//! 15 s within the run; never makes a second effect.
//!
//! Per record of the sparse GSI `InFlight` (16 shards, paginated) whose lease has ended (the
//! selection is by lease end; an optional minimum age by `created_at` defaults to 0): take the
//! lease (a conditional update, so two reconcilers, or a
//! reconciler and a slow consumer, never both hold it), then act on the one decision for a held
//! record (`crate::decision`), as the consumer does: inside the claim horizon (the server's key
//! retention minus a margin) and before the event's end, re-send the stored request bytes under
//! the same key and commit the answer (the server's replay of its first answer is the lookup);
//! past the horizon or after the event's end, never send: look the effect up under the key and
//! commit it, or without one (or without a lookup at the server) route the record to a person.
//! A routing record (a poison body, a mismatch or an ended event on its way to the manual
//! queue, see `crate::consumer`, "Routing to a person exactly once") is finished by sending the
//! item it stores, never sent to the server. This is the "completer" of Stripe-style idempotency
//! (Brandur Leach, "Implementing Stripe-like Idempotency Keys in Postgres", 2017): lease
//! timeout, never a live lease. A scheduled run sweeps several times within its minute
//! ([`Gate::reconcile_run`]).

use futures::stream::{self, StreamExt};
use tracing::{info, warn};

use crate::decision::Holder;
use crate::gate::{Delivery, Gate, Invocation};
use crate::held::HeldRecord;
use crate::manual::ManualReason;
use crate::outcome::RecordOutcome;
use crate::record::INFLIGHT_SHARDS;
use crate::store::{InFlightEntry, InFlightIndex, TakeOver};

/// The reconciler's settings. Durations in **milliseconds**.
///
/// A stranded record is chosen by its lease end, not its age: every sweep reads the `InFlight`
/// records (created more than `min_age_ms` ago, default 0: all of them) and takes over those
/// whose lease has ended; a live lease is skipped without a request. A scheduled run sweeps
/// every `sweep_interval_ms` within its schedule's `schedule_period_ms`
/// ([`Gate::reconcile_run`]), because EventBridge Scheduler's shortest rate is one minute
/// ("Schedule types on EventBridge Scheduler", rate expressions): a record stranded by a crash
/// is committed at most lease + sweep interval + one record's work after the crash (with the
/// defaults 15 s + 15 s + the server's request timeout: 40 s; docs/BENCHMARKS.md, "Recovery").
#[derive(Debug, Clone)]
pub struct ReconcilerConfig {
    /// Only records created at least this long ago are examined (default 0: the lease decides,
    /// see above). A guard for a deployment whose leases cannot be trusted (clocks); each
    /// millisecond of it delays every recovery as much.
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
    /// Time between two sweeps of one scheduled run (default 15 000 ms); at least 1 000.
    pub sweep_interval_ms: i64,
    /// The schedule's period (default 60 000 ms, EventBridge Scheduler's `rate(1 minute)`): a
    /// run sweeps at 0, 1, 2, ... sweep intervals after its start while that is less than the
    /// period, so that the next run takes over where it stops.
    pub schedule_period_ms: i64,
}

impl ReconcilerConfig {
    /// How old a record may be and still be sent, **milliseconds**: the key retention minus
    /// the margin. `GateConfig::claim_horizon_ms` is set from this (the one horizon the consumer,
    /// the reconciler and `gatectl` decide with).
    pub fn claim_horizon_ms(&self) -> i64 {
        self.key_retention_ms - self.retention_margin_ms
    }

    /// The sweeps of one scheduled run: `ceil(period / interval)`, at least 1 (4 with the
    /// defaults: at 0, 15, 30 and 45 s).
    pub fn sweeps_per_run(&self) -> i64 {
        let interval = self.sweep_interval_ms.max(1_000);
        ((self.schedule_period_ms + interval - 1) / interval).max(1)
    }
}

impl Default for ReconcilerConfig {
    fn default() -> Self {
        Self {
            min_age_ms: 0,
            key_retention_ms: 24 * 3_600_000,
            retention_margin_ms: 3_600_000,
            page_size: 25,
            sweep_interval_ms: 15_000,
            schedule_period_ms: 60_000,
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
                // At least `min_age_ms` old, as DEPLOYING says (`created_at <= now - min_age`;
                // the index's bound is exclusive): with 0, a record reserved this millisecond
                // under a live lease is examined and counted as skipped, not left unseen.
                let created_before = (self.clock.now_ms() - config.min_age_ms).saturating_add(1);
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
        info!(?report, "reconciler sweep finished");
        report
    }

    /// One scheduled run: [`Gate::reconcile`] (a sweep) at its start and again every
    /// `config.sweep_interval_ms` while that is less than `config.schedule_period_ms` after the
    /// start ([`ReconcilerConfig::sweeps_per_run`]) and the invocation's deadline leaves a sweep
    /// its margin; between sweeps it awaits `sleep(ms)` (the Lambda wiring: `tokio::time::sleep`;
    /// tests: a manual clock moved on). Each sweep's own report goes to `each_sweep` as soon as
    /// the sweep ends (the Lambda wiring emits its counters then, so a run killed at its function
    /// timeout loses only the sweep it was in; `|_| {}` for nothing). Returns the sweeps' reports
    /// added up, and how many ran. A lost or late run costs only its own sweeps.
    pub async fn reconcile_run<S, F>(
        &self,
        index: &dyn InFlightIndex,
        config: &ReconcilerConfig,
        invocation: &Invocation,
        sleep: S,
        mut each_sweep: impl FnMut(&ReconcileReport),
    ) -> (ReconcileReport, u32)
    where
        S: Fn(u64) -> F,
        F: std::future::Future<Output = ()>,
    {
        let start = self.clock.now_ms();
        let interval = config.sweep_interval_ms.max(1_000);
        let mut total = ReconcileReport::default();
        let mut sweeps = 0u32;
        for k in 0..config.sweeps_per_run() {
            let at = start + k * interval;
            let now = self.clock.now_ms();
            if at.saturating_add(self.config.deadline_margin_ms) >= invocation.deadline_ms {
                break;
            }
            if at > now {
                sleep(u64::try_from(at - now).unwrap_or(0)).await;
            }
            // Each sweep its own lease tokens (`{request_id}/{nonce}.{k}#{n}`): the positions
            // `#{n}` start again at every sweep.
            let sweep = match k {
                0 => invocation.clone(),
                k => Invocation {
                    request_id: format!("{}.{k}", invocation.request_id),
                    deadline_ms: invocation.deadline_ms,
                },
            };
            let report = self.reconcile(index, config, &sweep).await;
            each_sweep(&report);
            total.absorb(report);
            sweeps += 1;
        }
        (total, sweeps)
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
        let event_key = held.event_key.clone();
        let held = HeldRecord::new(self, held, d);
        let (outcome, by_lookup) = held.proceed(Holder::Reconciler, now, None).await;
        info!(event_key = %event_key, ?outcome, by_lookup, "reconciled a stranded record");
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
    /// Adds `other` (a later sweep of the same run) to this report.
    pub fn absorb(&mut self, other: ReconcileReport) {
        self.examined += other.examined;
        self.reconciled += other.reconciled;
        self.found_by_lookup += other.found_by_lookup;
        self.already_committed += other.already_committed;
        self.live_lease += other.live_lease;
        self.expired += other.expired;
        self.manual += other.manual;
        self.transient += other.transient;
        self.unreadable += other.unreadable;
        self.left_for_next_run |= other.left_for_next_run;
        self.max_distinct_effect_ids = self
            .max_distinct_effect_ids
            .max(other.max_distinct_effect_ids);
        self.natural_key_collisions += other.natural_key_collisions;
    }

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
