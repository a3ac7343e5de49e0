//! The SQS Standard queue of the simulation: messages with visibility timeouts, redelivery of
//! what is not deleted, a dead-letter queue after `max_receive_count` receives, independent
//! copies under one message id (SQS's own duplicates, which can land in one batch), and deletes
//! that only work with the latest receipt (a late delete after a redelivery is ignored, as SQS
//! ignores a stale receipt handle). An operator's redrive moves every dead-lettered copy back as a
//! new message (new id, no receives, as SQS's DLQ redrive does). Every receive records how it
//! ended, so the checker can tell a retry loop from faults.

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
    /// How each receive ended, in order.
    pub receive_ends: Vec<ReceiveEnd>,
    /// The dead-lettered copy a redrive sent this one for.
    pub redriven_from: Option<usize>,
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
            let body = m.body;
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
        self.msgs
            .iter()
            .filter(|m| m.state == MsgState::Live)
            .map(|m| m.visible_at)
            .min()
    }

    /// Whether any copy is in the dead-letter queue.
    pub fn any_dead(&self) -> bool {
        self.msgs.iter().any(|m| m.state == MsgState::Dead)
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
            m.receive_ends.push(ReceiveEnd::Open);
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
