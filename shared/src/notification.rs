//! The notification: the SQS message body that asks for a truck slot, and its strict parser.
//!
//! Shape (JSON object; other fields are kept for the fingerprint but not interpreted):
//!
//! ```json
//! {
//!   "notificationId": "PCS-2025-06-09-000123",
//!   "equipment_number": "CSQU3054383",
//!   "preferred_window": {"start": "2025-06-09T08:00:00Z", "end": "2025-06-09T10:00:00Z"},
//!   "terminal": "ECT-DELTA",
//!   "pin": "release PIN (a secret)"
//! }
//! ```

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value};

use crate::iso6346::{EquipmentNumber, EquipmentNumberError};

/// A container release PIN: a secret. `Debug` and `Display` print `[redacted]`; the value is
/// reachable only through [`Pin::expose`], which the claim request builder uses.
#[derive(Clone, PartialEq, Eq)]
pub struct Pin(String);

impl Pin {
    /// Wraps a PIN.
    pub fn new(pin: impl Into<String>) -> Self {
        Self(pin.into())
    }

    /// The secret value. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Pin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Pin([redacted])")
    }
}

impl fmt::Display for Pin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// The preferred pick-up window, both ends UTC instants parsed from RFC 3339.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Start of the window.
    pub start: DateTime<Utc>,
    /// End of the window, strictly after `start`.
    pub end: DateTime<Utc>,
}

impl Window {
    /// `start` in RFC 3339 UTC with seconds precision and a `Z` suffix, e.g.
    /// `2025-06-09T08:00:00Z`: the form the gate sends and stores.
    pub fn start_rfc3339(&self) -> String {
        self.start.to_rfc3339_opts(SecondsFormat::AutoSi, true)
    }

    /// `end` in the same form as [`Window::start_rfc3339`].
    pub fn end_rfc3339(&self) -> String {
        self.end.to_rfc3339_opts(SecondsFormat::AutoSi, true)
    }
}

/// A notification that passed strict parsing. `Debug` omits the PIN and the raw fields.
#[derive(Clone)]
pub struct Notification {
    /// Portbase's notification id (`notificationId`), non-empty.
    pub notification_id: String,
    /// The container, validated and canonical (ISO 6346).
    pub equipment_number: EquipmentNumber,
    /// The preferred pick-up window.
    pub preferred_window: Window,
    /// The terminal code, one of the configured terminals (e.g. `ECT-DELTA`).
    pub terminal: String,
    /// The release PIN (secret).
    pub pin: Pin,
    /// The body as parsed, with `equipment_number` replaced by its canonical form and the window
    /// by its RFC 3339 UTC form: the input of the fingerprint. Holds the PIN: never log it.
    pub(crate) business_fields: Map<String, Value>,
}

impl fmt::Debug for Notification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Notification")
            .field("notification_id", &self.notification_id)
            .field("equipment_number", &self.equipment_number)
            .field("preferred_window", &self.preferred_window)
            .field("terminal", &self.terminal)
            .field("pin", &self.pin)
            .finish_non_exhaustive()
    }
}

/// Every way a body can be wrong. Each is permanent: the body is routed to the manual queue with
/// this reason and acknowledged, never retried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RejectReason {
    /// The body is not JSON, or not a JSON object.
    #[error("body is not a JSON object: {0}")]
    NotJson(String),
    /// A required field is absent or `null`.
    #[error("missing field `{0}`")]
    MissingField(&'static str),
    /// A required field is present but empty (or only whitespace).
    #[error("empty field `{0}`")]
    EmptyField(&'static str),
    /// A field has the wrong JSON type (e.g. a number where a string belongs).
    #[error("field `{field}` must be {expected}")]
    WrongType {
        /// The field's name.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// The equipment number is not a valid ISO 6346 number.
    #[error("bad equipment number: {0}")]
    BadEquipmentNumber(EquipmentNumberError),
    /// A window bound is not an RFC 3339 timestamp.
    #[error("field `{field}` is not an RFC 3339 timestamp: {detail}")]
    BadTimestamp {
        /// `preferred_window.start` or `preferred_window.end`.
        field: &'static str,
        /// The parser's message.
        detail: String,
    },
    /// `preferred_window.end` is not after `preferred_window.start`.
    #[error("window end {end} is not after start {start}")]
    WindowNotOrdered {
        /// The start, RFC 3339.
        start: String,
        /// The end, RFC 3339.
        end: String,
    },
    /// The window ended before the notification was processed: no slot can be claimed.
    #[error("window already ended at {end}")]
    WindowEnded {
        /// The end, RFC 3339.
        end: String,
    },
    /// The terminal is not one this integration books at.
    #[error("unknown terminal {0:?}")]
    UnknownTerminal(String),
}

impl RejectReason {
    /// A short stable code for the reason, used as the manual queue's `reason` attribute and in
    /// metrics: `not_json`, `missing_field`, `empty_field`, `wrong_type`, `bad_equipment_number`,
    /// `bad_timestamp`, `window_not_ordered`, `window_ended`, `unknown_terminal`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotJson(_) => "not_json",
            Self::MissingField(_) => "missing_field",
            Self::EmptyField(_) => "empty_field",
            Self::WrongType { .. } => "wrong_type",
            Self::BadEquipmentNumber(_) => "bad_equipment_number",
            Self::BadTimestamp { .. } => "bad_timestamp",
            Self::WindowNotOrdered { .. } => "window_not_ordered",
            Self::WindowEnded { .. } => "window_ended",
            Self::UnknownTerminal(_) => "unknown_terminal",
        }
    }
}

fn required_str<'a>(
    obj: &'a Map<String, Value>,
    field: &'static str,
) -> Result<&'a str, RejectReason> {
    match obj.get(field) {
        None | Some(Value::Null) => Err(RejectReason::MissingField(field)),
        Some(Value::String(s)) if s.trim().is_empty() => Err(RejectReason::EmptyField(field)),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(RejectReason::WrongType {
            field,
            expected: "a string",
        }),
    }
}

fn timestamp(
    window: &Map<String, Value>,
    key: &'static str,
    field: &'static str,
) -> Result<DateTime<Utc>, RejectReason> {
    let raw = required_str(window, key).map_err(|e| match e {
        RejectReason::MissingField(_) => RejectReason::MissingField(field),
        RejectReason::EmptyField(_) => RejectReason::EmptyField(field),
        _ => RejectReason::WrongType {
            field,
            expected: "an RFC 3339 string",
        },
    })?;
    DateTime::parse_from_rfc3339(raw)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| RejectReason::BadTimestamp {
            field,
            detail: e.to_string(),
        })
}

/// Parses a notification body strictly.
///
/// * `now_ms`: the current time, epoch milliseconds; a window whose end is at or before it is
///   [`RejectReason::WindowEnded`].
/// * `known_terminals`: the terminal codes this integration books at (exact match).
///
/// # Errors
/// The first [`RejectReason`] found, checked in this order: JSON, `notificationId`,
/// `equipment_number`, `preferred_window`, `terminal`, `pin`, window order, window ended.
pub fn parse_notification(
    body: &str,
    now_ms: i64,
    known_terminals: &[String],
) -> Result<Notification, RejectReason> {
    let value: Value =
        serde_json::from_str(body).map_err(|e| RejectReason::NotJson(e.to_string()))?;
    let Value::Object(mut obj) = value else {
        return Err(RejectReason::NotJson("top level is not an object".into()));
    };
    let notification_id = required_str(&obj, "notificationId")?.to_string();
    let equipment_number = EquipmentNumber::parse(required_str(&obj, "equipment_number")?)
        .map_err(RejectReason::BadEquipmentNumber)?;
    let window = match obj.get("preferred_window") {
        None | Some(Value::Null) => return Err(RejectReason::MissingField("preferred_window")),
        Some(Value::Object(w)) => w,
        Some(_) => {
            return Err(RejectReason::WrongType {
                field: "preferred_window",
                expected: "an object {start, end}",
            })
        }
    };
    let start = timestamp(window, "start", "preferred_window.start")?;
    let end = timestamp(window, "end", "preferred_window.end")?;
    let terminal = required_str(&obj, "terminal")?.to_string();
    if !known_terminals.contains(&terminal) {
        return Err(RejectReason::UnknownTerminal(terminal));
    }
    let pin = Pin::new(required_str(&obj, "pin")?);
    let preferred_window = Window { start, end };
    if end <= start {
        return Err(RejectReason::WindowNotOrdered {
            start: preferred_window.start_rfc3339(),
            end: preferred_window.end_rfc3339(),
        });
    }
    if end.timestamp_millis() <= now_ms {
        return Err(RejectReason::WindowEnded {
            end: preferred_window.end_rfc3339(),
        });
    }
    // The fingerprint's input: the body with the interpreted fields in canonical form, so that
    // `csqu 305438-3` and `CSQU3054383`, or `+02:00` and `Z` for the same instant, are one event.
    obj.insert(
        "equipment_number".into(),
        Value::String(equipment_number.to_string()),
    );
    let mut canonical_window = Map::new();
    canonical_window.insert(
        "start".into(),
        Value::String(preferred_window.start_rfc3339()),
    );
    canonical_window.insert("end".into(), Value::String(preferred_window.end_rfc3339()));
    obj.insert("preferred_window".into(), Value::Object(canonical_window));
    Ok(Notification {
        notification_id,
        equipment_number,
        preferred_window,
        terminal,
        pin,
        business_fields: obj,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_749_441_600_000; // 2025-06-09T04:00:00Z

    fn terminals() -> Vec<String> {
        vec!["ECT-DELTA".to_string()]
    }

    fn body(over: &[(&str, Value)]) -> String {
        let mut v = serde_json::json!({
            "notificationId": "N-1",
            "equipment_number": "CSQU3054383",
            "preferred_window": {"start": "2025-06-09T08:00:00Z", "end": "2025-06-09T10:00:00Z"},
            "terminal": "ECT-DELTA",
            "pin": "4711"
        });
        for (k, val) in over {
            if val.is_null() {
                v.as_object_mut().map(|o| o.remove(*k));
            } else {
                v[*k] = val.clone();
            }
        }
        v.to_string()
    }

    #[test]
    fn parses_a_good_body() {
        let n = parse_notification(&body(&[]), NOW, &terminals()).unwrap();
        assert_eq!(n.notification_id, "N-1");
        assert_eq!(n.equipment_number.as_str(), "CSQU3054383");
        assert_eq!(n.preferred_window.start_rfc3339(), "2025-06-09T08:00:00Z");
        assert_eq!(n.terminal, "ECT-DELTA");
        assert_eq!(n.pin.expose(), "4711");
        assert_eq!(format!("{:?}", n.pin), "Pin([redacted])");
        assert!(!format!("{n:?}").contains("4711"), "{n:?}");
    }

    #[test]
    fn each_way_to_be_wrong_has_its_reason() {
        let t = terminals();
        assert!(matches!(
            parse_notification("{bad", NOW, &t),
            Err(RejectReason::NotJson(_))
        ));
        assert!(matches!(
            parse_notification("[1]", NOW, &t),
            Err(RejectReason::NotJson(_))
        ));
        assert_eq!(
            parse_notification(&body(&[("notificationId", Value::Null)]), NOW, &t).unwrap_err(),
            RejectReason::MissingField("notificationId")
        );
        assert_eq!(
            parse_notification(&body(&[("pin", Value::from(" "))]), NOW, &t).unwrap_err(),
            RejectReason::EmptyField("pin")
        );
        assert_eq!(
            parse_notification(&body(&[("pin", Value::from(4711))]), NOW, &t).unwrap_err(),
            RejectReason::WrongType {
                field: "pin",
                expected: "a string"
            }
        );
        assert!(matches!(
            parse_notification(
                &body(&[("equipment_number", Value::from("CSQU3054384"))]),
                NOW,
                &t
            ),
            Err(RejectReason::BadEquipmentNumber(
                EquipmentNumberError::CheckDigit { expected: 3, .. }
            ))
        ));
        let reversed =
            serde_json::json!({"start": "2025-06-09T10:00:00Z", "end": "2025-06-09T08:00:00Z"});
        assert_eq!(
            parse_notification(&body(&[("preferred_window", reversed)]), NOW, &t)
                .unwrap_err()
                .code(),
            "window_not_ordered"
        );
        let late = NOW + 24 * 3600 * 1000;
        assert_eq!(
            parse_notification(&body(&[]), late, &t).unwrap_err(),
            RejectReason::WindowEnded {
                end: "2025-06-09T10:00:00Z".into()
            }
        );
        assert_eq!(
            parse_notification(&body(&[("terminal", Value::from("APMT-2"))]), NOW, &t).unwrap_err(),
            RejectReason::UnknownTerminal("APMT-2".into())
        );
        let bad_time = serde_json::json!({"start": "yesterday", "end": "2025-06-09T08:00:00Z"});
        assert_eq!(
            parse_notification(&body(&[("preferred_window", bad_time)]), NOW, &t)
                .unwrap_err()
                .code(),
            "bad_timestamp"
        );
    }
}
