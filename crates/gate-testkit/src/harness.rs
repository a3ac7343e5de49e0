//! [`Harness`]: runs any [`Integration`] through the gate's public API ([`Gate::handle_batch`],
//! [`Gate::reconcile`]) on simulated time ([`ManualClock`]), seeded, and checks the end state
//! with [`exactly_once_violations`] and [`liveness_violations`].
//!
//! Records are handled one at a time (`max_concurrency` 1), so the requests reach the server in
//! the same order every time: a seed replays the same run.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::faults::{FaultCounts, FaultRates, FaultyStore, StallHook};
use super::invariants::{exactly_once_violations, liveness_violations, Delivered};
use super::skew::SkewedClock;
use super::sqs_event;
use gate::clock::{Clock, ManualClock};
use gate::consumer::derive_keys;
use gate::integration::{Event, Integration, Parsed};
use gate::manual::{ManualItem, ManualReason, MemoryManualQueue};
use gate::reconciler::ReconcilerConfig;
use gate::record::{BusinessRow, IdempotencyRecord, RecordStatus};
use gate::store::memory::MemoryStore;
use gate::store::IdempotencyStore;
use gate::{Gate, GateConfig, Invocation};

/// What a side effect's server made, by `Idempotency-Key`, in order (an [`IdempotencyServer`](crate::IdempotencyServer)
/// counts it; a fake of another kind of server implements this).
///
/// [`IdempotencyServer`](crate::IdempotencyServer): super::IdempotencyServer
pub trait EffectLedger: Send + Sync {
    /// Every effect made, by key, in order.
    fn effects(&self) -> BTreeMap<String, Vec<String>>;
}

/// What one run works against: the integration, and the ledger of the effects its server made
/// (kept alive for the run, e.g. the server itself).
pub struct Target {
    /// The integration under test, talking to its server.
    pub integration: Arc<dyn Integration>,
    /// The effects its server made.
    pub ledger: Arc<dyn EffectLedger>,
}

/// The harness's settings. [`HarnessConfig::new`] gives the defaults.
#[derive(Debug, Clone)]
pub struct HarnessConfig {
    /// The gate's settings (its integration name prefixes every record key); `max_concurrency`
    /// is set to 1 (module docs).
    pub gate: GateConfig,
    /// The reconciler's settings.
    pub reconciler: ReconcilerConfig,
    /// When the run starts, epoch **milliseconds** (default 2030-01-07T08:00:00Z).
    pub start_ms: i64,
    /// Each body is delivered 1 to this many times (default 3).
    pub max_copies: usize,
    /// Each batch holds 1 to this many records (default 5).
    pub max_batch: usize,
    /// How many of the first events a worker reserved and died with, their message never coming
    /// back (default 3).
    pub stranded: usize,
    /// The store's faults.
    pub faults: FaultRates,
    /// Batches between two reconciler runs while messages are delivered (default 8).
    pub reconcile_every: usize,
    /// The largest clock skew of a worker or the reconciler from true time, **milliseconds**
    /// (default 5,000; each draws its own in `-max..=max`; 0: every clock reads true time).
    pub max_skew_ms: i64,
    /// How long a failed message stays invisible before SQS delivers it again, **milliseconds**
    /// of simulated time (default 30,000: the SQS queue default).
    pub visibility_timeout_ms: i64,
    /// The chance a failed message never comes back (its receive count exhausted, or lost),
    /// drawn only when its event's record, with its fingerprint, is in the store, so the
    /// reconciler can finish it (default 0.1).
    pub lost_rate: f64,
}

impl HarnessConfig {
    /// Defaults for an integration named `integration` (the record keys' prefix).
    pub fn new(integration: &str) -> Self {
        Self {
            gate: GateConfig::new(integration),
            reconciler: ReconcilerConfig::default(),
            start_ms: 1_893_916_800_000,
            max_copies: 3,
            max_batch: 5,
            stranded: 3,
            faults: FaultRates::default(),
            reconcile_every: 8,
            max_skew_ms: 5_000,
            visibility_timeout_ms: 30_000,
            lost_rate: 0.1,
        }
    }
}

/// The end state of one run and what happened on the way.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The seed the run was drawn from: [`Harness::run`] with it replays the same run.
    pub seed: u64,
    /// Every record at the end.
    pub records: Vec<IdempotencyRecord>,
    /// Every business row at the end.
    pub rows: Vec<BusinessRow>,
    /// Every item the manual queue got, in order.
    pub manual: Vec<ManualItem>,
    /// Every effect the server made, by key.
    pub effects: BTreeMap<String, Vec<String>>,
    /// What the run delivered.
    pub delivered: Delivered,
    /// Violations of [`exactly_once_violations`] and [`liveness_violations`] (empty: none).
    pub violations: Vec<String>,
    /// What the store's faults did.
    pub faults: FaultCounts,
    /// SQS deliveries made (redeliveries included).
    pub deliveries: usize,
    /// Failed messages that never came back (only the reconciler finished their events).
    pub lost: usize,
    /// The largest clock skew drawn in the run (a worker's or the reconciler's), absolute,
    /// **milliseconds**.
    pub max_skew_seen_ms: i64,
    /// Records the reconciler committed (its runs during stalls included).
    pub reconciled: usize,
}

impl RunReport {
    /// How many records ended `committed`.
    pub fn committed(&self) -> usize {
        self.records
            .iter()
            .filter(|r| r.status == RecordStatus::Committed)
            .count()
    }

    /// How many distinct cases a person got for `reason`: items counted once per
    /// `(event key, original body)` (a repeat of one case carries the same).
    pub fn cases(&self, reason: ManualReason) -> usize {
        let cases: std::collections::BTreeSet<(Option<&str>, &str)> = self
            .manual
            .iter()
            .filter(|i| i.reason == reason)
            .map(|i| (i.event_key.as_deref(), i.original_body.as_str()))
            .collect();
        cases.len()
    }
}

/// Runs an integration through duplicates, redeliveries, crashes, lost answers, lease expiry and
/// the reconciler.
///
/// One run ([`Harness::run`]) with seed `s`:
///
/// 1. `setup(s, clock)` starts the integration and its server (e.g. an [`IdempotencyServer`](crate::IdempotencyServer)
///    with its own faults, seeded from `s`) and gives a [`Target`];
/// 2. every body is parsed once to know what the run delivers: an event (its event key and
///    fingerprint, from the gate's own [`derive_keys`]) or a rejected body;
/// 3. the first [`HarnessConfig::stranded`] events are reserved by a worker that died right after
///    its reserve and whose message never comes back (only the reconciler can finish them);
/// 4. every other body is delivered 1 to [`HarnessConfig::max_copies`] times, shuffled, in batches
///    of 1 to [`HarnessConfig::max_batch`], one simulated second apart; a message that failed (a
///    batch item failure: the worker crashed, the server or the store failed) is visible again
///    only after [`HarnessConfig::visibility_timeout_ms`] of simulated time, as SQS redelivers it,
///    and with [`HarnessConfig::lost_rate`] never comes back at all (its event's record is in the
///    store: only the reconciler can finish it); the reconciler runs every
///    [`HarnessConfig::reconcile_every`] batches;
/// 5. every batch is one worker on its own host: its clock ([`SkewedClock`]) is off true time by
///    a seeded skew of up to ±[`HarnessConfig::max_skew_ms`], and so is the reconciler's (one
///    skew per run); a worker's deadline is `now + 60 s` on its own clock;
/// 6. the store is a [`FaultyStore`]: workers crash before or after any of their writes, writes
///    land twice (a lost answer retried), workers stall past their lease while the reconciler
///    takes their record over ([`FaultRates`]): the stall lasts the lease plus twice the largest
///    skew plus the reconciler's minimum age (docs/SIMULATION.md's liveness bound);
/// 7. then the reconciler runs every minute from ten minutes on, until it finds nothing.
///
/// Use: give the harness the bodies your feed carries (events, a changed copy of one to make a
/// mismatch, a body your parse rejects), describe your server to an [`IdempotencyServer`](crate::IdempotencyServer) and
/// check a range of seeds. A failing seed is named in the panic; run it alone to replay it.
///
/// Add `gate = { ..., features = ["testkit"] }` to your crate's `[dev-dependencies]`, describe
/// your server to an [`IdempotencyServer`](crate::IdempotencyServer), give the [`Harness`] the bodies your feed carries
/// (events, a changed copy of one to make a mismatch, a body your parse rejects) and check a
/// range of seeds. A failing seed is named in the panic; run it alone to replay it.
///
/// ```no_run
/// use std::sync::Arc;
///
/// use gate_testkit::{Faults, Harness, IdempotencyServer, ServerConfig, Target};
/// use gate::Integration;
///
/// /// Your integration, as a client of the server at `base_url`.
/// fn my_client(base_url: &str) -> Arc<dyn Integration> {
///     // e.g. Arc::new(job_client::JobClient::new(base_url).unwrap())
/// #   unimplemented!("{base_url}")
/// }
///
/// # async fn doc() {
/// // POST /jobs answers 201 {"id": "JOB-000001"}; a reused key with another body is 409.
/// let server = ServerConfig::new("/jobs", "id")
///     .id_prefix("JOB")
///     .mismatch(gate_testkit::MismatchAnswer::Conflict);
/// let bodies: Vec<String> = (0..24)
///     .map(|n| format!(r#"{{"job_id":"J-{n}","payload":{{"n":{n}}}}}"#))
///     .chain([r#"{"job_id":"J-5","payload":{"n":-5}}"#.to_string(), "{not json".to_string()])
///     .collect();
/// let reports = Harness::new("jobs", bodies)
///     .check_seeds(0..100, async |seed, clock| {
///         let faults = Faults { lose_answer_rate: 0.3, unavailable_rate: 0.1, seed, ..Faults::default() };
///         let server = IdempotencyServer::start(server.clone().faults(faults), clock)
///             .await
///             .expect("a loopback port");
///         Target { integration: my_client(server.url()), ledger: Arc::new(server) }
///     })
///     .await;
/// assert!(reports.iter().all(|r| r.committed() == 24));
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Harness {
    /// The settings.
    pub config: HarnessConfig,
    /// The bodies to deliver: events (several bodies of one event with other business fields
    /// are mismatches) and bodies the integration rejects.
    pub bodies: Vec<String>,
}

impl Harness {
    /// A harness with [`HarnessConfig::new`]`(integration)` delivering `bodies`.
    pub fn new(integration: &str, bodies: Vec<String>) -> Self {
        Self {
            config: HarnessConfig::new(integration),
            bodies,
        }
    }

    /// Runs every seed in `seeds` and panics at the first run with a violation, naming its
    /// seed (run that seed alone to replay it). Returns the reports, for the caller's own checks.
    pub async fn check_seeds<F>(&self, seeds: std::ops::Range<u64>, setup: F) -> Vec<RunReport>
    where
        F: AsyncFn(u64, Arc<ManualClock>) -> Target,
    {
        let mut reports = Vec::new();
        for seed in seeds {
            let report = self.run(seed, &setup).await;
            assert!(
                report.violations.is_empty(),
                "seed {seed}: {:#?}",
                report.violations
            );
            reports.push(report);
        }
        reports
    }

    /// One run with `seed` (module docs).
    pub async fn run<F>(&self, seed: u64, setup: &F) -> RunReport
    where
        F: AsyncFn(u64, Arc<ManualClock>) -> Target,
    {
        let config = &self.config;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // Skews and losses draw from their own streams, so the deliveries' order is the seed's
        // whatever they are set to.
        let mut skews = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_c10c);
        let mut losses = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_1057);
        let max_skew = config.max_skew_ms.max(0);
        let mut draw_skew = move || {
            if max_skew == 0 {
                0
            } else {
                skews.random_range(-max_skew..=max_skew)
            }
        };
        let clock = Arc::new(ManualClock::new(config.start_ms));
        let target = setup(seed, Arc::clone(&clock)).await;
        // The business row laid out as the integration's functions lay it out: the memory
        // store refuses the labels DynamoDB built with the same names would.
        let memory =
            Arc::new(MemoryStore::new().with_row_columns(target.integration.row_columns()));
        let store = Arc::new(FaultyStore::new(
            memory.clone(),
            seed,
            config.faults,
            "inv-",
        ));
        let manual = Arc::new(MemoryManualQueue::new());
        let mut gate_config = config.gate.clone();
        gate_config.max_concurrency = 1;
        let gate = Gate {
            config: gate_config,
            store: store.clone(),
            integration: Arc::clone(&target.integration),
            manual: manual.clone(),
            clock: clock.clone(),
        };
        let reconciler_skew = draw_skew();
        let mut max_skew_seen_ms = reconciler_skew.abs();
        let reconciler_clock = Arc::new(SkewedClock {
            base: Arc::clone(&clock),
            offset_ms: reconciler_skew,
        });
        let reconciler = Gate {
            clock: reconciler_clock.clone(),
            ..gate.clone()
        };
        let reconciled_in_stalls = Arc::new(AtomicUsize::new(0));
        store.set_stall_hook(Some(stall_hook(
            &reconciler,
            max_skew,
            &memory,
            &clock,
            &reconciler_clock,
            &config.reconciler,
            &reconciled_in_stalls,
        )));

        let (delivered, events) =
            classify(target.integration.as_ref(), &self.bodies, config.start_ms);
        // (visible from, epoch ms of true time; body), in the order SQS hands them out.
        let mut queue: Vec<(i64, String)> = Vec::new();
        let mut stranded = 0;
        for body in &self.bodies {
            if stranded < config.stranded {
                if let Some(event) = events.get(body) {
                    strand(&gate, &memory, event, stranded, config.start_ms).await;
                    stranded += 1;
                    continue;
                }
            }
            for _ in 0..rng.random_range(1..=config.max_copies.max(1)) {
                queue.push((config.start_ms, body.clone()));
            }
        }
        for i in (1..queue.len()).rev() {
            queue.swap(i, rng.random_range(0..=i));
        }

        let mut deliveries = 0;
        let mut lost = 0;
        let mut reconciled = 0;
        let mut batches = 0;
        // Each delivery can fail a bounded number of times; a run that does not settle is a
        // violation, never a hang.
        let limit = 50 * (queue.len() + 1);
        while !queue.is_empty() && deliveries < limit {
            let take = rng.random_range(1..=config.max_batch.max(1));
            clock.advance_ms(1_000);
            // Nothing visible: the next message becomes visible when its timeout ends.
            let now = clock.now_ms();
            if queue.iter().all(|(from, _)| *from > now) {
                let next = queue.iter().map(|(from, _)| *from).min().unwrap_or(now);
                clock.advance_ms(next - now);
            }
            let now = clock.now_ms();
            let mut batch: Vec<(String, String)> = Vec::new();
            let mut i = 0;
            while i < queue.len() && batch.len() < take {
                if queue[i].0 <= now {
                    let (_, body) = queue.remove(i);
                    deliveries += 1;
                    batch.push((format!("m-{deliveries}"), body));
                } else {
                    i += 1;
                }
            }
            let pairs: Vec<(&str, &str)> = batch
                .iter()
                .map(|(id, body)| (id.as_str(), body.as_str()))
                .collect();
            batches += 1;
            let skew = draw_skew();
            max_skew_seen_ms = max_skew_seen_ms.max(skew.abs());
            let worker_clock = Arc::new(SkewedClock {
                base: Arc::clone(&clock),
                offset_ms: skew,
            });
            let worker = Gate {
                clock: worker_clock.clone(),
                ..gate.clone()
            };
            let invocation = Invocation {
                request_id: format!("inv-{batches}"),
                deadline_ms: worker_clock.now_ms() + 60_000,
            };
            let report = worker.handle_batch(sqs_event(&pairs), &invocation).await;
            let visible_from = clock.now_ms() + config.visibility_timeout_ms.max(0);
            for failure in &report.response.batch_item_failures {
                if let Some((_, body)) = batch.iter().find(|(id, _)| *id == failure.item_identifier)
                {
                    let finishable = events.get(body).is_some_and(|event| {
                        has_record(&memory, event, target.integration.as_ref())
                    });
                    if finishable && losses.random_bool(config.lost_rate.clamp(0.0, 1.0)) {
                        lost += 1;
                    } else {
                        queue.push((visible_from, body.clone()));
                    }
                }
            }
            if batches % config.reconcile_every.max(1) == 0 {
                clock.advance_ms(60_000);
                reconciled += reconcile(
                    &reconciler,
                    &memory,
                    reconciler_clock.as_ref(),
                    &config.reconciler,
                    &format!("rec-b{batches}"),
                )
                .await
                .0;
            }
        }
        // The reconciler every minute from ten minutes on, until it finds nothing left.
        clock.advance_ms(10 * 60_000);
        for run in 0..60 {
            clock.advance_ms(60_000);
            let (done, examined) = reconcile(
                &reconciler,
                &memory,
                reconciler_clock.as_ref(),
                &config.reconciler,
                &format!("rec-{run}"),
            )
            .await;
            reconciled += done;
            if examined == 0 {
                break;
            }
        }
        store.set_stall_hook(None);
        reconciled += reconciled_in_stalls.load(Ordering::SeqCst);

        let records = memory.records();
        let rows = memory.business_rows();
        let items = manual.items();
        let effects = target.ledger.effects();
        let mut violations = exactly_once_violations(&records, &rows, &items, &effects);
        violations.extend(liveness_violations(&records, &items, &delivered));
        if !queue.is_empty() {
            violations.push(format!(
                "{} deliveries never settled after {deliveries} deliveries",
                queue.len()
            ));
        }
        RunReport {
            seed,
            records,
            rows,
            manual: items,
            effects,
            delivered,
            violations,
            faults: store.counts(),
            deliveries,
            lost,
            max_skew_seen_ms,
            reconciled,
        }
    }
}

/// Parses every body once at `now_ms`: what the run delivers, and the event of each body that
/// has one (by body).
fn classify(
    integration: &dyn Integration,
    bodies: &[String],
    now_ms: i64,
) -> (Delivered, BTreeMap<String, Event>) {
    let mut delivered = Delivered::default();
    let mut events = BTreeMap::new();
    for body in bodies {
        let event = match integration.parse(body, now_ms) {
            Parsed::Event(event) | Parsed::Ended(event, _) => event,
            Parsed::IfRecorded { event, .. } => event,
            Parsed::Rejected(_) => {
                delivered.rejected.insert(body.clone());
                continue;
            }
        };
        match derive_keys(&event, integration.operation()) {
            Ok(keys) => {
                delivered
                    .events
                    .entry(keys.event_key)
                    .or_default()
                    .entry(keys.fingerprint)
                    .or_insert_with(|| body.clone());
                events.insert(body.clone(), event);
            }
            // The gate rejects it too (`not_json`).
            Err(_) => {
                delivered.rejected.insert(body.clone());
            }
        }
    }
    (delivered, events)
}

/// Whether the store holds `event`'s record with its fingerprint (the reconciler can finish it).
fn has_record(memory: &MemoryStore, event: &Event, integration: &dyn Integration) -> bool {
    let Ok(keys) = derive_keys(event, integration.operation()) else {
        return false;
    };
    memory
        .records()
        .iter()
        .any(|r| r.event_key == keys.event_key && r.fingerprint == keys.fingerprint)
}

/// A worker reserved `event` two minutes before `start_ms` and died; its message never comes back.
async fn strand(gate: &Gate, memory: &MemoryStore, event: &Event, n: usize, start_ms: i64) {
    let Ok(keys) = derive_keys(event, gate.integration.operation()) else {
        return;
    };
    let dead = Invocation {
        request_id: format!("dead-{n}"),
        deadline_ms: start_ms - 60_000,
    };
    let at = start_ms - 120_000;
    let record = gate.config.new_record(event, &keys, &dead, at);
    // Straight into the store: this worker is known to have reserved. A refusal (the event's
    // record is one the store refuses) leaves the event without a record, which the liveness
    // check then reports.
    let _ = memory.reserve(&record, at).await;
}

/// One reconciler run: (records committed, records examined).
async fn reconcile(
    gate: &Gate,
    index: &MemoryStore,
    clock: &dyn Clock,
    config: &ReconcilerConfig,
    request_id: &str,
) -> (usize, usize) {
    let invocation = Invocation {
        request_id: request_id.to_string(),
        deadline_ms: clock.now_ms() + 120_000,
    };
    let report = gate.reconcile(index, config, &invocation).await;
    (report.reconciled, report.examined)
}

/// What a stalled worker waits through: its lease expires (true time moves past the longest
/// consumer lease, twice the largest skew and the reconciler's minimum age) and the reconciler
/// (`gate`, on `reconciler_clock`) runs.
#[allow(clippy::too_many_arguments)]
fn stall_hook(
    gate: &Gate,
    max_skew_ms: i64,
    memory: &Arc<MemoryStore>,
    clock: &Arc<ManualClock>,
    reconciler_clock: &Arc<SkewedClock>,
    config: &ReconcilerConfig,
    reconciled: &Arc<AtomicUsize>,
) -> StallHook {
    let gate = gate.clone();
    let memory = Arc::clone(memory);
    let clock = Arc::clone(clock);
    let reconciler_clock = Arc::clone(reconciler_clock);
    let config = config.clone();
    let reconciled = Arc::clone(reconciled);
    let stalls = Arc::new(AtomicUsize::new(0));
    Arc::new(move || {
        let gate = gate.clone();
        let memory = Arc::clone(&memory);
        let clock = Arc::clone(&clock);
        let reconciler_clock = Arc::clone(&reconciler_clock);
        let config = config.clone();
        let reconciled = Arc::clone(&reconciled);
        let n = stalls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            // The consumer's lease lasts until its invocation's deadline (60 s in the harness),
            // at least the lease floor, on the worker's clock; the reconciler's clock may be up to
            // twice the largest skew behind it; it looks at records older than its minimum age.
            let lease = 60_000_i64.max(gate.config.lease_floor_ms);
            clock.advance_ms(lease.max(config.min_age_ms) + 2 * max_skew_ms + 1_000);
            let (done, _) = reconcile(
                &gate,
                &memory,
                reconciler_clock.as_ref(),
                &config,
                &format!("stall-{n}"),
            )
            .await;
            reconciled.fetch_add(done, Ordering::SeqCst);
        })
    })
}
