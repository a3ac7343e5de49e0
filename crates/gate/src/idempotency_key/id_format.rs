//! The format a server declares for its effect ids: a pattern the whole id must match
//! and a maximum length. An effect id is the one piece of a server's answer the gate keeps: it is
//! committed with the record, written to the business row and logged. A scrubber that looks for a
//! secret in N encodings loses to the N+1st, so the gate keeps only ids in the format the server
//! declares, and refuses every other one by construction: the effect exists (a `2xx` named it),
//! so a person gets the record, told the id only by its keyed digest
//! ([`super::answer_digest`]) and the command that shows the server's answer live.
//!
//! The strict default ([`IdFormat::default`]) is ASCII letters, digits and `-_.:`, 1 to 64
//! characters: no `=` (base64 padding), no `%` or `&` (escapes and references), no space, no `\`.
//! An integration whose server issues other ids declares them (per server: each of truck-slot's
//! servers has its own). Whatever is declared, an id is never longer than
//! [`super::MAX_EFFECT_ID_CHARS`] and never holds a byte outside printable ASCII (the core's floor,
//! [`super::effect_id_defect`]).

use std::fmt;

use regex::Regex;

use super::classify::{effect_id_defect, IdDefect, MAX_EFFECT_ID_CHARS};

/// The default pattern: ASCII letters, digits and `-_.:` (the length is checked apart).
pub const DEFAULT_ID_PATTERN: &str = "[A-Za-z0-9_.:-]+";

/// The default maximum length of an effect id, in characters.
pub const DEFAULT_ID_MAX_CHARS: usize = 64;

/// A declared effect-id format: the whole id must match `pattern` (anchored at both ends) and
/// have `1..=max_chars` characters, on top of the core's floor ([`effect_id_defect`]).
#[derive(Clone)]
pub struct IdFormat {
    pattern: String,
    /// The declared pattern, anchored; `None` for [`DEFAULT_ID_PATTERN`], checked byte by byte.
    anchored: Option<Regex>,
    max_chars: usize,
}

/// Why a declared format cannot be used. The messages quote the pattern (configuration, not a
/// secret), never an id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdFormatError {
    /// The pattern is not a valid regular expression (the `regex` crate's syntax).
    #[error("the effect-id pattern {pattern:?} is not a regular expression: {why}")]
    BadPattern {
        /// The pattern as declared.
        pattern: String,
        /// The parser's reason.
        why: String,
    },
    /// The maximum length is 0 or over [`MAX_EFFECT_ID_CHARS`].
    #[error("the effect-id maximum length {0} is not in 1..={MAX_EFFECT_ID_CHARS}")]
    BadLength(usize),
}

impl IdFormat {
    /// A format: `pattern` (the `regex` crate's syntax; it must match the whole id, so `^`/`$`
    /// are implied) and `max_chars` (characters, `1..=`[`MAX_EFFECT_ID_CHARS`]).
    ///
    /// # Errors
    /// [`IdFormatError`] for a pattern that does not parse or a length out of range.
    pub fn new(pattern: &str, max_chars: usize) -> Result<Self, IdFormatError> {
        if max_chars == 0 || max_chars > MAX_EFFECT_ID_CHARS {
            return Err(IdFormatError::BadLength(max_chars));
        }
        let anchored = if pattern == DEFAULT_ID_PATTERN {
            None
        } else {
            Some(Regex::new(&format!("^(?:{pattern})$")).map_err(|e| {
                IdFormatError::BadPattern {
                    pattern: pattern.to_string(),
                    why: e.to_string(),
                }
            })?)
        };
        Ok(Self {
            pattern: pattern.to_string(),
            anchored,
            max_chars,
        })
    }

    /// The pattern as declared.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// The maximum length, in characters.
    pub fn max_chars(&self) -> usize {
        self.max_chars
    }

    /// What is wrong with `id` under this format, `None` if it may be kept: the core's floor
    /// first ([`effect_id_defect`]: blank, over [`MAX_EFFECT_ID_CHARS`], not printable ASCII),
    /// then the length and the pattern ([`IdDefect::OutsideFormat`]).
    pub fn defect(&self, id: &str) -> Option<IdDefect> {
        if let Some(defect) = effect_id_defect(id) {
            return Some(defect);
        }
        let matches = match &self.anchored {
            Some(pattern) => pattern.is_match(id),
            None => id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b)),
        };
        if id.chars().count() > self.max_chars || !matches {
            return Some(IdDefect::OutsideFormat);
        }
        None
    }
}

impl Default for IdFormat {
    /// [`DEFAULT_ID_PATTERN`], [`DEFAULT_ID_MAX_CHARS`].
    fn default() -> Self {
        Self {
            pattern: DEFAULT_ID_PATTERN.to_string(),
            anchored: None,
            max_chars: DEFAULT_ID_MAX_CHARS,
        }
    }
}

impl PartialEq for IdFormat {
    fn eq(&self, other: &Self) -> bool {
        self.pattern == other.pattern && self.max_chars == other.max_chars
    }
}

impl Eq for IdFormat {}

impl fmt::Debug for IdFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdFormat")
            .field("pattern", &self.pattern)
            .field("max_chars", &self.max_chars)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_keeps_plain_ids_and_refuses_encodings() {
        let f = IdFormat::default();
        assert_eq!(f.pattern(), DEFAULT_ID_PATTERN);
        assert_eq!(f.max_chars(), 64);
        for ok in ["SLOT-000001", "a", "x.y:z_1-2", &"A".repeat(64)] {
            assert_eq!(f.defect(ok), None, "{ok}");
        }
        for (bad, why) in [
            ("SLOT-UmxzLTczMjAzOQ==", IdDefect::OutsideFormat),
            ("SLOT-&#82&#76&#83", IdDefect::OutsideFormat),
            ("RLS&minus;732039", IdDefect::OutsideFormat),
            ("RLS%2D732039", IdDefect::OutsideFormat),
            ("RLS 732039", IdDefect::OutsideFormat),
            ("RLS\\u002d732039", IdDefect::OutsideFormat),
            ("a/b+c", IdDefect::OutsideFormat),
            (&"A".repeat(65), IdDefect::OutsideFormat),
            ("", IdDefect::Empty),
            ("ＲＬＳ", IdDefect::NotPrintable),
            ("RLS\u{200b}7", IdDefect::NotPrintable),
            (&"A".repeat(129), IdDefect::TooLong),
        ] {
            assert_eq!(f.defect(bad), Some(why), "{bad}");
        }
    }

    #[test]
    fn a_declared_format_is_anchored_and_bounded() {
        let f = IdFormat::new("SLOT-[0-9]{6}", 11).expect("a pattern");
        assert_eq!(f.defect("SLOT-000123"), None);
        // Anchored: a match inside the id is not enough.
        assert_eq!(f.defect("xSLOT-000123"), Some(IdDefect::OutsideFormat));
        assert_eq!(f.defect("SLOT-0001234"), Some(IdDefect::OutsideFormat));
        // An alternation cannot escape the anchors.
        let g = IdFormat::new("a|b.*", 20).expect("a pattern");
        assert_eq!(g.defect("a"), None);
        assert_eq!(g.defect("bz"), None);
        assert_eq!(g.defect("ab"), Some(IdDefect::OutsideFormat));
        assert_eq!(g.defect("xa"), Some(IdDefect::OutsideFormat));
        // Whatever the pattern allows, the core's floor holds.
        let any = IdFormat::new(".*", 128).expect("a pattern");
        assert_eq!(any.defect("a\nb"), Some(IdDefect::NotPrintable));
    }

    #[test]
    fn a_bad_declaration_is_refused() {
        assert!(matches!(
            IdFormat::new("(", 10),
            Err(IdFormatError::BadPattern { .. })
        ));
        assert_eq!(
            IdFormat::new("a", 0).map(|_| ()),
            Err(IdFormatError::BadLength(0))
        );
        assert_eq!(
            IdFormat::new("a", 129).map(|_| ()),
            Err(IdFormatError::BadLength(129))
        );
        assert_eq!(
            IdFormat::new(DEFAULT_ID_PATTERN, DEFAULT_ID_MAX_CHARS),
            Ok(IdFormat::default())
        );
        // The default, checked byte by byte, agrees with its pattern run as a regex.
        let as_regex = Regex::new(&format!("^(?:{DEFAULT_ID_PATTERN})$")).expect("parses");
        for id in ["a-b_c.d:e", "a=b", "a b", "a%2D", "a&b", "a/b", "Ab9"] {
            assert_eq!(
                IdFormat::default().defect(id).is_none(),
                as_regex.is_match(id),
                "{id}"
            );
        }
    }
}
