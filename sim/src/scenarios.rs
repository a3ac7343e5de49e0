//! Built-in scenarios beyond the incident file: one per signal, each proving that its signal
//! moves under its own fault (and a healthy feed to compare with). Load them by name with
//! [`Scenario::load`] (defined here, as it knows the built-in names).

use chrono::{DateTime, Duration, TimeZone, Utc};
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::scenario::{
    Arrival, KeyFault, QueueSettings, ReconcilerSettings, Scenario, ScenarioError,
    ScenarioNotification, SetTerminal, TerminalSettings,
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
    (
        "healthy-two-weeks",
        "14 days at 250 notifications a day (10 an hour), 2 % re-fired: no alarm",
    ),
    (
        "upstream-refires",
        "a day at 10 an hour; from 10:00 to 11:00 a third of the notifications sent twice",
    ),
    (
        "key-broken-for-a-week",
        "7 days at 250 a day, 2 % re-fired, the key includes the messageId: collision, then zero",
    ),
    (
        "three-terminals",
        "90 notifications at three terminals at once: keys, another API shape, no keys",
    ),
    (
        "webhook-retries",
        "60 webhooks through the ingress; 30 % of SendMessage fail (503), 15 % of 202s lost: retried",
    ),
    (
        "forwarder-two-months",
        "61 days at 243 a day, 2 % re-fired, six crashes after the claim (one message lost)",
    ),
    (
        "forwarder-recovery",
        "the forwarder's two months with 243 crashes at every step, 61 messages lost: sim recovery",
    ),
];

/// The real volume: notifications a day (about 14,800 in two months).
pub const REAL_VOLUME_PER_DAY: u32 = 250;

/// The healthy share of notifications re-fired once (1-3 % is healthy).
pub const HEALTHY_REFIRE_RATE: f64 = 0.02;

/// A notification at `at` for container `n`, its window the next day from 08:00 to 12:00 UTC.
fn notification_at(i: u32, at: DateTime<Utc>, arrivals: Vec<Arrival>) -> ScenarioNotification {
    let day = at.date_naive() + Duration::days(1);
    let start = format!("{day}T08:00:00Z");
    let end = format!("{day}T12:00:00Z");
    let mut n = notification(i, arrivals);
    if let Some(body) = n.body.as_mut() {
        body["preferred_window"] = json!({"start": start, "end": end});
    }
    n
}

/// `days` of the real volume from `start` (00:00 UTC), evenly spread (one every 345.6 s); each
/// notification re-fired once, 1 to 10 minutes later, with probability `refire` (seeded: the same
/// scenario every run).
fn real_volume(
    start: DateTime<Utc>,
    days: u32,
    refire: f64,
    seed: u64,
) -> Vec<ScenarioNotification> {
    volume(start, days, REAL_VOLUME_PER_DAY, refire, seed)
}

/// `days` of `per_day` notifications a day from `start` (00:00 UTC), evenly spread; each
/// notification re-fired once, 1 to 10 minutes later, with probability `refire` (seeded: the same
/// scenario every run).
fn volume(
    start: DateTime<Utc>,
    days: u32,
    per_day: u32,
    refire: f64,
    seed: u64,
) -> Vec<ScenarioNotification> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let count = days * per_day;
    let spacing = 86_400.0 / f64::from(per_day);
    (0..count)
        .map(|i| {
            let at = f64::from(i) * spacing;
            let mut arrivals = vec![Arrival::At(at)];
            let refired = rng.random_bool(refire);
            let delay = rng.random_range(60.0..600.0);
            if refired {
                arrivals.push(Arrival::At(at + delay));
            }
            let when = start + Duration::milliseconds((at * 1000.0) as i64);
            notification_at(i, when, arrivals)
        })
        .collect()
}

fn monday(day: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 6, day, 0, 0, 0)
        .single()
        .unwrap_or_default()
}

/// Two healthy weeks at the real volume: 3,500 notifications from Monday 2 June 2025, 2 %
/// re-fired. No alarm may fire.
pub fn healthy_two_weeks() -> Scenario {
    let mut s = base(
        "healthy-two-weeks",
        "Two healthy weeks: 250 notifications a day, 2 % re-fired once.",
        real_volume(monday(2), 14, HEALTHY_REFIRE_RATE, 14),
    );
    s.start = monday(2);
    s
}

/// A day at the real volume (10 an hour, one every 6 minutes) in which, from 10:00 to 11:00, a
/// re-firing upstream sends every third notification twice (4 of that hour's 10: 100, 103, 106
/// and 109), on top of the healthy 2 %.
pub fn upstream_refires() -> Scenario {
    let spacing = 360.0;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(10);
    let notifications = (0..240u32)
        .map(|i| {
            let at = f64::from(i) * spacing;
            let mut arrivals = vec![Arrival::At(at)];
            let in_burst = (36_000.0..39_600.0).contains(&at) && i % 3 == 1;
            if rng.random_bool(HEALTHY_REFIRE_RATE) || in_burst {
                arrivals.push(Arrival::At(at + 120.0));
            }
            notification_at(i, monday(9) + Duration::seconds(at as i64), arrivals)
        })
        .collect();
    let mut s = base(
        "upstream-refires",
        "A day at 10 notifications an hour; from 10:00 to 11:00 an upstream re-fires a third of them.",
        notifications,
    );
    s.start = monday(9);
    s
}

/// A week at the real volume behind a key derivation that includes the SQS messageId: every
/// re-fired notification (2 %) gets a second event key, a second slot and a second booking.
pub fn key_broken_for_a_week() -> Scenario {
    let mut s = base(
        "key-broken-for-a-week",
        "A week at 250 notifications a day, 2 % re-fired, the key includes the messageId.",
        real_volume(monday(2), 7, HEALTHY_REFIRE_RATE, 7),
    );
    s.start = monday(2);
    s.key_fault = Some(KeyFault::IncludesMessageId);
    s
}

/// The forwarder's volume: 14,800 notifications in the 61 days of their two months, about 243 a
/// day.
pub const FORWARDER_VOLUME_PER_DAY: u32 = 243;

/// The days of the forwarder's two months.
pub const FORWARDER_DAYS: u32 = 61;

/// The notifications of [`forwarder_two_months`] whose worker crashes after the claim: six,
/// spread over the two months (one every ten days, at varied times of day).
pub const FORWARDER_CRASHES: [usize; 6] = [1_200, 3_700, 6_100, 8_650, 11_111, 13_500];

/// The one of [`FORWARDER_CRASHES`] whose message never comes back after the crash: only the
/// reconciler can commit its record.
pub const FORWARDER_LOST: usize = 8_650;

/// The forwarder's traffic: `days` at `per_day` notifications a day from Monday 2 June 2025, 2 %
/// re-fired once, the workers of [`FORWARDER_CRASHES`] (those below `days * per_day`) dying
/// after their claim, [`FORWARDER_LOST`]'s message never redelivered, the reconciler on as
/// deployed (every minute, a sweep every 15 s, by lease end). [`forwarder_two_months`] at their volume; `sim
/// bench-replay` at multiples of it.
pub fn forwarder(days: u32, per_day: u32) -> Scenario {
    let mut notifications = volume(monday(2), days, per_day, HEALTHY_REFIRE_RATE, 61);
    for i in FORWARDER_CRASHES {
        if let Some(n) = notifications.get_mut(i) {
            n.crash = Some(crate::scenario::CrashStep::AfterClaim);
            n.message_lost_after_crash = i == FORWARDER_LOST;
        }
    }
    let mut s = base(
        "forwarder-two-months",
        "The forwarder's two months: 243 notifications a day for 61 days, 2 % re-fired, six \
         workers crashing after the claim, one of whose messages never comes back.",
        notifications,
    );
    s.start = monday(2);
    s.reconciler = Some(FIRST_GATE_RECONCILER);
    s
}

/// The reconciler as the forwarder's first gate scheduled it: a sweep a minute, records at least
/// 120 s old. [`forwarder_two_months`] and `three-terminals` keep it, so that their figures stay
/// comparable with docs/SIMULATION.md (with the deployed reconciler the first commits all six
/// crashed records before their messages come back, one more duplicate, 325, and the second 67
/// duplicates instead of 53; slots and bookings the same); [`forwarder_recovery`] runs the
/// deployed one.
pub const FIRST_GATE_RECONCILER: ReconcilerSettings = ReconcilerSettings {
    interval_s: 60,
    min_age_s: 120,
    sweep_interval_s: 60,
};

/// The forwarder's two months at their volume: 14,823 notifications over 61 days (243
/// a day), 2 % re-fired, six crashes after the claim, one message lost; see [`forwarder`].
pub fn forwarder_two_months() -> Scenario {
    forwarder(FORWARDER_DAYS, FORWARDER_VOLUME_PER_DAY)
}

/// Every this many notifications of [`forwarder_recovery`] one worker crashes: 243 crashes in
/// the 14,823 notifications, about four a day, at every phase of the reconciler's sweeps.
pub const RECOVERY_CRASH_EVERY: usize = 61;

/// The forwarder's two months ([`forwarder`]: 243 a day for 61 days, 2 % re-fired) with a crash
/// every [`RECOVERY_CRASH_EVERY`] notifications, the steps in turn (`after_receive`,
/// `after_reserve`, `after_claim`, `after_commit`), and every second crash that strands a record
/// (after the reserve or the claim; in pairs, so both steps have both) losing its message, so
/// that only the reconciler can finish it. The reconciler as deployed (every minute, a sweep
/// every 15 s, by lease end). `sim recovery` prints how long each crash took to finish.
pub fn forwarder_recovery() -> Scenario {
    forwarder_recovery_days(FORWARDER_DAYS)
}

/// [`forwarder_recovery`] over `days` (the tests replay a week).
pub fn forwarder_recovery_days(days: u32) -> Scenario {
    let mut s = forwarder(days, FORWARDER_VOLUME_PER_DAY);
    s.name = "forwarder-recovery".into();
    s.reconciler = Some(ReconcilerSettings::default());
    s.description = "The forwarder's two months with a crash every 61 notifications at every \
                     step in turn, every second stranding crash losing its message."
        .into();
    let mut stranding = 0usize;
    for (k, i) in (RECOVERY_CRASH_EVERY / 2..s.notifications.len())
        .step_by(RECOVERY_CRASH_EVERY)
        .enumerate()
    {
        let step = crate::scenario::CrashStep::ALL[k % crate::scenario::CrashStep::ALL.len()];
        let n = &mut s.notifications[i];
        n.crash = Some(step);
        n.message_lost_after_crash = false;
        if matches!(
            step,
            crate::scenario::CrashStep::AfterReserve | crate::scenario::CrashStep::AfterClaim
        ) {
            // Lost or not in pairs, so that each step has both.
            n.message_lost_after_crash = (stranding / 2) % 2 == 1;
            stranding += 1;
        }
    }
    for i in FORWARDER_CRASHES {
        if let Some(n) = s.notifications.get_mut(i) {
            if (i % RECOVERY_CRASH_EVERY) != RECOVERY_CRASH_EVERY / 2 {
                n.crash = None;
                n.message_lost_after_crash = false;
            }
        }
    }
    s
}

/// A valid ISO 6346 equipment number for `n` (owner `GTEU`, serial `n`).
pub fn container(n: u32) -> String {
    let first_ten = format!("GTEU{:06}", n % 1_000_000);
    let check = truck_slot::iso6346::check_digit(&first_ten).unwrap_or(0);
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
        terminal_set: Vec::new(),
        seed: 1,
        reconciler: Some(ReconcilerSettings::default()),
        key_fault: None,
        webhook: None,
        notifications,
    }
}

/// Webhook -> queue -> booking: 60 notifications, one a minute, each a webhook Portbase's sender
/// delivers through the ingress (`crate::webhook`) with the Standard Webhooks retry schedule. The
/// ingress's `SendMessage` fails 30 % of the time (`503`, retried, nothing queued) and 15 % of its
/// `202`s never reach the sender (retried, queued twice). Every container gets one slot; every
/// extra message is a duplicate the gate suppresses.
pub fn webhook_retries() -> Scenario {
    let notifications = (0..60u32)
        .map(|i| notification(i, vec![Arrival::At(f64::from(i) * 60.0)]))
        .collect();
    let mut s = base(
        "webhook-retries",
        "Webhooks through the ingress: 30 % of SendMessage calls fail (503), 15 % of the 202s are \
         lost; the sender retries both, every container gets one slot.",
        notifications,
    );
    s.webhook = Some(crate::scenario::WebhookSettings {
        queue_failure_rate: 0.3,
        lost_response_rate: 0.15,
        seed: 16,
        ..crate::scenario::WebhookSettings::default()
    });
    s
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

/// The terminals of [`three_terminals`]: ECT Delta (`slots`, keys, 4 calls at once), APMT
/// Maasvlakte II (`appointments-v2`, keys, 1 call at once, 48 h key retention) and RWG (no key
/// support).
pub const THREE_TERMINALS: [&str; 3] = ["ECT-DELTA", "APMT-MV2", "RWG"];

/// Books at three terminals at once, each with its own behaviour: 90 notifications (30 per
/// terminal, taking turns), ten arriving together every minute so the batches mix terminals and
/// calls overlap; every 4th re-fired 30 s later, every 5th also delivered twice by SQS (same
/// message id). The two keyed terminals fail 10 % of claims before taking the key (503) and lose
/// 15 % of answers after making the slot (504); notification 1's worker (APMT) crashes after the
/// claim and its message is lost (the reconciler re-sends under the same key and the terminal
/// replays the slot), notification 12's worker (ECT Delta) crashes after the claim and its
/// message is redelivered. Expected: one
/// slot and one booking per container at ECT Delta and at APMT, none at RWG, whose 30
/// notifications each reach the manual
/// queue once (`no_idempotency_support`).
pub fn three_terminals() -> Scenario {
    let notifications = (0..90u32)
        .map(|i| {
            let at = f64::from(i / 10) * 60.0;
            let mut arrivals = vec![Arrival::At(at)];
            if i % 5 == 0 {
                arrivals.push(Arrival::Detailed {
                    at_s: at,
                    same_message_id: true,
                });
            }
            if i % 4 == 0 {
                arrivals.push(Arrival::At(at + 30.0));
            }
            let mut n = notification(i, arrivals);
            if let Some(body) = n.body.as_mut() {
                body["terminal"] = json!(THREE_TERMINALS[(i % 3) as usize]);
            }
            match i {
                1 => {
                    n.crash = Some(crate::scenario::CrashStep::AfterClaim);
                    n.message_lost_after_crash = true;
                }
                12 => n.crash = Some(crate::scenario::CrashStep::AfterClaim),
                _ => {}
            }
            n
        })
        .collect();
    let mut s = base(
        "three-terminals",
        "Three terminals at once: ECT Delta with keys, APMT with another API shape and keys, RWG \
         without keys.",
        notifications,
    );
    let faulty = |seed: u64, latency_ms: u64| TerminalSettings {
        error_rate: 0.1,
        lose_response_rate: 0.15,
        latency_ms,
        seed,
        ..TerminalSettings::default()
    };
    s.terminal_set = vec![
        SetTerminal {
            code: THREE_TERMINALS[0].into(),
            api: "slots".into(),
            max_concurrent_calls: 4,
            slot_prefix: Some("ECTD".into()),
            terminal: faulty(3, 2),
        },
        SetTerminal {
            code: THREE_TERMINALS[1].into(),
            api: "appointments-v2".into(),
            max_concurrent_calls: 1,
            slot_prefix: Some("APMT".into()),
            terminal: TerminalSettings {
                retention_hours: 48,
                ..faulty(5, 5)
            },
        },
        SetTerminal {
            code: THREE_TERMINALS[2].into(),
            api: "slots".into(),
            max_concurrent_calls: 1,
            slot_prefix: Some("RWG".into()),
            terminal: TerminalSettings {
                supports_idempotency_key: false,
                ..TerminalSettings::default()
            },
        },
    ];
    s.terminals = THREE_TERMINALS.iter().map(|c| c.to_string()).collect();
    // The reconciler of [`FIRST_GATE_RECONCILER`], which this scenario's figures assume: with the
    // sweep every 15 s, the reconciler finishes 19 records after a terminal's 503 before their messages come
    // back (4 before), so 14 more redeliveries are duplicates (67, not 53) and one fewer
    // delivery; slots, bookings and manual items are the same. This scenario is about
    // terminals; recovery is `forwarder-recovery`'s.
    s.reconciler = Some(FIRST_GATE_RECONCILER);
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
        "healthy-two-weeks" => healthy_two_weeks(),
        "upstream-refires" => upstream_refires(),
        "key-broken-for-a-week" => key_broken_for_a_week(),
        "three-terminals" => three_terminals(),
        "webhook-retries" => webhook_retries(),
        "forwarder-two-months" => forwarder_two_months(),
        "forwarder-recovery" => forwarder_recovery(),
        _ => return Ok(None),
    }))
}

impl Scenario {
    /// Loads `name_or_path`: a built-in scenario by name (see [`NAMES`];
    /// `monday-2025-06-09` is the embedded incident), anything else a file path.
    ///
    /// # Errors
    /// [`ScenarioError`] if the file cannot be read or parsed.
    pub fn load(name_or_path: &str) -> Result<Self, ScenarioError> {
        if let Some(builtin) = by_name(name_or_path)? {
            return Ok(builtin);
        }
        let text = std::fs::read_to_string(name_or_path).map_err(|source| ScenarioError::Read {
            path: name_or_path.to_string(),
            source,
        })?;
        Self::parse(&text)
    }
}
