//! Seeds the deterministic simulation found failing, kept as regressions. Each failed before its
//! fix in the gate (verified by undoing the fix and rerunning `sim check --seeds 20000`) and
//! passes after it. A seed names a schedule only for a given generator (`sim::dst::schedule`):
//! the first test pins each schedule's digest over `Schedule::describe_base` (the lifecycle and
//! the faults with their own RNG streams drawn apart), so a change to the generator fails loudly
//! here; re-derive the seeds then by undoing each fix and taking the first failing seed.
//!
//! | fix | what the seed does | seeds |
//! | --- | --- | --- |
//! | poison bodies routed once (routing record keyed by the body) | duplicated poison bodies | 0, 2 |
//! | mismatches routed once (routing record keyed by event key + fingerprint) | duplicated mismatched bodies | 0, 3 |
//! | an ended window decided on the event's record | a copy arrives after the window ended, the event is committed | 1, 4 |
//! | never claim past the terminal's key retention on resume | a stranded claim, the terminal forgets the key, a redelivery two days later | 12, 280 |
//! | the reconciler finishes routing records | the poison/mismatch sender dies and its message is purged | 21, 32 |
//! | send before mark | a crash between the two | 20, 24 |
//! | a failed mismatch routing is retried, not acknowledged | the manual queue refuses the send | 171 |
//!
//! The planted bugs of docs/SIMULATION.md, each planted alone in a scratch copy of the gate, keep
//! their first failing seed here, pinned by its whole description (lifecycle included), with a
//! test that the real gate passes it and still takes the path the bug broke.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sim::dst::run_seed;
use sim::dst::schedule::Schedule;
use truck_slot::keys::sha256_hex;

/// (seed, first 16 hex characters of the SHA-256 of the schedule's description).
const SCHEDULES: &[(u64, &str)] = &[
    (0, "5551d421607c9608"),
    (1, "549def5e270805f9"),
    (2, "f037160d401ccce8"),
    (3, "6d7814387198c610"),
    (4, "dde64bd5b4b2769b"),
    (12, "83541a3fb053ae79"),
    (17, "98e32fb119c849f9"),
    (20, "6547137470ef6207"),
    (24, "ca6782b14340918b"),
    (32, "348d026253fb07ef"),
    (171, "82533b4106ae2b8f"),
    (280, "e7f0af8572e4c179"),
];

/// (seed, first 16 hex characters of the SHA-256 of the schedule's whole description) of the
/// seeds that caught a planted bug. Seed 23 draws PostgreSQL's semantics and a failover, seed 0
/// a stall, each from its own RNG stream (their lines `postgres conflict .. outcome_unknown ..`,
/// `postgres failover at +1780s ..`, `store stalled +705s..+778s`); without those lines their
/// digests are `8beda703d7cf5e17` and `8deaddf7d35cdf36`. Their tests below still take the paths
/// the bugs broke. Seeds 3, 4, 17 and 20 draw one as well: `describe_base` leaves it out.
const PLANTED: &[(u64, &str)] = &[(0, "f3f3cade89eec00b"), (23, "8ecec2b6ab15862e")];

fn schedule(seed: u64) -> Schedule {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    Schedule::draw(seed, &mut rng)
}

fn digest(lines: &[String]) -> String {
    sha256_hex(lines.join("\n").as_bytes())[..16].to_string()
}

#[test]
fn the_regression_schedules_are_the_ones_that_failed() {
    let actual: Vec<(u64, String)> = SCHEDULES
        .iter()
        .map(|(s, _)| (*s, digest(&schedule(*s).describe_base())))
        .chain(
            PLANTED
                .iter()
                .map(|(s, _)| (*s, digest(&schedule(*s).describe()))),
        )
        .collect();
    let expected: Vec<(u64, String)> = SCHEDULES
        .iter()
        .chain(PLANTED)
        .map(|(s, d)| (*s, (*d).to_string()))
        .collect();
    assert_eq!(
        actual, expected,
        "the schedule generator changed: re-derive the regression seeds (see the module docs)"
    );
}

/// Runs `seed` with its trace and asserts it holds every invariant.
fn passes(seed: u64) -> Vec<String> {
    let r = run_seed(seed, true);
    assert!(
        r.violations.is_empty(),
        "seed {seed}: {:?}\n{}",
        r.violations,
        r.short_trace(80).join("\n")
    );
    r.trace
}

/// Task ids of reconciler runs in a trace.
fn reconciler_tasks(trace: &[String]) -> Vec<String> {
    trace
        .iter()
        .filter(|l| l.ends_with(" reconciler run"))
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect()
}

fn count(trace: &[String], needle: &str) -> usize {
    trace.iter().filter(|l| l.contains(needle)).count()
}

#[test]
fn duplicated_poison_and_mismatched_bodies_reach_the_manual_queue_once() {
    for seed in [0, 2, 3] {
        let trace = passes(seed);
        assert!(
            count(&trace, "Rejected(") + count(&trace, "Mismatch") >= 2,
            "seed {seed} no longer delivers a poison or mismatched body twice"
        );
    }
}

#[test]
fn a_copy_after_the_window_ended_does_not_route_a_committed_event() {
    for seed in [1, 4] {
        passes(seed);
    }
}

#[test]
fn a_redelivery_two_days_later_never_claims_a_forgotten_key_again() {
    for seed in [12, 280] {
        let trace = passes(seed);
        assert!(
            count(&trace, "PastKeyRetention") > 0,
            "seed {seed} no longer resumes a record past the key retention"
        );
    }
}

/// Seeds 21 and 32 take this path: the reconciler takes a record as soon as its lease ends, so
/// few seeds leave the routing record to it (21 was found by tracing seeds, not by undoing the
/// fix).
#[test]
fn the_reconciler_finishes_a_routing_record_whose_sender_died() {
    for seed in [21, 32] {
        let trace = passes(seed);
        let reconcilers = reconciler_tasks(&trace);
        assert!(
            trace.iter().any(|l| {
                let mut w = l.split_whitespace().skip(1);
                let (task, what, reason) = (w.next(), w.next(), w.next());
                what == Some("manual.send")
                    && matches!(reason, Some("rejected" | "mismatch"))
                    && task.is_some_and(|t| reconcilers.iter().any(|r| r == t))
            }),
            "seed {seed}: no routing record finished by the reconciler"
        );
    }
}

#[test]
fn a_crash_between_send_and_mark_loses_nothing() {
    for seed in [20, 24] {
        passes(seed);
    }
}

#[test]
fn a_refused_mismatch_routing_is_retried() {
    passes(171);
}

/// Planted bug 1 (a commit that overwrites an existing TMS booking): in seed 23 a record lives
/// 21 h; a re-planned notification (same notification, window 4 days later) arrives after the
/// first record expired, is reserved anew, and the terminal, which forgot the key, issues a
/// second slot under it. The commit must be refused (the first booking stays; a person gets the
/// second slot), never overwrite the booking.
#[test]
fn a_commit_never_replaces_a_tms_booking() {
    let r = run_seed(23, true);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert!(
        r.faults
            .get("record_replaced_after_expiry")
            .copied()
            .unwrap_or(0)
            > 0
    );
    assert!(r.faults.get("replanned_notification").copied().unwrap_or(0) > 0);
    // Two claims under one key returned two slots: the second after the record expired.
    let claims: Vec<&String> = r
        .trace
        .iter()
        .filter(|l| l.contains(" claim 2281e075cad2 -> Done"))
        .collect();
    assert_eq!(claims.len(), 2, "{claims:?}");
    assert!(claims[0].contains("ECTD-000006") && claims[1].contains("ECTD-000007"));
    assert!(count(&r.trace, "Manual(ServerAnswerInvalid)") > 0);
}

/// Planted bug 2 (a poison or mismatched body answered as a batch item failure until it
/// dead-letters): seed 0 delivers a poison body several times and mismatched bodies; each is
/// routed to a person and acknowledged.
#[test]
fn poison_and_mismatched_bodies_are_routed_not_retried_into_the_dlq() {
    let trace = passes(0);
    assert!(count(&trace, "Rejected(Rejection { code: \"missing_field\"") >= 2);
    assert!(count(&trace, ": Mismatch") > 0);
}

/// Planted bug 3 (a lease not released after a transient terminal error): in seed 0 the first
/// claim's answer is lost (504); the worker releases its lease before it answers a batch item
/// failure.
#[test]
fn a_transient_terminal_error_releases_the_lease() {
    let trace = passes(0);
    let at = trace
        .iter()
        .position(|l| l.contains("T5 claim fbf5d5e236db -> Transient"))
        .expect("seed 0's transient claim");
    let rest: Vec<&String> = trace[at..]
        .iter()
        .filter(|l| l.split_whitespace().nth(1) == Some("T5"))
        .collect();
    assert!(
        rest.iter().any(|l| l.ends_with("T5 release_lease:ack")),
        "{rest:?}"
    );
}
