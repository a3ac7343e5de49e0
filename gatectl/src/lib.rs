//! `gatectl`: the operator's command line of the exactly-once gate (issue 17). Every runbook
//! step is one command that goes through the gate's own code and conditions
//! ([`gate::operator`], the reconciler), asks before it writes, can show what it would change
//! (`--dry-run`) and leaves an audit line in the record's history.
//!
//! * [`cli`]: the command line (clap);
//! * [`targets`]: where the tables and queues are (stack outputs or environment);
//! * [`ctl`]: the subcommands;
//! * [`error`]: errors and exit codes; [`render`]: human units, tables, progress bars.

pub mod cli;
pub mod ctl;
pub mod error;
pub mod render;
pub mod targets;

use std::sync::Arc;

use gate::clock::SystemClock;
use gate::consumer::Gate;
use gate::manual::sqs::SqsManualQueue;
use gate::store::dynamo::DynamoStore;
use truck_slot::terminal::{HttpTerminal, SlotTerminal};

use crate::cli::Cli;
use crate::ctl::{Ctl, NoTerminal};
use crate::error::CtlError;
use crate::targets::Targets;

/// `gatectl:{name}`: `--as NAME`, else `$USER` (`$USERNAME` on Windows), else `unknown`.
pub fn operator_name(given: Option<&str>) -> String {
    let name = given
        .map(str::to_string)
        .or_else(|| std::env::var("USER").ok())
        .or_else(|| std::env::var("USERNAME").ok())
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| "unknown".into());
    format!("{}{name}", gate::operator::OPERATOR_OWNER_PREFIX)
}

/// Builds the [`Ctl`] for `cli`: the AWS clients from the default credential chain (the SDK's
/// standard retries; `AWS_ENDPOINT_URL` honoured), the targets from `--stack` or the
/// environment, and the terminal client (its token from Secrets Manager when the stack names
/// a secret) only for the commands that ask the terminal.
///
/// # Errors
/// A [`CtlError`]: the stack unreadable, configuration missing, the token unreadable.
pub async fn connect(cli: &Cli) -> Result<Ctl, CtlError> {
    let aws = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(4))
        .load()
        .await;
    let targets = match &cli.stack {
        Some(name) => Targets::from_stack(&aws_sdk_cloudformation::Client::new(&aws), name).await?,
        None => Targets::from_env()?,
    };
    let store = Arc::new(DynamoStore::new(
        aws_sdk_dynamodb::Client::new(&aws),
        targets.idempotency_table.clone(),
        targets.bookings_table.clone(),
    ));
    let sqs = aws_sdk_sqs::Client::new(&aws);
    let (terminal, terminal_ready): (Arc<dyn SlotTerminal>, bool) =
        match (&targets.terminal, cli.command.needs_terminal()) {
            (Some(config), true) if !targets.terminals.is_empty() => {
                // Several terminals: the reconciler's own router, each token from its secret.
                let client = aws_sdk_secretsmanager::Client::new(&aws);
                let router =
                    truck_slot::lambda::terminal_router(&targets.terminals, config, &client)
                        .await
                        .map_err(|e| {
                            CtlError::from_text(
                                e.to_string(),
                                "secretsmanager:GetSecretValue",
                                "the terminals' token secrets (TerminalTokenSecretArns)",
                            )
                        })?;
                (Arc::new(router), true)
            }
            (Some(config), true) => {
                let mut config = config.clone();
                if let Some(arn) = &targets.token_secret_arn {
                    let client = aws_sdk_secretsmanager::Client::new(&aws);
                    config.token = Some(
                        truck_slot::secrets::fetch_api_token(&client, arn)
                            .await
                            .map_err(|e| {
                                CtlError::from_text(
                                    e.to_string(),
                                    "secretsmanager:GetSecretValue",
                                    arn,
                                )
                            })?,
                    );
                }
                let http = HttpTerminal::new(config)
                    .map_err(|e| CtlError::Config(format!("terminal client: {e}")))?;
                (Arc::new(http), true)
            }
            _ => (Arc::new(NoTerminal), false),
        };
    let gate = Gate {
        config: targets.gate.clone(),
        store: store.clone(),
        integration: Arc::new(
            truck_slot::TruckSlot::new(terminal, targets.known_terminals.clone())
                .with_policies(targets.policies.clone()),
        ),
        manual: Arc::new(
            SqsManualQueue::new(sqs.clone(), targets.manual_queue_url.clone())
                .with_codes(Arc::new(truck_slot::manual_reason_code)),
        ),
        clock: Arc::new(SystemClock),
    };
    Ok(Ctl {
        gate,
        store,
        sqs,
        who: operator_name(cli.operator.as_deref()),
        targets,
        terminal_ready,
        progress: !cli.json,
    })
}
