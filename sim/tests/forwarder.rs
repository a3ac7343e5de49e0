//! The forwarder's two months (issue 24): 61 days at their volume through the gate, 2 %
//! re-fired, six workers crashing after the claim, one of whose messages never comes back. The
//! right figures: one slot and one booking per notification (no extra effect), the six crashed
//! records committed with the slot their worker claimed, nothing left `in_flight`, no alarm.

use std::sync::Arc;

use gate::record::{record_pk, RecordStatus};
use gate::store::memory::MemoryStore;
use gate::store::IdempotencyStore;
use sim::replay::{self, HandlerKind, ReplayOptions, INTEGRATION};
use sim::scenario::Scenario;
use sim::scenarios::{FORWARDER_CRASHES, FORWARDER_DAYS, FORWARDER_LOST, FORWARDER_VOLUME_PER_DAY};
use truck_slot::derive_keys;
use truck_slot::notification::parse_notification;

/// The scenario is what issue 24 describes: 61 days of 243 a day, six crashes after the claim,
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

/// The whole two months (25 s to two minutes of wall time in a debug build on this busy shared
/// machine, about 6 s in release: the replay runs every notification through the gate and the terminal simulator
/// over loopback HTTP, and the reconciler and the metrics function every simulated minute, 87,840
/// times; that is the test, so it is not shortened).
#[tokio::test]
async fn two_months_at_the_forwarders_volume_make_no_extra_effect_and_commit_every_crash() {
    let scenario = Scenario::load("forwarder-two-months").unwrap();
    let store = Arc::new(MemoryStore::new());
    let r = replay::run(
        &scenario,
        ReplayOptions {
            handler: HandlerKind::Gated,
            store: Some(store.clone()),
        },
    )
    .await
    .unwrap();
    let n = scenario.notifications.len();
    // No extra effect: one slot and one booking per notification.
    assert_eq!(r.slots_issued, n);
    assert_eq!(r.containers_with_a_slot, n);
    assert_eq!(r.containers_with_extra_slots, 0);
    assert_eq!(r.max_slots_per_container, 1);
    assert_eq!(r.tms_bookings, n);
    assert_eq!(
        (r.routed_to_manual, r.dead_lettered, r.mismatches),
        (0, 0, 0)
    );
    // The six crashed records are committed with the one slot their worker claimed (the slot the
    // terminal issued for that container), the lost one by the reconciler.
    assert_eq!(r.crashes, 6);
    assert_eq!(r.still_in_flight, 0);
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
        let booking = store.booking(&keys.event_key).await.unwrap().unwrap();
        assert_eq!(
            Some(booking.effect_id),
            record.effect_id,
            "notification {i}"
        );
    }
    // Each crashed record is finished once: by the reconciler (at least the lost one), or by the
    // redelivery taking its expired lease over.
    assert!(r.reconciled >= 1);
    assert_eq!(r.reconciled + r.taken_over, 6);
    // Every re-fired copy is a duplicate, and so is each redelivered crashed message whose record
    // the reconciler had already committed (5 come back; those not taken over).
    let refired = scenario
        .notifications
        .iter()
        .filter(|n| n.arrivals.len() > 1)
        .count();
    assert_eq!(r.duplicates_suppressed, refired + (5 - r.taken_over));
    assert_eq!(r.deliveries as usize, n + refired + 5);
    // No alarm: the crashes are finished well within the oldest-in_flight threshold (600 s).
    let s = r.signals.unwrap();
    assert!(s.alarms.is_empty(), "{:?}", s.alarms);
    assert!(
        s.max_oldest_in_flight_age_s < 600,
        "{}",
        s.max_oldest_in_flight_age_s
    );
    assert_eq!(s.final_oldest_in_flight_age_s, 0);
}
