//! The `Idempotency-Key` HTTP contract, once, for every integration whose server honours the IETF
//! draft `draft-ietf-httpapi-idempotency-key-header` (-07, October 2025):
//!
//! * the header ([`HEADER`], [`header_value`], [`parse_header_value`]): the key as an RFC 8941
//!   Structured Field string, `Idempotency-Key: "K"` (draft -07, section 2.1);
//! * the classification of an answer to a **call** under a key into the gate's
//!   [`CallOutcome`](crate::effect::CallOutcome) and of an answer to a **lookup** by key into
//!   its [`LookupOutcome`](crate::effect::LookupOutcome), for every status and every failed
//!   request, with nothing left to a default (the tables: [`call_rule`], [`classify_lookup`]);
//! * the summary of an answer in the gate's own words (status, content type, length and a keyed
//!   digest), never a character of the server's text ([`describe`]);
//! * the reqwest side (a client that follows no redirect, `gate_http::call`) is `gate-http`.
//!
//! The classification is pure (status, problem type, body bytes in; outcome out): an
//! integration's HTTP client, the deterministic simulation (its server simulator,
//! `sim/src/server.rs`, is the reference server) and the test kit's in-process server use the
//! same table. What only an integration knows (where its server puts the effect id, what makes
//! an id unusable, which secrets its answers must be scrubbed of) it supplies through
//! [`AnswerReader`].

mod classify;
mod id_format;
mod retry_after;
mod summary;

pub use classify::{
    call_rule, classify_call, classify_call_failure, classify_lookup, classify_lookup_failure,
    effect_id_defect, problem_type, Answer, AnswerReader, CallClass, IdDefect, JsonIdAt,
    RequestFailure, Rule, MAX_EFFECT_ID_CHARS, PROBLEM_IDEMPOTENCY_KEY_IN_FLIGHT,
    PROBLEM_IDEMPOTENCY_MISMATCH,
};
pub use id_format::{IdFormat, IdFormatError, DEFAULT_ID_MAX_CHARS, DEFAULT_ID_PATTERN};
pub use retry_after::parse_retry_after;
pub use summary::{answer_digest, describe};

/// The header's name (draft -07, section 2).
pub const HEADER: &str = "Idempotency-Key";

/// Longest key [`header_value`] renders, in characters: RFC 8941 (section 3.3.3) asks every parser
/// to support strings of at least 1,024 characters, so a longer key might not be read whole by a
/// server that honours the draft. An operation key of the gate is 64 hex characters.
pub(crate) const MAX_KEY_CHARS: usize = 1024;

/// Why a key cannot be sent as an `Idempotency-Key`. The messages never quote the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyHeaderError {
    /// The key is empty (the draft gives an empty key no meaning; the simulator answers `400`).
    #[error("the idempotency key is empty")]
    Empty,
    /// Longer than `MAX_KEY_CHARS`.
    #[error("the idempotency key has {0} characters, more than the {MAX_KEY_CHARS} every Structured Field parser reads")]
    TooLong(usize),
    /// A character an RFC 8941 string cannot carry (only printable ASCII, `0x20..=0x7E`), at this
    /// byte offset.
    #[error("the idempotency key holds a character a Structured Field string cannot carry (not printable ASCII) at byte {0}")]
    NotPrintable(usize),
    /// A header value that is not one RFC 8941 string (only [`parse_header_value`]).
    #[error("the Idempotency-Key value is not one Structured Field string")]
    NotAString,
}

/// The `Idempotency-Key` header value for `key`: an RFC 8941 sf-string (section 3.3.3), `"` then
/// the key with `"` and `\` escaped by a `\`, then `"`. `abc` gives `"abc"`.
///
/// # Errors
/// [`KeyHeaderError`] for a key an sf-string cannot carry (empty, longer than
/// `MAX_KEY_CHARS`, or holding a byte outside printable ASCII `0x20..=0x7E`): such a key is
/// refused, never altered, since a server would then hold another key than the record.
pub fn header_value(key: &str) -> Result<String, KeyHeaderError> {
    if key.is_empty() {
        return Err(KeyHeaderError::Empty);
    }
    if let Some(at) = key.bytes().position(|b| !(0x20..=0x7E).contains(&b)) {
        return Err(KeyHeaderError::NotPrintable(at));
    }
    if key.len() > MAX_KEY_CHARS {
        return Err(KeyHeaderError::TooLong(key.len()));
    }
    let mut out = String::with_capacity(key.len() + 2);
    out.push('"');
    for c in key.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Ok(out)
}

/// The key in an `Idempotency-Key` header value, the inverse of [`header_value`]: one RFC 8941
/// sf-string (leading and trailing spaces discarded, as RFC 8941 section 4.2 parses a field),
/// with its `\"` and `\\` escapes undone. For a server (the test kit's) that reads the header
/// strictly.
///
/// # Errors
/// [`KeyHeaderError::NotAString`] when the value is not exactly one sf-string (no quotes, a
/// backslash before anything but `"` or `\`, text after the closing quote), and the errors of
/// [`header_value`] for the key it holds.
pub fn parse_header_value(raw: &str) -> Result<String, KeyHeaderError> {
    let inner = raw
        .trim_matches(' ')
        .strip_prefix('"')
        .ok_or(KeyHeaderError::NotAString)?;
    let mut key = String::with_capacity(inner.len());
    let mut chars = inner.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, e @ ('"' | '\\'))) => key.push(e),
                _ => return Err(KeyHeaderError::NotAString),
            },
            '"' if at + 1 == inner.len() => {
                header_value(&key)?;
                return Ok(key);
            }
            '"' => return Err(KeyHeaderError::NotAString),
            c if (' '..='~').contains(&c) => key.push(c),
            _ => return Err(KeyHeaderError::NotPrintable(at + 1)),
        }
    }
    Err(KeyHeaderError::NotAString)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_rendered_as_a_structured_field_string() {
        assert_eq!(header_value("abc").as_deref(), Ok("\"abc\""));
        // An operation key of the gate: 64 lowercase hex characters, as they are.
        let op_key = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        assert_eq!(header_value(op_key), Ok(format!("\"{op_key}\"")));
        // RFC 8941 3.3.3: DQUOTE and backslash escaped; space and the rest of printable ASCII as is.
        assert_eq!(header_value(r#"a"b\c d"#).as_deref(), Ok(r#""a\"b\\c d""#));
        assert_eq!(header_value("~!#").as_deref(), Ok("\"~!#\""));
    }

    #[test]
    fn a_key_a_string_cannot_carry_is_refused_not_altered() {
        assert_eq!(header_value(""), Err(KeyHeaderError::Empty));
        assert_eq!(header_value("ab\ncd"), Err(KeyHeaderError::NotPrintable(2)));
        assert_eq!(header_value("\u{7f}"), Err(KeyHeaderError::NotPrintable(0)));
        assert_eq!(
            header_value("k\u{e9}"),
            Err(KeyHeaderError::NotPrintable(1))
        );
        assert_eq!(header_value("\t"), Err(KeyHeaderError::NotPrintable(0)));
        assert_eq!(
            header_value(&"k".repeat(MAX_KEY_CHARS + 1)),
            Err(KeyHeaderError::TooLong(MAX_KEY_CHARS + 1))
        );
        assert!(header_value(&"k".repeat(MAX_KEY_CHARS)).is_ok());
        // The message names the position, never the key.
        let secretish = "PLUGH\u{1}";
        let err = header_value(secretish).unwrap_err().to_string();
        assert!(!err.contains("PLUGH"), "{err}");
    }

    #[test]
    fn a_header_value_parses_back_to_its_key() {
        for key in ["abc", r#"a"b\c d"#, "~", &"k".repeat(MAX_KEY_CHARS)] {
            let value = header_value(key).unwrap();
            assert_eq!(parse_header_value(&value).as_deref(), Ok(key));
        }
        assert_eq!(parse_header_value("  \"k\"  ").as_deref(), Ok("k"));
        for bad in [
            "k", "\"k", "\"k\"x", "\"a\"b\"", r#""a\b""#, "\"\\\"", "'k'",
        ] {
            assert_eq!(
                parse_header_value(bad),
                Err(KeyHeaderError::NotAString),
                "{bad:?}"
            );
        }
        assert_eq!(parse_header_value("\"\""), Err(KeyHeaderError::Empty));
        assert_eq!(
            parse_header_value("\"a\u{e9}\""),
            Err(KeyHeaderError::NotPrintable(2))
        );
    }
}
