//! `SqsVisibility` (the event queue's visibility port) against moto: a received message's
//! visibility changed through the queue URL its ARN names, and a change refused with its cause.
//!
//! Run with `scripts/with-moto.sh cargo test -p integration-tests --test sqs_visibility`.

use gate::visibility::{MessageVisibility, QueuedMessage};
use gate_dynamo::sqs::SqsVisibility;
use integration_tests::{fresh_queue, sqs_client};

async fn receive(sqs: &aws_sdk_sqs::Client, url: &str) -> Option<String> {
    let out = sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(1)
        .wait_time_seconds(0)
        .send()
        .await
        .expect("ReceiveMessage");
    out.messages()
        .first()
        .map(|m| m.receipt_handle().expect("a receipt handle").to_string())
}

#[tokio::test]
async fn a_received_message_is_hidden_and_shown_through_its_queue_arn() {
    let sqs = sqs_client().await;
    let url = fresh_queue(&sqs, "visibility").await;
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("GetQueueAttributes")
        .attributes()
        .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn))
        .expect("the queue's ARN")
        .clone();
    sqs.send_message()
        .queue_url(&url)
        .message_body("{}")
        .send()
        .await
        .expect("SendMessage");
    let port = SqsVisibility::new(sqs.clone());

    let first = receive(&sqs, &url).await.expect("the message");
    assert_eq!(receive(&sqs, &url).await, None, "invisible once received");
    // Visibility 0: shown again at once, so the change reached the queue.
    let message = QueuedMessage {
        queue_arn: &arn,
        receipt_handle: &first,
    };
    port.hide(message, 0)
        .await
        .expect("ChangeMessageVisibility");
    let second = receive(&sqs, &url).await.expect("shown again");

    // An hour: hidden (SQS counts its 12-hour limit from the receive, so a delay of exactly
    // 12 hours is refused once any time has passed; the consumer then leaves the record to the
    // reconciler).
    let message = QueuedMessage {
        queue_arn: &arn,
        receipt_handle: &second,
    };
    port.hide(message, 3_600).await.expect("an hour");
    assert_eq!(receive(&sqs, &url).await, None);

    // Not an SQS ARN: refused before any request, with its cause.
    let bad = QueuedMessage {
        queue_arn: "events",
        receipt_handle: &second,
    };
    let e = port.hide(bad, 30).await.expect_err("not an ARN");
    let cause = std::error::Error::source(&e).expect("a cause").to_string();
    assert!(cause.contains("not an SQS queue ARN"), "{cause}");
}
