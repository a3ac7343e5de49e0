//! The SQS event as the consumer reads it: leniently, so that a record the typed deserialiser
//! (`aws_lambda_events`' `SqsMessage`) refuses never fails the whole invocation.
//!
//! `lambda_runtime` deserialises the event into the handler's type before the handler runs; when
//! that fails it logs the deserialiser's error at ERROR and reports it to the Runtime API, and
//! serde's errors quote the value they refused (`invalid type: string "...", expected ...`): a
//! message attribute or a body would reach the log word for word, and the whole batch would be
//! retried until it reaches the dead-letter queue. [`SqsInput`] instead deserialises from any
//! JSON (it never fails), then reads each record on its own:
//!
//! * a record that reads as an `SqsMessage` is handled as always ([`Gate::handle_batch`]);
//! * a record that does not but has a `messageId` is an [`UnreadableRecord`]: routed to a person
//!   once (manual item, reason `rejected`, code [`UNREADABLE_RECORD`]) with its body (or, without
//!   a string body, the record's JSON) as the original body, and acknowledged; a failed send is a
//!   batch item failure (retried), so nothing is lost;
//! * an event that is not `{"Records": [...]}`, or a record without a readable `messageId` (it
//!   cannot be named in `batchItemFailures`), fails the invocation with an error that names the
//!   shape only ([`SqsInput::whole_event_error`]): SQS retries the batch, then moves it to the
//!   dead-letter queue. Neither comes from SQS in practice.

use aws_lambda_events::event::sqs::SqsMessage;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::consumer::{BatchReport, Delivery, Gate, Invocation, RecordReport};
use crate::integration::Rejection;

/// The rejection code of a record the consumer could not read ([`UnreadableRecord`]).
pub const UNREADABLE_RECORD: &str = "record_unreadable";

/// The fields of an SQS record (Lambda's SQS event), the only names an error may quote.
const RECORD_FIELDS: [&str; 10] = [
    "messageId",
    "receiptHandle",
    "body",
    "md5OfBody",
    "md5OfMessageAttributes",
    "attributes",
    "messageAttributes",
    "eventSourceARN",
    "eventSource",
    "awsRegion",
];

/// A record the typed deserialiser refused, with what a person needs to handle it.
///
/// No error text of serde's is logged or stored: only the name of the field that could not be
/// read ([`UnreadableRecord::field`]), from a fixed list.
#[derive(Clone, PartialEq, Eq)]
pub struct UnreadableRecord {
    /// Its position in the event's `Records`, from 0.
    pub position: usize,
    /// Its `messageId` (always present: a record without one is a whole-event error).
    pub message_id: String,
    /// Its body when that is a string, else the record's JSON: the manual item's original body.
    pub body: String,
    /// The first record field that could not be read (one of the SQS record's field names), or
    /// `None` when the record is not a JSON object or the field is not one of them.
    pub field: Option<&'static str>,
}

impl std::fmt::Debug for UnreadableRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnreadableRecord")
            .field("position", &self.position)
            .field("message_id", &self.message_id)
            .field(
                "body",
                &format_args!("[redacted {} bytes]", self.body.len()),
            )
            .field("field", &self.field)
            .finish()
    }
}

impl UnreadableRecord {
    /// The rejection its manual item carries: code [`UNREADABLE_RECORD`], the field named, no
    /// value quoted.
    pub fn rejection(&self) -> Rejection {
        let detail = match self.field {
            Some(field) => format!(
                "the SQS record at position {} could not be read: its `{field}` is not of the type Lambda's SQS event gives it",
                self.position
            ),
            None => format!(
                "the SQS record at position {} could not be read as an SQS message",
                self.position
            ),
        };
        Rejection {
            code: UNREADABLE_RECORD,
            detail,
            ended: false,
        }
    }
}

/// An SQS event read leniently (module docs): deserialises from any JSON value.
#[derive(Debug, Clone, Default)]
pub struct SqsInput {
    /// The records that read as SQS messages, in order.
    pub records: Vec<SqsMessage>,
    /// The records that did not but carry a `messageId`.
    pub unreadable: Vec<UnreadableRecord>,
    /// Why the event cannot be handled at all (not `{"Records": [...]}`, or a record without a
    /// readable `messageId`): names the shape only, never a value.
    pub whole_event_error: Option<String>,
}

/// The JSON type's name of `v` (`"a string"`, `"an object"`, ...), for errors that must not
/// quote it.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The first field of `record` that does not read as that field of an `SqsMessage`.
fn bad_field(record: &serde_json::Map<String, Value>) -> Option<&'static str> {
    RECORD_FIELDS.into_iter().find(|field| {
        record.get(*field).is_some_and(|v| {
            let alone = Value::Object(serde_json::Map::from_iter([(
                (*field).to_string(),
                v.clone(),
            )]));
            SqsMessage::deserialize(&alone).is_err()
        })
    })
}

impl SqsInput {
    /// Reads `event` (module docs). Never fails.
    pub fn from_value(event: Value) -> Self {
        let mut input = SqsInput::default();
        let records = match event {
            Value::Object(mut map) => match map.remove("Records") {
                Some(Value::Array(records)) => records,
                Some(other) => {
                    input.whole_event_error = Some(format!(
                        "the event's `Records` is {}, not a list of SQS records",
                        type_name(&other)
                    ));
                    return input;
                }
                None => {
                    input.whole_event_error =
                        Some("the event has no `Records`: it is not an SQS event".into());
                    return input;
                }
            },
            other => {
                input.whole_event_error = Some(format!(
                    "the event is {}, not an SQS event",
                    type_name(&other)
                ));
                return input;
            }
        };
        for (position, record) in records.into_iter().enumerate() {
            match SqsMessage::deserialize(&record) {
                Ok(message) => input.records.push(message),
                Err(_) => {
                    let message_id = record
                        .get("messageId")
                        .and_then(Value::as_str)
                        .filter(|id| !id.is_empty());
                    let Some(message_id) = message_id else {
                        input.whole_event_error = Some(format!(
                            "the SQS record at position {position} has no readable `messageId`"
                        ));
                        continue;
                    };
                    let field = record.as_object().and_then(bad_field);
                    let body = match record.get("body") {
                        Some(Value::String(body)) => body.clone(),
                        _ => record.to_string(),
                    };
                    input.unreadable.push(UnreadableRecord {
                        position,
                        message_id: message_id.to_string(),
                        body,
                        field,
                    });
                }
            }
        }
        input
    }
}

impl<'de> Deserialize<'de> for SqsInput {
    /// Any JSON value; what it holds is sorted by [`SqsInput::from_value`].
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        Value::deserialize(de).map(Self::from_value)
    }
}

impl Gate {
    /// Handles an event read by [`SqsInput`]: the readable records as [`Gate::handle_batch`]
    /// does, then each unreadable record routed to a person once ([`UnreadableRecord::rejection`],
    /// acknowledged; a failed send is a batch item failure). The caller fails the invocation on
    /// [`SqsInput::whole_event_error`] before calling this.
    pub async fn handle_input(&self, input: SqsInput, invocation: &Invocation) -> BatchReport {
        let offset = input.records.len();
        let mut event = aws_lambda_events::event::sqs::SqsEvent::default();
        event.records = input.records;
        let mut report = self.handle_batch(event, invocation).await;
        for (n, unreadable) in input.unreadable.into_iter().enumerate() {
            let held_as = invocation.for_record(offset + n);
            let rejection = unreadable.rejection();
            let d = Delivery {
                body: &unreadable.body,
                message_id: &unreadable.message_id,
                invocation: &held_as,
            };
            let outcome = self
                .route_rejection(rejection, d, self.clock.now_ms())
                .await;
            tracing::info!(
                outcome = outcome.code(),
                detail = %outcome.detail(),
                message_id = %unreadable.message_id,
                field = unreadable.field.unwrap_or_default(),
                "record processed"
            );
            if !outcome.acknowledged() {
                report.response.add_failure(unreadable.message_id.clone());
            }
            report.records.push(RecordReport {
                message_id: unreadable.message_id,
                event_key: None,
                subject: None,
                took_over: false,
                outcome,
            });
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(id: &str, body: Value) -> Value {
        json!({
            "messageId": id,
            "receiptHandle": "rh",
            "body": body,
            "attributes": {"ApproximateReceiveCount": "1"},
            "messageAttributes": {},
            "eventSource": "aws:sqs",
            "awsRegion": "eu-west-1"
        })
    }

    #[test]
    fn any_json_reads_and_only_the_bad_record_is_set_aside() {
        let mut bad = record("m-2", json!("{\"pin\":\"SECRET-PIN\"}"));
        bad["messageAttributes"] = json!({"x": "SECRET-ATTRIBUTE"});
        let event = json!({"Records": [record("m-1", json!("{}")), bad]});
        let input: SqsInput = serde_json::from_value(event).unwrap();
        assert_eq!(input.records.len(), 1);
        assert_eq!(input.whole_event_error, None);
        assert_eq!(input.unreadable.len(), 1);
        let u = &input.unreadable[0];
        assert_eq!(
            (u.position, u.message_id.as_str(), u.field),
            (1, "m-2", Some("messageAttributes"))
        );
        assert_eq!(u.body, "{\"pin\":\"SECRET-PIN\"}");
        let r = u.rejection();
        assert_eq!(r.code, UNREADABLE_RECORD);
        assert!(!r.detail.contains("SECRET"), "{}", r.detail);
        assert!(!format!("{u:?}").contains("SECRET"));
    }

    #[test]
    fn a_body_that_is_not_a_string_keeps_the_whole_record() {
        let event = json!({"Records": [record("m-1", json!({"pin": "P"}))]});
        let input = SqsInput::from_value(event);
        let u = &input.unreadable[0];
        assert_eq!(u.field, Some("body"));
        let kept: Value = serde_json::from_str(&u.body).unwrap();
        assert_eq!(kept["body"]["pin"], "P");
    }

    #[test]
    fn events_that_are_not_sqs_events_name_their_shape_only() {
        for (event, want) in [
            (json!("SECRET"), "the event is a string, not an SQS event"),
            (
                json!({"job": "SECRET"}),
                "the event has no `Records`: it is not an SQS event",
            ),
            (
                json!({"Records": "SECRET"}),
                "the event's `Records` is a string, not a list of SQS records",
            ),
            (
                json!({"Records": [{"messageId": 7, "body": "SECRET"}]}),
                "the SQS record at position 0 has no readable `messageId`",
            ),
        ] {
            let input = SqsInput::from_value(event);
            assert_eq!(input.whole_event_error.as_deref(), Some(want));
        }
    }
}
