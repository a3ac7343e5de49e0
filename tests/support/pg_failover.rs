//! The real consumer and reconciler binaries on real PostgreSQL servers under real faults: one
//! case is [`run_case`] of one [`Fault`].
//!
//! A case starts its own servers (a primary and its synchronous streaming standby behind the
//! fault proxy, `pg_cluster` and `pg_fault_proxy`; or one server behind PgBouncer in transaction
//! mode, `pgbouncer`), the terminal simulator in process, a manual queue in moto, and the
//! `consumer` and `reconciler` binaries each in an emulated Lambda environment (`lambda_env`:
//! kept warm across the fault, real deadlines of [`FUNCTION_TIMEOUT`], an overrunning invocation
//! killed); [`run_case`] lists its steps, [`Figures`] what it measures.
//!
//! The feed's visibility timeout (10 s) is shorter than the consumer's lease (15 s), to keep a
//! case short: a redelivery can meet the lease its own earlier invocation could not release
//! (the store was failing) and is acknowledged as a duplicate in flight; the reconciler finishes
//! that record, and its last run's `reconciled` counts it beside the stranded one. With the
//! template's visibility (six times the function timeout) the redelivery takes the lease over.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use gate::clock::{Clock, SystemClock};
use gate::consumer::{Gate, GateConfig, Invocation};
use gate_postgres::{PostgresConfig, PostgresStore};
use sim::terminal::{self, TerminalConfig, TerminalCore};

use crate::lambda_env::{function_binaries, FunctionSpec, LambdaEnv, Outcome};
use crate::pg_cluster::{pg_bin, PgCluster, PgServer};
use crate::pg_fault_proxy::{FaultProxy, Mode};
use crate::pgbouncer::{PgBouncer, PoolMode};
use crate::sqs_feed::{self, Feed, FeedReport, Progress, NOTIFICATIONS};
use crate::{fresh_queue, moto_endpoint, sqs_client, unique, REGION};

/// Each function's timeout (its invocations' deadlines), as the field runs had it.
pub const FUNCTION_TIMEOUT: Duration = Duration::from_secs(30);
/// Messages acknowledged before the fault is injected.
pub const FAULT_AFTER_ACKS: usize = 10;
/// The fault is injected this long after the next invocation began: its records have reserved
/// and are waiting for the terminal ([`TERMINAL_LATENCY_MS`]), their commits still to come.
const INTO_THE_BATCH: Duration = Duration::from_millis(100);
/// The terminal's time to make a slot, **milliseconds**.
const TERMINAL_LATENCY_MS: u64 = 200;
/// Connections per consumer process (`DATABASE_POOL_SIZE`): several pooled connections meet the
/// fault, as in a busy environment.
const CONSUMER_POOL_SIZE: &str = "4";

/// A fault of the engine or of the network to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The writer demoted (read-only for the sessions still connected to it, which the proxy
    /// keeps there), the standby promoted once caught up, new connections sent to it.
    Failover,
    /// The primary's postmaster killed (`kill -9`), the standby promoted, new connections sent
    /// to it.
    KillPrimary,
    /// Every packet dropped for this long, every socket left open.
    BlackHole(Duration),
    /// Every connection reset for this long (open ones at once, new ones when accepted).
    Resets(Duration),
    /// Behind PgBouncer in transaction mode (two server connections for every client): the
    /// server restarted (`pg_ctl restart -m fast`), its backends terminated.
    ServerRestartBehindPgBouncer,
}

impl Fault {
    /// A short name (database objects, log lines).
    pub fn name(self) -> &'static str {
        match self {
            Self::Failover => "failover",
            Self::KillPrimary => "kill",
            Self::BlackHole(_) => "blackhole",
            Self::Resets(_) => "resets",
            Self::ServerRestartBehindPgBouncer => "pgbouncer",
        }
    }
}

/// Where the functions connect, and the servers behind.
enum Topology {
    Proxied {
        cluster: PgCluster,
        proxy: Arc<FaultProxy>,
    },
    Pooled {
        server: PgServer,
        bouncer: PgBouncer,
    },
}

impl Topology {
    /// The servers for `fault` (blocking: `initdb`, `pg_basebackup`).
    async fn start(fault: Fault) -> Self {
        if fault == Fault::ServerRestartBehindPgBouncer {
            let (server, bouncer) = tokio::task::block_in_place(|| {
                let server = PgServer::primary();
                let bouncer = PgBouncer::start(server.addr(), PoolMode::Transaction, 2);
                (server, bouncer)
            });
            return Self::Pooled { server, bouncer };
        }
        let cluster = tokio::task::block_in_place(PgCluster::start);
        let proxy = FaultProxy::start(cluster.primary.addr()).await;
        Self::Proxied { cluster, proxy }
    }

    /// The connection string the functions are given.
    fn functions_url(&self) -> String {
        match self {
            Self::Proxied { proxy, .. } => crate::pg_cluster::url_at(proxy.addr()),
            Self::Pooled { bouncer, .. } => bouncer.url(),
        }
    }

    /// The server that accepts writes now, given whether `fault` was injected.
    fn writer(&self, fault: Fault, injected: bool) -> &PgServer {
        match self {
            Self::Proxied { cluster, .. } => match fault {
                Fault::Failover | Fault::KillPrimary if injected => &cluster.standby,
                _ => &cluster.primary,
            },
            Self::Pooled { server, .. } => server,
        }
    }

    /// Injects `fault`; returns when it began and when it ended (epoch ms).
    async fn inject(&self, fault: Fault) -> (i64, i64) {
        let began = SystemClock.now_ms();
        match (self, fault) {
            (Self::Proxied { cluster, proxy }, Fault::Failover) => {
                tokio::task::block_in_place(|| {
                    cluster.primary.demote_for_sessions();
                    cluster.wait_caught_up();
                    cluster.standby.promote();
                });
                proxy.switch_target(cluster.standby.addr());
            }
            (Self::Proxied { cluster, proxy }, Fault::KillPrimary) => {
                tokio::task::block_in_place(|| {
                    cluster.primary.kill_postmaster();
                    cluster.standby.promote();
                });
                proxy.switch_target(cluster.standby.addr());
            }
            (Self::Proxied { proxy, .. }, Fault::BlackHole(d) | Fault::Resets(d)) => {
                let mode = match fault {
                    Fault::BlackHole(_) => Mode::BlackHole,
                    _ => Mode::Reset,
                };
                proxy.set_mode(mode);
                tokio::time::sleep(d).await;
                proxy.set_mode(Mode::PassThrough);
            }
            (Self::Pooled { server, .. }, Fault::ServerRestartBehindPgBouncer) => {
                tokio::task::block_in_place(|| server.restart());
            }
            _ => panic!("{fault:?} does not apply to this topology"),
        }
        (began, SystemClock.now_ms())
    }
}

/// What a case measured.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Notifications in all: those sent through the queue and the stranded one.
    pub notifications: usize,
    /// Notifications with exactly one slot at the terminal and its effect id in a business row.
    pub booked: usize,
    /// Slots beyond the first of a container.
    pub extra_slots: usize,
    /// Slots per container, for the containers with other than one.
    pub not_once: BTreeMap<String, usize>,
    /// Business rows.
    pub business_rows: usize,
    /// Effect ids of business rows the terminal never issued.
    pub unknown_effect_ids: usize,
    /// Records per status.
    pub statuses: BTreeMap<String, i64>,
    /// Rows of the view `in_flight` after the reconciler.
    pub in_flight: i64,
    /// Messages in the manual queue.
    pub manual_messages: i64,
    /// How the feed ended.
    pub feed: FeedReport,
    /// Consumer invocations and reconciler runs that ran into their deadline.
    pub timeouts: usize,
    /// Consumer processes started.
    pub consumer_cold_starts: usize,
    /// The last reconciler run's answer.
    pub reconciler: Option<serde_json::Value>,
    /// The first commit after the fault ended, seconds after it began and after it ended, by the
    /// server's commit timestamps (`track_commit_timestamp`): a figure printed, never asserted
    /// (these machines are noisy). The feed's bursts are 1.5 s apart
    /// (`sqs_feed::BURST_EVERY_MS`): a figure is at most that much above the time the store took
    /// to heal with work waiting.
    pub recovery_s: Option<(f64, f64)>,
    /// Behind the pooler: `statement_timeout` as new client sessions see it after the run.
    pub pooler_statement_timeouts: Vec<String>,
    /// Statements the store retried (its WARN line), in the consumer's log and the reconciler's.
    pub retried: (usize, usize),
    /// The consumer's log and the reconciler's.
    pub logs: (String, String),
    /// The case's wall time, seconds (servers started to outcome read).
    pub elapsed_s: f64,
}

impl Figures {
    /// One line for the table.
    pub fn line(&self, fault: Fault) -> String {
        let recovery = match self.recovery_s {
            Some((began, ended)) => {
                format!(
                    "first commit {began:.1} s after the fault began, {ended:.1} s after it ended"
                )
            }
            None => "no commit after the fault".to_string(),
        };
        format!(
            "pg_failover {:>9}: booked {} of {}, extra slots {}, dead-lettered {}, manual {}, \
             in_flight {}, invocation timeouts {}, {} invocations ({} records failed, {} \
             receives, at most {} of a message), {} cold start(s), statements retried {} + {}, \
             reconciled by the last run {}; {recovery}; case {:.0} s",
            fault.name(),
            self.booked,
            self.notifications,
            self.extra_slots,
            self.feed.dead_lettered,
            self.manual_messages,
            self.in_flight,
            self.timeouts,
            self.feed.invocations,
            self.feed.item_failures,
            self.feed.receives,
            self.feed.most_receives,
            self.consumer_cold_starts,
            self.retried.0,
            self.retried.1,
            self.reconciler
                .as_ref()
                .map_or_else(|| "?".to_string(), |r| r["reconciled"].to_string()),
            self.elapsed_s,
        )
    }
}

/// Runs the case of `fault` and returns what it measured, the figures' line printed to stderr:
///
/// 1. the schema is migrated and the reconciler run once (warm: its pooled connection is on the
///    first writer); a record is stranded as a consumer that reserved and died would leave it
///    (its lease long over, its notification never sent through the queue: only the
///    reconciler can finish it);
/// 2. the notifications are fed to the consumer (`sqs_feed`); after [`FAULT_AFTER_ACKS`]
///    acknowledged messages the fault is injected 100 ms into the next invocation (its records
///    reserved, their slots being made by a terminal that takes 200 ms, their commits to come),
///    while the feed goes on;
/// 3. once every message is deleted or dead-lettered and every lease left has run out, the
///    reconciler runs again, warm;
/// 4. the outcome is read from the writer's tables, the terminal's slots and the manual queue
///    ([`Figures`]).
///
/// # Panics
/// When a server, the pooler, moto or a function binary cannot be started (test wiring).
pub async fn run_case(fault: Fault) -> Figures {
    let started = std::time::Instant::now();
    let case = fault.name();
    let integration = format!("fault-{case}");
    let topology = Topology::start(fault).await;
    let sqs = sqs_client().await;
    let manual_url = fresh_queue(&sqs, &format!("pgf-{case}-manual")).await;
    let core = TerminalCore::new(
        TerminalConfig {
            latency_ms: TERMINAL_LATENCY_MS,
            ..TerminalConfig::default()
        },
        Arc::new(SystemClock) as Arc<dyn Clock>,
    );
    let (terminal_addr, terminal_server) = terminal::spawn(core.clone()).await.expect("terminal");
    let terminal_url = format!("http://{terminal_addr}");
    let bins = tokio::task::block_in_place(|| function_binaries(&["consumer", "reconciler"]));
    let log_dir = std::env::temp_dir().join(unique(&format!("pgf-{case}-logs")));
    let mut env: Vec<(String, String)> = [
        ("STORE", "postgres"),
        ("DATABASE_URL", topology.functions_url().as_str()),
        ("DATABASE_POOL_SIZE", CONSUMER_POOL_SIZE),
        ("INTEGRATION_NAME", integration.as_str()),
        ("MANUAL_QUEUE_URL", manual_url.as_str()),
        ("TERMINAL_BASE_URL", terminal_url.as_str()),
        ("AWS_ENDPOINT_URL", moto_endpoint().as_str()),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", REGION),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let spec = |name: &str, env: Vec<(String, String)>| FunctionSpec {
        binary: bins.join(name),
        name: name.to_string(),
        env,
        timeout: FUNCTION_TIMEOUT,
        log_dir: log_dir.clone(),
    };
    let reconciler = LambdaEnv::new(spec("reconciler", env.clone()));
    env.push(("DATABASE_RUN_MIGRATIONS".into(), "true".into()));
    let consumer = Arc::new(LambdaEnv::new(spec("consumer", env)));

    // 1. The schema, the reconciler warm, a stranded record.
    let first_writer = topology.writer(fault, false);
    let store = PostgresStore::with_config(&PostgresConfig::new(first_writer.url(), 1))
        .expect("a store on the writer");
    store.migrate().await.expect("migrations");
    let warm = reconciler
        .invoke(&serde_json::json!({"job": "reconcile"}))
        .await;
    assert!(
        matches!(warm, Outcome::Answer(_)),
        "the reconciler's first run: {warm:?}"
    );
    strand(&store, &integration, &terminal_url, case).await;
    drop(store);

    // 2. The feed, and the fault once some messages are acknowledged.
    let feed = Arc::new(Feed::new(case, SystemClock.now_ms()));
    let (progress, mut seen) = tokio::sync::watch::channel(Progress::default());
    let driver = tokio::spawn(sqs_feed::run(feed.clone(), consumer.clone(), progress));
    let before = *seen
        .wait_for(|p| p.acknowledged >= FAULT_AFTER_ACKS)
        .await
        .expect("the feed acknowledged messages before the fault");
    seen.wait_for(|p| p.invocations > before.invocations)
        .await
        .expect("the feed invoked the consumer again");
    tokio::time::sleep(INTO_THE_BATCH).await;
    let (began, ended) = topology.inject(fault).await;
    let report = driver.await.expect("the feed");

    // 3. The reconciler, warm, once the leases left have run out.
    let writer = topology.writer(fault, true);
    let db = connect(&writer.url()).await;
    let lease_end: i64 = db
        .query_one(
            "SELECT coalesce(max(lease_until_ms), 0)::bigint FROM gate.in_flight",
            &[],
        )
        .await
        .expect("leases")
        .get(0);
    let wait = lease_end
        .saturating_sub(SystemClock.now_ms())
        .clamp(0, 60_000);
    tokio::time::sleep(Duration::from_millis(
        u64::try_from(wait).unwrap_or(0) + 100,
    ))
    .await;
    let last_run = reconciler
        .invoke(&serde_json::json!({"job": "reconcile"}))
        .await;

    // 4. The outcome.
    let mut figures = outcome(&db, &core, &feed, case, (began, ended)).await;
    figures.feed = report;
    figures.reconciler = match last_run {
        Outcome::Answer(report) => Some(report),
        other => {
            eprintln!("pg_failover {case}: the reconciler's last run: {other:?}");
            None
        }
    };
    figures.manual_messages = manual_messages(&sqs, &manual_url).await;
    figures.timeouts = consumer.timeouts() + reconciler.timeouts();
    figures.consumer_cold_starts = consumer.cold_starts();
    if let Topology::Pooled { bouncer, .. } = &topology {
        figures.pooler_statement_timeouts = tokio::task::block_in_place(|| {
            (0..5)
                .map(|_| psql_at(bouncer.addr().port(), "SHOW statement_timeout"))
                .collect()
        });
    }
    drop(consumer);
    drop(reconciler);
    terminal_server.abort();
    let log =
        |f: &str| std::fs::read_to_string(log_dir.join(format!("{f}.log"))).unwrap_or_default();
    figures.logs = (log("consumer"), log("reconciler"));
    let retried = |log: &str| log.matches("PostgreSQL statement retried").count();
    figures.retried = (retried(&figures.logs.0), retried(&figures.logs.1));
    if std::env::var_os("GATE_KEEP_FAULT_LOGS").is_some() {
        eprintln!("pg_failover {case}: logs kept in {}", log_dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&log_dir);
    }
    figures.elapsed_s = started.elapsed().as_secs_f64();
    eprintln!("{}", figures.line(fault));
    figures
}

/// Reserves notification [`NOTIFICATIONS`] (not in the feed) as a consumer that died two
/// minutes ago would have left it: `in_flight`, its lease over, the claim never sent.
async fn strand(store: &PostgresStore, integration: &str, terminal_url: &str, case: &str) {
    let terminal = truck_slot::terminal::HttpTerminal::new(
        truck_slot::terminal::HttpTerminalConfig::new(terminal_url.to_string()),
    )
    .expect("terminal client");
    let gate = Gate {
        config: GateConfig::new(integration),
        store: Arc::new(store.clone()),
        integration: Arc::new(truck_slot::TruckSlot::new(
            Arc::new(terminal),
            vec!["ECT-DELTA".into()],
        )),
        manual: Arc::new(gate::manual::MemoryManualQueue::new()),
        clock: Arc::new(SystemClock),
    };
    let now = SystemClock.now_ms();
    let body = sqs_feed::notification(case, NOTIFICATIONS, now);
    let worker = Invocation::new("a-consumer-that-died", now - 100_000);
    gate_testkit::reserve_stranded(&gate, store, &body, &worker, now - 120_000).await;
}

/// A client of `url` (no TLS), its connection driven on the runtime.
async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to the writer: {e}"));
    tokio::spawn(connection);
    client
}

/// The figures read from the writer (`db`) and the terminal (`core`) for the notifications of
/// `feed` and the stranded one, the fault having begun and ended at `fault` (epoch ms).
async fn outcome(
    db: &tokio_postgres::Client,
    core: &TerminalCore,
    feed: &Feed,
    case: &str,
    fault: (i64, i64),
) -> Figures {
    let mut containers = feed.containers();
    containers.push(sqs_feed::container(NOTIFICATIONS));
    let mut slots: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for slot in core.slots() {
        slots
            .entry(slot.equipment_number)
            .or_default()
            .push(slot.effect_id);
    }
    let rows = db
        .query("SELECT effect_id FROM gate.business_rows", &[])
        .await
        .expect("business rows");
    let row_ids: BTreeSet<String> = rows.iter().map(|r| r.get(0)).collect();
    let statuses: BTreeMap<String, i64> = db
        .query(
            "SELECT status, count(*) FROM gate.idempotency GROUP BY status",
            &[],
        )
        .await
        .expect("statuses")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let booked = containers
        .iter()
        .filter(
            |c| matches!(slots.get(*c), Some(ids) if ids.len() == 1 && row_ids.contains(&ids[0])),
        )
        .count();
    let issued: BTreeSet<&String> = slots.values().flatten().collect();
    let in_flight: i64 = db
        .query_one("SELECT count(*) FROM gate.in_flight", &[])
        .await
        .expect("in_flight")
        .get(0);
    let first_commit = format!(
        "SELECT (extract(epoch FROM min(pg_xact_commit_timestamp(xmin))) * 1000)::bigint \
         FROM gate.business_rows \
         WHERE pg_xact_commit_timestamp(xmin) >= to_timestamp({} / 1000.0)",
        fault.1
    );
    let first: Option<i64> = db
        .query_one(first_commit.as_str(), &[])
        .await
        .unwrap_or_else(|e| panic!("{case}: commit timestamps: {e}"))
        .get(0);
    let seconds = |from: i64, to: i64| (to - from) as f64 / 1000.0;
    Figures {
        notifications: containers.len(),
        booked,
        extra_slots: slots.values().map(|ids| ids.len().saturating_sub(1)).sum(),
        not_once: containers
            .iter()
            .map(|c| (c.clone(), slots.get(c).map_or(0, Vec::len)))
            .filter(|(_, n)| *n != 1)
            .collect(),
        business_rows: rows.len(),
        unknown_effect_ids: row_ids.iter().filter(|id| !issued.contains(id)).count(),
        statuses,
        in_flight,
        recovery_s: first.map(|at| (seconds(fault.0, at), seconds(fault.1, at))),
        ..Figures::default()
    }
}

/// Messages waiting in the manual queue (moto's `ApproximateNumberOfMessages`, exact there).
async fn manual_messages(sqs: &aws_sdk_sqs::Client, url: &str) -> i64 {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .expect("the manual queue's attributes");
    attributes
        .attributes()
        .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages))
        .and_then(|n| n.parse().ok())
        .expect("ApproximateNumberOfMessages")
}

/// `sql` in a new `psql` session on `127.0.0.1:port` (database and user `gate`); its output.
fn psql_at(port: u16, sql: &str) -> String {
    let out = std::process::Command::new(pg_bin().join("psql"))
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-U", "gate", "-d", "gate", "-At", "-c", sql])
        .output()
        .expect("psql runs");
    assert!(
        out.status.success(),
        "psql: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
