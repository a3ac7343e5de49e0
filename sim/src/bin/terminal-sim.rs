//! `terminal-sim`: serves the terminal simulator (`sim::terminal`) over HTTP on 127.0.0.1.
//!
//! Prints `listening on http://127.0.0.1:PORT` on stdout once bound; logs go to stderr. With
//! `--terminals JSON` it plays several terminals at once, each under `/terminals/{code}` with its
//! own API shape and behaviour (the entries of a scenario's `terminal_set`,
//! `sim::scenario::SetTerminal`), and prints one more line per terminal:
//! `terminal CODE (API) at http://127.0.0.1:PORT/terminals/CODE`. A port it
//! cannot bind (in use, privileged) ends it with exit code 1 and
//! `terminal-sim: cannot listen on 127.0.0.1:PORT: REASON` on stderr.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use clap::Parser;
use gate::clock::SystemClock;
use sim::scenario::SetTerminal;
use sim::terminal::{base_path, spawn_many, spawn_on, TerminalApi, TerminalConfig, TerminalCore};

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
    /// The API shape: `slots` (POST /slots) or `appointments-v2` (POST /v2/appointments, lookup
    /// GET /v2/appointments/by-key/{key}).
    #[arg(long, default_value = "slots")]
    api: String,
    /// Several terminals at once, a JSON array such as
    /// `[{"code":"ECT-DELTA"},{"code":"APMT-MV2","api":"appointments-v2"},
    /// {"code":"RWG","terminal":{"supports_idempotency_key":false}}]`, each served under
    /// /terminals/{code}; the single-terminal options are then unused.
    #[arg(long, value_name = "JSON")]
    terminals: Option<String>,
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
    if let Some(raw) = &args.terminals {
        return serve_many(raw, args.port).await;
    }
    let api = TerminalApi::from_name(&args.api)
        .ok_or_else(|| format!("--api {:?} is not `slots` or `appointments-v2`", args.api))?;
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
        api,
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

/// `--terminals`: binds 127.0.0.1:`port`, serves every terminal under its base path, prints where.
///
/// # Errors
/// The JSON is not an array of terminals (or names a code twice, or an unknown API), or the port
/// cannot be bound.
async fn serve_many(raw: &str, port: u16) -> Result<(), String> {
    let set: Vec<SetTerminal> = serde_json::from_str(raw)
        .map_err(|e| format!("--terminals is not a terminal list: {e}"))?;
    if set.is_empty() {
        return Err("--terminals names no terminal".into());
    }
    let mut cores = Vec::new();
    for t in &set {
        if cores.iter().any(|(code, _)| code == &t.code) {
            return Err(format!("--terminals names {:?} twice", t.code));
        }
        cores.push((
            t.code.clone(),
            TerminalCore::new(t.simulator()?, Arc::new(SystemClock)),
        ));
    }
    let wanted = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let (addr, server) = spawn_many(cores, wanted)
        .await
        .map_err(|e| format!("cannot listen on {wanted}: {e}"))?;
    let mut out = std::io::stdout();
    let mut text = format!("listening on http://{addr}\n");
    for t in &set {
        text.push_str(&format!(
            "terminal {} ({}) at http://{addr}{}\n",
            t.code,
            t.api,
            base_path(&t.code)
        ));
    }
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| format!("cannot write to stdout: {e}"))?;
    server
        .await
        .map_err(|e| format!("the server on {addr} stopped: {e}"))
}
