//! The second line behind a terminal's declared slot-id format: whether a slot id that
//! fits the format still carries the PIN or the token. A format such as letters, digits and `-`
//! admits hex and base64 (without padding), so the id is decoded, not the secret encoded: every
//! hex run at both alignments and every base64 run at all four (standard and URL-safe alphabet)
//! is decoded to text, and the id and each decoding are folded (NFKC, lower case, letters and
//! digits only, [`fold`]) before the secret is searched in them. That finds any spelling of the
//! secret (`Rls-732039`, `rls_732039`, `R-L-S-732039`) under those encodings, which an encoder of
//! a fixed list of spellings misses (hex of `Rls-...`). On top of [`super::scrub::quotes_secret`]
//! (every escape and entity it knows), an id also quotes a secret when it holds a **fragment**:
//! a run of at least three quarters of the folded secret's characters (and at least
//! [`MIN_FRAGMENT_CHARS`]: `RLS-7320...` cut from `RLS-732039`), or the secret's letter prefix
//! followed, within 40 characters, by half of its digits (`RLS_73` + `20`).
//!
//! Not refused: the secret's digits without its letters. A terminal that numbers its slots
//! (`ECTD-014823`) would share a PIN's digit run by chance about once in 15,000 events
//! (`sim`'s `forwarder-two-months` does), and each would be a slot sent to a person; an id is
//! kept only in the terminal's declared format, and the digits alone do not say they are a PIN.
//!
//! A refused id is never kept: the record goes to a person, who sees the answer live with
//! `gatectl lookup`.

use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use base64::Engine;
use unicode_normalization::UnicodeNormalization;

use super::scrub;

/// The shortest fragment of a secret looked for in an id, in folded characters.
pub const MIN_FRAGMENT_CHARS: usize = 6;

/// How far after a secret's letter prefix half of its digits are looked for, in folded characters.
pub const PREFIX_WINDOW_CHARS: usize = 40;

/// `text` folded: NFKC, lower case, letters and digits only.
fn fold(text: &str) -> String {
    text.nfkc()
        .flat_map(char::to_lowercase)
        .filter(|c| c.is_alphanumeric())
        .collect()
}

/// The texts an id may encode: every hex run (at least 8 digits) at both alignments, every
/// base64 run (at least 8 characters) at all four, decoded and read as UTF-8 (lossy), folded.
fn decodings(id: &str) -> Vec<String> {
    let mut out = Vec::new();
    // Hex: over the folded id (separators between digits are gone).
    let skeleton = fold(id);
    for run in skeleton
        .split(|c: char| !c.is_ascii_hexdigit())
        .filter(|r| r.len() >= 8)
    {
        for start in 0..2 {
            let digits = &run[start..];
            let even = &digits[..digits.len() - digits.len() % 2];
            if let Ok(bytes) = hex::decode(even) {
                out.push(fold(&String::from_utf8_lossy(&bytes)));
            }
        }
    }
    // Base64: over the id as given (case matters), both alphabets, and over the id with every
    // other character removed (base64 cut into short groups by `.` or `:`, which the format
    // allows: `UkxT.LTcz.MjAz.OTQ4`).
    let is_b64 = |c: char| c.is_ascii_alphanumeric() || "+/-_".contains(c);
    let joined: String = id.chars().filter(|c| is_b64(*c)).collect();
    let mut runs: Vec<&str> = id.split(|c: char| !is_b64(c)).collect();
    if joined != id {
        runs.push(&joined);
    }
    for run in runs.into_iter().filter(|r| r.len() >= 8) {
        for start in 0..4.min(run.len()) {
            let tail = &run[start..];
            let whole = &tail[..tail.len() - tail.len() % 4];
            let standard = whole.replace('-', "+").replace('_', "/");
            for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
                for candidate in [whole, standard.as_str()] {
                    if let Ok(bytes) = engine.decode(candidate) {
                        out.push(fold(&String::from_utf8_lossy(&bytes)));
                    }
                }
            }
        }
    }
    // The id read backwards (`84930237-SLR`).
    out.push(skeleton.chars().rev().collect());
    out.push(skeleton);
    out.sort();
    out.dedup();
    out
}

/// The runs of `secret`'s folded characters an id may not hold: every run of three quarters of
/// them (at least [`MIN_FRAGMENT_CHARS`]). None for a secret folded shorter than
/// [`MIN_FRAGMENT_CHARS`] (the scrubber's own rules apply to it).
fn fragments(secret: &str) -> Vec<String> {
    let folded: Vec<char> = fold(secret).chars().collect();
    let n = folded.len();
    if n < MIN_FRAGMENT_CHARS {
        return Vec::new();
    }
    let len = MIN_FRAGMENT_CHARS.max((3 * n).div_ceil(4)).min(n);
    (0..=n - len)
        .map(|start| folded[start..start + len].iter().collect())
        .collect()
}

/// Whether `folded` holds `secret`'s letter prefix (at least 3 letters) followed, within
/// [`PREFIX_WINDOW_CHARS`], by half of its digits (at least 2).
fn prefix_then_digits(folded: &str, secret: &str) -> bool {
    let whole = fold(secret);
    let prefix: String = whole.chars().take_while(|c| !c.is_ascii_digit()).collect();
    let digits: String = whole.chars().filter(char::is_ascii_digit).collect();
    let half = digits.len() / 2;
    if prefix.chars().count() < 3 || half < 2 {
        return false;
    }
    let parts: Vec<&str> = (0..=digits.len() - half)
        .map(|i| &digits[i..i + half])
        .collect();
    folded.match_indices(prefix.as_str()).any(|(at, _)| {
        let window: String = folded[at + prefix.len()..]
            .chars()
            .take(PREFIX_WINDOW_CHARS)
            .collect();
        parts.iter().any(|p| window.contains(p))
    })
}

/// Whether the slot id `id` carries one of `secrets`: in any form [`scrub::quotes_secret`]
/// finds, or (folded, and under every hex and base64 decoding) a fragment of it (see the module
/// docs).
pub fn id_quotes_secret(id: &str, secrets: &[&str]) -> bool {
    let secrets: Vec<&str> = secrets.iter().copied().filter(|s| !s.is_empty()).collect();
    if secrets.is_empty() {
        return false;
    }
    if scrub::quotes_secret(id, &secrets) {
        return true;
    }
    // The fragments are looked for in the id as given and under each layer of escapes the
    // scrubber decodes (`&#82&#76&#83` is `RLS`).
    let mut texts = decodings(id);
    for layer in scrub::decoded_layers(id) {
        texts.extend(decodings(&layer));
    }
    secrets.iter().any(|secret| {
        let whole = fold(secret);
        let parts = fragments(secret);
        texts.iter().any(|t| {
            (!whole.is_empty() && t.contains(&whole))
                || parts.iter().any(|p| t.contains(p))
                || prefix_then_digits(t, secret)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIN: &str = "Rls-732039";

    fn b64(text: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(text)
    }

    #[test]
    fn the_issues_ids_are_caught() {
        let mut ids = vec![
            "SLOT-526c732d373332303339".to_string(), // hex of `Rls-732039`
            format!("SLOT-{}", hex::encode("rls_732039")),
            format!("SLOT-{}", hex::encode("R-L-S-732039")),
            format!("S-{}", b64("rLs-732039").trim_end_matches('=')),
            format!("S-{}", b64("rls_732039").trim_end_matches('=')),
            format!("S-{}", b64("R-L-S-732039").trim_end_matches('=')),
            format!("S-x{}", b64("R-L-S-732039").trim_end_matches('=')),
            format!("S-xy{}", b64("R-L-S-732039").trim_end_matches('=')),
            "RLS-7320".to_string(),
            "rls_732".to_string(),
            "RLS-73203".to_string() + "...",
            "S-RLS_732039".to_string(),
            // base64 cut into groups by a separator the format allows, and the PIN backwards.
            "UkxT.LTcz.MjAz.OQ".to_string(),
            "S-930237-SLR".to_string(),
            // Numeric character references without their `;` (`RLS-732032`: the PIN's prefix).
            "SLOT-&#82&#76&#83&#45&#55&#51&#50&#48&#51&#50".to_string(),
        ];
        ids.push(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(format!("{{\"pin\":\"{}\"}}", PIN.to_uppercase())),
        );
        for id in &ids {
            assert!(id_quotes_secret(id, &["RLS-732039"]), "{id}");
        }
    }

    #[test]
    fn innocent_ids_pass() {
        // A numbered slot that shares the PIN's digits is not refused (the module docs say why).
        for id in [
            "SLOT-000123",
            "ECTD-20250609-0800-0042",
            "S-CSQU3054383",
            "APMT-1",
            "S-RLS-1",
            "ECTD-732039",
            "SLOT-7320390",
        ] {
            assert!(
                !id_quotes_secret(id, &["RLS-732039", "tok-PLUGH-0042"]),
                "{id}"
            );
        }
        assert!(!id_quotes_secret("anything", &[]));
    }
}
