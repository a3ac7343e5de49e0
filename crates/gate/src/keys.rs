//! Step 1 of the gate: stable keys derived at the edge, and the fingerprint, from what an
//! integration says is the key material and the business content
//! ([`crate::integration::Event`]).
//!
//! * event key: lowercase hex SHA-256 of the event's key material ([`event_key_of_material`]),
//!   never the SQS message id (unique per delivery, not per event);
//! * operation key: lowercase hex SHA-256 of `"{event_key}:{operation}"`; the value sent in the
//!   `Idempotency-Key` header (IETF draft `draft-ietf-httpapi-idempotency-key-header`), so the
//!   same event always sends the same key for the same operation;
//! * fingerprint: lowercase hex SHA-256 of the RFC 8785 (JCS) canonical JSON of the business
//!   fields ([`fingerprint_of`]); the same key with another fingerprint is a mismatch, never a
//!   duplicate;
//! * routing keys: the keys of the routing records that send a case to a person once.

use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of `bytes` (64 characters).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The event key of an event whose key material is `material`: lowercase hex SHA-256 of its
/// UTF-8 bytes (64 characters). On the truck-slot path the material is
/// `"{notificationId}:{canonical subject}"`.
pub fn event_key_of_material(material: &str) -> String {
    sha256_hex(material.as_bytes())
}

/// The fingerprint of business fields: lowercase hex SHA-256 of their RFC 8785 canonical JSON.
/// Key order, whitespace and number forms (`25000` vs `25000.0`) do not change it; any business
/// value does.
///
/// # Errors
/// Only if the canonicaliser rejects a value, which cannot happen for JSON that `serde_json`
/// parsed (no NaN or infinity).
pub fn fingerprint_of<T: serde::Serialize>(
    business_fields: &T,
) -> Result<String, serde_json::Error> {
    // RFC 8785 through the maintained JCS crate, not our own serialiser: a hand-written one was
    // measured 3 µs faster per event (docs/BENCHMARKS.md) and rejected, as the gate spends
    // milliseconds on DynamoDB and the side effect, and canonical JSON is not what this project
    // is for.
    let canonical = serde_json_canonicalizer::to_vec(business_fields)?;
    Ok(sha256_hex(&canonical))
}

/// The key of one downstream operation of an event: lowercase hex SHA-256 of
/// `"{event_key}:{operation}"` (64 characters). Stable forever for the same event and operation.
pub fn operation_key(event_key: &str, operation: &str) -> String {
    sha256_hex(format!("{event_key}:{operation}").as_bytes())
}

/// The operation name of routing an item to the manual queue. A routing record (see
/// `crate::routing`) carries `operation_key(route_key, MANUAL_ROUTE)` as its `op_key`, which is
/// how the reconciler tells it from a side effect's record.
pub const MANUAL_ROUTE: &str = "manual-route";

/// The routing key of a body the strict parser rejected: lowercase hex SHA-256 of
/// `"rejected:{sha256_hex(body)}"`. Every copy of the same bytes has the same key, so a
/// duplicated poison body reaches the manual queue once.
pub fn rejected_route_key(body: &str) -> String {
    sha256_hex(format!("rejected:{}", sha256_hex(body.as_bytes())).as_bytes())
}

/// The routing key of a mismatch: lowercase hex SHA-256 of
/// `"mismatch:{event_key}:{fingerprint}"`, `fingerprint` being the mismatched body's. Every copy
/// (and every re-serialisation) of the same mismatched body has the same key.
pub fn mismatch_route_key(event_key: &str, fingerprint: &str) -> String {
    sha256_hex(format!("mismatch:{event_key}:{fingerprint}").as_bytes())
}

/// The routing key of an effect that nothing committed: lowercase hex SHA-256 of the prefix
/// (the legacy `"unbooked-slot:"`, kept: routing records are keyed by it) and
/// `"{event_key}:{effect_id}"`. A call that returned `effect_id` after its record was
/// finished as `failed` or `manual` by another holder reaches a person once per effect.
pub fn unrecorded_effect_route_key(event_key: &str, effect_id: &str) -> String {
    sha256_hex(format!("unbooked-slot:{event_key}:{effect_id}").as_bytes())
}

/// The routing key of a record `committed` without its effect id: lowercase hex SHA-256 of
/// `"committed-without-effect-id:{event_key}"`. Every copy of the event meets the same record, so
/// a person is told once per event key.
pub(crate) fn no_effect_id_route_key(event_key: &str) -> String {
    sha256_hex(format!("committed-without-effect-id:{event_key}").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_sha256_hex_of_their_inputs() {
        // printf 'N-1:CSQU3054383' | sha256sum
        let event_key = event_key_of_material("N-1:CSQU3054383");
        assert_eq!(
            event_key,
            "24e51f427cec71da5a08a736c861eeddc3859b61671bce7d67be43d28c4df40f"
        );
        // printf '{event_key}:slot-claim' | sha256sum (truck-slot's legacy operation name)
        assert_eq!(
            operation_key(&event_key, "slot-claim"),
            "c1fc07e77581e744bf02efa1770ea6590bd5246a05553fff7f738470b546bd2e"
        );
    }

    #[test]
    fn the_fingerprint_is_of_the_canonical_form() {
        // printf '{"a":1,"b":[true,null]}' | sha256sum: RFC 8785 sorts keys, drops whitespace and
        // writes 1.0 as 1.
        let spelled = serde_json::json!({"b": [true, null], "a": 1.0});
        assert_eq!(
            fingerprint_of(&spelled).unwrap(),
            "1cc69c7fa23616ca2ec3ee70d24390a6225c8832db8a4c814c7e0e7f942f8668"
        );
    }
}
