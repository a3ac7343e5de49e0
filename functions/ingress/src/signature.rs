//! Standard Webhooks signatures (<https://www.standardwebhooks.com/>, spec
//! `standard-webhooks.md`, "Verifying webhook authenticity"): the sender signs
//! `{webhook-id}.{webhook-timestamp}.{body}` with HMAC-SHA256 under a shared secret and sends
//! `webhook-signature: v1,{base64 of the 32-byte MAC}`; during a rotation it signs with every
//! secret it holds and sends the signatures space-separated (`v1,AAA= v1,BBB=`). A request is
//! authentic when **any** `v1` signature in the header matches the MAC under **any** active
//! secret; unknown versions (`v1a,` asymmetric signatures) are ignored. `webhook-timestamp` is
//! integer epoch **seconds** and must lie within [`TOLERANCE_S`] (5 minutes) of the receiver's
//! clock, either way (replay protection).
//!
//! Secrets are written `whsec_` + standard base64 of 24 to 64 random bytes (the spec's range);
//! the prefix is optional on input. [`WebhookSecret`] and [`SecretSet`] never print a key:
//! `Debug` shows only how many bytes or secrets there are.
//!
//! Our own verifier, not the `standardwebhooks` crate (1.0.1): that verifies against the system
//! clock only (`OffsetDateTime::now_utc()` inside `verify`), so neither the boundary tests (300 s
//! and 301 s old) nor the simulator (simulated time) could use it, and it pulls a second base64
//! and `time` in. The scheme is a few lines over RustCrypto's `hmac` and `sha2`, comparing in
//! constant time (`Mac::verify_slice`); the crate is a dev-dependency, for the cross-check tests.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The header with the message's id (the sender's, the same on every retry of one webhook).
pub const HEADER_ID: &str = "webhook-id";
/// The header with the signing time, integer epoch seconds.
pub const HEADER_TIMESTAMP: &str = "webhook-timestamp";
/// The header with one or more space-separated signatures `v1,{base64}`.
pub const HEADER_SIGNATURE: &str = "webhook-signature";

/// How far `webhook-timestamp` may lie from the receiver's clock, either way, in seconds (the
/// spec's 5 minutes).
pub const TOLERANCE_S: i64 = 5 * 60;

/// The optional prefix of a written secret.
pub const SECRET_PREFIX: &str = "whsec_";
/// The shortest secret the spec allows, bytes.
pub const MIN_SECRET_BYTES: usize = 24;
/// The longest secret the spec allows, bytes.
pub const MAX_SECRET_BYTES: usize = 64;
/// The most active secrets at once (the old and the new during a rotation need two).
pub const MAX_ACTIVE_SECRETS: usize = 10;
/// The most signatures read from one `webhook-signature` header; the rest are ignored (a sender
/// rotating secrets sends two or three).
pub const MAX_SIGNATURES: usize = 16;
/// The longest accepted `webhook-id`, characters.
pub const MAX_WEBHOOK_ID_CHARS: usize = 256;

/// The signature version this verifier checks (symmetric HMAC-SHA256).
const VERSION: &str = "v1";

type HmacSha256 = Hmac<Sha256>;

/// A written secret that cannot be used. The messages never quote the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretFormatError {
    /// Not base64 (after the optional `whsec_` prefix).
    #[error("a secret is not base64 after its optional whsec_ prefix")]
    NotBase64,
    /// Decoded to fewer than 24 or more than 64 bytes.
    #[error("a secret decodes to {0} bytes; Standard Webhooks secrets have 24 to 64")]
    BadLength(usize),
    /// The secrets document is not the JSON this module reads.
    #[error(
        "the secrets are not a JSON object {{\"active\": [\"whsec_...\", ...]}} with 1 to 10 secrets: {0}"
    )]
    BadDocument(String),
}

/// One shared signing secret: the key bytes and the HMAC state keyed with them (computed once).
/// `Debug` shows the key's length only.
#[derive(Clone)]
pub struct WebhookSecret {
    key: Vec<u8>,
    keyed: HmacSha256,
}

impl PartialEq for WebhookSecret {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for WebhookSecret {}

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WebhookSecret(<redacted {} bytes>)", self.key.len())
    }
}

impl WebhookSecret {
    /// Parses a written secret: `whsec_` (optional) + standard base64 of 24 to 64 bytes.
    ///
    /// # Errors
    /// [`SecretFormatError::NotBase64`] or [`SecretFormatError::BadLength`].
    pub fn parse(written: &str) -> Result<Self, SecretFormatError> {
        let written = written.trim();
        let encoded = written.strip_prefix(SECRET_PREFIX).unwrap_or(written);
        let key = STANDARD
            .decode(encoded)
            .map_err(|_| SecretFormatError::NotBase64)?;
        Self::from_bytes(key)
    }

    /// A secret from its key bytes (24 to 64).
    ///
    /// # Errors
    /// [`SecretFormatError::BadLength`].
    pub fn from_bytes(key: Vec<u8>) -> Result<Self, SecretFormatError> {
        if !(MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&key.len()) {
            return Err(SecretFormatError::BadLength(key.len()));
        }
        // HMAC takes a key of any length (RFC 2104); the error is kept for the type's sake.
        let keyed = HmacSha256::new_from_slice(&key)
            .map_err(|_| SecretFormatError::BadLength(key.len()))?;
        Ok(Self { key, keyed })
    }

    /// The secret written as the spec writes it, `whsec_{base64}` (for the local signer and
    /// tests; a function never prints it).
    pub fn to_written(&self) -> String {
        format!("{SECRET_PREFIX}{}", STANDARD.encode(&self.key))
    }

    /// The MAC state after `{id}.{timestamp}.{body}`.
    fn mac(&self, id: &str, timestamp: &str, body: &[u8]) -> HmacSha256 {
        let mut mac = self.keyed.clone();
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }

    /// The signature `v1,{base64}` of `body` sent as `id` at `timestamp` (epoch seconds).
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let tag = self
            .mac(id, &timestamp.to_string(), body)
            .finalize()
            .into_bytes();
        format!("{VERSION},{}", STANDARD.encode(tag))
    }
}

/// The active secrets, in the order written (1 to [`MAX_ACTIVE_SECRETS`]). `Debug` shows the
/// count only.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretSet(Vec<WebhookSecret>);

impl std::fmt::Debug for SecretSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretSet(<{} redacted secrets>)", self.0.len())
    }
}

/// The secrets document as stored (Secrets Manager `SecretString`, or `WEBHOOK_SECRETS` locally).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretsDocument {
    active: Vec<String>,
}

impl SecretSet {
    /// A set of 1 to [`MAX_ACTIVE_SECRETS`] secrets.
    ///
    /// # Errors
    /// [`SecretFormatError::BadDocument`] for none or too many.
    pub fn new(secrets: Vec<WebhookSecret>) -> Result<Self, SecretFormatError> {
        if secrets.is_empty() || secrets.len() > MAX_ACTIVE_SECRETS {
            return Err(SecretFormatError::BadDocument(format!(
                "{} secrets",
                secrets.len()
            )));
        }
        Ok(Self(secrets))
    }

    /// Parses the secrets document: `{"active": ["whsec_...", "whsec_..."]}`, every listed secret
    /// accepted for verification (list the old and the new during a rotation).
    ///
    /// # Errors
    /// [`SecretFormatError`]; the message never quotes a secret (a JSON error is described by
    /// its position only).
    pub fn parse_json(text: &str) -> Result<Self, SecretFormatError> {
        let document: SecretsDocument = serde_json::from_str(text).map_err(|e| {
            SecretFormatError::BadDocument(format!(
                "line {} column {} ({:?})",
                e.line(),
                e.column(),
                e.classify()
            ))
        })?;
        let secrets = document
            .active
            .iter()
            .map(|s| WebhookSecret::parse(s))
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(secrets)
    }

    /// The secrets, in the order written.
    pub fn secrets(&self) -> &[WebhookSecret] {
        &self.0
    }

    /// How many secrets are active.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true (a set holds at least one secret); for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The `webhook-signature` header a sender holding `secrets` sends: one `v1,` signature per
/// secret, space-separated.
pub fn signature_header(
    secrets: &[WebhookSecret],
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    secrets
        .iter()
        .map(|s| s.sign(id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Why a request's signature headers were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// One of the three headers is missing or empty (named).
    #[error("header {0} is missing")]
    MissingHeader(&'static str),
    /// `webhook-id` is longer than [`MAX_WEBHOOK_ID_CHARS`] or has characters outside
    /// `A-Z a-z 0-9 _ - . :` (the id goes into logs and a message attribute).
    #[error("webhook-id must be 1 to 256 characters of A-Z, a-z, 0-9, '_', '-', '.', ':'")]
    InvalidWebhookId,
    /// `webhook-timestamp` is not integer epoch seconds.
    #[error("webhook-timestamp is not integer epoch seconds")]
    InvalidTimestamp,
    /// `webhook-timestamp` lies more than [`TOLERANCE_S`] from the receiver's clock;
    /// `skew_s` is receiver time minus timestamp (positive: old, negative: ahead), seconds.
    #[error("webhook-timestamp is {} s {} the receiver's clock (tolerance {TOLERANCE_S} s)", .skew_s.abs(), if *.skew_s > 0 { "behind" } else { "ahead of" })]
    StaleTimestamp {
        /// Receiver time minus the timestamp, seconds.
        skew_s: i64,
    },
    /// No `v1` signature matches under any active secret.
    #[error("no signature in webhook-signature matches an active secret")]
    InvalidSignature,
}

/// A verified request: which active secret matched (index into [`SecretSet::secrets`]; during a
/// rotation this tells whether the sender has moved to the new secret).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified {
    /// The index of the first active secret a signature matched.
    pub secret_index: usize,
}

/// The three signature headers of a request, as received (absent: `None`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SignatureHeaders<'a> {
    /// `webhook-id`.
    pub id: Option<&'a str>,
    /// `webhook-timestamp`.
    pub timestamp: Option<&'a str>,
    /// `webhook-signature`.
    pub signature: Option<&'a str>,
}

/// Whether `id` is a usable `webhook-id` (see [`VerifyError::InvalidWebhookId`]).
pub fn valid_webhook_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_WEBHOOK_ID_CHARS
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

/// Checks the headers' presence and form and the timestamp's freshness at `now_s` (epoch
/// seconds), in that order, without the MAC; returns the parsed timestamp.
///
/// # Errors
/// [`VerifyError::MissingHeader`], [`VerifyError::InvalidWebhookId`],
/// [`VerifyError::InvalidTimestamp`], [`VerifyError::StaleTimestamp`].
pub fn check_headers(headers: &SignatureHeaders<'_>, now_s: i64) -> Result<i64, VerifyError> {
    fn present<'a>(v: Option<&'a str>, name: &'static str) -> Result<&'a str, VerifyError> {
        v.filter(|v| !v.trim().is_empty())
            .ok_or(VerifyError::MissingHeader(name))
    }
    let id = present(headers.id, HEADER_ID)?;
    let timestamp = present(headers.timestamp, HEADER_TIMESTAMP)?;
    present(headers.signature, HEADER_SIGNATURE)?;
    if !valid_webhook_id(id) {
        return Err(VerifyError::InvalidWebhookId);
    }
    // Digits only (no sign, no spaces, no fraction), at most 12 of them (beyond the year 33,000).
    if timestamp.is_empty()
        || timestamp.len() > 12
        || !timestamp.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(VerifyError::InvalidTimestamp);
    }
    let ts: i64 = timestamp
        .parse()
        .map_err(|_| VerifyError::InvalidTimestamp)?;
    let skew_s = now_s.saturating_sub(ts);
    if skew_s.abs() > TOLERANCE_S {
        return Err(VerifyError::StaleTimestamp { skew_s });
    }
    Ok(ts)
}

/// Verifies a request: [`check_headers`] at `now_s` (epoch seconds), then the signatures of
/// `body` (the raw bytes as received) against every active secret. The MAC covers the
/// timestamp exactly as sent.
///
/// # Errors
/// A [`VerifyError`]; a request that fails several ways gets the first in the order above.
pub fn verify(
    secrets: &SecretSet,
    headers: &SignatureHeaders<'_>,
    body: &[u8],
    now_s: i64,
) -> Result<Verified, VerifyError> {
    check_headers(headers, now_s)?;
    let (Some(id), Some(timestamp), Some(signature)) =
        (headers.id, headers.timestamp, headers.signature)
    else {
        return Err(VerifyError::InvalidSignature);
    };
    let candidates: Vec<Vec<u8>> = signature
        .split(' ')
        .filter_map(|entry| entry.split_once(','))
        .filter(|(version, _)| *version == VERSION)
        .filter_map(|(_, b64)| STANDARD.decode(b64).ok())
        .take(MAX_SIGNATURES)
        .collect();
    for (secret_index, secret) in secrets.secrets().iter().enumerate() {
        let mac = secret.mac(id, timestamp, body);
        // Constant-time comparison (`verify_slice`, RustCrypto `subtle`); a tag of the wrong
        // length is refused by it too.
        if candidates
            .iter()
            .any(|tag| mac.clone().verify_slice(tag).is_ok())
        {
            return Ok(Verified { secret_index });
        }
    }
    Err(VerifyError::InvalidSignature)
}

#[cfg(test)]
mod tests;
