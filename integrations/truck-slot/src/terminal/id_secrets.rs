//! The second line behind a terminal's declared slot-id format (issue 25): whether a slot id that
//! fits the format still carries the PIN or the token. A format such as letters, digits and `-`
//! admits hex and base64 (without padding), so the id is decoded, not the secret encoded: every
//! hex run at both alignments and every base64 run at all four (standard and URL-safe alphabet)
//! is decoded to text, and the id and each decoding are folded (NFKC, lower case, letters and
//! digits only, [`fold`]) before the secret is searched in them. That finds any spelling of the
//! secret (`Rls-732039`, `rls_732039`, `R-L-S-732039`) under those encodings, which an encoder of
//! a fixed list of spellings misses (hex of `Rls-...`). On top of [`super::scrub::quotes_secret`]
//! (every escape and entity it knows), an id also quotes a secret when it holds a **fragment**:
//! a run of at least [`MIN_FRAGMENT_CHARS`] (and at least half) of the folded secret's
//! characters, or the secret's longest run of digits when it has at least
//! [`MIN_FRAGMENT_CHARS`] (`SLOT-732039` for the PIN `RLS-732039`; a PIN split over two answers).
//!
//! A refused id is never kept: the record goes to a person, who sees the answer live with
//! `gatectl lookup`. An innocent id that shares five characters with a PIN goes to a person too:
//! the safe side.

use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use base64::Engine;
use unicode_normalization::UnicodeNormalization;

use super::scrub;

/// The shortest fragment of a secret looked for in an id, in folded characters.
pub const MIN_FRAGMENT_CHARS: usize = 5;

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
    // Base64: over the id as given (case matters), both alphabets.
    let is_b64 = |c: char| c.is_ascii_alphanumeric() || "+/-_".contains(c);
    for run in id.split(|c: char| !is_b64(c)).filter(|r| r.len() >= 8) {
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
    out.push(skeleton);
    out.sort();
    out.dedup();
    out
}

/// The fragments of `secret` an id may not hold: every run of its folded characters of at least
/// [`MIN_FRAGMENT_CHARS`] and at least half its length, and its longest run of digits when that
/// has at least [`MIN_FRAGMENT_CHARS`]. None for a secret folded shorter than
/// [`MIN_FRAGMENT_CHARS`] (the scrubber's own rules apply to it).
fn fragments(secret: &str) -> Vec<String> {
    let folded: Vec<char> = fold(secret).chars().collect();
    let n = folded.len();
    let mut out = Vec::new();
    if n < MIN_FRAGMENT_CHARS {
        return out;
    }
    let len = MIN_FRAGMENT_CHARS.max(n.div_ceil(2));
    for start in 0..=n - len {
        out.push(folded[start..start + len].iter().collect());
    }
    let digits = fold(secret)
        .split(|c: char| !c.is_ascii_digit())
        .max_by_key(|r| r.len())
        .unwrap_or_default()
        .to_string();
    if digits.len() >= MIN_FRAGMENT_CHARS {
        out.push(digits);
    }
    out.sort();
    out.dedup();
    out
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
    let texts = decodings(id);
    secrets.iter().any(|secret| {
        let whole = fold(secret);
        let parts = fragments(secret);
        texts.iter().any(|t| {
            (!whole.is_empty() && t.contains(&whole)) || parts.iter().any(|p| t.contains(p))
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
            "SLOT-732039".to_string(),
            "RLS-731".to_string() + "95",
            "rls7320".to_string(),
            "S-RLS_732039".to_string(),
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
        for id in [
            "SLOT-000123",
            "ECTD-20250609-0800-0042",
            "S-CSQU3054383",
            "APMT-1",
            "S-RLS-1",
        ] {
            assert!(
                !id_quotes_secret(id, &["RLS-732039", "tok-PLUGH-0042"]),
                "{id}"
            );
        }
        assert!(!id_quotes_secret("anything", &[]));
    }
}
