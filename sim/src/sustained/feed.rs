//! The sustained replay's feed: the planned Poisson arrivals with their redeliveries, each
//! notification's body, and the queue the pollers take from.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::sync::Notify;
use truck_slot::iso6346::check_digit;

use super::config::{SustainedConfig, START_MS};

/// One message on the queue.
#[derive(Debug, Clone)]
pub(super) struct Message {
    pub(super) id: String,
    /// Index of the notification.
    pub(super) event: usize,
    pub(super) sent_at_ms: i64,
    pub(super) visible_at_ms: i64,
}

#[derive(Default)]
pub(super) struct QueueState {
    pub(super) visible: VecDeque<Message>,
    /// Failed messages, visible again at their `visible_at_ms`.
    pub(super) delayed: Vec<Message>,
    /// Received, not yet deleted.
    pub(super) in_flight: usize,
    /// All arrivals sent.
    pub(super) producer_done: bool,
    pub(super) running: usize,
    pub(super) deliveries: usize,
    pub(super) invocations: usize,
    pub(super) acked: usize,
    pub(super) failed_receives: usize,
    pub(super) invocation_ms: Vec<i64>,
    pub(super) end_to_end_ms: Vec<i64>,
    pub(super) outcomes: BTreeMap<String, usize>,
    /// Messages acknowledged per event index (a redelivery shares its original's index).
    pub(super) acked_events: BTreeMap<usize, usize>,
}

pub(super) struct Queue {
    pub(super) state: Mutex<QueueState>,
    pub(super) changed: Notify,
}

impl Queue {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes delayed messages whose time has come visible.
    pub(super) fn release_delayed(st: &mut QueueState, now: i64) {
        let mut i = 0;
        while i < st.delayed.len() {
            if st.delayed[i].visible_at_ms <= now {
                let m = st.delayed.remove(i);
                st.visible.push_back(m);
            } else {
                i += 1;
            }
        }
    }
}

/// A valid ISO 6346 number for serial `n`.
fn container(n: usize) -> String {
    let first = format!("SUSU{:06}", n % 1_000_000);
    let digit = check_digit(&first).unwrap_or(0);
    format!("{first}{digit}")
}

/// The body of notification `i`: its own container, a window the day after the start.
pub(super) fn body(i: usize) -> String {
    let day = START_MS + 24 * 3_600_000;
    let start = day + (i as i64 % 48) * 15 * 60_000;
    let fmt = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap_or_default()
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    };
    serde_json::json!({
        "notificationId": format!("PCS-S{i:07}"),
        "equipment_number": container(i),
        "preferred_window": {"start": fmt(start), "end": fmt(start + 2 * 3_600_000)},
        "terminal": "ECT-DELTA",
        "pin": format!("{:04}", (i * 7919) % 10_000),
        "gross_mass_kg": 12_000 + (i % 19) * 1000,
    })
    .to_string()
}

/// The planned arrivals: (time offset ms, event index), in time order.
pub(super) fn plan(config: &SustainedConfig) -> (Vec<(i64, usize)>, usize) {
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    let horizon = config.duration_s as f64 * 1000.0;
    let rate_ms = config.rate_per_s.max(1e-9) / 1000.0;
    let mut times = Vec::new();
    let mut t = 0.0f64;
    loop {
        let u: f64 = rng.random::<f64>().max(1e-12);
        t += -u.ln() / rate_ms;
        if t >= horizon {
            break;
        }
        times.push(t as i64);
    }
    let mut arrivals: Vec<(i64, usize)> = Vec::with_capacity(times.len());
    let mut events = 0usize;
    let mut redeliveries: Vec<(i64, usize)> = Vec::new();
    let dup = config.duplicate_rate.clamp(0.0, 1.0);
    for at in times {
        // A share `dup` of arrivals is a redelivery of an earlier notification: the slots are
        // planned here (a redelivery lands 1-60 s after its original, within the run).
        if events > 0 && rng.random::<f64>() < dup {
            let original = rng.random_range(0..events);
            redeliveries.push((at, original));
            continue;
        }
        arrivals.push((at, events));
        events += 1;
    }
    // A redelivery is sent at its drawn time, but never before its original plus 1-60 s; one
    // that would fall after the last second of arrivals is not sent (the feed stops there).
    let first_at: Vec<i64> = arrivals.iter().map(|(t, _)| *t).collect();
    for (at, original) in redeliveries {
        let earliest = first_at[original] + rng.random_range(1_000..=60_000);
        let at = at.max(earliest);
        if (at as f64) < horizon {
            arrivals.push((at, original));
        }
    }
    arrivals.sort_by_key(|(t, e)| (*t, *e));
    (arrivals, events)
}
