//! The promise kept by construction: a hostile terminal on loopback echoes the release PIN and
//! the API token, in every form a server may echo them ([`forms`]), through every kind of
//! answer ([`Kind`]): one mode per (form, kind), [`MODES`] in all. The real consumer handler, then
//! the real reconciler (a re-send within the claim horizon: the server's replay; then lookups past
//! it), run over one notification per mode through the real HTTP client, with every log event of
//! the gate captured at TRACE, in the text and the JSON format, and at INFO.
//!
//! After each phase, the decoder (`support/decoder.rs`, written apart from the gate's scrubber:
//! NFKC folding, separators removed, escapes and entities decoded, hex and base64 at every
//! alignment, UTF-16 and gzip readings, fragments) searches the logs, both tables (every record
//! but an `in_flight` record's stored request; every booking), the manual queue (every item but
//! its original body) and every report the metrics are made from. The right value: the PIN and
//! the token are found nowhere else. Positive controls: the decoder finds every form it is fed;
//! the terminal received the PIN and the token; the stored request of each `in_flight` record and
//! the original body of each manual item hold the PIN (the two places `docs/SECURITY.md` names);
//! a finished record holds none; every kind took the path it is for.
//!
//! The real binaries run a representative subset of these forms under `cargo lambda watch`
//! (`tests/tests/no_secrets_in_logs.rs`).

#[path = "support/decoder.rs"]
mod decoder;
mod support;

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use base64::Engine;
use decoder::Needle;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation, RecordOutcome};
use gate::manual::{ManualReason, MemoryManualQueue};
use gate::reconciler::ReconcilerConfig;
use gate::record::RecordStatus;
use gate::store::memory::MemoryStore;
use serde_json::{json, Value};
use support::{raw, Answer, Seen};
use truck_slot::terminal::{ApiToken, HttpTerminal, HttpTerminalConfig};

/// 2026-06-01T06:00:00Z; the windows are two days later.
const T0: i64 = 1_780_293_600_000;
const PIN: &str = "RLS-73203948";
const TOKEN: &str = "tok-PLUGH-58194672";
/// The number of modes: every form through every kind.
const MODES: usize = FORMS * KINDS.len();
const FORMS: usize = 36;
/// The 1 MB form: the client reads 64 KiB of it, so a JSON answer is cut (not JSON: transient).
const BIG: usize = 32;

/// What the terminal does with a mode's form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `201` whose slot id is the form.
    Claim201Id,
    /// `201` with an innocent slot id, the form in other fields and the request echoed.
    Claim201Fields,
    /// `201` with an innocent slot id for "another container": the form.
    Claim201Subject,
    /// `201` that is not JSON: the form.
    Claim201NotJson,
    /// `303` with the form in `Location` (percent-encoded) and the body.
    Claim303,
    /// `400` problem whose title and detail are the form.
    Claim400,
    /// `401` whose body is the form.
    Claim401,
    /// `409 idempotency_mismatch` whose detail is the form.
    Claim409Mismatch,
    /// `409` in flight whose detail is the form.
    Claim409InFlight,
    /// `422` whose body is the form.
    Claim422,
    /// `500` HTML whose body is the form.
    Claim500,
    /// `504` first, then the replay (the reconciler's re-send): `201` innocent id, form in fields.
    Replay201Fields,
    /// `504` first, then the replay: `201` whose slot id is the form.
    Replay201Id,
    /// Transient until past the horizon, then the lookup: `200` whose slot id is the form.
    Lookup200Id,
    /// ... `200` with an innocent slot id and the form in fields.
    Lookup200Fields,
    /// ... `200` for "another container": the form.
    Lookup200Subject,
    /// ... `500` whose body is the form (past the horizon: a person).
    Lookup500,
    /// ... `404` whose detail is the form (past the horizon: a person).
    Lookup404,
}

const KINDS: [Kind; 18] = [
    Kind::Claim201Id,
    Kind::Claim201Fields,
    Kind::Claim201Subject,
    Kind::Claim201NotJson,
    Kind::Claim303,
    Kind::Claim400,
    Kind::Claim401,
    Kind::Claim409Mismatch,
    Kind::Claim409InFlight,
    Kind::Claim422,
    Kind::Claim500,
    Kind::Replay201Fields,
    Kind::Replay201Id,
    Kind::Lookup200Id,
    Kind::Lookup200Fields,
    Kind::Lookup200Subject,
    Kind::Lookup500,
    Kind::Lookup404,
];

fn container(i: usize) -> String {
    let owner = format!("MSKU{:06}", 100_000 + i);
    let digit = truck_slot::iso6346::check_digit(&owner).expect("10 characters");
    format!("{owner}{digit}")
}

/// Log capture: the gate's own filter (`gate_lambda::logging::allowed`, as the functions install it) at
/// TRACE in text and JSON, and at INFO in text.
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

fn capture() -> [Buffer; 3] {
    use tracing_subscriber::filter::LevelFilter;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let buffers = [Buffer::default(), Buffer::default(), Buffer::default()];
    let allowed = || tracing_subscriber::filter::filter_fn(gate_lambda::logging::allowed);
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(buffers[0].clone())
                .with_filter(allowed()),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .json()
                .with_writer(buffers[1].clone())
                .with_filter(allowed()),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(buffers[2].clone())
                .with_filter(allowed())
                .with_filter(LevelFilter::INFO),
        )
        .with(LevelFilter::TRACE)
        .try_init()
        .expect("the only subscriber of this test process");
    buffers
}

struct World {
    gate: Gate,
    store: Arc<MemoryStore>,
    manual: Arc<MemoryManualQueue>,
    clock: Arc<ManualClock>,
    logs: [Buffer; 3],
    /// How far each log was searched already.
    searched: [usize; 3],
    seen_lines: std::collections::HashSet<String>,
    reports: Vec<String>,
}

impl World {
    fn invocation(&self, id: &str) -> Invocation {
        Invocation {
            request_id: id.into(),
            deadline_ms: self.clock.now_ms() + 30_000,
        }
    }

    /// Searches everything the gate wrote since the last phase, and both tables and the manual
    /// queue whole: the secrets only where they may be. Returns how many texts were searched.
    fn assert_clean(&mut self, phase: &str, needles: &[Needle]) -> usize {
        let mut searched = 0;
        for (i, log) in self.logs.iter().enumerate() {
            let bytes = log.0.lock().unwrap().clone();
            let text = String::from_utf8_lossy(&bytes[self.searched[i]..]).into_owned();
            self.searched[i] = bytes.len();
            for line in text.lines() {
                searched += 1;
                // A line seen before (the INFO capture repeats the TRACE one's) once.
                if !self.seen_lines.insert(line.to_string()) {
                    continue;
                }
                if let Some(why) = decoder::find(line, needles) {
                    panic!("{phase}: log {i} holds {why}: {line}");
                }
            }
        }
        for report in &self.reports {
            assert_eq!(decoder::find(report, needles), None, "{phase}: {report}");
        }
        searched += self.reports.len();
        self.reports.clear();
        for record in self.store.records() {
            let kept = format!(
                "{record:?} {:?} {:?} {:?} {:?}",
                record.error, record.effect_id, record.effect_ids, record.labels
            );
            assert_eq!(
                decoder::find(&kept, needles),
                None,
                "{phase}: record {kept}"
            );
            // The stored request: the PIN while `in_flight` (the place it lives), none after.
            let request = lossy(&record.request);
            if record.status == RecordStatus::InFlight {
                assert!(
                    decoder::find(&request, &needles[..1]).is_some(),
                    "{phase}: the in_flight request holds the PIN"
                );
            } else {
                assert_eq!(decoder::find(&request, needles), None, "{phase}: {kept}");
            }
            assert_eq!(
                decoder::find(&request, &needles[1..]),
                None,
                "{phase}: the token is never stored"
            );
            searched += 2;
        }
        for booking in self.store.business_rows() {
            let text = format!("{booking:?}");
            assert_eq!(decoder::find(&text, needles), None, "{phase}: {text}");
            searched += 1;
        }
        for item in self.manual.items() {
            let kept = format!(
                "{:?} {} {:?} {} {:?}",
                item.reason, item.detail, item.event_key, item.message_id, item.original_body_cut
            );
            assert_eq!(decoder::find(&kept, needles), None, "{phase}: item {kept}");
            assert!(
                decoder::find(&item.original_body, &needles[..1]).is_some(),
                "{phase}: the original body holds the PIN (a person books with it)"
            );
            assert_eq!(
                decoder::find(&item.original_body, &needles[1..]),
                None,
                "{phase}: never the token"
            );
            searched += 2;
        }
        searched
    }
}

fn notification(i: usize) -> String {
    json!({
        "notificationId": format!("PCS-H-{i}"),
        "equipment_number": container(i),
        "preferred_window": {"start": "2026-06-03T08:00:00Z", "end": "2026-06-03T10:00:00Z"},
        "terminal": "ECT-DELTA",
        "pin": PIN,
        "gross_mass_kg": 25000
    })
    .to_string()
}

/// The decoder finds every form of both secrets, through every kind's wrapping: the search is
/// at least as strong as the hostile terminal.
#[test]
fn the_decoder_finds_every_form() {
    let needles = [Needle::new("PIN", PIN), Needle::new("token", TOKEN)];
    for n in 0..FORMS {
        for (needle, secret) in needles.iter().zip([PIN, TOKEN]) {
            let request = json!({"pin": secret}).to_string();
            let bytes = form(n, secret, request.as_bytes());
            // Gzip is binary: a text can carry it only encoded (base64), never as lossy UTF-8.
            let text = if n == 35 { b64(&bytes) } else { lossy(&bytes) };
            let wrapped = json!({"detail": text}).to_string();
            for t in [&text, &wrapped] {
                assert!(
                    decoder::find(t, std::slice::from_ref(needle)).is_some(),
                    "form {n} of {secret}: {}",
                    t.chars().take(200).collect::<String>()
                );
            }
        }
    }
    // Not every text: a clean one, digests and numbers.
    for clean in [
        "terminal answered 503 (text/html, 951 bytes, keyed SHA-256 d458003a238725a6)",
        "MSKU1000005 S-F12 2026-06-03T08:00:00Z 1780293600000",
    ] {
        assert_eq!(decoder::find(clean, &needles), None, "{clean}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_terminal_gets_no_secret_into_logs_tables_or_the_manual_queue() {
    const { assert!(MODES >= 429, "at least the issue's 429 modes") };
    let logs = capture();
    let state = Arc::new(Mutex::new(Terminal::default()));
    let terminal = support::spawn(hostile(state.clone())).await;
    let mut config = HttpTerminalConfig::new(terminal.base_url.clone());
    config.token = Some(ApiToken::new(TOKEN));
    let http = HttpTerminal::new(config).expect("a client");
    let clock = Arc::new(ManualClock::new(T0));
    let store = Arc::new(MemoryStore::new());
    let manual = Arc::new(MemoryManualQueue::new());
    let mut w = World {
        gate: Gate {
            config: GateConfig::new("hostile"),
            store: store.clone(),
            integration: Arc::new(truck_slot::TruckSlot::new(
                Arc::new(http),
                vec!["ECT-DELTA".into()],
            )),
            manual: manual.clone(),
            clock: clock.clone(),
        },
        store,
        manual,
        clock,
        logs,
        searched: [0; 3],
        seen_lines: std::collections::HashSet::new(),
        reports: Vec::new(),
    };
    let needles = [Needle::new("PIN", PIN), Needle::new("token", TOKEN)];
    let mut bodies = Vec::new();
    {
        let mut t = state.lock().unwrap();
        for (k, kind) in KINDS.iter().enumerate() {
            for n in 0..FORMS {
                let i = k * FORMS + n;
                t.modes.insert(container(i), (n, *kind));
                bodies.push((format!("m-{i}"), notification(i)));
            }
        }
    }
    assert_eq!(bodies.len(), MODES);

    // Phase 1: the consumer, every mode's claim.
    let mut outcomes: HashMap<String, RecordOutcome> = HashMap::new();
    for chunk in bodies.chunks(10) {
        let records: Vec<(&str, &str)> = chunk
            .iter()
            .map(|(m, b)| (m.as_str(), b.as_str()))
            .collect();
        let report = w
            .gate
            .handle_batch(
                gate_testkit::sqs_event(&records),
                &w.invocation("consumer-1"),
            )
            .await;
        w.reports.push(format!("{report:?}"));
        for (r, (m, _)) in report.records.iter().zip(chunk) {
            outcomes.insert(m.clone(), r.outcome.clone());
        }
    }
    let texts_1 = w.assert_clean("consumer", &needles);

    // Every claim kind took its path.
    let outcome = |k: usize, n: usize| &outcomes[&format!("m-{}", k * FORMS + n)];
    for (k, kind) in KINDS.iter().enumerate() {
        for n in 0..FORMS {
            let o = outcome(k, n);
            let json_kinds = [
                Kind::Claim201Id,
                Kind::Claim201Fields,
                Kind::Claim201Subject,
                Kind::Claim409Mismatch,
            ];
            let ok = match kind {
                _ if n == BIG && json_kinds.contains(kind) => matches!(o, RecordOutcome::Retry(_)),
                Kind::Claim201Id => {
                    matches!(o, RecordOutcome::Manual(ManualReason::ServerAnswerInvalid))
                }
                Kind::Claim201Fields => matches!(o, RecordOutcome::Committed { .. }),
                Kind::Claim201Subject
                | Kind::Claim409Mismatch
                | Kind::Claim422
                | Kind::Claim400 => matches!(o, RecordOutcome::Manual(_)),
                _ => matches!(o, RecordOutcome::Retry(_)),
            };
            assert!(ok, "{kind:?} form {n}: {o:?}");
        }
    }

    // Phase 2: past the lease, within the claim horizon: the reconciler re-sends each stranded
    // record under its key (the replays).
    // One page per shard: the memory store's InFlight cursor is the last record's pk, and a page
    // whose last record the run finished ends the shard's scan (`gate::store::memory::index`),
    // which would leave records of this test unexamined (DynamoDB's cursor does not depend on
    // the item still being in the index).
    let config = ReconcilerConfig {
        page_size: MODES,
        ..ReconcilerConfig::default()
    };
    w.clock.advance_ms(600_000);
    reconcile_all(&mut w, &config, "rec-2").await;
    let texts_2 = w.assert_clean("reconciler re-send", &needles);

    // Phase 3: past the claim horizon: lookups; failing and not-found ones go to a person.
    w.clock.set_ms(T0 + 23 * 3_600_000 + 600_000);
    reconcile_all(&mut w, &config, "rec-3").await;
    let phase3 = w.reports.clone();
    let texts_3 = w.assert_clean("reconciler lookup", &needles);

    // Where each lookup and replay kind ended.
    let records = w.store.records();
    let status_of = |k: usize, n: usize| {
        let c = container(k * FORMS + n);
        records
            .iter()
            .find(|r| r.labels.get("container").map(String::as_str) == Some(c.as_str()))
            .map(|r| ((r.status, r.effect_id.clone()), r.error.clone()))
            .expect("a record per mode")
    };
    for (k, kind) in KINDS.iter().enumerate() {
        for n in 0..FORMS {
            let ((status, slot_id), error) = status_of(k, n);
            let cut = [
                Kind::Replay201Fields,
                Kind::Lookup200Fields,
                Kind::Replay201Id,
                Kind::Lookup200Id,
                Kind::Lookup200Subject,
            ];
            let want = match kind {
                // Cut, not JSON (a `409` without its problem type: in flight): transient until
                // the horizon, then a person.
                _ if n == BIG
                    && (cut.contains(kind)
                        || [
                            Kind::Claim201Id,
                            Kind::Claim201Fields,
                            Kind::Claim201Subject,
                            Kind::Claim409Mismatch,
                        ]
                        .contains(kind)) =>
                {
                    Some((RecordStatus::Manual, None))
                }
                Kind::Replay201Fields => Some((RecordStatus::Committed, Some(format!("S-R{n}")))),
                Kind::Lookup200Fields => Some((RecordStatus::Committed, Some(format!("S-L{n}")))),
                Kind::Claim201Fields => Some((RecordStatus::Committed, Some(format!("S-F{n}")))),
                Kind::Replay201Id | Kind::Lookup200Id | Kind::Lookup200Subject => {
                    Some((RecordStatus::Failed, None))
                }
                Kind::Lookup500 | Kind::Lookup404 => Some((RecordStatus::Manual, None)),
                _ => None,
            };
            if let Some(want) = want {
                if (status, slot_id.clone()) != want {
                    let c = container(k * FORMS + n);
                    let key = state
                        .lock()
                        .unwrap()
                        .keys
                        .iter()
                        .find(|(_, v)| **v == c)
                        .map(|(k, _)| k.clone())
                        .unwrap_or_default();
                    let seen: Vec<String> = terminal
                        .seen()
                        .iter()
                        .filter(|s| lossy(&s.body).contains(&c) || s.uri.contains(&key))
                        .map(|s| format!("{} {}", s.method, s.uri))
                        .collect();
                    panic!("{kind:?} form {n}: {status:?} {slot_id:?} {error:?}, want {want:?}; {seen:?}; {phase3:?}");
                }
            }
        }
    }

    // The capture worked: every log holds the gate's lines (the TRACE capture at least the INFO
    // one's; other crates' lines below INFO are what `gate_lambda::logging::allowed` drops).
    let sizes: Vec<usize> = w.logs.iter().map(|l| l.0.lock().unwrap().len()).collect();
    assert!(sizes.iter().all(|n| *n > 10_000), "{sizes:?}");
    assert!(
        sizes[0] >= sizes[2],
        "TRACE {} vs INFO {}",
        sizes[0],
        sizes[2]
    );

    // The terminal received both secrets: the test's secrets did flow.
    let seen = terminal.seen();
    assert!(seen.iter().any(|s| lossy(&s.body).contains(PIN)));
    assert!(seen
        .iter()
        .any(|s| s.header("authorization") == Some(&format!("Bearer {TOKEN}"))));
    let gets = seen.iter().filter(|s| s.method == "GET").count();
    assert!(gets >= 5 * FORMS, "{gets} lookups");
    eprintln!(
        "{MODES} modes; searched {texts_1} + {texts_2} + {texts_3} texts; {} records, {} \
         bookings, {} manual items",
        w.store.records().len(),
        w.store.business_rows().len(),
        w.manual.items().len()
    );
}

async fn reconcile_all(w: &mut World, config: &ReconcilerConfig, id: &str) {
    for run in 0..40 {
        let report = w
            .gate
            .reconcile(
                w.store.as_ref(),
                config,
                &w.invocation(&format!("{id}-{run}")),
            )
            .await;
        let done = report.examined == 0 || !report.left_for_next_run;
        w.reports.push(format!("{report:?}"));
        if done {
            break;
        }
    }
}

#[path = "hostile_server/terminal.rs"]
mod terminal;
use terminal::*;

#[path = "hostile_server/forms.rs"]
mod forms;
use forms::*;
