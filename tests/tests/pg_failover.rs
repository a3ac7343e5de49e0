//! The real `consumer` and `reconciler` binaries, warm in emulated Lambda environments, on real
//! PostgreSQL 15 servers under the engine's own faults
//! (`integration_tests::pg_failover` runs a case, `integration_tests::sqs_feed` plays SQS): a
//! failover that leaves pooled connections on the demoted writer, the primary killed and the
//! standby promoted, a black hole, connection resets, and PgBouncer in transaction mode with the
//! server restarted behind it. Each case asserts every notification booked exactly once (one
//! slot per container at the terminal, its business row, every record committed), nothing
//! dead-lettered or sent to a person, nothing `in_flight` after the reconciler; and prints its
//! figures with the recovery time (a figure, not an assertion):
//!
//! ```text
//! scripts/with-postgres.sh scripts/with-moto.sh \
//!     cargo test -p integration-tests --test pg_failover -- --nocapture
//! ```
//!
//! Each case starts its own servers as the unprivileged user when root (`pg_cluster`), from
//! `PG_BIN` (`scripts/with-postgres.sh` installs PostgreSQL 15 and PgBouncer when missing), and
//! moto's manual queue needs `MOTO_ENDPOINT`. One case at a time (`one_case_at_a_time`): their
//! deadlines are real.

use std::time::Duration;

use integration_tests::lambda_env::one_case_at_a_time;
use integration_tests::pg_failover::{run_case, Fault, Figures};
use integration_tests::sqs_feed::NOTIFICATIONS;

/// Runs `fault`'s case on a runtime of its own and checks what every case must hold.
fn case(fault: Fault) -> Figures {
    let _one = one_case_at_a_time();
    let figures = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(run_case(fault));
    exactly_once(fault, &figures);
    figures
}

/// Every notification booked once, nothing lost, nothing left (the module docs).
fn exactly_once(fault: Fault, f: &Figures) {
    let name = fault.name();
    let all = NOTIFICATIONS + 1;
    let context = || format!("{name}: {}\n{f:#?}", f.line(fault));
    assert_eq!(f.notifications, all);
    assert!(f.not_once.is_empty(), "slots per container: {}", context());
    assert_eq!(f.extra_slots, 0, "{}", context());
    assert_eq!(f.booked, all, "{}", context());
    assert_eq!(f.business_rows, all, "{}", context());
    assert_eq!(f.unknown_effect_ids, 0, "{}", context());
    let committed = [("committed".to_string(), i64::try_from(all).unwrap())];
    assert_eq!(f.statuses, committed.into_iter().collect(), "{}", context());
    assert_eq!(f.feed.dead_lettered, 0, "{}", context());
    assert!(!f.feed.cut, "{}", context());
    assert_eq!(f.manual_messages, 0, "{}", context());
    assert_eq!(f.in_flight, 0, "{}", context());
    // The stranded record (never on the queue) is the reconciler's to finish, after the fault,
    // on a warm process; so is a record whose redelivery met its own unreleased lease (a
    // duplicate in flight, acknowledged).
    let report = f
        .reconciler
        .as_ref()
        .unwrap_or_else(|| panic!("{}", context()));
    assert!(report["reconciled"].as_u64() >= Some(1), "{}", context());
    assert_eq!(report["manual"], 0, "{}", context());
    assert_eq!(report["transient"], 0, "{}", context());
}

/// The standby promoted, the old primary read-only for the sessions still on it (the proxy
/// keeps every open connection there), new connections to the new primary: every write of a
/// pooled connection fails with SQLSTATE 25006 until the store drops it.
#[test]
fn a_failover_that_leaves_pooled_connections_on_the_demoted_writer_heals() {
    let f = case(Fault::Failover);
    // Both warm processes met the demoted writer on a pooled connection, and healed.
    for (function, log) in [("consumer", &f.logs.0), ("reconciler", &f.logs.1)] {
        assert!(
            log.contains("(25006)"),
            "{function} never met 25006:\n{log}"
        );
    }
}

/// `kill -9` of the primary's postmaster, then the standby promoted.
#[test]
fn the_primary_killed_and_the_standby_promoted_heals() {
    case(Fault::KillPrimary);
}

/// Packets dropped for 35 s (longer than a function's timeout), sockets left open: every store
/// call ends inside its invocation's budget, so no invocation runs into its deadline.
#[test]
fn a_black_hole_longer_than_an_invocation_times_out_no_invocation() {
    let f = case(Fault::BlackHole(Duration::from_secs(35)));
    assert_eq!(
        f.timeouts,
        0,
        "{}",
        f.line(Fault::BlackHole(Duration::ZERO))
    );
    assert_eq!(f.consumer_cold_starts, 1, "the consumer stayed warm");
}

/// Every connection reset for 8 s (the feed goes on after it).
#[test]
fn connection_resets_heal() {
    case(Fault::Resets(Duration::from_secs(8)));
}

/// Behind PgBouncer in transaction mode, two server connections for the consumer's four and the
/// reconciler's: no statement meets another's prepared statement (the store sends the unnamed
/// statement), no setting leaks into another client's session (`SET LOCAL` only), and a restart
/// of the server behind the pooler mid-run heals.
#[test]
fn behind_pgbouncer_in_transaction_mode_nothing_collides_or_leaks_and_a_restart_heals() {
    let f = case(Fault::ServerRestartBehindPgBouncer);
    assert!(
        !f.logs.0.contains("prepared statement") && !f.logs.1.contains("prepared statement"),
        "a statement met another's prepared statement: {}",
        [f.logs.0.as_str(), f.logs.1.as_str()]
            .iter()
            .flat_map(|log| log.lines())
            .filter(|l| l.contains("prepared statement"))
            .take(5)
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(f.pooler_statement_timeouts, vec!["0"; 5]);
}
