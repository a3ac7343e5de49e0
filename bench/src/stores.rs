//! Over 600 lines: the part is one concern, one run over both stores, and [`Timed`] must forward
//! every port method of the store it times (each new port method adds its forwarding here).
//!
//! `gate-bench --parts stores` (issue 26 item 6): the store on PostgreSQL and DynamoDB (moto) in
//! one run: round trips and latency per new event and duplicate, the reserve's, guard's and
//! commit's own latency, against the first gate's "one Postgres round trip, 4 ms at p99".
//!
//! Each delivery goes through `Gate::handle_batch` (one record per batch, the terminal in
//! process, so the figures are the store's), the store wrapped in [`Timed`], which times each
//! port call. Round trips are counted, not inferred:
//!
//! * PostgreSQL: by the counting proxy ([`crate::pg_wire`]), statements the client waited for
//!   (extended-protocol exchanges; the per-transaction `BEGIN; SET LOCAL` and `COMMIT` sent in
//!   the same write are counted apart, as `simple`) per delivery, on a second pass of as many
//!   deliveries through the proxy (so the proxy's hop is not in the timed pass, which connects
//!   directly);
//! * DynamoDB: HTTP requests by the test kit's SDK interceptor ([`CallRecorder`], retries
//!   included), in the timed pass.
//!
//! One connection per store (pool size 1, as one consumer working one record at a time), warmed
//! up before the measured deliveries (connections open, statements prepared).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use gate::clock::SystemClock;
use gate::consumer::{Gate, GateConfig, RecordOutcome};
use gate::manual::MemoryManualQueue;
use gate::record::{BusinessRow, IdempotencyRecord, NaturalKey, RecordStatus};
use gate::store::{
    CommitOutcome, FinishGuard, FinishOutcome, GuardOutcome, IdempotencyStore, Reservation,
    ReserveAndGuard, StoreError, TakeOver,
};
use gate_dynamo::create_tables;
use gate_postgres::{PostgresConfig, PostgresStore};
use serde::Serialize;

use crate::breakdown::InProcessTerminal;
use crate::counter::{dynamo_client, CallRecorder};
use crate::handlers::{invocation, sqs_event};
use crate::pg_wire::{self, WireCounts};
use crate::stats::{median, quantile};
use crate::workload::{deliveries, Delivery};

/// How much to measure.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// New events per store and run (each then measured once more through the proxy on
    /// PostgreSQL).
    pub events: usize,
    /// Duplicates per store and run: redeliveries (new message ids) of the first of them.
    pub duplicates: usize,
    /// Unmeasured new events (and as many duplicates, at most 10) first.
    pub warmup: usize,
    /// Runs; the stores' order alternates.
    pub runs: usize,
}

/// One kind of delivery (new events or duplicates) of one store in one run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Figures {
    /// Deliveries.
    pub deliveries: usize,
    /// Latency per delivery (`handle_batch`), ms.
    pub p50_ms: f64,
    /// As above, 99th percentile.
    pub p99_ms: f64,
    /// Step 2's latency, ms (median): the reserve, with the guard of a new event
    /// (`reserve_with_guard`: one statement on PostgreSQL, two requests on DynamoDB).
    pub reserve_p50_ms: f64,
    /// As above, 99th percentile.
    pub reserve_p99_ms: f64,
    /// The commit call's latency, ms (median; `NaN` without commits).
    pub commit_p50_ms: f64,
    /// The commit call's latency, ms (99th percentile).
    pub commit_p99_ms: f64,
    /// The natural key's guard's latency when it is a call of its own, ms (median; `NaN`
    /// without: a new event's guard goes with its reserve, above).
    pub guard_p50_ms: f64,
    /// The guard's latency, ms (99th percentile).
    pub guard_p99_ms: f64,
    /// Round trips per delivery, fewest.
    pub round_trips_min: u64,
    /// Round trips per delivery, most.
    pub round_trips_max: u64,
    /// Round trips per delivery, mean.
    pub round_trips_mean: f64,
    /// Store port calls over the deliveries, by operation (`reserve`, `commit`, ...).
    pub port_calls: BTreeMap<String, u64>,
    /// Requests on the wire over the counted deliveries: DynamoDB operations, or PostgreSQL's
    /// `prepared` and `executed` statements.
    pub wire: BTreeMap<String, u64>,
}

/// One store's figures in one run.
#[derive(Debug, Clone, Serialize)]
pub struct StoreRun {
    /// `postgresql` or `dynamodb-moto`.
    pub store: &'static str,
    /// Run number, from 0.
    pub run: usize,
    /// New events.
    pub new: Figures,
    /// Duplicates.
    pub duplicate: Figures,
}

/// The store decorator that times each port call (µs) and counts them by operation.
pub struct Timed {
    inner: Arc<dyn IdempotencyStore>,
    calls: Mutex<Vec<(&'static str, u64)>>,
}

impl Timed {
    fn new(inner: Arc<dyn IdempotencyStore>) -> Self {
        Self {
            inner,
            calls: Mutex::new(Vec::new()),
        }
    }

    /// The calls since the last `take`, in order: (operation, µs).
    fn take(&self) -> Vec<(&'static str, u64)> {
        std::mem::take(&mut *self.calls.lock().unwrap_or_else(|e| e.into_inner()))
    }

    async fn time<T>(&self, op: &'static str, f: impl std::future::Future<Output = T>) -> T {
        let t = Instant::now();
        let r = f.await;
        let us = t.elapsed().as_micros() as u64;
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((op, us));
        r
    }
}

#[async_trait]
impl IdempotencyStore for Timed {
    async fn reserve(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> Result<Reservation, StoreError> {
        self.time("reserve", self.inner.reserve(record, now_ms))
            .await
    }

    /// Timed as one call (the consumer's step 2 with its guard): the inner store's own, so
    /// PostgreSQL's one statement stays one.
    async fn reserve_with_guard(
        &self,
        record: &IdempotencyRecord,
        natural_key: Option<&NaturalKey>,
        now_ms: i64,
    ) -> Result<ReserveAndGuard, StoreError> {
        let f = self.inner.reserve_with_guard(record, natural_key, now_ms);
        self.time("reserve_with_guard", f).await
    }

    async fn take_over(
        &self,
        pk: &str,
        old_owner: &str,
        new_owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<TakeOver, StoreError> {
        let f = self
            .inner
            .take_over(pk, old_owner, new_owner, lease_until_ms, now_ms);
        self.time("take_over", f).await
    }

    async fn commit(
        &self,
        pk: &str,
        owner: &str,
        effect_id: &str,
        booking: &BusinessRow,
        now_ms: i64,
    ) -> Result<CommitOutcome, StoreError> {
        let f = self.inner.commit(pk, owner, effect_id, booking, now_ms);
        self.time("commit", f).await
    }

    async fn guard(
        &self,
        record: &IdempotencyRecord,
        natural_key: &NaturalKey,
        now_ms: i64,
    ) -> Result<GuardOutcome, StoreError> {
        self.time("guard", self.inner.guard(record, natural_key, now_ms))
            .await
    }

    async fn release_lease(&self, pk: &str, owner: &str, now_ms: i64) -> Result<(), StoreError> {
        self.time("release_lease", self.inner.release_lease(pk, owner, now_ms))
            .await
    }

    async fn extend_lease(
        &self,
        pk: &str,
        owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let f = self.inner.extend_lease(pk, owner, lease_until_ms, now_ms);
        self.time("extend_lease", f).await
    }

    async fn finish(
        &self,
        pk: &str,
        owner: &str,
        status: RecordStatus,
        error: &str,
        item: &[u8],
        guard: FinishGuard,
        now_ms: i64,
    ) -> Result<FinishOutcome, StoreError> {
        let f = self
            .inner
            .finish(pk, owner, status, error, item, guard, now_ms);
        self.time("finish", f).await
    }

    async fn routed(&self, pk: &str, owner: &str, now_ms: i64) -> Result<bool, StoreError> {
        self.time("routed", self.inner.routed(pk, owner, now_ms))
            .await
    }

    async fn record_effect_id(
        &self,
        pk: &str,
        effect_id: &str,
        now_ms: i64,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let f = self.inner.record_effect_id(pk, effect_id, now_ms);
        self.time("record_effect_id", f).await
    }

    async fn get(&self, pk: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.time("get", self.inner.get(pk)).await
    }

    fn row_columns(&self) -> gate::record::RowColumns {
        self.inner.row_columns()
    }
}

/// Where the round trips of a delivery are counted.
enum Counter<'a> {
    /// Not in this pass.
    None,
    /// The PostgreSQL proxy.
    Wire(&'a WireCounts),
    /// The DynamoDB SDK interceptor.
    Sdk(&'a CallRecorder),
}

impl Counter<'_> {
    /// Round trips since the last call, and the requests by kind; reset.
    fn take(&self) -> Option<(u64, BTreeMap<String, u64>)> {
        match self {
            Counter::None => None,
            Counter::Wire(w) => {
                let c = w.take();
                let kinds = BTreeMap::from([
                    ("prepared".to_string(), c.prepared),
                    ("executed".to_string(), c.executed),
                    ("simple".to_string(), c.simple),
                ]);
                Some((c.round_trips, kinds))
            }
            Counter::Sdk(r) => {
                let kinds = r.counts();
                r.clear();
                Some((kinds.values().sum(), kinds))
            }
        }
    }
}

/// What one pass measured for one kind of delivery.
#[derive(Default)]
struct Samples {
    latency_us: Vec<u64>,
    reserve_us: Vec<u64>,
    commit_us: Vec<u64>,
    guard_us: Vec<u64>,
    round_trips: Vec<u64>,
    port_calls: BTreeMap<String, u64>,
    wire: BTreeMap<String, u64>,
}

impl Samples {
    fn figures(&self, counted: &Samples) -> Figures {
        let ms = |v: &[u64], q: f64| {
            if v.is_empty() {
                f64::NAN
            } else {
                quantile(v, q) as f64 / 1000.0
            }
        };
        let rt = &counted.round_trips;
        Figures {
            deliveries: self.latency_us.len(),
            p50_ms: ms(&self.latency_us, 0.5),
            p99_ms: ms(&self.latency_us, 0.99),
            reserve_p50_ms: ms(&self.reserve_us, 0.5),
            reserve_p99_ms: ms(&self.reserve_us, 0.99),
            commit_p50_ms: ms(&self.commit_us, 0.5),
            commit_p99_ms: ms(&self.commit_us, 0.99),
            guard_p50_ms: ms(&self.guard_us, 0.5),
            guard_p99_ms: ms(&self.guard_us, 0.99),
            round_trips_min: rt.iter().copied().min().unwrap_or(0),
            round_trips_max: rt.iter().copied().max().unwrap_or(0),
            round_trips_mean: rt.iter().sum::<u64>() as f64 / rt.len().max(1) as f64,
            port_calls: self.port_calls.clone(),
            wire: counted.wire.clone(),
        }
    }
}

/// Processes `ds` one per batch, each expected to end `want` (`committed` or `duplicate`).
async fn pass(
    gate: &Gate,
    timed: &Timed,
    ds: &[Delivery],
    want: &str,
    counter: &Counter<'_>,
) -> Result<Samples, String> {
    let mut s = Samples::default();
    let events: Vec<_> = ds.iter().map(|d| sqs_event(&[d])).collect();
    timed.take();
    counter.take();
    for (event, d) in events.into_iter().zip(ds) {
        let inv = invocation(&d.message_id);
        let t = Instant::now();
        let report = gate.handle_batch(event, &inv).await;
        s.latency_us.push(t.elapsed().as_micros() as u64);
        let outcome = report.records.first().map(|r| &r.outcome);
        let got = match outcome {
            Some(RecordOutcome::Committed { .. }) => "committed",
            Some(o) if o.is_duplicate() => "duplicate",
            _ => "other",
        };
        if got != want {
            return Err(format!(
                "stores: {} ended {outcome:?}, expected {want}",
                d.message_id
            ));
        }
        for (op, us) in timed.take() {
            *s.port_calls.entry(op.to_string()).or_default() += 1;
            match op {
                // The consumer's step 2: the reserve, with the guard of a new event.
                "reserve" | "reserve_with_guard" => s.reserve_us.push(us),
                "commit" => s.commit_us.push(us),
                "guard" => s.guard_us.push(us),
                _ => {}
            }
        }
        if let Some((trips, kinds)) = counter.take() {
            s.round_trips.push(trips);
            for (k, n) in kinds {
                *s.wire.entry(k).or_default() += n;
            }
        }
    }
    Ok(s)
}

/// A gate over `store` (timed), the terminal in process, one record at a time.
fn gate_over(store: Arc<Timed>, tag: &str) -> Gate {
    let mut config = GateConfig::new(format!("bench-{tag}"));
    config.max_concurrency = 1;
    Gate {
        config,
        store,
        integration: Arc::new(truck_slot::TruckSlot::new(
            Arc::new(InProcessTerminal),
            vec!["ECT-DELTA".to_string()],
        )),
        manual: Arc::new(MemoryManualQueue::new()),
        clock: Arc::new(SystemClock),
    }
}

/// New events of `tag` and the redeliveries of the first `duplicates` of them.
fn workload(
    tag: &str,
    events: usize,
    duplicates: usize,
    window: &(String, String),
) -> (Vec<Delivery>, Vec<Delivery>) {
    let new = deliveries(tag, events, 0.0, window, 26);
    let again = new
        .iter()
        .take(duplicates)
        .map(|d| Delivery {
            message_id: format!("{}-again", d.message_id),
            body: d.body.clone(),
            duplicate: true,
        })
        .collect();
    (new, again)
}

/// Warms `gate` up, then measures `plan.events` new events and `plan.duplicates` duplicates.
async fn measure(
    gate: &Gate,
    timed: &Timed,
    tag: &str,
    plan: &Plan,
    window: &(String, String),
    counter: &Counter<'_>,
) -> Result<(Samples, Samples), String> {
    let (warm_new, warm_dup) = workload(
        &format!("{tag}-warm"),
        plan.warmup,
        plan.warmup.min(10),
        window,
    );
    pass(gate, timed, &warm_new, "committed", &Counter::None).await?;
    pass(gate, timed, &warm_dup, "duplicate", &Counter::None).await?;
    let (new, dup) = workload(tag, plan.events, plan.duplicates, window);
    let n = pass(gate, timed, &new, "committed", counter).await?;
    let d = pass(gate, timed, &dup, "duplicate", counter).await?;
    Ok((n, d))
}

/// The server address of a `postgresql://user@HOST:PORT/db` URL, and the URL with it replaced
/// by `proxy`.
fn through_proxy(url: &str, upstream: SocketAddr, proxy: SocketAddr) -> Result<String, String> {
    let needle = upstream.to_string();
    if !url.contains(&needle) {
        return Err(format!(
            "stores: the round-trip count needs a URL naming the server as {needle} \
             (postgresql://user@{needle}/db?sslmode=disable)"
        ));
    }
    Ok(url.replacen(&needle, &proxy.to_string(), 1))
}

/// The server's socket address from the connection string (first host and port).
fn server_addr(url: &str) -> Result<SocketAddr, String> {
    let config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| format!("stores: the database URL does not parse: {e}"))?;
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => return Err("stores: the database URL names no TCP host".into()),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let ip: std::net::IpAddr = host
        .parse()
        .map_err(|_| format!("stores: the database host must be an IP address, got {host:?}"))?;
    Ok(SocketAddr::new(ip, port))
}

/// One run on PostgreSQL at `url`: a fresh schema, dropped afterwards.
async fn postgres_run(
    url: &str,
    tag: &str,
    plan: &Plan,
    window: &(String, String),
) -> Result<(Figures, Figures), String> {
    let upstream = server_addr(url)?;
    let (counts, proxy) = pg_wire::start(upstream).await?;
    let proxied = through_proxy(url, upstream, proxy)?;
    let schema = format!("gate_bench_{}", tag.replace('-', "_"));
    let store = |u: &str| {
        PostgresStore::with_config(&PostgresConfig::new(u, 1).with_schema(schema.clone()))
            .map_err(|e| e.to_string())
    };
    let direct = store(url)?;
    direct.migrate().await.map_err(|e| e.to_string())?;
    let counted = store(&proxied)?;
    let result = async {
        let timed = Arc::new(Timed::new(Arc::new(direct.clone())));
        let gate = gate_over(Arc::clone(&timed), tag);
        let (n, d) = measure(&gate, &timed, tag, plan, window, &Counter::None).await?;
        let timed_c = Arc::new(Timed::new(Arc::new(counted)));
        let gate_c = gate_over(Arc::clone(&timed_c), tag);
        let tag_c = format!("{tag}-counted");
        let counter = Counter::Wire(&counts);
        let (nc, dc) = measure(&gate_c, &timed_c, &tag_c, plan, window, &counter).await?;
        Ok::<_, String>((n.figures(&nc), d.figures(&dc)))
    }
    .await;
    if let Ok(client) = direct.pool().get().await {
        let _ = client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await;
    }
    result
}

/// One run on DynamoDB on moto at `endpoint`: fresh tables.
async fn dynamo_run(
    endpoint: &str,
    tag: &str,
    plan: &Plan,
    window: &(String, String),
) -> Result<(Figures, Figures), String> {
    let recorder = CallRecorder::default();
    let client = dynamo_client(endpoint, &recorder).await;
    let (idem, book) = (format!("{tag}-idem"), format!("{tag}-book"));
    create_tables(&client, &idem, &book)
        .await
        .map_err(|e| e.to_string())?;
    let timed = Arc::new(Timed::new(Arc::new(sim::stores::dynamo_store(
        client, idem, book,
    ))));
    let gate = gate_over(Arc::clone(&timed), tag);
    let (n, d) = measure(&gate, &timed, tag, plan, window, &Counter::Sdk(&recorder)).await?;
    Ok((n.figures(&n), d.figures(&d)))
}

/// Measures both stores `plan.runs` times (PostgreSQL at `database_url`, moto at
/// `moto_endpoint`), alternating which goes first.
///
/// # Errors
/// When a store cannot be set up or a delivery does not end as expected.
pub async fn run(
    database_url: &str,
    moto_endpoint: &str,
    stamp: &str,
    plan: &Plan,
    window: &(String, String),
) -> Result<Vec<StoreRun>, String> {
    let mut out = Vec::new();
    for run in 0..plan.runs {
        let mut order = ["postgresql", "dynamodb-moto"];
        if run % 2 == 1 {
            order.reverse();
        }
        for store in order {
            let tag = format!("{stamp}-s{run}-{}", &store[..2]);
            eprintln!(
                "bench: stores: run {} of {}: {store} ...",
                run + 1,
                plan.runs
            );
            let (new, duplicate) = if store == "postgresql" {
                postgres_run(database_url, &tag, plan, window).await?
            } else {
                dynamo_run(moto_endpoint, &tag, plan, window).await?
            };
            out.push(StoreRun {
                store,
                run,
                new,
                duplicate,
            });
        }
    }
    Ok(out)
}

/// `median (lowest-highest)` of `f` over `runs`, ms.
fn spread(runs: &[&StoreRun], f: impl Fn(&StoreRun) -> f64) -> String {
    let v: Vec<f64> = runs.iter().map(|r| f(r)).collect();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.2} ({lo:.2}-{hi:.2})", median(&v))
}

/// Round trips per delivery over all runs: `n`, or `lowest-highest` when they differ.
fn trips(runs: &[&StoreRun], f: impl Fn(&StoreRun) -> &Figures) -> String {
    let lo = runs.iter().map(|r| f(r).round_trips_min).min().unwrap_or(0);
    let hi = runs.iter().map(|r| f(r).round_trips_max).max().unwrap_or(0);
    if lo == hi {
        format!("{lo}")
    } else {
        format!("{lo}-{hi}")
    }
}

/// Prints the side-by-side table (Markdown) and the comparison with the first gate's claim.
pub fn print(runs: &[StoreRun], plan: &Plan) {
    println!(
        "\nPostgreSQL and DynamoDB (moto) side by side: {} run(s) of {} new events and {} duplicates per store, one delivery per batch, terminal in process, one connection; medians over runs (lowest-highest run):\n",
        plan.runs, plan.events, plan.duplicates
    );
    println!("| store | round trips per new event | new event p50 / p99 ms | reserve + guard p50 / p99 ms | commit p50 / p99 ms | round trips per duplicate | duplicate p50 / p99 ms |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for store in ["postgresql", "dynamodb-moto"] {
        let rs: Vec<&StoreRun> = runs.iter().filter(|r| r.store == store).collect();
        if rs.is_empty() {
            continue;
        }
        println!(
            "| {store} | {} | {} / {} | {} / {} | {} / {} | {} | {} / {} |",
            trips(&rs, |r| &r.new),
            spread(&rs, |r| r.new.p50_ms),
            spread(&rs, |r| r.new.p99_ms),
            spread(&rs, |r| r.new.reserve_p50_ms),
            spread(&rs, |r| r.new.reserve_p99_ms),
            spread(&rs, |r| r.new.commit_p50_ms),
            spread(&rs, |r| r.new.commit_p99_ms),
            trips(&rs, |r| &r.duplicate),
            spread(&rs, |r| r.duplicate.p50_ms),
            spread(&rs, |r| r.duplicate.p99_ms),
        );
    }
    for r in runs {
        eprintln!(
            "bench: stores: run {} {}: new port calls {:?} wire {:?}; duplicate port calls {:?} wire {:?}",
            r.run, r.store, r.new.port_calls, r.new.wire, r.duplicate.port_calls, r.duplicate.wire
        );
    }
    let pg: Vec<&StoreRun> = runs.iter().filter(|r| r.store == "postgresql").collect();
    if !pg.is_empty() {
        println!(
            "\nThe first gate's claim for its reserve: one round trip, 4 ms at p99. Measured on PostgreSQL: a new event's reserve with its guard p50 / p99 {} / {} ms; a duplicate (the reserve alone) {} round trip(s), p50 / p99 {} / {} ms; a whole new event {} round trip(s), p99 {} ms.",
            spread(&pg, |r| r.new.reserve_p50_ms),
            spread(&pg, |r| r.new.reserve_p99_ms),
            trips(&pg, |r| &r.duplicate),
            spread(&pg, |r| r.duplicate.reserve_p50_ms),
            spread(&pg, |r| r.duplicate.reserve_p99_ms),
            trips(&pg, |r| &r.new),
            spread(&pg, |r| r.new.p99_ms),
        );
    }
}

#[cfg(test)]
mod tests;
