//! The sustained-rate replay at a small scale: deterministic figures only (queue
//! length, counts, invariants), no timing of the machine.

use sim::sustained::{capacity, run_blocking, SustainedConfig};

fn config(rate: f64, maximum_concurrency: usize) -> SustainedConfig {
    SustainedConfig {
        rate_per_s: rate,
        duration_s: 120,
        maximum_concurrency,
        ..SustainedConfig::default()
    }
}

#[test]
fn a_deployment_inside_its_capacity_keeps_the_queue_flat_and_every_invariant() {
    // MaximumConcurrency 2, batches of 10 at 200 + 2 x 5 ms: the model holds 95 events/s.
    let c = config(60.0, 2);
    let (batch_ms, rate) = capacity(&c);
    assert_eq!(batch_ms, 210.0);
    assert!((rate - 2.0 * 10.0 * 1000.0 / 210.0).abs() < 1e-9);
    let r = run_blocking(c).expect("the simulation runs");
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert!(!r.queue_grew);
    assert_eq!(r.slots, r.events, "one slot per notification");
    assert_eq!(r.outcomes.get("committed"), Some(&r.events));
    assert_eq!(r.outcomes.get("duplicate"), Some(&r.redeliveries));
    assert!(r.redeliveries > 0, "the run has redeliveries");
    // At 60 events/s a poller never waits on more than a few batches' worth.
    assert!(r.backlog_max < 60, "backlog {}", r.backlog_max);
    // Deterministic: the same seed, the same run.
    let again = run_blocking(config(60.0, 2)).expect("the simulation runs");
    assert_eq!(again.backlog, r.backlog);
    assert_eq!(again.invocations, r.invocations);
}

#[test]
fn a_deployment_past_its_capacity_is_reported_as_queue_growth() {
    // MaximumConcurrency 1 holds 47.6 events/s; 60 arrive.
    let r = run_blocking(config(60.0, 1)).expect("the simulation runs");
    assert!(r.queue_grew);
    assert!(r
        .violations
        .iter()
        .any(|v| v.starts_with("the backlog grew")));
    let first = r.backlog_mean_per_minute[0];
    let last = *r.backlog_mean_per_minute.last().expect("two minutes");
    assert!(last > first + 10.0, "{first} -> {last}");
    // Late, not lost: every notification still booked once.
    assert_eq!(r.slots, r.events);
    assert_eq!(r.outcomes.get("committed"), Some(&r.events));
}

#[test]
fn a_terminal_limit_caps_the_rate_below_what_lambda_could_do() {
    // 10 claims at once at 200 ms: at most 50 claims/s, whatever MaximumConcurrency allows.
    let mut c = config(60.0, 5);
    c.terminal_concurrency = Some(10);
    assert!((capacity(&c).1 - 50.0).abs() < 1e-9);
    let r = run_blocking(c).expect("the simulation runs");
    assert!(r.queue_grew, "{:?}", r.backlog_mean_per_minute);
    assert_eq!(r.slots, r.events);
}
