//! What a replay reports, read back after the run from the terminals, the store and the queues
//! rather than from the handler's opinion of itself: the report, the figures per terminal, and
//! the store reads that count bookings and records left `in_flight`.

use std::collections::{BTreeMap, HashMap, HashSet};

use gate::record::{record_pk, RecordStatus, INFLIGHT_SHARDS};
use gate::store::{InFlightIndex, Store};
use serde::Serialize;
use truck_slot::derive_keys;
use truck_slot::notification::parse_notification;

use super::terminals::Played;
use crate::recovery::Recovery;
use crate::scenario::Scenario;
use crate::signals::SignalSummary;
use crate::stores::INTEGRATION;

/// Which handler a replay runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HandlerKind {
    /// The incident's original handler: claim, write the booking, delete the message; no key.
    Naive,
    /// The exactly-once gate.
    Gated,
}

/// What a replay produced. Every figure is counted from the terminal's, the store's and the
/// queues' own state after the run, not from the handler's opinion of itself.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// Which handler.
    pub handler: HandlerKind,
    /// Notifications in the scenario.
    pub notifications: usize,
    /// SQS messages sent (copies with the same message id count once).
    pub messages: usize,
    /// Records delivered to the handler (every receive of every message).
    pub deliveries: u64,
    /// Slot claims the terminal answered with a new slot.
    pub slots_issued: usize,
    /// Distinct containers that got a slot.
    pub containers_with_a_slot: usize,
    /// The most slots any one container got.
    pub max_slots_per_container: usize,
    /// Containers with two or more slots.
    pub containers_with_extra_slots: usize,
    /// Rows in the TMS bookings table.
    pub tms_bookings: usize,
    /// Conflicts on reserve with the same fingerprint (acknowledged, no side effect).
    pub duplicates_suppressed: usize,
    /// Same event key, other fingerprint.
    pub mismatches: usize,
    /// Items in the manual-booking queue.
    pub routed_to_manual: usize,
    /// Those items by reason code (`ManualReason::code`, e.g. `past_key_retention`): count.
    pub manual_reasons: BTreeMap<String, usize>,
    /// Records still `in_flight` at the end.
    pub still_in_flight: usize,
    /// Expired leases taken over.
    pub taken_over: usize,
    /// Records reported in `batchItemFailures`.
    pub batch_item_failures: usize,
    /// Workers that crashed.
    pub crashes: usize,
    /// Messages moved to the dead-letter queue.
    pub dead_lettered: usize,
    /// Stranded `in_flight` records the reconciler committed.
    pub reconciled: usize,
    /// Reconciler runs.
    pub reconciler_runs: usize,
    /// Simulated seconds from the first arrival to the last delivery or reconciler run.
    pub simulated_seconds: i64,
    /// The webhook leg, when the scenario starts at the webhook (`crate::webhook`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook: Option<crate::webhook::WebhookReport>,
    /// The four signals and the alarms that fired (gated handler only).
    pub signals: Option<SignalSummary>,
    /// Per terminal, for a scenario that books at several (`terminal_set`); empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_terminal: Vec<TerminalFigures>,
    /// Every injected worker crash and how long its record took to finish (gated handler only;
    /// `sim recovery` prints the distribution).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub recoveries: Vec<Recovery>,
}

/// One terminal's figures in a replay of several.
#[derive(Debug, Clone, Serialize)]
pub struct TerminalFigures {
    /// The terminal code.
    pub terminal: String,
    /// Its API shape (`slots`, `appointments-v2`).
    pub api: String,
    /// Whether it honours `Idempotency-Key`.
    pub supports_idempotency_key: bool,
    /// The scenario's notifications for this terminal (that parse).
    pub notifications: usize,
    /// Slots it issued.
    pub slots_issued: usize,
    /// Distinct containers it issued a slot for.
    pub containers_with_a_slot: usize,
    /// The most slots it issued for one container.
    pub max_slots_per_container: usize,
    /// TMS bookings of its notifications.
    pub tms_bookings: usize,
    /// Manual-queue items whose original body names this terminal.
    pub manual_items: usize,
    /// Distinct event keys among those items (each notification routed once: equal to
    /// `manual_items`).
    pub manual_events: usize,
    /// The gate's limit of calls at once (`max_concurrent_calls`; 0 without key support).
    pub max_concurrent_calls: usize,
    /// The most calls the gate had in flight to it at one time (never above the limit; 0 when
    /// never called).
    pub most_calls_at_once: usize,
    /// The most requests it was answering at one time. Can exceed the limit: a worker that dies
    /// mid-call leaves its request running at the terminal, as a Lambda environment that ends
    /// does.
    pub most_requests_at_once: usize,
}

/// Per-terminal figures of a replay of several terminals (empty for one).
pub(super) fn per_terminal_figures(
    scenario: &Scenario,
    played: &Played,
    manual: &[gate::manual::ManualItem],
    bookings_by_terminal: &BTreeMap<String, usize>,
    now_ms: i64,
) -> Vec<TerminalFigures> {
    let at = scenario.start.timestamp_millis().min(now_ms);
    scenario
        .terminal_set
        .iter()
        .zip(&played.cores)
        .map(|(t, (_, core))| {
            let slots = core.slots();
            let mut per_container: BTreeMap<&str, usize> = BTreeMap::new();
            for s in &slots {
                *per_container.entry(&s.equipment_number).or_insert(0) += 1;
            }
            let notifications = scenario
                .notifications
                .iter()
                .filter(|n| {
                    parse_notification(&n.body_string(), at, &scenario.terminals)
                        .is_ok_and(|p| p.terminal == t.code)
                })
                .count();
            let items: Vec<_> = manual
                .iter()
                .filter(|item| {
                    serde_json::from_str::<serde_json::Value>(&item.original_body)
                        .ok()
                        .and_then(|b| b.get("terminal")?.as_str().map(|c| c == t.code))
                        .unwrap_or(false)
                })
                .collect();
            let events: HashSet<_> = items.iter().filter_map(|i| i.event_key.as_ref()).collect();
            TerminalFigures {
                terminal: t.code.clone(),
                api: t.api.clone(),
                supports_idempotency_key: t.terminal.supports_idempotency_key,
                notifications,
                slots_issued: slots.len(),
                containers_with_a_slot: per_container.len(),
                max_slots_per_container: per_container.values().copied().max().unwrap_or(0),
                tms_bookings: bookings_by_terminal.get(&t.code).copied().unwrap_or(0),
                manual_items: items.len(),
                manual_events: events.len(),
                max_concurrent_calls: played.limits.get(&t.code).copied().unwrap_or(0),
                most_calls_at_once: played
                    .router
                    .as_ref()
                    .and_then(|r| r.most_calls_at_once(&t.code))
                    .unwrap_or(0),
                most_requests_at_once: core.most_requests_at_once(),
            }
        })
        .collect()
}

/// Whether any record is `in_flight`, through the sparse index (any store).
pub(super) async fn any_in_flight(store: &dyn InFlightIndex) -> Result<bool, String> {
    for shard in 0..INFLIGHT_SHARDS {
        let page = store
            .stale_in_flight(&format!("{shard:02}"), i64::MAX, None, 1)
            .await
            .map_err(|e| e.to_string())?;
        if !page.entries.is_empty() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Counts bookings (by the notification's terminal code) and `in_flight` records for every
/// distinct event key the gate can have used, through the store's own reads (so it works for any
/// store): the keys of the scenario's bodies, and of `faulty_bodies`, the bodies as a key fault
/// rewrote them on delivery.
pub(super) async fn gated_state(
    scenario: &Scenario,
    faulty_bodies: &[String],
    store: &dyn Store,
    now_ms: i64,
) -> Result<(BTreeMap<String, usize>, usize), String> {
    let mut keys = HashMap::new();
    // Parse as of the scenario start: bodies rejected then never got a record.
    let at = scenario.start.timestamp_millis().min(now_ms);
    let bodies = scenario
        .notifications
        .iter()
        .map(|n| n.body_string())
        .chain(faulty_bodies.iter().cloned());
    for body in bodies {
        if let Ok(p) = parse_notification(&body, at, &scenario.terminals) {
            if let Ok(k) = derive_keys(&p) {
                keys.insert(k.event_key, p.terminal);
            }
        }
    }
    let mut bookings = BTreeMap::new();
    let mut in_flight = 0;
    for (k, terminal) in keys {
        if store
            .business_row(&k)
            .await
            .map_err(|e| e.to_string())?
            .is_some()
        {
            *bookings.entry(terminal).or_insert(0) += 1;
        }
        if let Some(r) = store
            .get(&record_pk(INTEGRATION, &k))
            .await
            .map_err(|e| e.to_string())?
        {
            if r.status == RecordStatus::InFlight {
                in_flight += 1;
            }
        }
    }
    Ok((bookings, in_flight))
}
