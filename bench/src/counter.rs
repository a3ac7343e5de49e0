//! DynamoDB requests counted by an SDK interceptor (every HTTP attempt, retries included), and
//! the SDK client for moto built with it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_config::retry::RetryConfig;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Credentials, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;

/// Counts requests per operation name (`PutItem`, `TransactWriteItems`, ...).
#[derive(Debug, Clone, Default)]
pub struct CallCounter {
    calls: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl CallCounter {
    /// The counts so far.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Forgets the counts.
    pub fn reset(&self) {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

impl Intercept for CallCounter {
    fn name(&self) -> &'static str {
        "CallCounter"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let name = cfg
            .load::<Metadata>()
            .map_or_else(|| "?".to_string(), |m| m.name().to_string());
        *self
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name)
            .or_default() += 1;
        Ok(())
    }
}

/// A DynamoDB client for moto at `endpoint` (region `eu-west-1`, dummy credentials, standard
/// retries with 3 attempts, as the functions configure them), counting into `counter`.
pub async fn dynamo_client(endpoint: &str, counter: &CallCounter) -> aws_sdk_dynamodb::Client {
    let sdk = aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new("eu-west-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "moto"))
        .retry_config(RetryConfig::standard().with_max_attempts(3))
        .load()
        .await;
    let config = aws_sdk_dynamodb::config::Builder::from(&sdk)
        .interceptor(counter.clone())
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}
