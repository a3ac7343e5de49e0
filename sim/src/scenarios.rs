//! Built-in scenarios beyond the incident file: one per signal, each proving that its signal
//! moves under its own fault (and a healthy feed to compare with). Load them by name with
//! [`Scenario::load`](crate::scenario::Scenario::load).

use chrono::{TimeZone, Utc};
use serde_json::json;

use crate::scenario::{
    Arrival, KeyFault, QueueSettings, ReconcilerSettings, Scenario, ScenarioError,
    ScenarioNotification, TerminalSettings,
};

/// The names [`by_name`] knows, with what each shows.
pub const NAMES: &[(&str, &str)] = &[
    ("monday-2025-06-09", "the incident (embedded file)"),
    (
        "monday-2025-06-09-lost",
        "the incident, the two crashed messages never redelivered, reconciler on",
    ),
    (
        "monday-2025-06-09-lost-no-reconciler",
        "the same without a reconciler: the stranded records stay in_flight",
    ),
    (
        "healthy-feed",
        "240 notifications over 5 hours, 5 % re-fired: no alarm",
    ),
    (
        "portbase-storm",
        "80 notifications in 3 minutes, each fired 3 times: duplicate ratio above 20 %",
    ),
    (
        "key-includes-message-id",
        "the healthy feed with a key derivation that includes the messageId: ratio 0",
    ),
    (
        "forgetful-terminal",
        "a worker stalls after its claim, the terminal forgets keys after 60 s: two slot ids",
    ),
];

/// A valid ISO 6346 equipment number for `n` (owner `GTEU`, serial `n`).
pub fn container(n: u32) -> String {
    let first_ten = format!("GTEU{:06}", n % 1_000_000);
    let check = gate::iso6346::check_digit(&first_ten).unwrap_or(0);
    format!("{first_ten}{check}")
}

fn notification(i: u32, arrivals: Vec<Arrival>) -> ScenarioNotification {
    ScenarioNotification {
        body: Some(json!({
            "notificationId": format!("PCS-SIM-{i:06}"),
            "equipment_number": container(i),
            "preferred_window": {"start": "2025-06-10T08:00:00Z", "end": "2025-06-10T12:00:00Z"},
            "terminal": "ECT-DELTA",
            "pin": format!("RLS-{:06}", (i * 7919) % 1_000_000),
        })),
        raw_body: None,
        arrivals,
        crash: None,
        message_lost_after_crash: false,
        stall_after_claim_s: None,
    }
}

fn base(name: &str, description: &str, notifications: Vec<ScenarioNotification>) -> Scenario {
    Scenario {
        name: name.into(),
        description: description.into(),
        start: Utc
            .with_ymd_and_hms(2025, 6, 9, 5, 0, 0)
            .single()
            .unwrap_or_default(),
        terminals: vec!["ECT-DELTA".into()],
        queue: QueueSettings::default(),
        lambda_timeout_s: 30,
        terminal: TerminalSettings::default(),
        seed: 1,
        reconciler: Some(ReconcilerSettings {
            interval_s: 60,
            min_age_s: 120,
        }),
        key_fault: None,
        notifications,
    }
}

/// 240 notifications, one every 75 s over 5 hours; every 20th re-fired 90 s later (5 %).
pub fn healthy_feed() -> Scenario {
    let notifications = (0..240u32)
        .map(|i| {
            let at = f64::from(i) * 75.0;
            let mut arrivals = vec![Arrival::At(at)];
            if i % 20 == 0 {
                arrivals.push(Arrival::At(at + 90.0));
            }
            notification(i, arrivals)
        })
        .collect();
    base(
        "healthy-feed",
        "A stable feed: 240 notifications over 5 hours, 5 % re-fired once.",
        notifications,
    )
}

/// 80 notifications within 3 minutes, each fired 3 times within a minute.
pub fn portbase_storm() -> Scenario {
    let notifications = (0..80u32)
        .map(|i| {
            let at = f64::from(i) * 2.0;
            notification(
                i,
                vec![
                    Arrival::At(at),
                    Arrival::At(at + 20.0),
                    Arrival::At(at + 40.0),
                ],
            )
        })
        .collect();
    base(
        "portbase-storm",
        "Portbase re-fires every webhook twice within a minute: 240 deliveries for 80 events.",
        notifications,
    )
}

/// The healthy feed behind a key derivation that includes the SQS messageId.
pub fn key_includes_message_id() -> Scenario {
    let mut s = healthy_feed();
    s.name = "key-includes-message-id".into();
    s.description =
        "The healthy feed, but the key includes the SQS messageId: no duplicate is ever seen."
            .into();
    s.key_fault = Some(KeyFault::IncludesMessageId);
    s
}

/// The incident with lost messages and no reconciler.
///
/// # Errors
/// Only if the embedded incident does not parse.
pub fn incident_lost_without_reconciler() -> Result<Scenario, ScenarioError> {
    let mut s = Scenario::incident_with_lost_messages()?;
    s.name = "monday-2025-06-09-lost-no-reconciler".into();
    s.description = "The incident, the crashed messages never come back, no reconciler.".into();
    s.reconciler = None;
    Ok(s)
}

/// A worker stalls 10 minutes after its claim; its message comes back after the visibility
/// timeout and the terminal, which forgets keys after 60 s, issues a second slot for the same
/// key. The gate commits one; the stalled worker's commit finds it and records the other slot id.
pub fn forgetful_terminal() -> Scenario {
    let mut first = notification(0, vec![Arrival::At(0.0)]);
    first.stall_after_claim_s = Some(600);
    let notifications = std::iter::once(first)
        .chain((1..20u32).map(|i| notification(i, vec![Arrival::At(f64::from(i) * 30.0)])))
        .collect();
    let mut s = base(
        "forgetful-terminal",
        "A terminal that forgets keys after 60 s and a worker that stalls after its claim.",
        notifications,
    );
    s.terminal.retention_seconds = Some(60);
    s.reconciler = None;
    s
}

/// A built-in scenario by name (see [`NAMES`]); `None` for other names.
///
/// # Errors
/// Only if the embedded incident does not parse.
pub fn by_name(name: &str) -> Result<Option<Scenario>, ScenarioError> {
    Ok(Some(match name {
        "monday-2025-06-09" | "incident" => Scenario::parse(crate::scenario::MONDAY_2025_06_09)?,
        "monday-2025-06-09-lost" => Scenario::incident_with_lost_messages()?,
        "monday-2025-06-09-lost-no-reconciler" => incident_lost_without_reconciler()?,
        "healthy-feed" => healthy_feed(),
        "portbase-storm" => portbase_storm(),
        "key-includes-message-id" => key_includes_message_id(),
        "forgetful-terminal" => forgetful_terminal(),
        _ => return Ok(None),
    }))
}
