//! The incident replay's figures, naive and gated.

use sim::replay::{self, HandlerKind, ReplayOptions};
use sim::scenario::Scenario;

#[tokio::test]
async fn the_incident_naive_makes_87_claims_for_39_containers() {
    let scenario = Scenario::load("monday-2025-06-09").unwrap();
    let r = replay::run(&scenario, ReplayOptions::naive())
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
    let r = replay::run(&scenario, ReplayOptions::gated())
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
        assert!(
            truck_slot::iso6346::EquipmentNumber::parse(&c).is_ok(),
            "{c}"
        );
    }
}

#[tokio::test]
async fn lost_crashed_messages_are_finished_by_the_reconciler_with_the_pre_crash_slot() {
    use gate::record::RecordStatus;
    use std::sync::Arc;

    let scenario = Scenario::load("monday-2025-06-09-lost").unwrap();
    let store = Arc::new(gate::store::memory::MemoryStore::new());
    let r = replay::run(
        &scenario,
        ReplayOptions {
            handler: HandlerKind::Gated,
            store: Some(store.clone()),
        },
    )
    .await
    .unwrap();
    assert_eq!(r.crashes, 2);
    assert_eq!(r.reconciled, 2, "{r:?}");
    assert_eq!(r.taken_over, 0, "no redelivery took over");
    assert_eq!(r.slots_issued, 39, "the reconciler claimed nothing new");
    assert_eq!(r.max_slots_per_container, 1);
    assert_eq!(r.tms_bookings, 39);
    assert_eq!(r.still_in_flight, 0);
    // The crashed containers' records: committed with the one slot the terminal issued for them
    // (before the crash), within one sweep interval (15 s) of simulated time after they became
    // eligible: when the lease ended, created + 15 s (no minimum age).
    let crashed: Vec<String> = scenario
        .notifications
        .iter()
        .filter(|n| n.crash.is_some())
        .map(|n| n.container().unwrap())
        .collect();
    assert_eq!(crashed.len(), 2);
    for container in crashed {
        let record = store
            .records()
            .into_iter()
            .find(|rec| rec.label("container") == container)
            .unwrap();
        assert_eq!(record.status, RecordStatus::Committed);
        assert_eq!(record.effect_ids.len(), 1);
        let booking = store
            .business_rows()
            .into_iter()
            .find(|b| b.label("container") == container)
            .unwrap();
        assert_eq!(Some(booking.effect_id), record.effect_id);
        let eligible = record.created_at_ms + 15_000;
        let waited = record.updated_at_ms - eligible;
        assert!(
            (0..=15_000).contains(&waited),
            "{container}: committed {waited} ms after eligible"
        );
    }
}

/// The report counts the manual queue's items by reason, and prints them: the incident plus a
/// body that is not JSON (delivered three times) and a second body under the first event's key
/// with another window (a mismatch), each routed to a person once.
#[tokio::test]
async fn the_report_gives_the_manual_queue_by_reason() {
    use sim::scenario::{Arrival, ScenarioNotification};
    let mut scenario = Scenario::load("monday-2025-06-09").unwrap();
    let first = scenario.notifications[0].clone();
    let mut other_window = first.body.clone().unwrap();
    other_window["preferred_window"]["end"] = serde_json::json!("2025-06-09T14:00:00Z");
    scenario.notifications.push(ScenarioNotification {
        body: Some(other_window),
        raw_body: None,
        arrivals: vec![Arrival::At(600.0)],
        crash: None,
        message_lost_after_crash: false,
        stall_after_claim_s: None,
    });
    scenario.notifications.push(ScenarioNotification {
        body: None,
        raw_body: Some("PCS-CIS notification, not JSON".into()),
        arrivals: vec![Arrival::At(300.0), Arrival::At(301.0), Arrival::At(900.0)],
        crash: None,
        message_lost_after_crash: false,
        stall_after_claim_s: None,
    });
    let r = replay::run(&scenario, ReplayOptions::gated())
        .await
        .unwrap();
    assert_eq!(r.routed_to_manual, 2);
    assert_eq!(
        r.manual_reasons,
        [("mismatch".to_string(), 1), ("rejected".to_string(), 1)]
            .into_iter()
            .collect()
    );
    assert_eq!(r.slots_issued, 39);
    let text = sim::report::render(&r);
    assert!(text.contains("manual, mismatch"), "{text}");
    assert!(text.contains("manual, rejected"), "{text}");
}
