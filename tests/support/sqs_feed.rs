//! Notifications fed to a warm consumer the way SQS and Lambda's event source mapping do it, in
//! real time (the fault cases, `pg_failover`): the simulator's SQS Standard queue
//! (`sim::sqs::Queue`) on the wall clock, batches of up to [`BATCH`] records handed to one
//! emulated Lambda environment ([`LambdaEnv`], one invocation at a time), a record listed in
//! `batchItemFailures` visible again [`VISIBILITY_MS`] after its receive, every other record of
//! an answered batch deleted, nothing of a batch whose invocation failed or timed out deleted,
//! and a message received [`MAX_RECEIVES`] times dead-lettered at its next receive (the redrive
//! policy's `maxReceiveCount`).
//!
//! The notifications: [`NOTIFICATIONS`] truck-slot notifications, one container each (ISO 6346
//! numbers made here), sent in bursts of [`BATCH`] every [`BURST_EVERY_MS`] (so a batch's records
//! run at once, each on its own pooled connection) for 16.5 s; 3 % more copies: one SQS
//! duplicate (the same message id, sent twice) and one re-send by the publisher (the same body
//! under a new message id). Their windows start a day from now, whatever today is.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use gate::clock::{Clock, SystemClock};
use serde_json::{json, Value};
use sim::sqs::{lambda_record, MsgState, Queue, ReceiveEnd, ReceiveOrder};
use tokio::sync::watch;

use crate::lambda_env::{LambdaEnv, Outcome};

/// Notifications sent through the queue, each its own container.
pub const NOTIFICATIONS: usize = 60;
/// Records per invocation at most (the event source mapping's batch size).
pub const BATCH: usize = 5;
/// The queue's visibility timeout, **milliseconds**: short, so a failed record comes back soon.
pub const VISIBILITY_MS: i64 = 10_000;
/// The redrive policy's `maxReceiveCount`.
pub const MAX_RECEIVES: u32 = 5;
/// A burst of [`BATCH`] notifications sent every this many **milliseconds**.
pub const BURST_EVERY_MS: i64 = 1_500;
/// The longest a feed may run before the test gives up, **seconds**: far beyond what a healed
/// store needs (five receives of every message), so only a store that never heals reaches it.
const FEED_CAP_S: u64 = 300;

/// The container of notification `n`: owner `GTF`, category `U`, serial `n`, its ISO 6346 check
/// digit.
pub fn container(n: usize) -> String {
    let first_ten = format!("GTFU{:06}", n % 1_000_000);
    let digit = truck_slot::iso6346::check_digit(&first_ten).expect("an ISO 6346 prefix");
    format!("{first_ten}{digit}")
}

/// Notification `n`'s body: its own id, container and PIN, a window from 24 to 26 hours after
/// `now_ms` (epoch ms) at `ECT-DELTA`.
pub fn notification(case: &str, n: usize, now_ms: i64) -> String {
    let at = |hours: i64| {
        chrono::DateTime::from_timestamp_millis(now_ms + hours * 3_600_000)
            .expect("a time")
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    json!({
        "notificationId": format!("PCS-FAULT-{case}-{n:06}"),
        "equipment_number": container(n),
        "preferred_window": {"start": at(24), "end": at(26)},
        "terminal": "ECT-DELTA",
        "pin": format!("RLS-{n:06}")
    })
    .to_string()
}

/// One send: when (ms after the feed starts), the message id, and which body.
#[derive(Debug, Clone)]
struct Send {
    after_ms: i64,
    id: String,
    body: usize,
}

/// The messages of a feed: [`NOTIFICATIONS`] bodies and their sends (the duplicates included).
#[derive(Debug, Clone)]
pub struct Feed {
    /// The bodies, notification `n` at index `n`.
    pub bodies: Vec<String>,
    sends: Vec<Send>,
}

impl Feed {
    /// The feed of case `case` at `now_ms` (the module docs): notification `n` sent at `n /`
    /// [`BATCH`] `×` [`BURST_EVERY_MS`] as message `m-{n}`; notification 10's message sent a
    /// second time 50 ms later (an SQS duplicate) and notification 20 re-sent as `m-20-again` a
    /// second after its first send.
    pub fn new(case: &str, now_ms: i64) -> Self {
        let bodies: Vec<String> = (0..NOTIFICATIONS)
            .map(|n| notification(case, n, now_ms))
            .collect();
        let at = |n: usize| i64::try_from(n / BATCH).unwrap_or(0) * BURST_EVERY_MS;
        let mut sends: Vec<Send> = (0..NOTIFICATIONS)
            .map(|n| Send {
                after_ms: at(n),
                id: format!("m-{n}"),
                body: n,
            })
            .collect();
        sends.push(Send {
            after_ms: at(10) + 50,
            id: "m-10".into(),
            body: 10,
        });
        sends.push(Send {
            after_ms: at(20) + 1_000,
            id: "m-20-again".into(),
            body: 20,
        });
        sends.sort_by_key(|s| s.after_ms);
        Self { bodies, sends }
    }

    /// Messages sent in all (copies included).
    pub fn messages(&self) -> usize {
        self.sends.len()
    }

    /// The containers of the bodies, in order.
    pub fn containers(&self) -> Vec<String> {
        (0..self.bodies.len()).map(container).collect()
    }
}

/// How a feed ended.
#[derive(Debug, Clone, Default)]
pub struct FeedReport {
    /// Copies deleted after an answer that did not list them.
    pub deleted: usize,
    /// Copies moved to the dead-letter queue.
    pub dead_lettered: usize,
    /// Records handed to the consumer (receives).
    pub receives: u64,
    /// Invocations made.
    pub invocations: usize,
    /// Invocations that failed as a whole (an error answer, a timeout, the process gone).
    pub failed_invocations: usize,
    /// Records listed in `batchItemFailures`.
    pub item_failures: usize,
    /// The most receives of one message (at [`MAX_RECEIVES`] a failed one is dead-lettered).
    pub most_receives: u32,
    /// Whether the feed was cut at its cap with messages still on the queue.
    pub cut: bool,
}

/// How far a feed is: copies deleted so far, invocations started so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Copies deleted (acknowledged) so far.
    pub acknowledged: usize,
    /// Invocations started so far.
    pub invocations: usize,
}

/// Feeds `feed` to `consumer` until every message is deleted or dead-lettered (at most
/// [`FEED_CAP_S`]), publishing its [`Progress`] on `progress` as it goes.
pub async fn run(
    feed: Arc<Feed>,
    consumer: Arc<LambdaEnv>,
    progress: watch::Sender<Progress>,
) -> FeedReport {
    let start = SystemClock.now_ms();
    let cap = tokio::time::Instant::now() + Duration::from_secs(FEED_CAP_S);
    let mut queue: Queue<usize> = Queue::new(VISIBILITY_MS, MAX_RECEIVES);
    let mut pending = feed.sends.iter().peekable();
    let mut report = FeedReport::default();
    loop {
        let now = SystemClock.now_ms();
        while let Some(send) = pending.next_if(|s| start + s.after_ms <= now) {
            queue.send(send.id.clone(), send.body, now);
        }
        let received = queue.receive(now, BATCH, ReceiveOrder::Oldest);
        if received.is_empty() {
            if pending.peek().is_none() && !queue.any_live() {
                break;
            }
            if tokio::time::Instant::now() >= cap {
                report.cut = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let records: Vec<Value> = received
            .iter()
            .map(|&(i, receipt)| {
                let m = &queue.msgs[i];
                lambda_record(m, &feed.bodies[m.body], &format!("rh-{i}-{receipt}"), now)
            })
            .collect();
        report.invocations += 1;
        progress.send_modify(|p| p.invocations = report.invocations);
        let outcome = consumer.invoke(&json!({ "Records": records })).await;
        let failed: Option<HashSet<String>> = match &outcome {
            Outcome::Answer(answer) => Some(
                answer["batchItemFailures"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|f| f["itemIdentifier"].as_str().map(str::to_string))
                    .collect(),
            ),
            Outcome::Error(_) | Outcome::TimedOut | Outcome::Exited(_) => None,
        };
        for &(i, receipt) in &received {
            match &failed {
                None => {
                    queue.end_receive(i, receipt, ReceiveEnd::Killed);
                }
                Some(failed) if failed.contains(&queue.msgs[i].id) => {
                    report.item_failures += 1;
                    queue.end_receive(i, receipt, ReceiveEnd::Failed { faulted: true });
                }
                Some(_) => {
                    queue.end_receive(i, receipt, ReceiveEnd::Acknowledged);
                    if queue.delete(i, receipt) {
                        report.deleted += 1;
                    }
                }
            }
        }
        if failed.is_none() {
            report.failed_invocations += 1;
        }
        progress.send_modify(|p| p.acknowledged = report.deleted);
    }
    report.dead_lettered = queue
        .msgs
        .iter()
        .filter(|m| m.state == MsgState::Dead)
        .count();
    report.receives = queue.deliveries();
    report.most_receives = queue.msgs.iter().map(|m| m.receives).max().unwrap_or(0);
    report
}
