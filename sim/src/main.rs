//! `sim`: replay scenarios through the gate or the naive handler.
use clap::{Parser, Subcommand};
use sim::replay::{self, HandlerKind, ReplayOptions};
use sim::report;
use sim::scenario::Scenario;
use sim::stores::{self, StoreKind};

#[derive(Parser)]
#[command(
    name = "sim",
    about = "The exactly-once gate's outside world: replays and scenarios"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a scenario (a file, or `monday-2025-06-09` for the embedded incident).
    Replay {
        /// Scenario file or embedded name.
        scenario: String,
        /// Run the incident's original handler instead of the gate.
        #[arg(long)]
        naive: bool,
        /// Print the report as one JSON object.
        #[arg(long)]
        json: bool,
        /// The idempotency store of the gated handler.
        #[arg(long, value_enum, default_value = "memory")]
        store: StoreKind,
        /// DynamoDB endpoint for `--store dynamodb`, e.g. a moto server `http://127.0.0.1:5000`.
        #[arg(long)]
        endpoint: Option<String>,
    },
    /// Replay a scenario with both handlers and print the reports side by side.
    Compare {
        /// Scenario file or embedded name.
        #[arg(default_value = "monday-2025-06-09")]
        scenario: String,
        /// Print both reports as a JSON object `{naive, gated}`.
        #[arg(long)]
        json: bool,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Replay {
            scenario,
            naive,
            json,
            store,
            endpoint,
        } => {
            let scenario = Scenario::load(&scenario).map_err(|e| e.to_string())?;
            let handler = if naive {
                HandlerKind::Naive
            } else {
                HandlerKind::Gated
            };
            let store = if naive {
                None
            } else {
                Some(stores::build(store, endpoint.as_deref()).await?)
            };
            let r = replay::run(&scenario, ReplayOptions { handler, store }).await?;
            if json {
                println!("{}", serde_json::to_string(&r).map_err(|e| e.to_string())?);
            } else {
                print!("{}", report::render(&r));
            }
        }
        Command::Compare { scenario, json } => {
            let scenario = Scenario::load(&scenario).map_err(|e| e.to_string())?;
            let naive = replay::run(
                &scenario,
                ReplayOptions {
                    handler: HandlerKind::Naive,
                    store: None,
                },
            )
            .await?;
            let gated = replay::run(
                &scenario,
                ReplayOptions {
                    handler: HandlerKind::Gated,
                    store: None,
                },
            )
            .await?;
            if json {
                let both = serde_json::json!({ "naive": naive, "gated": gated });
                println!("{both}");
            } else {
                print!("{}", report::render_side_by_side(&naive, &gated));
            }
        }
    }
    Ok(())
}
