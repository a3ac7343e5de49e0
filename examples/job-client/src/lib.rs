//! A second side effect on the gate's core, and the model for a new integration: a client of an
//! Idempotency-Key job server (IETF draft `draft-ietf-httpapi-idempotency-key-header`):
//!
//! * `POST {base}/jobs` with `Idempotency-Key: K` and the job's payload creates a job and answers
//!   `201 {"id": "..."}`; the same key with the same body replays that answer; the same key with
//!   another body is `409` (or `422`) with problem type `idempotency_mismatch`; the same key
//!   while the first request is still processing is another `409`;
//! * `GET {base}/jobs?idempotency_key=K` answers `200 {"id": "..."}` or `404`.
//!
//! A body is `{"job_id": "...", "payload": {...}}`: the job id is the key material (the same
//! job redelivered is a duplicate), the payload the business fields (the same job id with another
//! payload is a mismatch, routed to a person) and, in RFC 8785 form, the request bytes. The
//! business row is the gate's default (the record's label `job` and the job's id).

use std::time::Duration;

use async_trait::async_trait;
use gate::effect::{AnswerDetail, ClaimOutcome, LookupOutcome, SlotClaim};
use gate::integration::{Event, Held, Integration, Parsed, Rejection};
use gate::record::{IdempotencyRecord, Labels};
use serde_json::Value;

/// The operation name of the job's `Idempotency-Key`.
pub const POST_JOB: &str = "post-job";

/// Largest body accepted, bytes.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// The job server's client.
#[derive(Debug, Clone)]
pub struct JobClient {
    base: String,
    http: reqwest::Client,
}

impl JobClient {
    /// A client of the server at `base` (e.g. `http://127.0.0.1:8080`), 5 s per request.
    ///
    /// # Errors
    /// If the HTTP client cannot be built.
    pub fn new(base: impl Into<String>) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self {
            base: base.into(),
            http,
        })
    }
}

fn reject(code: &'static str, detail: &str) -> Parsed {
    Parsed::Rejected(Rejection {
        code,
        detail: detail.to_string(),
        ended: false,
    })
}

/// Our words for an answer (status and length, never its text: a server echoes what it gets).
fn summary(status: u16, body: &[u8]) -> AnswerDetail {
    AnswerDetail::new(format!(
        "job server answered {status} ({} bytes)",
        body.len()
    ))
}

fn job_id(body: &[u8], pointer: &str) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let id = value.pointer(pointer)?.as_str()?;
    let printable = !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_graphic());
    printable.then(|| id.to_string())
}

#[async_trait]
impl Integration for JobClient {
    fn operation(&self) -> &str {
        POST_JOB
    }

    fn parse(&self, body: &str, _now_ms: i64) -> Parsed {
        if body.len() > MAX_BODY_BYTES {
            return reject("body_too_large", "body over 16 KiB");
        }
        let Ok(Value::Object(fields)) = gate::strict_json::from_str_strict(body) else {
            return reject("not_json", "body is not a JSON object with unique keys");
        };
        let job = match fields.get("job_id").and_then(Value::as_str) {
            Some(id) if !id.is_empty() && id.len() <= 128 && !id.chars().any(char::is_control) => {
                id.to_string()
            }
            _ => return reject("bad_job_id", "job_id missing, empty, too long or not text"),
        };
        let Some(payload @ Value::Object(_)) = fields.get("payload") else {
            return reject("missing_field", "payload missing or not an object");
        };
        let Ok(request) = serde_json_canonicalizer::to_vec(payload) else {
            return reject("not_json", "payload cannot be written as canonical JSON");
        };
        Parsed::Event(Event {
            key_material: format!("job:{job}"),
            business_fields: payload.clone(),
            request,
            labels: Labels::from([("job".to_string(), job.clone())]),
            ends_at_ms: None,
            subject: job,
        })
    }

    async fn call(&self, held: &Held<'_>) -> ClaimOutcome {
        let record = held.record();
        let sent = self
            .http
            .post(format!("{}/jobs", self.base))
            .header("Idempotency-Key", format!("\"{}\"", record.op_key))
            .header("Content-Type", "application/json")
            .body(record.request.clone())
            .send()
            .await;
        let answer = match sent {
            Ok(answer) => answer,
            Err(e) => return ClaimOutcome::Transient(AnswerDetail::new(format!("no answer: {e}"))),
        };
        let status = answer.status().as_u16();
        let body = answer.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
        let mismatch = job_id(&body, "/type").is_some_and(|t| t.contains("idempotency_mismatch"));
        match status {
            200..=299 => match job_id(&body, "/id") {
                Some(id) => ClaimOutcome::Claimed(SlotClaim {
                    slot_id: id,
                    equipment_number: None,
                }),
                // A job was probably made: ask again under the same key, never call it permanent.
                None => ClaimOutcome::Transient(summary(status, &body)),
            },
            422 => ClaimOutcome::KeyMismatch(summary(status, &body)),
            409 if mismatch => ClaimOutcome::KeyMismatch(summary(status, &body)),
            409 => ClaimOutcome::KeyInFlight,
            401 | 408 | 425 | 429 | 500..=599 => ClaimOutcome::Transient(summary(status, &body)),
            _ => ClaimOutcome::Permanent {
                status,
                detail: summary(status, &body),
            },
        }
    }

    async fn lookup(&self, held: &Held<'_>) -> LookupOutcome {
        let record = held.record();
        let sent = self
            .http
            .get(format!("{}/jobs", self.base))
            .query(&[("idempotency_key", record.op_key.as_str())])
            .send()
            .await;
        let Ok(answer) = sent else {
            return LookupOutcome::Transient(AnswerDetail::new("lookup: no answer"));
        };
        let status = answer.status().as_u16();
        let body = answer.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
        match (status, job_id(&body, "/id")) {
            (200, Some(id)) => LookupOutcome::Found(SlotClaim {
                slot_id: id,
                equipment_number: None,
            }),
            (404, _) => LookupOutcome::NotFound,
            _ => LookupOutcome::Transient(summary(status, &body)),
        }
    }

    /// A job does not end: its record lives the key TTL from its reservation.
    fn ends_at_ms(&self, _record: &IdempotencyRecord) -> Option<i64> {
        None
    }

    fn label_names(&self) -> &[&'static str] {
        &["job"]
    }
}
