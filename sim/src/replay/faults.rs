//! The faults a replay injects into a worker: a crash at a step or a stall after the claim, on
//! the notification's first delivery (through a terminal wrapper), and the key fault that puts the
//! SQS message id into the key.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::Notify;
use truck_slot::notification::parse_notification;
use truck_slot::terminal::{CallOutcome, LookupOutcome, SlotTerminal};

use super::delivery::Received;
use crate::scenario::{CrashStep, Scenario};

/// A fault injected into the worker that handles a notification's first delivery.
#[derive(Debug, Clone)]
pub enum WorkerFault {
    /// The worker dies at this step while claiming for this container.
    Crash {
        /// The container (canonical ISO 6346).
        container: String,
        /// Where it dies.
        step: CrashStep,
    },
    /// The worker pauses right after the claim for this container, for this many simulated
    /// milliseconds, then carries on (a long GC pause, a stalled network).
    Stall {
        /// The container (canonical ISO 6346).
        container: String,
        /// How long, simulated milliseconds.
        stall_ms: i64,
    },
}

/// Terminal wrapper that applies a [`WorkerFault`] to one container's claim.
pub(super) struct FaultyTerminal {
    pub(super) inner: Arc<dyn SlotTerminal>,
    pub(super) fault: WorkerFault,
    /// Signalled when the worker died (crash) or paused (stall).
    pub(super) tripped: Arc<Notify>,
    /// Signalled by the replay when a paused worker may go on.
    pub(super) resume: Arc<Notify>,
}

pub(super) fn request_container(request: &[u8]) -> Option<String> {
    serde_json::from_slice::<serde_json::Value>(request)
        .ok()?
        .get("equipment_number")?
        .as_str()
        .map(str::to_string)
}

#[async_trait]
impl SlotTerminal for FaultyTerminal {
    async fn claim(&self, op_key: &str, request: &[u8]) -> CallOutcome {
        self.claim_at("", op_key, request).await
    }

    async fn lookup(&self, op_key: &str, request: &[u8]) -> LookupOutcome {
        self.inner.lookup(op_key, request).await
    }

    async fn lookup_at(&self, terminal: &str, op_key: &str, request: &[u8]) -> LookupOutcome {
        self.inner.lookup_at(terminal, op_key, request).await
    }

    async fn claim_at(&self, terminal: &str, op_key: &str, request: &[u8]) -> CallOutcome {
        let container = request_container(request);
        match &self.fault {
            WorkerFault::Crash { container: c, step }
                if container.as_deref() == Some(c)
                    && matches!(step, CrashStep::AfterReserve | CrashStep::AfterClaim) =>
            {
                if *step == CrashStep::AfterClaim {
                    let _ = self.inner.claim_at(terminal, op_key, request).await;
                }
                self.tripped.notify_one();
                // The process is gone: this future never completes and is dropped.
                std::future::pending::<()>().await;
                CallOutcome::Transient("unreachable".into())
            }
            WorkerFault::Stall { container: c, .. } if container.as_deref() == Some(c) => {
                let outcome = self.inner.claim_at(terminal, op_key, request).await;
                self.tripped.notify_one();
                self.resume.notified().await;
                outcome
            }
            _ => self.inner.claim_at(terminal, op_key, request).await,
        }
    }
}

/// The fault a batch triggers: a notification's first delivery carrying a crash or a stall.
pub(super) fn fault_in_batch(
    scenario: &Scenario,
    received: &[Received],
    done: &HashSet<usize>,
    now_ms: i64,
) -> Option<(usize, WorkerFault)> {
    received.iter().find_map(|r| {
        if done.contains(&r.notification) {
            return None;
        }
        let n = &scenario.notifications[r.notification];
        let container = || {
            parse_notification(&n.body_string(), now_ms, &scenario.terminals)
                .map(|p| p.equipment_number.to_string())
                .unwrap_or_default()
        };
        if let Some(step) = n.crash {
            return Some((
                r.notification,
                WorkerFault::Crash {
                    container: container(),
                    step,
                },
            ));
        }
        n.stall_after_claim_s.map(|s| {
            (
                r.notification,
                WorkerFault::Stall {
                    container: container(),
                    stall_ms: s * 1000,
                },
            )
        })
    })
}

/// Rewrites each record's `notificationId` to `"{id}#{messageId}"`: a key derivation that wrongly
/// includes the SQS message id (unique per delivery), so that no duplicate is ever recognised.
pub(super) fn include_message_id_in_key(event: &mut serde_json::Value) -> Vec<String> {
    let mut bodies = Vec::new();
    let Some(records) = event.get_mut("Records").and_then(|r| r.as_array_mut()) else {
        return bodies;
    };
    for record in records {
        let message_id = record["messageId"].as_str().unwrap_or_default().to_string();
        let Some(body) = record["body"].as_str() else {
            continue;
        };
        let Ok(mut parsed) = serde_json::from_str::<serde_json::Value>(body) else {
            continue;
        };
        if let Some(id) = parsed.get("notificationId").and_then(|v| v.as_str()) {
            parsed["notificationId"] = serde_json::Value::String(format!("{id}#{message_id}"));
            let faulty = parsed.to_string();
            record["body"] = serde_json::Value::String(faulty.clone());
            bodies.push(faulty);
        }
    }
    bodies
}
