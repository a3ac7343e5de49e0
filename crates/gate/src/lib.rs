//! `gate`, the exactly-once gate's core: turns an at-least-once SQS feed into exactly-once side
//! effects, for any integration that implements [`Integration`]. It holds the engine and the
//! ports and builds without the AWS SDK, a database driver, the Lambda runtime or an HTTP stack;
//! the adapters are crates beside it, each depending on this one: `gate-dynamo`, `gate-postgres`,
//! `gate-http`, `gate-lambda` and `gate-testkit`. Feature `testkit`: `Held::for_tests`, for
//! tests that reserve a record themselves. `docs/ARCHITECTURE.md` gives the picture.
//!
//! Modules:
//! * [`integration`]: the [`Integration`] trait; [`effect`]: the side effect's answers;
//!   [`idempotency_key`]: the `Idempotency-Key` contract, every answer classified;
//! * [`keys`]: event key, operation key, fingerprint; [`record`]: the idempotency record;
//! * [`store`]: the store port with the memory adapter; [`manual`]: the manual queue port;
//!   [`visibility`]: the event queue's visibility port; [`clock`]: the clock port;
//! * [`Gate`] and [`consumer`]: a batch in, steps 1 and 2; the held record: its steps after the
//!   reserve, with the one decision and the routing to a person; [`reconciler`]: stranded
//!   records; [`outcome`]: what happened to a record ([`RecordOutcome`]);
//! * [`operator`]: an operator's finish and cancel; [`purge`]; [`signals`]: the four signals;
//! * [`fields`], [`strict_json`], [`ijson`]: an event body read strictly, field by field;
//! * [`secret`]: a secret's text, redacted; [`prelude`]: what an integration's code names.
#![warn(missing_docs)]
pub mod clock;
pub mod consumer;
mod decision;
mod derive;
pub mod effect;
pub mod fields;
mod gate;
mod held;
pub mod idempotency_key;
pub mod ijson;
pub mod integration;
pub mod keys;
pub mod manual;
pub mod operator;
pub mod outcome;
pub mod prelude;
pub mod purge;
pub mod reconciler;
pub mod record;
mod routing;
pub mod secret;
pub mod signals;
pub mod store;
pub mod strict_json;
pub mod visibility;

pub use gate::{
    min_deadline_margin_ms, Delivery, Gate, GateConfig, Invocation, COMMIT_ALLOWANCE_MS,
    EXTENSION_HEADROOM_MS,
};
pub use integration::{Event, Held, Integration, Lookup, Parsed, Rejection};
pub use outcome::{BatchReport, RecordOutcome, RecordReport};
