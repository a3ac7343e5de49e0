//! Numbers a fingerprint can hold exactly (I-JSON, RFC 7493 section 2.2).
//!
//! The fingerprint is SHA-256 of the body's RFC 8785 canonical JSON, and RFC 8785 writes every
//! number as the IEEE 754 double nearest to it (ECMAScript's shortest round-trip form). Two
//! numbers that round to the same double get the same fingerprint although they differ:
//! `9007199254740993` and `9007199254740992` are both `9007199254740992`, and
//! `0.10000000000000001` is `0.1`. A body with such a number would make two different events look
//! the same (a duplicate instead of a mismatch), so it is refused instead:
//!
//! * **out of range**: a magnitude above 2^53 - 1 (`9007199254740991`), the largest integer up to
//!   which every integer is a double (RFC 7493 section 2.2: "an I-JSON sender cannot expect a
//!   receiver to treat an integer whose absolute value is greater than 9007199254740991 ... as an
//!   exact value");
//! * **not exact**: a literal that says more than the double it rounds to (its value is not the
//!   value of the double's shortest decimal form), e.g. `0.10000000000000001`, `1e-400`.
//!
//! Forms of one value stay one value: `25000`, `25000.0` and `2.5E4` are all accepted and have the
//! same fingerprint.

/// The largest magnitude accepted: 2^53 - 1 (RFC 7493 section 2.2).
pub(crate) const MAX_EXACT_INTEGER: f64 = 9_007_199_254_740_991.0;

/// Why a number of a body cannot be fingerprinted exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumberDefect {
    /// Its magnitude is above `MAX_EXACT_INTEGER`.
    OutOfRange {
        /// Byte offset of the number in the body.
        offset: usize,
    },
    /// It holds more precision than the double it rounds to.
    NotExact {
        /// Byte offset of the number in the body.
        offset: usize,
    },
}

/// Checks every number of `text`, which must already be valid JSON (the strict parser read it):
/// strings are skipped, every number literal is checked as the module docs say.
///
/// # Errors
/// The first [`NumberDefect`], in the order of the text.
pub fn check_numbers(text: &str) -> Result<(), NumberDefect> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < bytes.len()
                    && matches!(bytes[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    i += 1;
                }
                check_literal(&text[start..i], start)?;
            }
            _ => i += 1,
        }
    }
    Ok(())
}

/// Checks one number literal (JSON grammar) found at byte `offset`.
fn check_literal(literal: &str, offset: usize) -> Result<(), NumberDefect> {
    let Ok(value) = literal.parse::<f64>() else {
        // Not a number Rust reads: the JSON reader accepted it, so this cannot happen; refusing
        // is the safe answer.
        return Err(NumberDefect::NotExact { offset });
    };
    if !value.is_finite() || value.abs() > MAX_EXACT_INTEGER {
        return Err(NumberDefect::OutOfRange { offset });
    }
    if decimal(literal) != decimal(&format!("{:e}", value.abs())) {
        return Err(NumberDefect::NotExact { offset });
    }
    Ok(())
}

/// The value of a decimal literal without its sign, as its significant digits (no leading or
/// trailing zeros) and the power of ten of the last one: `25000.0` and `2.5e4` are both
/// `("25", 3)`; zero is `("", 0)`.
fn decimal(literal: &str) -> (String, i64) {
    let unsigned = literal.trim_start_matches(['-', '+']);
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (
            &unsigned[..at],
            unsigned[at + 1..].parse::<i64>().unwrap_or(0),
        ),
        None => (unsigned, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{int}{frac}");
    let frac_len = i64::try_from(frac.len()).unwrap_or(i64::MAX);
    let trimmed_start = digits.trim_start_matches('0');
    let trimmed = trimmed_start.trim_end_matches('0');
    if trimmed.is_empty() {
        return (String::new(), 0);
    }
    let trailing = i64::try_from(trimmed_start.len() - trimmed.len()).unwrap_or(0);
    (
        trimmed.to_string(),
        exponent.saturating_sub(frac_len).saturating_add(trailing),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(number: &str) -> Result<(), NumberDefect> {
        check_numbers(&format!("{{\"n\": {number}}}"))
    }

    #[test]
    fn forms_of_one_value_pass() {
        for n in [
            "0",
            "-0",
            "0.0",
            "25000",
            "25000.0",
            "2.5E4",
            "2.5e+4",
            "0.1",
            "-12.75",
            "1e-7",
            "5e-324",
            "9007199254740991",
            "-9007199254740991",
            "1.7976931348623157e-300",
        ] {
            assert_eq!(check(n), Ok(()), "{n}");
        }
        assert_eq!(decimal("25000.0"), decimal("2.5e4"));
        assert_eq!(decimal("0.000"), (String::new(), 0));
    }

    #[test]
    fn integers_beyond_2_pow_53_minus_1_are_out_of_range() {
        for n in [
            "9007199254740992",
            "9007199254740993",
            "-9007199254740993",
            "9007199254740993.0",
            "9.007199254740993e15",
            "1e16",
            "18446744073709551616",
            "1e300",
        ] {
            assert_eq!(check(n), Err(NumberDefect::OutOfRange { offset: 6 }), "{n}");
        }
    }

    #[test]
    fn more_precision_than_a_double_is_not_exact() {
        for n in [
            "0.10000000000000001",
            "1.0000000000000000001",
            "9007199254740990.5",
            "1e-400",
        ] {
            assert_eq!(check(n), Err(NumberDefect::NotExact { offset: 6 }), "{n}");
        }
    }

    #[test]
    fn numbers_inside_strings_are_not_numbers() {
        assert_eq!(
            check_numbers(r#"{"id": "9007199254740993", "x": "a\"1e400", "n": [1, 2.5]}"#),
            Ok(())
        );
        assert_eq!(
            check_numbers(r#"{"a": "\\", "b": [1, 9007199254740993]}"#),
            Err(NumberDefect::OutOfRange { offset: 21 })
        );
    }
}
