//! The `appointments-v2` API shape: the stored claim request rewritten as its body, its answer
//! read back as the slot body, and a key as a path segment.

use serde_json::{Map, Value};

/// The `appointments-v2` body for a stored claim request (`crate::keys::claim_request`'s
/// `{equipment_number, pin, window_end, window_start}`): `{"container": {"number"}, "release":
/// {"pin"}, "slot_window": {"from", "until"}}` as RFC 8785 canonical JSON, so the same stored bytes
/// always give the same body. Holds the PIN: never log it.
///
/// # Errors
/// A stored request that is not that object (never one this gate wrote), described without
/// quoting it.
pub fn appointments_v2_body(stored: &[u8]) -> Result<Vec<u8>, String> {
    #[derive(serde::Deserialize)]
    struct Stored {
        equipment_number: String,
        pin: String,
        window_start: String,
        window_end: String,
    }
    let s: Stored = serde_json::from_slice(stored).map_err(|e| {
        format!(
            "the stored request cannot be rendered for the appointments-v2 API (line {}, column \
             {}): nothing sent",
            e.line(),
            e.column()
        )
    })?;
    let body = serde_json::json!({
        "container": {"number": s.equipment_number},
        "release": {"pin": s.pin},
        "slot_window": {"from": s.window_start, "until": s.window_end},
    });
    serde_json_canonicalizer::to_vec(&body).map_err(|e| e.to_string())
}

/// An `appointments-v2` answer `{"appointment": {"id", "container": {"number"}}}` in the `slots`
/// shape the classification reads: `{"slot_id", "equipment_number"}` (`lookup`: inside
/// `{"slot": ...}`). `None` when the answer is not such an object, or names a field twice
/// (`gate::strict_json`: which `id` was made would be ambiguous, as a `slots` answer naming
/// `slot_id` twice): it is then classified as it is (an error answer, or a `2xx` without a
/// usable slot).
pub fn appointments_v2_answer(body: &[u8], lookup: bool) -> Option<Vec<u8>> {
    let value = gate::strict_json::from_str_strict(std::str::from_utf8(body).ok()?).ok()?;
    let appointment = value.get("appointment")?.as_object()?;
    let id = appointment.get("id")?;
    let mut slot = Map::new();
    slot.insert("slot_id".into(), id.clone());
    if let Some(number) = appointment.get("container").and_then(|c| c.get("number")) {
        slot.insert("equipment_number".into(), number.clone());
    }
    let slot = Value::Object(slot);
    let shaped = if lookup {
        serde_json::json!({ "slot": slot })
    } else {
        slot
    };
    serde_json::to_vec(&shaped).ok()
}

/// `key` as one URL path segment: unreserved characters (RFC 3986: `A-Z a-z 0-9 - . _ ~`) as they
/// are, every other byte percent-encoded (an operation key is lowercase hex, kept as it is).
pub fn path_segment(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
