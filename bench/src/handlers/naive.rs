//! The naive handler of the incident (claim, booking `PutItem`, no key) and its phase.

use std::time::Instant;

use aws_lambda_events::event::sqs::SqsEvent;
use gate::clock::{Clock, SystemClock};
use serde_json::Value;

use super::common::{create_table, sqs_event, Env, Phase};
use crate::counter::{dynamo_client, CallRecorder};
use crate::stats;
use crate::workload::Delivery;

/// The naive handler: for each record, claim a slot (no `Idempotency-Key`) and `PutItem` the
/// booking keyed by the SQS message id. No key, no reserve, no transaction.
pub struct Naive {
    http: reqwest::Client,
    slots_url: String,
    client: aws_sdk_dynamodb::Client,
    table: String,
}

impl Naive {
    /// The naive handler booking into `table` over `client`, claiming at `terminal`.
    pub fn new(client: aws_sdk_dynamodb::Client, table: String, terminal: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            slots_url: format!("{terminal}/slots"),
            client,
            table,
        }
    }

    /// Handles a batch record by record; returns how many records succeeded.
    pub async fn handle(&self, event: SqsEvent) -> usize {
        let mut ok = 0;
        for record in event.records {
            if self.record(record).await.is_ok() {
                ok += 1;
            }
        }
        ok
    }

    async fn record(
        &self,
        record: aws_lambda_events::event::sqs::SqsMessage,
    ) -> Result<(), String> {
        let body: Value = serde_json::from_str(record.body.as_deref().unwrap_or(""))
            .map_err(|e| e.to_string())?;
        let field = |p: &str| body.pointer(p).and_then(Value::as_str).unwrap_or("");
        let request = serde_json::json!({
            "equipment_number": field("/equipment_number"),
            "window_start": field("/preferred_window/start"),
            "window_end": field("/preferred_window/end"),
            "pin": field("/pin"),
        });
        let response = self
            .http
            .post(&self.slots_url)
            .header("Content-Type", "application/json")
            .body(request.to_string())
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let bytes = response.bytes().await.map_err(|e| e.to_string())?;
        let answer: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        let slot = answer
            .get("slot_id")
            .and_then(Value::as_str)
            .ok_or("no slot_id")?;
        let s = |v: &str| aws_sdk_dynamodb::types::AttributeValue::S(v.to_string());
        self.client
            .put_item()
            .table_name(&self.table)
            .item(
                "source_event",
                s(record.message_id.as_deref().unwrap_or("")),
            )
            .item("container", s(field("/equipment_number")))
            .item("slot_id", s(slot))
            .item("terminal", s(field("/terminal")))
            .item("window_start", s(field("/preferred_window/start")))
            .item("window_end", s(field("/preferred_window/end")))
            .item(
                "booked_at",
                aws_sdk_dynamodb::types::AttributeValue::N(SystemClock.now_ms().to_string()),
            )
            .send()
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}

pub(super) async fn run_naive(
    env: &Env,
    tag: &str,
    warmup: &[Delivery],
    deliveries: &[Delivery],
) -> Result<Phase, String> {
    let counter = CallRecorder::default();
    let client = dynamo_client(&env.moto, &counter).await;
    let table = format!("{tag}-naive-book");
    create_table(&client, &table, "source_event").await?;
    let naive = Naive {
        http: reqwest::Client::new(),
        slots_url: format!("{}/slots", env.terminal),
        client,
        table,
    };
    for d in warmup {
        naive.handle(sqs_event(&[d])).await;
    }
    let events: Vec<SqsEvent> = deliveries.iter().map(|d| sqs_event(&[d])).collect();
    counter.clear();
    let mut phase = Phase {
        events: deliveries.len(),
        ..Phase::default()
    };
    let (cpu0, wall0) = (stats::cpu_time(), Instant::now());
    for event in events {
        let t = Instant::now();
        let ok = naive.handle(event).await;
        phase.latencies_us.push(t.elapsed().as_micros() as u64);
        *phase
            .outcomes
            .entry(if ok == 1 { "committed" } else { "failed" }.into())
            .or_default() += 1;
    }
    phase.wall_s = wall0.elapsed().as_secs_f64();
    phase.cpu_s = (stats::cpu_time() - cpu0).as_secs_f64();
    phase.calls = counter.counts();
    Ok(phase)
}
