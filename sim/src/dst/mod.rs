//! Deterministic simulation testing of the gate, in the style of FoundationDB and TigerBeetle:
//! one seed drives a whole world (several consumer workers, the reconciler, the terminal
//! simulator's core in process, the real [`gate::store::memory::MemoryStore`], an SQS queue with a
//! DLQ) on simulated time, injects faults at every step boundary, runs it to quiescence and
//! checks the gate's promises. Same seed, same schedule, same result:
//! `cargo run --release -p sim -- check --seed S` replays one schedule with its trace;
//! `check --seeds N` runs many and prints schedules run, faults injected by kind and violations.
//!
//! * [`schedule`]: what a seed draws (bodies, copies, deployment, faults);
//! * `shared`: the seeded RNG, parked port calls and fault bookkeeping;
//! * `ports`: the store, terminal and manual queue decorators that park and inject faults,
//!   [`CoreTerminal`] (the terminal core as a `SlotTerminal`) and skewed clocks;
//! * `pg_faults`: the store decorator's PostgreSQL semantics (the adapter's retry loop);
//! * [`crate::sqs`] (shared with the replay): SQS Standard with visibility timeouts, redelivery and a DLQ;
//! * `driver`: the executor and event loop;
//! * `check`: the invariants (documented there); `identity`: no mismatch for a body whose
//!   fingerprint every record of its event carried.
//!
//! How the faults happen in a schedule:
//!
//! * duplicate deliveries: 1-6 copies per body, new message ids later or the same id at once (so
//!   in one batch), batches of 1-10 with a batching window;
//! * crashes at every step boundary: the driver kills a task instead of granting its parked call:
//!   `reserve` (before it applies) or `reserve:ack` (applied, answer unseen), `claim` or
//!   `claim:ack` (the slot exists), `commit` or `commit:ack` (committed, unseen),
//!   `manual.send(:ack)`, `finish(:ack)`, `take_over(:ack)`...; Lambda timeouts kill at the
//!   deadline;
//! * lease expiry mid-work and concurrent take-overs: hosts whose clocks run minutes ahead see
//!   live leases as expired; slow calls (20-200 s); visibility timeouts shorter than the
//!   function timeout in some schedules;
//! * the reconciler racing a consumer: it runs every simulated minute while records are in
//!   flight, sometimes invoked twice for one tick, half of those pairs under one Lambda request
//!   id (`reconciler_same_request_id_twice`: an asynchronous invocation retried, an event its
//!   queue delivered twice; each execution with its own nonce, and no lease token may be
//!   acquired by two tasks);
//! * store throttling and transaction conflicts: failures before a call applies, or after it
//!   applied (an error on a write that happened); a write that meets a running transaction
//!   (`store_transaction_conflict`: the reserve `PutItem` or the take-over `UpdateItem` answered
//!   `TransactionConflictException`, the commit cancelled `[None, TransactionConflict, None]`
//!   after the adapter's retries): nothing written, the record retried as a batch item failure;
//! * a write applied whose answer is lost, retried by the client with the same request
//!   (`{write}_answer_lost_retried`, every write kind); for the commit also retried with its items
//!   built again under the same `ClientRequestToken` (a later `updated_at`), within DynamoDB's
//!   10-minute token window (`commit_answer_lost_rebuilt_retry_within_10_min`:
//!   `IdempotentParameterMismatchException`, settled by one consistent read) or after it
//!   (`commit_answer_lost_rebuilt_retry_after_10_min`: the token is new, the transaction runs
//!   again and meets the first one's commit);
//! * PostgreSQL's semantics where they differ from DynamoDB's, in a third of the schedules
//!   (`pg_faults`, drawn from their own RNG stream): serialization failures and deadlocks on any
//!   write, retried by the adapter and surfaced as a transaction conflict when its retries are
//!   spent (`pg_serialization_failure_retried`, `pg_deadlock_retried`,
//!   `pg_transaction_conflict_surfaced`), and the commit outcome unknown: the connection lost
//!   after `COMMIT` (applied, answer lost), the adapter's retry on a new connection meeting its
//!   own write after a failover's refused connections, or the error surfaced with the write
//!   applied (`pg_commit_outcome_unknown_retried`, `pg_no_connection_retried`,
//!   `pg_commit_outcome_unknown_surfaced`; crashes at `{write}:pg_retry`);
//! * a failover that leaves pooled connections on the demoted writer (half of the PostgreSQL
//!   schedules, `outages`, from their own stream): they answer reads and refuse every write with
//!   `25006` until the adapter drops them and retries on a fresh connection
//!   (`pg_read_only_connection_dropped`, `pg_read_only_surfaced`); and a store that stops
//!   answering for 10-90 s (a fifth of all schedules): each attempt waits the adapter's attempt
//!   timeout bounded by the invocation's budget (`store_stalled_attempt_timed_out`,
//!   `store_stalled_surfaced`, `store_stalled_answer_lost`), and the invocation's releases are
//!   skipped afterwards (`store_stalled_release_skipped`);
//! * terminal 5xx (before the key is taken), responses lost after the slot was made (504),
//!   latency beyond the lease (the client times out, the terminal runs the request 20-300 s
//!   later), 409 in flight, stored 400 / 409 `idempotency_mismatch` answers, lookup failures;
//! * mismatched bodies (another pin, window or field under the same event key) and nine kinds of
//!   poison bodies, duplicated like any body;
//! * a terminal without key support (8 % of schedules, the gate configured accordingly);
//! * a terminal forgetting keys after 24 h and a redelivery two days later: copies sent two days
//!   later, reconciler outages of 25-50 h, operator purges of crashed batches;
//! * worker clocks skewed by minutes: a fixed offset per host, up to ±10 min;
//! * records that live shorter than the run: lifetimes of 1-30 h in some schedules, copies of
//!   notifications booked days ahead sent after that, re-planned notifications (the same
//!   notification with its window days later) sent after the first window ended, terminal key
//!   retentions of 2-23 h (the claim horizon configured from it), operator redrives of the
//!   dead-letter queue minutes to days after the heal (each copy back as a new message).
//!
//! What "nothing is lost" means here: every notification that was delivered ends `committed`,
//! `failed` or `manual` (with an item in the manual queue), or every copy of it is in the
//! dead-letter queue with its body (not lost: waiting for a person or a redrive, and alarmed on
//! in production) **and** a fault or a crash ended each of its receives: the gate answering a
//! batch item failure by itself, again and again, is a violation. The simulation runs every
//! schedule until no message is left on the queue, so "still retrying with a live message" does
//! not occur at the end of a run. Liveness is checked too: no lease left behind by a task that
//! ended normally, and a bound on how long a record stays `in_flight` once the faults healed
//! (`check` lists every invariant).

mod check;
mod driver;
mod identity;
mod observe;
mod outages;
mod pg_faults;
mod ports;
pub mod schedule;
mod shared;

use std::collections::BTreeMap;

pub use driver::run_seed;
pub use ports::CoreTerminal;
pub use shared::FaultProfile;

/// Figures of one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Distinct bodies in the schedule.
    pub bodies: u64,
    /// Message copies sent.
    pub messages: u64,
    /// Records delivered to consumers (every receive).
    pub deliveries: u64,
    /// Consumer invocations.
    pub invocations: u64,
    /// Reconciler invocations.
    pub reconciler_runs: u64,
    /// Tasks that died (crash or Lambda timeout).
    pub crashes: u64,
    /// Slots the terminal issued.
    pub slots: u64,
    /// Records `committed`.
    pub committed: u64,
    /// Items in the manual queue.
    pub manual_items: u64,
    /// Copies in the DLQ.
    pub dead_lettered: u64,
    /// Simulated time from start to quiescence, ms.
    pub simulated_ms: i64,
    /// Events the driver processed.
    pub steps: u64,
    /// The longest any record stayed `in_flight` after the faults healed, in thousandths of the
    /// schedule's liveness bound (the largest over runs when summed up; above 1000 is a
    /// violation).
    pub liveness_bound_used_permille: u64,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.bodies += o.bodies;
        self.messages += o.messages;
        self.deliveries += o.deliveries;
        self.invocations += o.invocations;
        self.reconciler_runs += o.reconciler_runs;
        self.crashes += o.crashes;
        self.slots += o.slots;
        self.committed += o.committed;
        self.manual_items += o.manual_items;
        self.dead_lettered += o.dead_lettered;
        self.simulated_ms += o.simulated_ms;
        self.steps += o.steps;
        self.liveness_bound_used_permille = self
            .liveness_bound_used_permille
            .max(o.liveness_bound_used_permille);
    }
}

/// The result of one seed.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The seed.
    pub seed: u64,
    /// Invariant violations (empty: the schedule passed).
    pub violations: Vec<String>,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, u64>,
    /// The schedule's trace (only when recorded): the schedule, then one line per event,
    /// prefixed with the simulated epoch ms.
    pub trace: Vec<String>,
    /// Figures.
    pub stats: Stats,
}

impl RunResult {
    /// The trace without the per-call grant lines: the schedule, receives, crashes, claims,
    /// manual sends, outcomes. At most `max` lines (the first half and the last half).
    pub fn short_trace(&self, max: usize) -> Vec<String> {
        let lines: Vec<&String> = self
            .trace
            .iter()
            .filter(|l| {
                let body = l.split_once(' ').map_or(l.as_str(), |(_, b)| b);
                !(body.starts_with('T') && body.split_whitespace().count() == 2)
            })
            .collect();
        if lines.len() <= max {
            return lines.into_iter().cloned().collect();
        }
        let half = max / 2;
        let mut out: Vec<String> = lines[..half].iter().map(|l| (*l).clone()).collect();
        out.push(format!("... {} lines ...", lines.len() - 2 * half));
        out.extend(lines[lines.len() - half..].iter().map(|l| (*l).clone()));
        out
    }
}

/// Totals over many seeds.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Schedules run.
    pub schedules: u64,
    /// Faults injected, by kind, over all schedules.
    pub faults: BTreeMap<String, u64>,
    /// Figures summed over all schedules.
    pub stats: Stats,
    /// Seeds that violated an invariant, with their violations.
    pub failures: Vec<(u64, Vec<String>)>,
}

impl Summary {
    /// Adds one run.
    pub fn add(&mut self, r: &RunResult) {
        self.schedules += 1;
        for (k, n) in &r.faults {
            *self.faults.entry(k.clone()).or_insert(0) += n;
        }
        self.stats.add(&r.stats);
        if !r.violations.is_empty() {
            self.failures.push((r.seed, r.violations.clone()));
        }
    }

    /// Merges another summary.
    pub fn merge(&mut self, o: Summary) {
        self.schedules += o.schedules;
        for (k, n) in o.faults {
            *self.faults.entry(k).or_insert(0) += n;
        }
        self.stats.add(&o.stats);
        self.failures.extend(o.failures);
        self.failures.sort_by_key(|(s, _)| *s);
    }
}

/// Runs seeds `first..first + count` on `jobs` threads (each seed is independent and
/// deterministic) and sums them up.
pub fn run_seeds(first: u64, count: u64, jobs: usize) -> Summary {
    let jobs = jobs.max(1) as u64;
    let mut total = Summary::default();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..jobs)
            .map(|j| {
                s.spawn(move || {
                    let mut sum = Summary::default();
                    let mut seed = first + j;
                    while seed < first + count {
                        sum.add(&run_seed_caught(seed));
                        seed += jobs;
                    }
                    sum
                })
            })
            .collect();
        for h in handles {
            match h.join() {
                Ok(sum) => total.merge(sum),
                Err(_) => total
                    .failures
                    .push((u64::MAX, vec!["a worker thread panicked".into()])),
            }
        }
    });
    total
}

/// [`run_seed`] without a trace; a panic in the world is reported as the seed's violation.
pub fn run_seed_caught(seed: u64) -> RunResult {
    std::panic::catch_unwind(|| run_seed(seed, false)).unwrap_or_else(|e| {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        RunResult {
            seed,
            violations: vec![format!("panicked: {msg}")],
            faults: BTreeMap::new(),
            trace: Vec::new(),
            stats: Stats::default(),
        }
    })
}
