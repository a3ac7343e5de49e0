//! The incident replay's figures, naive and gated.

use sim::replay::{self, HandlerKind, ReplayOptions};
use sim::scenario::Scenario;

#[tokio::test]
async fn the_incident_naive_makes_87_claims_for_39_containers() {
    let scenario = Scenario::load("monday-2025-06-09").unwrap();
    let r = replay::run(
        &scenario,
        ReplayOptions {
            handler: HandlerKind::Naive,
            store: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(r.notifications, 39);
    assert_eq!(r.slots_issued, 87);
    assert_eq!(r.containers_with_a_slot, 39);
    assert_eq!(r.max_slots_per_container, 6);
    assert_eq!(r.crashes, 2);
}

#[tokio::test]
async fn the_incident_gated_makes_39_slots_and_39_bookings() {
    let scenario = Scenario::load("monday-2025-06-09").unwrap();
    let r = replay::run(
        &scenario,
        ReplayOptions {
            handler: HandlerKind::Gated,
            store: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(r.slots_issued, 39);
    assert_eq!(r.tms_bookings, 39);
    assert_eq!(r.containers_with_a_slot, 39);
    assert_eq!(r.max_slots_per_container, 1);
    assert_eq!(r.still_in_flight, 0);
    assert_eq!(r.crashes, 2);
    // The two crashed records were finished by their redeliveries, after the lease.
    assert!(r.taken_over >= 2, "{r:?}");
    // Every delivery beyond the first of each event, other than take-overs, was suppressed.
    assert_eq!(
        r.deliveries as usize,
        39 + r.duplicates_suppressed + r.taken_over + r.batch_item_failures
    );
    assert_eq!(r.routed_to_manual, 0);
    assert_eq!(r.dead_lettered, 0);
}

#[test]
fn the_incident_scenario_has_the_documented_shape() {
    let s = Scenario::load("monday-2025-06-09").unwrap();
    assert_eq!(s.notifications.len(), 39);
    let copies: Vec<usize> = s.notifications.iter().map(|n| n.arrivals.len()).collect();
    assert_eq!(copies.iter().filter(|c| **c > 1).count(), 17);
    assert_eq!(copies.iter().filter(|c| **c == 6).count(), 1);
    assert!(copies.iter().all(|c| (1..=6).contains(c)));
    assert_eq!(
        s.notifications.iter().filter(|n| n.crash.is_some()).count(),
        2
    );
    for n in &s.notifications {
        let c = n.container().unwrap();
        assert!(gate::iso6346::EquipmentNumber::parse(&c).is_ok(), "{c}");
    }
}
