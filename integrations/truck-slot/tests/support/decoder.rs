//! The hostile test's decoder: finds a secret in a text in any form a server may echo it in,
//! written independently of the gate's scrubber (`truck_slot::terminal::scrub`) so that it does
//! not share its blind spots. For each text:
//!
//! * up to four layers of escapes decoded (nested escapes: a percent-encoded `\u`): JSON and
//!   JavaScript `\uXXXX`, `\u{X}`, `\xXX`, CSS `\HH `, percent (`%HH`), numeric references with
//!   and without `;` (`&#82;`, `&#82`, `&#x52;`), named references with and without `;`
//!   (`&minus;`, `&ndash;`, `&mdash;`, `&hyphen;`, `&dash;`, `&nbsp;`, `&amp;`, ...), HTML tags
//!   removed, ANSI escape sequences removed;
//! * each layer folded: NFKC, lower case, letters and digits only (case, separators, full-width
//!   and zero-width characters, UTF-16/UTF-32 NUL bytes all disappear);
//! * every hex run of each folded layer decoded at both alignments, every base64 run (whitespace
//!   removed first: MIME-wrapped) decoded at all four alignments in both alphabets, each read as
//!   UTF-8, UTF-16 (LE, BE) and gzip, then folded;
//! * in every folded text: the whole secret, its digits alone, and a fragment of its digits (half
//!   of them) within 40 characters after its letter prefix (a split or cut value).

#![allow(dead_code)]

use std::io::Read;

use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use base64::Engine;
use unicode_normalization::UnicodeNormalization;

/// A secret as the decoder looks for it.
#[derive(Debug, Clone)]
pub struct Needle {
    /// A name for messages.
    pub name: &'static str,
    /// Folded whole: `rls73203948`.
    pub whole: String,
    /// Its letter prefix, folded: `rls`.
    pub prefix: String,
    /// Its digits alone: `73203948`.
    pub digits: String,
}

impl Needle {
    /// `secret` = letters, a separator, digits (`RLS-73203948`, `tok-PLUGH-58194672`).
    pub fn new(name: &'static str, secret: &str) -> Self {
        let whole = fold(secret);
        let digits: String = secret.chars().filter(char::is_ascii_digit).collect();
        let prefix: String = whole.chars().take_while(|c| !c.is_ascii_digit()).collect();
        Self {
            name,
            whole,
            prefix,
            digits,
        }
    }

    /// Why `folded` holds this secret, if it does.
    fn found_in(&self, folded: &str) -> Option<String> {
        if folded.contains(&self.whole) {
            return Some(format!("{} whole", self.name));
        }
        if folded.contains(&self.digits) {
            return Some(format!("{}'s digits alone", self.name));
        }
        let half = self.digits.len() / 2;
        let parts: Vec<&str> = (0..=self.digits.len() - half)
            .map(|i| &self.digits[i..i + half])
            .collect();
        let mut from = 0;
        while let Some(at) = folded[from..].find(&self.prefix) {
            let start = from + at + self.prefix.len();
            let window: String = folded[start..].chars().take(40).collect();
            if let Some(p) = parts.iter().find(|p| window.contains(**p)) {
                return Some(format!(
                    "{}: prefix then the fragment {p} within 40 characters",
                    self.name
                ));
            }
            from = start;
        }
        None
    }
}

/// NFKC, lower case, letters and digits only (ASCII text is its own NFKC form: a fast path).
pub fn fold(text: &str) -> String {
    if text.is_ascii() {
        return text
            .bytes()
            .filter(u8::is_ascii_alphanumeric)
            .map(|b| char::from(b.to_ascii_lowercase()))
            .collect();
    }
    text.nfkc()
        .flat_map(char::to_lowercase)
        .filter(|c| c.is_alphanumeric())
        .collect()
}

const NAMED: &[(&str, &str)] = &[
    ("minus", "-"),
    ("ndash", "-"),
    ("mdash", "-"),
    ("hyphen", "-"),
    ("dash", "-"),
    ("horbar", "-"),
    ("nbsp", " "),
    ("amp", "&"),
    ("lt", "<"),
    ("gt", ">"),
    ("quot", "\""),
    ("apos", "'"),
    ("lowbar", "_"),
    ("period", "."),
    ("colon", ":"),
    ("sol", "/"),
    ("num", "#"),
];

fn hex_at(chars: &[char], n: usize) -> Option<u32> {
    if chars.len() < n {
        return None;
    }
    chars[..n]
        .iter()
        .try_fold(0u32, |acc, c| Some(acc * 16 + c.to_digit(16)?))
}

/// One layer of escapes decoded.
pub fn unescape(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut bytes: Vec<u8> = Vec::new();
    let flush = |bytes: &mut Vec<u8>, out: &mut String| {
        if !bytes.is_empty() {
            out.push_str(&String::from_utf8_lossy(bytes));
            bytes.clear();
        }
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let rest = &chars[i..];
        // Percent: collected as bytes (UTF-8 sequences).
        if c == '%' {
            if let Some(v) = hex_at(&rest[1..], 2) {
                bytes.push(v as u8);
                i += 3;
                continue;
            }
        }
        flush(&mut bytes, &mut out);
        if c == '\\' && rest.len() > 1 {
            match rest[1] {
                'u' if rest.get(2) == Some(&'{') => {
                    if let Some(close) = rest.iter().take(11).position(|c| *c == '}') {
                        if let Some(ch) =
                            hex_at(&rest[3..close], close - 3).and_then(char::from_u32)
                        {
                            out.push(ch);
                            i += close + 1;
                            continue;
                        }
                    }
                }
                'u' => {
                    if let Some(v) = hex_at(&rest[2..], 4) {
                        out.push(char::from_u32(v).unwrap_or(' '));
                        i += 6;
                        continue;
                    }
                }
                'x' => {
                    if let Some(v) = hex_at(&rest[2..], 2) {
                        out.push(char::from_u32(v).unwrap_or(' '));
                        i += 4;
                        continue;
                    }
                }
                h if h.is_ascii_hexdigit() => {
                    let n = rest[1..]
                        .iter()
                        .take(6)
                        .take_while(|c| c.is_ascii_hexdigit())
                        .count();
                    if let Some(ch) = hex_at(&rest[1..], n).and_then(char::from_u32) {
                        out.push(ch);
                        i += 1 + n + usize::from(rest.get(1 + n) == Some(&' '));
                        continue;
                    }
                }
                'n' | 'r' | 't' => {
                    out.push(' ');
                    i += 2;
                    continue;
                }
                '"' | '\\' | '/' => {
                    out.push(rest[1]);
                    i += 2;
                    continue;
                }
                _ => {}
            }
        }
        if c == '&' && rest.len() > 1 {
            if rest[1] == '#' {
                let (radix, start) = match rest.get(2) {
                    Some('x' | 'X') => (16, 3),
                    _ => (10, 2),
                };
                let n = rest[start..]
                    .iter()
                    .take(8)
                    .take_while(|c| c.is_digit(radix))
                    .count();
                if n > 0 {
                    let digits: String = rest[start..start + n].iter().collect();
                    if let Some(ch) = u32::from_str_radix(&digits, radix)
                        .ok()
                        .and_then(char::from_u32)
                    {
                        out.push(ch);
                        i += start + n + usize::from(rest.get(start + n) == Some(&';'));
                        continue;
                    }
                }
            } else if let Some((name, value)) = NAMED
                .iter()
                .find(|(name, _)| rest[1..].iter().take(name.len()).copied().eq(name.chars()))
            {
                out.push_str(value);
                i += 1 + name.len() + usize::from(rest.get(1 + name.len()) == Some(&';'));
                continue;
            }
        }
        // An HTML tag: a separator.
        if c == '<'
            && rest
                .get(1)
                .is_some_and(|c| *c == '/' || c.is_ascii_alphabetic())
        {
            if let Some(close) = rest.iter().take(64).position(|c| *c == '>') {
                out.push(' ');
                i += close + 1;
                continue;
            }
        }
        // An ANSI escape sequence: removed.
        if c == '\u{1b}' && rest.get(1) == Some(&'[') {
            let n = rest[2..]
                .iter()
                .take(16)
                .take_while(|c| !c.is_ascii_alphabetic())
                .count();
            i += 2 + n + 1;
            continue;
        }
        out.push(c);
        i += 1;
    }
    flush(&mut bytes, &mut out);
    out
}

/// Readings of decoded bytes: UTF-8, UTF-16 LE and BE (lossy) when a quarter of the bytes are
/// NUL (UTF-16 or UTF-32 of ASCII text), and gzip when it is gzip.
fn readings(bytes: &[u8], into: &mut Vec<String>) {
    into.push(fold(&String::from_utf8_lossy(bytes)));
    let nuls = bytes.iter().filter(|b| **b == 0).count();
    for big in [false, true]
        .into_iter()
        .filter(|_| nuls * 4 >= bytes.len())
    {
        let units: Vec<u16> = bytes
            .chunks_exact(2)
            .map(|p| {
                if big {
                    u16::from_be_bytes([p[0], p[1]])
                } else {
                    u16::from_le_bytes([p[0], p[1]])
                }
            })
            .collect();
        into.push(fold(&String::from_utf16_lossy(&units)));
    }
    if bytes.starts_with(&[0x1f, 0x8b]) {
        // What inflates before an error counts too (a gzip stream cut short: a base64 run ends
        // before its padding, an answer cut at the client's bound).
        let mut out = Vec::new();
        let _ = flate2::read::GzDecoder::new(bytes)
            .take(4 << 20)
            .read_to_end(&mut out);
        if !out.is_empty() {
            into.push(fold(&String::from_utf8_lossy(&out)));
        }
    }
}

/// Every folded text of `text`: its layers, and the hex and base64 decodings of each.
pub fn views(text: &str) -> Vec<String> {
    let mut layers = vec![text.to_string()];
    for _ in 0..4 {
        let next = unescape(layers.last().map_or("", String::as_str));
        if Some(&next) == layers.last() {
            break;
        }
        layers.push(next);
    }
    let mut out = Vec::new();
    for layer in &layers {
        let folded = fold(layer);
        for run in folded
            .split(|c: char| !c.is_ascii_hexdigit())
            .filter(|r| r.len() >= 8)
        {
            for start in 0..2 {
                let digits = &run[start..];
                if let Ok(bytes) = hex::decode(&digits[..digits.len() - digits.len() % 2]) {
                    readings(&bytes, &mut out);
                }
            }
        }
        let compact: String = layer.chars().filter(|c| !c.is_whitespace()).collect();
        // Each alphabet's runs, decoded by its own engine at all four alignments.
        for (engine, extra) in [(&STANDARD_NO_PAD, "+/"), (&URL_SAFE_NO_PAD, "-_")] {
            let in_alphabet = |c: char| c.is_ascii_alphanumeric() || extra.contains(c);
            for run in compact
                .split(|c: char| !in_alphabet(c))
                .filter(|r| r.len() >= 8)
            {
                // A run of letters and digits only is read once, by the standard alphabet.
                if extra == "-_" && !run.contains(['-', '_']) {
                    continue;
                }
                for start in 0..4.min(run.len()) {
                    let tail = &run[start..];
                    if let Ok(bytes) = engine.decode(&tail[..tail.len() - tail.len() % 4]) {
                        readings(&bytes, &mut out);
                    }
                }
            }
        }
        out.push(folded);
    }
    out
}

/// Why `text` holds one of `needles`, if it does: the first reason found.
pub fn find(text: &str, needles: &[Needle]) -> Option<String> {
    for view in views(text) {
        for needle in needles {
            if let Some(why) = needle.found_in(&view) {
                return Some(why);
            }
        }
    }
    None
}

/// Like [`find`] on each line of `text` (a log), with the line.
pub fn find_in_lines(text: &str, needles: &[Needle]) -> Option<(String, String)> {
    text.lines().find_map(|line| {
        find(line, needles).map(|why| (why, line.chars().take(600).collect::<String>()))
    })
}
