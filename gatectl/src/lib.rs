//! `gatectl`: the operator's command line of the exactly-once gate. Every runbook
//! step is one command that goes through the gate's own code and conditions
//! ([`gate::operator`], the reconciler), asks before it writes, can show what it would change
//! (`--dry-run`) and leaves an audit line in the record's history.
//!
//! It operates any integration's stack: its core knows no integration, and an integration gives
//! its configuration, words and views through a [`Stack`] (truck-slot's: [`truck::TruckSlotStack`],
//! feature `truck-slot`, the `gatectl` binary). Another integration's `gatectl` is a `main.rs`
//! calling [`main`] with its own `Stack`.
//!
//! * [`cli`]: the command line (clap), in the integration's words;
//! * [`targets`]: where the store (DynamoDB or PostgreSQL) and the queues are (stack outputs and
//!   parameters, or environment), opened by [`open_store`] through the core's operator port;
//! * [`ctl`]: the subcommands; [`stack`], [`words`]: what the integration gives;
//! * [`error`]: errors and exit codes; [`render`]: human units, tables, progress bars;
//! * [`check_template`]: `gatectl check-template FILE`, the checks of a template that deploys
//!   the gate (no stack needed).

pub mod check_template;
pub mod cli;
pub mod ctl;
pub mod error;
pub mod render;
pub mod stack;
pub mod targets;
#[cfg(feature = "truck-slot")]
pub mod truck;
pub mod words;

use std::process::ExitCode;
use std::sync::Arc;

use gate::clock::SystemClock;
use gate::consumer::Gate;
use gate::store::OperatorStore;
use gate_dynamo::sqs::SqsManualQueue;

use crate::cli::Cli;
use crate::ctl::{Confirm, Ctl, Prompt, Yes};
use crate::error::CtlError;
pub use crate::stack::Stack;
use crate::targets::Targets;
pub use crate::words::{Query, View, Words};

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

/// The store of `targets` as the stack's functions use it, the business row's columns named
/// `columns` (the integration's, [`gate::Integration::row_columns`]): DynamoDB's tables, or PostgreSQL
/// (`STORE=postgres`: the connection string from `DATABASE_URL_SECRET_ARN` through `aws`, or
/// `DATABASE_URL` locally), chosen where the functions choose it
/// ([`gate_lambda::store::open_operator_store`]: no canary write, no migration).
///
/// # Errors
/// [`CtlError::PermissionDenied`] when the secret may not be read, else [`CtlError::Config`]
/// naming the variable (never the connection string).
pub async fn open_store(
    targets: &Targets,
    aws: &aws_config::SdkConfig,
    columns: gate::record::RowColumns,
) -> Result<Arc<dyn OperatorStore>, CtlError> {
    gate_lambda::store::open_operator_store(&targets.store, aws, columns)
        .await
        .map_err(|e| {
            let text = e.to_string();
            match CtlError::from_text(text.clone(), "open the store", &targets.store_name()) {
                denied @ CtlError::PermissionDenied { .. } => denied,
                _ => CtlError::Config(format!("{}: {text}", targets.source)),
            }
        })
}

/// Builds the [`Ctl`] for `cli` over `stack`'s integration: the AWS clients from the default
/// credential chain (the SDK's standard retries; `AWS_ENDPOINT_URL` honoured), the targets from
/// `--stack` or the environment, the store they name ([`open_store`]), and the integration with a client of its server (its secrets
/// read) only for the commands that ask the server ([`Stack::connect`], else
/// [`Stack::offline`]).
///
/// # Errors
/// A [`CtlError`]: the stack unreadable, configuration missing, a secret unreadable.
pub async fn connect<S: Stack>(stack: &S, cli: &Cli) -> Result<Ctl, CtlError> {
    let aws = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(4))
        .load()
        .await;
    let (targets, config) = match &cli.stack {
        Some(name) => {
            Targets::from_stack(stack, &aws_sdk_cloudformation::Client::new(&aws), name).await?
        }
        None => Targets::from_env(stack)?,
    };
    let server_ready = targets.server_configured && cli.command.needs_server();
    let integration = if server_ready {
        stack.connect(config, &aws).await?
    } else {
        stack.offline(config)
    };
    // The business row's columns as the integration's functions name them.
    let store = open_store(&targets, &aws, integration.row_columns()).await?;
    let sqs = aws_sdk_sqs::Client::new(&aws);
    let gate = Gate {
        config: targets.gate.clone(),
        store: store.clone(),
        integration: integration.clone(),
        // The manual items carry the integration's own reason codes.
        manual: Arc::new(
            SqsManualQueue::new(sqs.clone(), targets.manual_queue_url.clone()).with_codes(
                Arc::new(move |reason| integration.manual_reason_code(reason)),
            ),
        ),
        clock: Arc::new(SystemClock),
    };
    Ok(Ctl {
        gate,
        store,
        sqs,
        view: stack.view(),
        who: operator_name(cli.operator.as_deref()),
        targets,
        server_ready,
        progress: !cli.json,
    })
}

/// The whole of a `gatectl` binary for `stack`'s integration: parses the command line (with the
/// integration's words, [`cli::parse`]), runs the subcommand, prints its text (or `--json`),
/// and returns its exit code ([`error::exit`]). truck-slot's is
/// `gatectl::main(gatectl::truck::TruckSlotStack)`.
pub async fn main<S: Stack>(stack: S) -> ExitCode {
    let view = stack.view();
    let cli = cli::parse(view.words());
    let Some(action) = cli.command.action() else {
        return check_template_main(&cli);
    };
    let result = async {
        let ctl = connect(&stack, &cli).await?;
        let mut confirm: Box<dyn Confirm> = if cli.yes {
            Box::new(Yes)
        } else {
            Box::new(Prompt)
        };
        ctl.run(&action, cli.dry_run, confirm.as_mut()).await
    }
    .await;
    match result {
        Ok(out) => {
            if cli.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&out.json).unwrap_or_default()
                );
            } else {
                print!("{}", out.text);
            }
            ExitCode::from(out.code)
        }
        Err(e) => {
            eprintln!("gatectl: {e}");
            if cli.json {
                println!(
                    "{}",
                    serde_json::json!({"error": e.to_string(), "exit_code": e.exit_code()})
                );
            }
            ExitCode::from(e.exit_code())
        }
    }
}

/// `gatectl check-template FILE`: prints the report (or `--json`), exit 0 when every check
/// passed, 1 on any finding, 2 for another command.
fn check_template_main(cli: &Cli) -> ExitCode {
    let cli::Command::CheckTemplate { file, require_lint } = &cli.command else {
        return ExitCode::from(2);
    };
    let report = check_template::run(file, *require_lint);
    if cli.json {
        println!(
            "{}",
            serde_json::json!({"file": file, "failed": report.failed, "lines": report.lines})
        );
    } else {
        for line in &report.lines {
            println!("{line}");
        }
    }
    ExitCode::from(u8::from(report.failed))
}
