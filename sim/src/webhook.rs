//! At-least-once from the webhook: Portbase's sender and the real ingress (`ingress::handler`) in
//! front of the simulated queue, on simulated time.
//!
//! Each arrival of a scenario notification (one that is not a `same_message_id` copy) is one
//! webhook: a `webhook-id` of its own, signed at every attempt with the attempt's time. The sender
//! delivers it through the ingress, which verifies it on the simulated clock and sends it to the
//! queue; the sender follows the Standard Webhooks retry schedule ([`DEFAULT_RETRY_DELAYS_S`]:
//! 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h after each failed attempt) until an attempt is
//! answered `2xx`:
//!
//! * `SendMessage` fails with probability `queue_failure_rate`: the ingress answers `503`, nothing
//!   is queued, the sender retries;
//! * the `202` is lost on the way back with probability `lost_response_rate` (a timeout at the
//!   sender): the message **is** queued, and the retry queues it again as a new SQS message, the
//!   duplicate the gate must suppress;
//! * a `4xx` ends the webhook (the sender gives up); so does the end of the schedule
//!   (`abandoned`).
//!
//! The webhook leg does not depend on the consumer's, so the replay runs it first and then
//! delivers what the ingress queued, at the times it queued it ([`crate::replay::run`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_lambda_events::event::apigw::ApiGatewayV2httpRequest;
use gate::clock::ManualClock;
use ingress::event::SignedWebhook;
use ingress::handler::{Ingress, NotificationQueue, QueueError, Secrets};
use ingress::signature::{SecretSet, WebhookSecret};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::scenario::Scenario;
pub use crate::scenario::{WebhookSettings, DEFAULT_RETRY_DELAYS_S};

/// What the webhook leg did, counted from the sender's and the queue's side.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct WebhookReport {
    /// Webhooks the sender sent (distinct `webhook-id`s).
    pub webhooks: usize,
    /// Deliveries the sender attempted, retries included.
    pub attempts: usize,
    /// Attempts the ingress answered `202`.
    pub accepted: usize,
    /// Attempts answered `503` (the queue failed).
    pub answered_5xx: usize,
    /// `202`s lost on the way back (the sender timed out and retried).
    pub responses_lost: usize,
    /// Webhooks refused with a `4xx` (the sender gives up).
    pub refused: usize,
    /// Webhooks whose schedule ran out before a `2xx` reached the sender.
    pub abandoned: usize,
    /// Webhooks the sender saw acknowledged.
    pub acknowledged: usize,
    /// Messages the ingress put on the queue (every accepted attempt).
    pub messages_queued: usize,
}

/// One message the ingress queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    /// The body, as the sender sent it.
    pub body: String,
    /// The scenario notification it carries.
    pub notification: usize,
    /// When it was queued, epoch ms.
    pub at_ms: i64,
    /// A `same_message_id` arrival: another SQS copy of the notification's previous message.
    pub copy_of_previous: bool,
}

/// The queue behind the simulated ingress: fails when told to, else records the body.
#[derive(Default)]
struct SimQueue {
    fail: AtomicBool,
    sent: Mutex<Vec<String>>,
}

#[async_trait]
impl NotificationQueue for SimQueue {
    async fn send(&self, body: &str, _webhook_id: &str) -> Result<String, QueueError> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(QueueError("simulated: SendMessage failed".into()));
        }
        let mut sent = self.sent.lock().unwrap_or_else(|p| p.into_inner());
        sent.push(body.to_string());
        Ok(format!("sim-{}", sent.len()))
    }
}

/// Runs the webhook leg of `scenario` (its `webhook` settings, default when absent) on `clock`,
/// which it leaves at the scenario's start: what the ingress queued, in time order, and the
/// counts.
///
/// # Errors
/// A message if an event cannot be built.
pub async fn deliver(
    scenario: &Scenario,
    settings: &WebhookSettings,
    clock: &Arc<ManualClock>,
) -> Result<(Vec<Queued>, WebhookReport), String> {
    let start_ms = scenario.start.timestamp_millis();
    let secret = WebhookSecret::from_bytes(b"simulated-portbase-webhook-key!!".to_vec())
        .map_err(|e| e.to_string())?;
    let queue = Arc::new(SimQueue::default());
    let ingress = Ingress {
        secrets: Secrets::fixed(SecretSet::new(vec![secret.clone()]).map_err(|e| e.to_string())?),
        queue: queue.clone(),
        clock: clock.clone(),
    };
    let mut rng = ChaCha8Rng::seed_from_u64(settings.seed);
    let mut report = WebhookReport::default();
    let mut queued = Vec::new();
    for (i, n) in scenario.notifications.iter().enumerate() {
        let body = n.body_string();
        for (k, arrival) in n.arrivals.iter().enumerate() {
            let first_ms = start_ms + (arrival.at_s() * 1000.0) as i64;
            if arrival.same_message_id() {
                queued.push(Queued {
                    body: body.clone(),
                    notification: i,
                    at_ms: first_ms,
                    copy_of_previous: true,
                });
                continue;
            }
            report.webhooks += 1;
            let id = format!("msg_sim_{i:06}_{k}");
            let mut at_ms = first_ms;
            let mut delays = settings.retry_delays_s.iter();
            loop {
                report.attempts += 1;
                clock.set_ms(at_ms);
                let fail = rng.random_bool(settings.queue_failure_rate.clamp(0.0, 1.0));
                let lost = rng.random_bool(settings.lost_response_rate.clamp(0.0, 1.0));
                queue.fail.store(fail, Ordering::SeqCst);
                let signed =
                    SignedWebhook::sign(std::slice::from_ref(&secret), &id, at_ms / 1000, &body);
                let request: ApiGatewayV2httpRequest =
                    serde_json::from_value(signed.http_api_event(at_ms, &id))
                        .map_err(|e| e.to_string())?;
                let handled = ingress.handle(&request).await;
                let status = handled.status();
                if status == 202 {
                    report.accepted += 1;
                    report.messages_queued += 1;
                    queued.push(Queued {
                        body: body.clone(),
                        notification: i,
                        at_ms,
                        copy_of_previous: false,
                    });
                    if !lost {
                        report.acknowledged += 1;
                        break;
                    }
                    report.responses_lost += 1;
                } else if status >= 500 {
                    report.answered_5xx += 1;
                } else {
                    report.refused += 1;
                    break;
                }
                match delays.next() {
                    Some(delay) => at_ms += delay * 1000,
                    None => {
                        report.abandoned += 1;
                        break;
                    }
                }
            }
        }
    }
    clock.set_ms(start_ms);
    // Stable: a copy stays after the message it copies when both come at the same time.
    queued.sort_by_key(|q| q.at_ms);
    Ok((queued, report))
}
