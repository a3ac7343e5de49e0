//! The webhook secrets from AWS Secrets Manager: the secret's `SecretString` is the JSON document
//! `{"active": ["whsec_...", "whsec_..."]}` (`crate::signature::SecretSet::parse_json`). Read at
//! cold start, before the runtime loop (a start that cannot read them fails and is reported, as
//! the consumer's token), and again after a signature no active secret matches, at most once a
//! minute (`crate::handler::SECRETS_REFRESH_INTERVAL_MS`). Errors name the ARN, never a value.

use async_trait::async_trait;
use aws_sdk_secretsmanager::error::DisplayErrorContext;
use aws_sdk_secretsmanager::Client;

use crate::handler::{SecretSource, SecretSourceError};
use crate::signature::SecretSet;

/// The secrets' Secrets Manager secret (its current version, `AWSCURRENT`).
#[derive(Debug, Clone)]
pub struct SecretsManagerSource {
    client: Client,
    arn: String,
}

impl SecretsManagerSource {
    /// The secret `arn`, read through `client`.
    pub fn new(client: Client, arn: impl Into<String>) -> Self {
        Self {
            client,
            arn: arn.into(),
        }
    }
}

#[async_trait]
impl SecretSource for SecretsManagerSource {
    async fn fetch(&self) -> Result<SecretSet, SecretSourceError> {
        let arn = &self.arn;
        let out = self
            .client
            .get_secret_value()
            .secret_id(arn)
            .send()
            .await
            .map_err(|e| {
                SecretSourceError(format!(
                    "GetSecretValue on {arn}: {}",
                    DisplayErrorContext(&e)
                ))
            })?;
        let raw = out.secret_string().ok_or_else(|| {
            SecretSourceError(format!(
                "secret {arn} has no SecretString (binary secrets are not supported)"
            ))
        })?;
        SecretSet::parse_json(raw).map_err(|e| {
            SecretSourceError(format!(
                "secret {arn} does not hold usable webhook secrets: {e}"
            ))
        })
    }
}
