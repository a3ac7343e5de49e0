//! The notification: the SQS message body that asks for a truck slot, and its strict parser
//! ([`parse_notification`], with its table of limits). Shape (a JSON object; other fields are kept
//! for the fingerprint but not interpreted):
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
//!
//! **Identifiers that look alike are one identifier or a rejection, never two events**: the event
//! key hashes `notificationId` as sent, so `"PCS-77 "` and `"PCS-77\u{200b}"` are refused, as is a
//! decomposed `"é"`; the equipment number is normalised (ISO 6346). **No reason quotes the body**:
//! a body may carry the PIN in any field, and reasons are logged; the person who books by hand gets
//! the original body. "Not UTF-8" reaches the gate as U+FFFD (`replacement_character`) or as a
//! lone surrogate escape (`not_json`): an SQS body is always a string of Unicode characters.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value};

use crate::iso6346::EquipmentNumber;
use gate::ijson::NumberDefect;
use gate::strict_json::{from_str_strict, StrictJsonError};

mod reject;

pub use reject::RejectReason;

/// Largest body accepted, in bytes (64 KiB). A Portbase notification is about 1 KiB; SQS allows
/// 1 MiB since August 2025 (256 KiB before), and a DynamoDB item holds at most 400 KB, so a larger
/// body is rejected by its size before the reserve (`body_too_large`, routed to a person once).
/// The limit also keeps the manual-queue message (the original body, JSON-escaped, plus the
/// reason) whole under [`gate::manual::MAX_ITEM_JSON_BYTES`]; a larger body is cut there and the
/// item says so (`gate::manual::ManualItem::to_json`).
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Longest `notificationId`, in characters.
pub const MAX_NOTIFICATION_ID_CHARS: usize = 128;
/// Longest `equipment_number` as sent (spaces and dashes included), in characters.
pub const MAX_EQUIPMENT_NUMBER_CHARS: usize = 32;
/// Longest `terminal` code, in characters.
pub const MAX_TERMINAL_CHARS: usize = 32;
/// Longest release PIN, in characters.
pub const MAX_PIN_CHARS: usize = 64;
/// A window may end at most this many days after now: a slot a year or more ahead is a typo or a
/// corrupted date, and would hold a key and a slot far beyond any redelivery horizon.
pub const MAX_WINDOW_AHEAD_DAYS: i64 = 366;

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

/// The field names of a notification (top level and window): the only keys a
/// [`RejectReason::DuplicateKey`] quotes.
pub const NOTIFICATION_FIELDS: &[&str] = &[
    "notificationId",
    "equipment_number",
    "preferred_window",
    "start",
    "end",
    "terminal",
    "pin",
];

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

/// A required string field that is also short enough and free of control characters and U+FFFD.
fn required_text<'a>(
    obj: &'a Map<String, Value>,
    field: &'static str,
    limit: usize,
) -> Result<&'a str, RejectReason> {
    let value = required_str(obj, field)?;
    check_text(field, value, limit)?;
    Ok(value)
}

/// Checks a field's length (in characters) and characters; see the module's table.
///
/// # Errors
/// [`RejectReason::FieldTooLong`], [`RejectReason::ControlCharacter`] or
/// [`RejectReason::ReplacementCharacter`].
fn check_text(field: &'static str, value: &str, limit: usize) -> Result<(), RejectReason> {
    let chars = value.chars().count();
    if chars > limit {
        return Err(RejectReason::FieldTooLong {
            field,
            chars,
            limit,
        });
    }
    for (position, c) in value.chars().enumerate() {
        if c.is_control() {
            return Err(RejectReason::ControlCharacter { field, position });
        }
        if c == char::REPLACEMENT_CHARACTER {
            return Err(RejectReason::ReplacementCharacter { field, position });
        }
    }
    Ok(())
}

/// Whether `c` renders as nothing, or as a space that is not U+0020: Unicode
/// `Default_Ignorable_Code_Point` (DerivedCoreProperties.txt, Unicode 16.0), the format
/// characters (general category `Cf`) outside it, and `White_Space` other than U+0020 (control
/// characters are refused before, as `control_character`).
fn is_invisible(c: char) -> bool {
    if c != ' ' && c.is_whitespace() {
        return true;
    }
    matches!(
        u32::from(c),
        // Default_Ignorable_Code_Point.
        0x00AD
            | 0x034F
            | 0x061C
            | 0x115F..=0x1160
            | 0x17B4..=0x17B5
            | 0x180B..=0x180F
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x206F
            | 0x3164
            | 0xFE00..=0xFE0F
            | 0xFEFF
            | 0xFFA0
            | 0xFFF0..=0xFFF8
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0000..=0xE0FFF
            // Other format characters (Cf) and blanks that render as nothing.
            | 0x0600..=0x0605
            | 0x06DD
            | 0x070F
            | 0x0890..=0x0891
            | 0x08E2
            | 0x110BD
            | 0x110CD
            | 0x13430..=0x1343F
            | 0xFFF9..=0xFFFB
            | 0x2800
    )
}

/// Checks an identifier that decides which event a body is (see the module's table): no
/// surrounding whitespace (when `trimmed` is required), no invisible character, NFC.
///
/// # Errors
/// [`RejectReason::SurroundingWhitespace`], [`RejectReason::InvisibleCharacter`] or
/// [`RejectReason::NotNfc`].
fn check_identifier(field: &'static str, value: &str, trimmed: bool) -> Result<(), RejectReason> {
    if let Some((position, c)) = value.chars().enumerate().find(|(_, c)| is_invisible(*c)) {
        // A space other than U+0020 at either end is surrounding whitespace as much as it is
        // invisible; it is reported as invisible, the more specific reason.
        return Err(RejectReason::InvisibleCharacter {
            field,
            position,
            code_point: u32::from(c),
        });
    }
    if trimmed && value.trim() != value {
        return Err(RejectReason::SurroundingWhitespace { field });
    }
    if !unicode_normalization::is_nfc(value) {
        return Err(RejectReason::NotNfc { field });
    }
    Ok(())
}

/// A strict-JSON duplicate key as a reason: the key quoted only when it is a notification field.
fn duplicate_key(quoted: String) -> RejectReason {
    if NOTIFICATION_FIELDS
        .iter()
        .any(|name| format!("{name:?}") == quoted)
    {
        RejectReason::DuplicateKey(quoted)
    } else {
        RejectReason::DuplicateKey("a key that is not a field of the notification".into())
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
///   [`RejectReason::WindowEnded`], one ending more than [`MAX_WINDOW_AHEAD_DAYS`] after it is
///   [`RejectReason::WindowTooFarAhead`].
/// * `known_terminals`: the terminal codes this integration books at (exact match).
///
/// The body comes from outside, so every limit is checked before anything else reads it, and
/// each violation is a typed [`RejectReason`] (routed to the manual queue, never retried):
///
/// | limit | value | reason code |
/// | --- | --- | --- |
/// | body size | [`MAX_BODY_BYTES`] (64 KiB; SQS allows 1 MiB, a DynamoDB item 400 KB) | `body_too_large` |
/// | one reading only | no object names a key twice ([`gate::strict_json`]) | `duplicate_key` |
/// | `notificationId` | at most [`MAX_NOTIFICATION_ID_CHARS`] characters | `field_too_long` |
/// | `equipment_number` | at most [`MAX_EQUIPMENT_NUMBER_CHARS`] characters | `field_too_long` |
/// | `terminal` | at most [`MAX_TERMINAL_CHARS`] characters | `field_too_long` |
/// | `pin` | at most [`MAX_PIN_CHARS`] characters | `field_too_long` |
/// | those four fields | no control character (Unicode `Cc`, e.g. NUL, CR, LF, DEL) | `control_character` |
/// | those four fields | no U+FFFD: the sender's bytes were not UTF-8 and someone replaced them | `replacement_character` |
/// | every number | at most 2^53 - 1 in magnitude (I-JSON, RFC 7493; [`gate::ijson`]) | `number_out_of_range` |
/// | every number | no more precision than the IEEE 754 double it rounds to | `number_not_exact` |
/// | `notificationId`, `terminal` | no leading or trailing whitespace | `surrounding_whitespace` |
/// | `notificationId`, `equipment_number`, `terminal` | no invisible character (Unicode `Default_Ignorable_Code_Point` and format characters: U+200B, U+FEFF, bidi controls, ...) and no space other than U+0020 | `invisible_character` |
/// | `notificationId`, `equipment_number`, `terminal` | in Unicode Normalization Form C (UAX #15) | `not_nfc` |
/// | window end | at most [`MAX_WINDOW_AHEAD_DAYS`] days after now | `window_too_far_ahead` |
///
/// # Errors
/// The first [`RejectReason`] found, checked in this order: body size, JSON (strict: no
/// duplicate keys), `notificationId`, `equipment_number`, `preferred_window`, `terminal`, `pin`,
/// window order, window ended, window too far ahead.
pub fn parse_notification(
    body: &str,
    now_ms: i64,
    known_terminals: &[String],
) -> Result<Notification, RejectReason> {
    if body.len() > MAX_BODY_BYTES {
        return Err(RejectReason::BodyTooLarge {
            bytes: body.len(),
            limit: MAX_BODY_BYTES,
        });
    }
    let value = from_str_strict(body).map_err(|e| match e {
        StrictJsonError::DuplicateKey(key) => duplicate_key(key),
        StrictJsonError::Syntax(detail) => RejectReason::NotJson(detail),
    })?;
    let Value::Object(mut obj) = value else {
        return Err(RejectReason::NotJson("top level is not an object".into()));
    };
    gate::ijson::check_numbers(body).map_err(|defect| match defect {
        NumberDefect::OutOfRange { offset } => RejectReason::NumberOutOfRange { offset },
        NumberDefect::NotExact { offset } => RejectReason::NumberNotExact { offset },
    })?;
    let notification_id =
        required_text(&obj, "notificationId", MAX_NOTIFICATION_ID_CHARS)?.to_string();
    check_identifier("notificationId", &notification_id, true)?;
    let equipment_raw = required_text(&obj, "equipment_number", MAX_EQUIPMENT_NUMBER_CHARS)?;
    check_identifier("equipment_number", equipment_raw, false)?;
    let equipment_number =
        EquipmentNumber::parse(equipment_raw).map_err(RejectReason::BadEquipmentNumber)?;
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
    let terminal = required_text(&obj, "terminal", MAX_TERMINAL_CHARS)?.to_string();
    check_identifier("terminal", &terminal, true)?;
    if !known_terminals.contains(&terminal) {
        return Err(RejectReason::UnknownTerminal);
    }
    let pin = Pin::new(required_text(&obj, "pin", MAX_PIN_CHARS)?);
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
    if end.timestamp_millis() > now_ms.saturating_add(MAX_WINDOW_AHEAD_DAYS * 86_400_000) {
        return Err(RejectReason::WindowTooFarAhead {
            end: preferred_window.end_rfc3339(),
            limit_days: MAX_WINDOW_AHEAD_DAYS,
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
mod tests;
