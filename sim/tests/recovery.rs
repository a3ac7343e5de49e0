//! Recovery within a minute: a week of the forwarder's traffic with a crash
//! every 61 notifications at every step in turn, half of the stranding crashes losing their
//! message, through the gate with the reconciler as deployed (a sweep every 15 s, by lease end).
//! Simulated time: every record a crash stranded is committed by the reconciler within the
//! lease (15 s) plus one sweep interval (15 s) of the crash; a crash before the reserve strands
//! nothing and its message comes back after the visibility timeout; a crash after the commit
//! strands nothing. No extra slot, nothing left `in_flight`. (`sim recovery` runs the two months.)

use sim::recovery::{distribution, FinishedBy};
use sim::replay::{self, ReplayOptions};
use sim::scenarios::forwarder_recovery_days;

#[tokio::test]
async fn every_record_a_crash_strands_is_committed_within_lease_plus_a_sweep() {
    let scenario = forwarder_recovery_days(7);
    let r = replay::run(&scenario, ReplayOptions::gated())
        .await
        .unwrap();
    let n = scenario.notifications.len();
    assert_eq!((r.slots_issued, r.tms_bookings), (n, n));
    assert_eq!(r.containers_with_extra_slots, 0);
    assert_eq!(r.still_in_flight, 0);
    assert_eq!((r.routed_to_manual, r.dead_lettered), (0, 0));

    let crashes = scenario
        .notifications
        .iter()
        .filter(|n| n.crash.is_some())
        .count();
    assert_eq!(r.recoveries.len(), crashes);
    assert_eq!(r.crashes, crashes);
    let steps = |step: &'static str| r.recoveries.iter().filter(move |x| x.step == step);
    for step in [
        "after_receive",
        "after_reserve",
        "after_claim",
        "after_commit",
    ] {
        assert!(steps(step).count() >= 6, "{step}");
    }
    for step in ["after_reserve", "after_claim"] {
        assert!(steps(step).any(|x| x.message_lost), "{step}");
        assert!(steps(step).any(|x| !x.message_lost), "{step}");
        for x in steps(step) {
            let after = x.finished_after_ms.expect("finished");
            assert!((15_000..=30_000).contains(&after), "{x:?}");
            assert_eq!(x.finished_by, Some(FinishedBy::Reconciler), "{x:?}");
            assert_eq!(x.status, Some("committed"), "{x:?}");
        }
    }
    // Nothing stranded: the message comes back after the visibility timeout (180 s) and is
    // handled as new.
    for x in steps("after_receive") {
        assert_eq!(x.finished_after_ms, Some(180_000), "{x:?}");
        assert_eq!(x.finished_by, Some(FinishedBy::Delivery), "{x:?}");
    }
    // Committed before the worker died.
    for x in steps("after_commit") {
        assert_eq!(x.finished_after_ms, Some(0), "{x:?}");
    }
    let all = distribution(&r.recoveries);
    assert_eq!(all.unfinished, 0);
    assert_eq!(
        all.by_reconciler,
        steps("after_reserve").count() + steps("after_claim").count()
    );
    // Only the reconciler committed the stranded records; every redelivery of their messages
    // met a committed record.
    assert_eq!(r.reconciled, all.by_reconciler);
    assert_eq!(r.taken_over, 0);
}
