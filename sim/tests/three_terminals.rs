//! Several terminals in one stack (issue 15): the built-in `three-terminals` scenario through the
//! gate (one simulator per terminal behind one server, the gate configured through `TERMINALS`),
//! and the `appointments-v2` client against the simulator that speaks it.

use std::collections::BTreeMap;
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

/// One slot and one booking per container at each keyed terminal (ECT Delta with `slots`, APMT
/// with `appointments-v2`), despite re-fires, SQS copies, 503s, lost answers and two crashes
/// after the claim; nothing claimed at RWG (no key support), whose 30 notifications are each in
/// the manual queue exactly once; no terminal got more calls at once than its limit.
#[tokio::test]
async fn three_terminals_one_slot_per_container_where_keys_and_a_person_where_none() {
    let scenario = Scenario::load("three-terminals").unwrap();
    assert_eq!(scenario.terminals, THREE_TERMINALS);
    let r = replay::run(&scenario, ReplayOptions::gated())
        .await
        .unwrap();
    let by_code: BTreeMap<&str, _> = r
        .per_terminal
        .iter()
        .map(|t| (t.terminal.as_str(), t))
        .collect();
    assert_eq!(by_code.len(), 3, "{r:?}");
    for code in ["ECT-DELTA", "APMT-MV2"] {
        let t = by_code[code];
        assert!(t.supports_idempotency_key);
        assert_eq!(t.notifications, 30, "{t:?}");
        assert_eq!(t.slots_issued, 30, "{t:?}");
        assert_eq!(t.containers_with_a_slot, 30, "{t:?}");
        assert_eq!(t.max_slots_per_container, 1, "{t:?}");
        assert_eq!(t.tms_bookings, 30, "{t:?}");
        assert_eq!(t.manual_items, 0, "{t:?}");
        assert!(t.most_calls_at_once >= 1, "{t:?}");
        assert!(t.most_calls_at_once <= t.max_concurrent_calls, "{t:?}");
    }
    assert_eq!(by_code["APMT-MV2"].api, "appointments-v2");
    assert_eq!(by_code["APMT-MV2"].max_concurrent_calls, 1);
    let rwg = by_code["RWG"];
    assert!(!rwg.supports_idempotency_key);
    assert_eq!(rwg.notifications, 30);
    assert_eq!(rwg.slots_issued, 0, "never called");
    assert_eq!(rwg.most_requests_at_once, 0, "never called");
    assert_eq!(rwg.most_calls_at_once, 0, "never called");
    assert_eq!(rwg.tms_bookings, 0);
    assert_eq!(rwg.manual_items, 30, "{rwg:?}");
    assert_eq!(rwg.manual_events, 30, "each notification once: {rwg:?}");
    assert_eq!(
        r.manual_reasons,
        BTreeMap::from([("no_idempotency_support".to_string(), 30)])
    );
    // The whole run: every record finished, both crashes happened, the lost one reconciled.
    assert_eq!(r.notifications, 90);
    assert_eq!(r.slots_issued, 60);
    assert_eq!(r.tms_bookings, 60);
    assert_eq!(r.routed_to_manual, 30);
    assert_eq!(r.still_in_flight, 0);
    assert_eq!(r.crashes, 2);
    assert!(r.reconciled >= 1, "{r:?}");
    assert_eq!(r.dead_lettered, 0);
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
