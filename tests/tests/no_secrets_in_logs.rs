//! Secrets never reach a log line or an error message.
//!
//! The consumer and the reconciler run over notifications whose release PIN is `PIN-XYZZY-7731`,
//! with the terminal token `tok-PLUGH-0042` read from Secrets Manager (moto), against a hostile
//! terminal that echoes the request body, the `Authorization` header, and the PIN and the token in
//! every form a server may echo them ([`forms`]). Every path runs: a claim committed, terminal 4xx
//! and 5xx, 401, 422, a 2xx not JSON, a 2xx whose slot id quotes the PIN or whose equipment number
//! is the PIN, an answer for another container, poison bodies (not JSON, duplicate keys, a
//! PIN-named duplicate key, oversized, control characters, window ended, unknown or PIN-valued
//! terminal, a PIN-valued id with a trailing space, a number beyond 2^53), a fingerprint mismatch,
//! a duplicate, a terminal without key support, the consumer's lookup past the claim horizon, and
//! the reconciler's lookup (found, found quoting the PIN, failing, not found then claim, past
//! retention). Module `handlers` runs the library handlers, module `binaries` the real binaries.
//!
//! Neither secret may appear anywhere in any form: not in the logs, the records' `error`, the
//! manual items' `detail`, the EMF documents or the published metrics. Positive controls prove the
//! capture works and the secrets did flow: the logs hold the notification ids, TRACE lines and EMF
//! documents, the terminal received the PIN and the token, and the manual queue holds the PIN in
//! the original bodies (a person needs it).

#[path = "../../integrations/truck-slot/tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::io::Write;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use aws_lambda_events::event::sqs::SqsEvent;
use gate::clock::{Clock, SystemClock};
use gate::consumer::{Gate, GateConfig, Invocation};
use gate::reconciler::ReconcilerConfig;
use gate::store::IdempotencyStore;
use gate_dynamo::sqs::SqsManualQueue;
use gate_dynamo::DynamoStore;
use integration_tests::lambda_watch::{invoke, workspace_root, MotoStore, WatchCommand};
use integration_tests::{dynamo_client, sdk_config, sqs_client, unique};
use serde_json::{json, Value};
use support::{json, raw, Answer, Seen};
use truck_slot::derive_keys;
use truck_slot::keys::{event_key_of, operation_key, SLOT_CLAIM};
use truck_slot::notification::parse_notification;
use truck_slot::secrets::fetch_api_token;
use truck_slot::terminal::{HttpTerminal, HttpTerminalConfig};

// --- the world ----------------------------------------------------------------------------------

fn container(owner_and_serial: &str) -> String {
    let digit = truck_slot::iso6346::check_digit(owner_and_serial).expect("10 characters");
    format!("{owner_and_serial}{digit}")
}

/// What the hostile terminal does for a container's claim.
#[derive(Clone, Copy, Debug)]
enum Claim {
    Slot,
    Echo503,
    Problem400,
    Refused401,
    Mismatch422,
    NotJson201,
    OtherContainer,
    SlotIdQuotesPin,
    /// A slot id in the default format that is hex of the PIN in mixed case.
    SlotIdHexOfPin,
    EquipmentIsPin,
}

/// What it does for a lookup.
#[derive(Clone, Copy, Debug)]
enum Lookup {
    Found,
    FoundQuotingPin,
    Echo500,
    NotFound,
}

#[derive(Default)]
struct Behaviour {
    claims: HashMap<String, Claim>,
    lookups: HashMap<String, Lookup>,
}

fn echo(seen: &Seen) -> String {
    format!(
        "you sent {} with {}; release {} is locked",
        String::from_utf8_lossy(&seen.body),
        seen.header("authorization").unwrap_or(""),
        echoed_forms()
    )
}

fn hostile(behaviour: Arc<Mutex<Behaviour>>) -> impl Fn(&Seen) -> Answer + Send + Sync {
    move |seen| {
        let b = behaviour.lock().unwrap();
        if seen.method == "GET" {
            let key = seen
                .uri
                .split("idempotency_key=")
                .nth(1)
                .unwrap_or("")
                .to_string();
            return match b.lookups.get(&key).copied().unwrap_or(Lookup::NotFound) {
                Lookup::Found => json(
                    200,
                    json!({"slot": {"slot_id": "S-FOUND", "pin": PIN,
                                    "authorization": seen.header("authorization")}}),
                ),
                Lookup::FoundQuotingPin => json(
                    200,
                    json!({"slot": {"slot_id": format!("S-{}", PIN.to_lowercase())}}),
                ),
                Lookup::Echo500 => json(
                    500,
                    json!({"message": format!("lookup failed: {}", echo(seen))}),
                ),
                Lookup::NotFound => json(404, json!({"type": "not_found", "detail": echo(seen)})),
            };
        }
        let request: Value = serde_json::from_slice(&seen.body).unwrap_or(Value::Null);
        let equipment = request["equipment_number"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let problem = |status: u16, kind: &str| {
            json(
                status,
                json!({"type": kind, "title": echo(seen),
                       "detail": format!("upstream refused release pin {}", echoed_forms()),
                       "request": request.clone()}),
            )
        };
        match b.claims.get(&equipment).copied().unwrap_or(Claim::Slot) {
            Claim::Slot => json(
                201,
                json!({"slot_id": format!("S-{equipment}"), "equipment_number": equipment,
                       "pin": PIN}),
            ),
            Claim::Echo503 => raw(503, format!("upstream refused {}", echo(seen))),
            Claim::Problem400 => problem(400, "invalid_request"),
            Claim::Refused401 => problem(401, "unauthorized"),
            Claim::Mismatch422 => problem(422, "idempotency_mismatch"),
            Claim::NotJson201 => raw(201, echo(seen)),
            Claim::OtherContainer => json(
                201,
                json!({"slot_id": "S-OTHER", "equipment_number": "MSKU1234565", "pin": PIN}),
            ),
            Claim::SlotIdQuotesPin => json(
                201,
                json!({"slot_id": format!("S-{}", PIN.replace('-', "")),
                       "equipment_number": equipment}),
            ),
            Claim::SlotIdHexOfPin => json(
                201,
                json!({"slot_id": format!("SLOT-{}", hex_of(&mixed_case(PIN))),
                       "equipment_number": equipment}),
            ),
            Claim::EquipmentIsPin => json(
                201,
                json!({"slot_id": "S-ECHO", "equipment_number": PIN.to_lowercase(),
                       "note": echoed_forms()}),
            ),
        }
    }
}

fn window(days_ahead: i64) -> Value {
    let start = chrono::Utc::now() + chrono::Duration::days(days_ahead);
    let end = start + chrono::Duration::hours(2);
    json!({
        "start": start.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "end": end.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    })
}

fn notification(id: &str, equipment: &str) -> Value {
    json!({
        "notificationId": id,
        "equipment_number": equipment,
        "preferred_window": window(2),
        "terminal": "ECT-DELTA",
        "pin": PIN,
        "gross_mass_kg": 25000
    })
}

fn sqs_event(bodies: &[String]) -> Value {
    let ids: Vec<String> = (0..bodies.len())
        .map(|i| format!("msg-{i}-{}", unique("m")))
        .collect();
    let records: Vec<(&str, &str)> = ids
        .iter()
        .zip(bodies)
        .map(|(id, body)| (id.as_str(), body.as_str()))
        .collect();
    serde_json::to_value(gate_testkit::sqs_event(&records)).expect("an SQS event serialises")
}

/// Every body the consumer gets: one per terminal behaviour, then the poison ones.
fn consumer_bodies(tag: &str, behaviour: &Mutex<Behaviour>) -> Vec<String> {
    let mut bodies = Vec::new();
    let cases = [
        ("CSQU305438", Claim::Slot),
        ("MSKU123456", Claim::Echo503),
        ("MWCU605978", Claim::Problem400),
        ("ABCU123456", Claim::Refused401),
        ("TGHU100000", Claim::Mismatch422),
        ("TCLU200000", Claim::NotJson201),
        ("MRKU300000", Claim::OtherContainer),
        ("MRKU400000", Claim::SlotIdQuotesPin),
        ("MRKU500000", Claim::EquipmentIsPin),
        ("MRKU600000", Claim::SlotIdHexOfPin),
    ];
    let mut b = behaviour.lock().unwrap();
    for (i, (prefix, claim)) in cases.iter().enumerate() {
        let c = container(prefix);
        b.claims.insert(c.clone(), *claim);
        bodies.push(notification(&format!("PCS-{tag}-{i}"), &c).to_string());
    }
    // A duplicate of the first (its very body: a window built again could cross a second), and
    // a mismatch (same key, other business fields).
    let ok: Value = serde_json::from_str(&bodies[0]).expect("the first body is JSON");
    bodies.push(ok.to_string());
    let mut other = ok.clone();
    other["gross_mass_kg"] = json!(26000);
    bodies.push(other.to_string());
    // Poison: not JSON, duplicate keys, oversized, control characters, window ended, unknown
    // terminal, a number for the PIN's neighbour; every one carries the PIN.
    bodies.push(format!("{{bad \"pin\": \"{PIN}\""));
    bodies.push(
        ok.to_string()
            .replacen("\"pin\":", &format!("\"pin\":\"{PIN}-0\",\"pin\":"), 1),
    );
    let mut big = ok.clone();
    big["padding"] = json!(PIN.repeat(6_000));
    bodies.push(big.to_string());
    let mut ctl = ok.clone();
    ctl["pin"] = json!(format!("{PIN}\n"));
    bodies.push(ctl.to_string());
    let mut long_pin = ok.clone();
    long_pin["pin"] = json!(PIN.repeat(10));
    bodies.push(long_pin.to_string());
    let mut ended = ok.clone();
    ended["notificationId"] = json!(format!("PCS-{tag}-ended"));
    ended["preferred_window"] = window(-2);
    bodies.push(ended.to_string());
    let mut unknown = ok.clone();
    unknown["terminal"] = json!("APMT-2");
    bodies.push(unknown.to_string());
    let mut number = ok.clone();
    number["notificationId"] = json!(42);
    bodies.push(number.to_string());
    // Reasons that could quote a PIN-valued field: none quotes body text.
    let mut pin_terminal = ok.clone();
    pin_terminal["terminal"] = json!(PIN);
    bodies.push(pin_terminal.to_string());
    bodies.push(
        ok.to_string()
            .replacen('{', &format!("{{\"{PIN}\":1,\"{PIN}\":2,"), 1),
    );
    let mut pin_id = ok.clone();
    pin_id["notificationId"] = json!(format!("{PIN} "));
    bodies.push(pin_id.to_string());
    bodies.push(ok.to_string().replacen(
        "\"gross_mass_kg\":25000",
        "\"gross_mass_kg\":9007199254740993",
        1,
    ));
    bodies
}

/// Reserves records that a dead worker left `in_flight` (lease expired), with their lookup
/// behaviour: found, found with a slot id quoting the PIN, failing, not found then a claim the
/// terminal refuses, and two past the key retention (not found; failing). Returns the bodies of
/// the records past the claim horizon, for the consumer (a redelivery days later: it looks the
/// key up instead of claiming).
async fn strand(
    gate: &Gate,
    store: &DynamoStore,
    tag: &str,
    behaviour: &Mutex<Behaviour>,
) -> Vec<String> {
    let mut late = Vec::new();
    let now = SystemClock.now_ms();
    let cases = [
        ("OOLU100000", Lookup::Found, 200_000i64, Claim::Slot),
        ("OOLU200000", Lookup::Echo500, 200_000, Claim::Slot),
        ("OOLU300000", Lookup::NotFound, 200_000, Claim::Echo503),
        ("OOLU400000", Lookup::NotFound, 24 * 3_600_000, Claim::Slot),
        (
            "OOLU500000",
            Lookup::FoundQuotingPin,
            200_000,
            Claim::SlotIdQuotesPin,
        ),
        ("OOLU600000", Lookup::Echo500, 24 * 3_600_000, Claim::Slot),
    ];
    for (i, (prefix, lookup, age, claim)) in cases.iter().enumerate() {
        let c = container(prefix);
        let id = format!("PCS-{tag}-stranded-{i}");
        let body = notification(&id, &c).to_string();
        let n = parse_notification(&body, now, &["ECT-DELTA".to_string()]).unwrap();
        let keys = derive_keys(&n).unwrap();
        {
            let mut b = behaviour.lock().unwrap();
            b.lookups
                .insert(operation_key(&event_key_of(&id, &c), SLOT_CLAIM), *lookup);
            b.claims.insert(c.clone(), *claim);
        }
        let dead = Invocation {
            request_id: "inv-dead".into(),
            deadline_ms: now - age + 30_000,
        };
        let mut record = gate.config.new_record(
            &truck_slot::event(&n).expect("event"),
            &keys,
            &dead,
            now - age,
        );
        record.lease_until_ms = Some(now - age + 30_000);
        store.reserve(&record, now).await.unwrap();
        if *age >= ReconcilerConfig::default().claim_horizon_ms() {
            late.push(body);
        }
    }
    late
}

struct Aws {
    store: DynamoStore,
    moto: MotoStore,
    secret_arn: String,
}

async fn aws(base: &str) -> Aws {
    let moto = MotoStore::fresh(base).await;
    let secrets = aws_sdk_secretsmanager::Client::new(&sdk_config().await);
    let secret_arn = secrets
        .create_secret()
        .name(unique(&format!("{base}-token")))
        .secret_string(TOKEN)
        .send()
        .await
        .unwrap()
        .arn()
        .unwrap()
        .to_string();
    Aws {
        store: DynamoStore::new(
            moto.dynamo.clone(),
            moto.idempotency.clone(),
            moto.bookings.clone(),
        ),
        moto,
        secret_arn,
    }
}

/// Every message on the manual queue (their bodies).
async fn drain(queue_url: &str) -> Vec<String> {
    let sqs = sqs_client().await;
    let mut bodies = Vec::new();
    for _ in 0..10 {
        let out = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        if out.messages().is_empty() {
            break;
        }
        for m in out.messages() {
            bodies.push(m.body().unwrap_or("").to_string());
            sqs.delete_message()
                .queue_url(queue_url)
                .receipt_handle(m.receipt_handle().unwrap_or(""))
                .send()
                .await
                .unwrap();
        }
    }
    bodies
}

/// The `error` attribute of every record in the idempotency table.
async fn record_errors(table: &str) -> String {
    let out = dynamo_client()
        .await
        .scan()
        .table_name(table)
        .send()
        .await
        .unwrap();
    out.items()
        .iter()
        .filter_map(|item| item.get("error").and_then(|v| v.as_s().ok()).cloned())
        .collect::<Vec<_>>()
        .join("\n")
}

fn assert_terminal_got_the_secrets(seen: &[Seen]) {
    assert!(
        seen.iter()
            .any(|s| s.header("authorization") == Some(format!("Bearer {TOKEN}").as_str())),
        "the terminal never received the token"
    );
    assert!(
        seen.iter()
            .any(|s| String::from_utf8_lossy(&s.body).contains(PIN)),
        "the terminal never received the PIN"
    );
}

#[path = "no_secrets_in_logs/binaries.rs"]
mod binaries;

#[path = "no_secrets_in_logs/handlers.rs"]
mod handlers;

#[path = "no_secrets_in_logs/needles.rs"]
mod needles;
use needles::*;
