//! Every way a notification body can be wrong ([`RejectReason`]), each a permanent, typed
//! rejection with a stable code; none quotes text from the body.

use crate::iso6346::EquipmentNumberError;

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
