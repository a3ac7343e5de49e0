//! `sim bench-replay`: the replay's wall time per simulated day at multiples of the forwarder's
//! volume ([`crate::scenarios::forwarder`]: 243 notifications a day, 2 % re-fired, six crashes
//! after the claim, the reconciler every minute), medians over a few runs. A replay's cost must
//! grow with its events: at one volume the time per simulated day stays the same whatever the
//! duration, and 4 times the volume costs about 4 times as much per day. It prints figures; it
//! asserts nothing about time (a benchmark, not a test).

use std::time::Instant;

use serde::Serialize;

use crate::replay::{self, ReplayOptions};
use crate::scenarios::{forwarder, FORWARDER_VOLUME_PER_DAY};

/// One volume's figures.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRow {
    /// The multiple of the forwarder's volume.
    pub volume: u32,
    /// Notifications a day (243 times `volume`).
    pub per_day: u32,
    /// Simulated days.
    pub days: u32,
    /// Notifications replayed.
    pub notifications: usize,
    /// Each run's wall time, seconds, in run order.
    pub runs_s: Vec<f64>,
    /// The median run, seconds.
    pub median_s: f64,
    /// Wall milliseconds per simulated day (median run).
    pub ms_per_simulated_day: f64,
    /// Wall microseconds per notification (median run).
    pub us_per_notification: f64,
    /// The replay's own check that it did the work: slots issued, bookings, records still
    /// `in_flight` (the same in every run: the replay is deterministic).
    pub slots_issued: usize,
    /// TMS bookings.
    pub tms_bookings: usize,
    /// Records still `in_flight` at the end.
    pub still_in_flight: usize,
}

/// The median of `values` (the mean of the middle two for an even count); 0 when empty.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Replays `days` of the forwarder's traffic at each of `volumes` (multiples of 243 a day),
/// `runs` times each (at least 1), with the gated handler on the memory store.
///
/// # Errors
/// A replay's error (the terminal simulator cannot bind a port).
pub async fn run(days: u32, volumes: &[u32], runs: usize) -> Result<Vec<BenchRow>, String> {
    let mut rows = Vec::new();
    for &volume in volumes {
        let per_day = FORWARDER_VOLUME_PER_DAY * volume.max(1);
        let scenario = forwarder(days, per_day);
        let mut runs_s = Vec::new();
        let mut last = None;
        for _ in 0..runs.max(1) {
            let started = Instant::now();
            let report = replay::run(&scenario, ReplayOptions::gated()).await?;
            runs_s.push(started.elapsed().as_secs_f64());
            last = Some(report);
        }
        let report = last.ok_or("no run")?;
        let median_s = median(&runs_s);
        rows.push(BenchRow {
            volume,
            per_day,
            days,
            notifications: scenario.notifications.len(),
            ms_per_simulated_day: median_s * 1_000.0 / f64::from(days.max(1)),
            us_per_notification: median_s * 1e6 / scenario.notifications.len().max(1) as f64,
            runs_s,
            median_s,
            slots_issued: report.slots_issued,
            tms_bookings: report.tms_bookings,
            still_in_flight: report.still_in_flight,
        });
    }
    Ok(rows)
}

/// The rows as a table.
pub fn render(rows: &[BenchRow]) -> String {
    let mut out = format!(
        "{:>6} {:>7} {:>5} {:>13} {:>9} {:>17} {:>10} {:>9}  {}\n",
        "volume",
        "per day",
        "days",
        "notifications",
        "median s",
        "runs s",
        "ms per day",
        "us per n",
        "slots/bookings/in_flight"
    );
    for r in rows {
        let runs: Vec<String> = r.runs_s.iter().map(|s| format!("{s:.2}")).collect();
        out.push_str(&format!(
            "{:>5}x {:>7} {:>5} {:>13} {:>9.2} {:>17} {:>10.1} {:>9.0}  {}/{}/{}\n",
            r.volume,
            r.per_day,
            r.days,
            r.notifications,
            r.median_s,
            runs.join(" "),
            r.ms_per_simulated_day,
            r.us_per_notification,
            r.slots_issued,
            r.tms_bookings,
            r.still_in_flight
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn the_median_is_the_middle_run_or_the_mean_of_the_middle_two() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}
