//! A second side effect on the gate's core, and the model for a new integration: a client of an
//! Idempotency-Key job server (IETF draft `draft-ietf-httpapi-idempotency-key-header`):
//!
//! * `POST {base}/jobs` with `Idempotency-Key: "K"` and the job's payload creates a job and answers
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
use gate::effect::{ClaimOutcome, LookupOutcome};
use gate::idempotency_key::{client, JsonIdAt};
use gate::integration::{Event, Held, Integration, Parsed, Rejection};
use gate::record::{IdempotencyRecord, Labels};
use serde_json::Value;

/// The operation name of the job's `Idempotency-Key`.
pub const POST_JOB: &str = "post-job";

/// Largest body accepted, bytes.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// Where the job server's answers hold the job's id: `201 {"id"}` to a call, `200 {"id"}` to a
/// lookup. Every status is classified by the core's Idempotency-Key table
/// (`gate::idempotency_key::classify`), summaries in the core's words, no excerpt of the answer.
const JOB_SERVER: JsonIdAt = JsonIdAt::new("job server", "/id");

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
        let http = client::builder(concat!("job-client/", env!("CARGO_PKG_VERSION")))
            .timeout(Duration::from_secs(5))
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
        let request = self
            .http
            .post(format!("{}/jobs", self.base))
            .header("Content-Type", "application/json")
            .body(record.request.clone());
        client::call(request, &record.op_key, &JOB_SERVER).await
    }

    async fn lookup(&self, held: &Held<'_>) -> LookupOutcome {
        let record = held.record();
        let request = self
            .http
            .get(format!("{}/jobs", self.base))
            .query(&[("idempotency_key", record.op_key.as_str())]);
        client::lookup(request, &JOB_SERVER).await
    }

    /// A job does not end: its record lives the key TTL from its reservation.
    fn ends_at_ms(&self, _record: &IdempotencyRecord) -> Option<i64> {
        None
    }

    fn label_names(&self) -> &[&'static str] {
        &["job"]
    }
}
