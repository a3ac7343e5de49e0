//! truck-slot under the runbook cases of `kit`: its gatectl (`gatectl::truck::TruckSlotStack`),
//! the terminal simulator on loopback, Portbase notifications for one container.

use std::sync::Arc;

use gate::clock::{Clock, ManualClock};
use gate::Integration;
use gatectl::truck::TruckSlotStack;
use serde_json::json;
use sim::terminal::{self, TerminalConfig, TerminalCore};
use truck_slot::terminal::{HttpTerminal, HttpTerminalConfig};

use super::kit::Fixture;

/// The release PIN every body carries.
const PIN: &str = "RLS-104233";

/// truck-slot with the terminal simulator.
pub struct TruckSlotFixture {
    core: Arc<TerminalCore>,
    url: String,
}

impl Fixture for TruckSlotFixture {
    type Stack = TruckSlotStack;

    fn stack() -> TruckSlotStack {
        TruckSlotStack
    }

    async fn start(clock: Arc<ManualClock>) -> (Self, Vec<(&'static str, String)>) {
        let core = TerminalCore::new(TerminalConfig::default(), clock as Arc<dyn Clock>);
        let (addr, _server) = terminal::spawn(core.clone()).await.expect("terminal");
        let url = format!("http://{addr}");
        let vars = vec![("TERMINAL_BASE_URL", url.clone())];
        (Self { core, url }, vars)
    }

    fn integration(&self) -> Arc<dyn Integration> {
        let http = HttpTerminal::new(HttpTerminalConfig::new(self.url.clone())).expect("client");
        Arc::new(truck_slot::TruckSlot::new(
            Arc::new(http),
            vec!["ECT-DELTA".to_string()],
        ))
    }

    fn body(&self, n: u32) -> String {
        json!({
            "notificationId": self.source_id(n),
            "equipment_number": "CSQU3054383",
            "preferred_window": {"start": "2026-06-01T08:00:00Z", "end": "2026-06-01T10:00:00Z"},
            "terminal": "ECT-DELTA",
            "pin": PIN
        })
        .to_string()
    }

    fn source_id(&self, n: u32) -> String {
        format!("N-{n}")
    }

    fn secret(&self) -> Option<&'static str> {
        Some(PIN)
    }

    fn effects_made(&self) -> usize {
        self.core.slots_issued()
    }
}
