//! The gate's terminal and manual-queue ports as the simulation provides them: the terminal core
//! in process ([`CoreTerminal`]), and per-task decorators of the terminal and the manual queue
//! that park at every call (so the scheduler interleaves them) and inject the seed's faults (the
//! store's decorator is `store`). A [`SkewedClock`] gives each simulated host its own idea of now.

use std::sync::Arc;

use async_trait::async_trait;
use gate::idempotency_key::header_value;
use gate::manual::{ManualItem, ManualQueue, ManualQueueError};
pub(crate) use gate_testkit::SkewedClock;
use truck_slot::terminal::{
    classify_claim, classify_lookup, AnswerDetail, CallOutcome, LookupOutcome, SlotTerminal,
};

use super::check::{identity_of_item, pk_of_item};
use super::shared::{short, Deferred, OpenSend, Shared, TaskId};
use crate::terminal::TerminalCore;

/// The terminal simulator's core as a [`SlotTerminal`], in process: `POST /slots` with the
/// `Idempotency-Key` header classified by [`classify_claim`], and `GET
/// /slots?idempotency_key=K` (`200 {"slot": {...}}` or `404`). No HTTP, no real time.
#[derive(Clone)]
pub struct CoreTerminal {
    core: Arc<TerminalCore>,
}

impl CoreTerminal {
    /// Wraps a terminal core (configure it with latency 0 and no random faults for determinism).
    pub fn new(core: Arc<TerminalCore>) -> Self {
        Self { core }
    }
}

#[async_trait]
impl SlotTerminal for CoreTerminal {
    async fn claim(&self, op_key: &str, request: &[u8]) -> CallOutcome {
        let header = match header_value(op_key) {
            Ok(header) => header,
            Err(why) => {
                return CallOutcome::Permanent {
                    status: 0,
                    detail: AnswerDetail::new(format!("nothing sent: {why}")),
                }
            }
        };
        let r = self
            .core
            .handle("POST", "/slots", None, Some(&header), request)
            .await;
        classify_claim(r.status, &r.body)
    }

    async fn lookup(&self, op_key: &str, _request: &[u8]) -> LookupOutcome {
        let query = format!("idempotency_key={op_key}");
        let r = self
            .core
            .handle("GET", "/slots", Some(&query), None, b"")
            .await;
        classify_lookup(r.status, &r.body)
    }
}

/// What the terminal does with one claim, drawn from the seed.
enum TerminalFault {
    None,
    Unavailable,
    InFlight,
    RunsLater,
    /// A stored rejection: `true` for 409 `idempotency_mismatch`, `false` for 400.
    Rejected(bool),
    Lost,
}

/// The terminal as one task sees it: parks while the request travels and while the answer
/// travels back (a crash on `claim:ack` is "after the claim": the slot exists, the worker is
/// gone) and injects 5xx, 409 in flight, timeouts after which the terminal still runs the request
/// (latency beyond the lease), stored 4xx rejections and responses lost after the slot was made.
pub(crate) struct SimTerminal {
    pub shared: Arc<Shared>,
    pub task: TaskId,
    pub inner: CoreTerminal,
}

#[async_trait]
impl SlotTerminal for SimTerminal {
    async fn claim(&self, op_key: &str, request: &[u8]) -> CallOutcome {
        let latency = self.shared.state().between(30, 1_500);
        self.shared.park(self.task, "claim", latency).await;
        let has_slot = matches!(
            self.inner.lookup(op_key, request).await,
            LookupOutcome::Found(_)
        );
        let fault = {
            let mut st = self.shared.state();
            let p = st.profile.clone();
            let pending = st.deferred.iter().any(|d| d.op_key == op_key);
            if let Some(mismatch) = st.rejected_keys.get(op_key).filter(|_| !has_slot) {
                TerminalFault::Rejected(*mismatch)
            } else if st.fault(p.terminal_5xx, "terminal_5xx") {
                TerminalFault::Unavailable
            } else if st.fault(p.terminal_in_flight, "terminal_409_in_flight") {
                TerminalFault::InFlight
            } else if st.fault(p.terminal_timeout, "terminal_timeout_runs_later") {
                let at_ms = self.shared.now() + st.between(20_000, 300_000);
                st.deferred.push(Deferred {
                    at_ms,
                    op_key: op_key.to_string(),
                    request: request.to_vec(),
                });
                TerminalFault::RunsLater
            } else if !has_slot && !pending && st.fault(p.terminal_4xx, "terminal_4xx_stored") {
                // A 400, or a 409 `idempotency_mismatch`, stored under the key and replayed.
                let mismatch = st.between(0, 1) == 1;
                st.rejected_keys.insert(op_key.to_string(), mismatch);
                TerminalFault::Rejected(mismatch)
            } else if st.fault(p.terminal_lost, "terminal_response_lost") {
                TerminalFault::Lost
            } else {
                TerminalFault::None
            }
        };
        let outcome = match fault {
            TerminalFault::Unavailable => classify_claim(
                503,
                br#"{"type":"service_unavailable","title":"Service Unavailable","status":503}"#,
            ),
            TerminalFault::InFlight => classify_claim(
                409,
                br#"{"type":"idempotency_key_in_flight","title":"Conflict","status":409}"#,
            ),
            TerminalFault::RunsLater => {
                CallOutcome::Transient("claim request timed out (simulated)".into())
            }
            TerminalFault::Rejected(false) => classify_claim(
                400,
                br#"{"type":"invalid_request","title":"Bad Request","status":400,"detail":"release PIN refused (simulated)"}"#,
            ),
            TerminalFault::Rejected(true) => classify_claim(
                409,
                br#"{"type":"idempotency_mismatch","title":"Conflict","status":409,"detail":"key reused with another body (simulated)"}"#,
            ),
            TerminalFault::Lost => match self.inner.claim(op_key, request).await {
                CallOutcome::Done(_) => classify_claim(
                    504,
                    br#"{"type":"upstream_response_lost","title":"Gateway Timeout","status":504}"#,
                ),
                other => other,
            },
            TerminalFault::None => self.inner.claim(op_key, request).await,
        };
        self.shared
            .trace(|| format!("T{} claim {} -> {outcome:?}", self.task, short(op_key)));
        let latency = self.shared.state().between(1, 30);
        self.shared.park(self.task, "claim:ack", latency).await;
        outcome
    }

    async fn lookup(&self, op_key: &str, request: &[u8]) -> LookupOutcome {
        let latency = self.shared.state().between(20, 400);
        self.shared.park(self.task, "lookup", latency).await;
        let fail = {
            let mut st = self.shared.state();
            // Lookups are rare (a record resumed past its claim horizon or its event's end, and
            // the reconciler takes a record as soon as its lease ends): a lookup fails five times
            // as often as the profile's rate (no extra draw, so the schedule and its digest in
            // `regressions_dst.rs` do not change), so that every 500 seeds meet some.
            let p = (st.profile.lookup_error * 5.0).min(1.0);
            st.fault(p, "terminal_lookup_5xx")
        };
        let outcome = if fail {
            LookupOutcome::Transient("lookup answered 503 (simulated)".into())
        } else {
            self.inner.lookup(op_key, request).await
        };
        self.shared
            .trace(|| format!("T{} lookup {} -> {outcome:?}", self.task, short(op_key)));
        outcome
    }
}

/// The manual queue as one task sees it: parks before and after the send, refuses sends, or
/// takes a send and then reports an error. Every send that lands is booked as open until the
/// task's `finish` marks its record (see [`Shared`]), so the checker knows which extra items a
/// fault made legitimate.
pub(crate) struct SimManual {
    pub shared: Arc<Shared>,
    pub task: TaskId,
}

#[async_trait]
impl ManualQueue for SimManual {
    async fn send(&self, item: ManualItem) -> Result<(), ManualQueueError> {
        let latency = self.shared.state().between(5, 40);
        self.shared.park(self.task, "manual.send", latency).await;
        let (refused, ambiguous) = {
            let mut st = self.shared.state();
            let p = st.profile.clone();
            let refused = st.fault(p.manual_error, "manual_send_refused");
            let ambiguous = !refused && st.fault(p.manual_ambiguous, "manual_sent_then_error");
            (refused, ambiguous)
        };
        if refused {
            return Err(ManualQueueError(
                "simulated: manual queue unavailable".into(),
            ));
        }
        let identity = identity_of_item(&item, &self.shared.terminals);
        let pk = pk_of_item(&item, &self.shared.integration, &self.shared.terminals);
        self.shared.trace(|| {
            format!(
                "T{} manual.send {} {}",
                self.task,
                truck_slot::manual_reason_code(item.reason),
                short(&identity)
            )
        });
        let _ = self.shared.manual.send(item).await;
        {
            let mut st = self.shared.state();
            let open = OpenSend { identity, pk };
            if ambiguous {
                *st.ambiguous.entry(open.identity).or_insert(0) += 1;
            } else {
                st.open_sends.entry(self.task).or_default().push(open);
            }
        }
        let latency = self.shared.state().between(1, 10);
        self.shared
            .park(self.task, "manual.send:ack", latency)
            .await;
        if ambiguous {
            return Err(ManualQueueError(
                "simulated: send timed out after the queue took it".into(),
            ));
        }
        Ok(())
    }
}
