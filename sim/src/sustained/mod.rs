//! The sustained-rate replay: the gate under a steady feed, to check the capacity model of
//! `docs/BENCHMARKS.md` ("The scale it holds", which lists what it checks).
//!
//! Notifications arrive on an SQS queue at `rate_per_s` (Poisson arrivals from `seed`) for
//! `duration_s` simulated seconds; a share `duplicate_rate` are redeliveries (a new message id,
//! the same body, 1-60 s after the original). At most `maximum_concurrency` invocations run at
//! once (`ScalingConfig.MaximumConcurrency`), each taking what is visible, up to `batch_size`,
//! after the batching window. Each is the real [`Gate::handle_batch`] with `record_concurrency`
//! records at once over the memory store behind `store_latency_ms` per call, the terminal core
//! behind `terminal_latency_ms` per claim (at most `terminal_concurrency` at once when set), and
//! the in-memory manual queue.
//!
//! Time is simulated (`time`): minutes of it take seconds, deterministic for a seed. The parts:
//! the feed and the queue (`feed`), the latency models (`latency`), the invariants checked at the
//! end (`invariants`: one slot per key, a booking per committed record, nothing lost, nothing in
//! the manual queue, every redelivery a duplicate, no queue growth) and the table (`render`).

mod config;
mod feed;
mod invariants;
mod latency;
mod report;
mod time;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use futures::future::select;
use gate::clock::Clock;
use gate::consumer::{Gate, GateConfig, Invocation, RecordOutcome};
use gate::manual::MemoryManualQueue;
use gate::store::IdempotencyStore;
use gate_testkit::DelayedStore;
use tokio::sync::{Notify, Semaphore};
use truck_slot::TruckSlot;

pub use config::{SustainedConfig, START_MS};
use feed::{body, plan, Message, Queue, QueueState};
use invariants::RunEnd;
use latency::LimitedTerminal;
pub use latency::SimLatency;
pub use report::{capacity, render, Quantiles, SustainedReport};
pub use time::{drive, SimSleep, SimTime};

use crate::dst::CoreTerminal;
use crate::stores::INTEGRATION;
use crate::terminal::{TerminalConfig, TerminalCore};

/// The consumer Lambda's timeout, ms (the template's).
const LAMBDA_TIMEOUT_MS: i64 = 60_000;

/// Runs the replay on simulated time ([`drive`]).
///
/// # Errors
/// When the simulation stalls (a bug: every wait has a timer or a message behind it).
pub fn run_blocking(config: SustainedConfig) -> Result<SustainedReport, String> {
    // On a thread of its own: inside a tokio runtime (the CLI's, the benchmark's), tokio's
    // cooperative budget would make the semaphore and `Notify` answer `Pending` and wake at once
    // once the budget is spent, which this driver would poll forever without time moving.
    std::thread::scope(|s| {
        s.spawn(|| {
            let time = SimTime::new();
            drive(&time, run(config, time.clone()))
        })
        .join()
        .map_err(|_| "the simulation panicked".to_string())?
    })
}

fn outcome_name(o: &RecordOutcome) -> String {
    match o {
        RecordOutcome::Committed { .. } => "committed".into(),
        o if o.is_duplicate() => "duplicate".into(),
        o => format!("{o:?}")
            .split(['(', ' ', '{'])
            .next()
            .unwrap_or("other")
            .to_string(),
    }
}

/// The replay itself, on `time` (driven by [`drive`]; see [`run_blocking`]).
pub async fn run(config: SustainedConfig, time: SimTime) -> SustainedReport {
    let core = TerminalCore::new(TerminalConfig::default(), time.clock() as Arc<dyn Clock>);
    let memory = Arc::new(crate::stores::memory_store());
    let manual = Arc::new(MemoryManualQueue::new());
    let mut gate_config = GateConfig::new(INTEGRATION);
    gate_config.max_concurrency = config.record_concurrency.max(1);
    let gate = Gate {
        config: gate_config,
        store: Arc::new(DelayedStore {
            inner: Arc::clone(&memory) as Arc<dyn IdempotencyStore>,
            pause: SimLatency {
                time: time.clone(),
                delay_ms: config.store_latency_ms as i64,
            },
        }),
        integration: Arc::new(TruckSlot::new(
            Arc::new(LimitedTerminal {
                inner: CoreTerminal::new(Arc::clone(&core)),
                time: time.clone(),
                latency_ms: config.terminal_latency_ms as i64,
                limit: config
                    .terminal_concurrency
                    .map(|n| Arc::new(Semaphore::new(n.max(1)))),
            }),
            vec!["ECT-DELTA".to_string()],
        )),
        manual: manual.clone(),
        clock: time.clock(),
    };

    let (arrivals, events) = plan(&config);
    let bodies: Vec<String> = (0..events).map(body).collect();
    let queue = Arc::new(Queue {
        state: Mutex::new(QueueState::default()),
        changed: Notify::new(),
    });
    let at = |ms: i64| START_MS + ms;

    // The feed.
    let producer = {
        let queue = Arc::clone(&queue);
        let arrivals = arrivals.clone();
        let time = time.clone();
        async move {
            for (m, (offset, event)) in arrivals.into_iter().enumerate() {
                time.sleep_until(at(offset)).await;
                let now = time.now_ms();
                let mut st = queue.lock();
                st.visible.push_back(Message {
                    id: format!("sus-{m:07}"),
                    event,
                    sent_at_ms: now,
                    visible_at_ms: now,
                });
                drop(st);
                queue.changed.notify_waiters();
            }
            queue.lock().producer_done = true;
            queue.changed.notify_waiters();
        }
    };

    // The sampler: the backlog and the running invocations every simulated second.
    let samples: Arc<Mutex<Vec<(usize, usize)>>> = Arc::default();
    let sampler = {
        let queue = Arc::clone(&queue);
        let samples = Arc::clone(&samples);
        let end = config.duration_s as i64 * 1000;
        let time = time.clone();
        async move {
            let mut t = 1_000i64;
            while t <= end {
                time.sleep_until(at(t)).await;
                let st = queue.lock();
                let backlog = st.visible.len() + st.delayed.len();
                let running = st.running;
                drop(st);
                samples
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((backlog, running));
                t += 1_000;
            }
        }
    };

    // The pollers of the event source mapping.
    let visibility_ms = config.visibility_timeout_s as i64 * 1000;
    let pollers = (0..config.maximum_concurrency.max(1)).map(|p| {
        let queue = Arc::clone(&queue);
        let gate = gate.clone();
        let bodies = &bodies;
        let config = &config;
        let time = time.clone();
        async move {
            let mut n = 0u64;
            loop {
                // Wait for a message (or the end).
                let first_seen = loop {
                    let notified = queue.changed.notified();
                    tokio::pin!(notified);
                    notified.as_mut().enable();
                    let next_delayed = {
                        let mut st = queue.lock();
                        let now = time.now_ms();
                        Queue::release_delayed(&mut st, now);
                        if !st.visible.is_empty() {
                            break Some(now);
                        }
                        if st.producer_done && st.delayed.is_empty() && st.in_flight == 0 {
                            break None;
                        }
                        st.delayed.iter().map(|m| m.visible_at_ms).min()
                    };
                    match next_delayed {
                        Some(t) => {
                            let _ = select(notified.as_mut(), time.sleep_until(t)).await;
                        }
                        None => notified.await,
                    }
                };
                let Some(first_seen) = first_seen else {
                    queue.changed.notify_waiters();
                    return;
                };
                // The batching window: wait for a full batch at most this long.
                let window_end = first_seen + config.batching_window_ms as i64;
                loop {
                    let notified = queue.changed.notified();
                    tokio::pin!(notified);
                    notified.as_mut().enable();
                    let (full, now) = {
                        let st = queue.lock();
                        (st.visible.len() >= config.batch_size, time.now_ms())
                    };
                    if full || now >= window_end {
                        break;
                    }
                    let _ = select(notified.as_mut(), time.sleep_until(window_end)).await;
                }
                let batch: Vec<Message> = {
                    let mut st = queue.lock();
                    let take = st.visible.len().min(config.batch_size.max(1));
                    let batch: Vec<Message> = st.visible.drain(..take).collect();
                    st.in_flight += batch.len();
                    st.running += 1;
                    st.deliveries += batch.len();
                    st.invocations += 1;
                    batch
                };
                if batch.is_empty() {
                    queue.lock().running -= 1;
                    continue;
                }
                n += 1;
                let mut event = SqsEvent::default();
                for m in &batch {
                    let mut msg = SqsMessage::default();
                    msg.message_id = Some(m.id.clone());
                    msg.receipt_handle = Some(format!("{}#{p}-{n}", m.id));
                    msg.body = Some(bodies[m.event].clone());
                    event.records.push(msg);
                }
                let started = time.now_ms();
                let invocation = Invocation {
                    request_id: format!("sus-p{p}-{n}"),
                    deadline_ms: started + LAMBDA_TIMEOUT_MS,
                };
                let report = gate.handle_batch(event, &invocation).await;
                let done = time.now_ms();
                let failed: BTreeSet<&str> = report
                    .response
                    .batch_item_failures
                    .iter()
                    .map(|f| f.item_identifier.as_str())
                    .collect();
                let mut st = queue.lock();
                st.running -= 1;
                st.in_flight -= batch.len();
                st.invocation_ms.push(done - started);
                for (m, r) in batch.into_iter().zip(&report.records) {
                    *st.outcomes.entry(outcome_name(&r.outcome)).or_insert(0) += 1;
                    if failed.contains(m.id.as_str()) {
                        st.failed_receives += 1;
                        st.delayed.push(Message {
                            visible_at_ms: done + visibility_ms,
                            ..m
                        });
                    } else {
                        st.acked += 1;
                        *st.acked_events.entry(m.event).or_insert(0) += 1;
                        st.end_to_end_ms.push(done - m.sent_at_ms);
                    }
                }
                drop(st);
                queue.changed.notify_waiters();
            }
        }
    });

    let last_arrival = arrivals.last().map_or(0, |(t, _)| *t);
    let drained_at: Arc<Mutex<Option<i64>>> = Arc::default();
    let watcher = {
        let queue = Arc::clone(&queue);
        let drained_at = Arc::clone(&drained_at);
        let time = time.clone();
        async move {
            loop {
                let notified = queue.changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                {
                    let st = queue.lock();
                    if st.producer_done
                        && st.visible.is_empty()
                        && st.delayed.is_empty()
                        && st.in_flight == 0
                    {
                        *drained_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(time.now_ms());
                        return;
                    }
                }
                notified.await;
            }
        }
    };
    futures::join!(
        producer,
        sampler,
        watcher,
        futures::future::join_all(pollers)
    );

    // The report.
    let st = queue.lock();
    let samples = samples.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let backlog: Vec<usize> = samples.iter().map(|(b, _)| *b).collect();
    let per_minute: Vec<f64> = backlog
        .chunks(60)
        .map(|c| c.iter().sum::<usize>() as f64 / c.len().max(1) as f64)
        .collect();
    let concurrency_max = samples.iter().map(|(_, r)| *r).max().unwrap_or(0);
    let concurrency_mean =
        samples.iter().map(|(_, r)| *r).sum::<usize>() as f64 / samples.len().max(1) as f64;
    let slack = (config.batch_size * config.maximum_concurrency) as f64;
    let queue_grew = match (per_minute.first(), per_minute.last()) {
        (Some(first), Some(last)) => *last > *first + slack,
        _ => false,
    };
    let drained = drained_at
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .unwrap_or(i64::MAX);
    let drained_after_s = (drained - START_MS - last_arrival) as f64 / 1000.0;

    let slots = core.slots();
    let redeliveries = arrivals.len() - events;
    let violations = invariants::check(&RunEnd {
        config: &config,
        events,
        messages: arrivals.len(),
        redeliveries,
        bodies: &bodies,
        slots: &slots,
        records: memory.records(),
        bookings: memory.business_rows(),
        queue: &st,
        manual_items: manual.items().len(),
        per_minute: &per_minute,
        queue_grew,
        drained_after_s,
    });

    let mut inv = st.invocation_ms.clone();
    let mut e2e = st.end_to_end_ms.clone();
    SustainedReport {
        messages: arrivals.len(),
        events,
        redeliveries,
        deliveries: st.deliveries,
        invocations: st.invocations,
        mean_batch: st.deliveries as f64 / st.invocations.max(1) as f64,
        invocation: Quantiles::of(&mut inv),
        end_to_end: Quantiles::of(&mut e2e),
        achieved_per_s: st.acked as f64 / config.duration_s.max(1) as f64,
        backlog_max: backlog.iter().copied().max().unwrap_or(0),
        backlog,
        backlog_mean_per_minute: per_minute,
        concurrency_max,
        concurrency_mean,
        slots: slots.len(),
        outcomes: st.outcomes.clone(),
        drained_after_s,
        queue_grew,
        violations,
        config,
    }
}
