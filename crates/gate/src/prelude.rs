//! What an integration's code names, in one import: `use gate::prelude::*;`.
//!
//! The [`Integration`] trait (with [`Lookup`] for a server that has a lookup by key) and what its methods take and give ([`Event`], [`Parsed`],
//! [`Rejection`], [`Held`], [`IdempotencyRecord`], [`CallOutcome`], [`LookupOutcome`] and the
//! [`AnswerDetail`] an outcome carries (a server's answer in your words, `gate_http::call_with`),
//! [`ManualReason`] for its own reason codes and texts, [`RowColumns`] for its business row's
//! stored names), the
//! body reader [`Fields`], and with feature `http` the Idempotency-Key client
//! (`client`) beside its [`JsonIdAt`] reader; with feature `lambda` the wiring's
//! `SecretString`. The trait's `async` methods need `#[async_trait::async_trait]` on the impl
//! (the integration's own dependency on `async-trait`).

pub use crate::effect::{AnswerDetail, CallOutcome, LookupOutcome};
pub use crate::fields::Fields;
pub use crate::idempotency_key::JsonIdAt;
pub use crate::integration::{Event, Held, Integration, Lookup, Parsed, Rejection};
pub use crate::manual::ManualReason;
pub use crate::record::{IdempotencyRecord, Labels, RowColumns};
pub use crate::secret::SecretString;
