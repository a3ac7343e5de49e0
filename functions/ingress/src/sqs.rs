//! The notification queue over SQS: `SendMessage` with the body unchanged and the `webhook-id`
//! as a `String` message attribute. A failure is described by its kind and AWS error code only,
//! never by the service's message text (an echo of the request would carry the body and its PIN).

use async_trait::async_trait;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::MessageAttributeValue;
use aws_sdk_sqs::Client;

use crate::handler::{NotificationQueue, QueueError, WEBHOOK_ID_ATTRIBUTE};

/// The notification queue at `queue_url`.
#[derive(Debug, Clone)]
pub struct SqsNotificationQueue {
    client: Client,
    queue_url: String,
}

impl SqsNotificationQueue {
    /// The queue at `queue_url`, through `client`.
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
        }
    }
}

#[async_trait]
impl NotificationQueue for SqsNotificationQueue {
    async fn send(&self, body: &str, webhook_id: &str) -> Result<String, QueueError> {
        let attribute = MessageAttributeValue::builder()
            .data_type("String")
            .string_value(webhook_id)
            .build()
            .map_err(|e| QueueError(e.to_string()))?;
        let out = self
            .client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body)
            .message_attributes(WEBHOOK_ID_ATTRIBUTE, attribute)
            .send()
            .await
            .map_err(|e| QueueError(describe(&e)))?;
        out.message_id()
            .map(str::to_string)
            .ok_or_else(|| QueueError("SendMessage answered without a MessageId".into()))
    }
}

/// What went wrong, without the service's message: the error code of a service error, or the
/// kind of a transport failure.
fn describe<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> String {
    match e {
        SdkError::ServiceError(_) => {
            format!("service error {}", e.code().unwrap_or("(no code)"))
        }
        SdkError::TimeoutError(_) => "timed out".into(),
        SdkError::DispatchFailure(d) if d.is_timeout() => "dispatch failure: timeout".into(),
        SdkError::DispatchFailure(d) if d.is_io() => "dispatch failure: I/O (connection)".into(),
        SdkError::DispatchFailure(_) => "dispatch failure".into(),
        SdkError::ResponseError(_) => "the response could not be read".into(),
        SdkError::ConstructionFailure(_) => "the request could not be built".into(),
        _ => "unknown SDK error".into(),
    }
}
