//! The request's fingerprint and the `Idempotency-Key` and query as the simulator reads them.

use super::Fingerprint;
use sha2::{Digest, Sha256};

/// SHA-256 over key, method, path and body, NUL-separated so fields cannot run into each other.
pub(super) fn fingerprint(key: &str, method: &str, path: &str, body: &[u8]) -> Fingerprint {
    let mut h = Sha256::new();
    h.update(key.as_bytes());
    h.update([0u8]);
    h.update(method.as_bytes());
    h.update([0u8]);
    h.update(path.as_bytes());
    h.update([0u8]);
    h.update(body);
    h.finalize().into()
}

/// The key from an `Idempotency-Key` value: the test kit's, which its Idempotency-Key server
/// uses too (one parse of a received header for every fake server).
pub use gate_testkit::normalize_key;

/// `a=b&c=d` into decoded pairs (`+` is a space, `%XX` percent-decoded).
pub(super) fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

pub(super) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
