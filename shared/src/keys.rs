//! Step 1 of the gate: stable keys derived at the edge, and the fingerprint.
//!
//! * event key: lowercase hex SHA-256 of `"{notificationId}:{equipment_number}"`, the equipment
//!   number in canonical ISO 6346 form. Never the SQS message id (unique per delivery, not per
//!   event).
//! * operation key: lowercase hex SHA-256 of `"{event_key}:{operation}"`; the value sent in the
//!   `Idempotency-Key` header, so the same event always sends the same key to the terminal.
//! * fingerprint: lowercase hex SHA-256 of the RFC 8785 (JCS) canonical JSON of the business
//!   fields; the same key with another fingerprint is a mismatch, never a duplicate.

use sha2::{Digest, Sha256};

use crate::notification::Notification;

/// The operation name of the slot claim, input of its operation key.
pub const SLOT_CLAIM: &str = "slot-claim";

/// Lowercase hex SHA-256 of `bytes` (64 characters).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

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
    sha256_hex(format!("{notification_id}:{equipment_number}").as_bytes())
}

/// The key of one downstream operation of an event: lowercase hex SHA-256 of
/// `"{event_key}:{operation}"` (64 characters). Stable forever for the same event and operation.
pub fn operation_key(event_key: &str, operation: &str) -> String {
    sha256_hex(format!("{event_key}:{operation}").as_bytes())
}

/// The operation name of routing an item to the manual-booking queue. A routing record (see
/// `crate::gate`, "Routing to a person exactly once") carries
/// `operation_key(route_key, MANUAL_ROUTE)` as its `op_key`, which is how the reconciler tells it
/// from a slot claim.
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

/// The fingerprint of a notification: lowercase hex SHA-256 of the RFC 8785 canonical JSON of its
/// business fields (the body with the equipment number and window in canonical form). Key order,
/// whitespace and number forms (`25000` vs `25000.0`) do not change it; any business value does.
///
/// # Errors
/// Only if the canonicaliser rejects a value, which cannot happen for JSON that `serde_json`
/// parsed (no NaN or infinity).
pub fn fingerprint(notification: &Notification) -> Result<String, serde_json::Error> {
    let mut canonical = Vec::with_capacity(256);
    write_canonical_object(&notification.business_fields, &mut canonical)?;
    Ok(sha256_hex(&canonical))
}

/// Writes `map` as RFC 8785 (JCS) canonical JSON: byte for byte what
/// `serde_json_canonicalizer::to_vec` writes (a unit test holds the two together), in a third of
/// the time (`BENCHMARKS.md`): members sorted by the UTF-16 code units of their names, compared
/// without allocating; strings escaped as `serde_json` escapes them, which is RFC 8785's escaping
/// (`\b \t \n \f \r \" \\`, other controls as `\u00xx`, nothing else); numbers, the only
/// part that needs ECMAScript's number formatting, still through the canonicaliser.
fn write_canonical_object(
    map: &serde_json::Map<String, serde_json::Value>,
    out: &mut Vec<u8>,
) -> Result<(), serde_json::Error> {
    let mut members: Vec<(&String, &serde_json::Value)> = map.iter().collect();
    members.sort_unstable_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
    out.push(b'{');
    for (i, (name, value)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut *out, name)?;
        out.push(b':');
        write_canonical(value, out)?;
    }
    out.push(b'}');
    Ok(())
}

/// Writes `value` as RFC 8785 canonical JSON (see [`write_canonical_object`]).
fn write_canonical(value: &serde_json::Value, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
    use serde_json::Value;
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => serde_json_canonicalizer::to_writer(n, out)?,
        Value::String(s) => serde_json::to_writer(&mut *out, s)?,
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out)?;
            }
            out.push(b']');
        }
        Value::Object(map) => write_canonical_object(map, out)?,
    }
    Ok(())
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
    let mut canonical = Vec::with_capacity(160);
    write_canonical(&body, &mut canonical)?;
    Ok(canonical)
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
    fn canonical_json_is_byte_for_byte_the_canonicalisers() {
        let cases = [
            r#"{"b":1,"a":[true,false,null,{"z":"\u0000\u001f\b\f\n\r\t\"\\/"}],"c":{}}"#,
            r#"{"n":[0,-0.0,0.1,1e21,1e-7,25000,25000.0,2.5E4,-1.5,9007199254740993,18446744073709551615,-9223372036854775808,123456789012345680000]}"#,
            // UTF-16 order differs from UTF-8 order: U+E000 sorts after U+1F600 (a surrogate pair)
            // in UTF-8 but before it in UTF-16; RFC 8785 sorts by UTF-16.
            r#"{"\ue000":1,"\ud83d\ude00":2,"\u00e9":3,"e":4,"E":5,"":6,"aa":7,"a":8}"#,
            r#"{"s":"Grüße \u2028 \u2029 \u007f 💡 </script>","nested":{"y":[[],[{}]],"x":"1"}}"#,
            r#"[1,"two",{"3":3}]"#,
            r#""just a string""#,
        ];
        for case in cases {
            let value: serde_json::Value = serde_json::from_str(case).unwrap();
            let mut ours = Vec::new();
            write_canonical(&value, &mut ours).unwrap();
            assert_eq!(
                String::from_utf8(ours).unwrap(),
                serde_json_canonicalizer::to_string(&value).unwrap(),
                "{case}"
            );
        }
        let n = parse(A);
        assert_eq!(
            fingerprint(&n).unwrap(),
            sha256_hex(&serde_json_canonicalizer::to_vec(&n.business_fields).unwrap())
        );
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
