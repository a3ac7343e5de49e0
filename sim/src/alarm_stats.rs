//! The statistics behind the duplicate-ratio alarms ([`gate::signals::RATIO_ALARMS`]): how often
//! a healthy feed pages by chance, computed from the binomial distribution.
//!
//! The model: a period of `period_s` holds `n = rate x period` records (the volume, taken as
//! steady), and each record is a duplicate (a conflict on reserve) with probability `p`,
//! independently: the number of duplicates is `Binomial(n, p)`. A period breaches with
//! probability `q = P(X >= k)`, `k` the fewest breaching duplicates
//! ([`RatioAlarm::breaching_duplicates_at_least`]); for the zero rule `q = (1 - p)^n`. An alarm that
//! needs `M` breaching periods in a row (`DatapointsToAlarm = EvaluationPeriods = M`) starts a
//! new page at a period when that period and the `M - 1` before it breach and the one before
//! them does not: `(1 - q) q^M` per period, times the periods in a month (30 days).

use gate::signals::{RatioAlarm, RatioRule};

/// Seconds in the month the rates are given for (30 days).
pub const MONTH_S: i64 = 30 * 86_400;

/// `P(X >= k)` for `X ~ Binomial(n, p)`, summed in log space (exact to double precision for the
/// sizes here: `n` up to a few hundred thousand).
pub fn binomial_tail(n: u64, p: f64, k: u64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if k > n || p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return 1.0;
    }
    let (ln_p, ln_q) = (p.ln(), (1.0 - p).ln());
    // ln C(n, i) built up incrementally from ln C(n, 0) = 0.
    let mut ln_choose = 0.0f64;
    let mut total = 0.0f64;
    for i in 0..=n {
        if i > 0 {
            ln_choose += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        if i >= k {
            let term = (ln_choose + i as f64 * ln_p + (n - i) as f64 * ln_q).exp();
            total += term;
            // Past the mode the terms only shrink: stop once they no longer count.
            if (i as f64) > n as f64 * p && term < total * 1e-17 {
                break;
            }
        }
    }
    total.min(1.0)
}

/// The records one period of `alarm` holds at `per_hour` records an hour.
pub fn records_per_period(alarm: &RatioAlarm, per_hour: f64) -> u64 {
    (per_hour * alarm.period_s as f64 / 3_600.0).round() as u64
}

/// The probability that one period of `alarm` breaches with `n` records, each a duplicate with
/// probability `p` (a fraction).
pub fn period_breach_probability(alarm: &RatioAlarm, n: u64, p: f64) -> f64 {
    match (alarm.rule, alarm.breaching_duplicates_at_least(n)) {
        (_, None) => 0.0,
        (RatioRule::Zero, Some(_)) => (1.0 - p).powf(n as f64),
        (RatioRule::Above { .. }, Some(k)) => binomial_tail(n, p, k),
    }
}

/// Expected pages a month (30 days) from `alarm` on a healthy feed of `per_hour` records an hour
/// with a duplicate probability `p` (a fraction): `periods x (1 - q) x q^M` (module docs).
pub fn false_pages_per_month(alarm: &RatioAlarm, per_hour: f64, p: f64) -> f64 {
    let n = records_per_period(alarm, per_hour);
    let q = period_breach_probability(alarm, n, p);
    let m = i32::try_from(alarm.datapoints_to_alarm).unwrap_or(i32::MAX);
    let periods = MONTH_S as f64 / alarm.period_s as f64;
    periods * (1.0 - q) * q.powi(m)
}

/// The probability that one period of `alarm` breaches when `per_hour` notifications an hour
/// arrive and, for the whole period, each is sent a second time with probability `p` (a
/// re-firing upstream: `p` = 1/3):
/// `n` notifications, `X ~ Binomial(n, p)` duplicates, `n + X` records received.
pub fn detection_probability(alarm: &RatioAlarm, per_hour: f64, p: f64) -> f64 {
    let n = records_per_period(alarm, per_hour);
    (0..=n)
        .filter(|x| alarm.breached(n + x, *x))
        .map(|x| (binomial_tail(n, p, x) - binomial_tail(n, p, x + 1)).max(0.0))
        .sum()
}

/// One row of the statistics table.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FalsePageRow {
    /// The alarm's name.
    pub alarm: &'static str,
    /// Records an hour.
    pub per_hour: f64,
    /// Duplicate probability, a fraction.
    pub duplicate_rate: f64,
    /// Records in one period.
    pub records_per_period: u64,
    /// The probability one period breaches.
    pub period_breach_probability: f64,
    /// Expected pages a month.
    pub pages_per_month: f64,
}

/// The table `docs/OPERATING.md` gives: every alarm of `alarms` at every volume of `per_hour`
/// and every duplicate rate of `rates`.
pub fn false_page_table(
    alarms: &[RatioAlarm],
    per_hour: &[f64],
    rates: &[f64],
) -> Vec<FalsePageRow> {
    let mut rows = Vec::new();
    for alarm in alarms {
        for &v in per_hour {
            for &p in rates {
                let n = records_per_period(alarm, v);
                rows.push(FalsePageRow {
                    alarm: alarm.name,
                    per_hour: v,
                    duplicate_rate: p,
                    records_per_period: n,
                    period_breach_probability: period_breach_probability(alarm, n, p),
                    pages_per_month: false_pages_per_month(alarm, v, p),
                });
            }
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use gate::signals::{
        DUPLICATE_RATIO_HIGH_1H, DUPLICATE_RATIO_HIGH_5M, DUPLICATE_RATIO_ZERO_1D, RATIO_ALARMS,
    };

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs().max(f64::MIN_POSITIVE)
    }

    #[test]
    fn the_binomial_tail_matches_closed_forms() {
        // P(X >= 1) = 1 - (1 - p)^n.
        assert!(close(
            binomial_tail(200, 0.01, 1),
            1.0 - 0.99f64.powi(200),
            1e-12
        ));
        // P(X >= n) = p^n.
        assert!(close(binomial_tail(5, 0.03, 5), 0.03f64.powi(5), 1e-12));
        // P(X >= 3), n = 10, p = 0.03, by hand: 1 - sum_{i<3} C(10,i) p^i q^(10-i).
        let q = 0.97f64;
        let by_hand = 1.0 - q.powi(10) - 10.0 * 0.03 * q.powi(9) - 45.0 * 0.0009 * q.powi(8);
        assert!(close(binomial_tail(10, 0.03, 3), by_hand, 1e-9));
        assert_eq!(binomial_tail(10, 0.03, 0), 1.0);
        assert_eq!(binomial_tail(10, 0.03, 11), 0.0);
    }

    #[test]
    fn the_hourly_alarm_needs_four_duplicates_at_the_real_volume() {
        // 10 records: more than 20 % is 3, the floor makes it 4.
        assert_eq!(
            DUPLICATE_RATIO_HIGH_1H.breaching_duplicates_at_least(10),
            Some(4)
        );
        // 30 records: more than 20 % is 7.
        assert_eq!(
            DUPLICATE_RATIO_HIGH_1H.breaching_duplicates_at_least(30),
            Some(7)
        );
        assert_eq!(
            DUPLICATE_RATIO_HIGH_1H.breaching_duplicates_at_least(4),
            None
        );
        // 720 hours x P(Bin(10, 0.03) >= 4) x (1 - that).
        let q = binomial_tail(10, 0.03, 4);
        let expected = 720.0 * (1.0 - q) * q;
        assert!(close(
            false_pages_per_month(&DUPLICATE_RATIO_HIGH_1H, 10.0, 0.03),
            expected,
            1e-12
        ));
        assert!(expected < 0.2, "{expected}");
    }

    #[test]
    fn a_third_re_fired_for_an_hour_at_ten_an_hour_breaches_the_hour_about_half_the_time() {
        // 10 notifications, X ~ Bin(10, 1/3) copies: breaches with X >= 4 (and X / (10 + X) above
        // 20 %, true from X = 3): 1 - P(X <= 3).
        let p: f64 = 1.0 / 3.0;
        let q = 1.0 - p;
        let at_most_3 = q.powi(10)
            + 10.0 * p * q.powi(9)
            + 45.0 * p.powi(2) * q.powi(8)
            + 120.0 * p.powi(3) * q.powi(7);
        let got = detection_probability(&DUPLICATE_RATIO_HIGH_1H, 10.0, p);
        assert!(close(got, 1.0 - at_most_3, 1e-9), "{got}");
        assert!((0.4..0.5).contains(&got), "{got}");
    }

    #[test]
    fn the_zero_alarm_needs_three_empty_days() {
        // 240 records a day at 1 %: a day without a duplicate is 0.99^240 = 8.96 %; three in a row.
        let q = 0.99f64.powi(240);
        let expected = 30.0 * (1.0 - q) * q.powi(3);
        let got = false_pages_per_month(&DUPLICATE_RATIO_ZERO_1D, 10.0, 0.01);
        assert!(close(got, expected, 1e-12), "{got} {expected}");
        assert!(got < 0.05, "{got}");
        // Below 200 records a day it does not judge.
        assert_eq!(
            false_pages_per_month(&DUPLICATE_RATIO_ZERO_1D, 8.0, 0.01),
            0.0
        );
    }

    #[test]
    fn no_ratio_alarm_pages_a_healthy_feed_more_than_once_in_five_months() {
        for rate in [0.01, 0.03] {
            for per_hour in [10.0, 1_000.0] {
                let total: f64 = RATIO_ALARMS
                    .iter()
                    .map(|a| false_pages_per_month(a, per_hour, rate))
                    .sum();
                assert!(total < 0.2, "{per_hour}/h at {rate}: {total} pages a month");
            }
        }
        // The 5-minute alarm at 1,000 an hour: 83 records, 17 duplicates at 3 %: 4e-10 a period,
        // 3.4e-6 pages a month (once in 25,000 years).
        let five = false_pages_per_month(&DUPLICATE_RATIO_HIGH_5M, 1_000.0, 0.03);
        assert!((1e-6..1e-5).contains(&five), "{five}");
    }
}
