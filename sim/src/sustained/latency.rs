//! The latency models of the sustained replay, on simulated time: a fixed latency per store call
//! (DynamoDB serves concurrent calls in parallel), and the terminal behind a latency per claim
//! with an optional limit of claims served at once.

use std::sync::Arc;

use async_trait::async_trait;
use gate_testkit::Pause;
use tokio::sync::Semaphore;
use truck_slot::terminal::{CallOutcome, LookupOutcome, SlotTerminal};

use super::time::SimTime;
use crate::dst::CoreTerminal;

/// A fixed latency per store request in simulated time: with [`DelayedStore`] over the memory
/// store, a latency model of DynamoDB, which serves concurrent requests in parallel.
pub struct SimLatency {
    pub(super) time: SimTime,
    pub(super) delay_ms: i64,
}

#[async_trait]
impl Pause for SimLatency {
    async fn pause(&self) {
        self.time.sleep_ms(self.delay_ms).await;
    }
}

/// The terminal core behind `latency_ms` per claim, with at most `limit` claims served at once
/// (the rest wait in line).
pub(super) struct LimitedTerminal {
    pub(super) inner: CoreTerminal,
    pub(super) time: SimTime,
    pub(super) latency_ms: i64,
    pub(super) limit: Option<Arc<Semaphore>>,
}

#[async_trait]
impl SlotTerminal for LimitedTerminal {
    async fn claim(&self, op_key: &str, request: &[u8]) -> CallOutcome {
        let _permit = match &self.limit {
            Some(s) => s.acquire().await.ok(),
            None => None,
        };
        self.time.sleep_ms(self.latency_ms).await;
        self.inner.claim(op_key, request).await
    }

    async fn lookup(&self, op_key: &str, request: &[u8]) -> LookupOutcome {
        self.inner.lookup(op_key, request).await
    }
}
