//! The webhook secrets from AWS Secrets Manager: the secret's `SecretString` is the JSON document
//! `{"active": ["whsec_...", "whsec_..."]}` (`crate::signature::SecretSet::parse_json`). Read at
//! cold start, before the runtime loop (a start that cannot read them fails and is reported, as
//! the consumer's token), and again after a signature no active secret matches, at most once a
//! minute (`crate::handler::SECRETS_REFRESH_INTERVAL_MS`), with the gate's generic fetch
//! (`gate_lambda::fetch_secret`). Errors name the ARN, never a value.

use async_trait::async_trait;
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
        gate_lambda::fetch_secret(&self.client, &self.arn, SecretSet::parse_json)
            .await
            .map_err(|e| SecretSourceError(e.to_string()))
    }
}
