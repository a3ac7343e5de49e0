//! Starting invocations: a consumer batch for the messages a poller receives, a reconciler run
//! on its tick, each a task on the driver with the gate's ports wrapped for that task.

use std::sync::Arc;

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use gate::consumer::{Gate, Invocation};
use rand::Rng;
use truck_slot::TruckSlot;

use super::{align_tick, Driver, Kind, Output, Task, RECONCILER_TIMEOUT_MS, TICK_MS};
use crate::dst::ports::{CoreTerminal, SimManual, SimTerminal, SkewedClock};
use crate::dst::shared::{Flag, TaskId};
use crate::dst::store::SimStore;
use crate::sqs::ReceiveOrder;

impl Driver<'_> {
    fn gate(&self, task: TaskId, skew_ms: i64) -> Gate {
        Gate {
            config: self.gate_config.clone(),
            store: Arc::new(SimStore {
                shared: Arc::clone(&self.shared),
                task,
            }),
            integration: Arc::new(TruckSlot::new(
                Arc::new(SimTerminal {
                    shared: Arc::clone(&self.shared),
                    task,
                    inner: CoreTerminal::new(Arc::clone(&self.shared.core)),
                }),
                self.known_terminals.clone(),
            )),
            manual: Arc::new(SimManual {
                shared: Arc::clone(&self.shared),
                task,
            }),
            clock: Arc::new(SkewedClock {
                base: Arc::clone(&self.shared.clock),
                offset_ms: skew_ms,
            }),
        }
    }

    pub(super) fn deliver(&mut self) {
        let now = self.shared.now();
        let (batch, host) = {
            let mut st = self.shared.state();
            let n = st.between(1, self.schedule.batch_size as i64) as usize;
            let host = st.between(0, self.schedule.workers as i64 - 1) as usize;
            (
                self.queue
                    .receive(now, n, ReceiveOrder::Shuffled(&mut st.rng)),
                host,
            )
        };
        if batch.is_empty() {
            return;
        }
        self.stats.deliveries += batch.len() as u64;
        self.stats.invocations += 1;
        let id = self.next_task;
        self.next_task += 1;
        let skew = self.schedule.host_skews_ms.get(host).copied().unwrap_or(0);
        let gate = self.gate(id, skew);
        let mut event = SqsEvent::default();
        for (i, receipt) in &batch {
            let m = &self.queue.msgs[*i];
            let mut msg = SqsMessage::default();
            msg.message_id = Some(m.id.clone());
            msg.receipt_handle = Some(format!("{}#{receipt}", m.id));
            msg.body = Some(self.schedule.bodies[m.body].text.clone());
            event.records.push(msg);
        }
        self.shared.trace(|| {
            format!(
                "T{id} consumer on host {host} (skew {skew} ms) receives {:?}",
                batch
                    .iter()
                    .map(|(i, r)| format!(
                        "{}(b{})#{r}",
                        self.queue.msgs[*i].id, self.queue.msgs[*i].body
                    ))
                    .collect::<Vec<_>>()
            )
        });
        // The worker reads its deadline as remaining time on its own clock (see `SkewedClock`);
        // Lambda kills it at the true deadline.
        let invocation = Invocation {
            request_id: format!("inv-{id}"),
            deadline_ms: now + skew + self.schedule.lambda_timeout_ms,
        };
        let request_id = invocation.request_id.clone();
        let deadline_ms = now + self.schedule.lambda_timeout_ms;
        crate::dst::outages::register_task(&mut self.shared.state(), id, host, deadline_ms);
        let fut = async move { Output::Batch(gate.handle_batch(event, &invocation).await) };
        self.tasks.push(Task {
            id,
            request_id,
            skew_ms: skew,
            kind: Kind::Consumer { batch },
            fut: Box::pin(fut),
            flag: Flag::raised(),
            deadline_ms,
        });
    }

    pub(super) fn tick(&mut self) {
        let now = self.shared.now();
        if let Some(until) = self.schedule.reconciler_outage_until_ms {
            if now < until {
                self.next_tick = align_tick(until);
                return;
            }
        }
        if !self.any_in_flight() {
            // Nothing to reconcile: a run would only read. Skip to the tick after the next
            // thing that can create an in_flight record.
            let mut next = now + TICK_MS;
            if self.tasks.is_empty() {
                let deferred = self.shared.state().deferred.iter().map(|d| d.at_ms).min();
                let candidates = [self.queue.next_visible(), deferred, self.redrive_pending()];
                if let Some(t) = candidates.iter().flatten().min() {
                    next = next.max(*t);
                }
            }
            self.next_tick = align_tick(next);
            return;
        }
        self.next_tick = now + TICK_MS;
        let (runs, same_request_id) = {
            let mut st = self.shared.state();
            let p = self.schedule.double_reconciler;
            if st.fault(p, "reconciler_invoked_twice") {
                // Half of the doubled runs share one Lambda request id (an asynchronous
                // invocation retried, or one event its queue delivered twice); each execution
                // has its own nonce, as `Invocation::new` draws one. From its own stream.
                let same = st.same_request_rng.random_bool(0.5);
                if same {
                    st.count("reconciler_same_request_id_twice");
                }
                (2, same)
            } else {
                (1, false)
            }
        };
        let first_id = self.next_task;
        for _ in 0..runs {
            self.stats.reconciler_runs += 1;
            let id = self.next_task;
            self.next_task += 1;
            let gate = self.gate(id, self.schedule.reconciler_skew_ms);
            let index = SimStore {
                shared: Arc::clone(&self.shared),
                task: id,
            };
            let config = self.reconciler_config.clone();
            let lambda_request = if same_request_id { first_id } else { id };
            let invocation = Invocation::with_nonce(
                &format!("rec-{lambda_request}"),
                &format!("x{id}"),
                now + self.schedule.reconciler_skew_ms + RECONCILER_TIMEOUT_MS,
            );
            let deadline_ms = now + RECONCILER_TIMEOUT_MS;
            crate::dst::outages::register_task(
                &mut self.shared.state(),
                id,
                crate::dst::outages::RECONCILER_HOST,
                deadline_ms,
            );
            let request_id = invocation.request_id.clone();
            self.shared.trace(|| format!("T{id} reconciler run"));
            let fut = async move {
                let report = gate.reconcile(&index, &config, &invocation).await;
                Output::Reconciled(report)
            };
            self.tasks.push(Task {
                id,
                request_id,
                skew_ms: self.schedule.reconciler_skew_ms,
                kind: Kind::Reconciler,
                fut: Box::pin(fut),
                flag: Flag::raised(),
                deadline_ms,
            });
        }
    }
}
