//! The job client's Lambda wiring: its one variable ([`JobServerConfig`]) and its [`build`], for
//! `gate_lambda::run_consumer(build)` and `run_reconciler(build)` (`src/bin`).
//!
//! | variable | meaning |
//! | --- | --- |
//! | `JOB_SERVER_URL` | the job server's base URL, `https://` (`http://` only to a loopback host: local runs) |
//!
//! The gate's own variables are `gate_lambda::LambdaConfig`'s (docs/DEPLOYING.md).

use gate_lambda::{Env, Error, IntegrationConfig, LambdaConfig, SdkConfig};

use crate::JobClient;

/// The job client's variables (module docs).
#[derive(Debug, Clone)]
pub struct JobServerConfig {
    /// `JOB_SERVER_URL`.
    pub url: String,
}

impl IntegrationConfig for JobServerConfig {
    const DEFAULT_NAME: Option<&'static str> = Some("jobs");

    fn from_env(env: &Env<'_>, _lambda: &mut LambdaConfig) -> Self {
        let url = env.base_url("JOB_SERVER_URL").unwrap_or_default();
        Self { url }
    }

    /// One call takes at most the client's 5 s timeout.
    fn call_timeout_ms(&self) -> i64 {
        5_000
    }
}

/// The integration from its configuration.
///
/// # Errors
/// The HTTP client cannot be built.
pub async fn build(config: JobServerConfig, _aws: SdkConfig) -> Result<JobClient, Error> {
    Ok(JobClient::new(config.url)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gate_lambda::{fixed_env, Config};

    const GATE: [(&str, &str); 3] = [
        ("IDEMPOTENCY_TABLE", "idempotency"),
        ("BOOKINGS_TABLE", "jobs"),
        (
            "MANUAL_QUEUE_URL",
            "https://sqs.eu-west-1.amazonaws.com/123456789012/manual",
        ),
    ];

    #[test]
    fn the_server_url_is_read_and_checked() {
        let mut vars = GATE.to_vec();
        vars.push(("JOB_SERVER_URL", "https://jobs.example"));
        let config = Config::<JobServerConfig>::from_env(fixed_env(&vars)).unwrap();
        assert_eq!(config.integration.url, "https://jobs.example");
        assert_eq!(config.lambda.gate.integration, "jobs");

        let mut vars = GATE.to_vec();
        vars.push(("JOB_SERVER_URL", "http://jobs.example"));
        let err = Config::<JobServerConfig>::from_env(fixed_env(&vars)).unwrap_err();
        assert_eq!(err.variables(), ["JOB_SERVER_URL"]);
    }
}
