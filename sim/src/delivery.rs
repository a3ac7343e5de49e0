//! At-least-once delivery: an SQS Standard queue on simulated time that builds real Lambda SQS
//! event batches, redelivers what is not acknowledged after the visibility timeout, moves a
//! message to the dead-letter queue after `max_receive_count` receives, and delivers chosen
//! messages several times.

use std::collections::HashMap;

use rand::RngCore;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

/// The ARN the simulated events carry.
pub const QUEUE_ARN: &str = "arn:aws:sqs:eu-west-1:123456789012:portbase-notifications";

/// One message on the queue.
#[derive(Debug, Clone)]
pub struct QueuedMessage {
    /// SQS message id.
    pub message_id: String,
    /// The body.
    pub body: String,
    /// Which scenario notification it carries.
    pub notification: usize,
    /// When it was sent, epoch ms.
    pub sent_at_ms: i64,
    /// When it can next be received, epoch ms.
    pub visible_at_ms: i64,
    /// How many times it was received.
    pub receive_count: u32,
    /// Insertion order, for a stable receive order.
    pub seq: u64,
}

/// A received message: what went into one event record.
#[derive(Debug, Clone)]
pub struct Received {
    /// Index in [`SqsQueue`]'s message list.
    pub slot: usize,
    /// SQS message id.
    pub message_id: String,
    /// Which scenario notification.
    pub notification: usize,
    /// Receive count including this one.
    pub receive_count: u32,
}

/// A simulated SQS Standard queue with a redrive policy.
#[derive(Debug)]
pub struct SqsQueue {
    messages: Vec<Option<QueuedMessage>>,
    visibility_timeout_ms: i64,
    max_receive_count: u32,
    dead_letters: Vec<QueuedMessage>,
    rng: ChaCha8Rng,
    seq: u64,
    deliveries: u64,
}

impl SqsQueue {
    /// An empty queue. `visibility_timeout_ms` in milliseconds; `seed` makes ids reproducible.
    pub fn new(visibility_timeout_ms: i64, max_receive_count: u32, seed: u64) -> Self {
        Self {
            messages: Vec::new(),
            visibility_timeout_ms,
            max_receive_count,
            dead_letters: Vec::new(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            seq: 0,
            deliveries: 0,
        }
    }

    fn uuid(&mut self) -> String {
        let mut bytes = [0u8; 16];
        self.rng.fill_bytes(&mut bytes);
        uuid::Builder::from_random_bytes(bytes)
            .into_uuid()
            .to_string()
    }

    /// Sends a new message, visible at `at_ms` (epoch ms). Returns its message id.
    pub fn send(&mut self, body: String, notification: usize, at_ms: i64) -> String {
        let id = self.uuid();
        self.send_with_id(id.clone(), body, notification, at_ms);
        id
    }

    /// Enqueues a copy of a message with a given message id (SQS's own duplicate delivery).
    pub fn send_with_id(
        &mut self,
        message_id: String,
        body: String,
        notification: usize,
        at_ms: i64,
    ) {
        self.seq += 1;
        self.messages.push(Some(QueuedMessage {
            message_id,
            body,
            notification,
            sent_at_ms: at_ms,
            visible_at_ms: at_ms,
            receive_count: 0,
            seq: self.seq,
        }));
    }

    /// The earliest time something becomes visible, epoch ms; `None` when the queue is empty.
    pub fn next_visible_ms(&self) -> Option<i64> {
        self.messages
            .iter()
            .flatten()
            .map(|m| m.visible_at_ms)
            .min()
    }

    /// Receives up to `max` visible messages at `now_ms`, oldest first; they become invisible
    /// for the visibility timeout. A message past its `max_receive_count` goes to the DLQ
    /// instead. Returns the received messages and the Lambda event JSON (`{"Records": [...]}`).
    pub fn receive(&mut self, now_ms: i64, max: usize) -> (Vec<Received>, Value) {
        let mut visible: Vec<usize> = self
            .messages
            .iter()
            .enumerate()
            .filter_map(|(i, m)| m.as_ref().filter(|m| m.visible_at_ms <= now_ms).map(|_| i))
            .collect();
        visible.sort_by_key(|i| {
            self.messages[*i]
                .as_ref()
                .map(|m| (m.visible_at_ms, m.seq))
                .unwrap_or_default()
        });
        let mut received = Vec::new();
        let mut records = Vec::new();
        for i in visible {
            if received.len() >= max {
                break;
            }
            let Some(mut m) = self.messages[i].take() else {
                continue;
            };
            if m.receive_count >= self.max_receive_count {
                self.dead_letters.push(m);
                continue;
            }
            m.receive_count += 1;
            m.visible_at_ms = now_ms + self.visibility_timeout_ms;
            self.deliveries += 1;
            let receipt = format!("AQEB{}", self.uuid().replace('-', ""));
            records.push(json!({
                "messageId": m.message_id,
                "receiptHandle": receipt,
                "body": m.body,
                "attributes": {
                    "ApproximateReceiveCount": m.receive_count.to_string(),
                    "SentTimestamp": m.sent_at_ms.to_string(),
                    "SenderId": "AIDAIENQZJOLO23YVJ4VO",
                    "ApproximateFirstReceiveTimestamp": now_ms.to_string()
                },
                "messageAttributes": {},
                "md5OfBody": hex::encode(md5_digest(m.body.as_bytes())),
                "eventSource": "aws:sqs",
                "eventSourceARN": QUEUE_ARN,
                "awsRegion": "eu-west-1"
            }));
            received.push(Received {
                slot: i,
                message_id: m.message_id.clone(),
                notification: m.notification,
                receive_count: m.receive_count,
            });
            self.messages[i] = Some(m);
        }
        (received, json!({ "Records": records }))
    }

    /// Deletes a received message (acknowledged).
    pub fn delete(&mut self, slot: usize) {
        if let Some(entry) = self.messages.get_mut(slot) {
            *entry = None;
        }
    }

    /// Messages moved to the dead-letter queue.
    pub fn dead_letters(&self) -> &[QueuedMessage] {
        &self.dead_letters
    }

    /// Messages still on the queue.
    pub fn remaining(&self) -> usize {
        self.messages.iter().flatten().count()
    }

    /// Receives so far (each one record in an event).
    pub fn deliveries(&self) -> u64 {
        self.deliveries
    }

    /// Message ids received per notification (for reports).
    pub fn by_notification(&self) -> HashMap<usize, usize> {
        let mut m = HashMap::new();
        for q in self.messages.iter().flatten() {
            *m.entry(q.notification).or_insert(0) += 1;
        }
        m
    }
}

/// MD5 as SQS computes `md5OfBody` (RFC 1321), for realistic events only; nothing relies on it.
fn md5_digest(data: &[u8]) -> [u8; 16] {
    use md5::{Digest, Md5};
    Md5::digest(data).into()
}
