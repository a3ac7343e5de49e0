//! Scenario files: what the outside world does in a replay, as JSON. The format, field by field,
//! is in `docs/SIMULATION.md` ("Scenario format"): the queue and the Lambda settings, the
//! terminal (or a `terminal_set` of several, each played by its own simulator, see
//! [`SetTerminal`]), the reconciler, and the notifications with their arrivals (a new message id
//! each, or `same_message_id`: SQS's own duplicate), crashes and stalls. `webhook` starts each
//! arrival at Portbase's webhook sender instead of the queue (`crate::webhook`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::terminal::{TerminalApi, TerminalConfig};

/// Where a worker dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CrashStep {
    /// After the receive, before the reserve: no record exists; the message comes back after
    /// the visibility timeout (unless lost) and is handled as new.
    AfterReceive,
    /// After the reserve, before the slot claim reaches the terminal.
    AfterReserve,
    /// After the terminal issued the slot, before the commit (the TMS write).
    AfterClaim,
    /// After the batch's commits, before the answer to SQS: nothing is stranded, every message
    /// of the batch comes back and is a duplicate.
    AfterCommit,
}

impl CrashStep {
    /// Every step, in the order a record passes them.
    pub const ALL: [CrashStep; 4] = [
        CrashStep::AfterReceive,
        CrashStep::AfterReserve,
        CrashStep::AfterClaim,
        CrashStep::AfterCommit,
    ];

    /// The step's name as a scenario file spells it.
    pub fn name(self) -> &'static str {
        match self {
            CrashStep::AfterReceive => "after_receive",
            CrashStep::AfterReserve => "after_reserve",
            CrashStep::AfterClaim => "after_claim",
            CrashStep::AfterCommit => "after_commit",
        }
    }
}

/// One arrival of a notification on the queue.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Arrival {
    /// Seconds after the scenario's start; a new SQS message.
    At(f64),
    /// An arrival with options.
    Detailed {
        /// Seconds after the scenario's start.
        at_s: f64,
        /// Another copy of the previous message (same message id).
        #[serde(default)]
        same_message_id: bool,
    },
}

impl Arrival {
    /// Seconds after start.
    pub fn at_s(&self) -> f64 {
        match self {
            Self::At(s) => *s,
            Self::Detailed { at_s, .. } => *at_s,
        }
    }

    /// Whether it repeats the previous message's id.
    pub fn same_message_id(&self) -> bool {
        matches!(
            self,
            Self::Detailed {
                same_message_id: true,
                ..
            }
        )
    }
}

/// One notification and how it is delivered.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioNotification {
    /// The SQS body as JSON.
    #[serde(default)]
    pub body: Option<Value>,
    /// The SQS body as a raw string (for bodies that are not JSON).
    #[serde(default)]
    pub raw_body: Option<String>,
    /// When it arrives, one entry per SQS message.
    pub arrivals: Vec<Arrival>,
    /// A crash of the worker handling the first delivery.
    #[serde(default)]
    pub crash: Option<CrashStep>,
    /// After that crash the message is never redelivered (deleted, expired, redriven elsewhere):
    /// only the reconciler can finish the record.
    #[serde(default)]
    pub message_lost_after_crash: bool,
    /// The worker handling the first delivery pauses this many simulated seconds right after the
    /// slot claim (a long GC pause, a stalled network), then carries on.
    #[serde(default)]
    pub stall_after_claim_s: Option<i64>,
}

impl ScenarioNotification {
    /// The SQS body string.
    pub fn body_string(&self) -> String {
        match (&self.raw_body, &self.body) {
            (Some(raw), _) => raw.clone(),
            (None, Some(v)) => v.to_string(),
            (None, None) => String::new(),
        }
    }

    /// The equipment number as written in the body, if any (for reports).
    pub fn container(&self) -> Option<String> {
        self.body
            .as_ref()
            .and_then(|b| b.get("equipment_number"))
            .and_then(Value::as_str)
            .map(str::to_string)
    }
}

/// The queue and its event source mapping.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueSettings {
    /// Records per Lambda invocation (SQS event source `BatchSize`).
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
    /// Seconds a received message stays invisible.
    #[serde(default = "default_visibility")]
    pub visibility_timeout_s: i64,
    /// Receives before a message moves to the dead-letter queue (redrive policy).
    #[serde(default = "default_max_receive")]
    pub max_receive_count: u32,
    /// Concurrent invocations (`ScalingConfig.MaximumConcurrency`).
    #[serde(default = "default_workers")]
    pub workers: usize,
}

fn default_batch_size() -> usize {
    10
}
fn default_visibility() -> i64 {
    180
}
fn default_max_receive() -> u32 {
    5
}
fn default_workers() -> usize {
    2
}
fn default_lambda_timeout() -> i64 {
    30
}
fn default_terminals() -> Vec<String> {
    vec!["ECT-DELTA".to_string()]
}

impl Default for QueueSettings {
    fn default() -> Self {
        Self {
            batch_size: default_batch_size(),
            visibility_timeout_s: default_visibility(),
            max_receive_count: default_max_receive(),
            workers: default_workers(),
        }
    }
}

/// The terminal simulator's switches for a scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalSettings {
    /// Whether `Idempotency-Key` is honoured.
    #[serde(default = "yes")]
    pub supports_idempotency_key: bool,
    /// Real-time latency per claim, ms.
    #[serde(default)]
    pub latency_ms: u64,
    /// Probability of a 503 (not stored).
    #[serde(default)]
    pub error_rate: f64,
    /// Probability that a 201 is lost on the way back (504 to the client).
    #[serde(default)]
    pub lose_response_rate: f64,
    /// Key retention, hours of simulated time.
    #[serde(default = "default_retention_hours")]
    pub retention_hours: i64,
    /// Key retention in seconds, overriding `retention_hours` (a terminal that forgets keys
    /// early).
    #[serde(default)]
    pub retention_seconds: Option<i64>,
    /// Seed of the terminal's fault RNG.
    #[serde(default)]
    pub seed: u64,
}

fn yes() -> bool {
    true
}
fn default_retention_hours() -> i64 {
    24
}

impl Default for TerminalSettings {
    fn default() -> Self {
        Self {
            supports_idempotency_key: true,
            latency_ms: 0,
            error_rate: 0.0,
            lose_response_rate: 0.0,
            retention_hours: default_retention_hours(),
            retention_seconds: None,
            seed: 0,
        }
    }
}

impl TerminalSettings {
    /// The key retention in milliseconds of simulated time.
    pub fn retention_ms(&self) -> i64 {
        self.retention_seconds
            .map_or(self.retention_hours * 3_600_000, |s| s * 1000)
    }

    /// The simulator's configuration for these settings (its name and slot prefix the defaults).
    pub fn simulator(&self) -> TerminalConfig {
        TerminalConfig {
            supports_idempotency_key: self.supports_idempotency_key,
            latency_ms: self.latency_ms,
            error_rate: self.error_rate,
            lose_response_rate: self.lose_response_rate,
            retention_ms: self.retention_ms(),
            seed: self.seed,
            ..TerminalConfig::default()
        }
    }
}

/// One terminal of a scenario (or a `terminal-sim --terminals` run) that books at several at
/// once: its code, its API shape and its behaviour, played by its own simulator under
/// `/terminals/{code}` (`crate::terminal::multi_router`).
///
/// ```json
/// {"code": "APMT-MV2", "api": "appointments-v2", "max_concurrent_calls": 1,
///  "terminal": {"supports_idempotency_key": true, "lose_response_rate": 0.2}}
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetTerminal {
    /// The terminal code notifications name.
    pub code: String,
    /// `slots` (the default) or `appointments-v2` (`truck_slot::terminal::several::TerminalApi`).
    #[serde(default = "default_api")]
    pub api: String,
    /// The gate's limit of calls in flight to this terminal at once (default 4).
    #[serde(default = "default_max_calls")]
    pub max_concurrent_calls: usize,
    /// Prefix of its slot ids (default: the code).
    #[serde(default)]
    pub slot_prefix: Option<String>,
    /// The simulator's behaviour: key support, latency, faults, key retention.
    #[serde(default)]
    pub terminal: TerminalSettings,
}

fn default_api() -> String {
    "slots".into()
}
fn default_max_calls() -> usize {
    4
}

impl SetTerminal {
    /// The API shape named by `api`.
    ///
    /// # Errors
    /// A message naming the terminal when `api` is neither `slots` nor `appointments-v2`.
    pub fn api(&self) -> Result<TerminalApi, String> {
        TerminalApi::from_name(&self.api).ok_or_else(|| {
            format!(
                "terminal {:?}: api {:?} is not `slots` or `appointments-v2`",
                self.code, self.api
            )
        })
    }

    /// The simulator's configuration for this terminal.
    ///
    /// # Errors
    /// As [`SetTerminal::api`].
    pub fn simulator(&self) -> Result<TerminalConfig, String> {
        Ok(TerminalConfig {
            terminal_name: self.code.clone(),
            slot_prefix: self
                .slot_prefix
                .clone()
                .unwrap_or_else(|| self.code.clone()),
            api: self.api()?,
            ..self.terminal.simulator()
        })
    }
}

/// A deliberate defect in the key derivation, to prove the zero-ratio alarm catches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyFault {
    /// The key wrongly includes the SQS message id (unique per delivery): the replay rewrites
    /// each delivered body's `notificationId` to `"{id}#{messageId}"`, which is what such a key
    /// derivation amounts to.
    IncludesMessageId,
}

/// The scheduled reconciler in a replay.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcilerSettings {
    /// Seconds between runs (the schedule's rate), default 60.
    #[serde(default = "default_interval")]
    pub interval_s: i64,
    /// Minimum age of a record (by `created_at`) before the reconciler touches it, seconds,
    /// default 0 (the lease end selects, as `gate::reconciler::ReconcilerConfig`).
    #[serde(default)]
    pub min_age_s: i64,
    /// Seconds between the sweeps of one run (default 15: at 0, 15, 30 and 45 s of each
    /// minute, as the reconciler function sweeps); equal to `interval_s`: one sweep a run.
    #[serde(default = "default_sweep_interval")]
    pub sweep_interval_s: i64,
}

impl Default for ReconcilerSettings {
    /// The deployed defaults: scheduled every minute, a sweep every 15 s, no minimum age.
    fn default() -> Self {
        Self {
            interval_s: default_interval(),
            min_age_s: 0,
            sweep_interval_s: default_sweep_interval(),
        }
    }
}

fn default_interval() -> i64 {
    60
}
fn default_sweep_interval() -> i64 {
    15
}

/// A scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name.
    pub name: String,
    /// What it shows.
    #[serde(default)]
    pub description: String,
    /// Simulated time zero.
    pub start: DateTime<Utc>,
    /// Terminal codes the integration books at.
    #[serde(default = "default_terminals")]
    pub terminals: Vec<String>,
    /// The queue.
    #[serde(default)]
    pub queue: QueueSettings,
    /// The consumer function's timeout, seconds.
    #[serde(default = "default_lambda_timeout")]
    pub lambda_timeout_s: i64,
    /// The terminal.
    #[serde(default)]
    pub terminal: TerminalSettings,
    /// Several terminals at once, each with its own API shape and behaviour (then `terminal` is
    /// unused and `terminals` lists these codes); empty: one terminal, `terminal`.
    #[serde(default)]
    pub terminal_set: Vec<SetTerminal>,
    /// Seed for message ids and receipt handles.
    #[serde(default)]
    pub seed: u64,
    /// The reconciler, scheduled on simulated time; absent: no reconciler.
    #[serde(default)]
    pub reconciler: Option<ReconcilerSettings>,
    /// A deliberate key-derivation defect (signals scenarios only).
    #[serde(default)]
    pub key_fault: Option<KeyFault>,
    /// The webhook front (`crate::webhook`): when present, each arrival is a webhook that
    /// Portbase's sender delivers through the ingress, retrying on `5xx` and timeouts; absent, the
    /// arrivals are SQS messages.
    #[serde(default)]
    pub webhook: Option<WebhookSettings>,
    /// The notifications.
    pub notifications: Vec<ScenarioNotification>,
}

/// The incident of Monday 9 June 2025, embedded so `make demo` needs no file.
pub const MONDAY_2025_06_09: &str = include_str!("../scenarios/monday-2025-06-09.json");

/// A scenario that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// Not readable.
    #[error("cannot read scenario {path}: {source}")]
    Read {
        /// The path.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Not a scenario.
    #[error("invalid scenario: {0}")]
    Invalid(String),
}

impl Scenario {
    /// Parses and checks a scenario.
    ///
    /// # Errors
    /// [`ScenarioError::Invalid`] for bad JSON, a notification without arrivals or body, or a
    /// `same_message_id` arrival without a message before it, or a reconciler interval under 1 s.
    pub fn parse(text: &str) -> Result<Self, ScenarioError> {
        let s: Scenario =
            serde_json::from_str(text).map_err(|e| ScenarioError::Invalid(e.to_string()))?;
        let mut s = s;
        if !s.terminal_set.is_empty() {
            for t in &s.terminal_set {
                t.api().map_err(ScenarioError::Invalid)?;
            }
            s.terminals = s.terminal_set.iter().map(|t| t.code.clone()).collect();
        }
        if s.queue.batch_size == 0 || s.queue.workers == 0 {
            return Err(ScenarioError::Invalid(
                "batch_size and workers must be at least 1".into(),
            ));
        }
        if let Some(r) = &s.reconciler {
            if r.interval_s < 1 || r.min_age_s < 0 || r.sweep_interval_s < 1 {
                return Err(ScenarioError::Invalid(
                    "reconciler.interval_s and sweep_interval_s must be >= 1 and min_age_s >= 0"
                        .into(),
                ));
            }
        }
        for (i, n) in s.notifications.iter().enumerate() {
            if n.arrivals.is_empty() {
                return Err(ScenarioError::Invalid(format!(
                    "notification {i} has no arrivals"
                )));
            }
            if n.body.is_none() && n.raw_body.is_none() {
                return Err(ScenarioError::Invalid(format!(
                    "notification {i} has neither body nor raw_body"
                )));
            }
            if n.arrivals[0].same_message_id() {
                return Err(ScenarioError::Invalid(format!(
                    "notification {i}: the first arrival cannot repeat a message id"
                )));
            }
            if n.arrivals
                .iter()
                .any(|a| !a.at_s().is_finite() || a.at_s() < 0.0)
            {
                return Err(ScenarioError::Invalid(format!(
                    "notification {i}: arrival times must be >= 0 seconds"
                )));
            }
        }
        Ok(s)
    }

    /// The incident variant where the two crashed messages are never redelivered, with the
    /// reconciler running every minute.
    ///
    /// # Errors
    /// Only if the embedded incident does not parse.
    pub fn incident_with_lost_messages() -> Result<Self, ScenarioError> {
        let mut s = Self::parse(MONDAY_2025_06_09)?;
        s.name = "monday-2025-06-09-lost".into();
        s.description = "The incident, but the two crashed messages never come back: only the \
                         reconciler can finish their records."
            .into();
        s.reconciler = Some(ReconcilerSettings::default());
        for n in &mut s.notifications {
            if n.crash.is_some() {
                n.message_lost_after_crash = true;
            }
        }
        Ok(s)
    }

    /// Total SQS messages the scenario enqueues (copies with the same message id count once).
    pub fn messages(&self) -> usize {
        self.notifications
            .iter()
            .map(|n| n.arrivals.iter().filter(|a| !a.same_message_id()).count())
            .sum()
    }
}

/// The Standard Webhooks reference schedule (Svix): after the first attempt, retries 5 s, 5 min,
/// 30 min, 2 h, 5 h, 10 h and 10 h after the previous failure; 8 attempts over about 27.6 hours.
pub const DEFAULT_RETRY_DELAYS_S: [i64; 7] = [5, 300, 1_800, 7_200, 18_000, 36_000, 36_000];

/// The webhook front of a scenario (`"webhook": {...}`): when present, arrivals are webhooks.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WebhookSettings {
    /// Probability that one `SendMessage` of the ingress fails (answered `503`).
    #[serde(default)]
    pub queue_failure_rate: f64,
    /// Probability that a `202` never reaches the sender (it times out and retries).
    #[serde(default)]
    pub lost_response_rate: f64,
    /// Seconds between a failed attempt and the next; its length is the number of retries.
    #[serde(default = "default_delays")]
    pub retry_delays_s: Vec<i64>,
    /// Seed of the faults' RNG.
    #[serde(default)]
    pub seed: u64,
}

fn default_delays() -> Vec<i64> {
    DEFAULT_RETRY_DELAYS_S.to_vec()
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            queue_failure_rate: 0.0,
            lost_response_rate: 0.0,
            retry_delays_s: default_delays(),
            seed: 0,
        }
    }
}
