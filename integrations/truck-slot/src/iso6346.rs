//! ISO 6346 equipment numbers (container numbers).
//!
//! Shape: owner code (3 letters) + category identifier (`U` freight container, `J` detachable
//! freight container-related equipment, `Z` trailer or chassis) + 6-digit serial number + check
//! digit, e.g. `CSQU3054383`.
//!
//! Check digit (ISO 6346:1995, Annex A): digits count as themselves, letters
//! as A=10 upwards skipping multiples of 11 (so B=12, L=23, V=34); the character at position `i`
//! (0 at the left) is weighted `2^i`; the check digit is `sum % 11 % 10` (a remainder of 10 gives
//! 0). Sources that reverse the weights or drop the final `% 10` are wrong.

use std::fmt;

/// A validated ISO 6346 equipment number in canonical form: 11 characters, upper case, no spaces
/// or dashes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EquipmentNumber(String);

/// Why a string is not a valid ISO 6346 equipment number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EquipmentNumberError {
    /// After removing spaces and dashes, the length is not 11.
    #[error("equipment number must have 11 characters after removing spaces and dashes, got {0}")]
    Length(usize),
    /// The first three characters (owner code) are not letters A-Z.
    #[error("owner code (characters 1-3) must be letters A-Z")]
    OwnerCode,
    /// The fourth character is not a letter.
    #[error("category identifier (character 4) must be a letter, got {0:?}")]
    Category(char),
    /// Characters 5-11 (serial number and check digit) are not all digits.
    #[error("serial number and check digit (characters 5-11) must be digits")]
    Serial,
    /// The check digit does not match the one computed from the first ten characters.
    #[error("check digit is {found}, expected {expected} (ISO 6346)")]
    CheckDigit {
        /// The check digit computed from the first ten characters.
        expected: u8,
        /// The check digit the number carries.
        found: u8,
    },
}

/// The ISO 6346 value of a letter: A=10 upwards, skipping multiples of 11.
fn letter_value(c: char) -> Option<u32> {
    if !c.is_ascii_uppercase() {
        return None;
    }
    let mut value = 10;
    for letter in 'A'..=c {
        if letter != 'A' {
            value += 1;
            if value % 11 == 0 {
                value += 1;
            }
        }
    }
    Some(value)
}

/// Computes the ISO 6346 check digit of the first ten characters (`owner + category + serial`),
/// already in canonical upper-case form. Returns `None` if a character is neither `A-Z` nor `0-9`
/// or the length is not 10.
pub fn check_digit(first_ten: &str) -> Option<u8> {
    if first_ten.chars().count() != 10 {
        return None;
    }
    let mut sum: u32 = 0;
    for (i, c) in first_ten.chars().enumerate() {
        let value = match c {
            '0'..='9' => c.to_digit(10)?,
            _ => letter_value(c)?,
        };
        sum += value << i;
    }
    // sum % 11 is 0..=10; a remainder of 10 gives check digit 0.
    Some(((sum % 11) % 10) as u8)
}

impl EquipmentNumber {
    /// Parses and validates an equipment number, normalising it first: upper case, spaces and
    /// dashes removed (`csqu 305438-3` gives `CSQU3054383`).
    ///
    /// # Errors
    /// [`EquipmentNumberError`] naming the first rule broken; a wrong check digit names the
    /// expected one.
    pub fn parse(input: &str) -> Result<Self, EquipmentNumberError> {
        let canonical: String = input
            .chars()
            .filter(|c| *c != ' ' && *c != '-')
            .map(|c| c.to_ascii_uppercase())
            .collect();
        let chars: Vec<char> = canonical.chars().collect();
        if chars.len() != 11 {
            return Err(EquipmentNumberError::Length(chars.len()));
        }
        if !chars[..3].iter().all(|c| c.is_ascii_uppercase()) {
            return Err(EquipmentNumberError::OwnerCode);
        }
        // ISO 6346 defines U, J and Z; the check digit is defined for any letter, and the
        // project's reference set includes `ABCD1234560`, so any letter is accepted here and the
        // check digit does the validating. See [`EquipmentNumber::is_standard_category`].
        if !chars[3].is_ascii_uppercase() {
            return Err(EquipmentNumberError::Category(chars[3]));
        }
        if !chars[4..].iter().all(|c| c.is_ascii_digit()) {
            return Err(EquipmentNumberError::Serial);
        }
        let expected = check_digit(&canonical[..10]).ok_or(EquipmentNumberError::Serial)?;
        let found = chars[10].to_digit(10).ok_or(EquipmentNumberError::Serial)? as u8;
        if expected != found {
            return Err(EquipmentNumberError::CheckDigit { expected, found });
        }
        Ok(Self(canonical))
    }

    /// The canonical 11-character form, e.g. `CSQU3054383`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the category identifier is one ISO 6346 defines: `U` (freight container), `J`
    /// (detachable freight container-related equipment) or `Z` (trailer or chassis).
    pub fn is_standard_category(&self) -> bool {
        matches!(self.0.as_bytes()[3], b'U' | b'J' | b'Z')
    }

    /// The owner code (3 letters), e.g. `CSQ`.
    pub fn owner_code(&self) -> &str {
        &self.0[..3]
    }
}

impl fmt::Display for EquipmentNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letter_values_skip_multiples_of_eleven() {
        assert_eq!(letter_value('A'), Some(10));
        assert_eq!(letter_value('B'), Some(12));
        assert_eq!(letter_value('K'), Some(21));
        assert_eq!(letter_value('L'), Some(23));
        assert_eq!(letter_value('U'), Some(32));
        assert_eq!(letter_value('V'), Some(34));
        assert_eq!(letter_value('Z'), Some(38));
    }

    #[test]
    fn known_numbers_are_valid() {
        for n in ["CSQU3054383", "MWCU6059784", "ABCD1234560"] {
            assert_eq!(
                EquipmentNumber::parse(n).map(|e| e.to_string()),
                Ok(n.to_string())
            );
        }
        // ABCD123456: remainder 10 gives check digit 0.
        assert_eq!(check_digit("ABCD123456"), Some(0));
        assert_eq!(check_digit("CSQU305438"), Some(3));
        assert_eq!(check_digit("MWCU605978"), Some(4));
    }

    #[test]
    fn normalises_case_spaces_and_dashes() {
        let n = EquipmentNumber::parse("csqu 305438-3").map(|e| e.to_string());
        assert_eq!(n, Ok("CSQU3054383".to_string()));
    }

    #[test]
    fn wrong_check_digit_names_the_expected_one() {
        let err = EquipmentNumber::parse("CSQU3054384").unwrap_err();
        assert_eq!(
            err,
            EquipmentNumberError::CheckDigit {
                expected: 3,
                found: 4
            }
        );
        assert!(err.to_string().contains("expected 3"), "{err}");
    }

    #[test]
    fn other_shapes_are_rejected() {
        assert_eq!(
            EquipmentNumber::parse("CSQU305438"),
            Err(EquipmentNumberError::Length(10))
        );
        assert_eq!(
            EquipmentNumber::parse("C5QU3054383"),
            Err(EquipmentNumberError::OwnerCode)
        );
        assert_eq!(
            EquipmentNumber::parse("CSQ93054383"),
            Err(EquipmentNumberError::Category('9'))
        );
        assert_eq!(
            EquipmentNumber::parse("CSQU30543A3"),
            Err(EquipmentNumberError::Serial)
        );
    }
}
