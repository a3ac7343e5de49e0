//! The terminal's API token from AWS Secrets Manager (feature `aws`), read with the gate's
//! generic fetch (`gate_lambda::secrets`: by ARN, once per cold start, errors naming the ARN,
//! never the value).
//!
//! In the cloud the token lives in a Secrets Manager secret whose ARN the template passes as
//! `TERMINAL_API_TOKEN_SECRET_ARN` (template parameter `TerminalApiTokenSecretArn`). It is kept in
//! the terminal client for the life of the execution environment; a rotated token is picked up by
//! new environments only. Until then a `401` from the terminal is transient (`crate::terminal`):
//! events wait, nothing is failed.
//!
//! The secret's `SecretString` is the token itself (surrounding whitespace removed,
//! [`ApiToken::parse`]). A binary secret is refused. `TERMINAL_API_TOKEN` is for local runs only
//! (`crate::config`).
//!
//! A stack with several terminals (`TERMINALS`, `crate::terminal::several`) names one secret per
//! terminal (`token_secret_arn`); each is read the same way, once per cold start
//! (`crate::lambda::terminal_router`), and an error names the terminal too.

use aws_sdk_secretsmanager::Client;

use crate::terminal::{ApiToken, TokenError};

/// Reading the token failed: unavailable, not a string, or not a usable token
/// (`Unusable { problem: TokenError }`). The messages name the secret's ARN, never the value.
pub type SecretError = gate_lambda::SecretError<TokenError>;

/// Reads the token from the secret `arn` (its current version, `AWSCURRENT`). Call it once per
/// cold start and keep the result.
///
/// # Errors
/// A [`SecretError`]; none of them holds the value.
pub async fn fetch_api_token(client: &Client, arn: &str) -> Result<ApiToken, SecretError> {
    gate_lambda::fetch_secret(client, arn, ApiToken::parse).await
}
