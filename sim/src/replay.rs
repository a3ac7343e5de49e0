//! Over 600 lines: the replay loop with its report assembly; a split along the report is planned.
//!
//! The incident replay: a scenario through the consumer handler (or the naive handler), the
//! terminal simulator over HTTP on loopback and the at-least-once delivery simulator, on
//! simulated time.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use aws_lambda_events::event::sqs::SqsEvent;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation};
use gate::manual::{ManualQueue, MemoryManualQueue};
use gate::reconciler::ReconcilerConfig;
use gate::record::{record_pk, RecordStatus, INFLIGHT_SHARDS};
use gate::signals::{collect_store_signals, Counts as SignalCounts};
use gate::store::{InFlightIndex, Store};
use rand::RngCore;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::Notify;
use truck_slot::derive_keys;
use truck_slot::notification::parse_notification;
use truck_slot::terminal::several::{
    http_router, parse_terminals, policies, TerminalLimits, TerminalRouter,
};
use truck_slot::terminal::{
    CallOutcome, HttpTerminal, HttpTerminalConfig, LookupOutcome, SlotTerminal,
};
use truck_slot::TruckSlot;

use crate::naive::NaiveHandler;
use crate::recovery::{FinishedBy, Recovery, Tracker};
use crate::scenario::{CrashStep, KeyFault, Scenario};
use crate::signals::{SignalRecorder, SignalSummary};
use crate::sqs::{self, Queue, ReceiveOrder};
use crate::terminal::{self, TerminalCore, DEFAULT_RETENTION_MS};

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
    /// Those items by reason code (`ManualReason::code`, e.g. `past_key_retention`): count.
    pub manual_reasons: BTreeMap<String, usize>,
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
    /// The webhook leg, when the scenario starts at the webhook (`crate::webhook`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook: Option<crate::webhook::WebhookReport>,
    /// The four signals and the alarms that fired (gated handler only).
    pub signals: Option<SignalSummary>,
    /// Per terminal, for a scenario that books at several (`terminal_set`); empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_terminal: Vec<TerminalFigures>,
    /// Every injected worker crash and how long its record took to finish (gated handler only;
    /// `sim recovery` prints the distribution).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub recoveries: Vec<Recovery>,
}

/// A fault injected into the worker that handles a notification's first delivery.
#[derive(Debug, Clone)]
pub enum WorkerFault {
    /// The worker dies at this step while claiming for this container.
    Crash {
        /// The container (canonical ISO 6346).
        container: String,
        /// Where it dies.
        step: CrashStep,
    },
    /// The worker pauses right after the claim for this container, for this many simulated
    /// milliseconds, then carries on (a long GC pause, a stalled network).
    Stall {
        /// The container (canonical ISO 6346).
        container: String,
        /// How long, simulated milliseconds.
        stall_ms: i64,
    },
}

/// Terminal wrapper that applies a [`WorkerFault`] to one container's claim.
struct FaultyTerminal {
    inner: Arc<dyn SlotTerminal>,
    fault: WorkerFault,
    /// Signalled when the worker died (crash) or paused (stall).
    tripped: Arc<Notify>,
    /// Signalled by the replay when a paused worker may go on.
    resume: Arc<Notify>,
}

fn request_container(request: &[u8]) -> Option<String> {
    serde_json::from_slice::<serde_json::Value>(request)
        .ok()?
        .get("equipment_number")?
        .as_str()
        .map(str::to_string)
}

#[async_trait]
impl SlotTerminal for FaultyTerminal {
    async fn claim(&self, op_key: &str, request: &[u8]) -> CallOutcome {
        self.claim_at("", op_key, request).await
    }

    async fn lookup(&self, op_key: &str, request: &[u8]) -> LookupOutcome {
        self.inner.lookup(op_key, request).await
    }

    async fn lookup_at(&self, terminal: &str, op_key: &str, request: &[u8]) -> LookupOutcome {
        self.inner.lookup_at(terminal, op_key, request).await
    }

    async fn claim_at(&self, terminal: &str, op_key: &str, request: &[u8]) -> CallOutcome {
        let container = request_container(request);
        match &self.fault {
            WorkerFault::Crash { container: c, step }
                if container.as_deref() == Some(c)
                    && matches!(step, CrashStep::AfterReserve | CrashStep::AfterClaim) =>
            {
                if *step == CrashStep::AfterClaim {
                    let _ = self.inner.claim_at(terminal, op_key, request).await;
                }
                self.tripped.notify_one();
                // The process is gone: this future never completes and is dropped.
                std::future::pending::<()>().await;
                CallOutcome::Transient("unreachable".into())
            }
            WorkerFault::Stall { container: c, .. } if container.as_deref() == Some(c) => {
                let outcome = self.inner.claim_at(terminal, op_key, request).await;
                self.tripped.notify_one();
                self.resume.notified().await;
                outcome
            }
            _ => self.inner.claim_at(terminal, op_key, request).await,
        }
    }
}

/// Options of a replay.
#[derive(Clone)]
pub struct ReplayOptions {
    /// The handler.
    pub handler: HandlerKind,
    /// The idempotency store for the gated handler; `None` for a fresh
    /// [`gate::store::memory::MemoryStore`] (`crate::stores::memory_store`).
    pub store: Option<Arc<dyn Store>>,
}

impl ReplayOptions {
    /// The naive handler.
    pub fn naive() -> Self {
        Self {
            handler: HandlerKind::Naive,
            store: None,
        }
    }

    /// The gated handler on a fresh [`gate::store::memory::MemoryStore`]
    /// (`crate::stores::memory_store`).
    pub fn gated() -> Self {
        Self {
            handler: HandlerKind::Gated,
            store: None,
        }
    }
}

/// What a replayed message copy carries: its body and which scenario notification it is.
#[derive(Debug, Clone)]
struct Carried {
    body: String,
    notification: usize,
}

/// A received copy: what went into one event record.
#[derive(Debug, Clone)]
struct Received {
    /// The copy's index in the queue.
    copy: usize,
    /// The receipt [`Queue::delete`] needs.
    receipt: u32,
    message_id: String,
    notification: usize,
}

/// A random (version 4) UUID from the replay's seeded generator: message ids and receipt handles
/// are reproducible for a scenario's seed.
fn uuid(rng: &mut ChaCha8Rng) -> String {
    let mut bytes = [0u8; 16];
    rng.fill_bytes(&mut bytes);
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .to_string()
}

/// Receives up to `max` copies at `now_ms`, oldest first, and renders them as a Lambda SQS event
/// (`{"Records": [...]}`), each with a receipt handle drawn from `ids`.
fn receive(
    queue: &mut Queue<Carried>,
    ids: &mut ChaCha8Rng,
    now_ms: i64,
    max: usize,
) -> (Vec<Received>, Value) {
    let mut received = Vec::new();
    let mut records = Vec::new();
    for (copy, receipt) in queue.receive(now_ms, max, ReceiveOrder::Oldest) {
        let m = &queue.msgs[copy];
        let handle = format!("AQEB{}", uuid(ids).replace('-', ""));
        records.push(sqs::lambda_record(m, &m.body.body, &handle, now_ms));
        received.push(Received {
            copy,
            receipt,
            message_id: m.id.clone(),
            notification: m.body.notification,
        });
    }
    (received, serde_json::json!({ "Records": records }))
}

/// The fault a batch triggers: a notification's first delivery carrying a crash or a stall.
fn fault_in_batch(
    scenario: &Scenario,
    received: &[Received],
    done: &HashSet<usize>,
    now_ms: i64,
) -> Option<(usize, WorkerFault)> {
    received.iter().find_map(|r| {
        if done.contains(&r.notification) {
            return None;
        }
        let n = &scenario.notifications[r.notification];
        let container = || {
            parse_notification(&n.body_string(), now_ms, &scenario.terminals)
                .map(|p| p.equipment_number.to_string())
                .unwrap_or_default()
        };
        if let Some(step) = n.crash {
            return Some((
                r.notification,
                WorkerFault::Crash {
                    container: container(),
                    step,
                },
            ));
        }
        n.stall_after_claim_s.map(|s| {
            (
                r.notification,
                WorkerFault::Stall {
                    container: container(),
                    stall_ms: s * 1000,
                },
            )
        })
    })
}

/// Rewrites each record's `notificationId` to `"{id}#{messageId}"`: a key derivation that wrongly
/// includes the SQS message id (unique per delivery), so that no duplicate is ever recognised.
fn include_message_id_in_key(event: &mut serde_json::Value) -> Vec<String> {
    let mut bodies = Vec::new();
    let Some(records) = event.get_mut("Records").and_then(|r| r.as_array_mut()) else {
        return bodies;
    };
    for record in records {
        let message_id = record["messageId"].as_str().unwrap_or_default().to_string();
        let Some(body) = record["body"].as_str() else {
            continue;
        };
        let Ok(mut parsed) = serde_json::from_str::<serde_json::Value>(body) else {
            continue;
        };
        if let Some(id) = parsed.get("notificationId").and_then(|v| v.as_str()) {
            parsed["notificationId"] = serde_json::Value::String(format!("{id}#{message_id}"));
            let faulty = parsed.to_string();
            record["body"] = serde_json::Value::String(faulty.clone());
            bodies.push(faulty);
        }
    }
    bodies
}

/// A running invocation: the batch it holds and its task.
struct Running {
    received: Vec<Received>,
    lost: Vec<usize>,
    at_ms: i64,
    task: tokio::task::JoinHandle<InvocationOutcome>,
}

/// A paused invocation (a stall), resumed at `resume_at_ms`.
struct Paused {
    running: Running,
    resume_at_ms: i64,
    resume: Arc<Notify>,
}

/// Runs `scenario` and reports. Starts the terminal simulator on `127.0.0.1:0` for the run.
///
/// # Errors
/// A message if the terminal simulator cannot bind a port or an event cannot be built.
pub async fn run(scenario: &Scenario, options: ReplayOptions) -> Result<Report, String> {
    let start_ms = scenario.start.timestamp_millis();
    let clock = Arc::new(ManualClock::new(start_ms));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    if options.handler == HandlerKind::Naive && !scenario.terminal_set.is_empty() {
        return Err(format!(
            "the naive handler of the incident books at one terminal; {} books at {}",
            scenario.name,
            scenario.terminal_set.len()
        ));
    }
    let played = play_terminals(scenario, dyn_clock.clone()).await?;
    let retention_ms = played.retention_ms;

    let mut queue = Queue::new(
        scenario.queue.visibility_timeout_s * 1000,
        scenario.queue.max_receive_count,
    );
    let mut ids = ChaCha8Rng::seed_from_u64(scenario.seed);
    let mut webhook_report = None;
    let mut messages = scenario.messages();
    if let Some(settings) = &scenario.webhook {
        // The webhook leg first (it does not depend on the consumer's): what the ingress
        // queued, when, then delivered by the queue as below.
        let (queued, report) = crate::webhook::deliver(scenario, settings, &clock).await?;
        let mut last_id: BTreeMap<usize, String> = BTreeMap::new();
        messages = 0;
        for q in queued {
            let id = match last_id.get(&q.notification) {
                Some(id) if q.copy_of_previous => id.clone(),
                _ => {
                    messages += 1;
                    let id = uuid(&mut ids);
                    last_id.insert(q.notification, id.clone());
                    id
                }
            };
            let body = Carried {
                body: q.body,
                notification: q.notification,
            };
            queue.send(id, body, q.at_ms);
        }
        webhook_report = Some(report);
    } else {
        for (i, n) in scenario.notifications.iter().enumerate() {
            let body = Carried {
                body: n.body_string(),
                notification: i,
            };
            let mut last_id = String::new();
            for a in &n.arrivals {
                let at = start_ms + (a.at_s() * 1000.0) as i64;
                if !a.same_message_id() {
                    last_id = uuid(&mut ids);
                }
                queue.send(last_id.clone(), body.clone(), at);
            }
        }
    }

    let store: Arc<dyn Store> = options
        .store
        .clone()
        .unwrap_or_else(|| Arc::new(crate::stores::memory_store()));
    let manual = Arc::new(MemoryManualQueue::new());
    let mut config = GateConfig::new(INTEGRATION);
    config.server_supports_idempotency_key = scenario.terminal.supports_idempotency_key;
    let base_gate = Gate {
        config,
        store: store.clone(),
        integration: Arc::new(
            TruckSlot::new(played.terminal.clone(), scenario.terminals.clone())
                .with_policies(played.policies.clone()),
        ),
        manual: manual.clone() as Arc<dyn ManualQueue>,
        clock: dyn_clock.clone(),
    };
    let naive = NaiveHandler::new(&played.base_url, scenario.terminals.clone());
    let gated = options.handler == HandlerKind::Gated;

    let mut faulted: HashSet<usize> = HashSet::new();
    // Bodies as the gate saw them under a key fault (their keys are not the scenario's).
    let mut faulty_bodies: Vec<String> = Vec::new();
    let mut counts = Counts::default();
    let mut recorder = SignalRecorder::default();
    let mut invocation_no = 0u64;
    let first_ms = queue.next_visible().unwrap_or(start_ms);
    let mut last_ms = first_ms;
    let batch_size = scenario.queue.batch_size;
    let timeout_ms = scenario.lambda_timeout_s * 1000;
    let reconciler = scenario.reconciler.clone().filter(|_| gated);
    let reconciler_config = ReconcilerConfig {
        min_age_ms: reconciler.as_ref().map_or(0, |r| r.min_age_s * 1000),
        key_retention_ms: retention_ms,
        retention_margin_ms: played.retention_margin_ms,
        ..ReconcilerConfig::default()
    };
    let metrics_interval_ms = gate::signals::STORE_SIGNALS_PERIOD_S * 1000;
    // A scheduled run every `interval_s`, sweeping every `sweep_interval_s` within it (as the
    // reconciler function does: `Gate::reconcile_run`).
    let mut next_reconcile = reconciler.as_ref().map(|r| start_ms + r.interval_s * 1000);
    let mut run_started = next_reconcile.unwrap_or(start_ms);
    let mut recoveries = Tracker::default();
    let mut next_metrics = gated.then_some(start_ms + metrics_interval_ms);
    let mut paused: Vec<Paused> = Vec::new();
    let mut idle_ticks = 0usize;
    let mut steps = 0usize;

    // Each step runs the earliest of: a paused worker resuming, every worker polling a batch, the
    // reconciler's tick, the metrics function's tick (ties in that order). Once no message and no
    // paused worker is left, the ticks go on only while records are in_flight (bounded).
    loop {
        steps += 1;
        if steps > 1_000_000 {
            return Err("replay did not converge".into());
        }
        let next_message = queue.next_visible();
        let next_resume = paused.iter().map(|p| p.resume_at_ms).min();
        let work_left = next_message.is_some() || next_resume.is_some();
        let ticking =
            work_left || (idle_ticks < MAX_IDLE_TICKS && any_in_flight(store.as_ref()).await?);
        let next_tick = [next_reconcile, next_metrics]
            .into_iter()
            .flatten()
            .min()
            .filter(|_| ticking);
        let Some(t) = [next_resume, next_message, next_tick]
            .into_iter()
            .flatten()
            .min()
        else {
            break;
        };
        clock.set_ms(t);
        last_ms = t;

        if next_resume == Some(t) {
            let i = paused
                .iter()
                .position(|p| p.resume_at_ms == t)
                .ok_or("no paused worker")?;
            let p = paused.swap_remove(i);
            p.resume.notify_one();
            let outcome = p.running.task.await.map_err(|e| e.to_string())?;
            settle(
                &mut queue,
                &mut counts,
                &mut recorder,
                p.running.received,
                p.running.lost,
                t,
                outcome,
            );
            if recoveries.waiting() {
                recoveries
                    .check(store.as_ref(), start_ms, t, FinishedBy::Delivery)
                    .await?;
            }
            continue;
        }

        if next_message == Some(t) {
            let mut running = Vec::new();
            for _ in 0..scenario.queue.workers {
                let (received, mut event) = receive(&mut queue, &mut ids, t, batch_size);
                if received.is_empty() {
                    break;
                }
                if scenario.key_fault == Some(KeyFault::IncludesMessageId) {
                    faulty_bodies.extend(include_message_id_in_key(&mut event));
                }
                invocation_no += 1;
                let invocation = Invocation {
                    request_id: format!("inv-{invocation_no:06}"),
                    deadline_ms: t + timeout_ms,
                };
                let fault = fault_in_batch(scenario, &received, &faulted, t);
                let mut lost = Vec::new();
                if let Some((n, _)) = &fault {
                    faulted.insert(*n);
                    if scenario.notifications[*n].message_lost_after_crash {
                        lost.extend(
                            received
                                .iter()
                                .filter(|r| r.notification == *n)
                                .map(|r| r.copy),
                        );
                    }
                }
                let crash_step = match &fault {
                    Some((n, WorkerFault::Crash { step, .. })) => {
                        if gated {
                            recoveries.crashed(scenario, *n, *step, t);
                        }
                        Some(*step)
                    }
                    _ => None,
                };
                let fault = fault.map(|(_, f)| f);
                let event: SqsEvent = serde_json::from_value(event).map_err(|e| e.to_string())?;
                let tripped = Arc::new(Notify::new());
                let resume = Arc::new(Notify::new());
                let stall_ms = match &fault {
                    Some(WorkerFault::Stall { stall_ms, .. }) => Some(*stall_ms),
                    _ => None,
                };
                let task = match options.handler {
                    HandlerKind::Gated => {
                        let mut gate = base_gate.clone();
                        if let Some(fault) = fault {
                            let faulty = Arc::new(FaultyTerminal {
                                inner: played.terminal.clone(),
                                fault,
                                tripped: tripped.clone(),
                                resume: resume.clone(),
                            });
                            gate.integration = Arc::new(
                                TruckSlot::new(faulty, scenario.terminals.clone())
                                    .with_policies(played.policies.clone()),
                            );
                        }
                        let tripped = tripped.clone();
                        tokio::spawn(async move {
                            match crash_step {
                                // The worker dies before it reserves anything.
                                Some(CrashStep::AfterReceive) => InvocationOutcome::Crashed,
                                // It does the whole batch, then dies before answering SQS.
                                Some(CrashStep::AfterCommit) => {
                                    let _ =
                                        run_gated(gate, event, &invocation, tripped, false).await;
                                    InvocationOutcome::Crashed
                                }
                                _ => {
                                    run_gated(gate, event, &invocation, tripped, stall_ms.is_some())
                                        .await
                                }
                            }
                        })
                    }
                    HandlerKind::Naive => {
                        let naive = naive.clone();
                        let crash = match fault {
                            Some(WorkerFault::Crash { container, step }) => Some((container, step)),
                            _ => None,
                        };
                        tokio::spawn(async move { naive.handle(event, crash).await })
                    }
                };
                let run = Running {
                    received,
                    lost,
                    at_ms: t,
                    task,
                };
                match stall_ms {
                    Some(stall_ms) => {
                        // Wait until the worker has claimed and paused (or finished without
                        // reaching the claim), so the schedule does not depend on timing.
                        let mut run = run;
                        tokio::select! {
                            _ = tripped.notified() => paused.push(Paused {
                                running: run,
                                resume_at_ms: t + stall_ms,
                                resume,
                            }),
                            outcome = &mut run.task => {
                                let outcome = outcome.map_err(|e| e.to_string())?;
                                settle(&mut queue, &mut counts, &mut recorder, run.received, run.lost, t, outcome);
                            }
                        }
                    }
                    None => running.push(run),
                }
            }
            for run in running {
                let outcome = run.task.await.map_err(|e| e.to_string())?;
                settle(
                    &mut queue,
                    &mut counts,
                    &mut recorder,
                    run.received,
                    run.lost,
                    run.at_ms,
                    outcome,
                );
            }
            if recoveries.waiting() {
                recoveries
                    .check(store.as_ref(), start_ms, t, FinishedBy::Delivery)
                    .await?;
            }
            continue;
        }

        // A tick.
        if !work_left {
            idle_ticks += 1;
        }
        if next_reconcile == Some(t) {
            if let Some(settings) = reconciler.as_ref() {
                invocation_no += 1;
                let invocation = Invocation {
                    request_id: format!("reconciler-{invocation_no:06}"),
                    deadline_ms: t + timeout_ms,
                };
                let r = base_gate
                    .reconcile(store.as_ref(), &reconciler_config, &invocation)
                    .await;
                if t == run_started {
                    counts.reconciler_runs += 1;
                }
                recorder.record(t, SignalCounts::of_reconcile(&r));
                if recoveries.waiting() {
                    recoveries
                        .check(store.as_ref(), start_ms, t, FinishedBy::Reconciler)
                        .await?;
                }
                let sweep = t + settings.sweep_interval_s.max(1) * 1000;
                let next_run = run_started + settings.interval_s * 1000;
                next_reconcile = Some(if sweep < next_run { sweep } else { next_run });
                if next_reconcile == Some(next_run) {
                    run_started = next_run;
                }
            }
        }
        if next_metrics == Some(t) {
            let s = collect_store_signals(store.as_ref(), t)
                .await
                .map_err(|e| e.to_string())?;
            recorder.sample(t, s);
            next_metrics = Some(t + metrics_interval_ms);
        }
    }
    for p in paused {
        p.running.task.abort();
    }
    if gated {
        // The metrics function's last look, after the last event.
        let s = collect_store_signals(store.as_ref(), last_ms)
            .await
            .map_err(|e| e.to_string())?;
        recorder.sample(last_ms, s);
    }

    // The figures, read back from the terminals, the store and the queues.
    let mut slots = Vec::new();
    let mut per_container: BTreeMap<(usize, String), usize> = BTreeMap::new();
    for (i, (_, core)) in played.cores.iter().enumerate() {
        for s in core.slots() {
            *per_container
                .entry((i, s.equipment_number.clone()))
                .or_insert(0) += 1;
            slots.push(s);
        }
    }
    let (bookings_by_terminal, still_in_flight) = match options.handler {
        HandlerKind::Naive => (BTreeMap::from([(String::new(), naive.bookings())]), 0),
        HandlerKind::Gated => {
            gated_state(scenario, &faulty_bodies, store.as_ref(), clock.now_ms()).await?
        }
    };
    let tms_bookings = bookings_by_terminal.values().sum();
    played.server.abort();
    let per_terminal = per_terminal_figures(
        scenario,
        &played,
        &manual.items(),
        &bookings_by_terminal,
        clock.now_ms(),
    );
    let total = recorder.total();
    Ok(Report {
        scenario: scenario.name.clone(),
        handler: options.handler,
        notifications: scenario.notifications.len(),
        messages,
        deliveries: queue.deliveries(),
        slots_issued: slots.len(),
        containers_with_a_slot: per_container.len(),
        max_slots_per_container: per_container.values().copied().max().unwrap_or(0),
        containers_with_extra_slots: per_container.values().filter(|c| **c > 1).count(),
        tms_bookings,
        duplicates_suppressed: total.duplicates as usize,
        mismatches: total.mismatches as usize,
        routed_to_manual: manual.items().len(),
        manual_reasons: manual
            .items()
            .iter()
            .fold(BTreeMap::new(), |mut by_reason, item| {
                *by_reason
                    .entry(truck_slot::manual_reason_code(item.reason).to_string())
                    .or_insert(0) += 1;
                by_reason
            }),
        still_in_flight,
        taken_over: total.taken_over as usize,
        batch_item_failures: counts.batch_item_failures,
        crashes: counts.crashes,
        dead_lettered: queue.dead_letters().count(),
        reconciled: total.reconciled as usize,
        reconciler_runs: counts.reconciler_runs,
        simulated_seconds: (last_ms - first_ms) / 1000,
        signals: gated.then(|| recorder.summarise(start_ms)),
        webhook: webhook_report,
        per_terminal,
        recoveries: recoveries.into_recoveries(),
    })
}

/// The terminals a replay plays: one simulator (the scenario's `terminal`) served at the root,
/// or one per entry of `terminal_set`, each under `/terminals/{code}` of one server, and the gate
/// configured for them through `TERMINALS` as the functions are ([`parse_terminals`],
/// [`policies`], [`http_router`]).
struct Played {
    /// The simulators by terminal code (one, named by the scenario's `terminal` settings, when
    /// the scenario has no `terminal_set`).
    cores: Vec<(String, Arc<TerminalCore>)>,
    server: tokio::task::JoinHandle<()>,
    /// The one terminal's base URL (the naive handler's).
    base_url: String,
    /// What the gate calls.
    terminal: Arc<dyn SlotTerminal>,
    /// Per terminal code, for `TruckSlot::with_policies` (empty for one terminal).
    policies: BTreeMap<String, truck_slot::terminal::several::TerminalPolicy>,
    /// Each terminal's `max_concurrent_calls`, by code (empty for one terminal).
    limits: BTreeMap<String, usize>,
    /// The router of several terminals (`None` for one).
    router: Option<Arc<TerminalRouter>>,
    /// The (shortest) key retention, ms of simulated time, and the reconciler's margin before it.
    retention_ms: i64,
    retention_margin_ms: i64,
}

async fn play_terminals(scenario: &Scenario, clock: Arc<dyn Clock>) -> Result<Played, String> {
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

/// One terminal's figures in a replay of several.
#[derive(Debug, Clone, Serialize)]
pub struct TerminalFigures {
    /// The terminal code.
    pub terminal: String,
    /// Its API shape (`slots`, `appointments-v2`).
    pub api: String,
    /// Whether it honours `Idempotency-Key`.
    pub supports_idempotency_key: bool,
    /// The scenario's notifications for this terminal (that parse).
    pub notifications: usize,
    /// Slots it issued.
    pub slots_issued: usize,
    /// Distinct containers it issued a slot for.
    pub containers_with_a_slot: usize,
    /// The most slots it issued for one container.
    pub max_slots_per_container: usize,
    /// TMS bookings of its notifications.
    pub tms_bookings: usize,
    /// Manual-queue items whose original body names this terminal.
    pub manual_items: usize,
    /// Distinct event keys among those items (each notification routed once: equal to
    /// `manual_items`).
    pub manual_events: usize,
    /// The gate's limit of calls at once (`max_concurrent_calls`; 0 without key support).
    pub max_concurrent_calls: usize,
    /// The most calls the gate had in flight to it at one time (never above the limit; 0 when
    /// never called).
    pub most_calls_at_once: usize,
    /// The most requests it was answering at one time. Can exceed the limit: a worker that dies
    /// mid-call leaves its request running at the terminal, as a Lambda environment that ends
    /// does.
    pub most_requests_at_once: usize,
}

/// Per-terminal figures of a replay of several terminals (empty for one).
fn per_terminal_figures(
    scenario: &Scenario,
    played: &Played,
    manual: &[gate::manual::ManualItem],
    bookings_by_terminal: &BTreeMap<String, usize>,
    now_ms: i64,
) -> Vec<TerminalFigures> {
    let at = scenario.start.timestamp_millis().min(now_ms);
    scenario
        .terminal_set
        .iter()
        .zip(&played.cores)
        .map(|(t, (_, core))| {
            let slots = core.slots();
            let mut per_container: BTreeMap<&str, usize> = BTreeMap::new();
            for s in &slots {
                *per_container.entry(&s.equipment_number).or_insert(0) += 1;
            }
            let notifications = scenario
                .notifications
                .iter()
                .filter(|n| {
                    parse_notification(&n.body_string(), at, &scenario.terminals)
                        .is_ok_and(|p| p.terminal == t.code)
                })
                .count();
            let items: Vec<_> = manual
                .iter()
                .filter(|item| {
                    serde_json::from_str::<serde_json::Value>(&item.original_body)
                        .ok()
                        .and_then(|b| b.get("terminal")?.as_str().map(|c| c == t.code))
                        .unwrap_or(false)
                })
                .collect();
            let events: HashSet<_> = items.iter().filter_map(|i| i.event_key.as_ref()).collect();
            TerminalFigures {
                terminal: t.code.clone(),
                api: t.api.clone(),
                supports_idempotency_key: t.terminal.supports_idempotency_key,
                notifications,
                slots_issued: slots.len(),
                containers_with_a_slot: per_container.len(),
                max_slots_per_container: per_container.values().copied().max().unwrap_or(0),
                tms_bookings: bookings_by_terminal.get(&t.code).copied().unwrap_or(0),
                manual_items: items.len(),
                manual_events: events.len(),
                max_concurrent_calls: played.limits.get(&t.code).copied().unwrap_or(0),
                most_calls_at_once: played
                    .router
                    .as_ref()
                    .and_then(|r| r.most_calls_at_once(&t.code))
                    .unwrap_or(0),
                most_requests_at_once: core.most_requests_at_once(),
            }
        })
        .collect()
}

/// Applies an invocation's outcome: deletes what it acknowledged (and lost messages), counts.
fn settle(
    queue: &mut Queue<Carried>,
    counts: &mut Counts,
    recorder: &mut SignalRecorder,
    received: Vec<Received>,
    lost: Vec<usize>,
    at_ms: i64,
    outcome: InvocationOutcome,
) {
    for copy in lost {
        queue.purge(copy);
    }
    match outcome {
        InvocationOutcome::Crashed => counts.crashes += 1,
        InvocationOutcome::Finished { acked, report } => {
            for r in &received {
                if acked.contains(&r.message_id) {
                    queue.delete(r.copy, r.receipt);
                }
            }
            recorder.record(at_ms, SignalCounts::of_records(&report));
            counts.batch_item_failures +=
                report.iter().filter(|r| !r.outcome.acknowledged()).count();
        }
        InvocationOutcome::Partial { deleted } => {
            counts.crashes += 1;
            for r in &received {
                if deleted.contains(&r.message_id) {
                    queue.delete(r.copy, r.receipt);
                }
            }
        }
    }
}

/// Reconciler ticks after the queue is empty before a replay gives up on `in_flight` records
/// (a day at one tick a minute).
const MAX_IDLE_TICKS: usize = 1_440;

/// Whether any record is `in_flight`, through the sparse index (any store).
async fn any_in_flight(store: &dyn InFlightIndex) -> Result<bool, String> {
    for shard in 0..INFLIGHT_SHARDS {
        let page = store
            .stale_in_flight(&format!("{shard:02}"), i64::MAX, None, 1)
            .await
            .map_err(|e| e.to_string())?;
        if !page.entries.is_empty() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Counts bookings (by the notification's terminal code) and `in_flight` records for every
/// distinct event key the gate can have used, through the store's own reads (so it works for any
/// store): the keys of the scenario's bodies, and of `faulty_bodies`, the bodies as a key fault
/// rewrote them on delivery.
async fn gated_state(
    scenario: &Scenario,
    faulty_bodies: &[String],
    store: &dyn Store,
    now_ms: i64,
) -> Result<(BTreeMap<String, usize>, usize), String> {
    let mut keys = HashMap::new();
    // Parse as of the scenario start: bodies rejected then never got a record.
    let at = scenario.start.timestamp_millis().min(now_ms);
    let bodies = scenario
        .notifications
        .iter()
        .map(|n| n.body_string())
        .chain(faulty_bodies.iter().cloned());
    for body in bodies {
        if let Ok(p) = parse_notification(&body, at, &scenario.terminals) {
            if let Ok(k) = derive_keys(&p) {
                keys.insert(k.event_key, p.terminal);
            }
        }
    }
    let mut bookings = BTreeMap::new();
    let mut in_flight = 0;
    for (k, terminal) in keys {
        if store
            .business_row(&k)
            .await
            .map_err(|e| e.to_string())?
            .is_some()
        {
            *bookings.entry(terminal).or_insert(0) += 1;
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
        report: Vec<gate::consumer::RecordReport>,
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
    gate: Gate,
    event: SqsEvent,
    invocation: &Invocation,
    tripped: Arc<Notify>,
    stalls: bool,
) -> InvocationOutcome {
    let ids: Vec<String> = event
        .records
        .iter()
        .filter_map(|r| r.message_id.clone())
        .collect();
    let finish = |report: gate::consumer::BatchReport| {
        let failed: HashSet<String> = report
            .response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.clone())
            .collect();
        let acked = ids
            .iter()
            .filter(|id| !failed.contains(*id))
            .cloned()
            .collect();
        InvocationOutcome::Finished {
            acked,
            report: report.records,
        }
    };
    if stalls {
        // A stall pauses inside the terminal call and resumes; `tripped` only tells the replay.
        return finish(gate.handle_batch(event, invocation).await);
    }
    tokio::select! {
        report = gate.handle_batch(event, invocation) => finish(report),
        _ = tripped.notified() => InvocationOutcome::Crashed,
    }
}

/// What the replay counts itself; every per-record figure comes from the gate's own counters
/// ([`SignalRecorder::total`]), the same ones the Lambda functions emit.
#[derive(Default)]
struct Counts {
    crashes: usize,
    reconciler_runs: usize,
    /// Records the consumer reported in `batchItemFailures` (the reconciler's transient
    /// failures are not batch item failures).
    batch_item_failures: usize,
}
