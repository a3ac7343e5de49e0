//! A strict JSON reader for bodies that come from outside: the same grammar as `serde_json`, but
//! an object that names one key twice is an error instead of silently keeping the last value.
//!
//! `{"pin": "1111", "pin": "2222"}` is ambiguous: `serde_json::Value` keeps `"2222"`, another
//! reader (the terminal's, a person's) may take `"1111"`. A body that two readers can read two ways
//! must never be claimed, so the gate rejects it (see `RejectReason::DuplicateKey`).
//!
//! Everything else follows `serde_json`: RFC 8259 syntax, strings must be valid Unicode (a lone
//! surrogate escape such as `"\ud800"` is a syntax error), nesting is limited to 128 levels.

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
    /// Not JSON at all (the parser's message, which never quotes the input).
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
            None => Err(StrictJsonError::Syntax(e.to_string())),
        },
    }
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
