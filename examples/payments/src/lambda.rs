//! The payments integration's Lambda wiring: its own variables ([`PaymentsConfig`]) and its
//! [`build`], for `gate::lambda::run_consumer(build)` and `run_reconciler(build)` (`src/bin`).
//!
//! | variable | meaning |
//! | --- | --- |
//! | `PAYMENTS_API_URL` | the API's base URL, `https://` (`http://` only for a loopback host: local runs) |
//! | `PAYMENTS_API_KEY_SECRET_ARN` | the Secrets Manager secret whose `SecretString` is the API key |
//!
//! The gate's own variables are `gate::lambda::LambdaConfig`'s (docs/DEPLOYING.md); the key
//! retention is the API's, 24 hours ([`crate::KEY_RETENTION_MS`]), whatever
//! `TERMINAL_KEY_RETENTION_SECONDS` says.

use gate::lambda::{fetch_secret_string, secret_arn_valid, Env, Error, IntegrationConfig};
use gate::lambda::{LambdaConfig, SdkConfig, SecretsClient};

use crate::{Payments, KEY_RETENTION_MS};

/// The payments integration's variables (module docs).
#[derive(Debug, Clone)]
pub struct PaymentsConfig {
    /// `PAYMENTS_API_URL`.
    pub api_url: String,
    /// `PAYMENTS_API_KEY_SECRET_ARN`.
    pub api_key_secret_arn: String,
}

impl IntegrationConfig for PaymentsConfig {
    const DEFAULT_NAME: Option<&'static str> = Some("invoice-charges");

    fn from_env(env: &Env<'_>, lambda: &mut LambdaConfig) -> Self {
        lambda.reconciler.key_retention_ms = KEY_RETENTION_MS;
        let api_url = env.required("PAYMENTS_API_URL").unwrap_or_default();
        let local = ["http://127.0.0.1", "http://localhost"]
            .iter()
            .any(|p| api_url.starts_with(p));
        if !api_url.is_empty() && !api_url.starts_with("https://") && !local {
            env.problem("PAYMENTS_API_URL", "must be an https:// URL");
        }
        let api_key_secret_arn = env
            .required("PAYMENTS_API_KEY_SECRET_ARN")
            .unwrap_or_default();
        if !api_key_secret_arn.is_empty() && !secret_arn_valid(&api_key_secret_arn) {
            env.problem(
                "PAYMENTS_API_KEY_SECRET_ARN",
                "not the full ARN of a Secrets Manager secret",
            );
        }
        Self {
            api_url,
            api_key_secret_arn,
        }
    }

    /// One charge takes at most the client's 10 s timeout.
    fn call_timeout_ms(&self) -> i64 {
        10_000
    }
}

/// The integration from its configuration: the API key read once from Secrets Manager.
///
/// # Errors
/// The secret cannot be read, or the HTTP client cannot be built.
pub async fn build(config: PaymentsConfig, aws: SdkConfig) -> Result<Payments, Error> {
    let secrets = SecretsClient::new(&aws);
    let api_key = fetch_secret_string(&secrets, &config.api_key_secret_arn).await?;
    Ok(Payments::new(config.api_url, api_key)?)
}
