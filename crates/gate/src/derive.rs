//! Step 1 of the consumer: the keys of a parsed event, derived at the edge from what the
//! integration says is its key material and business content ([`crate::keys`] holds the hashes).

use crate::integration::Event;
use crate::keys::{event_key_of_material, fingerprint_of, operation_key};

/// The keys of step 1.
#[derive(Clone)]
pub struct DerivedKeys {
    /// Lowercase hex SHA-256 of the event's key material ([`crate::keys::event_key_of_material`]).
    pub event_key: String,
    /// The side effect's `Idempotency-Key`.
    pub op_key: String,
    /// SHA-256 hex of the canonical business fields.
    pub fingerprint: String,
    /// The request body for the side effect, built once here ([`Event::request`]); secret
    /// (it may hold credentials: an API key or a PIN).
    pub request: Vec<u8>,
}

/// Step 1: derives the event key (from the event's key material), the operation key of
/// `operation` (the side effect's `Idempotency-Key`), the fingerprint (of the business fields)
/// and the request bytes from a parsed event. Never uses the SQS message id.
///
/// # Errors
/// Only if the business fields cannot be written as canonical JSON (RFC 8785 refuses no value
/// `serde_json` can hold but a number out of its range).
pub fn derive_keys(event: &Event, operation: &str) -> Result<DerivedKeys, serde_json::Error> {
    let event_key = event_key_of_material(&event.key_material);
    Ok(DerivedKeys {
        op_key: operation_key(&event_key, operation),
        fingerprint: fingerprint_of(&event.business_fields)?,
        request: event.request.clone(),
        event_key,
    })
}
