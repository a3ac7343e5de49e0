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

pub mod lambda;
/// The exactly-once scenario on the test kit's harness (feature `testkit`).
#[cfg(feature = "testkit")]
pub mod scenario;

use std::time::Duration;

use gate::prelude::*;

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
        let http = gate_http::builder(concat!("job-client/", env!("CARGO_PKG_VERSION")))
            .timeout(Duration::from_secs(5))
            .build()?;
        Ok(Self {
            base: base.into(),
            http,
        })
    }
}

/// A job event's job, or why the body can never be one (the crate docs).
///
/// # Errors
/// The rejection, typed (`gate::fields`): `body_too_large`, `not_json`, `unknown_field`,
/// `missing_field` or `bad_field`, naming the field.
pub fn job(body: &str) -> Result<Event, Rejection> {
    let f = Fields::parse(body, MAX_BODY_BYTES)?;
    let (job, payload) = (f.text("job_id", 128)?, f.object("payload")?);
    f.all_read()?;
    let request = serde_json_canonicalizer::to_vec(payload)
        .map_err(|_| Fields::bad("payload", "cannot be written as canonical JSON"))?;
    Ok(Event {
        key_material: format!("job:{job}"),
        business_fields: payload.clone(),
        request,
        labels: Labels::from([("job".to_string(), job.to_string())]),
        ends_at_ms: None,
        subject: job.to_string(),
    })
}

#[async_trait::async_trait]
impl Integration for JobClient {
    fn operation(&self) -> &str {
        POST_JOB
    }

    fn parse(&self, body: &str, _now_ms: i64) -> Parsed {
        job(body).into()
    }

    async fn call(&self, held: &Held<'_>) -> CallOutcome {
        let record = held.record();
        let request = self
            .http
            .post(format!("{}/jobs", self.base))
            .header("Content-Type", "application/json")
            .body(record.request.clone());
        gate_http::call(request, &record.op_key, &JOB_SERVER).await
    }

    fn label_names(&self) -> &[&'static str] {
        &["job"]
    }

    /// The job server's lookup by key, `GET /jobs?idempotency_key=` (below).
    fn lookup_by_key(&self) -> Option<&dyn gate::Lookup> {
        Some(self)
    }
}

#[async_trait::async_trait]
impl gate::Lookup for JobClient {
    async fn lookup(&self, held: &Held<'_>) -> LookupOutcome {
        let record = held.record();
        let request = self
            .http
            .get(format!("{}/jobs", self.base))
            .query(&[("idempotency_key", record.op_key.as_str())]);
        gate_http::lookup(request, &JOB_SERVER).await
    }
}
