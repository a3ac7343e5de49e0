//! The simulator's one SQS Standard queue, on simulated time (epoch milliseconds), used by both
//! the scenario replay ([`crate::replay`]) and the deterministic simulation ([`crate::dst`]).
//!
//! What it models of SQS Standard: messages with a visibility timeout; redelivery of what is not
//! deleted; a dead-letter queue after `max_receive_count` receives (the redrive policy); independent
//! copies under one message id (SQS's own duplicates, which can land in one batch); deletes that
//! only work with the latest receipt (SQS ignores a stale receipt handle: "you must provide the most
//! recently received receipt handle", SQS Developer Guide, "Visibility timeout"); and an operator's
//! redrive that moves every dead-lettered copy back as a new message (new id, no receives, as the
//! SQS console's DLQ redrive does). Every receive records how it ended, so the DST checker can tell
//! a retry loop from faults. [`lambda_record`] renders a received copy as the record of a Lambda
//! SQS event.
//!
//! The queue is generic over what a copy carries (`T`): the replay keeps the body text and its
//! scenario notification, the DST an index into its schedule's bodies.

use std::collections::BTreeSet;

use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

/// The queue ARN the simulated Lambda events carry.
pub const QUEUE_ARN: &str = "arn:aws:sqs:eu-west-1:123456789012:portbase-notifications";

/// Where a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgState {
    /// On the queue (visible or in flight to a consumer).
    Live,
    /// Deleted after a consumer acknowledged it.
    Deleted,
    /// Moved to the dead-letter queue (with its body): not lost, waiting for a person or a redrive.
    Dead,
    /// Removed by an operator after a crash (its record was already durable).
    Purged,
    /// Was in the dead-letter queue; a redrive sent it back as a new message (its successor).
    Redriven,
}

/// How one receive of a copy ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiveEnd {
    /// Still being handled.
    Open,
    /// The consumer acknowledged it (left it out of `batchItemFailures`).
    Acknowledged,
    /// Listed in `batchItemFailures` by an invocation in which a fault was injected (`true`), or
    /// in which none was (`false`).
    Failed {
        /// Whether the invocation saw an injected fault.
        faulted: bool,
    },
    /// Not started: the invocation's deadline was near.
    NotStarted,
    /// The invocation died (a crash at a step boundary, or the Lambda timeout).
    Killed,
}

impl ReceiveEnd {
    /// Whether an injected fault, a crash or the deadline (not the gate's own answer) ended it.
    pub fn excused(self) -> bool {
        matches!(
            self,
            Self::Failed { faulted: true } | Self::NotStarted | Self::Killed
        )
    }
}

/// One message copy, carrying `T`.
#[derive(Debug, Clone)]
pub struct Msg<T> {
    /// The SQS message id (copies of one message share it).
    pub id: String,
    /// What the copy carries (the replay: body and notification; the DST: a body index).
    pub body: T,
    /// When it was sent, simulated epoch ms (the record's `SentTimestamp`).
    pub sent_at: i64,
    /// When it can next be received, simulated epoch ms.
    pub visible_at: i64,
    /// Receives so far.
    pub receives: u32,
    /// Where it is.
    pub state: MsgState,
    /// How each receive ended, in order.
    pub receive_ends: Vec<ReceiveEnd>,
    /// The dead-lettered copy a redrive sent this one for.
    pub redriven_from: Option<usize>,
}

/// In which order [`Queue::receive`] hands out the visible copies.
pub enum ReceiveOrder<'a> {
    /// Oldest visible first (visibility time, then send order): a reproducible replay.
    Oldest,
    /// An order the seeded generator picks (SQS Standard is unordered): the DST.
    Shuffled(&'a mut ChaCha8Rng),
}

/// The queue.
#[derive(Debug)]
pub struct Queue<T> {
    /// Every copy ever sent, in send order; an index into it names a copy. Read it freely; change
    /// it only through the methods, which keep the index of live copies.
    pub msgs: Vec<Msg<T>>,
    /// The live copies (state [`MsgState::Live`]) by `(visible_at, index)`: what
    /// [`Queue::receive`] and [`Queue::next_visible`] read, so their cost does not grow with
    /// every copy ever sent.
    live: BTreeSet<(i64, usize)>,
    visibility_ms: i64,
    max_receive: u32,
    deliveries: u64,
}

impl<T: Clone> Queue<T> {
    /// An empty queue: `visibility_ms` the visibility timeout in milliseconds, `max_receive` the
    /// redrive policy's `maxReceiveCount` (at least 1).
    pub fn new(visibility_ms: i64, max_receive: u32) -> Self {
        Self {
            msgs: Vec::new(),
            live: BTreeSet::new(),
            visibility_ms,
            max_receive: max_receive.max(1),
            deliveries: 0,
        }
    }

    /// Sends a copy of `body` under `id`, visible from `at_ms` (epoch ms). Sending twice under
    /// one id makes two independent copies, as SQS's own duplicate delivery does.
    pub fn send(&mut self, id: String, body: T, at_ms: i64) {
        self.live.insert((at_ms, self.msgs.len()));
        self.msgs.push(Msg {
            id,
            body,
            sent_at: at_ms,
            visible_at: at_ms,
            receives: 0,
            state: MsgState::Live,
            receive_ends: Vec::new(),
            redriven_from: None,
        });
    }

    /// An operator's DLQ redrive at `now`: every dead-lettered copy goes back to the queue as a
    /// new message (id `{id}-r{n}`, no receives), visible at once. Returns how many.
    pub fn redrive(&mut self, now: i64) -> usize {
        let dead: Vec<usize> = (0..self.msgs.len())
            .filter(|&i| self.msgs[i].state == MsgState::Dead)
            .collect();
        for &i in &dead {
            self.msgs[i].state = MsgState::Redriven;
            let m = &self.msgs[i];
            let id = format!("{}-r{}", m.id, self.msgs.len());
            let body = m.body.clone();
            self.send(id, body, now);
            if let Some(new) = self.msgs.last_mut() {
                new.redriven_from = Some(i);
            }
        }
        dead.len()
    }

    /// Records how the receive `receipt` of copy `index` ended.
    pub fn end_receive(&mut self, index: usize, receipt: u32, end: ReceiveEnd) {
        if let Some(slot) = self
            .msgs
            .get_mut(index)
            .and_then(|m| m.receive_ends.get_mut(receipt.saturating_sub(1) as usize))
        {
            if *slot == ReceiveEnd::Open {
                *slot = end;
            }
        }
    }

    /// The earliest time a live copy is visible.
    pub fn next_visible(&self) -> Option<i64> {
        self.live.first().map(|(visible_at, _)| *visible_at)
    }

    /// Whether any copy is in the dead-letter queue.
    pub fn any_dead(&self) -> bool {
        self.msgs.iter().any(|m| m.state == MsgState::Dead)
    }

    /// Whether any copy is still on the queue.
    pub fn any_live(&self) -> bool {
        !self.live.is_empty()
    }

    /// Receives up to `max` visible copies at `now` (epoch ms) in `order`; they become invisible
    /// for the visibility timeout. A copy received `max_receive_count` times already goes to the
    /// DLQ instead (and does not count towards `max`). Returns `(index, receipt)` pairs; the
    /// receipt is the receive count, which [`Queue::delete`] must present.
    pub fn receive(&mut self, now: i64, max: usize, order: ReceiveOrder<'_>) -> Vec<(usize, u32)> {
        // Oldest first is the index's own order; a shuffle starts from send order (the pinned
        // seeds' schedules depend on it).
        let mut visible: Vec<usize> = self
            .live
            .range(..=(now, usize::MAX))
            .map(|(_, i)| *i)
            .collect();
        if let ReceiveOrder::Shuffled(rng) = order {
            visible.sort_unstable();
            visible.shuffle(rng);
        }
        let mut out = Vec::new();
        for i in visible {
            if out.len() >= max {
                break;
            }
            let m = &mut self.msgs[i];
            self.live.remove(&(m.visible_at, i));
            if m.receives >= self.max_receive {
                m.state = MsgState::Dead;
                continue;
            }
            m.receives += 1;
            m.receive_ends.push(ReceiveEnd::Open);
            m.visible_at = now + self.visibility_ms;
            self.live.insert((m.visible_at, i));
            self.deliveries += 1;
            out.push((i, m.receives));
        }
        out
    }

    /// Deletes a copy if `receipt` is still its latest receive.
    pub fn delete(&mut self, index: usize, receipt: u32) -> bool {
        match self.msgs.get_mut(index) {
            Some(m) if m.state == MsgState::Live && m.receives == receipt => {
                m.state = MsgState::Deleted;
                self.live.remove(&(m.visible_at, index));
                true
            }
            _ => false,
        }
    }

    /// Removes a copy (operator purge).
    pub fn purge(&mut self, index: usize) {
        if let Some(m) = self.msgs.get_mut(index) {
            if m.state == MsgState::Live {
                m.state = MsgState::Purged;
                self.live.remove(&(m.visible_at, index));
            }
        }
    }

    /// Copies in the dead-letter queue now.
    pub fn dead_letters(&self) -> impl Iterator<Item = &Msg<T>> {
        self.msgs.iter().filter(|m| m.state == MsgState::Dead)
    }

    /// Copies still on the queue (visible or in flight to a consumer).
    pub fn remaining(&self) -> usize {
        self.live.len()
    }

    /// Receives so far (each one record in an event).
    pub fn deliveries(&self) -> u64 {
        self.deliveries
    }
}

/// The record of a Lambda SQS event for copy `m` received at `now_ms` (epoch ms) with
/// `receipt_handle`, its body `body`: the fields and attributes SQS sets, `md5OfBody` included.
pub fn lambda_record<T>(m: &Msg<T>, body: &str, receipt_handle: &str, now_ms: i64) -> Value {
    json!({
        "messageId": m.id,
        "receiptHandle": receipt_handle,
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": m.receives.to_string(),
            "SentTimestamp": m.sent_at.to_string(),
            "SenderId": "AIDAIENQZJOLO23YVJ4VO",
            "ApproximateFirstReceiveTimestamp": now_ms.to_string()
        },
        "messageAttributes": {},
        "md5OfBody": hex::encode(md5_digest(body.as_bytes())),
        "eventSource": "aws:sqs",
        "eventSourceARN": QUEUE_ARN,
        "awsRegion": "eu-west-1"
    })
}

/// MD5 as SQS computes `md5OfBody` (RFC 1321), for realistic events only; nothing relies on it.
fn md5_digest(data: &[u8]) -> [u8; 16] {
    use md5::{Digest, Md5};
    Md5::digest(data).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::SeedableRng;

    #[test]
    fn an_unacknowledged_copy_comes_back_after_the_visibility_timeout_then_dead_letters() {
        let mut q: Queue<&str> = Queue::new(30_000, 2);
        q.send("m1".into(), "a", 0);
        assert_eq!(q.receive(0, 10, ReceiveOrder::Oldest), vec![(0, 1)]);
        assert!(q.receive(29_999, 10, ReceiveOrder::Oldest).is_empty());
        assert_eq!(q.receive(30_000, 10, ReceiveOrder::Oldest), vec![(0, 2)]);
        // The third receive finds maxReceiveCount (2) reached: the copy goes to the DLQ.
        assert!(q.receive(60_000, 10, ReceiveOrder::Oldest).is_empty());
        assert_eq!(q.dead_letters().count(), 1);
        assert_eq!(q.remaining(), 0);
        assert_eq!(q.deliveries(), 2);
    }

    #[test]
    fn a_delete_with_a_stale_receipt_is_ignored() {
        let mut q: Queue<&str> = Queue::new(1_000, 5);
        q.send("m1".into(), "a", 0);
        let first = q.receive(0, 1, ReceiveOrder::Oldest);
        let second = q.receive(1_000, 1, ReceiveOrder::Oldest);
        assert_eq!((first[0].1, second[0].1), (1, 2));
        assert!(
            !q.delete(0, 1),
            "the first receipt is stale after the second receive"
        );
        assert_eq!(q.remaining(), 1);
        assert!(q.delete(0, 2));
        assert_eq!(q.remaining(), 0);
    }

    #[test]
    fn copies_under_one_id_are_independent_and_oldest_comes_first() {
        let mut q: Queue<u8> = Queue::new(1_000, 5);
        q.send("late".into(), 0, 500);
        q.send("dup".into(), 1, 100);
        q.send("dup".into(), 2, 100);
        let got = q.receive(500, 10, ReceiveOrder::Oldest);
        let ids: Vec<(&str, u8)> = got
            .iter()
            .map(|(i, _)| (q.msgs[*i].id.as_str(), q.msgs[*i].body))
            .collect();
        assert_eq!(ids, vec![("dup", 1), ("dup", 2), ("late", 0)]);
        // A shuffled receive hands out the same copies, in an order of the seed's.
        let mut q2: Queue<u8> = Queue::new(1_000, 5);
        for b in 0..5 {
            q2.send(format!("m{b}"), b, 0);
        }
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut got: Vec<usize> = q2
            .receive(0, 10, ReceiveOrder::Shuffled(&mut rng))
            .into_iter()
            .map(|(i, _)| i)
            .collect();
        got.sort_unstable();
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn a_redrive_sends_each_dead_letter_back_as_a_new_message() {
        let mut q: Queue<&str> = Queue::new(1_000, 1);
        q.send("m1".into(), "a", 0);
        q.receive(0, 1, ReceiveOrder::Oldest);
        assert!(q.receive(1_000, 1, ReceiveOrder::Oldest).is_empty());
        assert_eq!(q.redrive(2_000), 1);
        assert_eq!(q.msgs[0].state, MsgState::Redriven);
        assert_eq!(q.msgs[1].id, "m1-r1");
        assert_eq!(q.msgs[1].redriven_from, Some(0));
        assert_eq!(q.receive(2_000, 1, ReceiveOrder::Oldest), vec![(1, 1)]);
    }

    /// The receive order and the dead-lettering of the scan the queue did before it kept an
    /// index of live copies: every live copy visible at `now`, oldest first.
    fn scanned_visible(q: &Queue<u32>, now: i64) -> Vec<usize> {
        let mut visible: Vec<usize> = (0..q.msgs.len())
            .filter(|&i| q.msgs[i].state == MsgState::Live && q.msgs[i].visible_at <= now)
            .collect();
        visible.sort_by_key(|&i| (q.msgs[i].visible_at, i));
        visible
    }

    #[test]
    fn the_live_index_answers_as_a_scan_of_every_copy_after_any_operations() {
        use rand::Rng;
        for seed in 0..50 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut q: Queue<u32> = Queue::new(30_000, 3);
            let mut now = 0i64;
            let mut received: Vec<(usize, u32)> = Vec::new();
            for step in 0..300u32 {
                match rng.random_range(0..6) {
                    0 | 1 => q.send(format!("m{step}"), step, now + rng.random_range(0..60_000)),
                    2 => {
                        let max = rng.random_range(1..5);
                        let want: Vec<usize> = scanned_visible(&q, now);
                        let got = q.receive(now, max, ReceiveOrder::Oldest);
                        // The copies handed out are the first `max` of the scan that were not
                        // dead-lettered on the way.
                        let handed: Vec<usize> = got.iter().map(|(i, _)| *i).collect();
                        let expected: Vec<usize> = want
                            .into_iter()
                            .filter(|&i| q.msgs[i].state != MsgState::Dead)
                            .take(handed.len())
                            .collect();
                        assert_eq!(handed, expected, "seed {seed} step {step}");
                        received.extend(got);
                    }
                    3 if !received.is_empty() => {
                        let (i, receipt) =
                            received.swap_remove(rng.random_range(0..received.len()));
                        q.delete(i, receipt);
                    }
                    4 if !q.msgs.is_empty() => q.purge(rng.random_range(0..q.msgs.len())),
                    5 if rng.random_bool(0.1) => {
                        q.redrive(now);
                    }
                    _ => now += rng.random_range(0..20_000),
                }
                let live = q.msgs.iter().filter(|m| m.state == MsgState::Live);
                assert_eq!(q.next_visible(), live.clone().map(|m| m.visible_at).min());
                assert_eq!(q.remaining(), live.clone().count());
                assert_eq!(q.any_live(), q.remaining() > 0);
            }
        }
    }

    #[test]
    fn the_lambda_record_carries_what_sqs_sets() {
        let mut q: Queue<&str> = Queue::new(1_000, 5);
        q.send("m1".into(), "a", 1_000);
        q.receive(2_000, 1, ReceiveOrder::Oldest);
        let r = lambda_record(&q.msgs[0], "hello", "rh-1", 2_000);
        assert_eq!(r["messageId"], "m1");
        assert_eq!(r["attributes"]["ApproximateReceiveCount"], "1");
        assert_eq!(r["attributes"]["SentTimestamp"], "1000");
        // md5("hello"), RFC 1321.
        assert_eq!(r["md5OfBody"], "5d41402abc4b2a76b9719d911017c592");
    }
}
