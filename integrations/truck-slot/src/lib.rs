//! The truck-slot integration of the exactly-once gate: one slot claimed at a container terminal
//! per Portbase notification, exactly once, and the TMS booking written with it.
//!
//! What it supplies to the gate ([`gate::Integration`], implemented by [`TruckSlot`]):
//! * the strict parse of a Portbase notification ([`notification`]; equipment numbers per ISO
//!   6346, [`iso6346`]), the key material `"{notificationId}:{equipment number}"`, the business
//!   fields and the claim request ([`keys`]);
//! * the side effect: the slot claim at the terminal and its lookup by `Idempotency-Key`
//!   ([`terminal`]: the `SlotTerminal` port, `HttpTerminal` for ECT Delta's contract, the PIN and
//!   token scrubber);
//! * the business row: the TMS booking ([`booking`]) and the natural key (equipment number and
//!   window start);
//! * its part of the gate's Lambda wiring (feature `aws`): the terminals' configuration
//!   ([`config`]), the token from Secrets Manager ([`secrets`]) and [`lambda::build`], which the
//!   consumer's and the reconciler's `main` hand to `gate_lambda::run_consumer` and
//!   `gate_lambda::run_reconciler`.

pub mod booking;
#[cfg(feature = "aws")]
pub mod config;
pub mod integration;
pub mod iso6346;
pub mod keys;
#[cfg(feature = "aws")]
pub mod lambda;
pub mod notification;
#[cfg(feature = "aws")]
pub mod secrets;
pub mod terminal;

pub use booking::TmsBooking;
pub use integration::{
    derive_keys, event, manual_reason_code, manual_reason_text, TruckSlot, LABELS,
};
