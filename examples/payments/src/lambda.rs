//! The payments integration's Lambda wiring: its own variables ([`PaymentsConfig`]) and its
//! [`build`], for `gate_lambda::run_consumer(build)` and `run_reconciler(build)` (`src/bin`).
//!
//! | variable | meaning |
//! | --- | --- |
//! | `PAYMENTS_API_URL` | the API's base URL, `https://` (`http://` only to a loopback host: local runs) |
//! | `PAYMENTS_KEY_SECRET_ARN` | the Secrets Manager secret whose `SecretString` is the API key |
//!
//! The gate's own variables are `gate_lambda::LambdaConfig`'s (docs/DEPLOYING.md),
//! `INTEGRATION_NAME` required (the template sets it, `invoice-charges` by default); the key
//! retention is the API's, 24 hours ([`crate::KEY_RETENTION_MS`]), whatever
//! `SERVER_KEY_RETENTION_SECONDS` says.

use gate_lambda::{fetch_secret_string, Env, Error, IntegrationConfig, LambdaConfig};
use gate_lambda::{SdkConfig, SecretsClient};

use crate::{Payments, KEY_RETENTION_MS};

/// The payments integration's variables (module docs).
#[derive(Debug, Clone)]
pub struct PaymentsConfig {
    /// `PAYMENTS_API_URL`.
    pub url: String,
    /// `PAYMENTS_KEY_SECRET_ARN`.
    pub secret: String,
}

impl IntegrationConfig for PaymentsConfig {
    fn from_env(env: &Env<'_>, lambda: &mut LambdaConfig) -> Self {
        lambda.reconciler.key_retention_ms = KEY_RETENTION_MS;
        let url = env.base_url("PAYMENTS_API_URL").unwrap_or_default();
        let secret = env
            .secret_arn("PAYMENTS_KEY_SECRET_ARN")
            .unwrap_or_default();
        Self { url, secret }
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
    let key = fetch_secret_string(&SecretsClient::new(&aws), &config.secret).await?;
    let (url, timeout) = (config.url, std::time::Duration::from_secs(10));
    let http = gate_http::builder("payments/0.1")
        .timeout(timeout)
        .build()?;
    Ok(Payments { url, key, http })
}
