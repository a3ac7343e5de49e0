//! The deterministic simulation under `cargo test`: 2,000 seeds (four chunks, run in parallel),
//! each a whole world of workers, reconciler, terminal and queue with faults, run to quiescence
//! and checked against the gate's invariants (see `sim::dst`). A failure names the seed; replay it
//! with `cargo run --release -p sim -- check --seed S`.

use sim::dst::{run_seed, run_seeds, Summary};

/// Seeds per chunk; four chunks make the 2,000 seeds.
const CHUNK: u64 = 500;

fn assert_clean(summary: &Summary) {
    if summary.failures.is_empty() {
        return;
    }
    let mut msg = String::new();
    for (seed, violations) in &summary.failures {
        msg.push_str(&format!(
            "\nseed {seed} (replay: cargo run --release -p sim -- check --seed {seed}):"
        ));
        for v in violations {
            msg.push_str(&format!("\n  {v}"));
        }
    }
    panic!(
        "{} of {} schedules violated an invariant:{msg}",
        summary.failures.len(),
        summary.schedules
    );
}

/// The fault kinds every chunk of seeds must inject (so a silent generator bug cannot make the
/// simulation vacuous).
const KINDS: &[&str] = &[
    "crash@reserve",
    "crash@reserve:ack",
    "crash@claim",
    "crash@claim:ack",
    "crash@commit",
    "crash@commit:ack",
    "crash@manual.send",
    "crash@manual.send:ack",
    "crash@take_over",
    "lambda_timeout",
    "store_throttled",
    "store_unavailable",
    "store_applied_then_error",
    "store_transaction_conflict",
    "commit_answer_lost_retried",
    "commit_answer_lost_rebuilt_retry_within_10_min",
    "commit_answer_lost_rebuilt_retry_after_10_min",
    "terminal_5xx",
    "terminal_response_lost",
    "terminal_timeout_runs_later",
    "terminal_409_in_flight",
    "terminal_4xx_stored",
    "terminal_lookup_5xx",
    "manual_send_refused",
    "manual_sent_then_error",
    "slow_call",
    "message_purged_after_crash",
    "reconciler_invoked_twice",
    "reconciler_same_request_id_twice",
    "short_record_lifetime",
    "short_key_retention",
    "notification_booked_days_ahead",
    "replanned_notification",
    "record_replaced_after_expiry",
    "message_redriven_from_dlq",
    // PostgreSQL's semantics (a third of the schedules, `sim::dst` docs).
    "pg_serialization_failure_retried",
    "pg_deadlock_retried",
    "pg_transaction_conflict_surfaced",
    "pg_commit_outcome_unknown_retried",
    "pg_no_connection_retried",
    "pg_commit_outcome_unknown_surfaced",
    // A failover's connections left on the demoted writer, a store that stops answering
    // (`sim::dst` docs).
    "pg_read_only_connection_dropped",
    "pg_read_only_surfaced",
    "store_stalled_attempt_timed_out",
    "store_stalled_surfaced",
];

fn chunk(n: u64) {
    let summary = run_seeds(n * CHUNK, CHUNK, 1);
    assert_eq!(summary.schedules, CHUNK);
    assert_clean(&summary);
    for kind in KINDS {
        assert!(
            summary.faults.get(*kind).copied().unwrap_or(0) > 0,
            "seeds {}..{}: no {kind} injected: {:?}",
            n * CHUNK,
            (n + 1) * CHUNK,
            summary.faults
        );
    }
    assert!(summary.stats.committed > 0 && summary.stats.manual_items > 0);
    assert!(
        summary.stats.deliveries > summary.stats.invocations,
        "batches of more than one record occur"
    );
}

#[test]
fn seeds_0_to_499_hold_every_invariant() {
    chunk(0);
}

#[test]
fn seeds_500_to_999_hold_every_invariant() {
    chunk(1);
}

#[test]
fn seeds_1000_to_1499_hold_every_invariant() {
    chunk(2);
}

#[test]
fn seeds_1500_to_1999_hold_every_invariant() {
    chunk(3);
}

#[test]
fn the_same_seed_replays_the_same_schedule() {
    for seed in [7, 8_710, 31_337] {
        let a = run_seed(seed, true);
        let b = run_seed(seed, true);
        assert!(!a.trace.is_empty());
        assert_eq!(a.trace, b.trace, "seed {seed}: traces differ");
        assert_eq!(a.faults, b.faults);
        assert_eq!(a.stats, b.stats);
        assert_eq!(a.violations, b.violations);
        // Recording the trace does not change the schedule.
        let c = run_seed(seed, false);
        assert_eq!(c.stats, a.stats);
        assert_eq!(c.faults, a.faults);
    }
}
