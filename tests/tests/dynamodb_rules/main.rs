//! What real DynamoDB does that moto does not, on the real `DynamoStore` and gate,
//! through the fault proxy in front of moto (`integration_tests::fault_proxy`), with
//! DynamoDB's `ClientRequestToken` rules played by its token double where moto lacks them:
//!
//! * `tokens`: a commit that landed and lost its answer, retried with its items built again
//!   within and after the 10-minute token window;
//! * `guarantees`: which guarantees the backend honours, probed before the tests that lean on
//!   them;
//! * `conditions`: the commit's cancellation reasons read by item, in both item orders;
//! * `conflicts`: a plain write and a commit that meet a running transaction;
//! * `canary`: the cold-start check that conditional writes are honoured.
//!
//! Run with `scripts/with-moto.sh cargo test -p integration-tests --test dynamodb_rules`.

mod canary;
mod conditions;
mod conflicts;
mod guarantees;
mod tokens;

use std::sync::Arc;

use gate::clock::{Clock, ManualClock};
use gate::consumer::{BatchReport, Gate, Invocation};
use gate::manual::MemoryManualQueue;
use gate::store::IdempotencyStore;
use integration_tests::field_cases::{gate, terminal_core, LOST_ANSWER_BODY, T0};
use integration_tests::sqs_event;
use sim::dst::CoreTerminal;
use sim::terminal::TerminalCore;

/// A gate over `store` (integration `integration`) with the terminal simulator's core, a memory
/// manual queue and a manual clock at [`T0`].
pub struct World {
    pub gate: Gate,
    pub core: Arc<TerminalCore>,
    pub manual: Arc<MemoryManualQueue>,
    pub clock: Arc<ManualClock>,
}

impl World {
    pub fn new(store: Arc<dyn IdempotencyStore>, integration: &str) -> Self {
        let clock = Arc::new(ManualClock::new(T0));
        let core = terminal_core(&clock);
        let manual = Arc::new(MemoryManualQueue::new());
        let gate = gate(
            store,
            integration,
            Arc::new(CoreTerminal::new(core.clone())),
            manual.clone(),
            clock.clone() as Arc<dyn Clock>,
        );
        Self {
            gate,
            core,
            manual,
            clock,
        }
    }

    /// Delivers the first field fault's input ([`LOST_ANSWER_BODY`]) as message `message_id` to an
    /// invocation `request_id` ending 60 s from now.
    pub async fn deliver(&self, message_id: &str, request_id: &str) -> BatchReport {
        let invocation = Invocation {
            request_id: request_id.into(),
            deadline_ms: self.clock.now_ms() + 60_000,
        };
        self.gate
            .handle_batch(sqs_event(&[(message_id, LOST_ANSWER_BODY)]), &invocation)
            .await
    }
}
