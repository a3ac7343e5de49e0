//! The truck-slot path's key material, business fields and claim request, from which the gate
//! derives its keys (`gate::keys`, re-exported here):
//!
//! * event key: lowercase hex SHA-256 of `"{notificationId}:{equipment_number}"`, the equipment
//!   number in canonical ISO 6346 form. Never the SQS message id (unique per delivery, not per
//!   event).
//! * operation key of [`SLOT_CLAIM`]: the value sent in the `Idempotency-Key` header, so the same
//!   event always sends the same key to the terminal.
//! * fingerprint: lowercase hex SHA-256 of the RFC 8785 (JCS) canonical JSON of the business
//!   fields; the same key with another fingerprint is a mismatch, never a duplicate.

pub use gate::keys::*;

use crate::notification::Notification;

/// The operation name of the slot claim, input of its operation key.
pub const SLOT_CLAIM: &str = "slot-claim";

/// The event key of a notification: lowercase hex SHA-256 of
/// `"{notificationId}:{canonical equipment number}"` (64 characters).
pub fn event_key(notification: &Notification) -> String {
    event_key_of(
        &notification.notification_id,
        notification.equipment_number.as_str(),
    )
}

/// The event key from its two parts; `equipment_number` must already be canonical (ISO 6346).
pub fn event_key_of(notification_id: &str, equipment_number: &str) -> String {
    event_key_of_material(&key_material(notification_id, equipment_number))
}

/// The key material of a notification's event: `"{notificationId}:{canonical equipment number}"`.
pub fn key_material(notification_id: &str, equipment_number: &str) -> String {
    format!("{notification_id}:{equipment_number}")
}

/// The fingerprint of a notification: lowercase hex SHA-256 of the RFC 8785 canonical JSON of its
/// business fields (the body with the equipment number and window in canonical form). Key order,
/// whitespace and number forms (`25000` vs `25000.0`) do not change it; any business value does.
///
/// # Errors
/// Only if the canonicaliser rejects a value, which cannot happen for JSON that `serde_json`
/// parsed (no NaN or infinity).
pub fn fingerprint(notification: &Notification) -> Result<String, serde_json::Error> {
    fingerprint_of(&notification.business_fields)
}

/// The slot-claim request body, built once at reservation and stored on the record; every retry
/// and the reconciler send these exact bytes. Shape (RFC 8785 canonical JSON, so it is stable):
/// `{"equipment_number": "...", "pin": "...", "window_end": "RFC 3339", "window_start": "RFC 3339"}`.
/// Holds the PIN: never log it.
///
/// # Errors
/// As [`fingerprint`]: not for values built from a parsed notification.
pub fn claim_request(notification: &Notification) -> Result<Vec<u8>, serde_json::Error> {
    let body = serde_json::json!({
        "equipment_number": notification.equipment_number.as_str(),
        "window_start": notification.preferred_window.start_rfc3339(),
        "window_end": notification.preferred_window.end_rfc3339(),
        "pin": notification.pin.expose(),
    });
    serde_json_canonicalizer::to_vec(&body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notification::parse_notification;

    const NOW: i64 = 1_749_441_600_000;

    fn parse(body: &str) -> Notification {
        parse_notification(body, NOW, &["ECT-DELTA".to_string()]).unwrap()
    }

    const A: &str = r#"{"notificationId":"N-1","equipment_number":"CSQU3054383","preferred_window":{"start":"2025-06-09T08:00:00Z","end":"2025-06-09T10:00:00Z"},"terminal":"ECT-DELTA","pin":"4711","gross_mass_kg":25000}"#;

    #[test]
    fn event_key_is_sha256_of_id_and_canonical_number() {
        let n = parse(A);
        // echo -n 'N-1:CSQU3054383' | sha256sum
        assert_eq!(event_key(&n), sha256_hex(b"N-1:CSQU3054383"));
        assert_eq!(event_key(&n).len(), 64);
        let lower = parse(&A.replace("CSQU3054383", "csqu 305438-3"));
        assert_eq!(event_key(&lower), event_key(&n));
    }

    #[test]
    fn sha256_hex_matches_the_known_vector() {
        // FIPS 180-2 test vector for "abc".
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn operation_keys_differ_per_operation_and_are_stable() {
        let k = event_key(&parse(A));
        assert_eq!(operation_key(&k, SLOT_CLAIM), operation_key(&k, SLOT_CLAIM));
        assert_ne!(
            operation_key(&k, SLOT_CLAIM),
            operation_key(&k, "slot-cancel")
        );
        assert_ne!(operation_key(&k, SLOT_CLAIM), k);
    }

    #[test]
    fn fingerprint_ignores_order_whitespace_and_number_form() {
        let base = fingerprint(&parse(A)).unwrap();
        let reordered = r#"{ "pin" : "4711", "gross_mass_kg": 25000.0,
            "terminal": "ECT-DELTA",
            "preferred_window": {"end": "2025-06-09T12:00:00+02:00", "start": "2025-06-09T08:00:00Z"},
            "equipment_number": "csqu-305438 3", "notificationId": "N-1" }"#;
        assert_eq!(fingerprint(&parse(reordered)).unwrap(), base);
        let exponent = A.replace("25000", "2.5E4");
        assert_eq!(fingerprint(&parse(&exponent)).unwrap(), base);
    }

    #[test]
    fn fingerprint_changes_with_a_business_field() {
        let base = fingerprint(&parse(A)).unwrap();
        let other_window = A.replace("10:00:00Z", "11:00:00Z");
        assert_ne!(fingerprint(&parse(&other_window)).unwrap(), base);
        let other_mass = A.replace("25000", "25001");
        assert_ne!(fingerprint(&parse(&other_mass)).unwrap(), base);
        let other_pin = A.replace("4711", "4712");
        assert_ne!(fingerprint(&parse(&other_pin)).unwrap(), base);
    }

    #[test]
    fn claim_request_is_canonical_and_carries_the_contract_fields() {
        let bytes = claim_request(&parse(A)).unwrap();
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            r#"{"equipment_number":"CSQU3054383","pin":"4711","window_end":"2025-06-09T10:00:00Z","window_start":"2025-06-09T08:00:00Z"}"#
        );
    }
}
