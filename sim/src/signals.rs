//! The three signals over simulated time, computed as production computes them (the gate's
//! [`Counts`] per invocation, [`collect_store_signals`] every minute as the metrics function
//! does) and the four alarms evaluated with the gate's own thresholds ([`gate::signals`]).

use std::collections::BTreeMap;

use gate::signals::{
    self, distinct_slot_ids_breached, duplicate_ratio_high_breached, duplicate_ratio_zero_breached,
    oldest_in_flight_breached, Counts, StoreSignals,
};
use serde::Serialize;

/// The alarms of `template.yaml`, by name.
pub mod alarm {
    /// Duplicate ratio above 20 % in a 5-minute period with enough traffic.
    pub const DUPLICATE_RATIO_HIGH: &str = "DuplicateRatioHigh";
    /// No duplicate at all over 6 hours with enough traffic.
    pub const DUPLICATE_RATIO_ZERO: &str = "DuplicateRatioZero";
    /// The oldest `in_flight` record older than 600 s.
    pub const OLDEST_IN_FLIGHT_AGE: &str = "OldestInFlightAge";
    /// Two or more distinct slot ids for one key.
    pub const DISTINCT_SLOT_IDS: &str = "DistinctSlotIds";
}

/// Signals recorded during a replay.
#[derive(Debug, Default)]
pub struct SignalRecorder {
    /// Counters per invocation, keyed by epoch ms (summed when several share a time).
    counts: BTreeMap<i64, Counts>,
    /// Store signals sampled by the simulated metrics function, epoch ms.
    samples: Vec<(i64, StoreSignals)>,
}

/// What the signals showed and which alarms fired.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct SignalSummary {
    /// Duplicates / received over the whole run (0 when nothing was received).
    pub duplicate_ratio: f64,
    /// The highest duplicate ratio of a 5-minute period with enough traffic to be judged, if any.
    pub max_judged_duplicate_ratio_5m: Option<f64>,
    /// The oldest `in_flight` age the metrics function saw, seconds.
    pub max_oldest_in_flight_age_s: i64,
    /// The oldest `in_flight` age at the last sample, seconds.
    pub final_oldest_in_flight_age_s: i64,
    /// The most distinct slot ids seen for one key.
    pub max_distinct_slot_ids: u64,
    /// Keys marked with two or more slot ids at the last sample.
    pub multi_slot_keys: u64,
    /// Alarms that fired, each once, in the order they first fired, with the simulated second.
    pub alarms: Vec<FiredAlarm>,
}

/// An alarm that fired.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FiredAlarm {
    /// The alarm's name (see [`alarm`]).
    pub alarm: String,
    /// Seconds after the scenario's start when its period ended.
    pub at_s: i64,
}

impl SignalRecorder {
    /// Records one invocation's counters at `at_ms`.
    pub fn record(&mut self, at_ms: i64, counts: Counts) {
        self.counts.entry(at_ms).or_default().add(&counts);
    }

    /// Records one metrics-function sample at `at_ms`.
    pub fn sample(&mut self, at_ms: i64, store_signals: StoreSignals) {
        self.samples.push((at_ms, store_signals));
    }

    /// The sum of every invocation's counters (maximum for `max_distinct_slot_ids`).
    pub fn total(&self) -> Counts {
        let mut total = Counts::default();
        for c in self.counts.values() {
            total.add(c);
        }
        total
    }

    /// Evaluates the alarms over periods aligned at `start_ms`, as CloudWatch evaluates
    /// `template.yaml`'s alarms (one period, one datapoint to alarm).
    pub fn summarise(&self, start_ms: i64) -> SignalSummary {
        let mut fired: BTreeMap<&'static str, i64> = BTreeMap::new();
        let mut fire = |name: &'static str, at_ms: i64| {
            let at_s = (at_ms - start_ms) / 1000;
            fired
                .entry(name)
                .and_modify(|t| *t = (*t).min(at_s))
                .or_insert(at_s);
        };
        let total = self.total();
        let mut high: BTreeMap<i64, Counts> = BTreeMap::new();
        let mut zero: BTreeMap<i64, Counts> = BTreeMap::new();
        for (at, c) in &self.counts {
            let offset = at - start_ms;
            high.entry(offset.div_euclid(signals::DUPLICATE_RATIO_HIGH_PERIOD_S * 1000))
                .or_default()
                .add(c);
            zero.entry(offset.div_euclid(signals::DUPLICATE_RATIO_ZERO_PERIOD_S * 1000))
                .or_default()
                .add(c);
            if distinct_slot_ids_breached(c.max_distinct_slot_ids, 0) {
                fire(alarm::DISTINCT_SLOT_IDS, *at);
            }
        }
        let mut max_judged: Option<f64> = None;
        for (period, c) in &high {
            if c.received >= signals::DUPLICATE_RATIO_HIGH_MIN_RECEIVED {
                let ratio = c.duplicates as f64 / c.received as f64;
                max_judged = Some(max_judged.map_or(ratio, |m: f64| m.max(ratio)));
            }
            if duplicate_ratio_high_breached(c.received, c.duplicates) {
                fire(
                    alarm::DUPLICATE_RATIO_HIGH,
                    start_ms + (period + 1) * signals::DUPLICATE_RATIO_HIGH_PERIOD_S * 1000,
                );
            }
        }
        for (period, c) in &zero {
            if duplicate_ratio_zero_breached(c.received, c.duplicates) {
                fire(
                    alarm::DUPLICATE_RATIO_ZERO,
                    start_ms + (period + 1) * signals::DUPLICATE_RATIO_ZERO_PERIOD_S * 1000,
                );
            }
        }
        let mut max_age = 0;
        for (at, s) in &self.samples {
            max_age = max_age.max(s.oldest_in_flight_age_s);
            if oldest_in_flight_breached(s.oldest_in_flight_age_s) {
                fire(alarm::OLDEST_IN_FLIGHT_AGE, *at);
            }
            if distinct_slot_ids_breached(0, s.multi_slot_keys) {
                fire(alarm::DISTINCT_SLOT_IDS, *at);
            }
        }
        let last = self.samples.last().map(|(_, s)| *s).unwrap_or_default();
        let mut alarms: Vec<FiredAlarm> = fired
            .into_iter()
            .map(|(alarm, at_s)| FiredAlarm {
                alarm: alarm.to_string(),
                at_s,
            })
            .collect();
        alarms.sort_by_key(|a| a.at_s);
        SignalSummary {
            duplicate_ratio: if total.received == 0 {
                0.0
            } else {
                total.duplicates as f64 / total.received as f64
            },
            max_judged_duplicate_ratio_5m: max_judged,
            max_oldest_in_flight_age_s: max_age,
            final_oldest_in_flight_age_s: last.oldest_in_flight_age_s,
            max_distinct_slot_ids: total.max_distinct_slot_ids,
            multi_slot_keys: last.multi_slot_keys,
            alarms,
        }
    }
}
