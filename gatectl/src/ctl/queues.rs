//! Reading an SQS queue without taking its messages away ([`Ctl::peek`], [`Ctl::unhide`]) and a
//! message's system attributes.

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName, QueueAttributeName};

use super::Ctl;
use crate::error::CtlError;
use crate::render::progress;

impl Ctl {
    /// Receives every message of `queue_url` without taking it away: each is hidden for
    /// `hide_s` seconds while the queue is read (so the same message is not counted twice),
    /// then made visible again unless `keep_hidden`. Each receive counts towards the message's
    /// `ApproximateReceiveCount` (neither the manual queue nor the dead-letter queue has a
    /// redrive policy, so that moves nothing).
    pub(super) async fn peek(
        &self,
        queue_url: &str,
        what: &str,
        hide_s: i32,
    ) -> Result<Vec<Message>, CtlError> {
        let denied = |action: &str, e: String| CtlError::from_text(e, action, queue_url);
        let total = self
            .sqs
            .get_queue_attributes()
            .queue_url(queue_url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .send()
            .await
            .map_err(|e| {
                denied(
                    "sqs:GetQueueAttributes",
                    aws_sdk_sqs::error::DisplayErrorContext(&e).to_string(),
                )
            })?
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::ApproximateNumberOfMessages))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        let bar = progress(total, what, self.progress);
        let mut seen: Vec<Message> = Vec::new();
        let mut empty_rounds = 0;
        while empty_rounds < 2 {
            let out = self
                .sqs
                .receive_message()
                .queue_url(queue_url)
                .max_number_of_messages(10)
                .visibility_timeout(hide_s)
                .wait_time_seconds(1)
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .message_attribute_names("All")
                .send()
                .await
                .map_err(|e| {
                    denied(
                        "sqs:ReceiveMessage",
                        aws_sdk_sqs::error::DisplayErrorContext(&e).to_string(),
                    )
                })?;
            let got = out.messages();
            if got.is_empty() {
                empty_rounds += 1;
                continue;
            }
            empty_rounds = 0;
            for m in got {
                if !seen.iter().any(|s| s.message_id() == m.message_id()) {
                    bar.inc(1);
                    seen.push(m.clone());
                }
            }
        }
        bar.finish_and_clear();
        Ok(seen)
    }

    /// Makes `messages` visible again at once.
    pub(super) async fn unhide(
        &self,
        queue_url: &str,
        messages: &[Message],
    ) -> Result<(), CtlError> {
        for m in messages {
            if let Some(handle) = m.receipt_handle() {
                self.sqs
                    .change_message_visibility()
                    .queue_url(queue_url)
                    .receipt_handle(handle)
                    .visibility_timeout(0)
                    .send()
                    .await
                    .map_err(|e| {
                        CtlError::from_text(
                            aws_sdk_sqs::error::DisplayErrorContext(&e).to_string(),
                            "sqs:ChangeMessageVisibility",
                            queue_url,
                        )
                    })?;
            }
        }
        Ok(())
    }
}

/// `SentTimestamp` of a message, epoch **milliseconds** (SQS keeps a dead letter's original
/// enqueue time).
pub(super) fn sent_ms(m: &Message) -> Option<i64> {
    m.attributes()?
        .get(&MessageSystemAttributeName::SentTimestamp)?
        .parse()
        .ok()
}

pub(super) fn receive_count(m: &Message) -> Option<u64> {
    m.attributes()?
        .get(&MessageSystemAttributeName::ApproximateReceiveCount)?
        .parse()
        .ok()
}
