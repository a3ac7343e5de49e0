//! The forms a hostile server echoes a secret in: one per form number, [`FORMS`] in all.

use super::*;

pub(crate) fn b64(bytes: impl AsRef<[u8]>) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub(crate) fn b64url(bytes: impl AsRef<[u8]>) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

pub(crate) fn spaced_hex(text: &str, sep: &str) -> String {
    text.bytes()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(sep)
}

pub(crate) fn fullwidth(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '!'..='~' => char::from_u32(u32::from(c) - 0x21 + 0xFF01).unwrap_or(c),
            c => c,
        })
        .collect()
}

pub(crate) fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).expect("in memory");
    e.finish().expect("in memory")
}

/// `secret` (letters, `-`, letters or digits, ...) in its other spellings: mixed case, lower
/// case with `_`, and a separator between every character.
pub(crate) fn spellings(secret: &str) -> [String; 3] {
    let mut mixed = String::new();
    for (i, c) in secret.chars().enumerate() {
        mixed.extend(if i == 0 {
            c.to_uppercase().collect::<Vec<_>>()
        } else {
            c.to_lowercase().collect()
        });
    }
    let lower = secret.to_lowercase().replace('-', "_");
    let every: String = secret
        .chars()
        .filter(|c| *c != '-')
        .map(String::from)
        .collect::<Vec<_>>()
        .join("-");
    [mixed, lower, every]
}

/// Form `n` of `secret` (`request`: the request body the terminal received), as answer bytes.
pub(crate) fn form(n: usize, secret: &str, request: &[u8]) -> Vec<u8> {
    let [mixed, lower, every] = spellings(secret);
    let (head, tail) = secret.split_at(secret.len() / 2);
    let text = match n {
        0 => secret.to_string(),
        1 => secret.to_lowercase(),
        2 => mixed.clone(),
        3 => secret.replace('-', ""),
        4 => lower.clone(),
        5 => every.clone(),
        6 => fullwidth(secret),
        7 => secret
            .chars()
            .map(String::from)
            .collect::<Vec<_>>()
            .join("\u{200b}"),
        8 => secret
            .chars()
            .map(|c| format!("\\u{:04x}", c as u32))
            .collect(),
        9 => secret.bytes().map(|b| format!("\\x{b:02X}")).collect(),
        10 => secret.bytes().map(|b| format!("\\{b:x} ")).collect(),
        11 => secret.bytes().map(|b| format!("%{b:02X}")).collect(),
        12 => secret.bytes().map(|b| format!("%25{b:02X}")).collect(),
        13 => secret.chars().map(|c| format!("&#{};", c as u32)).collect(),
        14 => secret.chars().map(|c| format!("&#{}", c as u32)).collect(),
        15 => secret
            .chars()
            .map(|c| format!("&#x{:x};", c as u32))
            .collect(),
        16 => secret.replace('-', "&minus;"),
        17 => secret.replace('-', "&ndash").to_uppercase(),
        18 => b64(secret),
        19 => format!("{} {} {}", b64(&mixed), b64(&lower), b64(&every)),
        20 => b64url(request),
        21 => b64(request)
            .as_bytes()
            .chunks(76)
            .map(|l| String::from_utf8_lossy(l).into_owned())
            .collect::<Vec<_>>()
            .join("\r\n"),
        22 => hex::encode(&mixed),
        23 => spaced_hex(&lower, ":"),
        24 => format!("https://evil.example/cb?pin={secret}&other={}", every),
        25 => format!("<p>{head}<b>{tail}</b></p>"),
        26 => json!({"echo": {"pin": secret, "request": String::from_utf8_lossy(request)}})
            .to_string(),
        27 => json!({"first": head, "rest": tail}).to_string(),
        28 => format!("{}...", &secret[..secret.len() - 2]),
        29 => secret
            .chars()
            .map(|c| format!("{c}\u{1b}[0m"))
            .collect::<String>(),
        30 => format!("SLOT-{}", hex::encode(&mixed)),
        31 => format!("SLOT-{}", b64(&lower).trim_end_matches('=')),
        32 => {
            // 1 MB: the secret first and throughout.
            let mut big = format!("{secret} ").repeat(16);
            big.push_str(&"x".repeat(1 << 20));
            big.push_str(secret);
            big
        }
        33 => {
            // Binary: bytes around the secret, no valid UTF-8 on either side.
            let mut bin: Vec<u8> = (0..=255u8).rev().collect();
            bin.extend_from_slice(secret.as_bytes());
            bin.extend((0..=255u8).rev());
            return bin;
        }
        34 => {
            // UTF-16 LE then UTF-32 BE.
            let mut out: Vec<u8> = secret.encode_utf16().flat_map(u16::to_le_bytes).collect();
            out.extend(secret.chars().flat_map(|c| (c as u32).to_be_bytes()));
            return out;
        }
        35 => return gzip(format!("release {secret} locked").as_bytes()),
        _ => unreachable!("{FORMS} forms"),
    };
    text.into_bytes()
}

/// A mode's answer text: the form of the PIN and the form of the token.
pub(crate) fn both(n: usize, request: &[u8], token: &str) -> Vec<u8> {
    let mut out = form(n, PIN, request);
    out.extend_from_slice(b" | ");
    out.extend(form(n, token, request));
    out
}

pub(crate) fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
