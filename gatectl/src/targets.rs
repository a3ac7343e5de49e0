//! Where the stack's tables and queues are, and the gate's settings: from a CloudFormation
//! stack's outputs and parameters (`--stack NAME`), or from the environment variables the
//! functions read (`docs/DEPLOYING.md`, "Configuration"), so `gatectl` and the functions never
//! disagree: the same store (DynamoDB or PostgreSQL, `STORE`), tables and queues.

use std::collections::BTreeMap;

use gate::consumer::GateConfig;
use gate::reconciler::ReconcilerConfig;
use gate_dynamo::{INFLIGHT_INDEX, MULTI_EFFECT_INDEX};
use gate_lambda::{Config, StoreConfig};

use crate::error::CtlError;
use crate::stack::Stack;

/// The notification queue's URL, for `redrive` (not read by any function).
pub const NOTIFICATION_QUEUE_URL: &str = "NOTIFICATION_QUEUE_URL";
/// The notification dead-letter queue's URL, for `list dead-letters` and `redrive`.
pub const DEAD_LETTER_QUEUE_URL: &str = "DEAD_LETTER_QUEUE_URL";

/// Stack outputs (`template.yaml`, `Outputs`) and the variable each stands for.
pub const OUTPUT_VARIABLES: [(&str, &str); 5] = [
    ("IdempotencyTableName", "IDEMPOTENCY_TABLE"),
    ("BookingsTableName", "BOOKINGS_TABLE"),
    ("ManualBookingQueueUrl", "MANUAL_QUEUE_URL"),
    ("NotificationQueueUrl", NOTIFICATION_QUEUE_URL),
    ("NotificationDeadLetterQueueUrl", DEAD_LETTER_QUEUE_URL),
];

/// Stack parameters and the variable the template sets from each on the reconciler (the
/// function whose settings `gatectl reconcile` uses): the gate's; an integration adds its own
/// ([`crate::Stack::parameters`]).
pub const PARAMETER_VARIABLES: [(&str, &str); 13] = [
    ("IntegrationName", "INTEGRATION_NAME"),
    // The store, as the functions get it (`DatabaseCaBundle` is a path inside the functions:
    // gatectl reads `DATABASE_CA_BUNDLE` from its own environment).
    ("Store", "STORE"),
    ("DatabaseUrlSecretArn", "DATABASE_URL_SECRET_ARN"),
    ("DatabaseSessionTimeouts", "DATABASE_SESSION_TIMEOUTS"),
    ("KeyTtlSeconds", "KEY_TTL_SECONDS"),
    ("LeaseFloorMs", "LEASE_FLOOR_MS"),
    ("ReconcilerConcurrency", "MAX_CONCURRENCY"),
    ("DeadlineMarginMs", "DEADLINE_MARGIN_MS"),
    ("ReconcileMinAgeSeconds", "RECONCILE_MIN_AGE_SECONDS"),
    (
        "ReconcileSweepIntervalSeconds",
        "RECONCILE_SWEEP_INTERVAL_SECONDS",
    ),
    (
        "TerminalKeyRetentionSeconds",
        "SERVER_KEY_RETENTION_SECONDS",
    ),
    ("RetentionMarginSeconds", "RETENTION_MARGIN_SECONDS"),
    ("ReconcilePageSize", "RECONCILE_PAGE_SIZE"),
];

/// The variables a stack's `outputs` and `parameters` (key, value) stand for, by
/// [`OUTPUT_VARIABLES`], [`PARAMETER_VARIABLES`] and the integration's `own` parameters; empty
/// values are left out (an empty `TerminalApiTokenSecretArn` means no token).
pub fn variables_from_stack(
    outputs: &[(String, String)],
    parameters: &[(String, String)],
    own: &[(&str, &str)],
) -> BTreeMap<String, String> {
    let mut vars = BTreeMap::new();
    for (table, source) in [
        (&OUTPUT_VARIABLES[..], outputs),
        (&PARAMETER_VARIABLES[..], parameters),
        (own, parameters),
    ] {
        for (key, value) in source {
            if let Some((_, var)) = table.iter().find(|(k, _)| k == key) {
                if !value.trim().is_empty() {
                    vars.insert((*var).to_string(), value.clone());
                }
            }
        }
    }
    vars
}

/// Where everything is, and the settings.
#[derive(Debug, Clone)]
pub struct Targets {
    /// The store the stack's functions use (`STORE`: DynamoDB's tables, or PostgreSQL's
    /// connection string or its secret and schema), read as they read it; opened by
    /// `gate_lambda::store::open_operator_store`. Its `Debug` redacts the connection string.
    pub store: StoreConfig,
    /// The manual-booking queue.
    pub manual_queue_url: String,
    /// The notification queue (for `redrive`).
    pub notification_queue_url: Option<String>,
    /// The notification dead-letter queue (for `list dead-letters`, `redrive`).
    pub dead_letter_queue_url: Option<String>,
    /// The gate's settings (integration, key TTL, lease floor, key support).
    pub gate: GateConfig,
    /// The reconciler's settings (minimum age, key retention and margin).
    pub reconciler: ReconcilerConfig,
    /// Whether the integration's server is configured (one of its
    /// [`crate::Stack::server_variables`] given): without it, `lookup`, `finish` from the
    /// server and `reconcile` cannot run.
    pub server_configured: bool,
    /// Where this came from: `stack NAME` or `environment`.
    pub source: String,
}

/// A call gatectl makes on the store, named in its errors by [`Targets::call`] in the backend's
/// own terms (the IAM action and table on DynamoDB, the SQL operation and table on PostgreSQL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreCall {
    /// One record by key.
    Get,
    /// One business row by event key.
    Booking,
    /// The scan of every record (`show` by label or text).
    Scan,
    /// A page of the `InFlight` index.
    InFlight,
    /// The keys with two or more effect ids.
    MultiEffect,
    /// A fenced write of a record (finish, cancel, the reconciler's pass).
    Write,
    /// A record's audit history read.
    History,
    /// A line appended to a record's audit history.
    AppendHistory,
}

impl Targets {
    /// The action and resource of `call` on this stack's store, for an error that names them:
    /// DynamoDB's IAM action and table or index (`dynamodb:Query`,
    /// `T/index/InFlight`), PostgreSQL's SQL operation and `schema.table` (`SELECT`,
    /// `gate.in_flight`).
    pub fn call(&self, call: StoreCall) -> (String, String) {
        match &self.store {
            StoreConfig::DynamoDb {
                idempotency_table: t,
                business_table: b,
                ..
            } => {
                let (action, resource) = match call {
                    StoreCall::Get | StoreCall::History => ("GetItem", t.clone()),
                    StoreCall::Booking => ("GetItem", b.clone()),
                    StoreCall::Scan => ("Scan", t.clone()),
                    StoreCall::InFlight => ("Query", format!("{t}/index/{INFLIGHT_INDEX}")),
                    StoreCall::MultiEffect => ("Query", format!("{t}/index/{MULTI_EFFECT_INDEX}")),
                    StoreCall::Write | StoreCall::AppendHistory => ("UpdateItem", t.clone()),
                };
                (format!("dynamodb:{action}"), resource)
            }
            StoreConfig::Postgres(settings) => {
                let (action, table) = match call {
                    StoreCall::Get | StoreCall::Scan => ("SELECT", "idempotency"),
                    StoreCall::Booking => ("SELECT", "business_rows"),
                    StoreCall::InFlight => ("SELECT", "in_flight"),
                    StoreCall::MultiEffect => ("SELECT", "multi_effect"),
                    StoreCall::Write => ("UPDATE", "idempotency"),
                    StoreCall::History => ("SELECT", "audit_history"),
                    StoreCall::AppendHistory => ("INSERT", "audit_history"),
                };
                (action.to_string(), format!("{}.{table}", settings.schema))
            }
        }
    }

    /// Where the store is, for a person: `DynamoDB tables I and B` or `PostgreSQL schema S`.
    pub fn store_name(&self) -> String {
        match &self.store {
            StoreConfig::DynamoDb {
                idempotency_table,
                business_table,
                ..
            } => format!("DynamoDB tables {idempotency_table} and {business_table}"),
            StoreConfig::Postgres(settings) => format!("PostgreSQL schema {}", settings.schema),
        }
    }

    /// Reads the targets through `lookup` (variable name to value) as the functions read their
    /// configuration (`gate_lambda::Config::from_env`, the reconciler's view), and the
    /// integration's configuration, except that its server ([`Stack::server_variables`]) may be
    /// missing: its required variables are then lent [`Stack::unconfigured_server`]'s values.
    ///
    /// # Errors
    /// [`CtlError::Config`] naming every missing or invalid variable.
    pub fn from_lookup<S: Stack>(
        stack: &S,
        lookup: impl Fn(&str) -> Option<String>,
        source: &str,
    ) -> Result<(Self, S::Config), CtlError> {
        let given = |k: &str| lookup(k).is_some_and(|v| !v.trim().is_empty());
        let server_variables = stack.server_variables();
        let server_configured =
            server_variables.is_empty() || server_variables.iter().any(|k| given(k));
        let config = Config::<S::Config>::from_env(|k| {
            match stack.unconfigured_server().iter().find(|(v, _)| *v == k) {
                Some((_, lent)) if !server_configured => Some((*lent).to_string()),
                _ => lookup(k),
            }
        })
        .map_err(|e| CtlError::Config(format!("{source}: {e}")))?
        .for_reconciler();
        let optional = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
        let targets = Self {
            store: config.lambda.store,
            manual_queue_url: config.lambda.manual_queue_url,
            notification_queue_url: optional(NOTIFICATION_QUEUE_URL),
            dead_letter_queue_url: optional(DEAD_LETTER_QUEUE_URL),
            gate: config.lambda.gate,
            reconciler: config.lambda.reconciler,
            server_configured,
            source: source.to_string(),
        };
        Ok((targets, config.integration))
    }

    /// The targets of stack `name`: its outputs and parameters (one `DescribeStacks`), the
    /// environment for anything the stack does not give (e.g. `TERMINAL_API_TOKEN` locally).
    ///
    /// # Errors
    /// [`CtlError::PermissionDenied`] without `cloudformation:DescribeStacks`,
    /// [`CtlError::NotFound`] when there is no such stack, [`CtlError::Config`] when it lacks
    /// an output.
    pub async fn from_stack<S: Stack>(
        integration: &S,
        client: &aws_sdk_cloudformation::Client,
        name: &str,
    ) -> Result<(Self, S::Config), CtlError> {
        let out = client
            .describe_stacks()
            .stack_name(name)
            .send()
            .await
            .map_err(|e| {
                let text = aws_sdk_cloudformation::error::DisplayErrorContext(&e).to_string();
                if text.contains("does not exist") {
                    CtlError::NotFound(format!("no stack {name}"))
                } else {
                    CtlError::from_text(text, "cloudformation:DescribeStacks", name)
                }
            })?;
        let stack = out
            .stacks()
            .first()
            .ok_or_else(|| CtlError::NotFound(format!("no stack {name}")))?;
        let outputs: Vec<(String, String)> = stack
            .outputs()
            .iter()
            .filter_map(|o| Some((o.output_key()?.to_string(), o.output_value()?.to_string())))
            .collect();
        let parameters: Vec<(String, String)> = stack
            .parameters()
            .iter()
            .filter_map(|p| {
                Some((
                    p.parameter_key()?.to_string(),
                    p.parameter_value()?.to_string(),
                ))
            })
            .collect();
        let vars = variables_from_stack(&outputs, &parameters, integration.parameters());
        Self::from_lookup(
            integration,
            |k| vars.get(k).cloned().or_else(|| std::env::var(k).ok()),
            &format!("stack {name}"),
        )
    }

    /// The targets from this process's environment.
    ///
    /// # Errors
    /// [`CtlError::Config`] naming every missing or invalid variable.
    pub fn from_env<S: Stack>(stack: &S) -> Result<(Self, S::Config), CtlError> {
        Self::from_lookup(stack, |k| std::env::var(k).ok(), "environment")
    }
}

#[cfg(all(test, feature = "truck-slot"))]
mod tests {
    use super::*;
    use crate::truck::TruckSlotStack;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn stack_outputs_and_parameters_become_the_functions_variables() {
        let outputs = pairs(&[
            ("IdempotencyTableName", "prod-IdempotencyTable-1"),
            ("BookingsTableName", "prod-BookingsTable-1"),
            (
                "ManualBookingQueueUrl",
                "https://sqs.eu-west-1.amazonaws.com/1/manual",
            ),
            (
                "NotificationDeadLetterQueueUrl",
                "https://sqs.eu-west-1.amazonaws.com/1/dlq",
            ),
            (
                "NotificationQueueUrl",
                "https://sqs.eu-west-1.amazonaws.com/1/n",
            ),
            ("DashboardName", "prod-signals"),
        ]);
        let parameters = pairs(&[
            ("IntegrationName", "ect-delta-slots"),
            ("TerminalBaseUrl", "https://slots.example"),
            ("TerminalApiTokenSecretArn", ""),
            ("KeyTtlSeconds", "1814400"),
            ("ReconcilerConcurrency", "4"),
            ("AlarmEmail", "oncall@example.com"),
        ]);
        let vars = variables_from_stack(&outputs, &parameters, TruckSlotStack.parameters());
        assert_eq!(vars["IDEMPOTENCY_TABLE"], "prod-IdempotencyTable-1");
        assert_eq!(
            vars["DEAD_LETTER_QUEUE_URL"],
            "https://sqs.eu-west-1.amazonaws.com/1/dlq"
        );
        assert_eq!(vars["MAX_CONCURRENCY"], "4");
        assert!(!vars.contains_key("TERMINAL_API_TOKEN_SECRET_ARN"));
        assert_eq!(vars.len(), 9, "{vars:?}");
        assert!(t_is_one_terminal(&vars));
        let (t, c) =
            Targets::from_lookup(&TruckSlotStack, |k| vars.get(k).cloned(), "stack prod").unwrap();
        assert_eq!(
            t.call(StoreCall::Booking),
            ("dynamodb:GetItem".into(), "prod-BookingsTable-1".into())
        );
        assert_eq!(t.gate.key_ttl_s, 1_814_400);
        assert_eq!(t.gate.max_concurrency, 4);
        assert!(t.server_configured);
        assert_eq!(c.terminal.base_url, "https://slots.example");
    }

    fn t_is_one_terminal(vars: &BTreeMap<String, String>) -> bool {
        !vars.contains_key("TERMINALS")
    }

    #[test]
    fn several_terminals_come_from_the_terminals_parameter() {
        let outputs = pairs(&[
            ("IdempotencyTableName", "i"),
            ("BookingsTableName", "b"),
            (
                "ManualBookingQueueUrl",
                "https://sqs.eu-west-1.amazonaws.com/1/manual",
            ),
        ]);
        let parameters = pairs(&[
            ("TerminalBaseUrl", ""),
            ("TerminalApiTokenSecretArn", ""),
            (
                "Terminals",
                r#"[{"code": "ECT-DELTA", "supports_idempotency_key": true, "base_url": "https://slots.ect.example", "key_retention_seconds": 86400, "max_concurrent_calls": 4},
                    {"code": "RWG", "supports_idempotency_key": false}]"#,
            ),
            ("TerminalTokenSecretArns", ""),
        ]);
        let vars = variables_from_stack(&outputs, &parameters, TruckSlotStack.parameters());
        let (t, c) =
            Targets::from_lookup(&TruckSlotStack, |k| vars.get(k).cloned(), "stack prod").unwrap();
        let codes: Vec<&str> = c.terminals.iter().map(|s| s.code.as_str()).collect();
        assert_eq!(codes, ["ECT-DELTA", "RWG"]);
        assert!(t.server_configured);
        assert!(!c.policies["RWG"].supports_idempotency_key);
    }

    #[test]
    fn without_a_terminal_url_the_rest_still_reads_and_a_missing_table_is_named() {
        let (t, _) = Targets::from_lookup(
            &TruckSlotStack,
            |k| match k {
                "IDEMPOTENCY_TABLE" => Some("i".into()),
                "BOOKINGS_TABLE" => Some("b".into()),
                "MANUAL_QUEUE_URL" => Some("http://127.0.0.1:5000/1/m".into()),
                _ => None,
            },
            "environment",
        )
        .unwrap();
        assert!(!t.server_configured);
        assert_eq!(t.reconciler.min_age_ms, 0);
        let err = Targets::from_lookup(&TruckSlotStack, |_| None, "environment").unwrap_err();
        assert!(err.to_string().contains("IDEMPOTENCY_TABLE"), "{err}");
        assert!(!err.to_string().contains("TERMINAL_BASE_URL"), "{err}");
    }

    /// `STORE=postgres`: the same variables as the functions', errors named in SQL terms, and
    /// the connection string (with its password) never in the targets' `Debug`.
    #[test]
    fn a_postgres_stack_is_read_as_its_functions_read_it() {
        let vars = [
            ("STORE", "postgres"),
            (
                "DATABASE_URL",
                "postgresql://gate:s3cr3t-pw@db.internal:5432/gate",
            ),
            ("DATABASE_SCHEMA", "ops"),
            ("MANUAL_QUEUE_URL", "http://127.0.0.1:5000/1/m"),
            ("TERMINAL_BASE_URL", "https://slots.example"),
        ];
        let (t, _) = Targets::from_lookup(
            &TruckSlotStack,
            |k| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            },
            "environment",
        )
        .unwrap();
        assert!(matches!(&t.store, StoreConfig::Postgres(s) if s.schema == "ops"));
        assert_eq!(
            t.call(StoreCall::InFlight),
            ("SELECT".into(), "ops.in_flight".into())
        );
        assert_eq!(
            t.call(StoreCall::AppendHistory),
            ("INSERT".into(), "ops.audit_history".into())
        );
        assert_eq!(t.store_name(), "PostgreSQL schema ops");
        assert!(!format!("{t:?}").contains("s3cr3t-pw"), "{t:?}");
        let stack = variables_from_stack(
            &[],
            &pairs(&[
                ("Store", "postgres"),
                (
                    "DatabaseUrlSecretArn",
                    "arn:aws:secretsmanager:eu-west-1:123456789012:secret:db-AbCdEf",
                ),
            ]),
            &[],
        );
        assert_eq!(stack["STORE"], "postgres");
        assert_eq!(
            stack["DATABASE_URL_SECRET_ARN"],
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:db-AbCdEf"
        );
    }

    #[test]
    fn every_output_and_parameter_named_is_in_the_template() {
        let template = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../template.yaml"),
        )
        .unwrap();
        for (key, _) in OUTPUT_VARIABLES
            .iter()
            .chain(PARAMETER_VARIABLES.iter())
            .chain(TruckSlotStack.parameters())
        {
            assert!(template.contains(&format!("\n  {key}:\n")), "{key}");
        }
    }

    /// The root template re-exports the gate application's outputs under the names gatectl
    /// reads (`--stack` reads the integration's stack, not the nested one): each output of
    /// [`OUTPUT_VARIABLES`] is `!GetAtt Gate.Outputs.X` of an output X of the application.
    #[test]
    fn every_output_read_is_the_gate_applications_reexported() {
        use crate::check_template::thresholds::resource;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let root = std::fs::read_to_string(dir.join("template.yaml")).unwrap();
        let gate = std::fs::read_to_string(dir.join("sam/gate/template.yaml")).unwrap();
        let outputs = root.split("\nOutputs:\n").nth(1).expect("Outputs");
        let gate_outputs = gate
            .split("\nOutputs:\n")
            .nth(1)
            .expect("the gate's Outputs");
        for (key, _) in OUTPUT_VARIABLES {
            let block = resource(outputs, key).unwrap_or_else(|| panic!("output {key}"));
            let nested = block
                .split("Value: !GetAtt Gate.Outputs.")
                .nth(1)
                .and_then(|s| s.split_whitespace().next())
                .unwrap_or_else(|| panic!("{key} is not a Gate output:\n{block}"));
            assert!(
                resource(gate_outputs, nested).is_some(),
                "{key}: the gate application has no output {nested}"
            );
        }
    }
}
