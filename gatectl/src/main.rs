//! `gatectl`: parses the command line, runs the subcommand, prints, exits with its code
//! (`gatectl::error::exit`). Everything else is in the library.

use std::process::ExitCode;

use clap::Parser;
use gatectl::cli::Cli;
use gatectl::ctl::{Confirm, Prompt, Yes};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = async {
        let ctl = gatectl::connect(&cli).await?;
        let mut confirm: Box<dyn Confirm> = if cli.yes {
            Box::new(Yes)
        } else {
            Box::new(Prompt)
        };
        ctl.run(&cli.command.action(), cli.dry_run, confirm.as_mut())
            .await
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
