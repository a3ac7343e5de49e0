//! An answer in the gate's own words: its status, its content type (named from a fixed list), its
//! length and a keyed digest of its bytes, and never a character the server wrote. A server echoes
//! what it was sent (the request's secrets among it), so a log line, a `Retry` outcome and a
//! report carry only this ([`crate::effect::AnswerDetail`]'s summary).

use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use super::classify::Answer;

/// The key of [`answer_digest`]: 32 random bytes, drawn once per process (execution
/// environment).
fn digest_key() -> &'static [u8; 32] {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    KEY.get_or_init(rand::random)
}

/// The first 16 hex characters of SHA-256 over a per-process random key and `body`: equal answers
/// within one execution environment show the same digest, so a log tells a repeated answer from
/// varying ones. Keyed, because an answer that echoes the request is otherwise known but for its
/// secret: a plain SHA-256 of it in a log line would let anyone who reads the log try every value
/// of the secret offline.
pub fn answer_digest(body: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(digest_key());
    hasher.update(body);
    hex::encode(&hasher.finalize()[..8])
}

/// The content type in our words: the media types the gate knows by name (RFC 9457's
/// `application/problem+json`, JSON, HTML, plain text, XML), compared case-insensitively without
/// parameters; any other value is "another content type", never quoted (a header is the server's
/// text too).
fn content_type_words(content_type: Option<&str>) -> &'static str {
    let Some(raw) = content_type else {
        return "no content type";
    };
    let essence = raw
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/problem+json" => "application/problem+json",
        "application/json" => "application/json",
        "text/html" => "text/html",
        "text/plain" => "text/plain",
        "application/xml" | "text/xml" => "application/xml",
        e if e.ends_with("+json") => "a JSON content type",
        e if e.ends_with("+xml") => "an XML content type",
        _ => "another content type",
    }
}

/// `"{status} ({content type}, {n} bytes, keyed SHA-256 {digest})"` (`"{status} (no body)"` for an
/// empty one): how an answer is named in every summary, e.g. `"503 (application/problem+json, 88
/// bytes, keyed SHA-256 1f0c9a27d3e4b5a6)"`. `n` counts the bytes read (a client reads up to a
/// bound, `gate_http::MAX_ANSWER_BYTES`).
pub fn describe(answer: &Answer<'_>) -> String {
    if answer.body.is_empty() {
        return format!("{} (no body)", answer.status);
    }
    format!(
        "{} ({}, {} bytes, keyed SHA-256 {})",
        answer.status,
        content_type_words(answer.content_type),
        answer.body.len(),
        answer_digest(answer.body)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_described_without_a_character_of_its_text() {
        let body = br#"{"detail":"hello from the server, PIN 7731"}"#;
        let answer =
            Answer::new(503, body).with_content_type(Some("Application/JSON; charset=utf-8"));
        assert_eq!(
            describe(&answer),
            format!(
                "503 (application/json, {} bytes, keyed SHA-256 {})",
                body.len(),
                answer_digest(body)
            )
        );
        assert_eq!(describe(&Answer::new(204, b"")), "204 (no body)");
        assert_eq!(
            describe(&Answer::new(400, b"x")),
            format!(
                "400 (no content type, 1 bytes, keyed SHA-256 {})",
                answer_digest(b"x")
            )
        );
    }

    #[test]
    fn a_content_type_is_named_from_a_fixed_list_only() {
        for (given, words) in [
            (None, "no content type"),
            (Some("application/problem+json"), "application/problem+json"),
            (Some("application/json"), "application/json"),
            (Some("text/html; charset=UTF-8"), "text/html"),
            (Some("text/plain"), "text/plain"),
            (Some("text/xml"), "application/xml"),
            (Some("application/vnd.api+json"), "a JSON content type"),
            (Some("application/atom+xml"), "an XML content type"),
            (Some("application/x-pin-7731"), "another content type"),
            (Some("\u{1b}[31mred"), "another content type"),
        ] {
            assert_eq!(content_type_words(given), words, "{given:?}");
        }
    }

    #[test]
    fn the_digest_is_keyed_short_and_stable_within_the_process() {
        let body = b"an answer";
        assert_eq!(answer_digest(body), answer_digest(body));
        assert_ne!(answer_digest(body), answer_digest(b"another answer"));
        assert_eq!(answer_digest(body).len(), 16);
        assert!(answer_digest(body).bytes().all(|b| b.is_ascii_hexdigit()));
        // Keyed: not the plain SHA-256 of the answer.
        assert!(!crate::keys::sha256_hex(body).starts_with(&answer_digest(body)));
    }
}
