//! Property: ISO 6346 parsing round-trips every valid equipment number. Numbers are generated
//! from an owner code, a category and a serial, with the check digit computed here independently
//! (the letter table of ISO 6346:1995, Annex A); parsing gives the same number back, lower case and
//! space/dash spellings normalise to it, and every other check digit is refused.

use proptest::prelude::*;
use truck_slot::iso6346::{check_digit, EquipmentNumber, EquipmentNumberError};

/// ISO 6346:1995, Annex A: A=10, B=12, ... skipping multiples of 11.
const LETTERS: [(char, u32); 26] = [
    ('A', 10),
    ('B', 12),
    ('C', 13),
    ('D', 14),
    ('E', 15),
    ('F', 16),
    ('G', 17),
    ('H', 18),
    ('I', 19),
    ('J', 20),
    ('K', 21),
    ('L', 23),
    ('M', 24),
    ('N', 25),
    ('O', 26),
    ('P', 27),
    ('Q', 28),
    ('R', 29),
    ('S', 30),
    ('T', 31),
    ('U', 32),
    ('V', 34),
    ('W', 35),
    ('X', 36),
    ('Y', 37),
    ('Z', 38),
];

/// The check digit by the book: position `i` weighted `2^i`, `sum % 11 % 10`.
fn reference_check_digit(first_ten: &str) -> u32 {
    let sum: u32 = first_ten
        .chars()
        .enumerate()
        .map(|(i, c)| {
            let v = c.to_digit(10).unwrap_or_else(|| {
                LETTERS
                    .iter()
                    .find(|(l, _)| *l == c)
                    .map(|(_, v)| *v)
                    .expect("a letter")
            });
            v << i
        })
        .sum();
    sum % 11 % 10
}

/// Owner code, category identifier and serial: the first ten characters.
fn first_ten() -> impl Strategy<Value = String> {
    (
        "[A-Z]{3}",
        prop_oneof![Just('U'), Just('J'), Just('Z')],
        "[0-9]{6}",
    )
        .prop_map(|(owner, cat, serial)| format!("{owner}{cat}{serial}"))
}

/// Another spelling of `n`: case, spaces and dashes anywhere.
fn spelling(n: &str, choices: &[u8]) -> String {
    let mut out = String::new();
    for (i, c) in n.chars().enumerate() {
        let pick = choices.get(i).copied().unwrap_or(0);
        if pick & 0b11 == 1 {
            out.push(' ');
        } else if pick & 0b11 == 2 {
            out.push('-');
        }
        if pick & 0b100 != 0 {
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    if choices.last().is_some_and(|c| c & 0b1000 != 0) {
        out.push(' ');
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn every_valid_number_round_trips(ten in first_ten()) {
        let digit = reference_check_digit(&ten);
        prop_assert_eq!(check_digit(&ten).map(u32::from), Some(digit));
        let number = format!("{ten}{digit}");
        let parsed = EquipmentNumber::parse(&number);
        prop_assert_eq!(parsed.as_ref().map(ToString::to_string), Ok(number.clone()));
        let parsed = parsed.expect("valid");
        prop_assert_eq!(parsed.as_str(), number.as_str());
        prop_assert_eq!(parsed.owner_code(), &number[..3]);
        prop_assert!(parsed.is_standard_category());
    }

    #[test]
    fn other_spellings_normalise_to_the_canonical_number(
        ten in first_ten(),
        choices in prop::collection::vec(any::<u8>(), 11),
    ) {
        let number = format!("{ten}{}", reference_check_digit(&ten));
        let written = spelling(&number, &choices);
        prop_assert_eq!(
            EquipmentNumber::parse(&written).map(|n| n.to_string()),
            Ok(number),
            "{}", written
        );
    }

    #[test]
    fn every_other_check_digit_is_refused(ten in first_ten(), wrong in 0u32..10) {
        let digit = reference_check_digit(&ten);
        prop_assume!(wrong != digit);
        let number = format!("{ten}{wrong}");
        match EquipmentNumber::parse(&number) {
            Err(EquipmentNumberError::CheckDigit { expected, found }) => {
                prop_assert_eq!(u32::from(expected), digit);
                prop_assert_eq!(u32::from(found), wrong);
            }
            other => prop_assert!(false, "{number}: {other:?}"),
        }
    }

    #[test]
    fn arbitrary_strings_never_panic(s in any::<String>()) {
        if let Ok(n) = EquipmentNumber::parse(&s) {
            let text = n.to_string();
            prop_assert_eq!(text.len(), 11);
            prop_assert_eq!(
                u32::from(check_digit(&text[..10]).expect("ten characters")),
                text[10..].parse::<u32>().expect("a digit")
            );
        }
    }
}

#[test]
fn the_worked_examples_hold() {
    assert_eq!(reference_check_digit("CSQU305438"), 3);
    assert_eq!(reference_check_digit("MWCU605978"), 4);
    assert_eq!(reference_check_digit("ABCD123456"), 0);
}
