//! Several terminals in one stack: the built-in `three-terminals` scenario through the
//! gate (one simulator per terminal behind one server, the gate configured through `TERMINALS`),
//! and the `appointments-v2` client against the simulator that speaks it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use gate::clock::ManualClock;
use sim::replay::{self, ReplayOptions};
use sim::scenario::Scenario;
use sim::scenarios::THREE_TERMINALS;
use sim::terminal::{base_path, spawn_many, TerminalConfig, TerminalCore};
use truck_slot::terminal::several::TerminalApi;
use truck_slot::terminal::{
    CallOutcome, HttpTerminal, HttpTerminalConfig, LookupOutcome, SlotTerminal,
};

/// What the scenario's input determines, counted from its notifications and settings (not from
/// a run): per terminal its notifications and distinct containers, whether it takes keys; the
/// SQS copies (every arrival), the messages (arrivals that do not repeat the previous message
/// id), the crashes and the messages lost after one.
struct Input {
    /// Terminal code: (notifications, distinct containers, supports keys).
    per_terminal: BTreeMap<String, (usize, usize, bool)>,
    notifications: usize,
    copies: usize,
    messages: usize,
    crashes: usize,
    lost: usize,
}

fn input(scenario: &Scenario) -> Input {
    let mut containers: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut per_terminal = BTreeMap::new();
    for n in &scenario.notifications {
        let body = n.body.as_ref().expect("a JSON body");
        let code = body["terminal"].as_str().expect("a terminal").to_string();
        let keys = scenario
            .terminal_set
            .iter()
            .find(|t| t.code == code)
            .expect("a terminal of the set")
            .terminal
            .supports_idempotency_key;
        per_terminal.entry(code.clone()).or_insert((0, 0, keys)).0 += 1;
        containers
            .entry(code)
            .or_default()
            .insert(n.container().expect("a container"));
    }
    for (code, set) in containers {
        if let Some(t) = per_terminal.get_mut(&code) {
            t.1 = set.len();
        }
    }
    let arrivals = scenario
        .notifications
        .iter()
        .flat_map(|n| n.arrivals.iter());
    Input {
        per_terminal,
        notifications: scenario.notifications.len(),
        copies: arrivals.clone().count(),
        messages: arrivals.filter(|a| !a.same_message_id()).count(),
        crashes: scenario
            .notifications
            .iter()
            .filter(|n| n.crash.is_some())
            .count(),
        lost: scenario
            .notifications
            .iter()
            .filter(|n| n.crash.is_some() && n.message_lost_after_crash)
            .count(),
    }
}

/// One slot and one booking per container at each keyed terminal (ECT Delta with `slots`, APMT
/// with `appointments-v2`), despite re-fires, SQS copies, 503s, lost answers and two crashes
/// after the claim; nothing claimed at RWG (no key support), whose notifications are each in
/// the manual queue exactly once; no terminal got more calls at once than its limit. Every
/// figure against what the input determines ([`input`]). The duplicates are not fixed by the
/// input alone: which records a crash strands, and whether a copy meets a live lease (a batch
/// item failure, redelivered) or a finished record, depend on the order the concurrent calls
/// finish in (two runs print 53 or 54). What the input does fix is a floor: every copy ends
/// acknowledged (none dead-lettered) but the lost ones, and each notification is finished by at
/// most one acknowledged delivery, so every other acknowledged copy was a duplicate.
#[tokio::test]
async fn three_terminals_one_slot_per_container_where_keys_and_a_person_where_none() {
    let scenario = Scenario::load("three-terminals").unwrap();
    assert_eq!(scenario.terminals, THREE_TERMINALS);
    let want = input(&scenario);
    // The input itself, as the scenario describes it: 30 notifications at each terminal, one
    // container each, two crashes, one message lost.
    assert_eq!(
        want.per_terminal,
        BTreeMap::from([
            ("APMT-MV2".to_string(), (30, 30, true)),
            ("ECT-DELTA".to_string(), (30, 30, true)),
            ("RWG".to_string(), (30, 30, false)),
        ])
    );
    assert_eq!((want.crashes, want.lost), (2, 1));
    let r = replay::run(&scenario, ReplayOptions::gated())
        .await
        .unwrap();
    let by_code: BTreeMap<&str, _> = r
        .per_terminal
        .iter()
        .map(|t| (t.terminal.as_str(), t))
        .collect();
    assert_eq!(by_code.len(), want.per_terminal.len(), "{r:?}");
    let mut keyed_containers = 0;
    let mut unkeyed_notifications = 0;
    for (code, &(notifications, containers, keys)) in &want.per_terminal {
        let t = by_code[code.as_str()];
        assert_eq!(t.supports_idempotency_key, keys, "{t:?}");
        assert_eq!(t.notifications, notifications, "{t:?}");
        assert!(t.most_calls_at_once <= t.max_concurrent_calls, "{t:?}");
        if keys {
            keyed_containers += containers;
            assert_eq!(t.slots_issued, containers, "{t:?}");
            assert_eq!(t.containers_with_a_slot, containers, "{t:?}");
            assert_eq!(t.max_slots_per_container, 1, "{t:?}");
            assert_eq!(t.tms_bookings, containers, "{t:?}");
            assert_eq!(t.manual_items, 0, "{t:?}");
            assert!(t.most_calls_at_once >= 1, "{t:?}");
        } else {
            unkeyed_notifications += notifications;
            assert_eq!(t.slots_issued, 0, "never called");
            assert_eq!(t.most_requests_at_once, 0, "never called");
            assert_eq!(t.most_calls_at_once, 0, "never called");
            assert_eq!(t.tms_bookings, 0);
            assert_eq!(t.manual_items, notifications, "{t:?}");
            assert_eq!(
                t.manual_events, notifications,
                "each notification once: {t:?}"
            );
        }
    }
    assert_eq!(by_code["APMT-MV2"].api, "appointments-v2");
    assert_eq!(by_code["APMT-MV2"].max_concurrent_calls, 1);
    assert_eq!(
        r.manual_reasons,
        BTreeMap::from([("no_idempotency_support".to_string(), unkeyed_notifications)])
    );
    // The whole run: every record finished, both crashes happened, the lost one reconciled.
    assert_eq!(r.notifications, want.notifications);
    assert_eq!(r.messages, want.messages);
    assert_eq!(r.slots_issued, keyed_containers);
    assert_eq!(r.tms_bookings, keyed_containers);
    assert_eq!(r.routed_to_manual, unkeyed_notifications);
    assert_eq!(r.still_in_flight, 0);
    assert_eq!(r.crashes, want.crashes);
    assert!(r.reconciled >= want.lost, "{r:?}");
    assert_eq!(r.dead_lettered, 0);
    // Every copy is received at least once (the lost one too: its worker crashed on it).
    assert!(r.deliveries as usize >= want.copies, "{r:?}");
    assert!(
        r.duplicates_suppressed >= want.copies - want.lost - want.notifications,
        "{r:?}"
    );
}

/// The naive handler speaks one terminal's API: a scenario of several is refused, not replayed
/// half-wrong.
#[tokio::test]
async fn the_naive_handler_refuses_several_terminals() {
    let scenario = Scenario::load("three-terminals").unwrap();
    let err = replay::run(&scenario, ReplayOptions::naive())
        .await
        .unwrap_err();
    assert!(err.contains("books at one terminal"), "{err}");
}

fn request(equipment: &str, pin: &str) -> Vec<u8> {
    truck_slot::keys::claim_request(
        &truck_slot::notification::parse_notification(
            &serde_json::json!({
                "notificationId": "N-1",
                "equipment_number": equipment,
                "preferred_window": {"start": "2025-10-20T08:00:00Z", "end": "2025-10-20T09:00:00Z"},
                "terminal": "APMT-MV2",
                "pin": pin,
            })
            .to_string(),
            1_760_000_000_000,
            &["APMT-MV2".to_string()],
        )
        .unwrap(),
    )
    .unwrap()
}

/// The gate's `appointments-v2` client against the simulator that speaks it, both behind one
/// server with a `slots` terminal: the claim renders the stored request in the v2 body; a replay
/// under the key returns the same appointment; the lookup by key (`/v2/appointments/by-key/K`)
/// finds it, and answers not found for an unknown key; another body under the key is a key
/// mismatch. The `slots` terminal beside it has nothing.
#[tokio::test]
async fn the_appointments_v2_client_claims_replays_and_looks_up() {
    let clock = Arc::new(ManualClock::new(1_760_000_000_000));
    let v2 = TerminalCore::new(
        TerminalConfig {
            api: TerminalApi::AppointmentsV2,
            terminal_name: "APMT-MV2".into(),
            slot_prefix: "APMT".into(),
            ..TerminalConfig::default()
        },
        clock.clone(),
    );
    let slots = TerminalCore::new(TerminalConfig::default(), clock);
    let (addr, server) = spawn_many(
        vec![
            ("APMT-MV2".into(), v2.clone()),
            ("ECT-DELTA".into(), slots.clone()),
        ],
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let mut config = HttpTerminalConfig::new(format!("http://{addr}{}", base_path("APMT-MV2")));
    config.api = TerminalApi::AppointmentsV2;
    let client = HttpTerminal::new(config).unwrap();
    let ours = request("CSQU3054383", "4711");

    let CallOutcome::Done(first) = client.claim("k-1", &ours).await else {
        panic!("claimed");
    };
    assert_eq!(first.effect_id, "APMT-000001");
    assert_eq!(first.subject.as_deref(), Some("CSQU3054383"));
    assert_eq!(
        client.claim("k-1", &ours).await,
        CallOutcome::Done(first.clone()),
        "a replay under the key"
    );
    assert_eq!(v2.slots_issued(), 1);
    let issued = &v2.slots()[0];
    assert_eq!(issued.window_start, "2025-10-20T08:00:00Z");
    assert_eq!(issued.window_end, "2025-10-20T09:00:00Z");
    assert_eq!(issued.idempotency_key.as_deref(), Some("k-1"));
    assert_eq!(
        client.lookup("k-1", &ours).await,
        LookupOutcome::Found(first)
    );
    assert_eq!(client.lookup("k-2", &ours).await, LookupOutcome::NotFound);
    let other = request("CSQU3054383", "9999");
    assert!(matches!(
        client.claim("k-1", &other).await,
        CallOutcome::KeyMismatch(_)
    ));
    assert_eq!(slots.slots_issued(), 0);
    server.abort();
}

/// The v2 simulator speaks only its own shape: `POST /slots` is not found there, and a `slots`
/// body sent to `/v2/appointments` is a bad request, never a slot (stored under its key, as
/// every answer after the key is taken).
#[tokio::test]
async fn each_shape_answers_only_its_own_paths() {
    let clock = Arc::new(ManualClock::new(1_760_000_000_000));
    let v2 = TerminalCore::new(
        TerminalConfig {
            api: TerminalApi::AppointmentsV2,
            ..TerminalConfig::default()
        },
        clock,
    );
    let ours = request("CSQU3054383", "4711");
    assert_eq!(
        v2.handle("POST", "/slots", None, Some("\"k\""), &ours)
            .await
            .status,
        404
    );
    assert_eq!(
        v2.handle("POST", "/v2/appointments", None, Some("\"k\""), &ours)
            .await
            .status,
        400
    );
    let body = truck_slot::terminal::several::appointments_v2_body(&ours).unwrap();
    let answer = v2
        .handle("POST", "/v2/appointments", None, Some("\"k2\""), &body)
        .await;
    assert_eq!(answer.status, 201);
    let json: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(json["appointment"]["container"]["number"], "CSQU3054383");
    assert_eq!(
        v2.handle("DELETE", "/v2/appointments/by-key/k", None, None, b"")
            .await
            .status,
        405
    );
    assert_eq!(v2.slots_issued(), 1);
}

/// `terminal-sim --terminals JSON` plays several terminals in one process, each under its own
/// base path with its own API shape, and says where; a path under no configured code is `404`.
#[tokio::test]
async fn terminal_sim_serves_several_terminals_under_their_base_paths() {
    use std::io::{BufRead, BufReader};
    let set = r#"[{"code":"ECT-DELTA"},{"code":"APMT-MV2","api":"appointments-v2"},
        {"code":"RWG","terminal":{"supports_idempotency_key":false}}]"#;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_terminal-sim"))
        .args(["--port", "0", "--terminals", set])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("terminal-sim runs");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    for _ in 0..4 {
        printed.push(lines.next().expect("a line").expect("text"));
    }
    let root = printed[0]
        .strip_prefix("listening on ")
        .expect("the listening line")
        .to_string();
    assert_eq!(
        printed[1..],
        [
            format!("terminal ECT-DELTA (slots) at {root}/terminals/ECT-DELTA"),
            format!("terminal APMT-MV2 (appointments-v2) at {root}/terminals/APMT-MV2"),
            format!("terminal RWG (slots) at {root}/terminals/RWG"),
        ]
    );
    let client = reqwest::Client::new();
    let status = |path: &'static str| {
        let client = client.clone();
        let url = format!("{root}{path}");
        async move { client.get(url).send().await.unwrap().status().as_u16() }
    };
    assert_eq!(status("/terminals/ECT-DELTA/slots").await, 200);
    assert_eq!(status("/terminals/APMT-MV2/v2/appointments").await, 200);
    assert_eq!(status("/terminals/APMT-MV2/slots").await, 404);
    assert_eq!(status("/terminals/NOPE/slots").await, 404);
    assert_eq!(status("/slots").await, 404);
    child.kill().ok();
    child.wait().ok();
}
