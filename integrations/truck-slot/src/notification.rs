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
//!
//! The body comes from outside, so every limit is checked before anything else reads it, and
//! each violation is a typed [`RejectReason`] (routed to the manual queue, never retried):
//!
//! | limit | value | reason code |
//! | --- | --- | --- |
//! | body size | [`MAX_BODY_BYTES`] (64 KiB; SQS allows 1 MiB, a DynamoDB item 400 KB) | `body_too_large` |
//! | one reading only | no object names a key twice ([`gate::strict_json`]) | `duplicate_key` |
//! | `notificationId` | at most [`MAX_NOTIFICATION_ID_CHARS`] characters | `field_too_long` |
//! | `equipment_number` | at most [`MAX_EQUIPMENT_NUMBER_CHARS`] characters | `field_too_long` |
//! | `terminal` | at most [`MAX_TERMINAL_CHARS`] characters | `field_too_long` |
//! | `pin` | at most [`MAX_PIN_CHARS`] characters | `field_too_long` |
//! | those four fields | no control character (Unicode `Cc`, e.g. NUL, CR, LF, DEL) | `control_character` |
//! | those four fields | no U+FFFD: the sender's bytes were not UTF-8 and someone replaced them | `replacement_character` |
//! | every number | at most 2^53 - 1 in magnitude (I-JSON, RFC 7493; [`gate::ijson`]) | `number_out_of_range` |
//! | every number | no more precision than the IEEE 754 double it rounds to | `number_not_exact` |
//! | `notificationId`, `terminal` | no leading or trailing whitespace | `surrounding_whitespace` |
//! | `notificationId`, `equipment_number`, `terminal` | no invisible character (Unicode `Default_Ignorable_Code_Point` and format characters: U+200B, U+FEFF, bidi controls, ...) and no space other than U+0020 | `invisible_character` |
//! | `notificationId`, `equipment_number`, `terminal` | in Unicode Normalization Form C (UAX #15) | `not_nfc` |
//! | window end | at most [`MAX_WINDOW_AHEAD_DAYS`] days after now | `window_too_far_ahead` |
//!
//! **Identifiers that look alike are one identifier or a rejection, never two events.** The
//! event key hashes `notificationId` as sent, so `"PCS-77"`, `"PCS-77 "` and `"PCS-77\u{200b}"`
//! would be three events, three slots and three bookings for one container: those are refused
//! (`surrounding_whitespace`, `invisible_character`), as is a decomposed `"é"` next to a
//! precomposed one (`not_nfc`). The equipment number is normalised instead (ISO 6346: case,
//! spaces and dashes), so its surrounding spaces are kept out of the key by the normalisation.
//! Numbers are checked so that two different values never share a fingerprint ([`gate::ijson`]).
//!
//! **No reason quotes the body.** A reason names fields, positions, limits and code points, never
//! a value from the body: a body may carry the PIN in any field (`"terminal": "<the PIN>"`), and
//! reasons are logged. The person who books by hand gets the original body with the reason.
//!
//! An SQS body is always a string of Unicode characters, so "not UTF-8" reaches the gate either as
//! U+FFFD (decoded lossily upstream) or as an escape that is not a character (`"\ud800"`, a lone
//! surrogate), which the JSON reader rejects (`not_json`).
//!
//! (Over 600 lines: the strict parse, its table of limits and the tests of every limit are one
//! concern.)

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value};

use crate::iso6346::{EquipmentNumber, EquipmentNumberError};
use gate::ijson::NumberDefect;
use gate::strict_json::{from_str_strict, StrictJsonError};

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

/// Every way a body can be wrong. Each is permanent: the body is routed to the manual queue with
/// this reason and acknowledged, never retried. No variant quotes text from the body: the
/// messages name fields, positions, limits and code points (and quote the window only as the
/// gate re-rendered it from parsed timestamps), so a PIN in any field of a body never reaches a
/// log line through a reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RejectReason {
    /// The body is larger than [`MAX_BODY_BYTES`].
    #[error("body has {bytes} bytes, more than the limit of {limit}")]
    BodyTooLarge {
        /// The body's size in bytes.
        bytes: usize,
        /// The limit, [`MAX_BODY_BYTES`].
        limit: usize,
    },
    /// The body is not JSON, or not a JSON object.
    #[error("body is not a JSON object: {0}")]
    NotJson(String),
    /// An object in the body names a key twice: two readers could read two different bodies.
    /// The key is named (quoted) only when it is a field of the notification
    /// ([`NOTIFICATION_FIELDS`]); any other key is body text and is not quoted.
    #[error("body names a key twice: {0}")]
    DuplicateKey(String),
    /// A number's magnitude is above 2^53 - 1: not exact as a double, so not in the fingerprint
    /// (I-JSON, RFC 7493 section 2.2; [`gate::ijson`]).
    #[error(
        "the number at byte {offset} is beyond 2^53 - 1 in magnitude (RFC 7493): it cannot be \
         fingerprinted exactly"
    )]
    NumberOutOfRange {
        /// Byte offset of the number in the body.
        offset: usize,
    },
    /// A number holds more precision than the double it rounds to, so another value would share
    /// its fingerprint ([`gate::ijson`]).
    #[error(
        "the number at byte {offset} has more precision than an IEEE 754 double holds: it cannot \
         be fingerprinted exactly"
    )]
    NumberNotExact {
        /// Byte offset of the number in the body.
        offset: usize,
    },
    /// An identifier (`notificationId`, `terminal`) starts or ends with whitespace.
    #[error("field `{field}` starts or ends with whitespace")]
    SurroundingWhitespace {
        /// The field's name.
        field: &'static str,
    },
    /// An identifier holds a character that renders as nothing, or as a space but is not U+0020:
    /// Unicode `Default_Ignorable_Code_Point` (U+200B zero width space, U+FEFF, U+00AD, variation
    /// selectors, ...), format characters (bidi controls U+202A-U+202E, U+2066-U+2069, ...), and
    /// `White_Space` other than U+0020 (U+00A0, U+2028, U+3000, ...).
    #[error(
        "field `{field}` holds the invisible character U+{code_point:04X} at character {position}"
    )]
    InvisibleCharacter {
        /// The field's name.
        field: &'static str,
        /// The character's index (0-based).
        position: usize,
        /// The character's code point.
        code_point: u32,
    },
    /// An identifier is not in Unicode Normalization Form C (UAX #15): the same text could arrive
    /// composed and decomposed and make two event keys.
    #[error("field `{field}` is not in Unicode Normalization Form C")]
    NotNfc {
        /// The field's name.
        field: &'static str,
    },
    /// A field is longer than its limit.
    #[error("field `{field}` has {chars} characters, more than the limit of {limit}")]
    FieldTooLong {
        /// The field's name.
        field: &'static str,
        /// Its length in characters.
        chars: usize,
        /// The limit.
        limit: usize,
    },
    /// A field holds a control character (Unicode category `Cc`: NUL, tab, CR, LF, DEL, C1).
    #[error("field `{field}` holds a control character at character {position}")]
    ControlCharacter {
        /// The field's name.
        field: &'static str,
        /// The character's index (0-based).
        position: usize,
    },
    /// A field holds U+FFFD, the replacement character: the sender's bytes were not valid UTF-8
    /// and were replaced on the way, so the value is not what was sent.
    #[error(
        "field `{field}` holds U+FFFD at character {position}: the sender's bytes were not UTF-8"
    )]
    ReplacementCharacter {
        /// The field's name.
        field: &'static str,
        /// The character's index (0-based).
        position: usize,
    },
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
    /// The window ends more than [`MAX_WINDOW_AHEAD_DAYS`] days from now.
    #[error("window ends at {end}, more than {limit_days} days ahead")]
    WindowTooFarAhead {
        /// The end, RFC 3339.
        end: String,
        /// The limit, [`MAX_WINDOW_AHEAD_DAYS`].
        limit_days: i64,
    },
    /// The terminal is not one this integration books at (the value is not quoted: it is body
    /// text, and may be anything, the PIN included).
    #[error("field `terminal` is not a terminal this integration books at")]
    UnknownTerminal,
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

impl RejectReason {
    /// A short stable code for the reason, used in the manual queue's `detail` and in metrics:
    /// `body_too_large`, `not_json`, `duplicate_key`, `field_too_long`, `control_character`,
    /// `replacement_character`, `missing_field`, `empty_field`, `wrong_type`,
    /// `bad_equipment_number`, `bad_timestamp`, `window_not_ordered`, `window_ended`,
    /// `window_too_far_ahead`, `unknown_terminal`, `number_out_of_range`, `number_not_exact`,
    /// `surrounding_whitespace`, `invisible_character`, `not_nfc`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::BodyTooLarge { .. } => "body_too_large",
            Self::NotJson(_) => "not_json",
            Self::DuplicateKey(_) => "duplicate_key",
            Self::NumberOutOfRange { .. } => "number_out_of_range",
            Self::NumberNotExact { .. } => "number_not_exact",
            Self::SurroundingWhitespace { .. } => "surrounding_whitespace",
            Self::InvisibleCharacter { .. } => "invisible_character",
            Self::NotNfc { .. } => "not_nfc",
            Self::FieldTooLong { .. } => "field_too_long",
            Self::ControlCharacter { .. } => "control_character",
            Self::ReplacementCharacter { .. } => "replacement_character",
            Self::MissingField(_) => "missing_field",
            Self::EmptyField(_) => "empty_field",
            Self::WrongType { .. } => "wrong_type",
            Self::BadEquipmentNumber(_) => "bad_equipment_number",
            Self::BadTimestamp { .. } => "bad_timestamp",
            Self::WindowNotOrdered { .. } => "window_not_ordered",
            Self::WindowEnded { .. } => "window_ended",
            Self::WindowTooFarAhead { .. } => "window_too_far_ahead",
            Self::UnknownTerminal => "unknown_terminal",
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
            RejectReason::UnknownTerminal
        );
        let bad_time = serde_json::json!({"start": "yesterday", "end": "2025-06-09T08:00:00Z"});
        assert_eq!(
            parse_notification(&body(&[("preferred_window", bad_time)]), NOW, &t)
                .unwrap_err()
                .code(),
            "bad_timestamp"
        );
    }

    fn code_of(body: &str) -> &'static str {
        parse_notification(body, NOW, &terminals())
            .map(|_| "ok")
            .unwrap_or_else(|e| e.code())
    }

    #[test]
    fn limits_at_the_edge() {
        // Size: exactly the limit passes (padding in an extra field), one byte more does not.
        let base = body(&[("padding", Value::from(""))]);
        let pad = MAX_BODY_BYTES - base.len();
        let at_limit = body(&[("padding", Value::from("x".repeat(pad)))]);
        assert_eq!(at_limit.len(), MAX_BODY_BYTES);
        assert_eq!(code_of(&at_limit), "ok");
        let over = body(&[("padding", Value::from("x".repeat(pad + 1)))]);
        assert_eq!(
            parse_notification(&over, NOW, &terminals()).unwrap_err(),
            RejectReason::BodyTooLarge {
                bytes: MAX_BODY_BYTES + 1,
                limit: MAX_BODY_BYTES
            }
        );
        // Field lengths, in characters (not bytes).
        let id = "é".repeat(MAX_NOTIFICATION_ID_CHARS);
        assert_eq!(code_of(&body(&[("notificationId", Value::from(id))])), "ok");
        for (field, limit) in [
            ("notificationId", MAX_NOTIFICATION_ID_CHARS),
            ("pin", MAX_PIN_CHARS),
            ("terminal", MAX_TERMINAL_CHARS),
            ("equipment_number", MAX_EQUIPMENT_NUMBER_CHARS),
        ] {
            let long = Value::from("A".repeat(limit + 1));
            assert_eq!(
                parse_notification(&body(&[(field, long)]), NOW, &terminals()).unwrap_err(),
                RejectReason::FieldTooLong {
                    field,
                    chars: limit + 1,
                    limit
                },
                "{field}"
            );
        }
    }

    #[test]
    fn control_and_replacement_characters_are_refused() {
        for (field, value) in [
            ("notificationId", r"N-1\u0000"),
            ("pin", r"47\n11"),
            ("terminal", r"ECT-DELTA\r"),
            ("notificationId", r"N\u007f1"),
            ("pin", r"47\u009b11"),
        ] {
            let text = body(&[]).replacen(
                &format!("\"{field}\":"),
                &format!("\"{field}\":\"{value}\",\"x-{field}\":"),
                1,
            );
            let err = parse_notification(&text, NOW, &terminals()).unwrap_err();
            assert!(
                matches!(err, RejectReason::ControlCharacter { field: f, .. } if f == field),
                "{field} {value}: {err:?}"
            );
        }
        let err = parse_notification(
            &body(&[("notificationId", Value::from("PCS-\u{fffd}-1"))]),
            NOW,
            &terminals(),
        )
        .unwrap_err();
        assert_eq!(
            err,
            RejectReason::ReplacementCharacter {
                field: "notificationId",
                position: 4
            }
        );
        // A lone surrogate escape is not a character: not JSON.
        let lone = body(&[]).replace("\"N-1\"", "\"N-\\ud800\"");
        assert!(lone.contains("\\ud800"));
        assert_eq!(code_of(&lone), "not_json");
    }

    #[test]
    fn numbers_where_strings_belong() {
        for field in ["notificationId", "equipment_number", "terminal", "pin"] {
            assert_eq!(
                parse_notification(&body(&[(field, Value::from(12345))]), NOW, &terminals())
                    .unwrap_err(),
                RejectReason::WrongType {
                    field,
                    expected: "a string"
                }
            );
        }
        let numeric_window =
            serde_json::json!({"start": 1749456000, "end": "2025-06-09T10:00:00Z"});
        assert_eq!(
            code_of(&body(&[("preferred_window", numeric_window)])),
            "wrong_type"
        );
    }

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        let twice = body(&[]).replacen("\"pin\":", "\"pin\":\"1111\",\"pin\":", 1);
        assert_eq!(
            parse_notification(&twice, NOW, &terminals()).unwrap_err(),
            RejectReason::DuplicateKey("\"pin\"".into())
        );
        let nested = body(&[]).replacen("\"start\":", "\"start\":\"x\",\"start\":", 1);
        assert_eq!(code_of(&nested), "duplicate_key");
    }

    #[test]
    fn a_window_years_away_is_refused() {
        let far =
            serde_json::json!({"start": "2031-06-09T08:00:00Z", "end": "2031-06-09T10:00:00Z"});
        assert_eq!(
            parse_notification(&body(&[("preferred_window", far)]), NOW, &terminals()).unwrap_err(),
            RejectReason::WindowTooFarAhead {
                end: "2031-06-09T10:00:00Z".into(),
                limit_days: MAX_WINDOW_AHEAD_DAYS
            }
        );
        // Eleven months ahead is fine.
        let near =
            serde_json::json!({"start": "2026-05-09T08:00:00Z", "end": "2026-05-09T10:00:00Z"});
        assert_eq!(code_of(&body(&[("preferred_window", near)])), "ok");
    }

    #[test]
    fn no_reason_quotes_the_pin() {
        let pin = "PIN-XYZZY-7731";
        let mut reasons = Vec::new();
        for over in [
            vec![("pin", Value::from(format!("{pin}\n")))],
            vec![("pin", Value::from(format!("{pin}{}", "9".repeat(80))))],
            vec![("pin", Value::from(format!("{pin}\u{fffd}")))],
            vec![("pin", Value::from(pin)), ("terminal", Value::from("NOPE"))],
            vec![("pin", Value::from(pin)), ("terminal", Value::from(pin))],
            vec![
                ("pin", Value::from(pin)),
                ("notificationId", Value::from(format!("{pin} "))),
            ],
        ] {
            let text = body(&over);
            reasons.push(parse_notification(&text, NOW, &terminals()).unwrap_err());
        }
        let twice = body(&[("pin", Value::from(pin))]).replacen(
            '{',
            &format!("{{\"{pin}\":1,\"{pin}\":2,"),
            1,
        );
        reasons.push(parse_notification(&twice, NOW, &terminals()).unwrap_err());
        assert_eq!(
            reasons.last().map(RejectReason::code),
            Some("duplicate_key")
        );
        for r in reasons {
            assert!(!format!("{r} {r:?}").contains("XYZZY"), "{r:?}");
        }
    }
}
