//! The four signals over simulated time, computed as production computes them (the gate's
//! [`Counts`] per invocation, [`collect_store_signals`](gate::signals::collect_store_signals)
//! every minute as the metrics function does), and every alarm of `template.yaml` evaluated as
//! CloudWatch evaluates it, with the definitions of [`gate::signals`]:
//!
//! * datapoints are the metric's statistic over periods aligned to the clock (UTC epoch
//!   multiples of the period: the hour, the day), as CloudWatch aggregates them;
//! * a period's datapoint is judged when the period has ended (CloudWatch may look at the
//!   period in progress earlier; the alarms here only breach on counts that a full period
//!   keeps, so the time given is the latest it fires);
//! * an alarm goes to ALARM when `DatapointsToAlarm` of the last `EvaluationPeriods` datapoints
//!   breach, and back to OK otherwise; a period without data is missing and treated as not
//!   breaching (`TreatMissingData: notBreaching`; the oldest-`in_flight` alarm's `missing` keeps
//!   its state instead, which the simulator's metrics function, sampling every minute while
//!   there is work, never leaves a gap for);
//! * each move to ALARM is a firing (a page).

use std::collections::BTreeMap;

use gate::signals::{
    self, distinct_effect_ids_breached, natural_key_collisions_breached, oldest_in_flight_breached,
    Counts, RatioAlarm, StoreSignals, RATIO_ALARMS,
};
use serde::Serialize;

/// The alarms of `template.yaml`, by name.
pub mod alarm {
    use gate::signals;
    /// Duplicate ratio above 20 % in a 5-minute period (at least 50 records).
    pub const DUPLICATE_RATIO_HIGH: &str = signals::DUPLICATE_RATIO_HIGH_5M.name;
    /// Duplicate ratio above 20 % in an hour (at least 5 records, 4 duplicates).
    pub const DUPLICATE_RATIO_HIGH_HOURLY: &str = signals::DUPLICATE_RATIO_HIGH_1H.name;
    /// Duplicate ratio above 20 % in 6 hours (at least 20 records, 6 duplicates).
    pub const DUPLICATE_RATIO_HIGH_SIX_HOURS: &str = signals::DUPLICATE_RATIO_HIGH_6H.name;
    /// No duplicate in two hours in a row with at least 700 records each.
    pub const DUPLICATE_RATIO_ZERO_HOURLY: &str = signals::DUPLICATE_RATIO_ZERO_1H.name;
    /// No duplicate in three days in a row with at least 200 records each.
    pub const DUPLICATE_RATIO_ZERO: &str = signals::DUPLICATE_RATIO_ZERO_1D.name;
    /// The oldest `in_flight` record older than `gate::signals::OLDEST_IN_FLIGHT_MAX_S` (180 s).
    pub const OLDEST_IN_FLIGHT_AGE: &str = "OldestInFlightAge";
    /// Two or more distinct slot ids for one key.
    pub const DISTINCT_EFFECT_IDS: &str = "DistinctEffectIds";
    /// A natural-key collision in a minute.
    pub const NATURAL_KEY_COLLISIONS: &str = "NaturalKeyCollisions";
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
    /// The scenario's start, epoch ms (the origin of every `at_s`).
    pub start_ms: i64,
    /// Duplicates / received over the whole run (0 when nothing was received).
    pub duplicate_ratio: f64,
    /// The highest duplicate ratio of a 5-minute period with enough traffic to be judged, if any.
    pub max_judged_duplicate_ratio_5m: Option<f64>,
    /// The highest duplicate ratio of an hour the hourly alarm judged, if any.
    pub max_judged_duplicate_ratio_1h: Option<f64>,
    /// The oldest `in_flight` age the metrics function saw, seconds.
    pub max_oldest_in_flight_age_s: i64,
    /// The oldest `in_flight` age at the last sample, seconds.
    pub final_oldest_in_flight_age_s: i64,
    /// The most distinct slot ids seen for one key.
    pub max_distinct_effect_ids: u64,
    /// Keys marked with two or more slot ids at the last sample.
    pub multi_effect_keys: u64,
    /// Natural-key collisions counted by the consumer and the reconciler.
    pub natural_key_collisions: u64,
    /// Alarms that fired, each once (its first firing), in the order they first fired.
    pub alarms: Vec<FiredAlarm>,
    /// Every move of an alarm to ALARM (a page), in time order.
    pub firings: Vec<FiredAlarm>,
    /// The signals' datapoints over time, for `sim replay --plot` (not in the JSON report).
    #[serde(skip)]
    pub series: SignalSeries,
}

/// The signals' datapoints as CloudWatch would chart them, times in seconds after the start.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SignalSeries {
    /// Per hour with records: (end of the hour, received, duplicates).
    pub hourly: Vec<(i64, u64, u64)>,
    /// Per metrics-function sample: (time, oldest `in_flight` age in seconds).
    pub oldest_in_flight: Vec<(i64, i64)>,
    /// Per minute with a datapoint: (end of the minute, distinct slot ids for one key (2 when a
    /// key is marked), natural-key collisions).
    pub per_minute: Vec<(i64, u64, u64)>,
}

impl SignalSummary {
    /// When `alarm` first fired, seconds after the scenario's start; `None` if it did not.
    pub fn fired_at_s(&self, alarm: &str) -> Option<i64> {
        self.alarms
            .iter()
            .find(|a| a.alarm == alarm)
            .map(|a| a.at_s)
    }
}

/// An alarm that fired.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FiredAlarm {
    /// The alarm's name (see [`alarm`]).
    pub alarm: String,
    /// Seconds after the scenario's start when the breaching period ended.
    pub at_s: i64,
}

/// One alarm's datapoints: period index (epoch ms / period ms) to whether it breaches.
type Datapoints = BTreeMap<i64, bool>;

/// The moves to ALARM of an alarm with `period_ms`, `evaluation_periods` N and
/// `datapoints_to_alarm` M over `datapoints` (missing = not breaching): epoch ms of the end of
/// each period at which M of the last N breach while the previous evaluation did not.
pub fn alarm_firings(
    datapoints: &Datapoints,
    period_ms: i64,
    evaluation_periods: u32,
    datapoints_to_alarm: u32,
) -> Vec<i64> {
    let (Some(first), Some(last)) = (
        datapoints.keys().next().copied(),
        datapoints.keys().next_back().copied(),
    ) else {
        return Vec::new();
    };
    let n = i64::from(evaluation_periods.max(1));
    let mut in_alarm = false;
    let mut firings = Vec::new();
    // Evaluations continue N - 1 periods past the last datapoint (they see it in their window).
    for p in first..=last + n - 1 {
        let breaching = (p - n + 1..=p)
            .filter(|q| datapoints.get(q).copied().unwrap_or(false))
            .count() as u32;
        let alarm = breaching >= datapoints_to_alarm;
        if alarm && !in_alarm {
            firings.push((p + 1) * period_ms);
        }
        in_alarm = alarm;
    }
    firings
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

    /// The sum of every invocation's counters (maximum for `max_distinct_effect_ids`).
    pub fn total(&self) -> Counts {
        let mut total = Counts::default();
        for c in self.counts.values() {
            total.add(c);
        }
        total
    }

    /// The counters summed over periods of `period_s` aligned to the epoch: period index (epoch
    /// ms / period ms) to counts. Periods without an invocation are absent (missing data).
    pub fn per_period(&self, period_s: i64) -> BTreeMap<i64, Counts> {
        let period_ms = period_s * 1000;
        let mut out: BTreeMap<i64, Counts> = BTreeMap::new();
        for (at, c) in &self.counts {
            out.entry(at.div_euclid(period_ms)).or_default().add(c);
        }
        out
    }

    /// The datapoints of a duplicate-ratio alarm.
    pub fn ratio_datapoints(&self, alarm: &RatioAlarm) -> Datapoints {
        self.per_period(alarm.period_s)
            .into_iter()
            .map(|(p, c)| (p, alarm.breached(c.received, c.duplicates)))
            .collect()
    }

    /// The store signals' per-minute datapoints (`Maximum` of the samples in the minute).
    fn minute_samples(&self) -> BTreeMap<i64, StoreSignals> {
        let minute_ms = signals::STORE_SIGNALS_PERIOD_S * 1000;
        let mut out: BTreeMap<i64, StoreSignals> = BTreeMap::new();
        for (at, s) in &self.samples {
            let m = out.entry(at.div_euclid(minute_ms)).or_default();
            m.oldest_in_flight_age_s = m.oldest_in_flight_age_s.max(s.oldest_in_flight_age_s);
            m.in_flight_older_than_10m = m.in_flight_older_than_10m.max(s.in_flight_older_than_10m);
            m.multi_effect_keys = m.multi_effect_keys.max(s.multi_effect_keys);
        }
        out
    }

    /// Every alarm's firings (epoch ms), by alarm name.
    pub fn firings(&self) -> BTreeMap<&'static str, Vec<i64>> {
        let mut out = BTreeMap::new();
        for a in RATIO_ALARMS {
            let firings = alarm_firings(
                &self.ratio_datapoints(&a),
                a.period_s * 1000,
                a.evaluation_periods,
                a.datapoints_to_alarm,
            );
            out.insert(a.name, firings);
        }
        let minute_ms = signals::STORE_SIGNALS_PERIOD_S * 1000;
        let minutes = self.minute_samples();
        let age: Datapoints = minutes
            .iter()
            .map(|(m, s)| (*m, oldest_in_flight_breached(s.oldest_in_flight_age_s)))
            .collect();
        out.insert(
            alarm::OLDEST_IN_FLIGHT_AGE,
            alarm_firings(&age, minute_ms, 1, 1),
        );
        // DistinctEffectIds: MAX(Maximum of DistinctEffectIds, 2 if MultiEffectKeys >= 1), per minute.
        let mut slots: Datapoints = minutes
            .iter()
            .map(|(m, s)| (*m, distinct_effect_ids_breached(0, s.multi_effect_keys)))
            .collect();
        for (m, c) in self.per_period(signals::STORE_SIGNALS_PERIOD_S) {
            *slots.entry(m).or_default() |=
                distinct_effect_ids_breached(c.max_distinct_effect_ids, 0);
        }
        out.insert(
            alarm::DISTINCT_EFFECT_IDS,
            alarm_firings(&slots, minute_ms, 1, 1),
        );
        let collisions_ms = signals::NATURAL_KEY_COLLISIONS_PERIOD_S * 1000;
        let collisions: Datapoints = self
            .per_period(signals::NATURAL_KEY_COLLISIONS_PERIOD_S)
            .into_iter()
            .map(|(m, c)| (m, natural_key_collisions_breached(c.natural_key_collisions)))
            .collect();
        out.insert(
            alarm::NATURAL_KEY_COLLISIONS,
            alarm_firings(&collisions, collisions_ms, 1, 1),
        );
        out
    }

    /// The store signals sampled, epoch ms.
    pub fn samples(&self) -> &[(i64, StoreSignals)] {
        &self.samples
    }

    /// Evaluates every alarm (module docs); `start_ms` (epoch ms) is the origin of the times.
    pub fn summarise(&self, start_ms: i64) -> SignalSummary {
        let total = self.total();
        let mut firings: Vec<FiredAlarm> = self
            .firings()
            .into_iter()
            .flat_map(|(name, times)| {
                times.into_iter().map(move |t| FiredAlarm {
                    alarm: name.to_string(),
                    at_s: (t - start_ms) / 1000,
                })
            })
            .collect();
        firings.sort_by(|a, b| a.at_s.cmp(&b.at_s).then(a.alarm.cmp(&b.alarm)));
        let mut alarms: Vec<FiredAlarm> = Vec::new();
        for f in &firings {
            if !alarms.iter().any(|a| a.alarm == f.alarm) {
                alarms.push(f.clone());
            }
        }
        let max_judged = |a: &RatioAlarm| {
            self.per_period(a.period_s)
                .values()
                .filter(|c| c.received >= a.min_received)
                .map(|c| c.duplicates as f64 / c.received as f64)
                .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))))
        };
        let last = self.samples.last().map(|(_, s)| *s).unwrap_or_default();
        let rel = |ms: i64| (ms - start_ms) / 1000;
        let hourly = self
            .per_period(3_600)
            .into_iter()
            .map(|(p, c)| (rel((p + 1) * 3_600_000), c.received, c.duplicates))
            .collect();
        let oldest_in_flight = self
            .samples
            .iter()
            .map(|(at, s)| (rel(*at), s.oldest_in_flight_age_s))
            .collect();
        let mut minutes: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
        for (m, c) in self.per_period(60) {
            let e = minutes.entry(m).or_default();
            e.0 = e.0.max(c.max_distinct_effect_ids);
            e.1 += c.natural_key_collisions;
        }
        for (m, s) in self.minute_samples() {
            if s.multi_effect_keys >= 1 {
                minutes.entry(m).or_default().0 = 2;
            }
        }
        let per_minute = minutes
            .into_iter()
            .map(|(m, (d, c))| (rel((m + 1) * 60_000), d, c))
            .collect();
        SignalSummary {
            start_ms,
            duplicate_ratio: if total.received == 0 {
                0.0
            } else {
                total.duplicates as f64 / total.received as f64
            },
            max_judged_duplicate_ratio_5m: max_judged(&signals::DUPLICATE_RATIO_HIGH_5M),
            max_judged_duplicate_ratio_1h: max_judged(&signals::DUPLICATE_RATIO_HIGH_1H),
            max_oldest_in_flight_age_s: self
                .samples
                .iter()
                .map(|(_, s)| s.oldest_in_flight_age_s)
                .max()
                .unwrap_or(0),
            final_oldest_in_flight_age_s: last.oldest_in_flight_age_s,
            max_distinct_effect_ids: total.max_distinct_effect_ids,
            multi_effect_keys: last.multi_effect_keys,
            natural_key_collisions: total.natural_key_collisions,
            alarms,
            firings,
            series: SignalSeries {
                hourly,
                oldest_in_flight,
                per_minute,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(v: &[(i64, bool)]) -> Datapoints {
        v.iter().copied().collect()
    }

    #[test]
    fn one_of_one_fires_at_the_end_of_each_breaching_run() {
        let d = points(&[(10, false), (11, true), (12, true), (13, false), (14, true)]);
        assert_eq!(alarm_firings(&d, 1000, 1, 1), vec![12_000, 15_000]);
    }

    #[test]
    fn three_of_three_needs_three_breaching_periods_in_a_row_and_missing_does_not_breach() {
        let d = points(&[
            (1, true),
            (2, true),
            (4, true),
            (5, true),
            (6, true),
            (7, true),
        ]);
        // 1, 2, (3 missing) break the run; 4, 5, 6 fire at the end of 6; 7 stays in alarm.
        assert_eq!(alarm_firings(&d, 10, 3, 3), vec![70]);
        let d = points(&[(1, true), (2, true)]);
        assert!(alarm_firings(&d, 10, 3, 3).is_empty());
    }

    #[test]
    fn ratio_periods_align_to_the_clock() {
        let mut r = SignalRecorder::default();
        let hour = 3_600_000;
        // 05:59 and 06:01 of the same day fall in two hourly periods.
        let base = 1_749_445_200_000; // 2025-06-09T05:00:00Z
        assert_eq!(base % hour, 0);
        r.record(
            base + 59 * 60_000,
            Counts {
                received: 3,
                ..Counts::default()
            },
        );
        r.record(
            base + 61 * 60_000,
            Counts {
                received: 4,
                ..Counts::default()
            },
        );
        let p = r.per_period(3_600);
        assert_eq!(p.len(), 2);
        assert_eq!(p[&(base / hour)].received, 3);
        assert_eq!(p[&(base / hour + 1)].received, 4);
    }
}
