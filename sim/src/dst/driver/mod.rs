//! The driver: a hand-rolled single-threaded executor on simulated time. Tasks are Lambda
//! invocations (consumer batches through the real [`Gate::handle_batch`], reconciler runs through
//! the real [`Gate::reconcile`]); every port call parks, and the driver repeatedly takes the
//! earliest event: grant a parked call (or crash its task there), kill a task at its Lambda
//! deadline, let the terminal run a request whose client gave up, stop the faults (heal), start
//! an invocation for visible messages (`invoke`), or tick the reconciler. How a task ends is in
//! `endings`. Same seed, same schedule.

mod endings;
mod invoke;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use futures::FutureExt;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{BatchReport, GateConfig};
use gate::reconciler::{ReconcileReport, ReconcilerConfig};
use gate::record::RecordStatus;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use truck_slot::terminal::SlotTerminal;
use truck_slot::TmsBooking;

use super::check::{self, Final};
use super::identity;
use super::observe::Observer;
use super::ports::CoreTerminal;
use super::results::{RunResult, Stats};
use super::schedule::{BodyKind, Schedule, REPLANNED, START_MS};
use super::shared::{short, Flag, Shared, TaskId, TimedManualQueue};
use crate::sqs::{MsgState, Queue};
use crate::stores::INTEGRATION;
use crate::terminal::{TerminalConfig, TerminalCore};

/// The reconciler's schedule, ms.
const TICK_MS: i64 = 60_000;
/// The reconciler Lambda's timeout, ms.
const RECONCILER_TIMEOUT_MS: i64 = 60_000;
/// Give up on a schedule after this many events (a livelock is a finding too).
const MAX_STEPS: u64 = 400_000;

enum Kind {
    Consumer { batch: Vec<(usize, u32)> },
    Reconciler,
}

enum Output {
    Batch(BatchReport),
    Reconciled(ReconcileReport),
}

struct Task {
    id: TaskId,
    /// The invocation's request id: the lease owner.
    request_id: String,
    /// Its host's clock offset, ms.
    skew_ms: i64,
    kind: Kind,
    fut: Pin<Box<dyn Future<Output = Output>>>,
    flag: Arc<Flag>,
    deadline_ms: i64,
}

enum Event {
    Ticket(u64),
    Kill(TaskId),
    Deferred(usize),
    Heal,
    Redrive,
    Deliver,
    Tick,
}

struct Driver<'a> {
    schedule: &'a Schedule,
    shared: Arc<Shared>,
    queue: Queue<usize>,
    tasks: Vec<Task>,
    next_task: TaskId,
    next_tick: i64,
    gate_config: GateConfig,
    /// The terminal codes the integration books at.
    known_terminals: Vec<String>,
    reconciler_config: ReconcilerConfig,
    stats: Stats,
    /// Redrives done so far (of `schedule.redrives_at_ms`).
    redrives_done: usize,
    /// The store's history.
    observer: Observer,
    /// Violations found while running (a task that ended normally holding a live lease).
    violations: Vec<String>,
}

/// How long after the faults heal (or the reconciler's outage ends), or after it entered
/// `in_flight` if later, a record may stay `in_flight`, ms. A record's lease lasts one record's
/// work from its reserve or take-over (the lease floor or the deadline margin, the longer), and a
/// holder starts records until its deadline (at most the function timeout after it started); its
/// holder's clock may run ahead of true time and the reconciler's behind, each by the largest
/// skew; the reconciler only picks up records whose lease ended and older than its minimum age
/// (0 by default) by its own clock, runs every tick, and finishes what it takes within its own
/// timeout. A redelivery after
/// the visibility timeout may finish it sooner, never later.
pub(crate) fn liveness_bound_ms(
    schedule: &Schedule,
    gate: &GateConfig,
    reconciler: &ReconcilerConfig,
) -> i64 {
    let max_skew = schedule
        .host_skews_ms
        .iter()
        .chain(std::iter::once(&schedule.reconciler_skew_ms))
        .map(|s| s.abs())
        .max()
        .unwrap_or(0);
    schedule.lambda_timeout_ms
        + gate.lease_ms()
        + 2 * max_skew
        + reconciler.min_age_ms
        + 2 * TICK_MS
        + RECONCILER_TIMEOUT_MS
}

/// Runs one seed to quiescence and checks the invariants.
pub fn run_seed(seed: u64, record_trace: bool) -> RunResult {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let schedule = Schedule::draw(seed, &mut rng);
    let clock = Arc::new(ManualClock::new(START_MS));
    let core = TerminalCore::new(
        TerminalConfig {
            supports_idempotency_key: schedule.key_support,
            latency_ms: 0,
            error_rate: 0.0,
            lose_response_rate: 0.0,
            seed,
            retention_ms: schedule.key_retention_ms,
            ..TerminalConfig::default()
        },
        clock.clone() as Arc<dyn Clock>,
    );
    let manual = Arc::new(TimedManualQueue::new(Arc::clone(&clock)));
    let terminals = vec!["ECT-DELTA".to_string()];
    let shared = Arc::new(Shared::new(
        clock,
        core,
        Arc::new(crate::stores::memory_store()),
        manual,
        INTEGRATION.to_string(),
        terminals.clone(),
        rng,
        schedule.profile.clone(),
        record_trace,
    ));
    if record_trace {
        for line in schedule.describe() {
            shared.trace(|| line);
        }
    }
    {
        // The lifecycle the schedule drew, counted with the faults.
        let mut st = shared.state();
        if schedule.key_ttl_s < gate::consumer::DEFAULT_KEY_TTL_S {
            st.count("short_record_lifetime");
        }
        if schedule.key_retention_ms < 24 * 3_600_000 {
            st.count("short_key_retention");
        }
        for b in &schedule.bodies[schedule.base_len.0..] {
            if let BodyKind::Event { variant, .. } = b.kind {
                let kind = if variant >= REPLANNED {
                    "replanned_notification"
                } else {
                    "notification_booked_days_ahead"
                };
                st.count(kind);
            }
        }
    }
    let mut gate_config = GateConfig::new(INTEGRATION);
    gate_config.server_supports_idempotency_key = schedule.key_support;
    gate_config.max_concurrency = schedule.max_concurrency;
    gate_config.key_ttl_s = schedule.key_ttl_s;
    let reconciler_config = ReconcilerConfig {
        page_size: schedule.reconciler_page_size,
        key_retention_ms: schedule.key_retention_ms,
        ..ReconcilerConfig::default()
    };
    // As a deployment configures both: the consumer's claim horizon is the reconciler's.
    gate_config.claim_horizon_ms = reconciler_config.claim_horizon_ms();
    let settled_ms = schedule
        .heal_at_ms
        .max(schedule.reconciler_outage_until_ms.unwrap_or(START_MS));
    let observer = Observer::new(
        settled_ms,
        liveness_bound_ms(&schedule, &gate_config, &reconciler_config),
    );
    let mut queue = Queue::new(schedule.visibility_timeout_ms, schedule.max_receive_count);
    let mut ids: Vec<String> = Vec::new();
    for (i, m) in schedule.messages.iter().enumerate() {
        let id = match m.same_id_as.and_then(|p| ids.get(p)) {
            Some(prev) => prev.clone(),
            None => format!("m{i}"),
        };
        ids.push(id.clone());
        queue.send(id, m.body, m.at_ms);
    }
    let mut driver = Driver {
        schedule: &schedule,
        shared,
        queue,
        tasks: Vec::new(),
        next_task: 1,
        next_tick: START_MS + TICK_MS,
        gate_config,
        known_terminals: terminals,
        reconciler_config,
        stats: Stats::default(),
        redrives_done: 0,
        observer,
        violations: Vec::new(),
    };
    let mut violations = Vec::new();
    if let Err(e) = driver.run() {
        violations.push(e);
    }
    driver.finish(seed, violations)
}

fn align_tick(t: i64) -> i64 {
    let n = (t - START_MS + TICK_MS - 1).div_euclid(TICK_MS);
    START_MS + n.max(1) * TICK_MS
}

impl Driver<'_> {
    fn run(&mut self) -> Result<(), String> {
        let outage_end = self.schedule.reconciler_outage_until_ms.unwrap_or(START_MS);
        let stuck_cap = self
            .schedule
            .heal_at_ms
            .max(self.schedule.last_arrival_ms())
            .max(outage_end)
            + 12 * 3_600_000;
        let mut steps = 0u64;
        loop {
            steps += 1;
            if steps > MAX_STEPS {
                return Err(format!("no quiescence after {MAX_STEPS} events"));
            }
            self.poll_ready();
            self.observe();
            let now = self.shared.now();
            let (faults_on, deferred_empty) = {
                let st = self.shared.state();
                (st.faults_on, st.deferred.is_empty())
            };
            if !faults_on
                && self.tasks.is_empty()
                && deferred_empty
                && !self.queue.any_live()
                && (self.redrive_pending().is_none() || !self.queue.any_dead())
                && (now > stuck_cap || !self.any_in_flight())
            {
                break;
            }
            let event = self.next_event(now, faults_on);
            let (at, event) = event;
            if at > now {
                self.shared.clock.set_ms(at);
            }
            self.apply(event);
        }
        self.stats.steps = steps;
        Ok(())
    }

    fn next_event(&self, now: i64, faults_on: bool) -> (i64, Event) {
        let mut best: Option<(i64, u8, Event)> = None;
        let mut consider = |at: i64, prio: u8, e: Event| {
            let at = at.max(now);
            if best.as_ref().is_none_or(|(t, p, _)| (at, prio) < (*t, *p)) {
                best = Some((at, prio, e));
            }
        };
        if let Some((at, id)) = self.shared.next_ticket() {
            consider(at, 0, Event::Ticket(id));
        }
        if let Some(t) = self.tasks.iter().min_by_key(|t| (t.deadline_ms, t.id)) {
            consider(t.deadline_ms, 1, Event::Kill(t.id));
        }
        {
            let st = self.shared.state();
            if let Some((i, d)) = st
                .deferred
                .iter()
                .enumerate()
                .min_by_key(|(i, d)| (d.at_ms, *i))
            {
                consider(d.at_ms, 2, Event::Deferred(i));
            }
        }
        if faults_on {
            consider(self.schedule.heal_at_ms, 3, Event::Heal);
        }
        if let Some(at) = self.redrive_pending() {
            consider(at, 3, Event::Redrive);
        }
        let consumers = self
            .tasks
            .iter()
            .filter(|t| matches!(t.kind, Kind::Consumer { .. }))
            .count();
        if consumers < self.schedule.workers {
            if let Some(at) = self.queue.next_visible() {
                consider(at + self.schedule.batching_window_ms, 4, Event::Deliver);
            }
        }
        consider(self.next_tick, 5, Event::Tick);
        match best {
            Some((at, _, e)) => (at, e),
            None => (now + TICK_MS, Event::Tick),
        }
    }

    fn apply(&mut self, event: Event) {
        match event {
            Event::Ticket(id) => {
                let Some((task, label)) = self.shared.ticket_owner(id) else {
                    return;
                };
                let crash = {
                    let mut st = self.shared.state();
                    let p = st.profile.crash;
                    let crash = st.draw(p);
                    if crash {
                        st.count(&format!("crash@{label}"));
                    }
                    crash
                };
                if crash {
                    self.shared.trace(|| format!("T{task} CRASH at {label}"));
                    self.kill(task);
                } else {
                    self.shared.trace(|| format!("T{task} {label}"));
                    self.shared.grant(id);
                }
            }
            Event::Kill(task) => {
                self.shared.state().count("lambda_timeout");
                self.shared
                    .trace(|| format!("T{task} killed at its Lambda deadline"));
                self.kill(task);
            }
            Event::Deferred(i) => {
                let d = {
                    let mut st = self.shared.state();
                    if i < st.deferred.len() {
                        let d = st.deferred.remove(i);
                        (!st.rejected_keys.contains_key(&d.op_key)).then_some(d)
                    } else {
                        None
                    }
                };
                if let Some(d) = d {
                    let terminal = CoreTerminal::new(Arc::clone(&self.shared.core));
                    let outcome = terminal.claim(&d.op_key, &d.request).now_or_never();
                    self.shared.trace(|| {
                        format!(
                            "terminal runs the late claim {} -> {outcome:?}",
                            short(&d.op_key)
                        )
                    });
                }
            }
            Event::Heal => {
                self.shared.state().faults_on = false;
                self.shared.trace(|| "HEAL: faults off".to_string());
            }
            Event::Redrive => {
                self.redrives_done += 1;
                let n = self.queue.redrive(self.shared.now());
                {
                    let mut st = self.shared.state();
                    for _ in 0..n {
                        st.count("message_redriven_from_dlq");
                    }
                }
                self.shared
                    .trace(|| format!("operator redrives the DLQ: {n} messages back"));
            }
            Event::Deliver => self.deliver(),
            Event::Tick => self.tick(),
        }
    }

    /// When the next redrive is due, if one is.
    fn redrive_pending(&self) -> Option<i64> {
        self.schedule
            .redrives_at_ms
            .get(self.redrives_done)
            .copied()
    }

    /// Looks at the store if a call touched it since the last look (see `observe`).
    fn observe(&mut self) {
        let store = &self.shared.store;
        if !self.observer.stale(store.calls()) {
            return;
        }
        let records = store.records();
        let bookings: Vec<TmsBooking> =
            store.business_rows().iter().map(TmsBooking::from).collect();
        let replaced = self.observer.replaced;
        self.observer.look(
            self.shared.now(),
            &self.shared.integration,
            &records,
            &bookings,
            store.calls(),
        );
        let mut st = self.shared.state();
        for _ in replaced..self.observer.replaced {
            st.count("record_replaced_after_expiry");
        }
    }

    fn any_in_flight(&self) -> bool {
        self.shared.store.records().iter().any(|r| r.has_work())
    }

    /// Polls every woken task until none is woken.
    fn poll_ready(&mut self) {
        loop {
            let mut progressed = false;
            let mut i = 0;
            while i < self.tasks.len() {
                if !self.tasks[i].flag.take() {
                    i += 1;
                    continue;
                }
                progressed = true;
                let waker = Waker::from(Arc::clone(&self.tasks[i].flag));
                let mut cx = Context::from_waker(&waker);
                self.shared.state().polling = Some(self.tasks[i].id);
                let poll = self.tasks[i].fut.as_mut().poll(&mut cx);
                self.shared.state().polling = None;
                if let Poll::Ready(out) = poll {
                    let task = self.tasks.remove(i);
                    self.completed(task, out);
                    continue;
                }
                i += 1;
            }
            if !progressed {
                break;
            }
        }
    }

    fn finish(mut self, seed: u64, mut violations: Vec<String>) -> RunResult {
        self.observe();
        violations.append(&mut self.violations);
        violations.extend(self.observer.violations.iter().cloned());
        for (token, first, second) in &self.shared.state().shared_leases {
            violations.push(format!(
                "T{second} acquired lease token {token} that T{first} had acquired: an execution \
                 took another's lease for its own"
            ));
        }
        let ambiguous = self.shared.state().ambiguous.clone();
        let sent = self.shared.manual.sent();
        let fin = Final {
            schedule: self.schedule,
            integration: &self.shared.integration,
            terminals: &self.shared.terminals,
            records: self.shared.store.records(),
            bookings: self
                .shared
                .store
                .business_rows()
                .iter()
                .map(TmsBooking::from)
                .collect(),
            slots: self.shared.core.slots(),
            items: sent.iter().map(|(_, i)| i.clone()).collect(),
            sent_at: sent.iter().map(|(t, _)| *t).collect(),
            ambiguous: &ambiguous,
            msgs: &self.queue.msgs,
            observer: &self.observer,
        };
        violations.extend(check::check(&fin));
        violations.extend(identity::false_mismatches(&fin));
        let mut stats = self.stats;
        stats.bodies = self.schedule.bodies.len() as u64;
        stats.messages = self.queue.msgs.len() as u64;
        stats.slots = fin.slots.len() as u64;
        stats.committed = fin
            .records
            .iter()
            .filter(|r| r.status == RecordStatus::Committed)
            .count() as u64;
        stats.manual_items = fin.items.len() as u64;
        stats.dead_lettered = self
            .queue
            .msgs
            .iter()
            .filter(|m| m.state == MsgState::Dead)
            .count() as u64;
        stats.simulated_ms = self.shared.now() - START_MS;
        stats.liveness_bound_used_permille =
            (self.observer.longest_ms.max(0) * 1000 / self.observer.bound_ms.max(1)) as u64;
        let mut st = self.shared.state();
        let faults: BTreeMap<String, u64> = std::mem::take(&mut st.faults);
        let trace = st.trace.take().unwrap_or_default();
        RunResult {
            seed,
            violations,
            faults,
            trace,
            stats,
        }
    }
}
