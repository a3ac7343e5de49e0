//! The incident replay: a scenario through the consumer handler (or the naive handler), the
//! terminal simulator over HTTP on loopback and the at-least-once delivery simulator, on
//! simulated time.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use aws_lambda_events::event::sqs::SqsEvent;
use gate::clock::{Clock, ManualClock};
use gate::gate::{derive_keys, Gate, GateConfig, Invocation, RecordOutcome};
use gate::manual::{ManualQueue, MemoryManualQueue};
use gate::memory::MemoryStore;
use gate::notification::parse_notification;
use gate::reconciler::ReconcilerConfig;
use gate::record::{record_pk, RecordStatus, INFLIGHT_SHARDS};
use gate::store::IdempotencyStore;
use gate::terminal::{ClaimOutcome, HttpTerminal, HttpTerminalConfig, LookupOutcome, SlotTerminal};
use serde::Serialize;
use tokio::sync::Notify;

use crate::delivery::{Received, SqsQueue};
use crate::naive::NaiveHandler;
use crate::scenario::{CrashStep, Scenario};
use crate::terminal::{self, TerminalConfig, TerminalCore};

/// The integration name used in replays (the record key prefix).
pub const INTEGRATION: &str = "ect-delta-slots";

/// Which handler a replay runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HandlerKind {
    /// The incident's original handler: claim, write the booking, delete the message; no key.
    Naive,
    /// The exactly-once gate.
    Gated,
}

/// What a replay produced. Every figure is counted from the terminal's, the store's and the
/// queues' own state after the run, not from the handler's opinion of itself.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// Which handler.
    pub handler: HandlerKind,
    /// Notifications in the scenario.
    pub notifications: usize,
    /// SQS messages sent (copies with the same message id count once).
    pub messages: usize,
    /// Records delivered to the handler (every receive of every message).
    pub deliveries: u64,
    /// Slot claims the terminal answered with a new slot.
    pub slots_issued: usize,
    /// Distinct containers that got a slot.
    pub containers_with_a_slot: usize,
    /// The most slots any one container got.
    pub max_slots_per_container: usize,
    /// Containers with two or more slots.
    pub containers_with_extra_slots: usize,
    /// Rows in the TMS bookings table.
    pub tms_bookings: usize,
    /// Conflicts on reserve with the same fingerprint (acknowledged, no side effect).
    pub duplicates_suppressed: usize,
    /// Same event key, other fingerprint.
    pub mismatches: usize,
    /// Items in the manual-booking queue.
    pub routed_to_manual: usize,
    /// Records still `in_flight` at the end.
    pub still_in_flight: usize,
    /// Expired leases taken over.
    pub taken_over: usize,
    /// Records reported in `batchItemFailures`.
    pub batch_item_failures: usize,
    /// Workers that crashed.
    pub crashes: usize,
    /// Messages moved to the dead-letter queue.
    pub dead_lettered: usize,
    /// Stranded `in_flight` records the reconciler committed.
    pub reconciled: usize,
    /// Reconciler runs.
    pub reconciler_runs: usize,
    /// Simulated seconds from the first arrival to the last delivery or reconciler run.
    pub simulated_seconds: i64,
}

/// Terminal wrapper that kills the worker at a chosen step for one container.
struct CrashingTerminal {
    inner: Arc<dyn SlotTerminal>,
    container: String,
    step: CrashStep,
    tripped: Arc<Notify>,
}

fn request_container(request: &[u8]) -> Option<String> {
    serde_json::from_slice::<serde_json::Value>(request)
        .ok()?
        .get("equipment_number")?
        .as_str()
        .map(str::to_string)
}

#[async_trait]
impl SlotTerminal for CrashingTerminal {
    async fn claim(&self, op_key: &str, request: &[u8]) -> ClaimOutcome {
        if request_container(request).as_deref() == Some(self.container.as_str()) {
            if self.step == CrashStep::AfterClaim {
                let _ = self.inner.claim(op_key, request).await;
            }
            self.tripped.notify_one();
            // The process is gone: this future never completes and is dropped.
            std::future::pending::<()>().await;
        }
        self.inner.claim(op_key, request).await
    }

    async fn lookup(&self, op_key: &str) -> LookupOutcome {
        self.inner.lookup(op_key).await
    }
}

/// Options of a replay.
#[derive(Clone)]
pub struct ReplayOptions {
    /// The handler.
    pub handler: HandlerKind,
    /// The idempotency store for the gated handler; `None` for a fresh [`MemoryStore`].
    pub store: Option<Arc<dyn IdempotencyStore>>,
}

/// The crash a batch triggers: the notification's first delivery, if it carries a crash.
fn crash_in_batch(
    scenario: &Scenario,
    received: &[Received],
    done: &HashSet<usize>,
) -> Option<(usize, CrashStep)> {
    received.iter().find_map(|r| {
        let n = &scenario.notifications[r.notification];
        match n.crash {
            Some(step) if !done.contains(&r.notification) => Some((r.notification, step)),
            _ => None,
        }
    })
}

/// Runs `scenario` and reports. Starts the terminal simulator on `127.0.0.1:0` for the run.
///
/// # Errors
/// A message if the terminal simulator cannot bind a port or an event cannot be built.
pub async fn run(scenario: &Scenario, options: ReplayOptions) -> Result<Report, String> {
    let start_ms = scenario.start.timestamp_millis();
    let clock = Arc::new(ManualClock::new(start_ms));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let core = TerminalCore::new(
        TerminalConfig {
            supports_idempotency_key: scenario.terminal.supports_idempotency_key,
            latency_ms: scenario.terminal.latency_ms,
            error_rate: scenario.terminal.error_rate,
            lose_response_rate: scenario.terminal.lose_response_rate,
            retention_ms: scenario.terminal.retention_hours * 3_600_000,
            seed: scenario.terminal.seed,
            ..TerminalConfig::default()
        },
        dyn_clock.clone(),
    );
    let (addr, server) = terminal::spawn(core.clone())
        .await
        .map_err(|e| format!("cannot start the terminal simulator: {e}"))?;
    let base_url = format!("http://{addr}");

    let mut queue = SqsQueue::new(
        scenario.queue.visibility_timeout_s * 1000,
        scenario.queue.max_receive_count,
        scenario.seed,
    );
    for (i, n) in scenario.notifications.iter().enumerate() {
        let body = n.body_string();
        let mut last_id = String::new();
        for a in &n.arrivals {
            let at = start_ms + (a.at_s() * 1000.0) as i64;
            if a.same_message_id() {
                queue.send_with_id(last_id.clone(), body.clone(), i, at);
            } else {
                last_id = queue.send(body.clone(), i, at);
            }
        }
    }

    let store: Arc<dyn IdempotencyStore> = options
        .store
        .clone()
        .unwrap_or_else(|| Arc::new(MemoryStore::new()));
    let manual = Arc::new(MemoryManualQueue::new());
    let http = HttpTerminal::new(HttpTerminalConfig::new(&base_url)).map_err(|e| e.to_string())?;
    let http: Arc<dyn SlotTerminal> = Arc::new(http);
    let mut config = GateConfig::new(INTEGRATION, scenario.terminals.clone());
    config.terminal_supports_idempotency_key = scenario.terminal.supports_idempotency_key;
    let base_gate = Gate {
        config,
        store: store.clone(),
        terminal: http.clone(),
        manual: manual.clone() as Arc<dyn ManualQueue>,
        clock: dyn_clock.clone(),
    };
    let naive = NaiveHandler::new(&base_url, scenario.terminals.clone());

    let mut crashed_notifications: HashSet<usize> = HashSet::new();
    let mut counts = Counts::default();
    let mut invocation_no = 0u64;
    let first_ms = queue.next_visible_ms().unwrap_or(start_ms);
    let mut last_ms = first_ms;
    let batch_size = scenario.queue.batch_size;
    let timeout_ms = scenario.lambda_timeout_s * 1000;

    // Each step: every worker polls a batch at the earliest time something is visible, or the
    // reconciler runs at its next tick, whichever comes first.
    let reconciler = scenario
        .reconciler
        .clone()
        .filter(|_| options.handler == HandlerKind::Gated);
    let reconciler_config = ReconcilerConfig {
        min_age_ms: reconciler.as_ref().map_or(120_000, |r| r.min_age_s * 1000),
        key_retention_ms: scenario.terminal.retention_hours * 3_600_000,
        ..ReconcilerConfig::default()
    };
    let mut next_tick = reconciler.as_ref().map(|r| start_ms + r.interval_s * 1000);
    let mut idle_ticks = 0usize;
    let mut steps = 0usize;
    loop {
        steps += 1;
        if steps > 1_000_000 {
            return Err("replay did not converge".into());
        }
        let next_message = queue.next_visible_ms();
        let tick_due = match (next_tick, next_message) {
            (Some(tick), Some(m)) => tick <= m,
            (Some(_), None) => {
                // The queue is empty: keep ticking while records are in_flight (bounded).
                idle_ticks < MAX_IDLE_TICKS && any_in_flight(store.as_ref()).await?
            }
            (None, _) => false,
        };
        if tick_due {
            let (Some(tick), Some(settings)) = (next_tick, reconciler.as_ref()) else {
                break;
            };
            clock.set_ms(tick);
            last_ms = tick;
            invocation_no += 1;
            let invocation = Invocation {
                request_id: format!("reconciler-{invocation_no:06}"),
                deadline_ms: tick + timeout_ms,
            };
            let r = base_gate.reconcile(&reconciler_config, &invocation).await;
            counts.reconciled += r.reconciled;
            counts.reconciler_runs += 1;
            if next_message.is_none() {
                idle_ticks += 1;
            }
            next_tick = Some(tick + settings.interval_s * 1000);
            continue;
        }
        let Some(t) = next_message else {
            break;
        };
        clock.set_ms(t);
        last_ms = t;
        let mut batches = Vec::new();
        for _ in 0..scenario.queue.workers {
            let (received, event) = queue.receive(t, batch_size);
            if received.is_empty() {
                break;
            }
            batches.push((received, event));
        }
        let mut runs = Vec::new();
        for (received, event) in batches {
            invocation_no += 1;
            let invocation = Invocation {
                request_id: format!("inv-{invocation_no:06}"),
                deadline_ms: t + timeout_ms,
            };
            let crash = crash_in_batch(scenario, &received, &crashed_notifications);
            let mut lost = Vec::new();
            if let Some((n, _)) = crash {
                crashed_notifications.insert(n);
                if scenario.notifications[n].message_lost_after_crash {
                    lost.extend(
                        received
                            .iter()
                            .filter(|r| r.notification == n)
                            .map(|r| r.slot),
                    );
                }
            }
            let crash = crash.map(|(n, step)| {
                let body = scenario.notifications[n].body_string();
                let container = parse_notification(&body, t, &scenario.terminals)
                    .map(|p| p.equipment_number.to_string())
                    .unwrap_or_default();
                (container, step)
            });
            let event: SqsEvent = serde_json::from_value(event).map_err(|e| e.to_string())?;
            let gate = base_gate.clone();
            let naive = naive.clone();
            let handler = options.handler;
            runs.push(async move {
                let outcome = match handler {
                    HandlerKind::Gated => run_gated(gate, event, &invocation, crash).await,
                    HandlerKind::Naive => naive.handle(event, crash).await,
                };
                (received, lost, outcome)
            });
        }
        for (received, lost, outcome) in futures::future::join_all(runs).await {
            for slot in lost {
                queue.delete(slot);
            }
            match outcome {
                InvocationOutcome::Crashed => counts.crashes += 1,
                InvocationOutcome::Finished { acked, report } => {
                    for r in &received {
                        if acked.contains(&r.message_id) {
                            queue.delete(r.slot);
                        }
                    }
                    for r in report {
                        counts.add(&r);
                    }
                }
                InvocationOutcome::Partial { deleted } => {
                    counts.crashes += 1;
                    for r in &received {
                        if deleted.contains(&r.message_id) {
                            queue.delete(r.slot);
                        }
                    }
                }
            }
        }
    }

    // The figures, read back from the terminal, the store and the queues.
    let slots = core.slots();
    let mut per_container: BTreeMap<String, usize> = BTreeMap::new();
    for s in &slots {
        *per_container.entry(s.equipment_number.clone()).or_insert(0) += 1;
    }
    let (tms_bookings, still_in_flight) = match options.handler {
        HandlerKind::Naive => (naive.bookings(), 0),
        HandlerKind::Gated => gated_state(scenario, store.as_ref(), clock.now_ms()).await?,
    };
    server.abort();
    Ok(Report {
        scenario: scenario.name.clone(),
        handler: options.handler,
        notifications: scenario.notifications.len(),
        messages: scenario.messages(),
        deliveries: queue.deliveries(),
        slots_issued: slots.len(),
        containers_with_a_slot: per_container.len(),
        max_slots_per_container: per_container.values().copied().max().unwrap_or(0),
        containers_with_extra_slots: per_container.values().filter(|c| **c > 1).count(),
        tms_bookings,
        duplicates_suppressed: counts.duplicates,
        mismatches: counts.mismatches,
        routed_to_manual: manual.items().len(),
        still_in_flight,
        taken_over: counts.taken_over,
        batch_item_failures: counts.failures,
        crashes: counts.crashes,
        dead_lettered: queue.dead_letters().len(),
        reconciled: counts.reconciled,
        reconciler_runs: counts.reconciler_runs,
        simulated_seconds: (last_ms - first_ms) / 1000,
    })
}

/// Reconciler ticks after the queue is empty before a replay gives up on `in_flight` records
/// (a day at one tick a minute).
const MAX_IDLE_TICKS: usize = 1_440;

/// Whether any record is `in_flight`, through the sparse index (any store).
async fn any_in_flight(store: &dyn IdempotencyStore) -> Result<bool, String> {
    for shard in 0..INFLIGHT_SHARDS {
        let page = store
            .stale_in_flight(&format!("{shard:02}"), i64::MAX, None, 1)
            .await
            .map_err(|e| e.to_string())?;
        if !page.records.is_empty() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Counts bookings and `in_flight` records for every distinct event of the scenario, through the
/// store's own reads (so it works for any store).
async fn gated_state(
    scenario: &Scenario,
    store: &dyn IdempotencyStore,
    now_ms: i64,
) -> Result<(usize, usize), String> {
    let mut keys = HashSet::new();
    for n in &scenario.notifications {
        // Parse as of the scenario start: bodies rejected then never got a record.
        let at = scenario.start.timestamp_millis();
        if let Ok(p) = parse_notification(&n.body_string(), at.min(now_ms), &scenario.terminals) {
            if let Ok(k) = derive_keys(&p) {
                keys.insert(k.event_key);
            }
        }
    }
    let mut bookings = 0;
    let mut in_flight = 0;
    for k in keys {
        if store
            .booking(&k)
            .await
            .map_err(|e| e.to_string())?
            .is_some()
        {
            bookings += 1;
        }
        if let Some(r) = store
            .get(&record_pk(INTEGRATION, &k))
            .await
            .map_err(|e| e.to_string())?
        {
            if r.status == RecordStatus::InFlight {
                in_flight += 1;
            }
        }
    }
    Ok((bookings, in_flight))
}

/// How one invocation ended.
pub enum InvocationOutcome {
    /// The handler returned: `acked` holds the message ids not in `batchItemFailures`.
    Finished {
        /// Acknowledged message ids.
        acked: HashSet<String>,
        /// Per-record outcomes (gated handler only).
        report: Vec<gate::gate::RecordReport>,
    },
    /// The worker died: nothing is acknowledged.
    Crashed,
    /// The naive worker died after deleting some messages itself.
    Partial {
        /// Message ids the naive handler deleted before it died.
        deleted: HashSet<String>,
    },
}

async fn run_gated(
    mut gate: Gate,
    event: SqsEvent,
    invocation: &Invocation,
    crash: Option<(String, CrashStep)>,
) -> InvocationOutcome {
    let tripped = Arc::new(Notify::new());
    if let Some((container, step)) = crash {
        gate.terminal = Arc::new(CrashingTerminal {
            inner: gate.terminal.clone(),
            container,
            step,
            tripped: tripped.clone(),
        });
    }
    let ids: Vec<String> = event
        .records
        .iter()
        .filter_map(|r| r.message_id.clone())
        .collect();
    tokio::select! {
        report = gate.handle_batch(event, invocation) => {
            let failed: HashSet<String> = report
                .response
                .batch_item_failures
                .iter()
                .map(|f| f.item_identifier.clone())
                .collect();
            let acked = ids.into_iter().filter(|id| !failed.contains(id)).collect();
            InvocationOutcome::Finished { acked, report: report.records }
        }
        _ = tripped.notified() => InvocationOutcome::Crashed,
    }
}

#[derive(Default)]
struct Counts {
    duplicates: usize,
    mismatches: usize,
    taken_over: usize,
    failures: usize,
    crashes: usize,
    reconciled: usize,
    reconciler_runs: usize,
}

impl Counts {
    fn add(&mut self, r: &gate::gate::RecordReport) {
        if r.outcome.is_duplicate() {
            self.duplicates += 1;
        }
        if r.outcome == RecordOutcome::Mismatch {
            self.mismatches += 1;
        }
        if r.took_over {
            self.taken_over += 1;
        }
        if !r.outcome.acknowledged() {
            self.failures += 1;
        }
    }
}
