//! job-client under the runbook cases of `kit`, and job-client's whole gatectl: its words, its
//! one variable (`JOB_SERVER_URL`), its client. This is all another integration writes for its
//! own `gatectl` binary (its `main.rs` is `gatectl::main(JobClientStack).await`).

use std::sync::Arc;

use gate::clock::ManualClock;
use gate::record::IdempotencyRecord;
use gate::Integration;
use gate_lambda::{Env, IntegrationConfig, LambdaConfig, SdkConfig};
use gate_testkit::{IdempotencyServer, ServerConfig};
use gatectl::error::CtlError;
use gatectl::words::event_key_by_parse;
use gatectl::{Stack, View, Words};
use job_client::JobClient;
use serde_json::json;

use super::kit::Fixture;

// --- job-client's gatectl ---------------------------------------------------------------------

/// job-client's words.
const WORDS: Words = Words {
    effect: "job",
    effect_id_key: "job_id",
    effect_id_flag: "job-id",
    from_server_flag: "from-job-server",
    multi_list: "multi-job",
    subject: "job",
    subject_label: "job",
    server: "job server",
    business_row: "job row",
    business_row_key: "job_row",
    written: "run",
    manual_queue: "manual queue",
    event_queue: "job queue",
    request: "job request",
    request_secret: "the job's payload",
    configure_server: "set JOB_SERVER_URL, or use --stack",
};

/// `JOB_SERVER_URL`: the job server.
#[derive(Debug, Clone)]
pub struct JobConfig {
    url: String,
}

impl IntegrationConfig for JobConfig {
    fn from_env(env: &Env<'_>, _lambda: &mut LambdaConfig) -> Self {
        let url = env.required("JOB_SERVER_URL").unwrap_or_default();
        Self { url }
    }
}

/// How job-client's records and bodies read: `show JOB_ID` finds the job's records.
pub struct JobView;

impl View for JobView {
    fn words(&self) -> &Words {
        &WORDS
    }

    fn matches(&self, text: &str, r: &IdempotencyRecord) -> bool {
        r.label("job") == text
    }

    fn event_key_of_body(&self, body: &str) -> Option<String> {
        let parser = JobClient::new("http://parse.invalid").ok()?;
        event_key_by_parse(&parser, body, 0)
    }
}

/// job-client's gatectl.
pub struct JobClientStack;

impl Stack for JobClientStack {
    type Config = JobConfig;

    fn view(&self) -> Arc<dyn View> {
        Arc::new(JobView)
    }

    async fn connect(
        &self,
        config: JobConfig,
        _aws: &SdkConfig,
    ) -> Result<Arc<dyn Integration>, CtlError> {
        let client = JobClient::new(config.url).map_err(|e| CtlError::Config(e.to_string()))?;
        Ok(Arc::new(client))
    }

    fn offline(&self, config: JobConfig) -> Arc<dyn Integration> {
        // A client that is never asked: no command without the server calls it.
        Arc::new(JobClient::new(config.url).expect("an HTTP client without options"))
    }
}

// --- the fixture ------------------------------------------------------------------------------

/// job-client with the test kit's Idempotency-Key server.
pub struct JobClientFixture {
    server: IdempotencyServer,
}

impl Fixture for JobClientFixture {
    type Stack = JobClientStack;

    fn stack() -> JobClientStack {
        JobClientStack
    }

    async fn start(clock: Arc<ManualClock>) -> (Self, Vec<(&'static str, String)>) {
        let server =
            IdempotencyServer::start(ServerConfig::new("/jobs", "id").id_prefix("JOB"), clock)
                .await
                .expect("a loopback port");
        let vars = vec![("JOB_SERVER_URL", server.url().to_string())];
        (Self { server }, vars)
    }

    fn integration(&self) -> Arc<dyn Integration> {
        Arc::new(JobClient::new(self.server.url()).expect("an HTTP client"))
    }

    fn body(&self, n: u32) -> String {
        json!({"job_id": self.source_id(n), "payload": {"n": n, "report": "monthly"}}).to_string()
    }

    fn source_id(&self, n: u32) -> String {
        format!("job-{n}")
    }

    fn secret(&self) -> Option<&'static str> {
        None
    }

    fn effects_made(&self) -> usize {
        self.server.effects_made()
    }
}
