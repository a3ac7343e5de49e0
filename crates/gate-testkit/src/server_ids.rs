//! Effect ids in the format an integration declares ([`IdFormat`]: a pattern the whole id
//! matches and a maximum length), for the test kit's server ([`IdMaker`],
//! [`ServerConfig::id_format`](super::ServerConfig::id_format)): the n-th effect gets the n-th
//! id of the pattern, so a test runs against a server whose ids look like the real one's (an
//! MRN, a `ch_` charge id) and the gate's format check sees ids it must keep.
//!
//! The pattern is laid out as slots, one per character: a literal, or a class narrowed to
//! printable ASCII (the core's floor, [`gate::idempotency_key::effect_id_defect`]); an
//! alternation takes its first branch; a repetition starts at its minimum and grows (the first
//! that may, one copy at a time) until the slots hold enough distinct ids. The n-th id writes n
//! in mixed radix over the slots, the last slot least significant, each class in the order
//! digits, capitals, small letters, the rest (`[0-9]{6}` gives `000001`, `000002`, ...).

use regex_syntax::hir::{Class, Hir, HirKind};

use gate::idempotency_key::IdFormat;

/// How many distinct ids a format must hold for the server ([`IdMaker::new`]).
pub const MIN_IDS: u128 = 1_000_000;

/// Why a declared format cannot give the server its ids.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdShapeError {
    /// The pattern does not parse (`regex-syntax`), or holds a look-around or a class without
    /// printable ASCII.
    #[error("effect-id pattern {pattern:?}: {why}")]
    Unsupported {
        /// The pattern as declared.
        pattern: String,
        /// What could not be laid out.
        why: String,
    },
    /// Within the maximum length the pattern holds fewer than [`MIN_IDS`] distinct ids.
    #[error("effect-id pattern {pattern:?} holds fewer than {MIN_IDS} ids within {max_chars} characters")]
    TooFew {
        /// The pattern as declared.
        pattern: String,
        /// The declared maximum length, in characters.
        max_chars: usize,
    },
}

/// One piece of the pattern's layout.
#[derive(Debug, Clone)]
enum Piece {
    /// One character from this set (a literal is a set of one).
    Slot(Vec<char>),
    /// `inner` repeated `min..=max` times (`max` `None`: unbounded).
    Repeat {
        inner: Vec<Piece>,
        min: u32,
        max: Option<u32>,
    },
}

/// Makes the n-th effect id of a declared format (n from 1). Built once per server.
#[derive(Debug, Clone)]
pub struct IdMaker {
    format: IdFormat,
    /// The slots for the ids up to [`MIN_IDS`], laid out once.
    slots: Vec<Vec<char>>,
}

impl IdMaker {
    /// Lays `format`'s pattern out for at least [`MIN_IDS`] distinct ids within its maximum
    /// length, and checks its first and last id against `format` itself.
    ///
    /// # Errors
    /// [`IdShapeError`]: a pattern this cannot lay out, or one too narrow.
    pub fn new(format: &IdFormat) -> Result<Self, IdShapeError> {
        let pattern = format.pattern().to_string();
        let unsupported = |why: String| IdShapeError::Unsupported {
            pattern: pattern.clone(),
            why,
        };
        let hir = regex_syntax::Parser::new()
            .parse(&pattern)
            .map_err(|e| unsupported(e.to_string()))?;
        let mut pieces = Vec::new();
        lay_out(&hir, &mut pieces).map_err(unsupported)?;
        let slots = loop {
            let slots = flatten(&pieces);
            let capacity = slots
                .iter()
                .fold(1u128, |c, s| c.saturating_mul(s.len() as u128));
            if capacity > MIN_IDS {
                break slots;
            }
            if slots.len() >= format.max_chars() || !grow(&mut pieces) {
                return Err(IdShapeError::TooFew {
                    pattern,
                    max_chars: format.max_chars(),
                });
            }
        };
        if slots.len() > format.max_chars() {
            return Err(IdShapeError::TooFew {
                pattern,
                max_chars: format.max_chars(),
            });
        }
        let maker = Self {
            format: format.clone(),
            slots,
        };
        for n in [1, MIN_IDS as u64] {
            let id = maker.id(n).unwrap_or_default();
            if let Some(defect) = format.defect(&id) {
                return Err(unsupported(format!("its id {id:?} is refused: {defect:?}")));
            }
        }
        Ok(maker)
    }

    /// The format the ids are made in.
    pub fn format(&self) -> &IdFormat {
        &self.format
    }

    /// The n-th id (n from 1); `None` past the ids the layout holds (over [`MIN_IDS`]).
    pub fn id(&self, n: u64) -> Option<String> {
        let mut rest = u128::from(n);
        let mut out = vec![' '; self.slots.len()];
        for (i, slot) in self.slots.iter().enumerate().rev() {
            let radix = slot.len() as u128;
            out[i] = slot[(rest % radix) as usize];
            rest /= radix;
        }
        (rest == 0).then(|| out.into_iter().collect())
    }
}

/// Lays `hir` out as pieces; the reason when it holds what ids cannot be made of.
fn lay_out(hir: &Hir, out: &mut Vec<Piece>) -> Result<(), String> {
    match hir.kind() {
        HirKind::Empty => {}
        HirKind::Literal(lit) => {
            let text = String::from_utf8(lit.0.to_vec()).map_err(|e| e.to_string())?;
            out.extend(text.chars().map(|c| Piece::Slot(vec![c])));
        }
        HirKind::Class(class) => out.push(Piece::Slot(class_chars(class)?)),
        HirKind::Look(_) => return Err("a look-around or an anchor inside the pattern".into()),
        HirKind::Repetition(rep) => {
            let mut inner = Vec::new();
            lay_out(&rep.sub, &mut inner)?;
            out.push(Piece::Repeat {
                inner,
                min: rep.min,
                max: rep.max,
            });
        }
        HirKind::Capture(cap) => lay_out(&cap.sub, out)?,
        HirKind::Concat(parts) => {
            for part in parts {
                lay_out(part, out)?;
            }
        }
        HirKind::Alternation(branches) => {
            if let Some(first) = branches.first() {
                lay_out(first, out)?;
            }
        }
    }
    Ok(())
}

/// The printable ASCII characters of `class` (`!`..`~`): digits, capitals, small letters, the rest.
fn class_chars(class: &Class) -> Result<Vec<char>, String> {
    let mut chars: Vec<char> = ('!'..='~')
        .filter(|c| match class {
            Class::Unicode(u) => u.ranges().iter().any(|r| (r.start()..=r.end()).contains(c)),
            Class::Bytes(b) => b
                .ranges()
                .iter()
                .any(|r| (char::from(r.start())..=char::from(r.end())).contains(c)),
        })
        .collect();
    if chars.is_empty() {
        return Err("a class without a printable ASCII character".into());
    }
    chars.sort_by_key(|c| match c {
        '0'..='9' => 0,
        'A'..='Z' => 1,
        'a'..='z' => 2,
        _ => 3,
    });
    Ok(chars)
}

/// The slots of `pieces` with each repetition at its current count (`min` grown by [`grow`]).
fn flatten(pieces: &[Piece]) -> Vec<Vec<char>> {
    let mut slots = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Slot(chars) => slots.push(chars.clone()),
            Piece::Repeat { inner, min, .. } => {
                let once = flatten(inner);
                for _ in 0..*min {
                    slots.extend(once.iter().cloned());
                }
            }
        }
    }
    slots
}

/// Adds one copy to the first repetition that may grow and holds a class of two or more
/// characters; `false` when none may.
fn grow(pieces: &mut [Piece]) -> bool {
    for piece in pieces.iter_mut() {
        if let Piece::Repeat { inner, min, max } = piece {
            if grow(inner) {
                return true;
            }
            let varies = flatten(inner).iter().any(|s| s.len() > 1);
            if varies && max.is_none_or(|m| *min < m) {
                *min += 1;
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn maker(pattern: &str, max_chars: usize) -> IdMaker {
        IdMaker::new(&IdFormat::new(pattern, max_chars).unwrap()).unwrap()
    }

    #[test]
    fn ids_follow_the_declared_pattern_and_are_distinct() {
        let mrn = maker("[0-9]{2}[A-Z]{2}[0-9A-Z]{14}", 18);
        assert_eq!(mrn.id(1).as_deref(), Some("00AA00000000000001"));
        assert_eq!(mrn.id(36).as_deref(), Some("00AA00000000000010"));
        let charge = maker("ch_[A-Za-z0-9]{8,24}", 27);
        let ids: Vec<String> = (1..=2_000).map(|n| charge.id(n).unwrap()).collect();
        for id in &ids {
            assert_eq!(charge.format().defect(id), None, "{id}");
        }
        let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
        assert_eq!(ids[0], "ch_00000001");
    }

    #[test]
    fn an_unbounded_repetition_grows_until_the_ids_fit() {
        let plain = maker("INV-[0-9]+", 20);
        assert_eq!(plain.id(7).as_deref(), Some("INV-0000007"));
        assert_eq!(plain.format().defect("INV-0000007"), None);
        let default = maker(gate::idempotency_key::DEFAULT_ID_PATTERN, 64);
        assert_eq!(default.format().defect(&default.id(123_456).unwrap()), None);
    }

    #[test]
    fn a_format_that_cannot_hold_the_ids_is_refused() {
        let narrow = IdFormat::new("[0-9]{3}", 3).unwrap();
        assert!(matches!(
            IdMaker::new(&narrow),
            Err(IdShapeError::TooFew { .. })
        ));
        let short = IdFormat::new("[0-9]+", 4).unwrap();
        assert!(matches!(
            IdMaker::new(&short),
            Err(IdShapeError::TooFew { .. })
        ));
        let look = IdFormat::new(r"a\bb[0-9]+", 20).unwrap();
        assert!(matches!(
            IdMaker::new(&look),
            Err(IdShapeError::Unsupported { .. })
        ));
    }
}
