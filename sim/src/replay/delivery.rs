//! The replay's side of SQS: what a message carries, the scenario's copies put on the queue with
//! seeded message ids, and a receive rendered as the Lambda SQS event a worker gets.

use std::collections::BTreeMap;
use std::sync::Arc;

use gate::clock::ManualClock;
use rand::RngCore;
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

use crate::scenario::Scenario;
use crate::sqs::{self, Queue, ReceiveOrder};
use crate::webhook::WebhookReport;

/// What a replayed message copy carries: its body and which scenario notification it is.
#[derive(Debug, Clone)]
pub(super) struct Carried {
    pub(super) body: String,
    pub(super) notification: usize,
}

/// A received copy: what went into one event record.
#[derive(Debug, Clone)]
pub(super) struct Received {
    /// The copy's index in the queue.
    pub(super) copy: usize,
    /// The receipt [`Queue::delete`] needs.
    pub(super) receipt: u32,
    pub(super) message_id: String,
    pub(super) notification: usize,
}

/// A random (version 4) UUID from the replay's seeded generator: message ids and receipt handles
/// are reproducible for a scenario's seed.
pub(super) fn uuid(rng: &mut ChaCha8Rng) -> String {
    let mut bytes = [0u8; 16];
    rng.fill_bytes(&mut bytes);
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .to_string()
}

/// Receives up to `max` copies at `now_ms`, oldest first, and renders them as a Lambda SQS event
/// (`{"Records": [...]}`), each with a receipt handle drawn from `ids`.
pub(super) fn receive(
    queue: &mut Queue<Carried>,
    ids: &mut ChaCha8Rng,
    now_ms: i64,
    max: usize,
) -> (Vec<Received>, Value) {
    let mut received = Vec::new();
    let mut records = Vec::new();
    for (copy, receipt) in queue.receive(now_ms, max, ReceiveOrder::Oldest) {
        let m = &queue.msgs[copy];
        let handle = format!("AQEB{}", uuid(ids).replace('-', ""));
        records.push(sqs::lambda_record(m, &m.body.body, &handle, now_ms));
        received.push(Received {
            copy,
            receipt,
            message_id: m.id.clone(),
            notification: m.body.notification,
        });
    }
    (received, serde_json::json!({ "Records": records }))
}

/// Puts every copy the scenario sends on `queue` with message ids drawn from `ids`: the
/// notifications' arrivals, or what the webhook leg's ingress queued when the scenario starts at
/// the webhook. Answers the messages sent (copies with the same id count once) and the webhook
/// leg's report.
///
/// # Errors
/// The webhook leg's, when it cannot run.
pub(super) async fn send_all(
    scenario: &Scenario,
    clock: &Arc<ManualClock>,
    queue: &mut Queue<Carried>,
    ids: &mut ChaCha8Rng,
) -> Result<(usize, Option<WebhookReport>), String> {
    let start_ms = scenario.start.timestamp_millis();
    let mut webhook_report = None;
    let mut messages = scenario.messages();
    if let Some(settings) = &scenario.webhook {
        // The webhook leg first (it does not depend on the consumer's): what the ingress
        // queued, when, then delivered by the queue as below.
        let (queued, report) = crate::webhook::deliver(scenario, settings, clock).await?;
        let mut last_id: BTreeMap<usize, String> = BTreeMap::new();
        messages = 0;
        for q in queued {
            let id = match last_id.get(&q.notification) {
                Some(id) if q.copy_of_previous => id.clone(),
                _ => {
                    messages += 1;
                    let id = uuid(ids);
                    last_id.insert(q.notification, id.clone());
                    id
                }
            };
            let body = Carried {
                body: q.body,
                notification: q.notification,
            };
            queue.send(id, body, q.at_ms);
        }
        webhook_report = Some(report);
    } else {
        for (i, n) in scenario.notifications.iter().enumerate() {
            let body = Carried {
                body: n.body_string(),
                notification: i,
            };
            let mut last_id = String::new();
            for a in &n.arrivals {
                let at = start_ms + (a.at_s() * 1000.0) as i64;
                if !a.same_message_id() {
                    last_id = uuid(ids);
                }
                queue.send(last_id.clone(), body.clone(), at);
            }
        }
    }
    Ok((messages, webhook_report))
}
