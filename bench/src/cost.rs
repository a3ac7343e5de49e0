//! Dollars per million events: naive, gate, Powertools and the fair peer (Powertools with its
//! booking and the completion of its record in one transaction), each as a Lambda process
//! under the fake Runtime API ([`crate::coldstart`]) with the CPU share of its memory size, over
//! moto behind a 5 ms latency floor (`bench/moto_server.py --latency-ms`: a DynamoDB
//! call takes 5 ms, concurrent calls in parallel) and the terminal simulator.
//!
//! Per handler and memory size, one process: 3 unmeasured batches of 10 new events (connections
//! opened), then `batches` batches of 10 new events, then `batches` batches of 10 redeliveries of
//! those (new message ids, the same bodies: every one a duplicate of a committed event). Billed
//! duration per batch is the measured duration rounded up to the next millisecond (Lambda's
//! granularity); per event, a tenth of it. DynamoDB requests are counted at moto by operation.
//!
//! Write and read units follow AWS's rules (cited in `docs/BENCHMARKS.md`): a standard write of an
//! item up to 1 KB is 1 write request unit (WRU), a transactional write 2 per item; a conditional
//! write whose condition fails still consumes the write; a write that puts an item into a global
//! secondary index or takes it out costs one index write. Item sizes are measured from the
//! tables after the run (`item_bytes`, AWS's item size rules), so "1 KB" is checked, not assumed.
//! The gate's index writes are those of its sparse `InFlight` index: a new event's record enters
//! it at the reserve and leaves it at the commit (2 per new event, none for a duplicate).

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use serde::{Deserialize, Serialize};

use crate::coldstart::{self, sqs_body, Spec};
use crate::counter::{dynamo_client, CallRecorder};
use crate::handlers::{create_table, Env};
use crate::stats::median;
use crate::workload::{deliveries, Delivery};

/// The price list used, with where and when it was read.
#[derive(Debug, Clone, Serialize)]
pub struct Prices {
    /// Region of the prices.
    pub region: &'static str,
    /// When they were read.
    pub read_on: &'static str,
    /// Lambda arm64 duration, USD per GB-second (first pricing tier).
    pub lambda_arm64_gb_s: f64,
    /// Lambda requests, USD per million.
    pub lambda_requests_per_million: f64,
    /// DynamoDB on-demand, USD per million write request units (Standard table class).
    pub dynamodb_wru_per_million: f64,
    /// DynamoDB on-demand, USD per million read request units (Standard table class).
    pub dynamodb_rru_per_million: f64,
}

/// US East (N. Virginia) list prices, read 2026-11-30 from the AWS Lambda pricing page
/// (aws.amazon.com/lambda/pricing: Arm, first 7.5 billion GB-s a month) and the DynamoDB
/// on-demand pricing page (aws.amazon.com/dynamodb/pricing/on-demand).
pub const PRICES: Prices = Prices {
    region: "us-east-1",
    read_on: "2026-11-30",
    lambda_arm64_gb_s: 0.000_013_333_4,
    lambda_requests_per_million: 0.20,
    dynamodb_wru_per_million: 0.625,
    dynamodb_rru_per_million: 0.125,
};

/// One handler at one memory size.
#[derive(Debug, Clone, Serialize)]
pub struct CostRun {
    /// `naive`, `gate`, `powertools`, `fair-peer`.
    pub handler: String,
    /// Memory size whose CPU share the process had, MB.
    pub memory_mb: u32,
    /// Median duration of a batch of 10 new events, ms.
    pub new_batch_ms: f64,
    /// Shortest and longest such batch, ms (the spread around the median).
    pub new_batch_range_ms: (f64, f64),
    /// Median billed duration of such a batch (rounded up per invocation), ms.
    pub new_billed_ms: f64,
    /// Median CPU time of such a batch, ms.
    pub new_cpu_ms: f64,
    /// Median duration of a batch of 10 duplicates, ms.
    pub dup_batch_ms: f64,
    /// Shortest and longest such batch, ms.
    pub dup_batch_range_ms: (f64, f64),
    /// Median billed duration of such a batch, ms.
    pub dup_billed_ms: f64,
    /// Median CPU time of such a batch, ms.
    pub dup_cpu_ms: f64,
    /// DynamoDB requests per new event, by operation.
    pub calls_per_new: BTreeMap<String, f64>,
    /// DynamoDB requests per duplicate, by operation.
    pub calls_per_dup: BTreeMap<String, f64>,
    /// Peak RSS of the process, MB.
    pub peak_rss_mb: f64,
    /// Batch item failures over the run (should be 0).
    pub failures: usize,
}

/// DynamoDB's size of an item, bytes: per attribute, the UTF-8 length of its name plus its value
/// (a string its UTF-8 length, a number about one byte per two significant digits plus one, a
/// binary its length, a boolean or null one byte, a list or map 3 bytes plus its elements, each
/// element one byte more). (Amazon DynamoDB Developer Guide, "Item sizes and formats".)
pub fn item_bytes(item: &HashMap<String, AttributeValue>) -> usize {
    item.iter().map(|(k, v)| k.len() + value_bytes(v)).sum()
}

fn number_bytes(n: &str) -> usize {
    let digits = n.chars().filter(char::is_ascii_digit).count();
    digits.div_ceil(2) + 1
}

fn value_bytes(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => number_bytes(n),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(v) => v.iter().map(String::len).sum(),
        AttributeValue::Ns(v) => v.iter().map(|n| number_bytes(n)).sum(),
        AttributeValue::Bs(v) => v.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::L(l) => 3 + l.iter().map(|x| 1 + value_bytes(x)).sum::<usize>(),
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, x)| 1 + k.len() + value_bytes(x))
                .sum::<usize>()
        }
        _ => 0,
    }
}

/// The largest item of `table`, bytes (a scan of moto).
async fn largest_item(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<usize, String> {
    let mut largest = 0;
    let mut start: Option<HashMap<String, AttributeValue>> = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(|e| format!("scan {table}: {e:?}"))?;
        for item in page.items() {
            largest = largest.max(item_bytes(item));
        }
        match page.last_evaluated_key() {
            Some(k) if !k.is_empty() => start = Some(k.clone()),
            _ => break,
        }
    }
    Ok(largest)
}

fn per_event(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    events: usize,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(op, n)| {
            let d = n.saturating_sub(before.get(op).copied().unwrap_or(0));
            (op.clone(), d as f64 / events.max(1) as f64)
        })
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

/// One handler at one memory size (module docs).
///
/// # Errors
/// When the tables cannot be created or the function fails.
pub async fn measure(
    kind: &str,
    env: &Env,
    consumer: &std::path::Path,
    tag: &str,
    memory_mb: u32,
    batches: usize,
    window: &(String, String),
) -> Result<(CostRun, BTreeMap<String, usize>), String> {
    let client = dynamo_client(&env.moto, &CallRecorder::default()).await;
    let tables = (format!("{tag}-idem"), format!("{tag}-book"));
    let mut spec: Spec = match kind {
        "gate" => {
            gate_dynamo::create_tables(&client, &tables.0, &tables.1)
                .await
                .map_err(|e| e.to_string())?;
            coldstart::gate_spec(consumer, env, &tables)
        }
        "powertools" | "fair-peer" => {
            create_table(&client, &tables.0, "id").await?;
            create_table(&client, &tables.1, "source_event").await?;
            if kind == "powertools" {
                coldstart::powertools_spec(env, &tables)
            } else {
                coldstart::fair_peer_spec(env, &tables)
            }
        }
        _ => {
            create_table(&client, &tables.1, "source_event").await?;
            coldstart::naive_spec(env, &tables)?
        }
    };
    spec.memory_mb = Some(memory_mb);
    let warm = 3;
    let new = deliveries(tag, (warm + batches) * 10, 0.0, window, 11);
    let again: Vec<Delivery> = new[warm * 10..]
        .iter()
        .map(|d| Delivery {
            message_id: format!("{}-again", d.message_id),
            body: d.body.clone(),
            duplicate: true,
        })
        .collect();
    let mut events: Vec<(String, Vec<u8>)> = Vec::new();
    for (i, b) in new.chunks(10).enumerate() {
        events.push((format!("{tag}-n{i}"), sqs_body(b)));
    }
    for (i, b) in again.chunks(10).enumerate() {
        events.push((format!("{tag}-d{i}"), sqs_body(b)));
    }
    let s = coldstart::session_counted(&spec, events, Some(&env.moto)).await?;
    let inv = &s.invocations;
    let new_runs = &inv[warm..warm + batches];
    let dup_runs = &inv[warm + batches..];
    let med = |runs: &[coldstart::Invoked], f: fn(&coldstart::Invoked) -> f64| {
        median(&runs.iter().map(f).collect::<Vec<_>>())
    };
    let range = |runs: &[coldstart::Invoked]| {
        runs.iter()
            .map(|i| i.duration_ms)
            .fold((f64::INFINITY, 0.0_f64), |(lo, hi), d| {
                (lo.min(d), hi.max(d))
            })
    };
    let calls = &s.calls;
    let run = CostRun {
        handler: kind.to_string(),
        memory_mb,
        new_batch_ms: med(new_runs, |i| i.duration_ms),
        new_batch_range_ms: range(new_runs),
        new_billed_ms: med(new_runs, |i| i.duration_ms.ceil()),
        new_cpu_ms: med(new_runs, |i| i.cpu_ms),
        dup_batch_ms: med(dup_runs, |i| i.duration_ms),
        dup_batch_range_ms: range(dup_runs),
        dup_billed_ms: med(dup_runs, |i| i.duration_ms.ceil()),
        dup_cpu_ms: med(dup_runs, |i| i.cpu_ms),
        calls_per_new: per_event(&calls[warm], &calls[warm + batches], batches * 10),
        calls_per_dup: per_event(
            &calls[warm + batches],
            &calls[2 * batches + warm],
            batches * 10,
        ),
        peak_rss_mb: s.peak_rss_kb as f64 * 1024.0 / 1e6,
        failures: inv.iter().map(|i| i.batch_item_failures).sum(),
    };
    let mut sizes = BTreeMap::new();
    if kind != "naive" {
        sizes.insert(
            format!("{kind}: idempotency table"),
            largest_item(&client, &tables.0).await?,
        );
    }
    sizes.insert(
        format!("{kind}: bookings table"),
        largest_item(&client, &tables.1).await?,
    );
    Ok((run, sizes))
}

/// Write request units of one DynamoDB request of `op` writing items of at most `largest`
/// bytes: 1 per KB started, twice for each of a transaction's `items`.
fn wru(op: &str, largest: usize, transaction_items: f64) -> f64 {
    let per_item = largest.div_ceil(1024).max(1) as f64;
    match op {
        "PutItem" | "UpdateItem" | "DeleteItem" => per_item,
        "TransactWriteItems" => 2.0 * transaction_items * per_item,
        _ => 0.0,
    }
}

/// Read request units of a request of `op` (none of the three paths reads on its way:
/// duplicates come back with the failed conditional write's `ALL_OLD`).
fn rru(op: &str, largest: usize) -> f64 {
    let per_item = largest.div_ceil(4096).max(1) as f64;
    match op {
        "GetItem" | "Query" => per_item,
        _ => 0.0,
    }
}

/// Units per event of one path.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Units {
    /// Write request units (table and index writes).
    pub wru: f64,
    /// Read request units.
    pub rru: f64,
}

/// The units of `calls` per event for handler `kind` (module docs); `largest` the largest item
/// it writes, bytes; `new` whether the calls are a new event's (the gate's index writes).
pub fn units(kind: &str, calls: &BTreeMap<String, f64>, largest: usize, new: bool) -> Units {
    // The gate's commit transaction: the record and the booking (the natural-key item is the
    // guard's own `PutItem` before the claim, counted with the other `PutItem`s); the fair
    // peer's: the completion of its record and the booking.
    let transaction_items = 2.0;
    let mut w: f64 = calls
        .iter()
        .map(|(op, n)| n * wru(op, largest, transaction_items))
        .sum();
    if kind == "gate" && new {
        // The record enters the sparse InFlight index at the reserve and leaves it at the commit.
        w += 2.0;
    }
    let r = calls.iter().map(|(op, n)| n * rru(op, largest)).sum();
    Units { wru: w, rru: r }
}

/// A row of the dollars-per-million-events table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CostRow {
    /// Handler.
    pub handler: String,
    /// Memory, MB.
    pub memory_mb: u32,
    /// Billed ms per new event.
    pub billed_ms_new: f64,
    /// Billed ms per duplicate.
    pub billed_ms_dup: f64,
    /// Units per new event.
    pub units_new: Units,
    /// Units per duplicate.
    pub units_dup: Units,
    /// Lambda duration, USD per million events.
    pub lambda_duration_usd: f64,
    /// Lambda requests (batches of 10), USD per million events.
    pub lambda_requests_usd: f64,
    /// DynamoDB, USD per million events.
    pub dynamodb_usd: f64,
    /// Total, USD per million events.
    pub total_usd: f64,
}

/// The cost per million events at `duplicate_rate` for `run`.
pub fn row(run: &CostRun, largest: usize, duplicate_rate: f64) -> CostRow {
    let p = &PRICES;
    let (n, d) = (1.0 - duplicate_rate, duplicate_rate);
    let billed_new = run.new_billed_ms / 10.0;
    let billed_dup = run.dup_billed_ms / 10.0;
    let gb = f64::from(run.memory_mb) / 1024.0;
    let per_event_s = (n * billed_new + d * billed_dup) / 1000.0;
    let lambda_duration_usd = per_event_s * gb * p.lambda_arm64_gb_s * 1e6;
    let lambda_requests_usd = p.lambda_requests_per_million / 10.0;
    let units_new = units(&run.handler, &run.calls_per_new, largest, true);
    let units_dup = units(&run.handler, &run.calls_per_dup, largest, false);
    let wru = n * units_new.wru + d * units_dup.wru;
    let rru = n * units_new.rru + d * units_dup.rru;
    let dynamodb_usd = wru * p.dynamodb_wru_per_million + rru * p.dynamodb_rru_per_million;
    CostRow {
        handler: run.handler.clone(),
        memory_mb: run.memory_mb,
        billed_ms_new: billed_new,
        billed_ms_dup: billed_dup,
        units_new,
        units_dup,
        lambda_duration_usd,
        lambda_requests_usd,
        dynamodb_usd,
        total_usd: lambda_duration_usd + lambda_requests_usd + dynamodb_usd,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_sizes_follow_the_documented_rules() {
        let mut item = HashMap::new();
        item.insert("pk".to_string(), AttributeValue::S("abc".into()));
        item.insert("n".to_string(), AttributeValue::N("12345".into()));
        item.insert("ok".to_string(), AttributeValue::Bool(true));
        // "pk"+3, "n"+(3+1), "ok"+1
        assert_eq!(item_bytes(&item), 2 + 3 + 1 + 4 + 2 + 1);
    }

    #[test]
    fn units_count_transactions_twice_and_the_gate_index_writes() {
        let mut calls = BTreeMap::new();
        calls.insert("PutItem".to_string(), 1.0);
        calls.insert("TransactWriteItems".to_string(), 1.0);
        let u = units("gate", &calls, 600, true);
        // reserve 1 + commit 2 x 2 items + 2 index writes, without the guard
        assert_eq!(u.wru, 7.0);
        // with the guard's `PutItem`: 8
        calls.insert("PutItem".to_string(), 2.0);
        assert_eq!(units("gate", &calls, 600, true).wru, 8.0);
        assert_eq!(u.rru, 0.0);
        let mut dup = BTreeMap::new();
        dup.insert("PutItem".to_string(), 1.0);
        assert_eq!(units("gate", &dup, 600, false).wru, 1.0);
        // an item over 1 KB costs a unit per KB started
        assert_eq!(units("powertools", &dup, 1500, true).wru, 2.0);
        // the fair peer: its in-progress `PutItem` and one transaction of 2 items, no index
        let mut fair = BTreeMap::new();
        fair.insert("PutItem".to_string(), 1.0);
        fair.insert("TransactWriteItems".to_string(), 1.0);
        assert_eq!(units("fair-peer", &fair, 400, true).wru, 5.0);
    }
}
