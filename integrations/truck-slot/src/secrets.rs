//! The terminal's API token from AWS Secrets Manager (feature `aws`).
//!
//! In the cloud the token lives in a Secrets Manager secret whose ARN the template passes as
//! `TERMINAL_API_TOKEN_SECRET_ARN` (template parameter `TerminalApiTokenSecretArn`). Each function
//! reads it **once per cold start**, before the runtime loop, and keeps it in the terminal client
//! for the life of the execution environment: no call per invocation, and no start without a token
//! (a cold start that cannot read it stops with an error, which Lambda reports and retries).
//!
//! The consequence of caching: a rotated token is picked up by new execution environments only.
//! Rotate with an overlap (the terminal accepts the old and the new token for a while), or update
//! the functions' configuration after rotating, which replaces every environment. Until then a
//! `401` from the terminal is transient (`crate::terminal`): events wait, nothing is failed.
//!
//! The secret's `SecretString` is the token itself (surrounding whitespace removed). A binary
//! secret is refused. `TERMINAL_API_TOKEN` is for local runs only (`crate::config`).
//!
//! A stack with several terminals (`TERMINALS`, `crate::terminal::several`) names one secret per terminal
//! (`token_secret_arn`); each is read the same way, once per cold start
//! (`crate::lambda::terminal_router`), and an error names the terminal too.

use aws_sdk_secretsmanager::error::DisplayErrorContext;
use aws_sdk_secretsmanager::Client;

use crate::terminal::{ApiToken, TokenError};

/// Reading the token failed. The messages name the secret's ARN and what went wrong, never the
/// value.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
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
    /// The `SecretString` is not a usable token.
    #[error("secret {arn} does not hold a usable token: {problem}")]
    BadToken {
        /// The secret's ARN.
        arn: String,
        /// What is wrong, without the value.
        problem: TokenError,
    },
}

/// Reads the token from the secret `arn` (its current version, `AWSCURRENT`). Call it once per
/// cold start and keep the result.
///
/// # Errors
/// A [`SecretError`]; none of them holds the value.
pub async fn fetch_api_token(client: &Client, arn: &str) -> Result<ApiToken, SecretError> {
    let out = client
        .get_secret_value()
        .secret_id(arn)
        .send()
        .await
        .map_err(|e| SecretError::Unavailable {
            arn: arn.to_string(),
            detail: DisplayErrorContext(&e).to_string(),
        })?;
    let Some(raw) = out.secret_string() else {
        return Err(SecretError::NotAString {
            arn: arn.to_string(),
        });
    };
    ApiToken::parse(raw).map_err(|problem| SecretError::BadToken {
        arn: arn.to_string(),
        problem,
    })
}
