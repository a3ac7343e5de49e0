//! Where the stack's tables and queues are, and the gate's settings: from a CloudFormation
//! stack's outputs and parameters (`--stack NAME`), or from the environment variables the
//! functions read (`docs/DEPLOYING.md`, "Configuration"), so `gatectl` and the functions never
//! disagree.

use std::collections::BTreeMap;

use gate::consumer::GateConfig;
use gate::lambda::StoreConfig;
use gate::reconciler::ReconcilerConfig;
use truck_slot::config::FunctionConfig;
use truck_slot::terminal::several::TerminalSpec;
use truck_slot::terminal::HttpTerminalConfig;

use crate::error::CtlError;

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
/// function whose settings `gatectl reconcile` uses).
pub const PARAMETER_VARIABLES: [(&str, &str); 17] = [
    ("IntegrationName", "INTEGRATION_NAME"),
    ("TerminalBaseUrl", "TERMINAL_BASE_URL"),
    ("TerminalApiTokenSecretArn", "TERMINAL_API_TOKEN_SECRET_ARN"),
    (
        "TerminalSupportsIdempotencyKey",
        "TERMINAL_SUPPORTS_IDEMPOTENCY_KEY",
    ),
    ("KnownTerminals", "KNOWN_TERMINALS"),
    ("KeyTtlSeconds", "KEY_TTL_SECONDS"),
    ("LeaseFloorMs", "LEASE_FLOOR_MS"),
    ("ReconcilerConcurrency", "MAX_CONCURRENCY"),
    ("DeadlineMarginMs", "DEADLINE_MARGIN_MS"),
    ("TerminalConnectTimeoutMs", "TERMINAL_CONNECT_TIMEOUT_MS"),
    ("TerminalRequestTimeoutMs", "TERMINAL_REQUEST_TIMEOUT_MS"),
    ("ReconcileMinAgeSeconds", "RECONCILE_MIN_AGE_SECONDS"),
    (
        "TerminalKeyRetentionSeconds",
        "SERVER_KEY_RETENTION_SECONDS",
    ),
    ("RetentionMarginSeconds", "RETENTION_MARGIN_SECONDS"),
    ("ReconcilePageSize", "RECONCILE_PAGE_SIZE"),
    // Several terminals in one stack (`docs/DEPLOYING.md`, "Several terminals in one stack").
    ("Terminals", "TERMINALS"),
    ("TerminalTokenSecretArns", "TERMINAL_TOKEN_SECRET_ARNS"),
];

/// The variables a stack's `outputs` and `parameters` (key, value) stand for, by
/// [`OUTPUT_VARIABLES`] and [`PARAMETER_VARIABLES`]; empty values are left out (an empty
/// `TerminalApiTokenSecretArn` means no token).
pub fn variables_from_stack(
    outputs: &[(String, String)],
    parameters: &[(String, String)],
) -> BTreeMap<String, String> {
    let mut vars = BTreeMap::new();
    for (table, source) in [
        (&OUTPUT_VARIABLES[..], outputs),
        (&PARAMETER_VARIABLES[..], parameters),
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
    /// The idempotency table.
    pub idempotency_table: String,
    /// The TMS bookings table.
    pub bookings_table: String,
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
    /// The terminal client's settings (with several terminals: the settings they share),
    /// `None` when neither `TERMINAL_BASE_URL` nor `TERMINALS` is given (then `lookup`,
    /// `finish --from-terminal` and `reconcile` cannot run).
    pub terminal: Option<HttpTerminalConfig>,
    /// Several terminals (`TERMINALS`), each with its URL, key support and token secret; empty
    /// for one terminal.
    pub terminals: Vec<TerminalSpec>,
    /// The terminal codes the stack books at (`KNOWN_TERMINALS`, or those of `TERMINALS`).
    pub known_terminals: Vec<String>,
    /// With several terminals, each one's key support and claim horizon (empty for one).
    pub policies: std::collections::BTreeMap<String, truck_slot::terminal::several::TerminalPolicy>,
    /// The Secrets Manager secret of the terminal's token, if any.
    pub token_secret_arn: Option<String>,
    /// Where this came from: `stack NAME` or `environment`.
    pub source: String,
}

impl Targets {
    /// Reads the targets through `lookup` (variable name to value) as the functions read their
    /// configuration ([`FunctionConfig::from_env`], the reconciler's view), except that the
    /// terminal (`TERMINAL_BASE_URL`, or `TERMINALS` for several) may be missing.
    ///
    /// # Errors
    /// [`CtlError::Config`] naming every missing or invalid variable.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
        source: &str,
    ) -> Result<Self, CtlError> {
        // The functions' parser requires a terminal; gatectl does not (reads, cancel, redrive).
        // Without one, this never-called URL lets the parser check every other variable, and
        // `terminal` below stays `None`, so nothing is ever sent to it.
        const UNCONFIGURED_TERMINAL: &str = "https://terminal.not-configured.invalid";
        let given = |k: &str| lookup(k).is_some_and(|v| !v.trim().is_empty());
        let has_terminal = given("TERMINAL_BASE_URL") || given("TERMINALS");
        let config = FunctionConfig::from_env(|k| {
            if k == "TERMINAL_BASE_URL" && !has_terminal {
                Some(UNCONFIGURED_TERMINAL.to_string())
            } else {
                lookup(k)
            }
        })
        .map_err(|e| CtlError::Config(format!("{source}: {e}")))?
        .for_reconciler();
        let optional = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
        let StoreConfig::DynamoDb {
            idempotency_table,
            business_table,
            ..
        } = config.lambda.store
        else {
            return Err(CtlError::Config(format!(
                "{source}: STORE: gatectl works on the DynamoDB tables only (STORE=dynamodb)"
            )));
        };
        let terminals = config.integration;
        Ok(Self {
            idempotency_table,
            bookings_table: business_table,
            manual_queue_url: config.lambda.manual_queue_url,
            notification_queue_url: optional(NOTIFICATION_QUEUE_URL),
            dead_letter_queue_url: optional(DEAD_LETTER_QUEUE_URL),
            gate: config.lambda.gate,
            reconciler: config.lambda.reconciler,
            terminal: has_terminal.then_some(terminals.terminal),
            terminals: terminals.terminals,
            known_terminals: terminals.known_terminals,
            policies: terminals.policies,
            token_secret_arn: terminals.token_secret_arn,
            source: source.to_string(),
        })
    }

    /// The targets of stack `name`: its outputs and parameters (one `DescribeStacks`), the
    /// environment for anything the stack does not give (e.g. `TERMINAL_API_TOKEN` locally).
    ///
    /// # Errors
    /// [`CtlError::PermissionDenied`] without `cloudformation:DescribeStacks`,
    /// [`CtlError::NotFound`] when there is no such stack, [`CtlError::Config`] when it lacks
    /// an output.
    pub async fn from_stack(
        client: &aws_sdk_cloudformation::Client,
        name: &str,
    ) -> Result<Self, CtlError> {
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
        let vars = variables_from_stack(&outputs, &parameters);
        Self::from_lookup(
            |k| vars.get(k).cloned().or_else(|| std::env::var(k).ok()),
            &format!("stack {name}"),
        )
    }

    /// The targets from this process's environment.
    ///
    /// # Errors
    /// [`CtlError::Config`] naming every missing or invalid variable.
    pub fn from_env() -> Result<Self, CtlError> {
        Self::from_lookup(|k| std::env::var(k).ok(), "environment")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let vars = variables_from_stack(&outputs, &parameters);
        assert_eq!(vars["IDEMPOTENCY_TABLE"], "prod-IdempotencyTable-1");
        assert_eq!(
            vars["DEAD_LETTER_QUEUE_URL"],
            "https://sqs.eu-west-1.amazonaws.com/1/dlq"
        );
        assert_eq!(vars["MAX_CONCURRENCY"], "4");
        assert!(!vars.contains_key("TERMINAL_API_TOKEN_SECRET_ARN"));
        assert_eq!(vars.len(), 9, "{vars:?}");
        assert!(t_is_one_terminal(&vars));
        let t = Targets::from_lookup(|k| vars.get(k).cloned(), "stack prod").unwrap();
        assert_eq!(t.bookings_table, "prod-BookingsTable-1");
        assert_eq!(t.gate.key_ttl_s, 1_814_400);
        assert_eq!(t.gate.max_concurrency, 4);
        assert_eq!(
            t.terminal.map(|c| c.base_url),
            Some("https://slots.example".to_string())
        );
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
        let vars = variables_from_stack(&outputs, &parameters);
        let t = Targets::from_lookup(|k| vars.get(k).cloned(), "stack prod").unwrap();
        let codes: Vec<&str> = t.terminals.iter().map(|s| s.code.as_str()).collect();
        assert_eq!(codes, ["ECT-DELTA", "RWG"]);
        assert!(t.terminal.is_some());
        assert!(!t.policies["RWG"].supports_idempotency_key);
    }

    #[test]
    fn without_a_terminal_url_the_rest_still_reads_and_a_missing_table_is_named() {
        let t = Targets::from_lookup(
            |k| match k {
                "IDEMPOTENCY_TABLE" => Some("i".into()),
                "BOOKINGS_TABLE" => Some("b".into()),
                "MANUAL_QUEUE_URL" => Some("http://127.0.0.1:5000/1/m".into()),
                _ => None,
            },
            "environment",
        )
        .unwrap();
        assert!(t.terminal.is_none());
        assert_eq!(t.reconciler.min_age_ms, 120_000);
        let err = Targets::from_lookup(|_| None, "environment").unwrap_err();
        assert!(err.to_string().contains("IDEMPOTENCY_TABLE"), "{err}");
        assert!(!err.to_string().contains("TERMINAL_BASE_URL"), "{err}");
    }

    #[test]
    fn every_output_and_parameter_named_is_in_the_template() {
        let template = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../template.yaml"),
        )
        .unwrap();
        for (key, _) in OUTPUT_VARIABLES.iter().chain(PARAMETER_VARIABLES.iter()) {
            assert!(template.contains(&format!("\n  {key}:\n")), "{key}");
        }
    }
}
