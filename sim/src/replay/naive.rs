//! The incident's original handler, for comparison: for each record, claim a slot (no
//! `Idempotency-Key`), write the booking to the TMS, delete the message. No key, no reserve, no
//! transaction: every delivery is a new slot.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use aws_lambda_events::event::sqs::SqsEvent;
use serde_json::Value;

use super::invocation::InvocationOutcome;
use crate::scenario::CrashStep;

/// The naive handler and its TMS (a list of bookings, one per completed claim).
#[derive(Clone)]
pub struct NaiveHandler {
    client: reqwest::Client,
    base_url: String,
    terminals: Vec<String>,
    tms: Arc<Mutex<Vec<(String, String)>>>,
}

impl NaiveHandler {
    /// A naive handler claiming at `base_url` for `terminals`.
    pub fn new(base_url: &str, terminals: Vec<String>) -> Self {
        Self {
            client: reqwest::Client::new(),
            base_url: base_url.trim_end_matches('/').to_string(),
            terminals,
            tms: Arc::default(),
        }
    }

    /// TMS bookings written so far (one per completed claim, duplicates included).
    pub fn bookings(&self) -> usize {
        self.tms.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    async fn claim(&self, body: &Value) -> Option<String> {
        let request = serde_json::json!({
            "equipment_number": body.get("equipment_number")?.as_str()?,
            "window_start": body.pointer("/preferred_window/start")?.as_str()?,
            "window_end": body.pointer("/preferred_window/end")?.as_str()?,
            "pin": body.get("pin")?.as_str()?,
        });
        let response = self
            .client
            .post(format!("{}/slots", self.base_url))
            .header("Content-Type", "application/json")
            .body(request.to_string())
            .send()
            .await
            .ok()?;
        if response.status().as_u16() != 201 {
            return None;
        }
        let bytes = response.bytes().await.ok()?;
        let answer: Value = serde_json::from_slice(&bytes).ok()?;
        answer.get("slot_id")?.as_str().map(str::to_string)
    }

    /// Handles a batch record by record; `crash` kills the worker at that step for that
    /// container. Messages it deleted stay deleted even when it dies.
    pub async fn handle(
        &self,
        event: SqsEvent,
        crash: Option<(String, CrashStep)>,
    ) -> InvocationOutcome {
        let mut deleted = HashSet::new();
        for record in event.records {
            let id = record.message_id.unwrap_or_default();
            let Ok(body) = serde_json::from_str::<Value>(&record.body.unwrap_or_default()) else {
                continue; // throws; the message comes back until the DLQ takes it
            };
            let container = body
                .get("equipment_number")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let known = body
                .get("terminal")
                .and_then(Value::as_str)
                .is_some_and(|t| self.terminals.iter().any(|k| k == t));
            if !known {
                continue;
            }
            if let Some((c, step)) = &crash {
                if *c == container {
                    let claimed = match step {
                        CrashStep::AfterClaim | CrashStep::AfterCommit => self.claim(&body).await,
                        CrashStep::AfterReceive | CrashStep::AfterReserve => None,
                    };
                    if let (CrashStep::AfterCommit, Some(slot)) = (step, claimed) {
                        self.tms
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((container, slot));
                    }
                    return InvocationOutcome::Partial { deleted };
                }
            }
            if let Some(slot) = self.claim(&body).await {
                self.tms
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((container, slot));
                deleted.insert(id);
            }
        }
        InvocationOutcome::Finished {
            acked: deleted,
            report: Vec::new(),
        }
    }
}
