//! The world every consumer case runs in: the real handler over the memory store and the
//! terminal simulator over HTTP on loopback, with every claim the gate sends recorded.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_lambda_events::event::sqs::SqsEvent;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation};
use gate::manual::MemoryManualQueue;
use gate::record::record_pk;
use gate::store::memory::MemoryStore;
use serde_json::json;
use sim::terminal::{self, TerminalConfig, TerminalCore};
use truck_slot::keys::event_key_of;
use truck_slot::terminal::{
    CallOutcome, HttpTerminal, HttpTerminalConfig, LookupOutcome, SlotTerminal,
};

/// 2026-06-01T06:00:00Z, before every window used here.
pub(crate) const T0: i64 = 1_780_293_600_000;
pub(crate) const INTEGRATION: &str = "test";

/// Records every claim the gate sends: (Idempotency-Key, body bytes).
pub(crate) struct Recording {
    pub(crate) inner: HttpTerminal,
    pub(crate) claims: Mutex<Vec<(String, Vec<u8>)>>,
}

#[async_trait]
impl SlotTerminal for Recording {
    async fn claim(&self, op_key: &str, request: &[u8]) -> CallOutcome {
        self.claims
            .lock()
            .unwrap()
            .push((op_key.to_string(), request.to_vec()));
        self.inner.claim(op_key, request).await
    }
    async fn lookup(&self, op_key: &str, request: &[u8]) -> LookupOutcome {
        self.inner.lookup(op_key, request).await
    }
}

pub(crate) struct World {
    pub(crate) gate: Gate,
    pub(crate) store: Arc<MemoryStore>,
    pub(crate) manual: Arc<MemoryManualQueue>,
    pub(crate) clock: Arc<ManualClock>,
    pub(crate) core: Arc<TerminalCore>,
    pub(crate) recording: Arc<Recording>,
}

pub(crate) async fn world_with(terminal_config: TerminalConfig, supports_key: bool) -> World {
    let clock = Arc::new(ManualClock::new(T0));
    let core = TerminalCore::new(terminal_config, clock.clone() as Arc<dyn Clock>);
    let (addr, _server) = terminal::spawn(core.clone()).await.unwrap();
    let http = HttpTerminal::new(HttpTerminalConfig::new(format!("http://{addr}"))).unwrap();
    let recording = Arc::new(Recording {
        inner: http,
        claims: Mutex::new(Vec::new()),
    });
    let store = Arc::new(MemoryStore::new());
    let manual = Arc::new(MemoryManualQueue::new());
    let mut config = GateConfig::new(INTEGRATION);
    config.server_supports_idempotency_key = supports_key;
    let gate = Gate {
        config,
        store: store.clone(),
        integration: Arc::new(truck_slot::TruckSlot::new(
            recording.clone(),
            vec!["ECT-DELTA".to_string()],
        )),
        manual: manual.clone(),
        clock: clock.clone(),
    };
    World {
        gate,
        store,
        manual,
        clock,
        core,
        recording,
    }
}

pub(crate) async fn world() -> World {
    world_with(TerminalConfig::default(), true).await
}

pub(crate) fn body(id: &str, container: &str) -> String {
    json!({
        "notificationId": id,
        "equipment_number": container,
        "preferred_window": {"start": "2026-06-01T08:00:00Z", "end": "2026-06-01T10:00:00Z"},
        "terminal": "ECT-DELTA",
        "pin": "RLS-104233",
        "gross_mass_kg": 25000
    })
    .to_string()
}

pub(crate) fn event(records: &[(&str, &str)]) -> SqsEvent {
    gate_testkit::sqs_event(records)
}

pub(crate) fn invocation(w: &World, id: &str) -> Invocation {
    Invocation {
        request_id: id.into(),
        deadline_ms: w.clock.now_ms() + 30_000,
    }
}

pub(crate) fn pk(id: &str, container: &str) -> String {
    record_pk(INTEGRATION, &event_key_of(id, container))
}

pub(crate) fn failures(report: &gate::consumer::BatchReport) -> Vec<String> {
    report
        .response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}
