//! The forwarder's two months: 61 days at their volume through the gate, 2 %
//! re-fired, six workers crashing after the claim, one of whose messages never comes back. The
//! right figures: one slot and one booking per notification (no extra effect), the six crashed
//! records committed with the slot their worker claimed, nothing left `in_flight`, no alarm.
//! Each figure is computed here from the scenario's input and its settings (the arrivals, the
//! crashes, the visibility timeout, the lease, the reconciler's schedule), not copied from a run:
//! the pinned scenario with the first gate's reconciler, and the same input with the deployed one.

use std::sync::Arc;

use gate::consumer::GateConfig;
use gate::record::{record_pk, RecordStatus};
use gate::signals::STORE_SIGNALS_PERIOD_S;
use gate::store::memory::MemoryStore;
use gate::store::BusinessRows;
use gate::store::IdempotencyStore;
use sim::replay::{self, HandlerKind, ReplayOptions, Report, INTEGRATION};
use sim::scenario::{ReconcilerSettings, Scenario};
use sim::scenarios::{
    FIRST_GATE_RECONCILER, FORWARDER_CRASHES, FORWARDER_DAYS, FORWARDER_LOST,
    FORWARDER_VOLUME_PER_DAY,
};
use truck_slot::derive_keys;
use truck_slot::notification::parse_notification;

/// The scenario is the forwarder's two months: 61 days of 243 a day, six crashes after the claim,
/// exactly one message lost.
#[test]
fn the_forwarder_scenario_is_two_months_at_their_volume_with_six_crashes() {
    let s = Scenario::load("forwarder-two-months").unwrap();
    assert_eq!(s.notifications.len(), 61 * 243);
    assert_eq!((FORWARDER_DAYS, FORWARDER_VOLUME_PER_DAY), (61, 243));
    let crashed: Vec<usize> = (0..s.notifications.len())
        .filter(|&i| s.notifications[i].crash.is_some())
        .collect();
    assert_eq!(crashed, FORWARDER_CRASHES.to_vec());
    let lost: Vec<usize> = (0..s.notifications.len())
        .filter(|&i| s.notifications[i].message_lost_after_crash)
        .collect();
    assert_eq!(lost, vec![FORWARDER_LOST]);
    let last_s = s
        .notifications
        .iter()
        .flat_map(|n| n.arrivals.iter().map(|a| a.at_s()))
        .fold(0.0, f64::max);
    assert!(last_s < 61.0 * 86_400.0, "{last_s}");
    assert!(
        s.reconciler.is_some(),
        "only the reconciler finds the lost one"
    );
}

/// What the scenario's input and settings determine, computed without the replay: the replay
/// receives each message the instant it is visible, a crashed worker's record was created at its
/// message's first arrival, its message (unless lost) comes back one visibility timeout later
/// and takes the record over (its lease long ended) unless a sweep committed it first (a
/// delivery goes before a tick at the same instant); a sweep (every `sweep_interval_s` from the
/// first run, `interval_s` after the start) takes a record created more than `min_age_s` before
/// it whose lease (`now <= lease_until` is live) has ended; the metrics function samples the
/// oldest `in_flight` age once a period, after the tick of that instant.
#[derive(Debug, PartialEq, Eq)]
struct Expected {
    notifications: usize,
    /// SQS messages: the arrivals (none of this scenario repeats a message id).
    messages: usize,
    crashes: usize,
    /// Crashed records committed by the reconciler; the rest by their message's redelivery.
    reconciled: usize,
    taken_over: usize,
    /// Every re-fired copy, and every redelivered crashed message that found its record
    /// committed.
    duplicates: usize,
    /// Every arrival, and each crashed message that came back.
    deliveries: u64,
    /// The oldest `in_flight` age the metrics function saw, seconds.
    max_oldest_in_flight_age_s: i64,
}

fn expected(scenario: &Scenario, lease_ms: i64, reconciler: &ReconcilerSettings) -> Expected {
    let visibility_ms = scenario.queue.visibility_timeout_s * 1000;
    let sweep_ms = reconciler.sweep_interval_s * 1000;
    let first_sweep_ms = reconciler.interval_s * 1000;
    let sample_ms = STORE_SIGNALS_PERIOD_S * 1000;
    let mut e = Expected {
        notifications: scenario.notifications.len(),
        messages: scenario.messages(),
        crashes: 0,
        reconciled: 0,
        taken_over: 0,
        duplicates: 0,
        deliveries: 0,
        max_oldest_in_flight_age_s: 0,
    };
    for n in &scenario.notifications {
        assert!(n.arrivals.iter().all(|a| !a.same_message_id()));
        e.deliveries += n.arrivals.len() as u64;
        e.duplicates += n.arrivals.len() - 1;
        if n.crash.is_none() {
            continue;
        }
        e.crashes += 1;
        // Milliseconds from the start, as the replay's clock reads them.
        let created = (n.arrivals[0].at_s() * 1000.0) as i64;
        // The first sweep that takes the record over: after its lease (a lease ending at the
        // sweep's millisecond is still live) and at least its minimum age (DEPLOYING,
        // `RECONCILE_MIN_AGE_SECONDS`).
        let (lease_end, old_enough) = (created + lease_ms, created + reconciler.min_age_s * 1000);
        let mut sweep = first_sweep_ms;
        while sweep <= lease_end || sweep < old_enough {
            sweep += sweep_ms;
        }
        let redelivery = created + visibility_ms;
        let finished = if !n.message_lost_after_crash && redelivery <= sweep {
            e.taken_over += 1;
            e.deliveries += 1;
            redelivery
        } else {
            e.reconciled += 1;
            if !n.message_lost_after_crash {
                e.deliveries += 1;
                e.duplicates += 1;
            }
            sweep
        };
        // The last sample that still saw it in_flight.
        let last_sample = (finished - 1) / sample_ms * sample_ms;
        if last_sample >= created {
            let age_s = (last_sample - created) / 1000;
            e.max_oldest_in_flight_age_s = e.max_oldest_in_flight_age_s.max(age_s);
        }
    }
    e
}

/// The replay's figures in the shape of [`Expected`].
fn observed(r: &Report) -> Expected {
    let signals = r
        .signals
        .as_ref()
        .expect("the gated replay samples the signals");
    Expected {
        notifications: r.notifications,
        messages: r.messages,
        crashes: r.crashes,
        reconciled: r.reconciled,
        taken_over: r.taken_over,
        duplicates: r.duplicates_suppressed,
        deliveries: r.deliveries,
        max_oldest_in_flight_age_s: signals.max_oldest_in_flight_age_s,
    }
}

/// The consumer's lease, milliseconds, as the replay's gate takes it: `GateConfig::new`'s
/// `max(lease_floor, deadline_margin)` (`Gate::lease_until`).
fn consumer_lease_ms() -> i64 {
    GateConfig::new(INTEGRATION).lease_ms()
}

async fn replay_on_memory(scenario: &Scenario) -> (Report, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::new());
    let r = replay::run(
        scenario,
        ReplayOptions {
            handler: HandlerKind::Gated,
            store: Some(store.clone()),
        },
    )
    .await
    .unwrap();
    (r, store)
}

/// One slot and one booking per notification, nothing to a person, nothing left, no alarm.
fn assert_one_effect_each(scenario: &Scenario, r: &Report) {
    let n = scenario.notifications.len();
    assert_eq!(r.slots_issued, n);
    assert_eq!(r.containers_with_a_slot, n);
    assert_eq!(r.containers_with_extra_slots, 0);
    assert_eq!(r.max_slots_per_container, 1);
    assert_eq!(r.tms_bookings, n);
    assert_eq!(
        (r.routed_to_manual, r.dead_lettered, r.mismatches),
        (0, 0, 0)
    );
    assert_eq!(r.still_in_flight, 0);
    let s = r.signals.as_ref().unwrap();
    assert!(s.alarms.is_empty(), "{:?}", s.alarms);
    assert_eq!(s.final_oldest_in_flight_age_s, 0);
}

/// The whole two months as pinned (the first gate's reconciler: a sweep a minute, records older
/// than 120 s), 25 s to two minutes of wall time in a debug build on this busy shared machine,
/// about 6 s in release: the replay runs every notification through the gate and the terminal
/// simulator over loopback HTTP, and the reconciler and the metrics function every simulated
/// minute, 87,840 times; that is the test, so it is not shortened. Every figure is the one the
/// input determines ([`expected`]): with a sweep a minute and a minimum age of 120 s, every
/// crashed record is committed by the reconciler (13,500's, created on a minute, by the sweep
/// 120 s after, before its redelivery at 180 s).
#[tokio::test]
async fn two_months_at_the_forwarders_volume_make_no_extra_effect_and_commit_every_crash() {
    let scenario = Scenario::load("forwarder-two-months").unwrap();
    let pinned = scenario.reconciler.clone().unwrap();
    assert_eq!(
        (pinned.interval_s, pinned.min_age_s, pinned.sweep_interval_s),
        (
            FIRST_GATE_RECONCILER.interval_s,
            FIRST_GATE_RECONCILER.min_age_s,
            FIRST_GATE_RECONCILER.sweep_interval_s
        )
    );
    let (r, store) = replay_on_memory(&scenario).await;
    assert_one_effect_each(&scenario, &r);
    let want = expected(&scenario, consumer_lease_ms(), &FIRST_GATE_RECONCILER);
    assert_eq!(observed(&r), want, "{r:?}");
    // The scenario's shape behind those figures: six crashes, one lost, each committed by the
    // reconciler at its first sweep past the minimum age, before the redelivery.
    assert_eq!(want.crashes, FORWARDER_CRASHES.len());
    assert_eq!((want.reconciled, want.taken_over), (6, 0), "{want:?}");
    // The six crashed records are committed with the one slot their worker claimed (the slot the
    // terminal issued for that container).
    let at = scenario.start.timestamp_millis();
    for i in FORWARDER_CRASHES {
        let body = scenario.notifications[i].body_string();
        let parsed = parse_notification(&body, at, &scenario.terminals).unwrap();
        let keys = derive_keys(&parsed).unwrap();
        let record = store
            .get(&record_pk(INTEGRATION, &keys.event_key))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(record.status, RecordStatus::Committed, "notification {i}");
        assert_eq!(record.effect_ids.len(), 1, "notification {i}");
        let booking = store.business_row(&keys.event_key).await.unwrap().unwrap();
        assert_eq!(
            Some(booking.effect_id),
            record.effect_id,
            "notification {i}"
        );
    }
}

/// The same input with the reconciler as deployed (`ReconcilerSettings::default()`: a run a
/// minute sweeping every 15 s, records selected by lease end) and the consumer's lease: each
/// crashed record is committed by the reconciler within one lease and one sweep interval of its
/// crash (15 s + 15 s), long before its message comes back (the 180 s visibility timeout), so the
/// oldest `in_flight` the metrics function sees stays within that bound, derived here from the
/// configuration. The first gate's reconciler (a sweep a minute, records at least 120 s old) sees
/// 120 s and fails here.
#[tokio::test]
async fn with_the_deployed_reconciler_every_crash_is_committed_within_a_lease_and_a_sweep() {
    let mut scenario = Scenario::load("forwarder-two-months").unwrap();
    let deployed = ReconcilerSettings::default();
    scenario.reconciler = Some(deployed.clone());
    let lease_ms = consumer_lease_ms();
    let bound_s = lease_ms / 1000 + deployed.sweep_interval_s;
    assert!(
        bound_s < scenario.queue.visibility_timeout_s,
        "the reconciler, not the redelivery, finishes a stranded record"
    );
    let (r, _) = replay_on_memory(&scenario).await;
    assert_one_effect_each(&scenario, &r);
    let want = expected(&scenario, lease_ms, &deployed);
    assert_eq!(observed(&r), want, "{r:?}");
    assert_eq!(
        (want.reconciled, want.taken_over),
        (FORWARDER_CRASHES.len(), 0)
    );
    let s = r.signals.as_ref().unwrap();
    assert!(
        s.max_oldest_in_flight_age_s <= bound_s,
        "oldest in_flight {} s, over the lease ({} ms) and a sweep interval ({} s)",
        s.max_oldest_in_flight_age_s,
        lease_ms,
        deployed.sweep_interval_s
    );
}
