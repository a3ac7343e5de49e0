//! Each signal moves under its own fault, and only then: every scenario evaluates the four alarms
//! with the gate's thresholds (`gate::signals`).

use sim::replay::{self, ReplayOptions, Report};
use sim::scenario::Scenario;
use sim::signals::{alarm, SignalSummary};

async fn gated(name: &str) -> (Report, SignalSummary) {
    let scenario = Scenario::load(name).unwrap();
    let r = replay::run(&scenario, ReplayOptions::gated())
        .await
        .unwrap();
    let s = r.signals.clone().unwrap();
    (r, s)
}

fn fired(s: &SignalSummary) -> Vec<String> {
    s.alarms.iter().map(|a| a.alarm.clone()).collect()
}

#[tokio::test]
async fn the_plain_incident_under_the_gate_fires_no_alarm() {
    let (r, s) = gated("monday-2025-06-09").await;
    assert_eq!(r.slots_issued, 39);
    assert!(s.alarms.is_empty(), "{s:?}");
    // Its duplicates are real (54 % of deliveries) but never 50 deliveries in 5 minutes.
    assert!(s.duplicate_ratio > 0.5);
    assert_eq!(s.max_judged_duplicate_ratio_5m, None);
    assert_eq!(s.max_distinct_slot_ids, 1);
    assert!(s.max_oldest_in_flight_age_s < 600);
}

#[tokio::test]
async fn a_healthy_feed_fires_no_alarm() {
    let (_, s) = gated("healthy-feed").await;
    assert!(s.alarms.is_empty(), "{s:?}");
    let ratio = s.duplicate_ratio;
    assert!((0.04..0.06).contains(&ratio), "{ratio}");
}

#[tokio::test]
async fn a_portbase_storm_raises_the_duplicate_ratio_alarm() {
    let (r, s) = gated("portbase-storm").await;
    assert_eq!(fired(&s), vec![alarm::DUPLICATE_RATIO_HIGH.to_string()]);
    // 240 deliveries of 80 events in one 5-minute period: 160 duplicates.
    assert_eq!(s.max_judged_duplicate_ratio_5m, Some(160.0 / 240.0));
    // The gate still holds: one slot per container.
    assert_eq!(r.slots_issued, 80);
    assert_eq!(r.max_slots_per_container, 1);
}

#[tokio::test]
async fn a_key_that_includes_the_message_id_raises_the_zero_ratio_alarm() {
    let (r, s) = gated("key-includes-message-id").await;
    assert_eq!(fired(&s), vec![alarm::DUPLICATE_RATIO_ZERO.to_string()]);
    assert_eq!(s.duplicate_ratio, 0.0);
    assert_eq!(r.duplicates_suppressed, 0);
    // Why it matters: the 12 re-fired notifications each got a second slot.
    assert_eq!(r.slots_issued, 252);
    assert_eq!(r.containers_with_extra_slots, 12);
    // And each of those slots reached the TMS, booked under its own (wrong) key.
    assert_eq!(r.tms_bookings, 252);
    assert_eq!(r.still_in_flight, 0);
}

#[tokio::test]
async fn a_crash_without_the_reconciler_raises_the_oldest_in_flight_alarm() {
    let (r, s) = gated("monday-2025-06-09-lost-no-reconciler").await;
    assert_eq!(fired(&s), vec![alarm::OLDEST_IN_FLIGHT_AGE.to_string()]);
    assert!(s.max_oldest_in_flight_age_s > 600);
    assert_eq!(r.still_in_flight, 2);
}

#[tokio::test]
async fn a_crash_with_the_reconciler_stays_under_the_oldest_in_flight_threshold() {
    let (r, s) = gated("monday-2025-06-09-lost").await;
    assert!(s.alarms.is_empty(), "{s:?}");
    assert!(s.max_oldest_in_flight_age_s < 600, "{s:?}");
    assert!(s.final_oldest_in_flight_age_s < 120, "{s:?}");
    assert_eq!(r.reconciled, 2);
    assert_eq!(r.still_in_flight, 0);
}

#[tokio::test]
async fn a_terminal_that_forgets_keys_raises_the_distinct_slot_ids_alarm() {
    let (r, s) = gated("forgetful-terminal").await;
    assert_eq!(fired(&s), vec![alarm::DISTINCT_SLOT_IDS.to_string()]);
    assert_eq!(s.max_distinct_slot_ids, 2);
    assert_eq!(s.multi_slot_keys, 1, "the store marked the key");
    // The terminal issued two slots for the first container's one key; one is booked.
    assert_eq!(r.slots_issued, 21);
    assert_eq!(r.max_slots_per_container, 2);
    assert_eq!(r.tms_bookings, 20);
}
