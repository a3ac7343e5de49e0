//! Leases cut short and extensions that come late: the reconciler's take-over after a slow
//! store, an extension checked again before the call, extensions that all answer too late, and a
//! lease no longer than a call.

use super::*;

#[tokio::test]
async fn the_reconcilers_take_over_extends_a_lease_a_slow_store_cut_short() {
    let w = world();
    let pk = w.pk("f");
    // A consumer reserved at T0 and died (nothing else).
    let dead = Invocation {
        request_id: "inv-dead#0".into(),
        deadline_ms: T0 + 60_000,
    };
    reserve_stranded(&w.gate, w.memory.as_ref(), "f", &dead, T0).await;
    // The reconciler's sweep at T0 + 16 s; its take-over is stamped then and takes 8 s.
    w.clock.set_ms(T0 + 16_000);
    w.store.then("take_over", Act::Slow(8_000));
    let invocation = Invocation {
        request_id: "reconciler-1".into(),
        deadline_ms: T0 + 16_000 + 60_000,
    };
    let report = w
        .gate
        .reconcile(w.memory.as_ref(), &ReconcilerConfig::default(), &invocation)
        .await;
    assert_eq!(report.reconciled, 1, "{report:?}");
    assert_eq!(
        w.calls(),
        [(
            T0 + 24_000,
            Some("reconciler-1#0".into()),
            Some(T0 + 39_000)
        )]
    );
    assert_eq!(
        w.store.seen(),
        ["take_over", "guard", "extend_lease", "commit"]
    );
    assert_eq!(w.record(&pk).await.status, RecordStatus::Committed);
}

/// Break (hostile review): the extension itself is slow (the slow store that cut the lease
/// short answers it late too). The lease it wrote is counted from the moment it was sent, so
/// when its answer comes the lease left may again be short of a call and the commit; the holder
/// must not start a call its lease does not cover (ARCHITECTURE, "No call on a lease too short
/// to finish it"). Here the reserve takes 6 s and the guard 5 s (4 s left of 15 s), the
/// extension is sent at T0 + 11 s (lease to T0 + 26 s) and answers 6 s later: 9 s left of the
/// 12 s a call and the commit need. The holder either extends again or does not call; every
/// call it makes has at least 12 s of lease left.
#[tokio::test]
async fn a_slow_extension_is_checked_again_before_the_call() {
    let w = world();
    let pk = w.pk("g");
    w.store.then("reserve", Act::Slow(6_000));
    w.store.then("guard", Act::Slow(5_000));
    w.store.then("extend_lease", Act::Slow(6_000));
    let outcome = w.deliver("g", "inv-1").await;
    let need = GateConfig::new("jobs").call_lease_ms();
    for (at, owner, until) in w.calls() {
        assert_eq!(owner.as_deref(), Some("inv-1#0"));
        let left = until.expect("a lease") - at;
        assert!(
            left >= need,
            "called with {left} ms of lease left, {need} needed"
        );
    }
    match outcome {
        RecordOutcome::Committed { .. } => {
            assert_eq!(w.calls().len(), 1);
            assert_eq!(w.record(&pk).await.status, RecordStatus::Committed);
        }
        RecordOutcome::Retry(_) => {
            assert!(w.calls().is_empty(), "called, then asked for a retry");
            assert_eq!(w.record(&pk).await.status, RecordStatus::InFlight);
        }
        other => panic!("{other:?}"),
    }
}

/// Break (hostile review): every extension answers too late (6 s each, 9 s of the 12 s left
/// each time): after two the holder does not call, releases the record (the redelivery takes it
/// over at once) and asks for a retry; the redelivery calls once.
#[tokio::test]
async fn extensions_that_all_answer_too_late_end_in_a_release_not_a_call() {
    let w = world();
    let pk = w.pk("h");
    w.store.then("reserve", Act::Slow(6_000));
    w.store.then("guard", Act::Slow(5_000));
    w.store.then("extend_lease", Act::Slow(6_000));
    w.store.then("extend_lease", Act::Slow(6_000));
    let outcome = w.deliver("h", "inv-1").await;
    assert!(matches!(outcome, RecordOutcome::Retry(_)), "{outcome:?}");
    assert!(w.calls().is_empty(), "called on a lease too short");
    assert_eq!(
        w.store.seen(),
        [
            "reserve",
            "guard",
            "extend_lease",
            "extend_lease",
            "release_lease"
        ]
    );
    w.released_then_the_redelivery_calls_once(&pk, "h").await;
}

/// Break (the review of the recovered change): a lease no longer than a call needs (a 12 s floor
/// against a 10 s call and the 2 s commit) and store round trips of a few milliseconds. An
/// extension to exactly what a call needs would be short again by its own round trip, extended
/// again, and released: the consumer would never call. The extension adds
/// `EXTENSION_HEADROOM_MS`, so one extension suffices and the record commits with one call.
#[tokio::test]
async fn a_lease_no_longer_than_a_call_is_extended_once_with_headroom_and_called() {
    let mut config = GateConfig::new("jobs");
    config.lease_floor_ms = 12_000;
    assert_eq!(config.lease_ms(), config.call_lease_ms());
    let w = world_with(config);
    w.store.then("reserve", Act::Slow(4));
    w.store.then("guard", Act::Slow(4));
    w.store.then("extend_lease", Act::Slow(4));
    w.store.then("extend_lease", Act::Slow(4));
    let outcome = w.deliver("i", "inv-1").await;
    assert!(
        matches!(outcome, RecordOutcome::Committed { .. }),
        "{outcome:?}"
    );
    assert_eq!(
        w.store.seen(),
        ["reserve", "guard", "extend_lease", "commit"]
    );
    // Extended at T0 + 8 ms to a call, the commit and the headroom: 15 s; called 4 ms later.
    let until = T0 + 8 + 12_000 + gate::EXTENSION_HEADROOM_MS;
    assert_eq!(w.calls(), [(T0 + 12, Some("inv-1#0".into()), Some(until))]);
}
