//! The four signals (`docs/OPERATING.md`, "Monitoring: four signals"): a gate fails silently,
//! so these catch it.
//!
//! | signal | healthy | alarm |
//! | --- | --- | --- |
//! | duplicate ratio = conflicts on reserve / records received | 1-3 % | above 20 % with enough duplicates (an upstream misbehaves); 0 with enough traffic (the key derivation is broken): [`RATIO_ALARMS`] |
//! | age of the oldest `in_flight` record | seconds | above 180 s |
//! | distinct effect ids the server returned for one key | 1 | 2 or more |
//! | natural-key collisions: two event keys committed for one subject and window start | 0 | 1 or more in a minute |
//!
//! The false-page rates and detection times of the ratio alarms follow from the binomial
//! distribution: `sim::alarm_stats` computes them (`sim alarms` prints them).
//!
//! The thresholds are defined here, once: the simulator evaluates its alarms with these
//! constants, and a test checks that `template.yaml`'s alarms carry the same values.
//! Counters are emitted in CloudWatch embedded metric format, one document per invocation (and
//! per reconciler sweep) written by the Lambda wiring (`crate::lambda::emf`, feature `lambda`);
//! the store signals are published by the metrics function with `PutMetricData`.

use serde::Serialize;

use crate::manual::ManualReason;
use crate::outcome::{BatchReport, RecordOutcome, RecordReport};
use crate::reconciler::ReconcileReport;
use crate::record::INFLIGHT_SHARDS;
use crate::store::{InFlightIndex, StoreError};

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
    /// Effects committed by the consumer (count).
    pub const COMMITTED: &str = "Committed";
    /// Expired leases taken over by the consumer (count).
    pub const TAKEN_OVER: &str = "TakenOver";
    /// Commits and routings refused by the lease fence (another holder took the record over).
    pub const LEASE_LOST: &str = "LeaseLost";
    /// Stranded records committed by the reconciler (count).
    pub const RECONCILED: &str = "Reconciled";
    /// Transient failures, retried (count).
    pub const TRANSIENT_FAILURES: &str = "TransientFailures";
    /// Distinct effect ids seen for a key when an effect is committed or compared (a value per event;
    /// the alarm reads the Maximum).
    pub const DISTINCT_EFFECT_IDS: &str = "DistinctEffectIds";
    /// Age of the oldest `in_flight` record, seconds (metrics function).
    pub const OLDEST_IN_FLIGHT_AGE: &str = "OldestInFlightAgeSeconds";
    /// `in_flight` records older than 10 minutes (metrics function).
    pub const IN_FLIGHT_OLDER_THAN_10M: &str = "InFlightOlderThan10Minutes";
    /// Keys for which the server returned more than one effect id (metrics function).
    pub const MULTI_EFFECT_KEYS: &str = "MultiEffectKeys";
    /// Commits that found another event key committed for the same subject and window
    /// start (count): a broken key derivation, or an event re-sent under a new notificationId.
    pub const NATURAL_KEY_COLLISIONS: &str = "NaturalKeyCollisions";
    /// Copies that met their record `committed` without an effect id (count; also counted in
    /// `Duplicates`): an older version's or a hand-edited record, each told to a person once.
    pub const COMMITTED_WITHOUT_EFFECT_ID: &str = "CommittedWithoutEffectId";
}

/// The high-ratio rule: a period breaches when it holds at least `min_received` records, at
/// least `min_duplicates` duplicates, and `duplicates / received` above this fraction.
pub const DUPLICATE_RATIO_HIGH: f64 = 0.20;

/// What a duplicate-ratio alarm's period must show to breach.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RatioRule {
    /// `duplicates >= min_duplicates` and `duplicates / received > ratio`: an upstream re-fires.
    Above {
        /// The ratio, a fraction (0.2 = 20 %).
        ratio: f64,
        /// The fewest duplicates that can breach: at low volume a ratio above 20 % is two
        /// duplicates of ten, which a healthy 3 % feed shows every few days; a floor on the count
        /// is what keeps the false pages down (see `sim::alarm_stats`).
        min_duplicates: u64,
    },
    /// `duplicates == 0`: the key derivation is broken (no redelivery is recognised).
    Zero,
}

/// One duplicate-ratio alarm of `template.yaml`, defined here once: the template's metric math
/// is [`RatioAlarm::expression`], the simulator evaluates [`RatioAlarm::breached`] on the same
/// periods, and `gatectl check-template` checks a template against these values.
///
/// CloudWatch evaluates the alarm on periods of `period_s` aligned to the clock (UTC), and goes
/// to ALARM when `datapoints_to_alarm` of the last `evaluation_periods` periods breach; a period
/// without data is missing and treated as not breaching (`TreatMissingData: notBreaching`).
/// AWS limit: `period_s * evaluation_periods` at most one day for periods under an hour, at most
/// seven days for periods of an hour or more (CloudWatch, "Evaluating an alarm").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RatioAlarm {
    /// The alarm's name (the template's `AlarmName` is `${AWS::StackName}-{name}`, its logical id
    /// `{name}Alarm`).
    pub name: &'static str,
    /// Period, seconds.
    pub period_s: i64,
    /// `EvaluationPeriods`.
    pub evaluation_periods: u32,
    /// `DatapointsToAlarm`.
    pub datapoints_to_alarm: u32,
    /// The fewest records received in a period for it to be judged at all.
    pub min_received: u64,
    /// The rule a judged period breaches.
    pub rule: RatioRule,
}

impl RatioAlarm {
    /// Whether one period with `received` records and `duplicates` conflicts on reserve breaches.
    pub fn breached(&self, received: u64, duplicates: u64) -> bool {
        if received < self.min_received {
            return false;
        }
        match self.rule {
            RatioRule::Above {
                ratio,
                min_duplicates,
            } => duplicates >= min_duplicates && duplicates as f64 / received as f64 > ratio,
            RatioRule::Zero => duplicates == 0,
        }
    }

    /// The fewest duplicates among `received` records that breach (for [`RatioRule::Zero`]: 0
    /// breaches, `None` means never); `None` when the period is not judged.
    pub fn breaching_duplicates_at_least(&self, received: u64) -> Option<u64> {
        if received < self.min_received {
            return None;
        }
        match self.rule {
            RatioRule::Above {
                ratio,
                min_duplicates,
            } => {
                let over = (ratio * received as f64).floor() as u64 + 1;
                Some(over.max(min_duplicates))
            }
            RatioRule::Zero => Some(0),
        }
    }

    /// The alarm's metric math over the period sums `received` (metric `Received`) and
    /// `duplicates` (metric `Duplicates`): 1 for a breaching period, 0 otherwise, as the
    /// template's `Expression` (alarm threshold: `>= 1`).
    pub fn expression(&self) -> String {
        let judged = format!("FILL(received, 0) >= {}", self.min_received);
        match self.rule {
            RatioRule::Above {
                ratio,
                min_duplicates,
            } => format!(
                "IF({judged} AND FILL(duplicates, 0) >= {min_duplicates} AND \
                 FILL(duplicates, 0) / FILL(received, 1) > {ratio}, 1, 0)"
            ),
            RatioRule::Zero => format!("IF({judged} AND FILL(duplicates, 0) == 0, 1, 0)"),
        }
    }
}

/// An upstream re-fires, seen within 5 minutes at a high volume (50 records in 5 minutes:
/// 600 an hour and more).
pub const DUPLICATE_RATIO_HIGH_5M: RatioAlarm = RatioAlarm {
    name: "DuplicateRatioHigh",
    period_s: 300,
    evaluation_periods: 1,
    datapoints_to_alarm: 1,
    min_received: 50,
    rule: RatioRule::Above {
        ratio: DUPLICATE_RATIO_HIGH,
        min_duplicates: 11,
    },
};

/// An upstream re-fires, seen within the hour at the feed's real volume (10 an hour).
pub const DUPLICATE_RATIO_HIGH_1H: RatioAlarm = RatioAlarm {
    name: "DuplicateRatioHighHourly",
    period_s: 3_600,
    evaluation_periods: 1,
    datapoints_to_alarm: 1,
    min_received: 5,
    rule: RatioRule::Above {
        ratio: DUPLICATE_RATIO_HIGH,
        min_duplicates: 4,
    },
};

/// An upstream re-fires, seen within 6 hours at the lowest volume (5 an hour).
pub const DUPLICATE_RATIO_HIGH_6H: RatioAlarm = RatioAlarm {
    name: "DuplicateRatioHighSixHours",
    period_s: 21_600,
    evaluation_periods: 1,
    datapoints_to_alarm: 1,
    min_received: 20,
    rule: RatioRule::Above {
        ratio: DUPLICATE_RATIO_HIGH,
        min_duplicates: 6,
    },
};

/// The key derivation is broken, seen within 2 hours at a high volume (700 records an hour, two
/// hours in a row without a duplicate).
pub const DUPLICATE_RATIO_ZERO_1H: RatioAlarm = RatioAlarm {
    name: "DuplicateRatioZeroHourly",
    period_s: 3_600,
    evaluation_periods: 2,
    datapoints_to_alarm: 2,
    min_received: 700,
    rule: RatioRule::Zero,
};

/// The key derivation is broken, seen within 3 days at the feed's real volume (200 records a
/// day, three UTC days in a row without a duplicate). The natural-key collision signal sees the
/// same fault at the first redelivery; this is its statistical backstop.
pub const DUPLICATE_RATIO_ZERO_1D: RatioAlarm = RatioAlarm {
    name: "DuplicateRatioZero",
    period_s: 86_400,
    evaluation_periods: 3,
    datapoints_to_alarm: 3,
    min_received: 200,
    rule: RatioRule::Zero,
};

/// Every duplicate-ratio alarm, high ones first.
pub const RATIO_ALARMS: [RatioAlarm; 5] = [
    DUPLICATE_RATIO_HIGH_5M,
    DUPLICATE_RATIO_HIGH_1H,
    DUPLICATE_RATIO_HIGH_6H,
    DUPLICATE_RATIO_ZERO_1H,
    DUPLICATE_RATIO_ZERO_1D,
];

/// Alarm: natural-key collisions (two event keys committed for one subject and window
/// start) in a period of [`NATURAL_KEY_COLLISIONS_PERIOD_S`], this many or more (`Sum`).
pub const NATURAL_KEY_COLLISIONS_ALARM: u64 = 1;
/// Period of the natural-key collision alarm, seconds.
pub const NATURAL_KEY_COLLISIONS_PERIOD_S: i64 = 60;
/// Alarm: the oldest `in_flight` record older than this, seconds. A record stranded by a crash
/// is committed by the reconciler within 60 s of the crash with the defaults (lease 15 s, a
/// sweep every 15 s, one record's work; the crash itself at most a lease after the reserve):
/// 180 s is three times that bound, so a healthy feed never breaches it, and it pages about
/// 3-4 minutes after a worker died when the reconciler cannot finish (it was 600 s while the
/// reconciler ran once a minute on records older than 120 s).
pub const OLDEST_IN_FLIGHT_MAX_S: i64 = 180;
/// Period of the store signals (the metrics function runs every minute), seconds.
pub const STORE_SIGNALS_PERIOD_S: i64 = 60;
/// Alarm: this many distinct effect ids for one key, or more.
pub const DISTINCT_EFFECT_IDS_ALARM: u64 = 2;

/// Whether a minute's natural-key collisions breach.
pub fn natural_key_collisions_breached(collisions: u64) -> bool {
    collisions >= NATURAL_KEY_COLLISIONS_ALARM
}

/// Whether the oldest `in_flight` age (seconds) breaches.
pub fn oldest_in_flight_breached(age_s: i64) -> bool {
    age_s > OLDEST_IN_FLIGHT_MAX_S
}

/// Whether the distinct-effect signal breaches: a key with 2+ effect ids seen by a worker, or
/// marked in the store.
pub fn distinct_effect_ids_breached(max_distinct_effect_ids: u64, multi_effect_keys: u64) -> bool {
    max_distinct_effect_ids >= DISTINCT_EFFECT_IDS_ALARM || multi_effect_keys >= 1
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
    /// The most distinct effect ids seen for one key (0 when no effect was committed or compared).
    pub max_distinct_effect_ids: u64,
    /// Records that met another event key holding their natural key (the guard before the
    /// call): sent to a person, never called (signal 4).
    pub natural_key_collisions: u64,
    /// Conflicts on reserve with a record `committed` without its effect id (also counted in
    /// `duplicates`).
    pub committed_without_effect_id: u64,
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
                    c.max_distinct_effect_ids = c.max_distinct_effect_ids.max(1);
                }
                RecordOutcome::AlreadyCommitted {
                    distinct_effect_ids,
                    ..
                } => {
                    c.max_distinct_effect_ids =
                        c.max_distinct_effect_ids.max(*distinct_effect_ids as u64);
                }
                RecordOutcome::Duplicate(_) | RecordOutcome::DuplicateInFlight => c.duplicates += 1,
                RecordOutcome::DuplicateWithoutEffectId => {
                    c.duplicates += 1;
                    c.committed_without_effect_id += 1;
                }
                RecordOutcome::Mismatch => c.mismatches += 1,
                RecordOutcome::LeaseLost { .. } => c.lease_lost += 1,
                RecordOutcome::Rejected(_) => c.rejected += 1,
                RecordOutcome::Manual(reason) => {
                    c.manual += 1;
                    if *reason == ManualReason::NaturalKeyCollision {
                        c.natural_key_collisions += 1;
                    }
                }
                // A deferred record had a transient answer too (its server asked to wait).
                RecordOutcome::Retry(_)
                | RecordOutcome::Deferred { .. }
                | RecordOutcome::NotStarted => c.transient_failures += 1,
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
            max_distinct_effect_ids: report.max_distinct_effect_ids as u64,
            natural_key_collisions: report.natural_key_collisions as u64,
            ..Self::default()
        }
    }

    /// Adds `other` into `self` (maximum for `max_distinct_effect_ids`).
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
        self.max_distinct_effect_ids = self
            .max_distinct_effect_ids
            .max(other.max_distinct_effect_ids);
        self.natural_key_collisions += other.natural_key_collisions;
        self.committed_without_effect_id += other.committed_without_effect_id;
    }

    /// Emits the counters through the `metrics` facade, to whatever recorder the caller
    /// installed (the Lambda wiring writes its own EMF documents instead, one per invocation:
    /// a process-wide recorder would mix the counts of concurrent invocations). Counters that are
    /// zero are still registered, so a recorder sees explicit zeros.
    pub fn emit(&self) {
        for (name, value) in self.counters() {
            metrics::counter!(name).increment(value);
        }
        if self.max_distinct_effect_ids > 0 {
            metrics::histogram!(metric::DISTINCT_EFFECT_IDS)
                .record(self.max_distinct_effect_ids as f64);
        }
    }

    /// The counters by their metric names ([`metric`]), zeros included; the distinct effect ids
    /// (a maximum, not a count) are not among them.
    pub fn counters(&self) -> [(&'static str, u64); 12] {
        [
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
            (metric::NATURAL_KEY_COLLISIONS, self.natural_key_collisions),
            (
                metric::COMMITTED_WITHOUT_EFFECT_ID,
                self.committed_without_effect_id,
            ),
        ]
    }
}

/// The store signals, read by the metrics function every minute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StoreSignals {
    /// Age of the oldest live (not expired) `in_flight` record, seconds; 0 when there is none.
    pub oldest_in_flight_age_s: i64,
    /// Live `in_flight` records older than 10 minutes.
    pub in_flight_older_than_10m: u64,
    /// Keys with two or more distinct effect ids.
    pub multi_effect_keys: u64,
}

/// Page size of the `InFlight` queries of [`collect_store_signals`].
const SIGNAL_PAGE: usize = 100;

/// Reads the store signals at `now_ms` (epoch ms) from the sparse GSIs `InFlight` (16 shards,
/// paginated, oldest first) and the multi-effect index (`store::dynamo::MULTI_EFFECT_INDEX`), without a scan. Expired records (TTL passed, not yet
/// deleted) are left out: nothing will finish them and they are not stuck work.
///
/// # Errors
/// A [`StoreError`] from a query.
pub async fn collect_store_signals(
    store: &dyn InFlightIndex,
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
        multi_effect_keys: store.multi_effect_keys().await? as u64,
    })
}
