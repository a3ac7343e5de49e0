//! DynamoDB requests counted by the test kit's SDK interceptor ([`CallRecorder`]: every HTTP
//! attempt, retries included), and the SDK client for moto built with it.

use aws_config::retry::RetryConfig;
use aws_config::stalled_stream_protection::StalledStreamProtectionConfig;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_dynamodb::config::Credentials;
pub use gate_testkit::CallRecorder;

/// A DynamoDB client for moto at `endpoint` (region `eu-west-1`, dummy credentials, standard
/// retries with 3 attempts, as the functions configure them), counting into `counter`.
pub async fn dynamo_client(endpoint: &str, counter: &CallRecorder) -> aws_sdk_dynamodb::Client {
    dynamo_client_with(endpoint, counter, ClientSettings::AsTheFunctions).await
}

/// The SDK client settings the floor is measured with (`gate-bench --handlers floor,...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientSettings {
    /// As the functions build it (`BehaviorVersion::latest()`: stalled-stream protection on; the
    /// SDK's default HTTP client: hyper, idle connections kept 90 s).
    AsTheFunctions,
    /// Stalled-stream protection off.
    NoStalledStreamProtection,
    /// No idle connection kept: a new TCP connection per request.
    NoIdleConnections,
}

/// [`dynamo_client`] with `settings`.
pub async fn dynamo_client_with(
    endpoint: &str,
    counter: &CallRecorder,
    settings: ClientSettings,
) -> aws_sdk_dynamodb::Client {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new("eu-west-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "moto"))
        .retry_config(RetryConfig::standard().with_max_attempts(3));
    match settings {
        ClientSettings::AsTheFunctions => {}
        ClientSettings::NoStalledStreamProtection => {
            loader = loader.stalled_stream_protection(StalledStreamProtectionConfig::disabled());
        }
        ClientSettings::NoIdleConnections => {
            // moto speaks plain HTTP: the SDK's hyper client without TLS, keeping no idle
            // connection.
            loader = loader.http_client(
                aws_smithy_http_client::Builder::new()
                    .pool_max_idle_per_host(0)
                    .build_http(),
            );
        }
    }
    let sdk = loader.load().await;
    let config = aws_sdk_dynamodb::config::Builder::from(&sdk)
        .interceptor(counter.clone())
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}
