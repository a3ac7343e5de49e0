//! The exactly-once gate: turns an at-least-once SQS feed into exactly-once slot claims.
//!
//! The README describes the architecture. Modules:
//! * [`iso6346`]: equipment numbers; [`notification`]: the strict body parser;
//! * [`keys`]: event key, operation key, fingerprint (step 1);
//! * [`record`]: the idempotency record; [`store`]: the store port, split by caller
//!   (`IdempotencyStore`, the write path; `InFlightIndex`, the read side) with its adapters
//!   (`store::memory`, `store::dynamo`);
//! * [`terminal`]: the `SlotTerminal` port, `HttpTerminal` (`terminal::http`) and the scrubber
//!   (`terminal::scrub`: the PIN and the token cut out of text from outside); several terminals
//!   in one stack (`terminal::several`: `TERMINALS` and the per-terminal router);
//! * [`manual`]: the `ManualQueue` port with its adapters (`manual::memory`, `manual::sqs`);
//!   [`clock`]: the `Clock` port;
//! * [`consumer`]: the consumer handler, [`Gate`] (the four steps); [`routing`]: routing to a
//!   person exactly once; [`reconciler`]: stranded records finished;
//! * [`operator`]: an operator's finish and cancel (`gatectl`), and the records' audit history;
//! * [`signals`]: the four signals and their alarms; [`alarm_stats`]: their false-page rates.
pub mod alarm_stats;
pub mod clock;
pub mod config;
#[cfg(feature = "testkit")]
pub mod conformance;
pub mod consumer;
pub mod ijson;
pub mod iso6346;
pub mod keys;
#[cfg(feature = "aws")]
pub mod lambda;
#[cfg(feature = "aws")]
pub mod logging;
pub mod manual;
pub mod notification;
pub mod operator;
pub mod reconciler;
pub mod record;
pub mod routing;
#[cfg(feature = "aws")]
pub mod secrets;
pub mod signals;
pub mod store;
pub mod strict_json;
pub mod terminal;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use consumer::{Delivery, Gate, GateConfig, Invocation, RecordOutcome};
