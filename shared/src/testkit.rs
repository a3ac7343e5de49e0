//! The test kit (feature `testkit`): what every integration's tests share, written once.
//!
//! * [`sqs_event`]: a Lambda SQS event from `(message id, body)` pairs;
//! * [`CallRecorder`] (with feature `aws`): an SDK interceptor that records every request's
//!   operation name, retries included, for round-trip counts in tests and benchmarks;
//! * the store conformance suite is [`crate::conformance`], its one-line test generator
//!   [`store_conformance_tests!`](crate::store_conformance_tests).

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};

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
