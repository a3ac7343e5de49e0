//! The test kit (feature `testkit`): what every integration's tests share, written once.
//!
//! * [`sqs_event`]: a Lambda SQS event from `(message id, body)` pairs;
//! * [`CallRecorder`] (with feature `aws`): an SDK interceptor that records every request's
//!   operation name, retries included, for round-trip counts in tests and benchmarks;
//! * the store conformance suite is [`crate::conformance`], its one-line test generator
//!   [`store_conformance_tests!`](crate::store_conformance_tests);
//! * [`exactly_once_violations`]: the gate's safety invariants over the end state of any
//!   integration's run (records, business rows, manual queue, the effects its server made).

use async_trait::async_trait;
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};

use crate::record::{BusinessRow, IdempotencyRecord, NaturalKey, RecordStatus};
use crate::store::{
    CommitOutcome, FinishGuard, FinishOutcome, IdempotencyStore, Reservation, StoreError, TakeOver,
};

/// The event source ARN the built events carry.
pub const QUEUE_ARN: &str = "arn:aws:sqs:eu-west-1:123456789012:portbase-notifications";

/// A Lambda SQS event with one record per `(message id, body)` pair, in order, each with the
/// fields Lambda sets that the gate reads or logs: `messageId`, `receiptHandle` (`rh-{id}`),
/// `body`, `eventSource` (`aws:sqs`), `eventSourceARN` ([`QUEUE_ARN`]) and `awsRegion`.
pub fn sqs_event(records: &[(&str, &str)]) -> SqsEvent {
    let mut event = SqsEvent::default();
    for (id, body) in records {
        let mut m = SqsMessage::default();
        m.message_id = Some((*id).to_string());
        m.receipt_handle = Some(format!("rh-{id}"));
        m.body = Some((*body).to_string());
        m.event_source = Some("aws:sqs".to_string());
        m.event_source_arn = Some(QUEUE_ARN.to_string());
        m.aws_region = Some("eu-west-1".to_string());
        event.records.push(m);
    }
    event
}

/// The gate's safety invariants over the end state of a run, for any integration; each violation
/// in words (empty: none). `effects` is what the side effect's server made, by `Idempotency-Key`
/// (the record's `op_key`), in order.
///
/// 1. **At most one effect per key**: the server made at most one effect under each key.
/// 2. **A committed record is its effect**: it holds one effect id, the one its server made under
///    its key, and its business row names the same effect and labels.
/// 3. **A business row has its committed record**: no row without a record committed with it.
/// 4. **Never also by hand**: no item in the manual queue names a committed event, except as a
///    mismatch (another body under the same event key) or an unbooked effect.
pub fn exactly_once_violations(
    records: &[crate::record::IdempotencyRecord],
    rows: &[crate::record::BusinessRow],
    manual: &[crate::manual::ManualItem],
    effects: &std::collections::BTreeMap<String, Vec<String>>,
) -> Vec<String> {
    use crate::manual::ManualReason;
    use crate::record::RecordStatus;
    let mut v = Vec::new();
    for (key, made) in effects {
        if made.len() > 1 {
            v.push(format!("key {key}: {} effects {made:?}", made.len()));
        }
    }
    let committed: std::collections::BTreeMap<&str, &crate::record::IdempotencyRecord> = records
        .iter()
        .filter(|r| r.status == RecordStatus::Committed)
        .map(|r| (r.event_key.as_str(), r))
        .collect();
    for r in committed.values() {
        let made = effects
            .get(&r.op_key)
            .map(Vec::as_slice)
            .unwrap_or_default();
        if r.slot_id.is_none() || made.first() != r.slot_id.as_ref() || r.slot_ids.len() != 1 {
            v.push(format!(
                "event {}: committed {:?} (ids {:?}), the server made {made:?}",
                r.event_key, r.slot_id, r.slot_ids
            ));
        }
        match rows.iter().find(|b| b.source_event == r.event_key) {
            Some(b) if Some(&b.effect_id) == r.slot_id.as_ref() && b.labels == r.labels => {}
            other => v.push(format!("event {}: business row {other:?}", r.event_key)),
        }
    }
    for b in rows {
        if !committed.contains_key(b.source_event.as_str()) {
            v.push(format!(
                "business row of {} without a committed record",
                b.source_event
            ));
        }
    }
    for item in manual {
        let by_hand = !matches!(
            item.reason,
            ManualReason::Mismatch | ManualReason::UnbookedSlot
        );
        if let Some(key) = item
            .event_key
            .as_deref()
            .filter(|k| by_hand && committed.contains_key(k))
        {
            v.push(format!(
                "event {key} committed and in the manual queue ({})",
                item.reason.code()
            ));
        }
    }
    v
}

/// What a [`DelayedStore`] waits before each request: a tokio sleep in a benchmark, simulated
/// time in the simulator.
#[async_trait]
pub trait Pause: Send + Sync {
    /// Waits once (one request's latency).
    async fn pause(&self);
}

/// A store that waits [`Pause::pause`] before passing each write-path request to `inner`: a
/// latency model of DynamoDB, which serves concurrent requests in parallel. One decorator for
/// the benchmark and the simulator's sustained-rate replay.
pub struct DelayedStore<P> {
    /// The store that answers.
    pub inner: std::sync::Arc<dyn IdempotencyStore>,
    /// What each request waits first.
    pub pause: P,
}

#[async_trait]
impl<P: Pause> IdempotencyStore for DelayedStore<P> {
    async fn reserve(&self, r: &IdempotencyRecord, now: i64) -> Result<Reservation, StoreError> {
        self.pause.pause().await;
        self.inner.reserve(r, now).await
    }
    async fn take_over(
        &self,
        pk: &str,
        old: &str,
        new: &str,
        until: i64,
        now: i64,
    ) -> Result<TakeOver, StoreError> {
        self.pause.pause().await;
        self.inner.take_over(pk, old, new, until, now).await
    }
    async fn commit(
        &self,
        pk: &str,
        owner: &str,
        slot: &str,
        b: &BusinessRow,
        natural_key: Option<&NaturalKey>,
        now: i64,
    ) -> Result<CommitOutcome, StoreError> {
        self.pause.pause().await;
        self.inner
            .commit(pk, owner, slot, b, natural_key, now)
            .await
    }
    async fn release_lease(&self, pk: &str, owner: &str, now: i64) -> Result<(), StoreError> {
        self.pause.pause().await;
        self.inner.release_lease(pk, owner, now).await
    }
    async fn finish(
        &self,
        pk: &str,
        owner: &str,
        status: RecordStatus,
        error: &str,
        item: &[u8],
        guard: FinishGuard,
        now: i64,
    ) -> Result<FinishOutcome, StoreError> {
        self.pause.pause().await;
        self.inner
            .finish(pk, owner, status, error, item, guard, now)
            .await
    }
    async fn routed(&self, pk: &str, owner: &str, now: i64) -> Result<bool, StoreError> {
        self.pause.pause().await;
        self.inner.routed(pk, owner, now).await
    }
    async fn record_slot_id(
        &self,
        pk: &str,
        slot: &str,
        now: i64,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.pause.pause().await;
        self.inner.record_slot_id(pk, slot, now).await
    }
    async fn get(&self, pk: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.pause.pause().await;
        self.inner.get(pk).await
    }
    async fn booking(&self, source_event: &str) -> Result<Option<BusinessRow>, StoreError> {
        self.pause.pause().await;
        self.inner.booking(source_event).await
    }
}

#[cfg(feature = "aws")]
pub use recorder::CallRecorder;

#[cfg(feature = "aws")]
mod recorder {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
    use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
    use aws_sdk_dynamodb::error::BoxError;
    use aws_smithy_runtime_api::client::orchestrator::Metadata;

    /// An SDK interceptor that records the operation name (`PutItem`, `TransactWriteItems`,
    /// `SendMessage`, ...) of every HTTP request a client sends, retries included (recorded
    /// before transmit). Clones share one record. Attach it with the client config builder's
    /// `.interceptor(recorder.clone())`.
    #[derive(Debug, Clone, Default)]
    pub struct CallRecorder {
        calls: Arc<Mutex<Vec<String>>>,
    }

    impl CallRecorder {
        /// An empty recorder.
        pub fn new() -> Self {
            Self::default()
        }

        /// Every request's operation name so far, in order.
        pub fn calls(&self) -> Vec<String> {
            self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
        }

        /// Requests so far per operation name.
        pub fn counts(&self) -> BTreeMap<String, u64> {
            let mut counts = BTreeMap::new();
            for call in self.calls.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                *counts.entry(call.clone()).or_default() += 1;
            }
            counts
        }

        /// Forgets the requests so far.
        pub fn clear(&self) {
            self.calls.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
    }

    impl Intercept for CallRecorder {
        fn name(&self) -> &'static str {
            "CallRecorder"
        }

        fn read_before_transmit(
            &self,
            _context: &BeforeTransmitInterceptorContextRef<'_>,
            _runtime_components: &RuntimeComponents,
            cfg: &mut ConfigBag,
        ) -> Result<(), BoxError> {
            let name = cfg
                .load::<Metadata>()
                .map_or_else(|| "?".to_string(), |m| m.name().to_string());
            self.calls
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(name);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_keeps_the_order_and_the_fields() {
        let e = sqs_event(&[("a", "{}"), ("b", "x")]);
        let ids: Vec<_> = e.records.iter().map(|r| r.message_id.clone()).collect();
        assert_eq!(ids, vec![Some("a".to_string()), Some("b".to_string())]);
        assert_eq!(e.records[1].body.as_deref(), Some("x"));
        assert_eq!(e.records[0].receipt_handle.as_deref(), Some("rh-a"));
        assert_eq!(e.records[0].event_source.as_deref(), Some("aws:sqs"));
    }
}
