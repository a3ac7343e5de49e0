//! Webhook -> queue -> booking (`sim::webhook`): the sender's retries after `503`s and lost
//! `202`s reach the consumer as extra SQS messages, and the gate books each container once; the
//! naive handler books the extras too. The figures are checked against each other: what the
//! sender counted, what the queue delivered, what the terminal and the TMS hold.

use std::sync::Arc;

use gate::clock::ManualClock;
use sim::replay::{self, ReplayOptions};
use sim::scenario::Scenario;
use sim::webhook::{deliver, WebhookSettings};

#[tokio::test]
async fn every_container_is_booked_once_whatever_the_sender_retried() {
    let scenario = Scenario::load("webhook-retries").unwrap();
    let gated = replay::run(&scenario, ReplayOptions::gated())
        .await
        .unwrap();
    let naive = replay::run(&scenario, ReplayOptions::naive())
        .await
        .unwrap();
    let w = gated.webhook.clone().expect("the webhook leg's report");
    assert_eq!(
        naive.webhook.as_ref(),
        Some(&w),
        "the same seeded webhook leg"
    );

    // The faults happened: retries after 503s and after lost 202s.
    assert_eq!(w.webhooks, 60);
    assert!(w.answered_5xx > 0 && w.responses_lost > 0, "{w:?}");
    assert_eq!(w.attempts, w.accepted + w.answered_5xx + w.refused);
    assert_eq!(w.refused, 0);
    // Every accepted attempt is one SQS message; a webhook is acknowledged once or abandoned.
    assert_eq!(w.messages_queued, w.accepted);
    assert_eq!(w.accepted, w.acknowledged + w.responses_lost);
    assert_eq!(w.acknowledged + w.abandoned, w.webhooks);
    assert_eq!(gated.messages, w.messages_queued);
    assert_eq!(gated.deliveries, w.messages_queued as u64);

    // No webhook ran out of retries (8 attempts at 30 % failure), so every one was queued at
    // least once: each container is booked exactly once by the gate, and every extra message is
    // a suppressed duplicate.
    assert_eq!(w.abandoned, 0);
    let queued_containers = w.webhooks;
    assert_eq!(gated.containers_with_a_slot, queued_containers);
    assert_eq!(gated.slots_issued, queued_containers);
    assert_eq!(gated.max_slots_per_container, 1);
    assert_eq!(gated.tms_bookings, queued_containers);
    assert_eq!(
        gated.duplicates_suppressed,
        w.messages_queued - queued_containers
    );
    assert_eq!(gated.still_in_flight, 0);

    // The naive handler books every message.
    assert_eq!(naive.slots_issued, w.messages_queued);
    assert_eq!(naive.tms_bookings, w.messages_queued);
    assert!(naive.containers_with_extra_slots > 0);
}

/// The sender's schedule: a queue that always fails gets 1 + 7 attempts per webhook over the
/// Standard Webhooks delays, then the webhook is abandoned and nothing is queued; a lost `202`
/// on every attempt queues the body once per attempt.
#[tokio::test]
async fn the_sender_follows_the_retry_schedule() {
    let mut scenario = Scenario::load("webhook-retries").unwrap();
    scenario.notifications.truncate(2);
    let clock = Arc::new(ManualClock::new(scenario.start.timestamp_millis()));

    let down = WebhookSettings {
        queue_failure_rate: 1.0,
        ..WebhookSettings::default()
    };
    let (queued, report) = deliver(&scenario, &down, &clock).await.unwrap();
    assert!(queued.is_empty());
    assert_eq!(report.attempts, 2 * 8);
    assert_eq!(report.answered_5xx, 2 * 8);
    assert_eq!(report.abandoned, 2);

    let lost = WebhookSettings {
        lost_response_rate: 1.0,
        retry_delays_s: vec![5, 300],
        ..WebhookSettings::default()
    };
    let (queued, report) = deliver(&scenario, &lost, &clock).await.unwrap();
    assert_eq!(report.attempts, 2 * 3);
    assert_eq!(report.messages_queued, 2 * 3);
    assert_eq!(report.abandoned, 2);
    // Queued at the attempts' times: the first, 5 s and 305 s later (the second webhook 60 s on).
    let start = scenario.start.timestamp_millis();
    let times: Vec<i64> = queued.iter().map(|q| (q.at_ms - start) / 1000).collect();
    assert_eq!(times, vec![0, 5, 60, 65, 305, 365]);
    assert!(queued
        .iter()
        .all(|q| q.body == scenario.notifications[q.notification].body_string()));
}
