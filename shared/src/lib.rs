//! The exactly-once gate: turns an at-least-once SQS feed into exactly-once slot claims.
//!
//! The README describes the architecture. Modules:
//! * [`iso6346`]: equipment numbers; [`notification`]: the strict body parser;
//! * [`keys`]: event key, operation key, fingerprint (step 1);
//! * [`record`], [`store`]: the idempotency record and the `IdempotencyStore` port;
//!   [`memory`]: the in-memory store;
//! * [`terminal`]: the `SlotTerminal` port and `HttpTerminal`; [`scrub`]: the PIN and the token
//!   found and cut out of text from outside, in every form a server echoes them;
//! * [`manual`]: the `ManualQueue` port and its in-memory queue; [`clock`]: the `Clock` port;
//! * [`gate`]: the consumer handler (the four steps);
//! * [`operator`]: an operator's finish and cancel (`gatectl`), and the records' audit history;
//! * [`signals`]: the four signals and their alarms; [`alarm_stats`]: their false-page rates.
pub mod alarm_stats;
pub mod clock;
pub mod config;
#[cfg(feature = "testkit")]
pub mod conformance;
#[cfg(feature = "aws")]
pub mod dynamo;
pub mod gate;
pub mod ijson;
pub mod iso6346;
pub mod keys;
#[cfg(feature = "aws")]
pub mod lambda;
#[cfg(feature = "aws")]
pub mod logging;
pub mod manual;
pub mod memory;
pub mod notification;
pub mod operator;
pub mod reconciler;
pub mod record;
pub mod scrub;
#[cfg(feature = "aws")]
pub mod secrets;
pub mod signals;
#[cfg(feature = "aws")]
pub mod sqs_manual;
pub mod store;
pub mod strict_json;
pub mod terminal;
#[cfg(feature = "testkit")]
pub mod testkit;
