//! The SQS Standard queue of the simulation: messages with visibility timeouts, redelivery of
//! what is not deleted, a dead-letter queue after `max_receive_count` receives, independent
//! copies under one message id (SQS's own duplicates, which can land in one batch), and deletes
//! that only work with the latest receipt (a late delete after a redelivery is ignored, as SQS
//! ignores a stale receipt handle).

use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

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
}

/// One message copy.
#[derive(Debug, Clone)]
pub struct Msg {
    /// The SQS message id (copies of one message share it).
    pub id: String,
    /// Index of its body in the schedule.
    pub body: usize,
    /// When it can next be received, simulated epoch ms.
    pub visible_at: i64,
    /// Receives so far.
    pub receives: u32,
    /// Where it is.
    pub state: MsgState,
}

/// The queue.
#[derive(Debug)]
pub struct Queue {
    /// Every copy ever sent, in send order.
    pub msgs: Vec<Msg>,
    visibility_ms: i64,
    max_receive: u32,
}

impl Queue {
    /// An empty queue.
    pub fn new(visibility_ms: i64, max_receive: u32) -> Self {
        Self {
            msgs: Vec::new(),
            visibility_ms,
            max_receive: max_receive.max(1),
        }
    }

    /// Sends a copy of `body` under `id`, visible from `at_ms`.
    pub fn send(&mut self, id: String, body: usize, at_ms: i64) {
        self.msgs.push(Msg {
            id,
            body,
            visible_at: at_ms,
            receives: 0,
            state: MsgState::Live,
        });
    }

    /// The earliest time a live copy is visible.
    pub fn next_visible(&self) -> Option<i64> {
        self.msgs
            .iter()
            .filter(|m| m.state == MsgState::Live)
            .map(|m| m.visible_at)
            .min()
    }

    /// Whether any copy is still on the queue.
    pub fn any_live(&self) -> bool {
        self.msgs.iter().any(|m| m.state == MsgState::Live)
    }

    /// Receives up to `max` visible copies at `now` in an order the seed picks (SQS Standard is
    /// unordered). A copy received `max_receive_count` times already goes to the DLQ instead.
    /// Returns `(index, receipt)` pairs; the receipt is the receive count.
    pub fn receive(&mut self, now: i64, max: usize, rng: &mut ChaCha8Rng) -> Vec<(usize, u32)> {
        let mut visible: Vec<usize> = self
            .msgs
            .iter()
            .enumerate()
            .filter(|(_, m)| m.state == MsgState::Live && m.visible_at <= now)
            .map(|(i, _)| i)
            .collect();
        visible.shuffle(rng);
        let mut out = Vec::new();
        for i in visible {
            if out.len() >= max {
                break;
            }
            let m = &mut self.msgs[i];
            if m.receives >= self.max_receive {
                m.state = MsgState::Dead;
                continue;
            }
            m.receives += 1;
            m.visible_at = now + self.visibility_ms;
            out.push((i, m.receives));
        }
        out
    }

    /// Deletes a copy if `receipt` is still its latest receive.
    pub fn delete(&mut self, index: usize, receipt: u32) -> bool {
        match self.msgs.get_mut(index) {
            Some(m) if m.state == MsgState::Live && m.receives == receipt => {
                m.state = MsgState::Deleted;
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
            }
        }
    }
}
