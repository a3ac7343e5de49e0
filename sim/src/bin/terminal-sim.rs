//! `terminal-sim`: serves the terminal simulator (`sim::terminal`) over HTTP on 127.0.0.1.
//!
//! Prints `listening on http://127.0.0.1:PORT` on stdout once bound; logs go to stderr. A port it
//! cannot bind (in use, privileged) ends it with exit code 1 and
//! `terminal-sim: cannot listen on 127.0.0.1:PORT: REASON` on stderr.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use clap::Parser;
use gate::clock::SystemClock;
use sim::terminal::{spawn_on, TerminalConfig, TerminalCore};

/// A container terminal's slot-booking API with IETF Idempotency-Key semantics.
#[derive(Debug, Parser)]
#[command(name = "terminal-sim")]
struct Args {
    /// Port to bind on 127.0.0.1 (0 picks a free one).
    #[arg(long)]
    port: u16,
    /// Ignore the Idempotency-Key header entirely (every POST makes a new slot).
    #[arg(long)]
    no_idempotency_key: bool,
    /// Real-time processing latency of a POST, in milliseconds.
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
    /// Probability that a POST answers 503 before taking the key (not stored).
    #[arg(long, default_value_t = 0.0)]
    error_rate: f64,
    /// Probability that a POST runs and is stored but the client gets 504.
    #[arg(long, default_value_t = 0.0)]
    lose_responses_rate: f64,
    /// How long idempotency records are kept, in hours.
    #[arg(long, default_value_t = 24)]
    retention_hours: i64,
    /// How long a retry waits for an in-flight request with the same key, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    in_flight_wait_ms: u64,
    /// Seed of the fault RNG.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The terminal's name, echoed in slot objects.
    #[arg(long, default_value = "ECT-DELTA")]
    terminal_name: String,
    /// Prefix of slot ids.
    #[arg(long, default_value = "ECTD")]
    slot_prefix: String,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    match serve(Args::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("terminal-sim: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Binds 127.0.0.1:`args.port`, prints where it listens and serves until stopped.
///
/// # Errors
/// The port cannot be bound (named in the message), or stdout cannot be written.
async fn serve(args: Args) -> Result<(), String> {
    let config = TerminalConfig {
        supports_idempotency_key: !args.no_idempotency_key,
        latency_ms: args.latency_ms,
        error_rate: args.error_rate,
        lose_response_rate: args.lose_responses_rate,
        retention_ms: args.retention_hours.saturating_mul(60 * 60 * 1000),
        in_flight_wait_ms: args.in_flight_wait_ms,
        seed: args.seed,
        terminal_name: args.terminal_name,
        slot_prefix: args.slot_prefix,
    };
    let core = TerminalCore::new(config, Arc::new(SystemClock));
    let wanted = SocketAddr::from((Ipv4Addr::LOCALHOST, args.port));
    let (addr, server) = spawn_on(core, wanted)
        .await
        .map_err(|e| format!("cannot listen on {wanted}: {e}"))?;
    let mut out = std::io::stdout();
    writeln!(out, "listening on http://{addr}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("cannot write to stdout: {e}"))?;
    server
        .await
        .map_err(|e| format!("the server on {addr} stopped: {e}"))
}
