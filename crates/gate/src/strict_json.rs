//! A strict JSON reader for bodies that come from outside: the same grammar as `serde_json`, but
//! an object that names one key twice is an error instead of silently keeping the last value.
//!
//! `{"pin": "1111", "pin": "2222"}` is ambiguous: `serde_json::Value` keeps `"2222"`, another
//! reader (the server's, a person's) may take `"1111"`. A body that two readers can read two ways
//! must never be claimed, so the gate rejects it (see `RejectReason::DuplicateKey`).
//!
//! Everything else follows `serde_json`: RFC 8259 syntax, strings must be valid Unicode (a lone
//! surrogate escape such as `"\ud800"` is a syntax error, reported as `lone surrogate \ud800 ...`
//! rather than `serde_json`'s "unexpected end of hex escape"), nesting is limited to 128 levels.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Longest key name quoted in a [`StrictJsonError::DuplicateKey`] (in characters).
const KEY_QUOTE_MAX: usize = 64;

/// Why a body is not strict JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrictJsonError {
    /// An object names this key more than once (the key is quoted with Rust escapes, shortened
    /// to 64 characters).
    #[error("duplicate key {0}")]
    DuplicateKey(String),
    /// Not JSON at all (the parser's message, which never quotes the input; for a `\u` escape of
    /// a lone UTF-16 surrogate, `lone surrogate \uXXXX at line L column C: ...`, quoting only
    /// the escape).
    #[error("{0}")]
    Syntax(String),
}

/// Parses `text` as one JSON value, rejecting duplicate object keys at any depth and trailing
/// characters.
///
/// # Errors
/// [`StrictJsonError::DuplicateKey`] for the first repeated key, [`StrictJsonError::Syntax`] for
/// anything `serde_json` rejects.
pub fn from_str_strict(text: &str) -> Result<Value, StrictJsonError> {
    let duplicate = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = StrictValue {
        duplicate: &duplicate,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    match parsed {
        Ok(v) => Ok(v),
        Err(e) => match duplicate.into_inner() {
            Some(key) => Err(StrictJsonError::DuplicateKey(key)),
            None => Err(StrictJsonError::Syntax(
                lone_surrogate_message(text, &e).unwrap_or_else(|| e.to_string()),
            )),
        },
    }
}

/// The byte offset of `serde_json`'s error position (1-based line, byte column) in `text`.
fn error_offset(text: &str, e: &serde_json::Error) -> usize {
    let line_start: usize = text
        .split_inclusive('\n')
        .take(e.line().saturating_sub(1))
        .map(str::len)
        .sum();
    line_start.saturating_add(e.column()).min(text.len())
}

/// A `\u` escape of a lone UTF-16 surrogate (RFC 8259 §8.2: a high surrogate `D800`-`DBFF`
/// not followed by an escaped low one `DC00`-`DFFF`, or a low one alone) found in a string of
/// `text`: its byte offset and the escape as written (`\ud800`).
fn first_lone_surrogate(text: &str) -> Option<(usize, &str)> {
    let bytes = text.as_bytes();
    let hex_escape = |at: usize| -> Option<u16> {
        let digits = text.get(at + 2..at + 6)?;
        (bytes.get(at) == Some(&b'\\') && bytes.get(at + 1) == Some(&b'u'))
            .then(|| u16::from_str_radix(digits, 16).ok())
            .flatten()
    };
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        match (in_string, bytes[i]) {
            (false, b'"') => in_string = true,
            (true, b'"') => in_string = false,
            (true, b'\\') => {
                if let Some(unit) = hex_escape(i) {
                    let lone = match unit {
                        0xD800..=0xDBFF => !matches!(hex_escape(i + 6), Some(0xDC00..=0xDFFF)),
                        0xDC00..=0xDFFF => true,
                        _ => false,
                    };
                    if lone {
                        return Some((i, &text[i..i + 6]));
                    }
                    // A valid pair: skip both escapes.
                    i += if (0xD800..=0xDBFF).contains(&unit) {
                        12
                    } else {
                        6
                    };
                    continue;
                }
                i += 2;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// `lone surrogate \ud800 at line 1 column 9: ...` when the parser stopped at a lone surrogate
/// escape; `None` for any other syntax error. The parser reads left to right and a lone
/// surrogate always stops it, so the first one at or before its error position is the cause.
fn lone_surrogate_message(text: &str, e: &serde_json::Error) -> Option<String> {
    let (offset, escape) = first_lone_surrogate(text)?;
    if offset > error_offset(text, e) {
        return None;
    }
    let line = text[..offset].matches('\n').count() + 1;
    let column = offset - text[..offset].rfind('\n').map_or(0, |n| n + 1) + 1;
    Some(format!(
        "lone surrogate {escape} at line {line} column {column}: a \\u escape of half a UTF-16 \
         surrogate pair is not a character (RFC 8259 section 8.2)"
    ))
}

fn quote_key(key: &str) -> String {
    let short: String = key.chars().take(KEY_QUOTE_MAX).collect();
    if short.len() < key.len() {
        format!("{short:?}…")
    } else {
        format!("{short:?}")
    }
}

/// Builds a `serde_json::Value`, remembering the first duplicate key in `duplicate`.
#[derive(Clone, Copy)]
struct StrictValue<'a> {
    duplicate: &'a RefCell<Option<String>>,
}

impl<'de> DeserializeSeed<'de> for StrictValue<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                let quoted = quote_key(&key);
                *self.duplicate.borrow_mut() = Some(quoted.clone());
                return Err(de::Error::custom(format_args!("duplicate key {quoted}")));
            }
            let value = map.next_value_seed(self)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_serde_json_reads() {
        for text in [
            r#"{"a":1,"b":[true,null,-2,3.5,"x"],"c":{"d":{}}}"#,
            "[]",
            "\"\\u00e9\"",
            "18446744073709551615",
            "-9223372036854775808",
            "1e400",
        ] {
            let strict = from_str_strict(text);
            let lax: Result<Value, _> = serde_json::from_str(text);
            match (strict, lax) {
                (Ok(s), Ok(l)) => assert_eq!(s, l, "{text}"),
                (Err(_), Err(_)) => {}
                (s, l) => panic!("{text}: strict {s:?}, serde_json {l:?}"),
            }
        }
    }

    #[test]
    fn a_repeated_key_is_an_error_at_any_depth() {
        assert_eq!(
            from_str_strict(r#"{"pin":"1","pin":"2"}"#),
            Err(StrictJsonError::DuplicateKey("\"pin\"".into()))
        );
        assert_eq!(
            from_str_strict(r#"{"w":{"start":"a","end":"b","start":"c"}}"#),
            Err(StrictJsonError::DuplicateKey("\"start\"".into()))
        );
        assert_eq!(
            from_str_strict(r#"[{"a":1},{"a":1,"a":1}]"#),
            Err(StrictJsonError::DuplicateKey("\"a\"".into()))
        );
        // The same key in two different objects is fine.
        assert!(from_str_strict(r#"{"a":{"a":1},"b":{"a":2}}"#).is_ok());
        // An escaped spelling of the same key is the same key.
        assert_eq!(
            from_str_strict(r#"{"pin":"1","p\u0069n":"2"}"#),
            Err(StrictJsonError::DuplicateKey("\"pin\"".into()))
        );
    }

    #[test]
    fn a_long_or_odd_key_is_quoted_short_and_escaped() {
        let key = format!("{}\n", "k".repeat(200));
        let text = format!(r#"{{"{0}":1,"{0}":2}}"#, key.replace('\n', "\\n"));
        let Err(StrictJsonError::DuplicateKey(quoted)) = from_str_strict(&text) else {
            panic!("expected a duplicate key");
        };
        assert!(quoted.chars().count() <= KEY_QUOTE_MAX + 3, "{quoted}");
        assert!(!quoted.contains('\n'));
    }

    /// A lone surrogate is named as such, with its position, never as serde_json's "unexpected
    /// end of hex escape"; a valid pair and other escapes are untouched.
    #[test]
    fn a_lone_surrogate_is_reported_as_such() {
        let cases = [
            (r#""\ud800""#, r"\ud800", 1, 2),
            (r#"{"pin":"1\udfff"}"#, r"\udfff", 1, 10),
            (r#"{"a":"\ud800\u0041"}"#, r"\ud800", 1, 7),
            (r#"{"a":"\uD83D\uDE00","b":"\uDBFF"}"#, r"\uDBFF", 1, 26),
            ("{\n  \"a\": \"x\\ud800\"\n}", r"\ud800", 2, 10),
        ];
        for (text, escape, line, column) in cases {
            let Err(StrictJsonError::Syntax(message)) = from_str_strict(text) else {
                panic!("{text}: expected a syntax error");
            };
            assert_eq!(
                message,
                format!(
                    "lone surrogate {escape} at line {line} column {column}: a \\u escape of \
                     half a UTF-16 surrogate pair is not a character (RFC 8259 section 8.2)"
                ),
                "{text}"
            );
        }
        // A surrogate pair is one character; an escaped backslash before `u` is no escape.
        assert_eq!(
            from_str_strict(r#"["\ud83d\ude00","\\ud800"]"#),
            Ok(serde_json::json!(["\u{1f600}", "\\ud800"]))
        );
        // An earlier, other error is reported as it is.
        let Err(StrictJsonError::Syntax(message)) = from_str_strict(r#"{"a":01,"b":"\ud800"}"#)
        else {
            panic!("expected a syntax error");
        };
        assert!(!message.contains("surrogate"), "{message}");
    }

    #[test]
    fn syntax_errors_and_lone_surrogates_are_syntax_errors() {
        for text in [
            "{bad",
            "{\"a\":1} x",
            "\"\\ud800\"",
            "\"\\udc00\"",
            "",
            "{\"a\":01}",
        ] {
            assert!(
                matches!(from_str_strict(text), Err(StrictJsonError::Syntax(_))),
                "{text:?}"
            );
        }
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(matches!(
            from_str_strict(&deep),
            Err(StrictJsonError::Syntax(_))
        ));
    }
}
