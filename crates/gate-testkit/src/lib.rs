//! The test kit (feature `testkit`): what every integration's tests share, written once.
//!
//! * [`IdempotencyServer`] ([`ServerConfig`]): an in-process HTTP server with the IETF
//!   `Idempotency-Key` semantics (a stored answer replayed byte for byte, mismatch `422`/`409`,
//!   `409` in flight, keys forgotten after a retention on your clock, lookup by key or none, fault
//!   switches, the effects it made per key), shaped like your server by a path, an id field and
//!   a closure for the answer;
//! * [`Harness`]: runs any [`Integration`](gate::Integration) through duplicates, redeliveries,
//!   crashes at every store write, lost answers, lease expiry and the reconciler on simulated time,
//!   seeded, and checks the end state with [`exactly_once_violations`] (safety) and
//!   [`liveness_violations`] (every event ends committed, failed or with a person; nothing stays
//!   `in_flight`); [`FaultyStore`] is its store;
//! * the store conformance suite is [`crate::conformance`], its one-line test generator
//!   [`store_conformance_tests!`](crate::store_conformance_tests) (and, for a store an operator's
//!   tool uses, [`operator_store_conformance_tests!`](crate::operator_store_conformance_tests));
//! * [`sqs_event`]: a Lambda SQS event from `(message id, body)` pairs;
//! * [`DelayedStore`]: a latency model of the store (benchmarks, the sustained-rate replay);
//! * [`RacedIndex`]: the reconciler's index with a race between a page's read and its use
//!   ([`AfterRead`]: another holder takes the records over, or a second reconciler reads too);
//! * [`CallRecorder`] (with feature `aws`): an SDK interceptor that records every request's
//!   operation name, retries included, for round-trip counts in tests and benchmarks.
//!
//! ## How an integration author uses it
//!
//! Add `gate = { ..., features = ["testkit"] }` to your crate's `[dev-dependencies]`, describe
//! your server to an [`IdempotencyServer`], give the [`Harness`] the bodies your feed carries
//! (events, a changed copy of one to make a mismatch, a body your parse rejects) and check a
//! range of seeds. A failing seed is named in the panic; run it alone to replay it.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use gate_testkit::{Faults, Harness, IdempotencyServer, ServerConfig, Target};
//! use gate::Integration;
//!
//! /// Your integration, as a client of the server at `base_url`.
//! fn my_client(base_url: &str) -> Arc<dyn Integration> {
//!     // e.g. Arc::new(job_client::JobClient::new(base_url).unwrap())
//! #   unimplemented!("{base_url}")
//! }
//!
//! # async fn doc() {
//! // POST /jobs answers 201 {"id": "JOB-000001"}; a reused key with another body is 409.
//! let server = ServerConfig::new("/jobs", "id")
//!     .id_prefix("JOB")
//!     .mismatch(gate_testkit::MismatchAnswer::Conflict);
//! let bodies: Vec<String> = (0..24)
//!     .map(|n| format!(r#"{{"job_id":"J-{n}","payload":{{"n":{n}}}}}"#))
//!     .chain([r#"{"job_id":"J-5","payload":{"n":-5}}"#.to_string(), "{not json".to_string()])
//!     .collect();
//! let reports = Harness::new("jobs", bodies)
//!     .check_seeds(0..100, async |seed, clock| {
//!         let faults = Faults { lose_answer_rate: 0.3, unavailable_rate: 0.1, seed, ..Faults::default() };
//!         let server = IdempotencyServer::start(server.clone().faults(faults), clock)
//!             .await
//!             .expect("a loopback port");
//!         Target { integration: my_client(server.url()), ledger: Arc::new(server) }
//!     })
//!     .await;
//! assert!(reports.iter().all(|r| r.committed() == 24));
//! # }
//! ```
//!
//! The harness drives only the gate's public API (`Gate::handle_batch`, `Gate::reconcile`); a
//! server that is not HTTP, or not this one, works too: any [`EffectLedger`] that counts the
//! effects made per key.
#![warn(missing_docs)]

pub mod conformance;
// The core, for the conformance macros (`$crate::__gate`), which expand in the caller's crate.
#[doc(hidden)]
pub use gate as __gate;
mod delay;
mod expect;
mod faults;
mod harness;
mod invariants;
mod race;
#[cfg(feature = "aws")]
mod recorder;
mod server;
mod server_config;
mod server_ids;
mod skew;
mod totals;

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};

pub use delay::{DelayedStore, Pause};
pub use expect::{figure_misses, unexpected_manual_items};
pub use faults::{FaultCounts, FaultRates, FaultyStore, StallHook};
pub use harness::{EffectLedger, Harness, HarnessConfig, RunReport, Target};
pub use invariants::{exactly_once_violations, liveness_violations, Delivered};
pub use race::{AfterRead, RacedIndex};
#[cfg(feature = "aws")]
pub use recorder::CallRecorder;
pub use server::{
    normalize_key, Answer, AnswerFn, Counters, Faults, IdempotencyServer, MismatchAnswer,
    ServerConfig,
};
pub use server_ids::{IdMaker, IdShapeError, MIN_IDS};
pub use skew::SkewedClock;
pub use totals::{run_parallel, Totals};

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

/// An event made of `body` alone, for tests of the gate's own paths that need no integration's
/// parsing: `body` is its key material (so its event key), its request bytes and its one business
/// field `job`; no labels, no end, no subject.
pub fn plain_event(body: &str) -> gate::integration::Event {
    gate::integration::Event {
        key_material: body.to_string(),
        business_fields: serde_json::json!({ "job": body }),
        request: body.as_bytes().to_vec(),
        labels: gate::record::Labels::new(),
        ends_at_ms: None,
        subject: String::new(),
    }
}

/// A worker that reserved `body` and died: the record `gate`'s consumer would reserve for
/// `worker` at `at_ms` (epoch **milliseconds**), reserved in `store` directly (the gate's own
/// store, or the one behind a wrapper a test scripts) and left `in_flight`, its lease running
/// from `at_ms`. For the tests of recovery: take-overs, sweeps, the reconciler.
///
/// # Panics
/// When `body` is not an event of `gate`'s integration at `at_ms`, or the store does not answer
/// `Reserved` (a test's set-up that went wrong).
pub async fn reserve_stranded(
    gate: &gate::Gate,
    store: &dyn gate::store::IdempotencyStore,
    body: &str,
    worker: &gate::Invocation,
    at_ms: i64,
) -> gate::record::IdempotencyRecord {
    let gate::integration::Parsed::Event(event) = gate.integration.parse(body, at_ms) else {
        panic!("reserve_stranded: {body:?} is not an event of the integration")
    };
    let keys = gate::consumer::derive_keys(&event, gate.integration.operation())
        .unwrap_or_else(|e| panic!("reserve_stranded: the keys of {body:?}: {e}"));
    let record = gate.config.new_record(&event, &keys, worker, at_ms);
    match store.reserve(&record, at_ms).await {
        Ok(gate::store::Reservation::Reserved) => record,
        other => panic!("reserve_stranded: {body:?} was not reserved: {other:?}"),
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
