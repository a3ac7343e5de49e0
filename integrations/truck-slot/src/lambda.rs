//! The truck-slot integration's part of the Lambda wiring (feature `aws`): [`build`] makes
//! [`TruckSlot`] from its configuration ([`crate::config::TerminalConfig`]) at cold start, its
//! terminal client's token read from Secrets Manager once. Everything else (configuration of the
//! gate, init errors, the store, the runtime loops, EMF, the metrics function) is the gate's
//! (`gate_lambda`); each function's `main` is one call:
//!
//! ```no_run
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() -> Result<(), gate_lambda::Error> {
//!     gate_lambda::run_consumer(truck_slot::lambda::build).await
//! }
//! ```

use std::sync::Arc;

use gate_lambda::{Error, SdkConfig};

use crate::config::TerminalConfig;
use crate::terminal::several::{TerminalRouter, TerminalSpec};
use crate::terminal::{HttpTerminal, HttpTerminalConfig, SlotTerminal};
use crate::TruckSlot;

/// Builds the integration from `config`, once per cold start: one terminal's client (its token
/// read from Secrets Manager when `config.token_secret_arn` is set), or the router of several
/// ([`terminal_router`]), with the terminals it books at and each one's policy.
///
/// # Errors
/// If a terminal client cannot be built, or a token cannot be read from Secrets Manager (the
/// message names the secret's ARN, never the value).
pub async fn build(config: TerminalConfig, aws: SdkConfig) -> Result<TruckSlot, Error> {
    let secrets = aws_sdk_secretsmanager::Client::new(&aws);
    let terminal: Arc<dyn SlotTerminal> = if config.terminals.is_empty() {
        let mut terminal_config = config.terminal;
        if let Some(arn) = &config.token_secret_arn {
            // Read once per cold start and kept for the environment's life (`crate::secrets`).
            terminal_config.token = Some(crate::secrets::fetch_api_token(&secrets, arn).await?);
            tracing::info!(secret = %arn, "terminal API token read from Secrets Manager");
        }
        Arc::new(HttpTerminal::new(terminal_config)?)
    } else {
        Arc::new(terminal_router(&config.terminals, &config.terminal, &secrets).await?)
    };
    Ok(TruckSlot::new(terminal, config.known_terminals).with_policies(config.policies))
}

/// The [`TerminalRouter`] of a stack with several terminals (`TERMINALS`,
/// [`crate::terminal::several::http_router`]): each terminal with key support gets its client, its token
/// read from its own secret once, at cold start. A terminal without key support gets no client
/// (the gate never calls it) and its secret, if named, is not read.
///
/// # Errors
/// A secret that cannot be read (the error names the terminal and the secret's ARN, never the
/// value), or a client that cannot be built.
pub async fn terminal_router(
    specs: &[TerminalSpec],
    shared: &HttpTerminalConfig,
    secrets: &aws_sdk_secretsmanager::Client,
) -> Result<TerminalRouter, Error> {
    let mut tokens = std::collections::BTreeMap::new();
    for spec in specs.iter().filter(|s| s.supports_idempotency_key) {
        if let Some(arn) = &spec.token_secret_arn {
            let token = crate::secrets::fetch_api_token(secrets, arn)
                .await
                .map_err(|e| Error::from(format!("terminal {:?}: {e}", spec.code)))?;
            tracing::info!(terminal = %spec.code, secret = %arn, "terminal API token read from Secrets Manager");
            tokens.insert(spec.code.clone(), token);
        }
    }
    Ok(crate::terminal::several::http_router(
        specs, shared, tokens,
    )?)
}
