//! Over 600 lines because the single-threaded executor, its event queue and the crash/kill rules
//! are one state machine that reads best whole.
//!
//! The driver: a hand-rolled single-threaded executor on simulated time. Tasks are Lambda
//! invocations (consumer batches through the real [`Gate::handle_batch`], reconciler runs through
//! the real [`Gate::reconcile`]); every port call parks, and the driver repeatedly takes the
//! earliest event: grant a parked call (or crash its task there), kill a task at its Lambda
//! deadline, let the terminal run a request whose client gave up, stop the faults (heal), start
//! an invocation for visible messages, or tick the reconciler. Same seed, same schedule.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use futures::FutureExt;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{BatchReport, Gate, GateConfig, Invocation, RecordOutcome};
use gate::reconciler::{ReconcileReport, ReconcilerConfig};
use gate::record::RecordStatus;
use gate::store::IdempotencyStore;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use truck_slot::terminal::SlotTerminal;
use truck_slot::{TmsBooking, TruckSlot};

use super::check::{self, own_record_durable, Final};
use super::identity;
use super::observe::Observer;
use super::ports::{short, CoreTerminal, SimManual, SimStore, SimTerminal, SkewedClock};
use super::schedule::{BodyKind, Schedule, REPLANNED, START_MS};
use super::shared::{Flag, Shared, TaskId, TimedManualQueue};
use super::{RunResult, Stats};
use crate::replay::INTEGRATION;
use crate::sqs::{MsgState, Queue, ReceiveEnd, ReceiveOrder};
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

/// The fault kinds that, at these steps, leave the failing task holding a live lease it does not
/// know of or could not end: an error after the reserve or take-over applied (the caller never
/// learns it holds the lease), or a release that failed (the lease expires on its own). (A failed
/// routing confirmation releases the lease, as every other transient failure does.)
const LEASE_LEFT_BY: &[(&str, &str)] = &[
    ("reserve", "store_applied_then_error"),
    ("take_over", "store_applied_then_error"),
    ("release_lease", "store_throttled"),
    ("release_lease", "store_unavailable"),
    // The same after the PostgreSQL adapter's retry (`pg_faults`: the step is then its wait),
    // and the adapter surfacing an error once its retries are spent: after a reserve or
    // take-over that applied on an earlier attempt, or a release that never did.
    ("reserve:pg_retry", "store_applied_then_error"),
    ("take_over:pg_retry", "store_applied_then_error"),
    ("reserve:pg_retry", "pg_commit_outcome_unknown_surfaced"),
    ("reserve:pg_retry", "pg_transaction_conflict_surfaced"),
    ("take_over:pg_retry", "pg_commit_outcome_unknown_surfaced"),
    ("take_over:pg_retry", "pg_transaction_conflict_surfaced"),
    ("release_lease:pg_retry", "pg_transaction_conflict_surfaced"),
    // A connection still on the demoted writer on every attempt (`outages`): after a reserve or
    // take-over that applied on an earlier attempt, or a release that never did.
    ("reserve:pg_retry", "pg_read_only_surfaced"),
    ("take_over:pg_retry", "pg_read_only_surfaced"),
    ("release_lease:pg_retry", "pg_read_only_surfaced"),
    // A store that stopped answering (`outages`): a reserve or take-over whose answer was lost
    // in the stall, a release that waited in vain, or a release skipped after a cut call.
    ("reserve:stalled", "store_stalled_answer_lost"),
    ("take_over:stalled", "store_stalled_answer_lost"),
    ("release_lease:stalled", "store_stalled_surfaced"),
    ("release_lease:skipped", "store_stalled_release_skipped"),
];

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

    fn gate(&self, task: TaskId, skew_ms: i64) -> Gate {
        Gate {
            config: self.gate_config.clone(),
            store: Arc::new(SimStore {
                shared: Arc::clone(&self.shared),
                task,
            }),
            integration: Arc::new(TruckSlot::new(
                Arc::new(SimTerminal {
                    shared: Arc::clone(&self.shared),
                    task,
                    inner: CoreTerminal::new(Arc::clone(&self.shared.core)),
                }),
                self.known_terminals.clone(),
            )),
            manual: Arc::new(SimManual {
                shared: Arc::clone(&self.shared),
                task,
            }),
            clock: Arc::new(SkewedClock {
                base: Arc::clone(&self.shared.clock),
                offset_ms: skew_ms,
            }),
        }
    }

    fn deliver(&mut self) {
        let now = self.shared.now();
        let (batch, host) = {
            let mut st = self.shared.state();
            let n = st.between(1, self.schedule.batch_size as i64) as usize;
            let host = st.between(0, self.schedule.workers as i64 - 1) as usize;
            (
                self.queue
                    .receive(now, n, ReceiveOrder::Shuffled(&mut st.rng)),
                host,
            )
        };
        if batch.is_empty() {
            return;
        }
        self.stats.deliveries += batch.len() as u64;
        self.stats.invocations += 1;
        let id = self.next_task;
        self.next_task += 1;
        let skew = self.schedule.host_skews_ms.get(host).copied().unwrap_or(0);
        let gate = self.gate(id, skew);
        let mut event = SqsEvent::default();
        for (i, receipt) in &batch {
            let m = &self.queue.msgs[*i];
            let mut msg = SqsMessage::default();
            msg.message_id = Some(m.id.clone());
            msg.receipt_handle = Some(format!("{}#{receipt}", m.id));
            msg.body = Some(self.schedule.bodies[m.body].text.clone());
            event.records.push(msg);
        }
        self.shared.trace(|| {
            format!(
                "T{id} consumer on host {host} (skew {skew} ms) receives {:?}",
                batch
                    .iter()
                    .map(|(i, r)| format!(
                        "{}(b{})#{r}",
                        self.queue.msgs[*i].id, self.queue.msgs[*i].body
                    ))
                    .collect::<Vec<_>>()
            )
        });
        // The worker reads its deadline as remaining time on its own clock (see `SkewedClock`);
        // Lambda kills it at the true deadline.
        let invocation = Invocation {
            request_id: format!("inv-{id}"),
            deadline_ms: now + skew + self.schedule.lambda_timeout_ms,
        };
        let request_id = invocation.request_id.clone();
        let deadline_ms = now + self.schedule.lambda_timeout_ms;
        super::outages::register_task(&mut self.shared.state(), id, host, deadline_ms);
        let fut = async move { Output::Batch(gate.handle_batch(event, &invocation).await) };
        self.tasks.push(Task {
            id,
            request_id,
            skew_ms: skew,
            kind: Kind::Consumer { batch },
            fut: Box::pin(fut),
            flag: Flag::raised(),
            deadline_ms,
        });
    }

    fn tick(&mut self) {
        let now = self.shared.now();
        if let Some(until) = self.schedule.reconciler_outage_until_ms {
            if now < until {
                self.next_tick = align_tick(until);
                return;
            }
        }
        if !self.any_in_flight() {
            // Nothing to reconcile: a run would only read. Skip to the tick after the next
            // thing that can create an in_flight record.
            let mut next = now + TICK_MS;
            if self.tasks.is_empty() {
                let deferred = self.shared.state().deferred.iter().map(|d| d.at_ms).min();
                let candidates = [self.queue.next_visible(), deferred, self.redrive_pending()];
                if let Some(t) = candidates.iter().flatten().min() {
                    next = next.max(*t);
                }
            }
            self.next_tick = align_tick(next);
            return;
        }
        self.next_tick = now + TICK_MS;
        let (runs, same_request_id) = {
            let mut st = self.shared.state();
            let p = self.schedule.double_reconciler;
            if st.fault(p, "reconciler_invoked_twice") {
                // Half of the doubled runs share one Lambda request id (an asynchronous
                // invocation retried, or one event its queue delivered twice); each execution
                // has its own nonce, as `Invocation::new` draws one. From its own stream.
                let same = st.same_request_rng.random_bool(0.5);
                if same {
                    st.count("reconciler_same_request_id_twice");
                }
                (2, same)
            } else {
                (1, false)
            }
        };
        let first_id = self.next_task;
        for _ in 0..runs {
            self.stats.reconciler_runs += 1;
            let id = self.next_task;
            self.next_task += 1;
            let gate = self.gate(id, self.schedule.reconciler_skew_ms);
            let index = SimStore {
                shared: Arc::clone(&self.shared),
                task: id,
            };
            let config = self.reconciler_config.clone();
            let lambda_request = if same_request_id { first_id } else { id };
            let invocation = Invocation::with_nonce(
                &format!("rec-{lambda_request}"),
                &format!("x{id}"),
                now + self.schedule.reconciler_skew_ms + RECONCILER_TIMEOUT_MS,
            );
            let deadline_ms = now + RECONCILER_TIMEOUT_MS;
            super::outages::register_task(
                &mut self.shared.state(),
                id,
                super::outages::RECONCILER_HOST,
                deadline_ms,
            );
            let request_id = invocation.request_id.clone();
            self.shared.trace(|| format!("T{id} reconciler run"));
            let fut = async move {
                let report = gate.reconcile(&index, &config, &invocation).await;
                Output::Reconciled(report)
            };
            self.tasks.push(Task {
                id,
                request_id,
                skew_ms: self.schedule.reconciler_skew_ms,
                kind: Kind::Reconciler,
                fut: Box::pin(fut),
                flag: Flag::raised(),
                deadline_ms,
            });
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

    fn completed(&mut self, task: Task, out: Output) {
        let faults = {
            let mut st = self.shared.state();
            st.open_sends.remove(&task.id);
            st.last_label.remove(&task.id);
            st.task_faults.remove(&task.id).unwrap_or_default()
        };
        self.no_lease_left(&task, &faults);
        let report = match out {
            Output::Batch(report) => report,
            Output::Reconciled(r) => {
                self.shared
                    .trace(|| format!("T{} reconciler done: {r:?}", task.id));
                return;
            }
        };
        let Kind::Consumer { batch } = &task.kind else {
            return;
        };
        let failed: BTreeSet<String> = report
            .response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.clone())
            .collect();
        self.shared.trace(|| {
            let outcomes: Vec<String> = report
                .records
                .iter()
                .map(|r| format!("{}: {:?}", r.message_id, r.outcome))
                .collect();
            format!("T{} done: {}", task.id, outcomes.join("; "))
        });
        for (k, (i, receipt)) in batch.iter().enumerate() {
            let id = self.queue.msgs[*i].id.clone();
            let end = match report.records.get(k).map(|r| &r.outcome) {
                _ if !failed.contains(&id) => ReceiveEnd::Acknowledged,
                Some(RecordOutcome::NotStarted) => ReceiveEnd::NotStarted,
                _ => ReceiveEnd::Failed {
                    faulted: !faults.is_empty(),
                },
            };
            self.queue.end_receive(*i, *receipt, end);
            if !failed.contains(&id) && !self.queue.delete(*i, *receipt) {
                self.shared.trace(|| {
                    format!(
                        "T{} delete of {id}#{receipt} ignored (stale receipt)",
                        task.id
                    )
                });
            }
        }
    }

    /// Liveness: a task that ended normally holds no live lease (by its own clock), unless a
    /// fault of [`LEASE_LEFT_BY`] explains it.
    fn no_lease_left(&mut self, task: &Task, faults: &[(&'static str, String)]) {
        let own_now = self.shared.now() + task.skew_ms;
        let held: Vec<String> = self
            .shared
            .store
            .records()
            .iter()
            .filter(|r| {
                r.has_work()
                    && r.lease_owner.as_deref().is_some_and(|owner| {
                        // The invocation's request id, or a lease token of it ("{id}#{n}").
                        owner
                            .strip_prefix(task.request_id.as_str())
                            .is_some_and(|rest| rest.is_empty() || rest.starts_with('#'))
                    })
                    && r.lease_until_ms.is_some_and(|until| own_now <= until)
            })
            .map(|r| short(&r.event_key).to_string())
            .collect();
        let excused = faults
            .iter()
            .any(|(label, kind)| LEASE_LEFT_BY.iter().any(|(l, k)| l == label && k == kind));
        if !held.is_empty() && !excused {
            let faults: Vec<String> = faults.iter().map(|(l, k)| format!("{k}@{l}")).collect();
            self.violations.push(format!(
                "T{} ({}) ended normally still holding a live lease on {held:?} (its faults: \
                 {faults:?})",
                task.id, task.request_id
            ));
        }
    }

    fn kill(&mut self, task_id: TaskId) {
        let Some(pos) = self.tasks.iter().position(|t| t.id == task_id) else {
            return;
        };
        let task = self.tasks.remove(pos);
        self.stats.crashes += 1;
        let Task { kind, fut, .. } = task;
        drop(fut);
        {
            let mut st = self.shared.state();
            st.ambiguate(task_id, None);
            st.open_sends.remove(&task_id);
            st.last_label.remove(&task_id);
            st.task_faults.remove(&task_id);
        }
        if let Kind::Consumer { batch } = kind {
            for (i, receipt) in batch {
                self.queue.end_receive(i, receipt, ReceiveEnd::Killed);
                let purge = {
                    let mut st = self.shared.state();
                    let p = st.profile.purge_after_crash;
                    st.draw(p)
                };
                if !purge {
                    continue;
                }
                let body = &self.schedule.bodies[self.queue.msgs[i].body].text;
                let store = &self.shared.store;
                let durable = own_record_durable(
                    body,
                    &self.shared.integration,
                    &self.shared.terminals,
                    |pk| store.get(pk).now_or_never().and_then(Result::ok).flatten(),
                );
                if durable && self.queue.msgs[i].state == MsgState::Live {
                    self.queue.purge(i);
                    self.shared.state().count("message_purged_after_crash");
                    let id = self.queue.msgs[i].id.clone();
                    self.shared.trace(|| format!("operator purges {id}"));
                }
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
