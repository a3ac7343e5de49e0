//! DynamoDB requests counted by the test kit's SDK interceptor ([`CallRecorder`]: every HTTP
//! attempt, retries included), and the SDK client for moto built with it.

use aws_config::retry::RetryConfig;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_dynamodb::config::Credentials;
pub use gate::testkit::CallRecorder;

/// A DynamoDB client for moto at `endpoint` (region `eu-west-1`, dummy credentials, standard
/// retries with 3 attempts, as the functions configure them), counting into `counter`.
pub async fn dynamo_client(endpoint: &str, counter: &CallRecorder) -> aws_sdk_dynamodb::Client {
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
