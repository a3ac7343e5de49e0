//! The runbook cases every integration's gatectl passes, written once over a [`Fixture`] (the
//! integration's gatectl [`Stack`], its server on loopback, an event body) and instantiated per
//! integration by [`runbooks!`]: a stranded record finished from the server, a write refused
//! while the lease is live, a cancel, a multi-effect key, `reconcile KEY`. Texts and JSON keys
//! are asserted in the integration's own words ([`Words`]).
//!
//! Each case runs on a [`Backend`]: DynamoDB (moto) or PostgreSQL (a fresh schema of the server
//! `scripts/with-postgres.sh` starts), the store opened as `gatectl` opens it
//! ([`gatectl::open_store`], from the variables the stack's functions read); SQS is moto's.
//!
//! Time is a `ManualClock` at 2026-06-01T06:00Z.

use std::sync::Arc;

use gate::clock::{Clock, ManualClock};
use gate::consumer::{derive_keys, Gate, Invocation};
use gate::integration::Parsed;
use gate::record::{IdempotencyRecord, RecordStatus};
use gate::store::{OperatorStore, Reservation};
use gate::Integration;
use gate_dynamo::sqs::SqsManualQueue;
use gate_postgres::PostgresStore;
use gatectl::ctl::{Action, Confirm, Ctl, Output, Yes};
use gatectl::error::{exit, CtlError};
use gatectl::targets::Targets;
use gatectl::{Stack, Words};
use integration_tests::{fresh_queue, fresh_store, sdk_config, sqs_client, unique};
use serde_json::{json, Value};

#[path = "kit_cancel_show_reconcile.rs"]
mod cancel_show_reconcile;
pub use cancel_show_reconcile::*;

/// 2026-06-01T06:00:00Z.
pub const T0: i64 = 1_780_293_600_000;

/// One integration under the runbooks: its gatectl, its server, its events.
pub trait Fixture: Sized + 'static {
    /// The integration's gatectl.
    type Stack: Stack;

    /// Its gatectl's [`Stack`].
    fn stack() -> Self::Stack;

    /// Starts its server on loopback, aging stored keys on `clock`; returns the fixture (which
    /// keeps the server running) and the integration's own variables that point at it.
    async fn start(clock: Arc<ManualClock>) -> (Self, Vec<(&'static str, String)>);

    /// The integration with a client of the server (as its `Stack::connect` builds it).
    fn integration(&self) -> Arc<dyn Integration>;

    /// The body of event number `n` (distinct `n`: distinct events).
    fn body(&self, n: u32) -> String;

    /// What a person types to `show` event `n` other than its key (truck-slot: the
    /// notificationId; job-client: the job id).
    fn source_id(&self, n: u32) -> String;

    /// A secret the stored request holds and gatectl must never print, if the body has one.
    fn secret(&self) -> Option<&'static str>;

    /// Effects the server made so far.
    fn effects_made(&self) -> usize;

    /// Whether the server has a lookup by key (`Integration::lookup_by_key`). Without one,
    /// `lookup` and `finish` from the server are refused and a person finishes a stranded record
    /// with the effect id the server's own tools show. Default: it has.
    fn has_lookup(&self) -> bool {
        true
    }
}

/// The operator's answer "no".
pub struct No;

impl Confirm for No {
    fn confirm(&mut self, _plan: &str) -> bool {
        false
    }
}

/// Where the records live in a case. (Each test binary compiles the kit and names one backend:
/// `runbooks.rs` DynamoDB, `runbooks_postgres.rs` PostgreSQL.)
#[allow(dead_code)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Fresh DynamoDB tables on moto.
    DynamoDb,
    /// A fresh, migrated schema on the PostgreSQL server of `GATE_TEST_DATABASE_URL`.
    Postgres,
}

impl Backend {
    /// The variables that select a fresh store of this backend for case `name`.
    async fn variables(self, name: &str) -> Vec<(&'static str, String)> {
        match self {
            Self::DynamoDb => {
                let store = fresh_store(name).await;
                vec![
                    ("IDEMPOTENCY_TABLE", store.idempotency_table().to_string()),
                    ("BOOKINGS_TABLE", store.business_table().to_string()),
                ]
            }
            Self::Postgres => {
                let url = std::env::var("GATE_TEST_DATABASE_URL").unwrap_or_else(|_| {
                    panic!("set GATE_TEST_DATABASE_URL (scripts/with-postgres.sh starts a server)")
                });
                let schema = unique(&format!("gc_{name}"))
                    .to_ascii_lowercase()
                    .replace(|c: char| !c.is_ascii_alphanumeric(), "_");
                let mut schema = format!("s{schema}");
                schema.truncate(63);
                let config =
                    gate_postgres::PostgresConfig::new(&url, 2).with_schema(schema.clone());
                let store = PostgresStore::with_config(&config).expect("store");
                store.migrate().await.expect("migrate");
                vec![
                    ("STORE", "postgres".to_string()),
                    ("DATABASE_URL", url),
                    ("DATABASE_SCHEMA", schema),
                ]
            }
        }
    }
}

/// gatectl over a fresh store and queues, with the fixture's server.
pub struct World<F: Fixture> {
    pub ctl: Ctl,
    pub store: Arc<dyn OperatorStore>,
    pub clock: Arc<ManualClock>,
    pub fixture: F,
    pub manual_url: String,
}

impl<F: Fixture> World<F> {
    pub async fn new(name: &str, backend: Backend) -> Self {
        let sqs = sqs_client().await;
        let manual_url = fresh_queue(&sqs, &format!("{name}-manual")).await;
        let clock = Arc::new(ManualClock::new(T0));
        let (fixture, own) = F::start(clock.clone()).await;
        let mut vars = backend.variables(name).await;
        vars.extend([
            ("MANUAL_QUEUE_URL", manual_url.clone()),
            ("INTEGRATION_NAME", unique("gatectl")),
            ("KEY_TTL_SECONDS", "3600".to_string()),
        ]);
        vars.extend(own);
        let stack = F::stack();
        let (targets, _) = Targets::from_lookup(
            &stack,
            |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()),
            "test",
        )
        .expect("targets");
        let integration = fixture.integration();
        let store = gatectl::open_store(&targets, &sdk_config().await, integration.row_columns())
            .await
            .expect("the store gatectl opens");
        let gate = Gate {
            config: targets.gate.clone(),
            store: store.clone(),
            integration,
            manual: Arc::new(SqsManualQueue::new(sqs.clone(), manual_url.clone())),
            clock: clock.clone(),
        };
        let ctl = Ctl {
            gate,
            store: store.clone(),
            sqs,
            targets,
            view: stack.view(),
            who: "gatectl:alice".into(),
            server_ready: true,
            progress: false,
        };
        Self {
            ctl,
            store,
            clock,
            fixture,
            manual_url,
        }
    }

    pub fn words(&self) -> &Words {
        self.ctl.view.words()
    }

    /// Reserves event `n` as the consumer invocation `owner`, its lease until `deadline_ms`.
    pub async fn strand(&self, n: u32, owner: &str, deadline_ms: i64) -> IdempotencyRecord {
        let now = self.clock.now_ms();
        let integration = &self.ctl.gate.integration;
        let Parsed::Event(event) = integration.parse(&self.fixture.body(n), now) else {
            panic!("event {n} parses")
        };
        let keys = derive_keys(&event, integration.operation()).expect("keys");
        let inv = Invocation {
            request_id: owner.into(),
            deadline_ms,
        };
        let mut record = self.ctl.gate.config.new_record(&event, &keys, &inv, now);
        // The lease as the test names it (the gate's own is one record's work, 15 s).
        record.lease_until_ms = Some(deadline_ms);
        assert_eq!(
            self.store.reserve(&record, now).await.unwrap(),
            Reservation::Reserved
        );
        record
    }

    pub async fn run(&self, action: Action) -> Result<Output, CtlError> {
        self.ctl.run(&action, false, &mut Yes).await
    }

    pub async fn get(&self, pk: &str) -> IdempotencyRecord {
        self.store.get(pk).await.unwrap().expect("record")
    }

    fn assert_no_secret(&self, out: &Output) {
        if let Some(secret) = self.fixture.secret() {
            assert!(!out.text.contains(secret) && !out.json.to_string().contains(secret));
        }
    }
}

pub fn finish(key: &str, effect_id: Option<&str>) -> Action {
    Action::Finish {
        key: key.into(),
        effect_id: effect_id.map(str::to_string),
    }
}

/// OldestInFlightAge: a worker died after its call reached the server. `show` says so, `lookup`
/// finds the effect, a dry run writes nothing, `finish` from the server commits that effect with
/// its business row and leaves an audit line; a second finish is refused. A server without lookup
/// by key: `lookup` and `finish` from the server are refused, saying why, and `finish` with the
/// effect id (as the server's own tools show it) commits it.
pub async fn a_stranded_record_is_finished_from_the_server<F: Fixture>(backend: Backend) {
    let w = World::<F>::new("gc-finish", backend).await;
    let record = w.strand(1, "inv-dead#0", T0 + 1_000).await;
    let gate::effect::CallOutcome::Done(effect) = w
        .ctl
        .gate
        .integration
        .call(&gate::Held::for_tests(&record))
        .await
    else {
        panic!("the call")
    };
    w.clock.advance_ms(15 * 60_000);
    let words = w.words().clone();

    let shown = w.run(Action::Show(record.event_key.clone())).await.unwrap();
    let r = &shown.json[0];
    assert_eq!(r["event_key"], record.event_key);
    assert_eq!(r["status"], "in_flight");
    assert_eq!(r["lease_owner"], "inv-dead#0");
    assert_eq!(r["lease_live"], false);
    assert_eq!(r["age_s"], 900);
    assert_eq!(r["op_key"], record.op_key);
    for (name, value) in &record.labels {
        assert_eq!(r[name], json!(value), "label {name}");
    }
    w.assert_no_secret(&shown);
    assert!(
        shown
            .text
            .contains("created       2026-06-01T06:00:00Z (15 min ago)"),
        "{}",
        shown.text
    );
    assert!(
        r["next"]
            .as_str()
            .unwrap()
            .starts_with("the reconciler takes it over at its next sweep (every 15 s)"),
        "{}",
        r["next"]
    );

    let given = if w.fixture.has_lookup() {
        None
    } else {
        for action in [
            Action::Lookup(record.event_key.clone()),
            finish(&record.event_key, None),
        ] {
            let err = w.run(action).await.unwrap_err();
            assert_eq!(err.exit_code(), exit::REFUSED, "{err}");
            assert!(
                err.to_string().contains(&format!(
                    "has no lookup by key: whether an effect exists under Idempotency-Key {} is \
                     unknown",
                    record.op_key
                )),
                "{err}"
            );
        }
        Some(effect.effect_id.as_str())
    };
    let source = match given {
        Some(_) => format!("given with --{}", words.effect_id_flag),
        None => format!("found at the {}", words.server),
    };
    if given.is_none() {
        lookup_finds(&w, &record, &effect).await;
    }

    let dry = w
        .ctl
        .run(&finish(&record.event_key, given), true, &mut No)
        .await
        .unwrap();
    assert_eq!(dry.json["dry_run"], true);
    assert_eq!(dry.json[words.effect_id_key], effect.effect_id.as_str());
    assert_eq!(w.get(&record.pk).await.status, RecordStatus::InFlight);
    let refused = w
        .ctl
        .run(&finish(&record.event_key, given), false, &mut No)
        .await
        .unwrap_err();
    assert_eq!(refused.exit_code(), exit::NOT_CONFIRMED);
    assert_eq!(w.get(&record.pk).await.status, RecordStatus::InFlight);

    let done = w.run(finish(&record.event_key, given)).await.unwrap();
    assert_eq!(done.code, exit::OK);
    assert_eq!(done.json["outcome"], "Committed");
    let after = w.get(&record.pk).await;
    assert_eq!(after.status, RecordStatus::Committed);
    assert_eq!(after.effect_id.as_deref(), Some(effect.effect_id.as_str()));
    assert!(after.inflight_shard.is_none() && after.request.is_empty());
    let row = w
        .store
        .business_row(&record.event_key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.effect_id, effect.effect_id);
    assert_eq!(row.written_at_ms, T0 + 15 * 60_000);
    assert_eq!(w.fixture.effects_made(), 1, "no second effect");
    let history = w.store.history(&record.pk).await.unwrap();
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0].who, "gatectl:alice");
    assert_eq!(history[0].action, "finish");
    assert_eq!(
        history[0].detail,
        format!("committed {} {} ({source})", words.effect, effect.effect_id)
    );

    let again = w
        .run(finish(&record.event_key, Some("S-OTHER")))
        .await
        .unwrap_err();
    assert_eq!(again.exit_code(), exit::REFUSED);
    assert!(
        again
            .to_string()
            .contains("the record is committed, not in_flight"),
        "{again}"
    );
    assert_eq!(w.store.history(&record.pk).await.unwrap().len(), 1);
}

/// `lookup` of a stranded record on a server with lookup by key: the effect the call made, in
/// the integration's words, with no secret.
async fn lookup_finds<F: Fixture>(
    w: &World<F>,
    record: &IdempotencyRecord,
    effect: &gate::effect::Effect,
) {
    let words = w.words().clone();
    let found = w
        .run(Action::Lookup(record.event_key.clone()))
        .await
        .unwrap();
    assert_eq!(found.json[words.effect_id_key], effect.effect_id.as_str());
    // Whether the server named the record's subject (null: it named none); its own text is not
    // echoed.
    let same_subject = &found.json[format!("same_{}", words.subject)];
    assert_ne!(*same_subject, json!(false), "{}", found.json);
    // The server's answer itself, live, for the operator only, without the secret.
    w.assert_no_secret(&found);
    if words.server == "terminal" {
        assert_eq!(*same_subject, true);
        assert!(
            found.text.contains("the terminal answered 200 ("),
            "{}",
            found.text
        );
    }
    assert!(
        found.text.starts_with(&format!(
            "the {} holds {} {} under operation key",
            words.server, words.effect, effect.effect_id
        )),
        "{}",
        found.text
    );
}

/// A consumer still holds the lease: finish and cancel are refused, naming the holder and the
/// lease's end; nothing is written.
pub async fn a_write_is_refused_while_the_lease_is_live<F: Fixture>(backend: Backend) {
    let w = World::<F>::new("gc-live", backend).await;
    let record = w.strand(2, "inv-slow#3", T0 + 120_000).await;
    w.clock.advance_ms(10_000);
    for action in [
        finish(&record.event_key, Some("S-1")),
        Action::Cancel {
            key: record.event_key.clone(),
            reason: "stuck".into(),
        },
    ] {
        let err = w.run(action).await.unwrap_err();
        assert_eq!(err.exit_code(), exit::REFUSED);
        let text = err.to_string();
        assert!(
            text.contains("held by inv-slow#3 until 2026-06-01T06:02:00Z (110 s from now)"),
            "{text}"
        );
    }
    assert_eq!(w.get(&record.pk).await, record);
    assert!(w.store.history(&record.pk).await.unwrap().is_empty());
    assert!(w
        .store
        .business_row(&record.event_key)
        .await
        .unwrap()
        .is_none());
}

/// The runbook cases of [`kit`](self) for one integration: `runbooks!(module, Fixture)` makes a
/// module of `#[tokio::test]`s on DynamoDB, `runbooks!(module, Fixture, Postgres)` on
/// PostgreSQL. Another integration's runbooks are one more line.
#[macro_export]
macro_rules! runbooks {
    ($module:ident, $fixture:ty) => {
        $crate::runbooks!($module, $fixture, DynamoDb);
    };
    ($module:ident, $fixture:ty, $backend:ident) => {
        mod $module {
            use super::kit;
            const BACKEND: kit::Backend = kit::Backend::$backend;

            #[tokio::test]
            async fn a_stranded_record_is_finished_from_the_server() {
                kit::a_stranded_record_is_finished_from_the_server::<$fixture>(BACKEND).await;
            }

            #[tokio::test]
            async fn a_write_is_refused_while_the_lease_is_live() {
                kit::a_write_is_refused_while_the_lease_is_live::<$fixture>(BACKEND).await;
            }

            #[tokio::test]
            async fn a_cancel_marks_failed_leaves_the_index_and_keeps_the_history() {
                kit::a_cancel_marks_failed_leaves_the_index_and_keeps_the_history::<$fixture>(
                    BACKEND,
                )
                .await;
            }

            #[tokio::test]
            async fn a_multi_effect_key_is_shown_with_its_ids() {
                kit::a_multi_effect_key_is_shown_with_its_ids::<$fixture>(BACKEND).await;
            }

            #[tokio::test]
            async fn reconcile_one_key_now() {
                kit::reconcile_one_key_now::<$fixture>(BACKEND).await;
            }
        }
    };
}
