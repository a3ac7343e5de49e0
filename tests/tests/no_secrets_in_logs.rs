//! Secrets never reach a log line or an error message.
//!
//! The consumer and the reconciler run over notifications whose release PIN is `PIN-XYZZY-7731`,
//! with the terminal token `tok-PLUGH-0042` read from Secrets Manager (moto), against a hostile
//! terminal that echoes the request body and the `Authorization` header in its answers, and the
//! PIN and the token in every form a server may echo them ([`forms`]: any case, separators
//! dropped or changed, JSON `\u` escapes, percent-encoding, HTML references, hex, base64,
//! full-width). Every path runs: a claim committed, terminal 4xx and 5xx, 401, 422, a 2xx that is
//! not JSON, a 2xx whose slot id quotes the PIN, a 2xx whose equipment number is the PIN, an
//! answer for another container, poison bodies (not JSON, duplicate keys, a PIN-named duplicate
//! key, oversized, control characters, window ended, unknown terminal, a PIN-valued terminal, a
//! PIN-valued id with a trailing space, a number beyond 2^53), a fingerprint mismatch, a
//! duplicate, a terminal without key support, the consumer's lookup past the claim horizon, and
//! the reconciler's lookup (found, found with a slot id quoting the PIN, failing, not found then
//! claim, past retention with a failing lookup).
//!
//! 1. The library handlers with a subscriber capturing every log line of the process at TRACE
//!    (the gate, the AWS SDK, hyper, reqwest; text and JSON), plus the `Debug` of every report
//!    and the `error` attribute of every record.
//! 2. The real `consumer` and `reconciler` binaries under `cargo lambda watch` with
//!    `AWS_LAMBDA_LOG_LEVEL=TRACE`, their stdout and stderr captured.
//!
//! Neither secret may appear anywhere in any form: not in the logs, the records' `error`, the
//! manual items' `detail`, the EMF documents or the published metrics. Positive controls prove
//! the capture works and the secrets did flow: the logs hold the notification ids, TRACE lines
//! and EMF documents, the terminal received the PIN and the token, and the manual queue holds the
//! PIN in the original bodies (a person needs it).

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

const PIN: &str = "PIN-XYZZY-7731";
const TOKEN: &str = "tok-PLUGH-0042";
/// The distinctive parts, searched for on their own as well (a secret cut in half, or escaped,
/// still shows one of them); [`needles`] adds their base64 forms.
const NEEDLES: &[&str] = &[PIN, TOKEN, "XYZZY", "PLUGH"];

fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(ABC[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// `secret` in every form the hostile terminal echoes it: as sent, lower and upper case,
/// separators dropped or changed, JSON `\u` escapes (one character, every character),
/// percent-encoded (separators, every character), HTML numeric references, hex, base64 (standard
/// and URL-safe, at another alignment) and full-width.
fn forms(secret: &str) -> Vec<String> {
    let mut chars = secret.chars();
    let first = chars.next().unwrap_or('?');
    let rest: String = chars.collect();
    let fullwidth: String = secret
        .chars()
        .map(|c| match c {
            '!'..='~' => char::from_u32(u32::from(c) - 0x21 + 0xFF01).unwrap_or(c),
            c => c,
        })
        .collect();
    let url_safe = base64(format!("xy{secret}").as_bytes())
        .replace('+', "-")
        .replace('/', "_");
    vec![
        secret.to_string(),
        secret.to_lowercase(),
        secret.to_uppercase(),
        secret.replace('-', ""),
        secret.replace('-', " "),
        secret.replace('-', "_").to_lowercase(),
        format!("\\u{:04x}{rest}", u32::from(first)),
        secret
            .chars()
            .map(|c| format!("\\u{:04X}", u32::from(c)))
            .collect(),
        secret.replace('-', "%2D"),
        secret.bytes().map(|b| format!("%{b:02X}")).collect(),
        format!("&#{};{rest}", u32::from(first)),
        secret.bytes().map(|b| format!("{b:02x}")).collect(),
        base64(secret.as_bytes()),
        url_safe,
        fullwidth,
        // Issue 25's forms, a representative subset (every form runs through the in-process
        // consumer and reconciler in `integrations/truck-slot/tests/hostile_server.rs`): mixed
        // case in hex and base64, numeric references without `;`, a named dash entity, a
        // separator between every character, a split value.
        hex_of(&mixed_case(secret)),
        base64(mixed_case(secret).as_bytes()),
        secret
            .chars()
            .map(|c| format!("&#{}", u32::from(c)))
            .collect(),
        secret.replace('-', "&minus;"),
        format!(
            "{{\"first\":\"{}\",\"rest\":\"{}\"}}",
            &secret[..6],
            &secret[6..]
        ),
    ]
}

/// `Pin-xyzzy-7731`: the first character upper case, the rest lower.
fn mixed_case(secret: &str) -> String {
    let lower = secret.to_lowercase();
    let mut chars = lower.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

fn hex_of(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Every text in which the hostile terminal echoes both secrets, each in every form.
fn echoed_forms() -> String {
    let mut all = forms(PIN);
    all.extend(forms(TOKEN));
    all.join(" | ")
}

/// Every needle: the secrets in every form of [`forms`], their distinctive parts, and for the
/// secrets the base64 of each at the three alignments it can have inside a longer base64 text
/// (DynamoDB binary attributes travel as base64): the characters that encode only the secret's
/// bits. [`assert_clean`] also searches the distinctive parts in any case.
fn needles() -> Vec<String> {
    let mut all: Vec<String> = NEEDLES.iter().map(|n| n.to_string()).collect();
    all.extend(forms(PIN));
    all.extend(forms(TOKEN));
    for secret in [PIN, TOKEN] {
        for offset in 0..3usize {
            let mut bytes = vec![0u8; offset];
            bytes.extend_from_slice(secret.as_bytes());
            let encoded = base64(&bytes);
            let start = (offset * 8).div_ceil(6);
            let end = (bytes.len() * 8) / 6;
            all.push(encoded[start..end].to_string());
        }
    }
    all
}

// --- the capture --------------------------------------------------------------------------------

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Buffer {
    type Writer = Buffer;
    fn make_writer(&'a self) -> Buffer {
        self.clone()
    }
}

/// The two captures: `functions` is what the functions log at TRACE (every event of every
/// target at TRACE, through the functions' own filter `gate_lambda::logging::allowed`), as text and as
/// JSON; `everything` is every event at TRACE without that filter, as JSON.
#[derive(Clone)]
struct Capture {
    functions: Buffer,
    everything: Buffer,
}

/// Installs, once per process, the subscriber of [`Capture`] (the `log` crate's records go
/// through it too).
fn capture() -> Capture {
    static CAPTURE: OnceLock<Capture> = OnceLock::new();
    CAPTURE
        .get_or_init(|| {
            use tracing_subscriber::layer::SubscriberExt;
            use tracing_subscriber::util::SubscriberInitExt;
            use tracing_subscriber::Layer;
            let capture = Capture {
                functions: Buffer::default(),
                everything: Buffer::default(),
            };
            let allowed = || tracing_subscriber::filter::filter_fn(gate_lambda::logging::allowed);
            tracing_subscriber::registry()
                .with(
                    tracing_subscriber::fmt::layer()
                        .with_ansi(false)
                        .with_writer(capture.functions.clone())
                        .with_filter(allowed()),
                )
                .with(
                    tracing_subscriber::fmt::layer()
                        .json()
                        .with_writer(capture.functions.clone())
                        .with_filter(allowed()),
                )
                .with(
                    tracing_subscriber::fmt::layer()
                        .json()
                        .with_writer(capture.everything.clone()),
                )
                .with(tracing_subscriber::filter::LevelFilter::TRACE)
                .try_init()
                .expect("the only subscriber of this test process");
            capture
        })
        .clone()
}

fn assert_clean(what: &str, text: &str) {
    let lower = text.to_lowercase();
    for part in ["xyzzy", "plugh"] {
        if let Some(at) = lower.find(part) {
            let from = at.saturating_sub(300);
            panic!(
                "{what} holds {part:?} (any case): …{}…",
                text.get(from..(at + 300).min(text.len())).unwrap_or(text)
            );
        }
    }
    for needle in needles() {
        if let Some(at) = text.find(&needle) {
            let from = text[..at].rfind('\n').map_or(0, |i| i + 1);
            let to = text[at..].find('\n').map_or(text.len(), |i| at + i);
            let line = &text[from..to];
            panic!(
                "{what} holds {needle:?}: {}",
                &line[..line.len().min(2_000)]
            );
        }
    }
}

/// Every line of the unfiltered capture that holds a secret comes from another crate below
/// `INFO` (the AWS SDK printing a request or response body, `lambda_runtime` printing the
/// event): exactly what the functions' filter drops. Returns how many such lines there were.
fn assert_only_filtered_lines_hold_secrets(everything: &str) -> usize {
    let needles = needles();
    let mut held = 0;
    for line in everything.lines() {
        if !needles.iter().any(|n| line.contains(n.as_str())) {
            continue;
        }
        held += 1;
        let event: Value = serde_json::from_str(line).unwrap_or(Value::Null);
        let target = event["target"].as_str().unwrap_or("?");
        let level: tracing::Level = event["level"]
            .as_str()
            .and_then(|l| l.parse().ok())
            .unwrap_or(tracing::Level::ERROR);
        assert!(
            !gate_lambda::logging::allowed_target(target, level),
            "a secret in a line the functions would log ({target}, {level}): {}",
            &line[..line.len().min(2_000)]
        );
    }
    held
}

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
    /// A slot id in the default format that is hex of the PIN in mixed case (issue 25).
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
    // Reasons that could quote a PIN-valued field (issue 13): none quotes body text.
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

// --- 1. the library handlers ---------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_handlers_log_no_secret_at_trace() {
    let logs = capture();
    tracing::info!("capture check {}", "library");
    let aws = aws("logs-lib").await;
    let behaviour = Arc::new(Mutex::new(Behaviour::default()));
    let terminal = support::spawn(hostile(behaviour.clone())).await;

    // Wired as `truck_slot::lambda::build` wires it: the token from Secrets Manager.
    let secrets = aws_sdk_secretsmanager::Client::new(&sdk_config().await);
    let mut terminal_config = HttpTerminalConfig::new(terminal.base_url.clone());
    terminal_config.token = Some(fetch_api_token(&secrets, &aws.secret_arn).await.unwrap());
    let http = Arc::new(HttpTerminal::new(terminal_config).unwrap());
    let manual = Arc::new(SqsManualQueue::new(
        sqs_client().await,
        aws.moto.manual_url.clone(),
    ));
    let gate = Gate {
        config: GateConfig::new("logs-lib"),
        store: Arc::new(aws.store.clone()),
        integration: Arc::new(truck_slot::TruckSlot::new(
            http.clone(),
            vec!["ECT-DELTA".into()],
        )),
        manual: manual.clone(),
        clock: Arc::new(SystemClock),
    };
    let invocation = |id: &str| Invocation {
        request_id: id.into(),
        deadline_ms: SystemClock.now_ms() + 120_000,
    };
    let mut reports = String::new();

    // Records a dead worker left; the consumer gets those past the claim horizon again.
    let late = strand(&gate, &aws.store, "lib", &behaviour).await;
    assert_eq!(late.len(), 2);

    // The consumer, every path.
    let mut bodies = consumer_bodies("lib", &behaviour);
    bodies.extend(late);
    let event: SqsEvent = serde_json::from_value(sqs_event(&bodies)).unwrap();
    let report = gate.handle_batch(event, &invocation("inv-1")).await;
    reports.push_str(&format!("{report:?}\n"));
    assert!(
        report
            .records
            .iter()
            .any(|r| matches!(r.outcome, gate::consumer::RecordOutcome::Committed { .. })),
        "{report:?}"
    );

    // A terminal without Idempotency-Key support: manual routing.
    let mut no_key = gate.clone();
    no_key.config.server_supports_idempotency_key = false;
    let body = notification("PCS-lib-nokey", &container("CSQU305438")).to_string();
    let event: SqsEvent = serde_json::from_value(sqs_event(&[body])).unwrap();
    let report = no_key.handle_batch(event, &invocation("inv-2")).await;
    reports.push_str(&format!("{report:?}\n"));

    // The reconciler over the stranded records.
    let run = gate
        .reconcile(
            &aws.store,
            &ReconcilerConfig::default(),
            &invocation("inv-rec"),
        )
        .await;
    reports.push_str(&format!("{run:?}\n"));
    // Of six stranded records, the consumer finished the one past retention without a slot;
    // the reconciler re-sends the four inside the claim horizon under their keys (the re-send is
    // the lookup: their lookup behaviours are never asked) and commits two, retries one (a claim
    // that fails with an echo), refuses a slot id quoting the PIN (issue 25: a person gets it,
    // the id named by its keyed digest), and routes the one past retention whose lookup fails
    // with an echo. It also takes the three records the consumer released after a transient
    // answer (503, 401, not JSON): the reconciler selects by lease end (issue 24), and they fail
    // again the same way.
    assert_eq!(
        (run.examined, run.reconciled, run.manual, run.transient),
        (5 + 3, 2, 2, 1 + 3),
        "{run:?}"
    );

    // Positive controls.
    assert_terminal_got_the_secrets(&terminal.seen());
    let manual_bodies = drain(&aws.moto.manual_url).await;
    assert!(
        manual_bodies.iter().any(|b| b.contains(PIN)),
        "the manual queue keeps the original body for the person booking by hand"
    );
    let text = String::from_utf8_lossy(&logs.functions.0.lock().unwrap()).into_owned();
    let everything = String::from_utf8_lossy(&logs.everything.0.lock().unwrap()).into_owned();
    for expected in [
        "capture check library",
        "MSKU1234565",
        "body rejected",
        // `Gate::reconcile` is one sweep; the Lambda runner logs the run (the binaries' test).
        "reconciler sweep finished",
    ] {
        assert!(text.contains(expected), "the capture lacks {expected:?}");
    }
    assert!(
        everything.contains("\"level\":\"TRACE\""),
        "TRACE was captured"
    );

    // The checks.
    assert_clean("the logs", &text);
    let filtered = assert_only_filtered_lines_hold_secrets(&everything);
    eprintln!("{filtered} library log lines below INFO held a secret and are filtered");
    assert_clean("the reports", &reports);
    assert_clean(
        "the records' errors",
        &record_errors(&aws.moto.idempotency).await,
    );
    let details: Vec<String> = manual_bodies
        .iter()
        .map(|b| {
            serde_json::from_str::<Value>(b).unwrap()["detail"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert_clean("the manual queue's details", &details.join("\n"));
    let _ = &aws.moto.bookings;
}

// --- 2. the binaries under cargo lambda watch ----------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_binaries_log_no_secret_at_trace() {
    let aws = aws("logs-bin").await;
    let behaviour = Arc::new(Mutex::new(Behaviour::default()));
    let terminal = support::spawn(hostile(behaviour.clone())).await;

    let dir = std::env::temp_dir().join(unique("no-secrets-in-logs"));
    std::fs::create_dir_all(&dir).unwrap();
    // Records a dead worker left (the reconciler's), those past the claim horizon delivered
    // again to the consumer (its lookup path).
    let gate = Gate {
        config: GateConfig::new("logs-bin"),
        store: Arc::new(aws.store.clone()),
        integration: Arc::new(truck_slot::TruckSlot::new(
            Arc::new(
                HttpTerminal::new(HttpTerminalConfig::new(terminal.base_url.clone())).unwrap(),
            ),
            vec!["ECT-DELTA".into()],
        )),
        manual: Arc::new(gate::manual::MemoryManualQueue::new()),
        clock: Arc::new(SystemClock),
    };
    let late = strand(&gate, &aws.store, "bin", &behaviour).await;
    let consumer_event = dir.join("consumer.json");
    let mut bodies = consumer_bodies("bin", &behaviour);
    bodies.extend(late);
    std::fs::write(&consumer_event, sqs_event(&bodies).to_string()).unwrap();
    let metrics_event = workspace_root().join("events/scheduled-metrics.json");
    let schedule_event = dir.join("reconcile.json");
    std::fs::write(&schedule_event, "{\"job\":\"reconcile\"}").unwrap();

    let have_cargo_lambda = Command::new("cargo")
        .args(["lambda", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        have_cargo_lambda,
        "cargo-lambda is not on PATH: run `make test`, or put .venv/bin on PATH"
    );
    let mut watch = WatchCommand::new();
    let port = watch.port();
    watch
        .against_moto()
        .consumer_of(&aws.moto, "logs-bin", &terminal.base_url)
        .json_logs(Some("TRACE"))
        .command()
        .env("TERMINAL_API_TOKEN_SECRET_ARN", &aws.secret_arn)
        .env_remove("TERMINAL_API_TOKEN")
        .env_remove("LOG_SENSITIVE_BODIES");
    let watch = watch.spawn_logged(&dir);

    let file = consumer_event.clone();
    let answer = tokio::task::spawn_blocking(move || invoke(port, "consumer", &file))
        .await
        .unwrap();
    let failures = answer["batchItemFailures"].as_array().unwrap().len();
    assert!(failures >= 3, "503, 401, not JSON are retried: {answer}");

    let file = schedule_event.clone();
    let run = tokio::task::spawn_blocking(move || invoke(port, "reconciler", &file))
        .await
        .unwrap();
    assert_eq!(
        (
            &run["examined"],
            &run["reconciled"],
            &run["manual"],
            &run["transient"]
        ),
        // The scheduled run sweeps four times (at 0, 15, 30 and 45 s, issue 24). The first as in
        // `the_handlers_log_no_secret_at_trace`: two re-sends committed, a refused slot id and a
        // failing lookup past retention to a person, four records retried (one claim and the
        // three the consumer released after a transient answer); each later sweep retries the
        // same four again.
        (&json!(8 + 3 * 4), &json!(2), &json!(2), &json!(4 + 3 * 4)),
        "{run}"
    );
    // The metrics function publishes the store signals (PutMetricData to moto's CloudWatch).
    let published =
        tokio::task::spawn_blocking(move || invoke(port, "metrics-publisher", &metrics_event))
            .await
            .unwrap();

    let (stdout, stderr) = watch.stop().await;
    let text = format!("{stdout}\n{stderr}");

    // Positive controls: the functions' own JSON lines at TRACE were captured, the token came
    // from Secrets Manager and reached the terminal, the PIN went to the terminal and the queue.
    for expected in [
        "terminal API token read from Secrets Manager",
        "record processed",
        "MSKU1234565",
        "body rejected",
        "reconciler run finished",
        "TRACE logging: other crates are capped at INFO",
    ] {
        assert!(
            text.contains(expected),
            "the capture lacks {expected:?}; stdout:\n{}\nstderr:\n{}",
            &stdout[..stdout.len().min(4000)],
            &stderr[..stderr.len().min(4000)]
        );
    }
    assert!(
        !text.contains("raw JSON event received from Lambda"),
        "lambda_runtime's TRACE payload line must be filtered"
    );
    assert_terminal_got_the_secrets(&terminal.seen());
    let manual_bodies = drain(&aws.moto.manual_url).await;
    assert!(manual_bodies.iter().any(|b| b.contains(PIN)));

    assert_clean("the binaries' stdout and stderr", &text);
    assert_clean("the invoke answers", &format!("{answer} {run} {published}"));
    let errors = record_errors(&aws.moto.idempotency).await;
    assert!(
        errors.contains("terminal answered 400")
            && errors.contains("failed (lookup: terminal answered 500"),
        "the records' errors describe the answers in our words (status, type, length, digest): \
         {errors}"
    );
    assert_clean("the records' errors", &errors);
    let details: Vec<String> = manual_bodies
        .iter()
        .map(|b| {
            serde_json::from_str::<Value>(b).unwrap()["detail"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert_clean("the manual queue's details", &details.join("\n"));

    // The EMF documents (on stdout) and the published metrics. The counters' documents: the
    // consumer's one per invocation; the reconciler's one per sweep (four), written as each sweep
    // ends. Their `Reconciled` values add up to the run's.
    let emf: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("_aws").is_some())
        .collect();
    let counters: Vec<&Value> = emf
        .iter()
        .filter(|v| v.get("Reconciled").is_some())
        .collect();
    assert_eq!(
        counters.len(),
        1 + 4,
        "the consumer's document and one per sweep: {emf:?}"
    );
    assert_eq!(
        counters
            .iter()
            .map(|v| v["Reconciled"].as_i64().unwrap_or_default())
            .sum::<i64>(),
        run["reconciled"].as_i64().unwrap(),
        "{emf:?}"
    );
    assert_clean("the EMF documents", &format!("{emf:?}"));
    let cloudwatch = aws_sdk_cloudwatch::Client::new(&sdk_config().await);
    let metrics = cloudwatch
        .list_metrics()
        .namespace("ExactlyOnceGate")
        .send()
        .await
        .unwrap();
    assert!(
        !metrics.metrics().is_empty(),
        "the metrics function published"
    );
    assert_clean("the published metrics", &format!("{metrics:?}"));
    let _ = std::fs::remove_dir_all(&dir);
}
