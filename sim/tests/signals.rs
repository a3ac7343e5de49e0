//! Each signal moves under its own fault, and only then: every scenario evaluates every alarm of
//! `template.yaml` as CloudWatch does, with the definitions of `gate::signals` (aligned periods,
//! M of N, missing data not breaching). The times are seconds after the scenario's start.

use sim::replay::{self, ReplayOptions, Report};
use sim::scenario::Scenario;
use sim::signals::{alarm, FiredAlarm, SignalSummary};

async fn gated(name: &str) -> (Report, SignalSummary) {
    let scenario = Scenario::load(name).unwrap();
    let r = replay::run(&scenario, ReplayOptions::gated())
        .await
        .unwrap();
    let s = r.signals.clone().unwrap();
    (r, s)
}

fn fired(s: &SignalSummary) -> Vec<(String, i64)> {
    s.alarms.iter().map(|a| (a.alarm.clone(), a.at_s)).collect()
}

fn at(alarm: &str, at_s: i64) -> (String, i64) {
    (alarm.to_string(), at_s)
}

/// The incident of 9 June (05:00 to 09:23 UTC, 87 deliveries, 46 duplicates): its first hour
/// already holds 4 duplicates and more than 20 %, so the hourly alarm fires at 06:00, within the
/// morning; the 6-hour period 00:00-06:00 holds the same hour and fires with it. No 5-minute
/// period holds 50 records.
#[tokio::test]
async fn the_incident_fires_the_hourly_high_ratio_alarm_at_six() {
    let (r, s) = gated("monday-2025-06-09").await;
    assert_eq!(r.slots_issued, 39);
    assert_eq!(
        fired(&s),
        vec![
            at(alarm::DUPLICATE_RATIO_HIGH_HOURLY, 3_600),
            at(alarm::DUPLICATE_RATIO_HIGH_SIX_HOURS, 3_600),
        ]
    );
    assert!(s.duplicate_ratio > 0.5);
    assert_eq!(s.max_judged_duplicate_ratio_5m, None);
    assert!(s.max_judged_duplicate_ratio_1h.unwrap() > 0.2);
    assert_eq!(s.max_distinct_effect_ids, 1);
    assert_eq!(s.natural_key_collisions, 0);
    // No reconciler: the crashed records wait for their redelivery (160 s), under the alarm.
    assert!(s.max_oldest_in_flight_age_s < gate::signals::OLDEST_IN_FLIGHT_MAX_S);
}

#[tokio::test]
async fn a_healthy_feed_fires_no_alarm() {
    let (_, s) = gated("healthy-feed").await;
    assert!(s.alarms.is_empty(), "{s:?}");
    let ratio = s.duplicate_ratio;
    assert!((0.04..0.06).contains(&ratio), "{ratio}");
}

/// Two weeks at the real volume, 2 % re-fired: 3,500 notifications, no alarm, no collision.
#[tokio::test]
async fn two_healthy_weeks_at_the_real_volume_fire_no_alarm() {
    let (r, s) = gated("healthy-two-weeks").await;
    assert_eq!(r.notifications, 3_500);
    assert!(s.alarms.is_empty(), "{:?}", s.alarms);
    assert!(
        (0.01..0.03).contains(&s.duplicate_ratio),
        "{}",
        s.duplicate_ratio
    );
    assert_eq!(s.natural_key_collisions, 0);
    assert_eq!(r.slots_issued, 3_500);
    assert_eq!(r.max_slots_per_container, 1);
}

#[tokio::test]
async fn a_portbase_storm_raises_every_high_ratio_alarm() {
    let (r, s) = gated("portbase-storm").await;
    // 240 deliveries of 80 events from 05:00:00 to 05:03:40: the 5-minute period 05:00-05:05
    // fires at its end; the hour and the 6 hours ending 06:00 hold the same deliveries.
    assert_eq!(
        fired(&s),
        vec![
            at(alarm::DUPLICATE_RATIO_HIGH, 300),
            at(alarm::DUPLICATE_RATIO_HIGH_HOURLY, 3_600),
            at(alarm::DUPLICATE_RATIO_HIGH_SIX_HOURS, 3_600),
        ]
    );
    assert_eq!(s.max_judged_duplicate_ratio_5m, Some(160.0 / 240.0));
    // The gate still holds: one slot per container.
    assert_eq!(r.slots_issued, 80);
    assert_eq!(r.max_slots_per_container, 1);
}

/// 10 notifications an hour; from 10:00 to 11:00 a third of them (4 of 10) are sent twice: the
/// hourly alarm fires at 11:00, an hour after the re-firing began. Nothing else fires.
#[tokio::test]
async fn a_refiring_upstream_at_the_real_volume_fires_within_the_hour() {
    let (r, s) = gated("upstream-refires").await;
    assert_eq!(r.notifications, 240);
    assert_eq!(
        fired(&s),
        vec![at(alarm::DUPLICATE_RATIO_HIGH_HOURLY, 39_600)]
    );
    assert_eq!(
        s.firings,
        vec![FiredAlarm {
            alarm: alarm::DUPLICATE_RATIO_HIGH_HOURLY.into(),
            at_s: 39_600
        }]
    );
    assert_eq!(r.max_slots_per_container, 1);
}

/// The healthy 5-hour feed with a key that includes the messageId: the first re-fired
/// notification (number 0, its copy at 90 s) commits a second event key for its container and
/// window: the collision alarm fires at the end of that minute (120 s). Too few records for the
/// zero-ratio alarms (a day with 200 records, three days in a row).
#[tokio::test]
async fn a_key_that_includes_the_message_id_raises_the_collision_alarm_at_the_first_redelivery() {
    let (r, s) = gated("key-includes-message-id").await;
    assert_eq!(fired(&s), vec![at(alarm::NATURAL_KEY_COLLISIONS, 120)]);
    assert_eq!(s.duplicate_ratio, 0.0);
    assert_eq!(r.duplicates_suppressed, 0);
    // The 12 re-fired notifications each met the guard of their natural key before the call:
    // each collided and went to a person, none got a second slot (before the guard: 252 slots,
    // 12 containers with a second one, 252 bookings).
    assert_eq!(r.slots_issued, 240);
    assert_eq!(r.containers_with_extra_slots, 0);
    assert_eq!(s.natural_key_collisions, 12);
    assert_eq!(r.manual_reasons.get("natural_key_collision"), Some(&12));
    assert_eq!(r.routed_to_manual, 12);
    assert_eq!(r.tms_bookings, 240);
    assert_eq!(r.still_in_flight, 0);
}

/// A week at the real volume with the broken key: the collision alarm fires in the minute of the
/// first re-fired notification's copy; the daily zero-ratio alarm at the end of the third UTC day
/// without a duplicate (Wednesday 24:00, 259,200 s); nothing else.
#[tokio::test]
async fn a_key_broken_for_a_week_fires_the_collision_alarm_at_once_and_the_zero_alarm_after_three_days(
) {
    let scenario = Scenario::load("key-broken-for-a-week").unwrap();
    let first_copy_s = scenario
        .notifications
        .iter()
        .filter_map(|n| n.arrivals.get(1).map(|a| a.at_s()))
        .fold(f64::INFINITY, f64::min);
    let (r, s) = gated("key-broken-for-a-week").await;
    let collision = s.fired_at_s(alarm::NATURAL_KEY_COLLISIONS).unwrap();
    let copy = first_copy_s as i64;
    assert!(
        collision > copy && collision <= copy + 120,
        "first copy at {copy} s, collision alarm at {collision} s"
    );
    assert_eq!(s.fired_at_s(alarm::DUPLICATE_RATIO_ZERO), Some(259_200));
    let names: Vec<String> = fired(&s).into_iter().map(|(a, _)| a).collect();
    assert_eq!(
        names,
        vec![
            alarm::NATURAL_KEY_COLLISIONS.to_string(),
            alarm::DUPLICATE_RATIO_ZERO.to_string()
        ]
    );
    assert_eq!(s.duplicate_ratio, 0.0);
    // Every re-fired notification collided once, at its guard: to a person, never called, so
    // no container got a second slot (before the guard, each of them did).
    assert_eq!(r.containers_with_extra_slots, 0);
    assert_eq!(r.slots_issued, r.notifications);
    assert_eq!(
        r.manual_reasons.get("natural_key_collision").copied(),
        Some(s.natural_key_collisions as usize)
    );
    assert_eq!(
        r.messages - r.notifications,
        s.natural_key_collisions as usize
    );
    assert!(
        s.natural_key_collisions >= 20,
        "{}",
        s.natural_key_collisions
    );
}

/// Two weeks of the forwarder's traffic (243 a day, 2 % re-fired, its crashes after the claim,
/// one lost message) behind a key that includes the messageId: every re-fired copy is a second
/// event key for its container and window. Before the guard, each copy's container got a second
/// slot (70 containers, 3,472 slots and bookings); with it, none: each copy collides at its guard and goes to a person,
/// the collision alarm fires at the first, and the crashed records (whose own redelivery or
/// reconcile meets their own guard) are all committed.
#[tokio::test]
async fn two_weeks_of_the_forwarders_traffic_behind_a_broken_key_cost_no_second_slot() {
    let mut scenario = sim::scenarios::forwarder(14, sim::scenarios::FORWARDER_VOLUME_PER_DAY);
    scenario.key_fault = Some(sim::scenario::KeyFault::IncludesMessageId);
    let r = replay::run(&scenario, ReplayOptions::gated())
        .await
        .unwrap();
    let s = r.signals.clone().unwrap();
    assert_eq!(r.notifications, 14 * 243);
    assert_eq!(r.containers_with_extra_slots, 0);
    assert_eq!(r.slots_issued, r.notifications);
    assert_eq!(r.tms_bookings, r.notifications);
    // Every re-fired copy (70 messages beyond the 3,402 notifications) is a second event key for
    // its container and window: each one collides once and goes to a person.
    assert_eq!(r.messages - r.notifications, 70);
    assert_eq!(s.natural_key_collisions, 70);
    assert_eq!(
        r.manual_reasons.get("natural_key_collision").copied(),
        Some(70)
    );
    assert_eq!(r.routed_to_manual, 70);
    assert_eq!(r.still_in_flight, 0);
    // The alarms: the collision alarm in the minute of the first copy, the
    // zero-ratio alarm after three days without a duplicate.
    let first_copy_s = scenario
        .notifications
        .iter()
        .filter_map(|n| n.arrivals.get(1).map(|a| a.at_s()))
        .fold(f64::INFINITY, f64::min) as i64;
    let collision = s.fired_at_s(alarm::NATURAL_KEY_COLLISIONS).unwrap();
    assert!(
        collision > first_copy_s && collision <= first_copy_s + 120,
        "first copy at {first_copy_s} s, collision alarm at {collision} s"
    );
    assert_eq!(s.fired_at_s(alarm::DUPLICATE_RATIO_ZERO), Some(259_200));
    assert_eq!(fired(&s).len(), 2, "{:?}", s.alarms);
}

#[tokio::test]
async fn a_crash_without_the_reconciler_raises_the_oldest_in_flight_alarm() {
    let (r, s) = gated("monday-2025-06-09-lost-no-reconciler").await;
    let names: Vec<String> = fired(&s).into_iter().map(|(a, _)| a).collect();
    assert!(
        names.contains(&alarm::OLDEST_IN_FLIGHT_AGE.to_string()),
        "{names:?}"
    );
    assert!(s.max_oldest_in_flight_age_s > gate::signals::OLDEST_IN_FLIGHT_MAX_S);
    assert_eq!(r.still_in_flight, 2);
}

#[tokio::test]
async fn a_crash_with_the_reconciler_stays_under_the_oldest_in_flight_threshold() {
    let (r, s) = gated("monday-2025-06-09-lost").await;
    assert!(s.fired_at_s(alarm::OLDEST_IN_FLIGHT_AGE).is_none(), "{s:?}");
    // Committed within the lease (15 s) and a sweep (15 s) of the crash.
    assert!(s.max_oldest_in_flight_age_s <= 30, "{s:?}");
    assert_eq!(s.final_oldest_in_flight_age_s, 0, "{s:?}");
    assert_eq!(r.reconciled, 2);
    assert_eq!(r.still_in_flight, 0);
}

#[tokio::test]
async fn a_terminal_that_forgets_keys_raises_the_distinct_slot_ids_alarm() {
    let (r, s) = gated("forgetful-terminal").await;
    let names: Vec<String> = fired(&s).into_iter().map(|(a, _)| a).collect();
    assert_eq!(names, vec![alarm::DISTINCT_EFFECT_IDS.to_string()]);
    assert_eq!(s.max_distinct_effect_ids, 2);
    assert_eq!(s.multi_effect_keys, 1, "the store marked the key");
    // The terminal issued two slots for the first container's one key; one is booked.
    assert_eq!(r.slots_issued, 21);
    assert_eq!(r.max_slots_per_container, 2);
    assert_eq!(r.tms_bookings, 20);
}

/// `sim replay --plot`: a PNG of the signals (the picture in docs/OPERATING.md).
#[tokio::test]
async fn the_plot_of_the_incident_is_a_png() {
    let (r, s) = gated("monday-2025-06-09").await;
    assert_eq!(
        s.series.hourly.len(),
        5,
        "05:00 to 10:00: {:?}",
        s.series.hourly
    );
    let received: u64 = s.series.hourly.iter().map(|h| h.1).sum();
    // Every delivery but the two the crashed workers held: a crashed invocation emits no EMF
    // document, as in Lambda.
    assert_eq!(r.crashes, 2);
    assert_eq!(received, r.deliveries - 2);
    let path = std::env::temp_dir().join(format!("signals-{}.png", std::process::id()));
    sim::plot::signals_png(&path, "incident", &s).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    // IHDR: width and height, big-endian, at bytes 16..24.
    let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!((width, height), (1100, 820));
}

/// The CLI, as the issue ran it: `sim replay monday-2025-06-09` ends with the high-ratio alarm in
/// its "alarms fired" line.
#[test]
fn sim_replay_of_the_incident_ends_with_the_high_ratio_alarm() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(["replay", "monday-2025-06-09"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let last = text.lines().last().unwrap();
    assert!(
        last.trim_start().starts_with("alarms fired"),
        "last line: {last}"
    );
    assert!(
        last.contains("DuplicateRatioHighHourly at +1h00"),
        "last line: {last}"
    );
    assert!(
        text.contains("duplicate ratio                    54.1 %"),
        "{text}"
    );
}
