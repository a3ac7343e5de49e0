//! The simulation's shared state: the seeded RNG, the fault switches, the parked port calls
//! ("tickets") the scheduler chooses between, fault counters, the trace, and the bookkeeping of
//! manual-queue sends whose outcome a fault made ambiguous.
//!
//! Every port call of every simulated worker parks on a [`Park`] future: it registers a ticket
//! (which task, which step, when its answer would be ready in simulated time) and stays pending
//! until the driver grants it. The driver grants tickets in simulated-time order (ties broken by
//! the seed), or kills the task that owns one instead (a crash at that step boundary). Nothing
//! runs unless the driver says so, so one seed gives one schedule.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};

use async_trait::async_trait;
use gate::clock::{Clock, ManualClock};
use gate::manual::{ManualItem, ManualQueue, ManualQueueError};
use gate::store::memory::MemoryStore;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::profile::FaultProfile;
use crate::terminal::TerminalCore;

/// The first 12 characters of a key, for traces.
pub(crate) fn short(key: &str) -> &str {
    key.get(..12.min(key.len())).unwrap_or(key)
}

/// A simulated task (one Lambda invocation: a consumer batch or a reconciler run).
pub(crate) type TaskId = u64;

/// One parked port call.
pub(crate) struct Ticket {
    /// The task that made the call.
    pub task: TaskId,
    /// The step, e.g. `reserve` (before it applies) or `reserve:ack` (applied, answer on its way).
    pub label: &'static str,
    /// When the call proceeds, simulated epoch ms.
    pub ready_at: i64,
    waker: Option<Waker>,
    granted: bool,
}

/// A manual-queue send whose mark (the record's `finish`) has not been seen yet.
#[derive(Debug, Clone)]
pub(crate) struct OpenSend {
    /// The item's identity (see `check::identity_of_item`).
    pub identity: String,
    /// The record whose `finish` marks the item as routed, if known.
    pub pk: Option<String>,
}

/// A claim the terminal runs later than the client waited for it.
#[derive(Debug, Clone)]
pub(crate) struct Deferred {
    /// When the terminal runs it, simulated epoch ms.
    pub at_ms: i64,
    /// The `Idempotency-Key`.
    pub op_key: String,
    /// The request bytes.
    pub request: Vec<u8>,
}

/// The mutable part of the world, behind one lock that is never held across an `.await`.
pub(crate) struct State {
    /// The one RNG of the schedule.
    pub rng: ChaCha8Rng,
    /// The stream the "answer lost, request retried" fault draws from
    /// ([`super::profile::LOST_ANSWER_STREAM`]), apart from `rng`: a schedule in which it never
    /// fires runs exactly as it did before the fault kind existed.
    pub lost_answer_rng: ChaCha8Rng,
    /// The stream the PostgreSQL faults (`pg_faults`) draw from
    /// ([`super::profile::PG_STREAM`]), apart from `rng` for the same reason.
    pub pg_rng: ChaCha8Rng,
    /// Whether faults are injected (false after the heal time).
    pub faults_on: bool,
    /// The schedule's fault probabilities.
    pub profile: FaultProfile,
    /// Parked port calls by ticket id.
    pub tickets: BTreeMap<u64, Ticket>,
    next_ticket: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, u64>,
    /// The schedule's trace, when recording.
    pub trace: Option<Vec<String>>,
    /// Claims the terminal will still run.
    pub deferred: Vec<Deferred>,
    /// Manual sends per task not yet marked.
    pub open_sends: BTreeMap<TaskId, Vec<OpenSend>>,
    /// Extra manual items a fault makes legitimate, by identity.
    pub ambiguous: BTreeMap<String, u32>,
    /// Keys the terminal answered a (stored) rejection for: `true` for a 409
    /// `idempotency_mismatch`, `false` for a 400.
    pub rejected_keys: BTreeMap<String, bool>,
    /// The task the driver is polling now: faults drawn meanwhile are that task's.
    pub polling: Option<TaskId>,
    /// The step of each task's last granted call (`reserve`, `claim:ack`, ...).
    pub last_label: BTreeMap<TaskId, &'static str>,
    /// Faults injected into each live task: (the step it was at, the fault kind).
    pub task_faults: BTreeMap<TaskId, Vec<(&'static str, String)>>,
    /// The stream the "same request id twice" fault draws from
    /// ([`super::profile::SAME_REQUEST_STREAM`]), apart from `rng` for the same reason.
    pub same_request_rng: ChaCha8Rng,
    /// Which task first acquired each lease token (a reserve or a take-over answered as ours).
    pub lease_tokens: BTreeMap<String, TaskId>,
    /// Lease tokens a second task acquired as its own: (token, first task, second task). Each is
    /// a violation: an execution took another's lease for its own.
    pub shared_leases: Vec<(String, TaskId, TaskId)>,
    /// The stream the failover's and the stall's draws come from (`outages`,
    /// [`super::profile::OUTAGE_STREAM`]), apart from `rng` for the same reason.
    pub outage_rng: ChaCha8Rng,
    /// Each task's host (`outages::RECONCILER_HOST` for the reconciler's environment).
    pub task_hosts: BTreeMap<TaskId, usize>,
    /// Each task's true deadline, simulated epoch ms.
    pub task_deadlines: BTreeMap<TaskId, i64>,
    /// Tasks one of whose store calls was cut by a stall (their releases are skipped).
    pub stalled_tasks: BTreeSet<TaskId>,
    /// Connections still on the demoted writer, per host, once drawn (`outages`).
    pub read_only_left: BTreeMap<usize, u32>,
}

impl State {
    /// Draws `p` while faults are on; counts the fault as `kind` when it fires.
    pub fn fault(&mut self, p: f64, kind: &str) -> bool {
        if !self.faults_on || p <= 0.0 {
            return false;
        }
        if self.rng.random::<f64>() < p {
            self.count(kind);
            true
        } else {
            false
        }
    }

    /// Draws `p` from the lost-answer stream while faults are on, without counting: the caller
    /// draws the variant from the same stream and counts it.
    pub fn lost_answer_draw(&mut self, p: f64) -> bool {
        self.faults_on && p > 0.0 && self.lost_answer_rng.random::<f64>() < p
    }

    /// Draws `p` while faults are on, without counting.
    pub fn draw(&mut self, p: f64) -> bool {
        self.faults_on && p > 0.0 && self.rng.random::<f64>() < p
    }

    /// Counts an event that is not drawn here (e.g. a Lambda timeout); while a task is being
    /// polled, it is also booked as that task's fault, at the step of its last granted call.
    pub fn count(&mut self, kind: &str) {
        *self.faults.entry(kind.to_string()).or_insert(0) += 1;
        if let Some(task) = self.polling {
            let label = self.last_label.get(&task).copied().unwrap_or("start");
            self.task_faults
                .entry(task)
                .or_default()
                .push((label, kind.to_string()));
        }
    }

    /// `task` holds `token` now (its reserve or take-over was answered as its own): a token
    /// another task acquired before is booked in `shared_leases`.
    pub fn acquired(&mut self, token: &str, task: TaskId) {
        match self.lease_tokens.get(token) {
            Some(&first) if first != task => {
                self.shared_leases.push((token.to_string(), first, task));
            }
            Some(_) => {}
            None => {
                self.lease_tokens.insert(token.to_string(), task);
            }
        }
    }

    /// A uniform draw in `lo..=hi`.
    pub fn between(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            lo
        } else {
            self.rng.random_range(lo..=hi)
        }
    }

    /// Marks open sends of `task` as ambiguous: the oldest one for `pk` (its mark did not land:
    /// refused, failed, or the record was taken over, so the item may be sent again), or all of
    /// them when `pk` is `None` (the task died).
    pub fn ambiguate(&mut self, task: TaskId, pk: Option<&str>) {
        let Some(open) = self.open_sends.get_mut(&task) else {
            return;
        };
        let taken: Vec<OpenSend> = match pk {
            None => std::mem::take(open),
            Some(pk) => match open.iter().position(|s| s.pk.as_deref() == Some(pk)) {
                Some(i) => vec![open.remove(i)],
                None => Vec::new(),
            },
        };
        for s in taken {
            *self.ambiguous.entry(s.identity).or_insert(0) += 1;
        }
    }

    /// Closes the oldest open send of `task` for `pk`: its record is marked, that item will not
    /// be sent again. (Each send is followed by its own mark, so one mark closes one send.)
    pub fn close_sends(&mut self, task: TaskId, pk: &str) {
        if let Some(open) = self.open_sends.get_mut(&task) {
            if let Some(i) = open.iter().position(|s| s.pk.as_deref() == Some(pk)) {
                open.remove(i);
            }
        }
    }
}

/// Everything the simulated ports share.
pub(crate) struct Shared {
    /// Simulated time (true time; workers see it through a skewed clock).
    pub clock: Arc<ManualClock>,
    /// The terminal, in process.
    pub core: Arc<TerminalCore>,
    /// The real memory store.
    pub store: Arc<MemoryStore>,
    /// The manual queue (in memory, each item with the time it was sent).
    pub manual: Arc<TimedManualQueue>,
    /// The integration name (record key prefix).
    pub integration: String,
    /// Terminal codes the gate books at.
    pub terminals: Vec<String>,
    state: Mutex<State>,
}

impl Shared {
    /// Builds the shared state.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        clock: Arc<ManualClock>,
        core: Arc<TerminalCore>,
        store: Arc<MemoryStore>,
        manual: Arc<TimedManualQueue>,
        integration: String,
        terminals: Vec<String>,
        rng: ChaCha8Rng,
        profile: FaultProfile,
        trace: bool,
    ) -> Self {
        Self {
            clock,
            core,
            store,
            manual,
            integration,
            terminals,
            state: Mutex::new(State {
                lost_answer_rng: {
                    let mut side = rng.clone();
                    side.set_stream(super::profile::LOST_ANSWER_STREAM + 1);
                    side
                },
                pg_rng: {
                    let mut side = rng.clone();
                    side.set_stream(super::profile::PG_STREAM + 1);
                    side
                },
                same_request_rng: {
                    let mut side = rng.clone();
                    side.set_stream(super::profile::SAME_REQUEST_STREAM + 1);
                    side
                },
                outage_rng: {
                    let mut side = rng.clone();
                    side.set_stream(super::profile::OUTAGE_STREAM + 1);
                    side
                },
                task_hosts: BTreeMap::new(),
                task_deadlines: BTreeMap::new(),
                stalled_tasks: BTreeSet::new(),
                read_only_left: BTreeMap::new(),
                lease_tokens: BTreeMap::new(),
                shared_leases: Vec::new(),
                rng,
                faults_on: true,
                profile,
                tickets: BTreeMap::new(),
                next_ticket: 0,
                faults: BTreeMap::new(),
                trace: trace.then(Vec::new),
                deferred: Vec::new(),
                open_sends: BTreeMap::new(),
                ambiguous: BTreeMap::new(),
                rejected_keys: BTreeMap::new(),
                polling: None,
                last_label: BTreeMap::new(),
                task_faults: BTreeMap::new(),
            }),
        }
    }

    /// The state, locked. Never hold the guard across an `.await`.
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True simulated now, epoch ms.
    pub fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Records a trace line (built only when recording).
    pub fn trace(&self, line: impl FnOnce() -> String) {
        let now = self.now();
        let mut st = self.state();
        if let Some(t) = st.trace.as_mut() {
            t.push(format!("{now} {}", line()));
        }
    }

    /// Parks the calling task at `label` for `latency_ms` of simulated time (or a slow 20-200 s
    /// when the `slow` fault fires).
    pub fn park(self: &Arc<Self>, task: TaskId, label: &'static str, latency_ms: i64) -> Park {
        let latency = {
            let mut st = self.state();
            let p = st.profile.slow;
            if st.fault(p, "slow_call") {
                st.between(20_000, 200_000)
            } else {
                latency_ms
            }
        };
        Park {
            shared: Arc::clone(self),
            task,
            label,
            latency,
            ticket: None,
        }
    }

    /// Parks the calling task at `label` for exactly `latency_ms` of simulated time (never
    /// the `slow` fault, and no draw: a wait the caller bounds itself).
    pub fn park_exact(
        self: &Arc<Self>,
        task: TaskId,
        label: &'static str,
        latency_ms: i64,
    ) -> Park {
        Park {
            shared: Arc::clone(self),
            task,
            label,
            latency: latency_ms,
            ticket: None,
        }
    }

    /// The earliest ticket (ready time, then id).
    pub fn next_ticket(&self) -> Option<(i64, u64)> {
        self.state()
            .tickets
            .iter()
            .map(|(id, t)| (t.ready_at, *id))
            .min()
    }

    /// Grants a ticket: the parked call proceeds when its task is polled next.
    pub fn grant(&self, id: u64) {
        let waker = {
            let mut st = self.state();
            match st.tickets.get_mut(&id) {
                Some(t) => {
                    t.granted = true;
                    let (task, label) = (t.task, t.label);
                    let waker = t.waker.take();
                    st.last_label.insert(task, label);
                    waker
                }
                None => None,
            }
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// The task and label of a ticket.
    pub fn ticket_owner(&self, id: u64) -> Option<(TaskId, &'static str)> {
        self.state().tickets.get(&id).map(|t| (t.task, t.label))
    }
}

/// A parked port call: pending until the driver grants its ticket. Dropping it (the task was
/// killed) removes the ticket.
pub(crate) struct Park {
    shared: Arc<Shared>,
    task: TaskId,
    label: &'static str,
    latency: i64,
    ticket: Option<u64>,
}

impl Future for Park {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let now = self.shared.now();
        let mut st = self.shared.state();
        match self.ticket {
            None => {
                let id = st.next_ticket;
                st.next_ticket += 1;
                st.tickets.insert(
                    id,
                    Ticket {
                        task: self.task,
                        label: self.label,
                        ready_at: now + self.latency,
                        waker: Some(cx.waker().clone()),
                        granted: false,
                    },
                );
                drop(st);
                self.ticket = Some(id);
                Poll::Pending
            }
            Some(id) => match st.tickets.get_mut(&id) {
                Some(t) if !t.granted => {
                    t.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
                _ => {
                    st.tickets.remove(&id);
                    drop(st);
                    self.ticket = None;
                    Poll::Ready(())
                }
            },
        }
    }
}

impl Drop for Park {
    fn drop(&mut self) {
        if let Some(id) = self.ticket.take() {
            self.shared.state().tickets.remove(&id);
        }
    }
}

/// A task's waker: sets a flag the driver polls by.
#[derive(Debug, Default)]
pub(crate) struct Flag(AtomicBool);

impl Flag {
    /// A raised flag (a new task is polled once at start).
    pub fn raised() -> Arc<Self> {
        Arc::new(Self(AtomicBool::new(true)))
    }

    /// Lowers the flag, returning whether it was raised.
    pub fn take(&self) -> bool {
        self.0.swap(false, Ordering::SeqCst)
    }
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The manual-booking queue of the simulation: an in-memory queue that keeps, with each item,
/// the true simulated time it was sent (the checker matches items to record generations).
pub(crate) struct TimedManualQueue {
    clock: Arc<ManualClock>,
    items: Mutex<Vec<(i64, ManualItem)>>,
}

impl TimedManualQueue {
    /// An empty queue on `clock`.
    pub fn new(clock: Arc<ManualClock>) -> Self {
        Self {
            clock,
            items: Mutex::new(Vec::new()),
        }
    }

    /// Every item sent so far, in order, with when it was sent (true simulated epoch ms).
    pub fn sent(&self) -> Vec<(i64, ManualItem)> {
        self.items.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[async_trait]
impl ManualQueue for TimedManualQueue {
    async fn send(&self, item: ManualItem) -> Result<(), ManualQueueError> {
        let at = self.clock.now_ms();
        self.items
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((at, item));
        Ok(())
    }
}
