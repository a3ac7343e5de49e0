//! A secret from AWS Secrets Manager, read by ARN **once per cold start** (before the runtime
//! loop) and kept for the life of the execution environment: no call per invocation, and no start
//! without it (a cold start that cannot read it reports the error, [`super::init_error`]).
//!
//! What the secret is (a bearer token, a set of webhook secrets) is the caller's: it parses the
//! `SecretString` ([`fetch_secret`]). A binary secret is refused. Errors name the secret's ARN
//! and what went wrong, never the value.
//!
//! The consequence of caching: a rotated secret is picked up by new execution environments only.
//! Rotate with an overlap (the server accepts the old and the new value for a while), or update
//! the functions' configuration after rotating, which replaces every environment.

use aws_sdk_secretsmanager::error::DisplayErrorContext;
use aws_sdk_secretsmanager::Client;

/// Reading a secret failed. No variant holds the value; `problem` is the parser's error, which
/// must not quote it either.
#[derive(Debug, thiserror::Error)]
pub enum SecretError<P = std::convert::Infallible> {
    /// `GetSecretValue` failed (no such secret, access denied, KMS, network).
    #[error("GetSecretValue on {arn}: {detail}")]
    Unavailable {
        /// The secret's ARN.
        arn: String,
        /// The SDK's message.
        detail: String,
    },
    /// The secret has no `SecretString` (a binary secret).
    #[error("secret {arn} has no SecretString (binary secrets are not supported)")]
    NotAString {
        /// The secret's ARN.
        arn: String,
    },
    /// The `SecretString` is not what the caller expects.
    #[error("secret {arn} does not hold a usable value: {problem}")]
    Unusable {
        /// The secret's ARN.
        arn: String,
        /// What is wrong, without the value.
        problem: P,
    },
}

pub use gate::secret::SecretString;

/// Reads the `SecretString` of the secret `arn` (its current version, `AWSCURRENT`).
///
/// # Errors
/// [`SecretError::Unavailable`] or [`SecretError::NotAString`]; neither holds the value.
pub async fn fetch_secret_string(client: &Client, arn: &str) -> Result<SecretString, SecretError> {
    let out = client
        .get_secret_value()
        .secret_id(arn)
        .send()
        .await
        .map_err(|e| SecretError::Unavailable {
            arn: arn.to_string(),
            detail: DisplayErrorContext(&e).to_string(),
        })?;
    match out.secret_string() {
        Some(raw) => Ok(SecretString::new(raw)),
        None => Err(SecretError::NotAString {
            arn: arn.to_string(),
        }),
    }
}

/// Reads the secret `arn` ([`fetch_secret_string`]) and parses its text with `parse` (e.g. a
/// token's check, a JSON document's). Call it once per cold start and keep the result.
///
/// # Errors
/// A [`SecretError`]; `parse`'s error as [`SecretError::Unusable`]. None holds the value.
pub async fn fetch_secret<T, P>(
    client: &Client,
    arn: &str,
    parse: impl FnOnce(&str) -> Result<T, P>,
) -> Result<T, SecretError<P>> {
    let text = match fetch_secret_string(client, arn).await {
        Ok(text) => text,
        Err(SecretError::Unavailable { arn, detail }) => {
            return Err(SecretError::Unavailable { arn, detail })
        }
        Err(SecretError::NotAString { arn }) => return Err(SecretError::NotAString { arn }),
        Err(SecretError::Unusable { problem, .. }) => match problem {},
    };
    parse(text.expose()).map_err(|problem| SecretError::Unusable {
        arn: arn.to_string(),
        problem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_string_never_shows() {
        let s = SecretString::new("XYZZY-1");
        assert_eq!(format!("{s:?} {s}"), "SecretString([redacted]) [redacted]");
        assert_eq!(s.expose(), "XYZZY-1");
        let e: SecretError<String> = SecretError::Unusable {
            arn: "arn:x".into(),
            problem: "3 characters".into(),
        };
        assert_eq!(
            e.to_string(),
            "secret arn:x does not hold a usable value: 3 characters"
        );
    }
}
