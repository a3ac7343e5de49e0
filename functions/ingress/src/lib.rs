//! The webhook ingress: Portbase's webhooks (`POST /webhooks/portbase` on an API Gateway HTTP
//! API) verified with the Standard Webhooks scheme and queued, byte for byte, on the notification
//! queue the consumer reads; acknowledged (`202`) only once SQS accepted the message, so that any
//! failure is a `5xx` the sender retries (a retried webhook is a duplicate the gate suppresses).
//!
//! Modules:
//! * [`signature`]: the scheme (HMAC-SHA256 over `{id}.{timestamp}.{body}`, several signatures,
//!   several active secrets, 5 minutes' tolerance) and the local signer's primitives;
//! * [`handler`]: one request, its checks in order, the log line and the EMF counters;
//! * [`event`]: signed webhooks as API Gateway events (the local signer, the sample event);
//! * [`read`]: the invocation's event read by the ingress itself (a header the typed
//!   deserialiser would refuse is a counted `400`, never a runtime error quoting it);
//! * [`problem`]: the answers (RFC 9457 problem documents) and the reason codes;
//! * [`config`], [`secrets`], [`sqs`], [`lambda`]: the wiring (environment, Secrets Manager, SQS,
//!   the runtime loop). `src/main.rs` only calls [`lambda::run`].
pub mod config;
pub mod event;
pub mod handler;
pub mod lambda;
pub mod problem;
pub mod read;
pub mod secrets;
pub mod signature;
pub mod sqs;
