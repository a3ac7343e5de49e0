//! The exactly-once gate: turns an at-least-once SQS feed into exactly-once side effects, for any
//! integration that implements [`Integration`] (the truck-slot claims of crate `truck_slot`, the
//! job client of crate `job_client`).
//!
//! Modules (`docs/ARCHITECTURE.md` gives the picture):
//! * [`integration`]: the [`Integration`] trait (parse, key material, business fields, request
//!   bytes, the side effect and its lookup, the business row); [`effect`]: the side effect's
//!   answers as the gate acts on them; [`idempotency_key`]: the `Idempotency-Key` HTTP contract
//!   (the header, every answer classified, the summaries; its reqwest client with feature `http`);
//! * [`keys`]: event key, operation key, fingerprint (step 1);
//! * [`record`]: the idempotency record, its labels, the business row; [`store`]: the store port,
//!   split by caller (`IdempotencyStore`, the write path; `InFlightIndex`, the read side) with its
//!   adapters (`store::memory`, `store::dynamo`);
//! * [`manual`]: the `ManualQueue` port with its adapters (`manual::memory`, `manual::sqs`);
//!   [`clock`]: the `Clock` port;
//! * [`Gate`], [`GateConfig`], [`Invocation`], [`Delivery`] (`gate.rs`): the gate every path runs
//!   on, its settings, the execution it runs in, and what every path does alike with a record it
//!   holds (the lease's end, take-over, release, the policy);
//! * [`consumer`]: the consumer handler (the four steps, the settlement); [`decision`]: the one
//!   decision for a record the gate holds (call, look up, or a person), for the consumer, the
//!   reconciler and `gatectl`; [`routing`]: routing to a person exactly once; [`reconciler`]:
//!   stranded records finished;
//! * [`operator`]: an operator's finish and cancel (`gatectl`), and the records' audit history;
//! * [`signals`]: the four signals and their alarms; [`alarm_stats`]: their false-page rates;
//! * [`fields`]: an event body read field by field, each failure a typed rejection;
//!   [`strict_json`], [`ijson`]: strict JSON for an integration's parser (no duplicate keys,
//!   exact numbers); [`logging`]: the functions' JSON logs (feature `aws`);
//! * `lambda` (feature `lambda`): the Lambda wiring, any integration as the consumer, the
//!   reconciler and the metrics function from a `main.rs` of a few lines;
//! * [`prelude`]: what an integration's code names, in one import;
//! * [`conformance`], [`testkit`] (feature `testkit`): the store conformance suite and test tools.
#![warn(missing_docs)]
pub mod alarm_stats;
pub mod clock;
#[cfg(feature = "testkit")]
pub mod conformance;
pub mod consumer;
pub mod decision;
pub mod effect;
pub mod fields;
mod gate;
pub mod idempotency_key;
pub mod ijson;
pub mod integration;
pub mod keys;
#[cfg(feature = "lambda")]
pub mod lambda;
#[cfg(feature = "aws")]
pub mod logging;
pub mod manual;
pub mod operator;
pub mod prelude;
pub mod purge;
pub mod reconciler;
pub mod record;
pub mod routing;
pub mod signals;
pub mod store;
pub mod strict_json;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use consumer::RecordOutcome;
pub use gate::{
    Delivery, Gate, GateConfig, Invocation, COMMIT_ALLOWANCE_MS, EXTENSION_HEADROOM_MS,
};
pub use integration::{Event, Held, Integration, Parsed, Rejection};
