//! The incident replay: a scenario through the consumer handler (or the naive handler), the
//! terminal simulator over HTTP on loopback and the at-least-once delivery simulator, on
//! simulated time. This module runs the loop; its parts are the queue side (`delivery`), the
//! terminals (`terminals`), the injected faults (`faults`), one worker's invocation
//! (`invocation`) and the figures read back after the run (`figures`).

mod delivery;
mod faults;
mod figures;
mod invocation;
mod naive;
mod terminals;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use aws_lambda_events::event::sqs::SqsEvent;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation};
use gate::manual::{ManualQueue, MemoryManualQueue};
use gate::reconciler::ReconcilerConfig;
use gate::signals::{collect_store_signals, Counts as SignalCounts};
use gate::store::Store;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tokio::sync::Notify;
use truck_slot::TruckSlot;

use delivery::{receive, send_all, Received};
use faults::{fault_in_batch, include_message_id_in_key, FaultyTerminal, WorkerFault};
use figures::{any_in_flight, gated_state, per_terminal_figures};
pub use figures::{HandlerKind, Report, TerminalFigures};
pub use invocation::InvocationOutcome;
use invocation::{run_gated, settle, Counts};
use naive::NaiveHandler;
use terminals::play_terminals;

use crate::recovery::{FinishedBy, Tracker};
use crate::scenario::{CrashStep, KeyFault, Scenario};
use crate::signals::SignalRecorder;
use crate::sqs::Queue;
pub use crate::stores::INTEGRATION;

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
    let (messages, webhook_report) = send_all(scenario, &clock, &mut queue, &mut ids).await?;

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

/// Reconciler ticks after the queue is empty before a replay gives up on `in_flight` records
/// (a day at one tick a minute).
const MAX_IDLE_TICKS: usize = 1_440;
