//! Finding the release PIN and the terminal's API token in text that came from outside, in every
//! form a server may echo them, and cutting them out. For each secret (the PIN of the request a
//! text answers, the token), this module finds:
//!
//! * **the secret as sent**, and JSON-escaped (a PIN holding `"` or `\`);
//! * **any case, separators dropped or changed**: text and secret folded to their alphanumeric
//!   characters, lower case, after NFKC (full-width `ＰＩＮ` is `pin`): `pin-xyzzy-7731`,
//!   `PINXYZZY7731`, `PIN XYZZY_7731`, `P\u{200b}IN-XYZZY-7731` are one secret;
//! * **escapes and encodings**, decoded before folding (nested too): JSON and JavaScript escapes
//!   (`\u0050`, surrogate pairs, `\u{50}`, `\x50`), percent-encoding (`%50`, `%2D`, UTF-8), HTML
//!   references (`&#80;`, `&#x50;`, `&nbsp;`, `&amp;`, ...), HTML tags (`PIN-<b>XYZZY`), CSS
//!   escapes (`\50 `);
//! * **hex** of each spelling's UTF-8 bytes (as sent, lower or upper case, separators dropped),
//!   any case, with any separators between the digits;
//! * **base64** of each spelling, standard and URL-safe, at each of the three alignments inside a
//!   longer base64 text (a server echoing the body or an `Authorization: Basic` header).
//!
//! It cannot find a fragment of a secret or an encoding not listed: that is why terminal answers
//! are never quoted in log lines (`crate::terminal::AnswerDetail`); a scrubbed excerpt reaches
//! only the record's `error` and the manual item's `detail`. What it cannot cut: [`WITHHELD`].

use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use base64::Engine;
use unicode_normalization::UnicodeNormalization;

/// Secrets whose folded form (alphanumeric characters, see the module docs) is shorter than this
/// are not cut out of a text (a 3-digit PIN occurs in any status line): a text that holds one is
/// withheld whole ([`WITHHELD`]).
pub const MIN_REDACTABLE_CHARS: usize = 4;

/// What replaces each secret found in a text.
pub const REDACTED: &str = "[redacted]";

/// What [`scrub`] returns for a text that quotes a secret it cannot cut out (shorter than
/// [`MIN_REDACTABLE_CHARS`], or still found after cutting).
pub const WITHHELD: &str = "[detail withheld: it may quote a secret]";

/// Shortest base64 core searched for: shorter runs of base64 characters occur by chance.
const MIN_BASE64_CORE: usize = 8;

/// How many times escapes are decoded, one layer each (`%5Cu0050` is a percent-encoded `\u0050`).
const DECODE_ROUNDS: usize = 3;

/// A text as a string plus, for each of its bytes, the byte range of the original text it came
/// from: the original itself, a decoded view of it, or its folded skeleton.
struct View {
    text: String,
    origin: Vec<(usize, usize)>,
}

impl View {
    fn raw(text: &str) -> Self {
        let mut origin = Vec::with_capacity(text.len());
        for (at, c) in text.char_indices() {
            for _ in 0..c.len_utf8() {
                origin.push((at, at + c.len_utf8()));
            }
        }
        Self {
            text: text.to_string(),
            origin,
        }
    }

    fn push(&mut self, c: char, from: usize, to: usize) {
        self.text.push(c);
        for _ in 0..c.len_utf8() {
            self.origin.push((from, to));
        }
    }

    /// The units of the view: each character with its origin.
    fn units(&self) -> Vec<(char, usize, usize)> {
        self.text
            .char_indices()
            .map(|(at, c)| (c, self.origin[at].0, self.origin[at].1))
            .collect()
    }

    /// The original byte range of the view's bytes `begin..end` (`end` exclusive, non-empty).
    fn span(&self, begin: usize, end: usize) -> (usize, usize) {
        (self.origin[begin].0, self.origin[end - 1].1)
    }

    /// Every occurrence of `needle` (overlapping ones too), as original byte ranges.
    fn find_all(&self, needle: &str, into: &mut Vec<(usize, usize)>) {
        if needle.is_empty() {
            return;
        }
        let mut from = 0;
        while let Some(at) = self.text[from..].find(needle) {
            let begin = from + at;
            into.push(self.span(begin, begin + needle.len()));
            from = begin + self.text[begin..].chars().next().map_or(1, char::len_utf8);
        }
    }

    /// One layer of escapes decoded (see the module docs); `None` when there was nothing to
    /// decode.
    fn decoded(&self) -> Option<Self> {
        let units = self.units();
        let mut out = Self {
            text: String::with_capacity(self.text.len()),
            origin: Vec::with_capacity(self.origin.len()),
        };
        let mut changed = false;
        let mut i = 0;
        while i < units.len() {
            if let Some((c, used)) = decode_at(&units[i..]) {
                out.push(c, units[i].1, units[i + used - 1].2);
                i += used;
                changed = true;
            } else {
                let (c, from, to) = units[i];
                out.push(c, from, to);
                i += 1;
            }
        }
        changed.then_some(out)
    }

    /// The folded skeleton: alphanumeric characters only, NFKC, lower case.
    fn folded(&self) -> Self {
        let mut out = Self {
            text: String::with_capacity(self.text.len()),
            origin: Vec::with_capacity(self.origin.len()),
        };
        for (c, from, to) in self.units() {
            for f in fold(c) {
                out.push(f, from, to);
            }
        }
        out
    }
}

/// `c` folded: its NFKC form, lower case, alphanumeric characters only (none for a separator,
/// a format character or a combining mark).
fn fold(c: char) -> impl Iterator<Item = char> {
    std::iter::once(c)
        .nfkc()
        .flat_map(char::to_lowercase)
        .filter(|f| f.is_alphanumeric())
}

/// `secret` folded, as [`fold`] folds every character.
fn folded(secret: &str) -> String {
    secret.chars().flat_map(fold).collect()
}

fn hex_value(c: char) -> Option<u32> {
    c.to_digit(16)
}

/// `n` hex digits at the start of `units`, as a number.
fn hex_digits(units: &[(char, usize, usize)], n: usize) -> Option<u32> {
    if units.len() < n {
        return None;
    }
    units[..n]
        .iter()
        .try_fold(0u32, |acc, (c, _, _)| Some(acc * 16 + hex_value(*c)?))
}

/// The character an escape at the start of `units` stands for, and how many units it takes.
fn decode_at(units: &[(char, usize, usize)]) -> Option<(char, usize)> {
    let first = units.first()?.0;
    let second = units.get(1).map(|u| u.0);
    match (first, second) {
        ('\\', Some('u')) if units.get(2).map(|u| u.0) == Some('{') => {
            // `\u{1F600}`: one to six hex digits in braces.
            let close = units.iter().take(10).position(|u| u.0 == '}')?;
            let digits = &units[3..close];
            if digits.is_empty() || digits.len() > 6 {
                return None;
            }
            let value = hex_digits(digits, digits.len())?;
            Some((char::from_u32(value)?, close + 1))
        }
        ('\\', Some('u')) => {
            let high = hex_digits(&units[2..], 4)?;
            if (0xD800..0xDC00).contains(&high) {
                // A surrogate pair: `\uD83D\uDE00`.
                let rest = &units[6..];
                if rest.len() >= 6 && rest[0].0 == '\\' && rest[1].0 == 'u' {
                    let low = hex_digits(&rest[2..], 4)?;
                    if (0xDC00..0xE000).contains(&low) {
                        let value = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
                        return Some((char::from_u32(value)?, 12));
                    }
                }
                return None;
            }
            Some((char::from_u32(high)?, 6))
        }
        ('\\', Some('x')) => Some((char::from_u32(hex_digits(&units[2..], 2)?)?, 4)),
        // A CSS escape: `\50 ` (one to six hex digits, one optional space after them).
        ('\\', Some(h)) if h.is_ascii_hexdigit() => {
            let n = units[1..]
                .iter()
                .take(6)
                .take_while(|u| u.0.is_ascii_hexdigit())
                .count();
            let value = hex_digits(&units[1..], n)?;
            let space = usize::from(units.get(1 + n).is_some_and(|u| u.0 == ' '));
            Some((char::from_u32(value)?, 1 + n + space))
        }
        // An HTML tag inside a text (`PIN-<b>XYZZY</b>`): a separator.
        ('<', Some(c)) if c == '/' || c.is_ascii_alphabetic() => {
            let close = units.iter().take(40).position(|u| u.0 == '>')?;
            Some((' ', close + 1))
        }
        // Named HTML entities a server's error page may use between characters.
        ('&', Some(c)) if c.is_ascii_alphabetic() => {
            let close = units.iter().take(8).position(|u| u.0 == ';')?;
            let name: String = units[1..close].iter().map(|u| u.0).collect();
            let decoded = match name.as_str() {
                "nbsp" => ' ',
                "amp" => '&',
                "lt" => '<',
                "gt" => '>',
                "quot" => '"',
                "apos" => '\'',
                "hyphen" | "dash" => '-',
                _ => return None,
            };
            Some((decoded, close + 1))
        }
        ('%', _) => decode_percent(units),
        ('&', Some('#')) => {
            let (radix, start) = match units.get(2).map(|u| u.0) {
                Some('x' | 'X') => (16, 3),
                _ => (10, 2),
            };
            // The `;` is optional: an HTML parser decodes `&#82&#76` as `RL` too (WHATWG HTML,
            // "numeric character reference end state": a missing semicolon is a parse error,
            // not a literal).
            let digits: String = units[start..]
                .iter()
                .map(|u| u.0)
                .take_while(|c| c.is_digit(radix))
                .take(8)
                .collect();
            if digits.is_empty() {
                return None;
            }
            let value = u32::from_str_radix(&digits, radix).ok()?;
            let end = start + digits.len();
            let semicolon = usize::from(units.get(end).is_some_and(|u| u.0 == ';'));
            Some((char::from_u32(value)?, end + semicolon))
        }
        _ => None,
    }
}

/// A percent-encoded character at the start of `units`: `%HH`, or the `%HH` sequence of one UTF-8
/// encoded character.
fn decode_percent(units: &[(char, usize, usize)]) -> Option<(char, usize)> {
    let byte = |k: usize| -> Option<u8> {
        let at = 3 * k;
        if units.get(at)?.0 != '%' {
            return None;
        }
        u8::try_from(hex_digits(&units[at + 1..], 2)?).ok()
    };
    let lead = byte(0)?;
    let len = match lead {
        0x00..=0x7F => 1,
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF7 => 4,
        _ => return None,
    };
    let bytes: Vec<u8> = (0..len).map(byte).collect::<Option<_>>()?;
    let c = std::str::from_utf8(&bytes).ok()?.chars().next()?;
    Some((c, 3 * len))
}

/// The base64 runs that encode only `secret`'s bits, for each alphabet and alignment, at least
/// [`MIN_BASE64_CORE`] characters long.
fn base64_cores(secret: &str) -> Vec<String> {
    let mut cores = Vec::new();
    for offset in 0..3usize {
        let mut bytes = vec![0u8; offset];
        bytes.extend_from_slice(secret.as_bytes());
        let start = (offset * 8).div_ceil(6);
        let end = (bytes.len() * 8) / 6;
        if end <= start || end - start < MIN_BASE64_CORE {
            continue;
        }
        for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
            let encoded = engine.encode(&bytes);
            if let Some(core) = encoded.get(start..end) {
                cores.push(core.to_string());
            }
        }
    }
    cores.sort();
    cores.dedup();
    cores
}

/// The spellings of `secret` a server may encode (hex, base64) instead of the secret as sent: as
/// sent, lower and upper case, and each of those with its separators dropped (alphanumeric
/// characters only).
fn spellings(secret: &str) -> Vec<String> {
    let compact: String = secret.chars().filter(|c| c.is_alphanumeric()).collect();
    let mut out = Vec::new();
    for s in [secret.to_string(), compact] {
        out.push(s.to_lowercase());
        out.push(s.to_uppercase());
        out.push(s);
    }
    out.retain(|s| !s.is_empty());
    out.sort();
    out.dedup();
    out
}

/// The forms of `secret` searched in a view as they are (not folded): as sent, JSON-escaped, and
/// the base64 cores of each of its [`spellings`].
fn literal_forms(secret: &str) -> Vec<String> {
    let mut forms = vec![secret.to_string()];
    if let Ok(json) = serde_json::to_string(secret) {
        if let Some(inner) = json.get(1..json.len().saturating_sub(1)) {
            forms.push(inner.to_string());
        }
    }
    for spelling in spellings(secret) {
        forms.extend(base64_cores(&spelling));
    }
    forms.retain(|f| !f.is_empty());
    forms.sort();
    forms.dedup();
    forms
}

/// What was found of the secrets in a text.
struct Found {
    /// Original byte ranges of every occurrence of a secret that can be cut out.
    ranges: Vec<(usize, usize)>,
    /// A secret too short to cut out was found.
    short: bool,
}

fn find(text: &str, secrets: &[&str]) -> Found {
    let mut found = Found {
        ranges: Vec::new(),
        short: false,
    };
    let secrets: Vec<&str> = secrets.iter().copied().filter(|s| !s.is_empty()).collect();
    if secrets.is_empty() || text.is_empty() {
        return found;
    }
    let mut views = vec![View::raw(text)];
    for _ in 0..DECODE_ROUNDS {
        match views.last().and_then(View::decoded) {
            Some(next) => views.push(next),
            None => break,
        }
    }
    let skeletons: Vec<View> = views.iter().map(View::folded).collect();
    for secret in secrets {
        let skeleton = folded(secret);
        let short = skeleton.chars().count() < MIN_REDACTABLE_CHARS;
        let mut ranges = Vec::new();
        let literal = literal_forms(secret);
        let hexes: Vec<String> = spellings(secret)
            .iter()
            .map(|s| hex::encode(s.as_bytes()))
            .collect();
        for view in &views {
            for form in &literal {
                view.find_all(form, &mut ranges);
            }
        }
        for skeleton_view in &skeletons {
            skeleton_view.find_all(&skeleton, &mut ranges);
            for hex in &hexes {
                skeleton_view.find_all(hex, &mut ranges);
            }
        }
        if short && !ranges.is_empty() {
            found.short = true;
        }
        found.ranges.extend(ranges);
    }
    found
}

/// `text` with its escapes and entities decoded, one layer per entry (the first one decoded
/// layer first), at most as many layers as the scrubber itself decodes; empty when `text` holds
/// no escape this module knows.
pub fn decoded_layers(text: &str) -> Vec<String> {
    let mut layers = Vec::new();
    let mut view = View::raw(text);
    while layers.len() < DECODE_ROUNDS {
        let Some(next) = view.decoded() else { break };
        layers.push(next.text.clone());
        view = next;
    }
    layers
}

/// Whether `text` quotes one of `secrets` in any form this module knows (see the module docs).
pub fn quotes_secret(text: &str, secrets: &[&str]) -> bool {
    let found = find(text, secrets);
    found.short || !found.ranges.is_empty()
}

/// `text` with every occurrence of each secret, in every form this module knows, replaced by
/// [`REDACTED`]; overlapping and touching occurrences are merged first, so two secrets that
/// overlap leave no fragment of either. A text that quotes a secret too short to cut out, or in
/// which a secret is still found after cutting, becomes [`WITHHELD`]. Scrub a text before
/// shortening it, never after.
pub fn scrub(text: &str, secrets: &[&str]) -> String {
    let mut text = text.to_string();
    for _ in 0..3 {
        let found = find(&text, secrets);
        if found.short {
            return WITHHELD.to_string();
        }
        if found.ranges.is_empty() {
            return text;
        }
        text = cut(&text, found.ranges);
    }
    if quotes_secret(&text, secrets) {
        WITHHELD.to_string()
    } else {
        text
    }
}

/// `text` with the byte `ranges` (merged first) replaced by [`REDACTED`].
fn cut(text: &str, mut ranges: Vec<(usize, usize)>) -> String {
    ranges.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (begin, end) in ranges {
        match merged.last_mut() {
            Some(last) if begin <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((begin, end)),
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (begin, end) in merged {
        out.push_str(&text[at..begin]);
        out.push_str(REDACTED);
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIN: &str = "PIN-XYZZY-7731";
    const TOKEN: &str = "tok-PLUGH-0042";

    /// Every form of the issue's list and of the module docs, each inside a sentence: scrubbed to
    /// a text in which neither the secret nor its distinctive part is left.
    #[test]
    fn every_form_is_found_and_cut() {
        let b64 = STANDARD_NO_PAD.encode(format!("{{\"pin\":\"{PIN}\"}}"));
        let b64_token = STANDARD_NO_PAD.encode(format!("Bearer {TOKEN}"));
        let url = URL_SAFE_NO_PAD.encode(format!("xx{PIN}"));
        let forms = [
            PIN.to_string(),
            "pin-xyzzy-7731".into(),
            "PINXYZZY7731".into(),
            "pin xyzzy 7731".into(),
            "Pin_Xyzzy.7731".into(),
            r"\u0050IN-XYZZY-7731".into(),
            r"\u0070\u0069\u006e\u002d\u0078yzzy-7731".into(),
            r"\x50IN-XYZZY-7731".into(),
            r"\u{50}IN-XYZZY-7731".into(),
            "PIN%2DXYZZY%2D7731".into(),
            "%50%49%4E%2D%58%59%5A%5A%59%2D%37%37%33%31".into(),
            "%5Cu0050IN-XYZZY-7731".into(),
            "&#80;IN-XYZZY-&#x37;731".into(),
            "&#80&#73&#78&#45&#88&#89&#90&#90&#89&#45&#55&#55&#51&#49".into(),
            "&#x50&#x49&#x4e-XYZZY-7731".into(),
            "ＰＩＮ－ＸＹＺＺＹ－７７３１".into(),
            "P\u{200b}IN-XY\u{feff}ZZY-7731".into(),
            hex::encode(PIN),
            hex::encode(PIN).to_uppercase(),
            b64,
            url,
        ];
        for form in &forms {
            let text = format!("upstream refused release {form} today");
            assert!(quotes_secret(&text, &[PIN]), "{form}");
            let out = scrub(&text, &[PIN]);
            assert!(out.contains(REDACTED), "{form}: {out}");
            assert!(out.starts_with("upstream refused release "), "{out}");
            assert!(out.ends_with(" today"), "{out}");
            assert!(!quotes_secret(&out, &[PIN]), "{form}: {out}");
            assert!(!out.to_lowercase().contains("xyzzy"), "{form}: {out}");
        }
        let out = scrub(&format!("Authorization: Basic {b64_token}"), &[TOKEN]);
        assert!(!quotes_secret(&out, &[TOKEN]), "{out}");
    }

    #[test]
    fn text_without_a_secret_is_left_alone() {
        for text in [
            "terminal answered 503: upstream unavailable",
            "slot ECTD-20250609-0800-0042 for CSQU3054383",
            "%zz &#; \\u12 \\x",
            "",
        ] {
            assert_eq!(scrub(text, &[PIN, TOKEN]), text);
            assert!(!quotes_secret(text, &[PIN, TOKEN]));
        }
        assert_eq!(scrub("anything", &[]), "anything");
        assert_eq!(scrub("anything", &[""]), "anything");
    }

    /// Two secrets that overlap in a text (a token ending where a PIN begins) leave no fragment
    /// of either; a secret repeated with overlap (`abab` in `ababab`) is covered whole.
    #[test]
    fn overlapping_secrets_leave_no_fragment() {
        assert_eq!(
            scrub("auth tok-PLUGH-77 end", &["tok-PLUGH", "PLUGH-77"]),
            "auth [redacted] end"
        );
        assert_eq!(scrub("x ababab y", &["abab"]), "x [redacted] y");
        assert_eq!(
            scrub(
                "pin PIN-XYZZY-7731 and PIN-XYZZY-7731",
                &["PIN-XYZZY-7731", ""]
            ),
            "pin [redacted] and [redacted]"
        );
    }

    /// A PIN too short to cut out (here 3 digits) withholds any text that holds it, in any form,
    /// and leaves a text without it alone.
    #[test]
    fn a_short_secret_withholds_the_text() {
        assert_eq!(scrub("upstream 503 at gate 731", &["731"]), WITHHELD);
        assert_eq!(scrub("upstream 503 at gate 7-3-1", &["731"]), WITHHELD);
        assert_eq!(scrub("upstream 503", &["731"]), "upstream 503");
    }

    /// A PIN with `"` and `\` comes back JSON-escaped in an echoed body: found in that form too.
    #[test]
    fn a_secret_is_found_in_its_json_escaped_form() {
        let pin = r#"PI"N\77"#;
        let body = serde_json::json!({ "echo": { "you_sent": pin } }).to_string();
        assert!(body.contains(r#"PI\"N\\77"#), "{body}");
        let out = scrub(&body, &[pin]);
        assert!(
            !out.contains("PI\\\"N") && !out.contains("N\\\\77"),
            "{out}"
        );
        assert!(out.contains(REDACTED), "{out}");
    }

    #[test]
    fn base64_cores_cover_every_alignment() {
        let cores = base64_cores(PIN);
        for prefix in ["", "a", "ab", "abc"] {
            let encoded = STANDARD_NO_PAD.encode(format!("{prefix}{PIN}!"));
            assert!(
                cores.iter().any(|c| encoded.contains(c.as_str())),
                "{prefix:?}: {encoded}"
            );
        }
        assert!(base64_cores("abc").is_empty(), "too short to search safely");
    }
}
