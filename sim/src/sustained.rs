//! Over 600 lines: the sustained-rate replay and its capacity figures; a split along the report is
//! planned.
//!
//! The sustained-rate replay (issue 18): the gate under a steady feed, to check the capacity
//! model of `docs/BENCHMARKS.md` ("The scale it holds").
//!
//! Notifications arrive on an SQS queue at `rate_per_s` (Poisson arrivals from `seed`) for
//! `duration_s` simulated seconds; a share `duplicate_rate` of the deliveries are redeliveries
//! (a new message id, the same body, 1-60 s after the original, within the run). The Lambda event source mapping
//! runs at most `maximum_concurrency` invocations at once (`ScalingConfig.MaximumConcurrency`),
//! each taking what is visible, up to `batch_size` messages, after the batching window
//! (`MaximumBatchingWindowInSeconds`, here in ms; 0 = take what is there). Each invocation is the
//! real [`Gate::handle_batch`] with `record_concurrency` records at once (`RecordConcurrency`,
//! [`GateConfig::max_concurrency`]) over:
//!
//! * the real [`gate::store::memory::MemoryStore`] behind a fixed latency per call
//!   (`store_latency_ms`, the latency model of DynamoDB the benchmarks use: concurrent calls are
//!   served in parallel);
//! * the terminal simulator's core in process with `terminal_latency_ms` per slot claim, and at
//!   most `terminal_concurrency` claims served at once when set (a terminal's limit: its rate is
//!   then at most `terminal_concurrency / latency`; more waits in line);
//! * the in-memory manual queue.
//!
//! Time is simulated ([`SimTime`], driven by [`drive`] on one thread: the clock jumps to the next
//! timer whenever nothing else can run): the run takes seconds of real time for minutes of
//! simulated time and is deterministic for a seed. Acknowledged messages are
//! deleted; a batch item failure makes the message visible again after the visibility timeout.
//!
//! What the report holds: arrivals, deliveries, invocations and their mean batch size and
//! duration, the backlog (visible messages waiting for a poller) sampled every simulated second
//! with its maximum and its mean per minute, the time from arrival to acknowledgement (p50, p99,
//! max), the achieved rate, and the invariants of the deterministic simulation that apply to a
//! run without faults ([`SustainedReport::violations`], empty when all hold):
//!
//! 1. one slot per key: the terminal issued exactly one slot per distinct event, each under the
//!    event's `Idempotency-Key`;
//! 2. a booking per committed record, never replaced: every event's record is `committed` with
//!    the slot issued under its key, and its TMS booking carries that slot id; no other bookings;
//! 3. nothing lost: every message acknowledged and deleted, no batch item failure left a message
//!    on the queue, none dead-lettered; no record left `in_flight` or with its routing pending;
//! 4. nothing in the manual queue (no mismatch or poison body was sent);
//! 5. every redelivery answered as a duplicate (with 1, the terminal made no slot for it).
//!
//! And the property the replay exists for, **no queue growth**: the backlog's mean over the last
//! simulated minute of arrivals is at most one full batch per poller above its mean over the
//! first minute, and the queue drains within `drain_bound_s` of the last arrival.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use async_trait::async_trait;
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use futures::future::select;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation, RecordOutcome};
use gate::manual::MemoryManualQueue;
use gate::record::{BusinessRow, IdempotencyRecord, RecordStatus};
use gate::store::IdempotencyStore;
use gate_testkit::{DelayedStore, Pause};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use tokio::sync::{Notify, Semaphore};
use truck_slot::iso6346::check_digit;
use truck_slot::terminal::{CallOutcome, LookupOutcome, SlotTerminal};
use truck_slot::TruckSlot;

use crate::dst::CoreTerminal;
use crate::replay::INTEGRATION;
use crate::terminal::{TerminalConfig, TerminalCore};

/// 2025-06-09T05:00:00Z, the simulated start (epoch ms).
pub const START_MS: i64 = 1_749_445_200_000;
/// The consumer Lambda's timeout, ms (the template's).
const LAMBDA_TIMEOUT_MS: i64 = 60_000;

/// The deployment and the feed of one sustained run.
#[derive(Debug, Clone, Serialize)]
pub struct SustainedConfig {
    /// Mean arrivals per simulated second (Poisson).
    pub rate_per_s: f64,
    /// Simulated seconds of arrivals.
    pub duration_s: u64,
    /// Share of deliveries that are redeliveries of an earlier notification (0..1).
    pub duplicate_rate: f64,
    /// The event source mapping's `ScalingConfig.MaximumConcurrency`: invocations at once.
    pub maximum_concurrency: usize,
    /// The event source mapping's `BatchSize` (at most 10 for SQS without a batching window).
    pub batch_size: usize,
    /// `MaximumBatchingWindowInSeconds`, in ms: a poller that found fewer than `batch_size`
    /// messages waits this long for more. 0: it takes what is there.
    pub batching_window_ms: u64,
    /// The gate's `RecordConcurrency` ([`GateConfig::max_concurrency`]): records of one batch at
    /// once.
    pub record_concurrency: usize,
    /// Latency of one slot claim at the terminal, ms.
    pub terminal_latency_ms: u64,
    /// Claims the terminal serves at once (its limit); `None`: no limit.
    pub terminal_concurrency: Option<usize>,
    /// Latency of one DynamoDB call, ms (concurrent calls in parallel).
    pub store_latency_ms: u64,
    /// The queue's visibility timeout, s (a failed message is visible again after it).
    pub visibility_timeout_s: u64,
    /// The queue must be empty this long after the last arrival, s.
    pub drain_bound_s: u64,
    /// Seed of the arrivals and of which notifications are redelivered.
    pub seed: u64,
}

impl Default for SustainedConfig {
    /// The run: 100 events/s for 10 simulated minutes, 3 % redeliveries, terminal 200 ms,
    /// DynamoDB 5 ms, `MaximumConcurrency` 5, batches of 10, `RecordConcurrency` 10.
    fn default() -> Self {
        Self {
            rate_per_s: 100.0,
            duration_s: 600,
            duplicate_rate: 0.03,
            maximum_concurrency: 5,
            batch_size: 10,
            batching_window_ms: 0,
            record_concurrency: 10,
            terminal_latency_ms: 200,
            terminal_concurrency: None,
            store_latency_ms: 5,
            visibility_timeout_s: 360,
            drain_bound_s: 10,
            seed: 18,
        }
    }
}

/// Medians and tails of a sample, ms.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Quantiles {
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Maximum.
    pub max_ms: f64,
}

impl Quantiles {
    fn of(values: &mut [i64]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        values.sort_unstable();
        let at = |q: f64| {
            let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
            values[rank - 1] as f64
        };
        Self {
            p50_ms: at(0.5),
            p99_ms: at(0.99),
            max_ms: values[values.len() - 1] as f64,
        }
    }
}

/// What a sustained run did.
#[derive(Debug, Clone, Serialize)]
pub struct SustainedReport {
    /// The configuration.
    pub config: SustainedConfig,
    /// Messages sent (distinct notifications plus redeliveries).
    pub messages: usize,
    /// Distinct notifications.
    pub events: usize,
    /// Redeliveries sent.
    pub redeliveries: usize,
    /// Records handed to invocations (every receive).
    pub deliveries: usize,
    /// Consumer invocations.
    pub invocations: usize,
    /// Mean records per invocation.
    pub mean_batch: f64,
    /// Invocation duration (the billed part), ms.
    pub invocation: Quantiles,
    /// Arrival on the queue to acknowledgement, ms.
    pub end_to_end: Quantiles,
    /// Events acknowledged per simulated second of arrivals (messages / duration).
    pub achieved_per_s: f64,
    /// The backlog (visible messages not yet received) every simulated second.
    pub backlog: Vec<usize>,
    /// The backlog's largest sample.
    pub backlog_max: usize,
    /// The backlog's mean over each simulated minute of arrivals.
    pub backlog_mean_per_minute: Vec<f64>,
    /// Invocations running at once: the largest sample, and the mean over the arrivals.
    pub concurrency_max: usize,
    /// Mean invocations running at once while notifications arrived.
    pub concurrency_mean: f64,
    /// Slot claims the terminal served.
    pub slots: usize,
    /// Outcomes by name.
    pub outcomes: BTreeMap<String, usize>,
    /// Seconds from the last arrival until the queue was empty.
    pub drained_after_s: f64,
    /// Whether the backlog grew (see the module docs).
    pub queue_grew: bool,
    /// Invariant violations (empty: all held).
    pub violations: Vec<String>,
}

/// Simulated time: a [`ManualClock`] the gate reads, and timers the driver ([`drive`]) fires in
/// time order, moving the clock to each, whenever nothing else can run.
#[derive(Clone)]
pub struct SimTime {
    clock: Arc<ManualClock>,
    timers: Arc<Mutex<BTreeMap<(i64, u64), Waker>>>,
    seq: Arc<AtomicU64>,
}

impl SimTime {
    /// Time at `START_MS`, no timers.
    pub fn new() -> Self {
        Self {
            clock: Arc::new(ManualClock::new(START_MS)),
            timers: Arc::default(),
            seq: Arc::default(),
        }
    }

    /// Now, epoch ms.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// The clock the gate and the terminal read.
    pub fn clock(&self) -> Arc<ManualClock> {
        Arc::clone(&self.clock)
    }

    /// A future ready at `at_ms` (epoch ms).
    pub fn sleep_until(&self, at_ms: i64) -> SimSleep {
        SimSleep {
            time: self.clone(),
            at_ms,
            key: None,
        }
    }

    /// A future ready `ms` from now.
    pub fn sleep_ms(&self, ms: i64) -> SimSleep {
        self.sleep_until(self.now_ms() + ms.max(0))
    }

    /// Moves the clock to the earliest timer and wakes every timer due then; `false` when there
    /// is none.
    fn advance(&self) -> bool {
        let mut timers = self.timers.lock().unwrap_or_else(|e| e.into_inner());
        let Some((&(at, _), _)) = timers.iter().next() else {
            return false;
        };
        if at > self.clock.now_ms() {
            self.clock.set_ms(at);
        }
        let due: Vec<(i64, u64)> = timers.range(..(at + 1, 0)).map(|(k, _)| *k).collect();
        let wakers: Vec<Waker> = due.iter().filter_map(|k| timers.remove(k)).collect();
        drop(timers);
        for w in wakers {
            w.wake();
        }
        true
    }
}

impl Default for SimTime {
    fn default() -> Self {
        Self::new()
    }
}

/// A sleep on simulated time ([`SimTime::sleep_until`]).
pub struct SimSleep {
    time: SimTime,
    at_ms: i64,
    key: Option<(i64, u64)>,
}

impl Future for SimSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.time.now_ms() >= self.at_ms {
            if let Some(k) = self.key.take() {
                self.time
                    .timers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&k);
            }
            return Poll::Ready(());
        }
        let key = match self.key {
            Some(k) => k,
            None => {
                let k = (self.at_ms, self.time.seq.fetch_add(1, Ordering::Relaxed));
                self.key = Some(k);
                k
            }
        };
        self.time
            .timers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for SimSleep {
    fn drop(&mut self) {
        if let Some(k) = self.key.take() {
            self.time
                .timers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&k);
        }
    }
}

/// A waker that raises a flag.
#[derive(Default)]
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Runs `fut` to completion on simulated time: polls it while it was woken, else fires the
/// earliest timer. One thread, no real sleeps: the same input gives the same run.
///
/// # Errors
/// When `fut` waits with no timer left (nothing could ever wake it).
pub fn drive<F: Future>(time: &SimTime, fut: F) -> Result<F::Output, String> {
    let flag = Arc::new(Flag(AtomicBool::new(true)));
    let waker = Waker::from(Arc::clone(&flag));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if flag.0.swap(false, Ordering::SeqCst) {
            if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                return Ok(v);
            }
            continue;
        }
        if !time.advance() {
            return Err(format!(
                "stalled at +{} ms: waiting with no timer left",
                time.now_ms() - START_MS
            ));
        }
    }
}

/// A fixed latency per store request in simulated time: with [`DelayedStore`] over the memory
/// store, a latency model of DynamoDB, which serves concurrent requests in parallel.
pub struct SimLatency {
    time: SimTime,
    delay_ms: i64,
}

#[async_trait]
impl Pause for SimLatency {
    async fn pause(&self) {
        self.time.sleep_ms(self.delay_ms).await;
    }
}

/// The terminal core behind `latency_ms` per claim, with at most `limit` claims served at once
/// (the rest wait in line).
struct LimitedTerminal {
    inner: CoreTerminal,
    time: SimTime,
    latency_ms: i64,
    limit: Option<Arc<Semaphore>>,
}

#[async_trait]
impl SlotTerminal for LimitedTerminal {
    async fn claim(&self, op_key: &str, request: &[u8]) -> CallOutcome {
        let _permit = match &self.limit {
            Some(s) => s.acquire().await.ok(),
            None => None,
        };
        self.time.sleep_ms(self.latency_ms).await;
        self.inner.claim(op_key, request).await
    }

    async fn lookup(&self, op_key: &str, request: &[u8]) -> LookupOutcome {
        self.inner.lookup(op_key, request).await
    }
}

/// One message on the queue.
#[derive(Debug, Clone)]
struct Message {
    id: String,
    /// Index of the notification.
    event: usize,
    sent_at_ms: i64,
    visible_at_ms: i64,
}

#[derive(Default)]
struct QueueState {
    visible: VecDeque<Message>,
    /// Failed messages, visible again at their `visible_at_ms`.
    delayed: Vec<Message>,
    /// Received, not yet deleted.
    in_flight: usize,
    /// All arrivals sent.
    producer_done: bool,
    running: usize,
    deliveries: usize,
    invocations: usize,
    acked: usize,
    failed_receives: usize,
    invocation_ms: Vec<i64>,
    end_to_end_ms: Vec<i64>,
    outcomes: BTreeMap<String, usize>,
    /// Messages acknowledged per event index (a redelivery shares its original's index).
    acked_events: BTreeMap<usize, usize>,
}

struct Queue {
    state: Mutex<QueueState>,
    changed: Notify,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes delayed messages whose time has come visible.
    fn release_delayed(st: &mut QueueState, now: i64) {
        let mut i = 0;
        while i < st.delayed.len() {
            if st.delayed[i].visible_at_ms <= now {
                let m = st.delayed.remove(i);
                st.visible.push_back(m);
            } else {
                i += 1;
            }
        }
    }
}

/// A valid ISO 6346 number for serial `n`.
fn container(n: usize) -> String {
    let first = format!("SUSU{:06}", n % 1_000_000);
    let digit = check_digit(&first).unwrap_or(0);
    format!("{first}{digit}")
}

/// The body of notification `i`: its own container, a window the day after the start.
fn body(i: usize) -> String {
    let day = START_MS + 24 * 3_600_000;
    let start = day + (i as i64 % 48) * 15 * 60_000;
    let fmt = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap_or_default()
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    };
    serde_json::json!({
        "notificationId": format!("PCS-S{i:07}"),
        "equipment_number": container(i),
        "preferred_window": {"start": fmt(start), "end": fmt(start + 2 * 3_600_000)},
        "terminal": "ECT-DELTA",
        "pin": format!("{:04}", (i * 7919) % 10_000),
        "gross_mass_kg": 12_000 + (i % 19) * 1000,
    })
    .to_string()
}

/// The planned arrivals: (time offset ms, event index), in time order.
fn plan(config: &SustainedConfig) -> (Vec<(i64, usize)>, usize) {
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    let horizon = config.duration_s as f64 * 1000.0;
    let rate_ms = config.rate_per_s.max(1e-9) / 1000.0;
    let mut times = Vec::new();
    let mut t = 0.0f64;
    loop {
        let u: f64 = rng.random::<f64>().max(1e-12);
        t += -u.ln() / rate_ms;
        if t >= horizon {
            break;
        }
        times.push(t as i64);
    }
    let mut arrivals: Vec<(i64, usize)> = Vec::with_capacity(times.len());
    let mut events = 0usize;
    let mut redeliveries: Vec<(i64, usize)> = Vec::new();
    let dup = config.duplicate_rate.clamp(0.0, 1.0);
    for at in times {
        // A share `dup` of arrivals is a redelivery of an earlier notification: the slots are
        // planned here (a redelivery lands 1-60 s after its original, within the run).
        if events > 0 && rng.random::<f64>() < dup {
            let original = rng.random_range(0..events);
            redeliveries.push((at, original));
            continue;
        }
        arrivals.push((at, events));
        events += 1;
    }
    // A redelivery is sent at its drawn time, but never before its original plus 1-60 s; one
    // that would fall after the last second of arrivals is not sent (the feed stops there).
    let first_at: Vec<i64> = arrivals.iter().map(|(t, _)| *t).collect();
    for (at, original) in redeliveries {
        let earliest = first_at[original] + rng.random_range(1_000..=60_000);
        let at = at.max(earliest);
        if (at as f64) < horizon {
            arrivals.push((at, original));
        }
    }
    arrivals.sort_by_key(|(t, e)| (*t, *e));
    (arrivals, events)
}

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

    let mut violations = Vec::new();
    let terminals = vec!["ECT-DELTA".to_string()];
    let slots = core.slots();
    let records = memory.records();
    let bookings = memory.business_rows();
    let keys: Vec<gate::consumer::DerivedKeys> = bodies
        .iter()
        .filter_map(|b| {
            truck_slot::notification::parse_notification(b, START_MS, &terminals)
                .ok()
                .and_then(|n| truck_slot::derive_keys(&n).ok())
        })
        .collect();
    if keys.len() != events {
        violations.push(format!(
            "{} of {events} generated bodies did not parse",
            events - keys.len()
        ));
    }
    // 1. One slot per key.
    let mut slots_by_key: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for s in &slots {
        match &s.idempotency_key {
            Some(k) => slots_by_key.entry(k).or_default().push(&s.effect_id),
            None => violations.push(format!("slot {} issued without a key", s.effect_id)),
        }
    }
    if slots.len() != events {
        violations.push(format!(
            "the terminal issued {} slots for {events} notifications",
            slots.len()
        ));
    }
    let by_pk: BTreeMap<&str, &IdempotencyRecord> =
        records.iter().map(|r| (r.pk.as_str(), r)).collect();
    let bookings_by_event: BTreeMap<&str, &BusinessRow> = bookings
        .iter()
        .map(|b| (b.source_event.as_str(), b))
        .collect();
    for k in &keys {
        let issued = slots_by_key
            .get(k.op_key.as_str())
            .cloned()
            .unwrap_or_default();
        if issued.len() != 1 {
            violations.push(format!(
                "key {}: {} slots issued",
                &k.op_key[..12.min(k.op_key.len())],
                issued.len()
            ));
        }
        // 2. A booking per committed record, with the slot issued under its key.
        let pk = gate::record::record_pk(INTEGRATION, &k.event_key);
        match by_pk.get(pk.as_str()) {
            Some(r) if r.status == RecordStatus::Committed && !r.has_work() => {
                let booked = bookings_by_event.get(k.event_key.as_str());
                let slot = r.effect_id.as_deref();
                if booked.map(|b| b.effect_id.as_str()) != slot || issued.first().copied() != slot {
                    violations.push(format!(
                        "event {}: record slot {slot:?}, booking {:?}, issued {issued:?}",
                        &k.event_key[..12],
                        booked.map(|b| &b.effect_id)
                    ));
                }
            }
            Some(r) => violations.push(format!(
                "event {}: record {:?} (route pending {})",
                &k.event_key[..12],
                r.status,
                r.route_pending
            )),
            None => violations.push(format!("event {}: no record", &k.event_key[..12])),
        }
    }
    if bookings.len() != events {
        violations.push(format!(
            "{} TMS bookings for {events} notifications",
            bookings.len()
        ));
    }
    // 3. Nothing lost.
    if st.acked != arrivals.len() || !st.visible.is_empty() || !st.delayed.is_empty() {
        violations.push(format!(
            "{} of {} messages acknowledged; {} visible, {} waiting to be visible again",
            st.acked,
            arrivals.len(),
            st.visible.len(),
            st.delayed.len()
        ));
    }
    let unacked = (0..events)
        .filter(|e| !st.acked_events.contains_key(e))
        .count();
    if unacked > 0 {
        violations.push(format!("{unacked} notifications never acknowledged"));
    }
    if st.failed_receives > 0 {
        violations.push(format!(
            "{} receives ended in a batch item failure",
            st.failed_receives
        ));
    }
    let in_flight = records.iter().filter(|r| r.has_work()).count();
    if in_flight > 0 {
        violations.push(format!("{in_flight} records left in_flight"));
    }
    // 4. Nothing routed to a person.
    let items = manual.items().len();
    if items > 0 {
        violations.push(format!("{items} items in the manual queue"));
    }
    // 5. Redeliveries answered as duplicates, without a claim.
    let redeliveries = arrivals.len() - events;
    let duplicates = st.outcomes.get("duplicate").copied().unwrap_or(0);
    if duplicates != redeliveries {
        violations.push(format!(
            "{duplicates} duplicate outcomes for {redeliveries} redeliveries"
        ));
    }
    // No queue growth.
    if queue_grew {
        violations.push(format!(
            "the backlog grew: mean {:.1} in the first minute, {:.1} in the last",
            per_minute.first().copied().unwrap_or(0.0),
            per_minute.last().copied().unwrap_or(0.0)
        ));
    }
    if drained_after_s > config.drain_bound_s as f64 {
        violations.push(format!(
            "the queue drained {drained_after_s:.1} s after the last arrival (bound {} s)",
            config.drain_bound_s
        ));
    }

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

/// The capacity model of `docs/BENCHMARKS.md` for `config`: the duration of a full batch and the
/// events per second the deployment holds, `(batch_ms, events_per_s)`.
///
/// A record takes one reserve, one claim and one commit in sequence
/// (`2 * store + terminal` ms); a batch of `b` records with `RecordConcurrency` `c` runs
/// `ceil(b / c)` such waves; `MaximumConcurrency` `m` invocations run at once: the deployment
/// holds `m * b / batch_ms` events per second. A terminal limit of `k` claims at once caps it at
/// `k / terminal` claims per second.
pub fn capacity(config: &SustainedConfig) -> (f64, f64) {
    let per_record = 2.0 * config.store_latency_ms as f64 + config.terminal_latency_ms as f64;
    let b = config.batch_size.max(1) as f64;
    let waves = (b / config.record_concurrency.max(1) as f64).ceil();
    let batch_ms = waves * per_record;
    let mut rate = config.maximum_concurrency as f64 * b * 1000.0 / batch_ms;
    if let Some(k) = config.terminal_concurrency {
        rate = rate.min(k as f64 * 1000.0 / config.terminal_latency_ms.max(1) as f64);
    }
    (batch_ms, rate)
}

/// The report as a Markdown table with the model's prediction, then the violations.
pub fn render(r: &SustainedReport) -> String {
    let c = &r.config;
    let (batch_ms, capacity) = capacity(c);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Sustained replay: {:.0} events/s for {} s, {:.0} % redeliveries, MaximumConcurrency {}, \
         BatchSize {}, window {} ms, RecordConcurrency {}, terminal {} ms{}, DynamoDB {} ms\n",
        c.rate_per_s,
        c.duration_s,
        c.duplicate_rate * 100.0,
        c.maximum_concurrency,
        c.batch_size,
        c.batching_window_ms,
        c.record_concurrency,
        c.terminal_latency_ms,
        c.terminal_concurrency
            .map(|k| format!(" (at most {k} at once)"))
            .unwrap_or_default(),
        c.store_latency_ms
    );
    let minutes: Vec<String> = r
        .backlog_mean_per_minute
        .iter()
        .map(|m| format!("{m:.1}"))
        .collect();
    let rows = [
        (
            "model: full batch / capacity",
            format!("{batch_ms:.0} ms / {capacity:.0} events/s"),
        ),
        (
            "messages (events + redeliveries)",
            format!("{} ({} + {})", r.messages, r.events, r.redeliveries),
        ),
        (
            "acknowledged per second of arrivals",
            format!("{:.1}", r.achieved_per_s),
        ),
        (
            "invocations, mean batch",
            format!("{}, {:.2}", r.invocations, r.mean_batch),
        ),
        (
            "invocation duration p50 / p99 / max",
            format!(
                "{:.0} / {:.0} / {:.0} ms",
                r.invocation.p50_ms, r.invocation.p99_ms, r.invocation.max_ms
            ),
        ),
        (
            "arrival to acknowledgement p50 / p99 / max",
            format!(
                "{:.0} / {:.0} / {:.0} ms",
                r.end_to_end.p50_ms, r.end_to_end.p99_ms, r.end_to_end.max_ms
            ),
        ),
        (
            "invocations at once: mean / max",
            format!("{:.2} / {}", r.concurrency_mean, r.concurrency_max),
        ),
        (
            "backlog (visible, waiting): max",
            format!("{}", r.backlog_max),
        ),
        ("backlog: mean per minute", minutes.join(", ")),
        (
            "queue drained after the last arrival",
            format!("{:.2} s", r.drained_after_s),
        ),
        ("slots issued", format!("{}", r.slots)),
        ("outcomes", format!("{:?}", r.outcomes)),
        (
            "queue growth",
            if r.queue_grew { "yes" } else { "none" }.to_string(),
        ),
        (
            "invariants",
            if r.violations.is_empty() {
                "all held".to_string()
            } else {
                format!("{} violated", r.violations.len())
            },
        ),
    ];
    let _ = writeln!(out, "| figure | value |\n| --- | ---: |");
    for (k, v) in rows {
        let _ = writeln!(out, "| {k} | {v} |");
    }
    for v in &r.violations {
        let _ = writeln!(out, "VIOLATION: {v}");
    }
    out
}
