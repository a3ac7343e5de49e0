//! The terminals a replay plays: one simulator at the root, or one per entry of the scenario's
//! `terminal_set` under `/terminals/{code}` of one server, with the gate configured for them
//! through `TERMINALS` as the functions are.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use gate::clock::Clock;
use truck_slot::terminal::several::{
    http_router, parse_terminals, policies, TerminalLimits, TerminalRouter,
};
use truck_slot::terminal::{HttpTerminal, HttpTerminalConfig, SlotTerminal};

use crate::scenario::Scenario;
use crate::terminal::{self, TerminalCore, DEFAULT_RETENTION_MS};

/// The terminals a replay plays: one simulator (the scenario's `terminal`) served at the root,
/// or one per entry of `terminal_set`, each under `/terminals/{code}` of one server, and the gate
/// configured for them through `TERMINALS` as the functions are ([`parse_terminals`],
/// [`policies`], [`http_router`]).
pub(super) struct Played {
    /// The simulators by terminal code (one, named by the scenario's `terminal` settings, when
    /// the scenario has no `terminal_set`).
    pub(super) cores: Vec<(String, Arc<TerminalCore>)>,
    pub(super) server: tokio::task::JoinHandle<()>,
    /// The one terminal's base URL (the naive handler's).
    pub(super) base_url: String,
    /// What the gate calls.
    pub(super) terminal: Arc<dyn SlotTerminal>,
    /// Per terminal code, for `TruckSlot::with_policies` (empty for one terminal).
    pub(super) policies: BTreeMap<String, truck_slot::terminal::several::TerminalPolicy>,
    /// Each terminal's `max_concurrent_calls`, by code (empty for one terminal).
    pub(super) limits: BTreeMap<String, usize>,
    /// The router of several terminals (`None` for one).
    pub(super) router: Option<Arc<TerminalRouter>>,
    /// The (shortest) key retention, ms of simulated time, and the reconciler's margin before it.
    pub(super) retention_ms: i64,
    pub(super) retention_margin_ms: i64,
}

pub(super) async fn play_terminals(
    scenario: &Scenario,
    clock: Arc<dyn Clock>,
) -> Result<Played, String> {
    if scenario.terminal_set.is_empty() {
        let retention_ms = scenario.terminal.retention_ms();
        let core = TerminalCore::new(scenario.terminal.simulator(), clock);
        let (addr, server) = terminal::spawn(core.clone())
            .await
            .map_err(|e| format!("cannot start the terminal simulator: {e}"))?;
        let base_url = format!("http://{addr}");
        let http =
            HttpTerminal::new(HttpTerminalConfig::new(&base_url)).map_err(|e| e.to_string())?;
        return Ok(Played {
            cores: vec![(String::new(), core)],
            server,
            base_url,
            terminal: Arc::new(http),
            policies: BTreeMap::new(),
            limits: BTreeMap::new(),
            router: None,
            retention_ms,
            retention_margin_ms: (retention_ms / 24).min(3_600_000),
        });
    }
    let mut cores = Vec::new();
    for t in &scenario.terminal_set {
        cores.push((
            t.code.clone(),
            TerminalCore::new(t.simulator()?, clock.clone()),
        ));
    }
    let (addr, server) = terminal::spawn_many(cores.clone(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .map_err(|e| format!("cannot start the terminal simulators: {e}"))?;
    let keyed = scenario
        .terminal_set
        .iter()
        .filter(|t| t.terminal.supports_idempotency_key);
    let retention_ms = keyed
        .map(|t| t.terminal.retention_ms())
        .min()
        .unwrap_or(DEFAULT_RETENTION_MS);
    let retention_margin_ms = (retention_ms / 24).min(3_600_000);
    // The `TERMINALS` value the functions would get for these terminals, through the same parser.
    let terminals: Vec<serde_json::Value> = scenario
        .terminal_set
        .iter()
        .map(|t| {
            let mut entry = serde_json::json!({
                "code": t.code,
                "supports_idempotency_key": t.terminal.supports_idempotency_key,
                "api": t.api,
            });
            if t.terminal.supports_idempotency_key {
                entry["base_url"] = format!("http://{addr}{}", terminal::base_path(&t.code)).into();
                entry["key_retention_seconds"] = (t.terminal.retention_ms() / 1000).into();
                entry["max_concurrent_calls"] = t.max_concurrent_calls.into();
            }
            entry
        })
        .collect();
    let limits = TerminalLimits {
        key_ttl_s: gate::consumer::DEFAULT_KEY_TTL_S,
        retention_margin_s: retention_margin_ms / 1000,
    };
    let specs = parse_terminals(&serde_json::Value::from(terminals).to_string(), limits)
        .map_err(|problems| format!("invalid terminal_set: {}", problems.join("; ")))?;
    let router = http_router(
        &specs,
        &HttpTerminalConfig::new(String::new()),
        BTreeMap::new(),
    )
    .map_err(|e| e.to_string())?;
    let router = Arc::new(router);
    Ok(Played {
        cores,
        server,
        base_url: format!("http://{addr}"),
        terminal: router.clone(),
        router: Some(router),
        policies: policies(&specs, retention_margin_ms),
        limits: specs
            .iter()
            .filter_map(|s| Some((s.code.clone(), s.max_concurrent_calls?)))
            .collect(),
        retention_ms,
        retention_margin_ms,
    })
}
