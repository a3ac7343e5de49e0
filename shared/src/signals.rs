//! The three signals (README, "Monitoring: the three signals"): a gate fails silently, so these
//! catch it.
//!
//! | signal | healthy | alarm |
//! | --- | --- | --- |
//! | duplicate ratio = conflicts on reserve / records received | 1-3 % | above 20 % (an upstream misbehaves); 0 over 6 h with traffic (the key derivation is broken) |
//! | age of the oldest `in_flight` record | seconds | above 600 s |
//! | distinct slot ids the terminal returned for one key | 1 | 2 or more |
//!
//! The thresholds are defined here, once: the simulator evaluates its alarms with these
//! constants, and a test checks that `template.yaml`'s alarms carry the same values.
//! Counters are emitted in CloudWatch embedded metric format (the `metrics` facade with
//! `metrics_cloudwatch_embedded` installed by the Lambda wiring); the store signals are published
//! by the metrics function with `PutMetricData`.

use serde::Serialize;

use crate::gate::{BatchReport, RecordOutcome, RecordReport};
use crate::reconciler::ReconcileReport;
use crate::record::INFLIGHT_SHARDS;
use crate::store::{IdempotencyStore, StoreError};

/// The CloudWatch namespace of every metric.
pub const NAMESPACE: &str = "ExactlyOnceGate";

/// The dimension every metric carries: the integration's name.
pub const DIMENSION: &str = "Integration";

/// Metric names.
pub mod metric {
    /// SQS records received by the consumer (count).
    pub const RECEIVED: &str = "Received";
    /// Conflicts on reserve with the same fingerprint (count): the duplicate-ratio numerator.
    pub const DUPLICATES: &str = "Duplicates";
    /// Same event key, other fingerprint (count).
    pub const MISMATCHES: &str = "Mismatches";
    /// Poison bodies routed to the manual queue (count).
    pub const REJECTED: &str = "Rejected";
    /// Records routed to the manual queue for another reason (count).
    pub const MANUAL: &str = "Manual";
    /// Slots committed by the consumer (count).
    pub const COMMITTED: &str = "Committed";
    /// Expired leases taken over by the consumer (count).
    pub const TAKEN_OVER: &str = "TakenOver";
    /// Commits and routings refused by the lease fence (another holder took the record over).
    pub const LEASE_LOST: &str = "LeaseLost";
    /// Stranded records committed by the reconciler (count).
    pub const RECONCILED: &str = "Reconciled";
    /// Transient failures, retried (count).
    pub const TRANSIENT_FAILURES: &str = "TransientFailures";
    /// Distinct slot ids seen for a key when a slot is committed or compared (a value per event;
    /// the alarm reads the Maximum).
    pub const DISTINCT_SLOT_IDS: &str = "DistinctSlotIds";
    /// Age of the oldest `in_flight` record, seconds (metrics function).
    pub const OLDEST_IN_FLIGHT_AGE: &str = "OldestInFlightAgeSeconds";
    /// `in_flight` records older than 10 minutes (metrics function).
    pub const IN_FLIGHT_OLDER_THAN_10M: &str = "InFlightOlderThan10Minutes";
    /// Keys for which the terminal returned more than one slot id (metrics function).
    pub const MULTI_SLOT_KEYS: &str = "MultiSlotKeys";
}

/// Alarm: the duplicate ratio above this (a fraction) in one period means an upstream misbehaves.
pub const DUPLICATE_RATIO_HIGH: f64 = 0.20;
/// Period of the high-ratio alarm, seconds.
pub const DUPLICATE_RATIO_HIGH_PERIOD_S: i64 = 300;
/// The high-ratio alarm only judges periods with at least this many records received.
pub const DUPLICATE_RATIO_HIGH_MIN_RECEIVED: u64 = 50;
/// Period of the zero-ratio alarm, seconds (6 hours).
pub const DUPLICATE_RATIO_ZERO_PERIOD_S: i64 = 21_600;
/// The zero-ratio alarm only judges periods with at least this many records received: with a
/// healthy 1-3 % duplicate rate, 200 records without a single duplicate is very unlikely
/// (0.99^200 ≈ 13 % at 1 %, 0.97^200 ≈ 0.2 % at 3 %).
pub const DUPLICATE_RATIO_ZERO_MIN_RECEIVED: u64 = 200;
/// Alarm: the oldest `in_flight` record older than this, seconds.
pub const OLDEST_IN_FLIGHT_MAX_S: i64 = 600;
/// Period of the store signals (the metrics function runs every minute), seconds.
pub const STORE_SIGNALS_PERIOD_S: i64 = 60;
/// Alarm: this many distinct slot ids for one key, or more.
pub const DISTINCT_SLOT_IDS_ALARM: u64 = 2;

/// Whether a high-ratio period breaches: enough traffic and `duplicates / received` above 20 %.
pub fn duplicate_ratio_high_breached(received: u64, duplicates: u64) -> bool {
    received >= DUPLICATE_RATIO_HIGH_MIN_RECEIVED
        && duplicates as f64 / received as f64 > DUPLICATE_RATIO_HIGH
}

/// Whether a 6-hour period breaches the zero-ratio alarm: enough traffic and no duplicate at all.
pub fn duplicate_ratio_zero_breached(received: u64, duplicates: u64) -> bool {
    received >= DUPLICATE_RATIO_ZERO_MIN_RECEIVED && duplicates == 0
}

/// Whether the oldest `in_flight` age (seconds) breaches.
pub fn oldest_in_flight_breached(age_s: i64) -> bool {
    age_s > OLDEST_IN_FLIGHT_MAX_S
}

/// Whether the distinct-slot signal breaches: a key with 2+ slot ids seen by a worker, or
/// marked in the store.
pub fn distinct_slot_ids_breached(max_distinct_slot_ids: u64, multi_slot_keys: u64) -> bool {
    max_distinct_slot_ids >= DISTINCT_SLOT_IDS_ALARM || multi_slot_keys >= 1
}

/// The counters of one invocation (or any sum of them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Records received.
    pub received: u64,
    /// Conflicts on reserve with the same fingerprint.
    pub duplicates: u64,
    /// Same key, other fingerprint.
    pub mismatches: u64,
    /// Poison bodies.
    pub rejected: u64,
    /// Routed to the manual queue for another reason.
    pub manual: u64,
    /// Committed by the consumer.
    pub committed: u64,
    /// Leases taken over by the consumer.
    pub taken_over: u64,
    /// Leases lost: a commit or routing refused because another holder took the record over
    /// (the fence held; the holder finishes the record).
    pub lease_lost: u64,
    /// Committed by the reconciler.
    pub reconciled: u64,
    /// Transient failures.
    pub transient_failures: u64,
    /// The most distinct slot ids seen for one key (0 when no slot was committed or compared).
    pub max_distinct_slot_ids: u64,
}

impl Counts {
    /// The counters of one consumer batch.
    pub fn of_batch(report: &BatchReport) -> Self {
        Self::of_records(&report.records)
    }

    /// The counters of a batch's record reports.
    pub fn of_records(records: &[RecordReport]) -> Self {
        let mut c = Self::default();
        for r in records {
            c.received += 1;
            if r.took_over {
                c.taken_over += 1;
            }
            match &r.outcome {
                RecordOutcome::Committed { .. } => {
                    c.committed += 1;
                    c.max_distinct_slot_ids = c.max_distinct_slot_ids.max(1);
                }
                RecordOutcome::AlreadyCommitted {
                    distinct_slot_ids, ..
                } => {
                    c.max_distinct_slot_ids =
                        c.max_distinct_slot_ids.max(*distinct_slot_ids as u64);
                }
                RecordOutcome::Duplicate(_) | RecordOutcome::DuplicateInFlight => c.duplicates += 1,
                RecordOutcome::Mismatch => c.mismatches += 1,
                RecordOutcome::LeaseLost { .. } => c.lease_lost += 1,
                RecordOutcome::Rejected(_) => c.rejected += 1,
                RecordOutcome::Manual(_) => c.manual += 1,
                RecordOutcome::Retry(_) | RecordOutcome::NotStarted => c.transient_failures += 1,
            }
        }
        c
    }

    /// The counters of one reconciler run.
    pub fn of_reconcile(report: &ReconcileReport) -> Self {
        Self {
            reconciled: report.reconciled as u64,
            manual: report.manual as u64,
            transient_failures: report.transient as u64,
            max_distinct_slot_ids: report.max_distinct_slot_ids as u64,
            ..Self::default()
        }
    }

    /// Adds `other` into `self` (maximum for `max_distinct_slot_ids`).
    pub fn add(&mut self, other: &Counts) {
        self.received += other.received;
        self.duplicates += other.duplicates;
        self.mismatches += other.mismatches;
        self.rejected += other.rejected;
        self.manual += other.manual;
        self.committed += other.committed;
        self.taken_over += other.taken_over;
        self.lease_lost += other.lease_lost;
        self.reconciled += other.reconciled;
        self.transient_failures += other.transient_failures;
        self.max_distinct_slot_ids = self.max_distinct_slot_ids.max(other.max_distinct_slot_ids);
    }

    /// Emits the counters through the `metrics` facade (in Lambda: EMF, flushed after each
    /// invocation). Counters that are zero are still registered, so CloudWatch sees explicit
    /// zeros for the ratio's metric math.
    pub fn emit(&self) {
        let pairs = [
            (metric::RECEIVED, self.received),
            (metric::DUPLICATES, self.duplicates),
            (metric::MISMATCHES, self.mismatches),
            (metric::REJECTED, self.rejected),
            (metric::MANUAL, self.manual),
            (metric::COMMITTED, self.committed),
            (metric::TAKEN_OVER, self.taken_over),
            (metric::LEASE_LOST, self.lease_lost),
            (metric::RECONCILED, self.reconciled),
            (metric::TRANSIENT_FAILURES, self.transient_failures),
        ];
        for (name, value) in pairs {
            metrics::counter!(name).increment(value);
        }
        if self.max_distinct_slot_ids > 0 {
            metrics::histogram!(metric::DISTINCT_SLOT_IDS)
                .record(self.max_distinct_slot_ids as f64);
        }
    }
}

/// The store signals, read by the metrics function every minute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StoreSignals {
    /// Age of the oldest live (not expired) `in_flight` record, seconds; 0 when there is none.
    pub oldest_in_flight_age_s: i64,
    /// Live `in_flight` records older than 10 minutes.
    pub in_flight_older_than_10m: u64,
    /// Keys with two or more distinct slot ids.
    pub multi_slot_keys: u64,
}

/// Page size of the `InFlight` queries of [`collect_store_signals`].
const SIGNAL_PAGE: usize = 100;

/// Reads the store signals at `now_ms` (epoch ms) from the sparse GSIs `InFlight` (16 shards,
/// paginated, oldest first) and `MultiSlot`, without a scan. Expired records (TTL passed, not yet
/// deleted) are left out: nothing will finish them and they are not stuck work.
///
/// # Errors
/// A [`StoreError`] from a query.
pub async fn collect_store_signals(
    store: &dyn IdempotencyStore,
    now_ms: i64,
) -> Result<StoreSignals, StoreError> {
    let mut oldest: Option<i64> = None;
    let mut older_than_10m = 0u64;
    let ten_minutes_ago = now_ms - 600_000;
    for shard in 0..INFLIGHT_SHARDS {
        let shard = format!("{shard:02}");
        let mut cursor = None;
        loop {
            let page = store
                .stale_in_flight(&shard, i64::MAX, cursor.take(), SIGNAL_PAGE)
                .await?;
            // Live entries, and unreadable ones (nothing will finish those: they count).
            let created: Vec<i64> = page
                .entries
                .iter()
                .filter(|r| !r.is_expired(now_ms))
                .map(|r| r.created_at_ms)
                .chain(page.unreadable.iter().filter_map(|u| u.created_at_ms))
                .collect();
            if let Some(first) = created.iter().min() {
                oldest = Some(oldest.map_or(*first, |o| o.min(*first)));
            }
            older_than_10m += created.iter().filter(|c| **c < ten_minutes_ago).count() as u64;
            // Index items are oldest first: once a page reaches the last 10 minutes, stop.
            let reached_recent = page
                .entries
                .iter()
                .map(|r| r.created_at_ms)
                .chain(page.unreadable.iter().filter_map(|u| u.created_at_ms))
                .max()
                .is_some_and(|c| c >= ten_minutes_ago);
            match page.cursor {
                Some(c) if !reached_recent => cursor = Some(c),
                _ => break,
            }
        }
    }
    Ok(StoreSignals {
        oldest_in_flight_age_s: oldest.map_or(0, |o| ((now_ms - o) / 1000).max(0)),
        in_flight_older_than_10m: older_than_10m,
        multi_slot_keys: store.multi_slot_keys().await? as u64,
    })
}
