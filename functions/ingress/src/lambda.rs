//! The Lambda wiring: JSON logs (`gate_lambda::logging`), configuration, the SDK clients and the secrets
//! once per cold start, then one [`Ingress::answer_event`] per API Gateway event (read by the
//! ingress itself, [`crate::read`]), its counters written as the invocation's own EMF documents
//! ([`write_counters`]). A start that fails is reported to the Runtime API
//! (`gate_lambda::init_error::start`) and the process exits, as the other functions do. The loop
//! is `lambda_runtime::run_concurrent`: several requests at once in a Lambda Managed Instances
//! environment (`gate_lambda::concurrency`), each with its own answer, log line and documents.

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::apigw::ApiGatewayV2httpResponse;
use gate::clock::{Clock, SystemClock};
use gate_lambda::emf::{self, Emf};
use gate_lambda::init_error::start;
use lambda_runtime::{service_fn, Error, LambdaEvent};

use crate::config::{IngressConfig, SecretsConfig};
use crate::handler::{counters, Handled, Ingress, SecretSource, Secrets, METRIC_REASON_DIMENSION};
use crate::secrets::SecretsManagerSource;
use crate::sqs::SqsNotificationQueue;

/// The SDK configuration loader: standard retries (3 attempts) and timeouts that keep one
/// request well inside API Gateway's 30 s integration timeout and the function's timeout
/// (template: 10 s), so that a queue that does not answer becomes a `503` the sender retries, not
/// a gateway timeout. `AWS_ENDPOINT_URL` is honoured (local runs against moto).
pub fn aws_loader() -> aws_config::ConfigLoader {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(3))
        .timeout_config(
            aws_config::timeout::TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(1))
                .operation_attempt_timeout(Duration::from_secs(2))
                .operation_timeout(Duration::from_secs(6))
                .build(),
        )
}

/// Builds the ingress from `config` with the SDK configuration `aws` ([`aws_loader`]): the SQS
/// client and, for `WEBHOOK_SECRET_ARN`, the secrets read from Secrets Manager now.
///
/// # Errors
/// The secrets cannot be read or are not usable (the message names the ARN, never a value).
pub async fn build(config: &IngressConfig, aws: &aws_config::SdkConfig) -> Result<Ingress, Error> {
    let queue = SqsNotificationQueue::new(aws_sdk_sqs::Client::new(aws), &config.queue_url);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let secrets = match &config.secrets {
        SecretsConfig::Local(set) => Secrets::fixed(set.clone()),
        SecretsConfig::SecretsManager { arn } => {
            let source = Arc::new(SecretsManagerSource::new(
                aws_sdk_secretsmanager::Client::new(aws),
                arn,
            ));
            let set = source.fetch().await.map_err(|e| Error::from(e.0))?;
            tracing::info!(secret = %arn, active_secrets = set.len(), "webhook secrets read from Secrets Manager");
            Secrets::refreshable(set, clock.now_ms(), source)
        }
    };
    Ok(Ingress {
        secrets,
        queue: Arc::new(queue),
        clock,
    })
}

/// The function's whole life.
///
/// # Errors
/// A failed start (reported first), or the runtime's own errors.
pub async fn run() -> Result<(), Error> {
    gate_lambda::logging::init();
    let (config, ingress) = start(async {
        let config = IngressConfig::from_env(|k| std::env::var(k).ok())?;
        let ingress = build(&config, &aws_loader().load().await).await?;
        Ok((config, ingress))
    })
    .await?;
    tracing::info!(
        integration = %config.integration,
        invocations_at_once = gate_lambda::invocations_at_once(|k| std::env::var(k).ok()),
        "ingress starting"
    );
    let (ingress, emf) = (Arc::new(ingress), Arc::new(Emf::new(&config.integration)));
    // The event as any JSON: the ingress reads it itself (`crate::read`), so a header the typed
    // deserialiser refuses is a counted `400`, not a runtime error quoting it.
    lambda_runtime::run_concurrent(service_fn(move |event: LambdaEvent<serde_json::Value>| {
        let (ingress, emf) = (ingress.clone(), emf.clone());
        async move {
            let request_id = event.context.request_id;
            emf.write_cold_start(&request_id, std::io::stdout());
            let handled = ingress.answer_event(event.payload).await;
            write_counters(&emf, &request_id, &handled, std::io::stdout());
            Ok::<ApiGatewayV2httpResponse, Error>(handled.response)
        }
    }))
    .await
}

/// Writes the counters of the request `handled` ([`counters`]) as EMF documents of the invocation
/// `request_id` to `out`: one per dimension set (`Integration`; `Integration` and `Reason`).
pub fn write_counters(
    emf: &Emf,
    request_id: &str,
    handled: &Handled,
    mut out: impl std::io::Write,
) {
    let now_ms = SystemClock.now_ms();
    for (metric, reason, value) in counters(handled) {
        let integration = (gate::signals::DIMENSION, emf.integration());
        let doc = match reason {
            None => emf::document(&[integration], request_id, &[(metric, value)], now_ms),
            Some(reason) => emf::document(
                &[integration, (METRIC_REASON_DIMENSION, reason)],
                request_id,
                &[(metric, value)],
                now_ms,
            ),
        };
        emf.write(&doc, &mut out);
    }
}
