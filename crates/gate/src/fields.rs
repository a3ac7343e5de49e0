//! Reading an event body strictly, field by field, each failure a typed [`Rejection`] that names
//! the field and quotes nothing of the body (a body may hold secrets; the detail reaches a log
//! line): what every integration's [`crate::Integration::parse`] does first.
//!
//! ```
//! use gate::fields::Fields;
//!
//! let f = Fields::parse(r#"{"job_id": "J-1", "n": 3}"#, 16 * 1024)?;
//! assert_eq!(f.text("job_id", 64)?, "J-1");
//! assert_eq!(f.integer("n", 1..=9)?, 3);
//! assert_eq!(f.integer("n", 4..=9).unwrap_err().code, "bad_field");
//! f.all_read()?;
//!
//! let g = Fields::parse(r#"{"job_id": "J-1", "extra": true}"#, 16 * 1024)?;
//! g.text("job_id", 64)?;
//! assert_eq!(g.all_read().unwrap_err().code, "unknown_field");
//! # Ok::<(), gate::Rejection>(())
//! ```
//!
//! | code | when |
//! | --- | --- |
//! | `body_too_large` | the body is over the integration's limit, bytes |
//! | `not_json` | not a JSON object, or a key repeated ([`crate::strict_json`]) |
//! | `unknown_field` | a field the integration did not read ([`Fields::all_read`], called last) |
//! | `missing_field` | a field it needs is absent |
//! | `bad_field` | a field of the wrong type, length or range |

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::ops::RangeInclusive;

use serde_json::{Map, Value};

use crate::integration::Rejection;

/// A body's top-level JSON object, read strictly ([`Fields::parse`]), and the names of the fields
/// read so far ([`Fields::all_read`]).
#[derive(Clone)]
pub struct Fields {
    map: Map<String, Value>,
    read: RefCell<BTreeSet<String>>,
}

/// Redacted: a body's values may be secrets. Only the field names are shown.
impl std::fmt::Debug for Fields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fields")
            .field("names", &self.map.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Fields {
    /// The JSON object `body`, at most `max_bytes` bytes.
    ///
    /// # Errors
    /// `body_too_large` over `max_bytes`; `not_json` if it is not a JSON object whose keys are
    /// unique.
    pub fn parse(body: &str, max_bytes: usize) -> Result<Self, Rejection> {
        if body.len() > max_bytes {
            let detail = format!("body of {} bytes, over {max_bytes}", body.len());
            return Err(Rejection::new("body_too_large", detail));
        }
        match crate::strict_json::from_str_strict(body) {
            Ok(Value::Object(map)) => Ok(Self {
                map,
                read: RefCell::default(),
            }),
            _ => Err(Rejection::new(
                "not_json",
                "body is not a JSON object with unique keys",
            )),
        }
    }

    /// Checks that the body holds no field but those read so far ([`Fields::value`] and the
    /// readers built on it): call it after the last reader, so a body with a
    /// field the integration does not take is rejected.
    ///
    /// # Errors
    /// `unknown_field`, naming the fields read (never the one found: it is the body's text).
    pub fn all_read(&self) -> Result<(), Rejection> {
        let read = self.read.borrow();
        match self.map.keys().all(|k| read.contains(k)) {
            true => Ok(()),
            false => Err(Rejection::new(
                "unknown_field",
                format!(
                    "a field other than {}",
                    read.iter()
                        .map(String::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }

    /// The field `name`, present; marked read ([`Fields::all_read`]).
    ///
    /// # Errors
    /// `missing_field`.
    pub fn value(&self, name: &str) -> Result<&Value, Rejection> {
        let value = self
            .map
            .get(name)
            .ok_or_else(|| Rejection::new("missing_field", format!("{name} missing")))?;
        self.read.borrow_mut().insert(name.to_string());
        Ok(value)
    }

    /// The field `name`: a string of 1 to `max` printable ASCII characters without spaces
    /// (`!` to `~`), as ids, codes and tokens are.
    ///
    /// # Errors
    /// `missing_field`, or `bad_field` for another type or length, a space or a character
    /// outside printable ASCII.
    pub fn text(&self, name: &str, max: usize) -> Result<&str, Rejection> {
        match self.value(name)?.as_str() {
            Some(t) if (1..=max).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_graphic()) => {
                Ok(t)
            }
            _ => Err(Self::bad(
                name,
                &format!("not 1 to {max} printable ASCII characters without spaces"),
            )),
        }
    }

    /// The field `name`: exactly `len` upper-case ASCII letters, as the alphabetic codes of ISO 4217
    /// (currencies, 3) and ISO 3166-1 (countries, 2 or 3) are written. The shape only: whether
    /// the code is assigned is the caller's (or its server's) to say.
    ///
    /// # Errors
    /// `missing_field`, or `bad_field`.
    pub fn letters(&self, name: &str, len: usize) -> Result<&str, Rejection> {
        match self.value(name)?.as_str() {
            Some(t) if t.len() == len && t.bytes().all(|b| b.is_ascii_uppercase()) => Ok(t),
            _ => Err(Self::bad(name, &format!("not {len} upper-case letters"))),
        }
    }

    /// The field `name`: an integer in `range` (written without fraction or exponent).
    ///
    /// # Errors
    /// `missing_field`, or `bad_field` for another type or a value outside `range`.
    pub fn integer(&self, name: &str, range: RangeInclusive<u64>) -> Result<u64, Rejection> {
        match self.value(name)?.as_u64() {
            Some(n) if range.contains(&n) => Ok(n),
            _ => Err(Self::bad(
                name,
                &format!("not an integer from {} to {}", range.start(), range.end()),
            )),
        }
    }

    /// The field `name`: a JSON object.
    ///
    /// # Errors
    /// `missing_field`, or `bad_field` for another type.
    pub fn object(&self, name: &str) -> Result<&Value, Rejection> {
        match self.value(name)? {
            v @ Value::Object(_) => Ok(v),
            _ => Err(Self::bad(name, "not an object")),
        }
    }

    /// `bad_field`: the field `name` is `what` (e.g. "not an ISO 4217 code"); for a check of the
    /// integration's own.
    pub fn bad(name: &str, what: &str) -> Rejection {
        Rejection::new("bad_field", format!("{name}: {what}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: Result<impl std::fmt::Debug, Rejection>) -> &'static str {
        r.unwrap_err().code
    }

    #[test]
    fn each_failure_has_its_code_and_quotes_nothing() {
        assert_eq!(code(Fields::parse("{}", 1)), "body_too_large");
        for body in ["{x", "[1]", "\"s\"", r#"{"a":1,"a":2}"#] {
            assert_eq!(code(Fields::parse(body, 100)), "not_json", "{body}");
        }
        let f = Fields::parse(
            r#"{"id":"A-1","n":7,"f":7.5,"s":"has space","o":{},"secret_name":"x"}"#,
            1000,
        )
        .unwrap();
        assert_eq!(f.text("id", 3).unwrap(), "A-1");
        assert_eq!(f.integer("n", 1..=7).unwrap(), 7);
        let unknown = f.all_read().unwrap_err();
        assert_eq!(unknown.code, "unknown_field");
        assert_eq!(unknown.detail, "a field other than id, n");
        assert!(
            !unknown.detail.contains("secret_name"),
            "{}",
            unknown.detail
        );
        assert_eq!(code(f.text("id", 2)), "bad_field");
        assert_eq!(code(f.text("s", 64)), "bad_field");
        assert_eq!(code(f.text("n", 64)), "bad_field");
        assert_eq!(code(f.text("absent", 64)), "missing_field");
        assert_eq!(f.integer("n", 1..=7).unwrap(), 7);
        assert_eq!(code(f.integer("n", 8..=9)), "bad_field");
        assert_eq!(code(f.integer("f", 1..=9)), "bad_field");
        assert_eq!(code(f.integer("id", 1..=9)), "bad_field");
        assert!(f.object("o").is_ok());
        let c = Fields::parse(r#"{"a":"EUR","b":"eur","c":"EURO","d":3}"#, 100).unwrap();
        assert_eq!(c.letters("a", 3).unwrap(), "EUR");
        for name in ["b", "c", "d"] {
            assert_eq!(code(c.letters(name, 3)), "bad_field", "{name}");
        }
        assert_eq!(code(f.object("n")), "bad_field");
        for name in ["s", "secret_name"] {
            assert_eq!(code(f.all_read()), "unknown_field");
            let _ = f.value(name);
        }
        assert!(f.all_read().is_ok(), "every field read");
        let bad = Fields::bad("currency", "not an ISO 4217 code");
        assert_eq!(bad.detail, "currency: not an ISO 4217 code");
        assert!(!format!("{f:?}").contains("A-1"));
    }
}
