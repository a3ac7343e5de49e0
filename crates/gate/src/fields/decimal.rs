//! An exact decimal number read from a body ([`Decimal`], [`super::Fields::decimal`]): the
//! literal's digits and scale, never a double. A money amount `12.30` is 1230 units at scale 2.

use std::fmt;

/// An exact decimal: `units × 10^-scale` (`12.30` read at its own scale is 1230 at scale 2;
/// `-0.5` is -5 at scale 1). Read by [`super::Fields::decimal`], which bounds the scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decimal {
    units: i64,
    scale: u32,
}

impl Decimal {
    /// `units × 10^-scale`.
    pub fn new(units: i64, scale: u32) -> Self {
        Self { units, scale }
    }

    /// The value in units of `10^-scale` ([`Decimal::scale`]).
    pub fn units(&self) -> i64 {
        self.units
    }

    /// The number of decimals as written (trailing zeros kept: `12.30` has 2).
    pub fn scale(&self) -> u32 {
        self.scale
    }

    /// The value in units of `10^-scale` for a `scale` at least [`Decimal::scale`] (`12.3` at
    /// scale 2 is 1230: cents); `None` for a smaller scale or a value past `i64`.
    pub fn units_at(&self, scale: u32) -> Option<i64> {
        let more = scale.checked_sub(self.scale)?;
        self.units.checked_mul(10i64.checked_pow(more)?)
    }

    /// Parses a JSON number literal (RFC 8259: `-?int(.frac)?([eE][+-]?exp)?`) exactly. `None`
    /// for anything else, or a value whose units or scale do not fit (`i64`, at most 18
    /// decimals).
    pub(super) fn parse_literal(literal: &str) -> Option<Self> {
        let (negative, unsigned) = match literal.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, literal),
        };
        let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
            Some(at) => (&unsigned[..at], unsigned[at + 1..].parse::<i32>().ok()?),
            None => (unsigned, 0),
        };
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        if int.is_empty() || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
            return None;
        }
        let digits = format!("{int}{frac}");
        let frac_len = i32::try_from(frac.len()).ok()?;
        // The scale as written, moved by the exponent; a negative one is whole tens.
        let scale = frac_len.checked_sub(exponent)?;
        let (digits, scale) = if scale < 0 {
            let zeros = usize::try_from(-scale).ok()?;
            (format!("{digits}{}", "0".repeat(zeros)), 0)
        } else {
            (digits, scale)
        };
        let scale = u32::try_from(scale).ok().filter(|s| *s <= 18)?;
        let trimmed = digits.trim_start_matches('0');
        let magnitude: i64 = if trimmed.is_empty() {
            0
        } else {
            trimmed.parse().ok()?
        };
        let units = if negative { -magnitude } else { magnitude };
        Some(Self { units, scale })
    }
}

impl fmt::Display for Decimal {
    /// The value with its scale: 1230 at scale 2 is `12.30`, -5 at scale 1 is `-0.5`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = self.units.unsigned_abs().to_string();
        let sign = if self.units < 0 { "-" } else { "" };
        let scale = self.scale as usize;
        if scale == 0 {
            return write!(f, "{sign}{digits}");
        }
        let padded = format!("{digits:0>width$}", width = scale + 1);
        let (int, frac) = padded.split_at(padded.len() - scale);
        write!(f, "{sign}{int}.{frac}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_read_exactly() {
        let d = |s: &str| Decimal::parse_literal(s).map(|d| (d.units(), d.scale()));
        assert_eq!(d("12.30"), Some((1230, 2)));
        assert_eq!(d("-0.5"), Some((-5, 1)));
        assert_eq!(d("7"), Some((7, 0)));
        assert_eq!(d("2.5E4"), Some((25000, 0)));
        assert_eq!(d("125e-2"), Some((125, 2)));
        assert_eq!(d("0.000"), Some((0, 3)));
        assert_eq!(d("0.1"), Some((1, 1)));
        assert_eq!(d("9223372036854775808"), None, "past i64");
        assert_eq!(d("1e-19"), None, "over 18 decimals");
        for bad in ["", "-", ".5", "1.2.3", "1e", "0x10", "\"1\""] {
            assert_eq!(d(bad), None, "{bad}");
        }
        let cents = Decimal::parse_literal("12.3").unwrap();
        assert_eq!(cents.units_at(2), Some(1230));
        assert_eq!(cents.units_at(0), None);
        assert_eq!(cents.to_string(), "12.3");
        assert_eq!(Decimal::new(-5, 3).to_string(), "-0.005");
        assert_eq!(Decimal::new(1230, 2).to_string(), "12.30");
        assert_eq!(Decimal::new(42, 0).to_string(), "42");
    }
}
