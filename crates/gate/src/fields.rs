//! Reading an event body strictly, field by field, each failure a typed [`Rejection`] that names
//! the field and quotes nothing of the body (a body may hold secrets; the detail reaches a log
//! line): what every integration's [`crate::Integration::parse`] does first.
//!
//! Arrays ([`Fields::array`], [`Fields::texts`], [`Fields::decimals`], [`Fields::objects`]: each
//! element of an array of objects read with these same readers) and exact decimal numbers
//! ([`Fields::decimal`]: a [`Decimal`] taken from the literal as written, never a double).

mod decimal;
mod raw;

pub use decimal::Decimal;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;

use serde_json::{Map, Value};

use crate::integration::Rejection;

/// A body's top-level JSON object, read strictly ([`Fields::parse`]), and the names of the fields
/// read so far ([`Fields::all_read`]).
///
/// ```
/// use gate::fields::Fields;
///
/// let f = Fields::parse(r#"{"job_id": "J-1", "n": 3}"#, 16 * 1024)?;
/// assert_eq!(f.text("job_id", 64)?, "J-1");
/// assert_eq!(f.integer("n", 1..=9)?, 3);
/// assert_eq!(f.integer("n", 4..=9).unwrap_err().code, "bad_field");
/// f.all_read()?;
///
/// let g = Fields::parse(r#"{"job_id": "J-1", "extra": true}"#, 16 * 1024)?;
/// g.text("job_id", 64)?;
/// assert_eq!(g.all_read().unwrap_err().code, "unknown_field");
/// # Ok::<(), gate::Rejection>(())
/// ```
///
/// | code | when |
/// | --- | --- |
/// | `body_too_large` | the body is over the integration's limit, bytes |
/// | `not_json` | not a JSON object, or a key repeated ([`crate::strict_json`]) |
/// | `unknown_field` | a field the integration did not read ([`Fields::all_read`], called last) |
/// | `missing_field` | a field it needs is absent |
/// | `bad_field` | a field of the wrong type, length or range (an array's element named `name[i]`) |
#[derive(Clone)]
pub struct Fields {
    map: Map<String, Value>,
    /// Each member's text as written (a decimal is read from it).
    raw: BTreeMap<String, String>,
    /// Put before a field's name in a rejection: `""`, or `"lines[2]."` for an array's element.
    prefix: String,
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
            Ok(Value::Object(map)) => Self::of_object(map, body, String::new()).ok_or_else(|| {
                Rejection::new("not_json", "body is not a JSON object with unique keys")
            }),
            _ => Err(Rejection::new(
                "not_json",
                "body is not a JSON object with unique keys",
            )),
        }
    }

    /// The object `map` whose text is `text`, its fields named after `prefix`; `None` if the
    /// text's members cannot be found (never for text the strict reader accepted).
    fn of_object(map: Map<String, Value>, text: &str, prefix: String) -> Option<Self> {
        let raw = raw::members(text)?
            .into_iter()
            .map(|(k, v)| (k, v.to_string()))
            .collect();
        Some(Self {
            map,
            raw,
            prefix,
            read: RefCell::default(),
        })
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
        let value = self.map.get(name).ok_or_else(|| {
            Rejection::new("missing_field", format!("{}{name} missing", self.prefix))
        })?;
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
            _ => Err(self.bad_field(
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
            _ => Err(self.bad_field(name, &format!("not {len} upper-case letters"))),
        }
    }

    /// The field `name`: an integer in `range` (written without fraction or exponent).
    ///
    /// # Errors
    /// `missing_field`, or `bad_field` for another type or a value outside `range`.
    pub fn integer(&self, name: &str, range: RangeInclusive<u64>) -> Result<u64, Rejection> {
        match self.value(name)?.as_u64() {
            Some(n) if range.contains(&n) => Ok(n),
            _ => Err(self.bad_field(
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
            _ => Err(self.bad_field(name, "not an object")),
        }
    }

    /// `bad_field`: the field `name` is `what` (e.g. "not an ISO 4217 code"); for a check of the
    /// integration's own.
    pub fn bad(name: &str, what: &str) -> Rejection {
        Rejection::new("bad_field", format!("{name}: {what}"))
    }

    /// [`Fields::bad`] with the field named as this object names it (`lines[2].amount` in an
    /// array's element).
    fn bad_field(&self, name: &str, what: &str) -> Rejection {
        Self::bad(&format!("{}{name}", self.prefix), what)
    }

    /// The field `name`: an exact decimal number of at most `max_scale` decimals (trailing
    /// zeros past it dropped: `12.300` is `12.30` at 2), read from the literal as written. A
    /// number a double does not hold exactly is refused too (over 2^53 - 1, or more digits
    /// than a double keeps: RFC 7493 section 2.2, [`crate::ijson`]), since the fingerprint
    /// writes every number as a double (RFC 8785) and two such amounts would look the same.
    ///
    /// # Errors
    /// `missing_field`, or `bad_field` for another type, a number not exact as a double, more
    /// decimals than `max_scale` or a value past `i64` units.
    pub fn decimal(&self, name: &str, max_scale: u32) -> Result<Decimal, Rejection> {
        let value = self.value(name)?;
        let literal = self.raw.get(name).map(String::as_str).unwrap_or_default();
        self.decimal_of(value, literal, max_scale)
            .map_err(|what| self.bad_field(name, &what))
    }

    /// The field `name`: a JSON array of `len` elements (a range of counts), as they are.
    ///
    /// # Errors
    /// `missing_field`, or `bad_field` for another type or count.
    pub fn array(&self, name: &str, len: RangeInclusive<usize>) -> Result<&[Value], Rejection> {
        match self.value(name)? {
            Value::Array(items) if len.contains(&items.len()) => Ok(items),
            _ => Err(self.bad_field(
                name,
                &format!("not an array of {} to {} elements", len.start(), len.end()),
            )),
        }
    }

    /// The field `name`: an array of `len` texts, each as [`Fields::text`] reads one (1 to
    /// `max` printable ASCII characters without spaces).
    ///
    /// # Errors
    /// As [`Fields::array`]; `bad_field` naming the first element `name[i]` that is not such a
    /// text.
    pub fn texts(
        &self,
        name: &str,
        len: RangeInclusive<usize>,
        max: usize,
    ) -> Result<Vec<&str>, Rejection> {
        let items = self.array(name, len)?;
        let what = format!("not 1 to {max} printable ASCII characters without spaces");
        items
            .iter()
            .enumerate()
            .map(|(i, item)| match item.as_str() {
                Some(t)
                    if (1..=max).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_graphic()) =>
                {
                    Ok(t)
                }
                _ => Err(self.bad_field(&format!("{name}[{i}]"), &what)),
            })
            .collect()
    }

    /// The field `name`: an array of `len` exact decimals, each as [`Fields::decimal`] reads
    /// one.
    ///
    /// # Errors
    /// As [`Fields::array`]; `bad_field` naming the first element `name[i]` that is not such a
    /// decimal.
    pub fn decimals(
        &self,
        name: &str,
        len: RangeInclusive<usize>,
        max_scale: u32,
    ) -> Result<Vec<Decimal>, Rejection> {
        let items = self.array(name, len)?;
        let literals = self.element_texts(name, items.len())?;
        items
            .iter()
            .zip(literals)
            .enumerate()
            .map(|(i, (item, literal))| {
                self.decimal_of(item, literal, max_scale)
                    .map_err(|what| self.bad_field(&format!("{name}[{i}]"), &what))
            })
            .collect()
    }

    /// The field `name`: an array of `len` JSON objects, each read as a [`Fields`] of its own
    /// (its rejections name `name[i].field`). The caller reads each element and calls its
    /// [`Fields::all_read`], as for the body.
    ///
    /// # Errors
    /// As [`Fields::array`]; `bad_field` naming the first element `name[i]` that is not an
    /// object.
    pub fn objects(
        &self,
        name: &str,
        len: RangeInclusive<usize>,
    ) -> Result<Vec<Fields>, Rejection> {
        let items = self.array(name, len)?;
        let texts = self.element_texts(name, items.len())?;
        items
            .iter()
            .zip(texts)
            .enumerate()
            .map(|(i, (item, text))| {
                let element = format!("{name}[{i}]");
                match item {
                    Value::Object(map) => {
                        Self::of_object(map.clone(), text, format!("{}{element}.", self.prefix))
                            .ok_or_else(|| self.bad_field(&element, "not an object"))
                    }
                    _ => Err(self.bad_field(&element, "not an object")),
                }
            })
            .collect()
    }

    /// The texts of the `count` elements of the array `name` as written.
    fn element_texts(&self, name: &str, count: usize) -> Result<Vec<&str>, Rejection> {
        self.raw
            .get(name)
            .and_then(|text| raw::elements(text))
            .filter(|texts| texts.len() == count)
            .ok_or_else(|| self.bad_field(name, "not an array"))
    }

    /// `value` (written as `literal`) as an exact decimal of at most `max_scale` decimals, or
    /// what it is not.
    fn decimal_of(&self, value: &Value, literal: &str, max_scale: u32) -> Result<Decimal, String> {
        if !value.is_number() {
            return Err("not a number".into());
        }
        if crate::ijson::check_numbers(literal).is_err() {
            return Err(
                "not a number a double holds exactly (RFC 7493: at most 2^53 - 1, no more \
                 digits than a double keeps)"
                    .into(),
            );
        }
        let mut d = Decimal::parse_literal(literal.trim())
            .ok_or_else(|| format!("not a decimal of at most {max_scale} decimals"))?;
        while d.scale() > max_scale && d.units() % 10 == 0 {
            d = Decimal::new(d.units() / 10, d.scale() - 1);
        }
        if d.scale() > max_scale {
            return Err(format!("more than {max_scale} decimals"));
        }
        Ok(d)
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

    #[test]
    fn decimals_are_read_as_written_and_refused_with_their_codes() {
        let f = Fields::parse(
            r#"{"amount": 12.30, "fee": 2.5E1, "tiny": 0.001, "big": 9007199254740993,
               "blurred": 0.10000000000000001, "text": "12.30", "long": 1.2300,
               "neg": -0.5, "whole": 7}"#,
            1000,
        )
        .unwrap();
        let amount = f.decimal("amount", 2).unwrap();
        assert_eq!((amount.units(), amount.scale()), (1230, 2));
        assert_eq!(amount.to_string(), "12.30");
        assert_eq!(f.decimal("fee", 2).unwrap().units_at(2), Some(2500));
        assert_eq!(f.decimal("long", 2).unwrap(), Decimal::new(123, 2));
        assert_eq!(f.decimal("neg", 2).unwrap(), Decimal::new(-5, 1));
        assert_eq!(f.decimal("whole", 0).unwrap(), Decimal::new(7, 0));
        for (name, scale) in [("tiny", 2), ("big", 2), ("blurred", 2), ("text", 2)] {
            let r = f.decimal(name, scale).unwrap_err();
            assert_eq!(r.code, "bad_field", "{name}");
            assert!(r.detail.starts_with(&format!("{name}: ")), "{}", r.detail);
            assert!(!r.detail.contains("12.30"), "quotes nothing: {}", r.detail);
        }
        assert_eq!(code(f.decimal("absent", 2)), "missing_field");
    }

    #[test]
    fn arrays_are_read_element_by_element_each_failure_named() {
        let f = Fields::parse(
            r#"{"tags": ["A-1", "B-2"], "amounts": [1.5, 2, 0.25],
               "lines": [{"sku": "S-1", "qty": 2, "price": 9.99}, {"sku": "S-2", "qty": 1, "price": 0.5}],
               "bad_tags": ["ok", "secret value"], "bad_amounts": [1, 0.125], "mixed": [{"sku": "S"}, 3],
               "empty": []}"#,
            4000,
        )
        .unwrap();
        assert_eq!(f.texts("tags", 1..=5, 8).unwrap(), ["A-1", "B-2"]);
        assert_eq!(
            f.decimals("amounts", 1..=5, 2).unwrap(),
            [Decimal::new(15, 1), Decimal::new(2, 0), Decimal::new(25, 2)]
        );
        let lines = f.objects("lines", 1..=10).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].text("sku", 8).unwrap(), "S-1");
        assert_eq!(lines[0].integer("qty", 1..=99).unwrap(), 2);
        assert_eq!(lines[0].decimal("price", 2).unwrap(), Decimal::new(999, 2));
        lines[0].all_read().unwrap();
        // An element's rejections name the element.
        let missing = lines[1].text("colour", 8).unwrap_err();
        assert_eq!(
            (missing.code, missing.detail.as_str()),
            ("missing_field", "lines[1].colour missing")
        );
        let bad = lines[1].decimal("price", 0).unwrap_err();
        assert_eq!(bad.detail, "lines[1].price: more than 0 decimals");
        assert_eq!(code(lines[1].all_read()), "unknown_field");

        let r = f.texts("bad_tags", 1..=5, 8).unwrap_err();
        assert_eq!(
            (r.code, r.detail.starts_with("bad_tags[1]: ")),
            ("bad_field", true)
        );
        assert!(!r.detail.contains("secret"), "{}", r.detail);
        let r = f.decimals("bad_amounts", 1..=5, 2).unwrap_err();
        assert_eq!(r.detail, "bad_amounts[1]: more than 2 decimals");
        let r = f.objects("mixed", 1..=5).unwrap_err();
        assert_eq!(r.detail, "mixed[1]: not an object");
        assert_eq!(code(f.array("empty", 1..=5)), "bad_field");
        assert_eq!(f.array("empty", 0..=5).unwrap().len(), 0);
        assert_eq!(code(f.array("tags", 3..=5)), "bad_field");
        assert_eq!(code(f.texts("amounts", 1..=5, 8)), "bad_field");
        assert_eq!(code(f.array("absent", 0..=1)), "missing_field");
    }
}
