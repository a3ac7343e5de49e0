//! The `Integration` trait: everything the gate needs from one integration (a kind of side effect
//! behind an at-least-once feed), and nothing it needs to know about it.
//!
//! Three methods are required: the side effect's name ([`Integration::operation`]), the strict
//! parse of a body into an [`Event`] or a [`Rejection`] ([`Integration::parse`]), and the side
//! effect itself ([`Integration::call`]), which takes a [`Held`]: the proof, which only the gate
//! can make, that the record is reserved and its lease held. Everything else has a default for
//! a single server that honours `Idempotency-Key` and whose events do not end: key support and
//! claim horizon per record, the event's end, the subject, the manual reasons' codes and texts,
//! the label names, the business row and its column names, the natural key (signal 4). A server
//! with a lookup by key implements the second trait [`Lookup`] and offers it through
//! [`Integration::lookup_by_key`]; the gate's one decision for a held record
//! (`crate::decision`) reads all of these.
//!
//! The gate does the rest: the event key and the fingerprint, reserve with lease and take-over,
//! the stored request, the commit, release, routing to a person exactly once, the reconciler and
//! the signals. The truck-slot integration (crate `truck_slot`) uses every method; the crates
//! `payments` and `job_client` (`examples/`) use the few a single server needs.

use async_trait::async_trait;

use crate::effect::{CallOutcome, LookupOutcome};
use crate::manual::ManualReason;
use crate::record::{BusinessRow, IdempotencyRecord, Labels, NaturalKey, RowColumns};

/// What the gate takes from a body that passed the integration's strict parse.
///
/// `Debug` redacts `request` (it may hold secrets: an API key or a PIN).
#[derive(Clone)]
pub struct Event {
    /// What identifies the event, stable across redeliveries and never the SQS message id: the
    /// event key is the lowercase hex SHA-256 of these bytes (`crate::keys::event_key_of_material`).
    /// E.g. `"{notificationId}:{canonical subject}"`.
    pub key_material: String,
    /// The business content: the fingerprint is the lowercase hex SHA-256 of its RFC 8785 (JCS)
    /// canonical form (`crate::keys::fingerprint_of`). The same key with another fingerprint is
    /// a mismatch, routed to a person, never a duplicate.
    pub business_fields: serde_json::Value,
    /// The exact request bytes of the side effect, built once and stored on the record at
    /// reservation: every retry and the reconciler send these bytes. Secret.
    pub request: Vec<u8>,
    /// The integration's labels, stored on the record and copied to the business row (see
    /// [`crate::record::Labels`] for the names a label must not take).
    pub labels: Labels,
    /// What the record must outlive: the event's end, epoch **milliseconds** (the window's end
    /// on the truck-slot path), `None` if the event does not end. The record's TTL counts from
    /// the later of its reservation and this end, and no side effect is ever started at or after
    /// it (only a lookup).
    pub ends_at_ms: Option<i64>,
    /// Whom the event is for, for the `record processed` log line's `subject` field and the
    /// reports (the subject on the truck-slot path). Not secret.
    pub subject: String,
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event")
            .field("key_material", &self.key_material)
            .field(
                "request",
                &format_args!("[redacted {} bytes]", self.request.len()),
            )
            .field("labels", &self.labels)
            .field("ends_at_ms", &self.ends_at_ms)
            .field("subject", &self.subject)
            .finish_non_exhaustive()
    }
}

/// Why a body can never succeed: routed to the manual queue once per distinct body, with `code`
/// and `detail`, and acknowledged. `detail` must quote no text of the body (it reaches a log
/// line): name fields, positions and limits instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// A short stable code (`not_json`, `window_ended`, ...): the manual item's and the log
    /// line's `detail` start with it.
    pub code: &'static str,
    /// The reason in words, quoting nothing of the body.
    pub detail: String,
    /// Whether the body is rejected only because its event has ended ([`Parsed::Ended`] when it
    /// can still be parsed as of just before its end).
    pub ended: bool,
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.detail)
    }
}

impl Rejection {
    /// A rejection with `code` and `detail` (quoting nothing of the body), not for an ended
    /// event.
    pub fn new(code: &'static str, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
            ended: false,
        }
    }

    /// A rejection with `code` and `detail` (quoting nothing of the body) because the event has
    /// ended: the second half of [`Parsed::Ended`]. Such a body never starts a side effect; its
    /// own record decides (a copy of a committed event is a duplicate), else it reaches a person
    /// once as [`crate::manual::ManualReason::EventEnded`].
    pub fn ended(code: &'static str, detail: impl Into<String>) -> Self {
        Self {
            ended: true,
            ..Self::new(code, detail)
        }
    }

    /// The code, as the log line and the metrics name it.
    pub fn code(&self) -> &'static str {
        self.code
    }
}

/// The outcome of [`Integration::parse`].
#[derive(Debug, Clone)]
pub enum Parsed {
    /// A body the gate acts on.
    Event(Event),
    /// A body whose event has ended (e.g. its window closed), parsed as of just before its end:
    /// its own record decides (a duplicate of a committed event, else routed to a person once),
    /// and no side effect is ever started for it.
    Ended(Event, Rejection),
    /// A body that can never succeed.
    Rejected(Rejection),
    /// A body rejected (`rejection`) that is still its event's when that event already has a
    /// record holding the same `label` as `event` (on the truck-slot path: a server removed from
    /// the configuration while its records were in flight or committed). The record then decides,
    /// as for any redelivery (`ended` as for [`Parsed::Ended`]): a committed event is a duplicate,
    /// one in flight is looked up, never called, and goes to a person once. Without such a record
    /// the rejection stands. Costs one consistent read, only for such bodies.
    IfRecorded {
        /// The event as parsed despite the rejection.
        event: Event,
        /// Why it is also ended, if it is.
        ended: Option<Rejection>,
        /// The rejection that stands without a record.
        rejection: Rejection,
        /// The label the record must hold with the event's value (e.g. `server`).
        label: &'static str,
    },
}

/// A body that is an event or a rejection ([`Parsed::Event`], [`Parsed::Rejected`]): an
/// integration's parse can be a function returning `Result<Event, Rejection>` with `?`.
impl From<Result<Event, Rejection>> for Parsed {
    fn from(parsed: Result<Event, Rejection>) -> Self {
        match parsed {
            Ok(event) => Parsed::Event(event),
            Err(rejection) => Parsed::Rejected(rejection),
        }
    }
}

/// The proof that the gate holds a record's reservation: the record is in the store and this
/// holder's lease on it is live (the consumer after its reserve or its take-over, the reconciler
/// and an operator's command after a take-over), or, for a read-only lookup only, the record was
/// read back from the store ([`crate::Gate::operator_lookup`]). [`Integration::call`] and
/// [`Lookup::lookup`] take one, and only the gate can make one: its field is private and it
/// has no public constructor, so code that calls a server without a reservation does not
/// compile.
///
/// ```compile_fail,E0451
/// // An integration author (or a handler) reaching the server without the gate's reservation:
/// // a `Held` cannot be written down outside the gate.
/// async fn sneak(integration: &dyn gate::Integration, record: &gate::record::IdempotencyRecord) {
///     let held = gate::Held { record };
///     integration.call(&held).await;
/// }
/// ```
///
/// ```compile_fail,E0308
/// // Nor can the record itself stand in for the proof.
/// async fn sneak(integration: &dyn gate::Integration, record: &gate::record::IdempotencyRecord) {
///     integration.call(record).await;
/// }
/// ```
///
/// ```compile_fail,E0624
/// // Nor is the gate's own constructor reachable.
/// async fn sneak(integration: &dyn gate::Integration, record: &gate::record::IdempotencyRecord) {
///     integration.call(&gate::Held::new(record)).await;
/// }
/// ```
#[derive(Debug)]
pub struct Held<'a> {
    record: &'a IdempotencyRecord,
}

impl<'a> Held<'a> {
    /// Made by the gate only, where it holds the lease of `record` (or reads it back from the
    /// store for a lookup).
    pub(crate) fn new(record: &'a IdempotencyRecord) -> Self {
        Self { record }
    }

    /// The held record: its `op_key` (the `Idempotency-Key`), its stored `request` bytes, its
    /// labels.
    pub fn record(&self) -> &'a IdempotencyRecord {
        self.record
    }

    /// A `Held` for a test or a benchmark that reserved `record` itself (or plays a worker that
    /// called the server and died): feature `testkit` only, which no function enables.
    #[cfg(feature = "testkit")]
    pub fn for_tests(record: &'a IdempotencyRecord) -> Self {
        Self { record }
    }
}

/// One integration: the parse, the side effect, and the business row. See the module docs.
#[async_trait]
pub trait Integration: Send + Sync {
    /// The side effect's operation name, input of its `Idempotency-Key` (e.g. `"charge"`): the
    /// key is `operation_key(event_key, operation)` (`crate::keys::operation_key`). Never change
    /// it on a deployed integration: every key would change.
    fn operation(&self) -> &str;

    /// Parses and validates one SQS body strictly at `now_ms` (epoch ms). A body over the
    /// integration's size limit, not JSON, with a missing or wrong field, or whose event has
    /// ended is a [`Rejection`]; never panics.
    fn parse(&self, body: &str, now_ms: i64) -> Parsed;

    /// Step 3: the side effect for the held record (`held.record()`), sending its stored
    /// `request` bytes under `Idempotency-Key: {record.op_key}` (its labels say where, e.g. which
    /// server). Must classify every answer: an unknown outcome is [`CallOutcome::Transient`].
    /// Only the gate calls it (see [`Held`]).
    async fn call(&self, held: &Held<'_>) -> CallOutcome;

    /// The server's lookup by key ([`Lookup`]), if it has one: `Some(self)` for an integration
    /// that implements [`Lookup`] too. Default `None` (a payments API without one, e.g.
    /// Stripe): inside the claim horizon the gate re-sends the stored request under the same key
    /// (the server's replay of its first answer is the lookup), and past the horizon or after
    /// the event's end the record goes to a person with what is known ("the server has no
    /// lookup by key; whether the effect happened is unknown").
    fn lookup_by_key(&self) -> Option<&dyn Lookup> {
        None
    }

    /// Whether the server of `record`'s side effect honours `Idempotency-Key`, when the
    /// integration knows per record (several servers); `None`: `GateConfig`'s setting. Without
    /// key support a record goes to a person, never called (a retry could make a second effect).
    fn supports_idempotency_key(&self, record: &IdempotencyRecord) -> Option<bool> {
        let _ = record;
        None
    }

    /// The claim horizon for `record`, **milliseconds** (its server's key retention minus a
    /// margin), when the integration knows per record; `None`: `GateConfig::claim_horizon_ms`.
    /// The consumer, the reconciler and `gatectl` read this one horizon. Past it the effect is
    /// only looked up, never called again.
    fn claim_horizon_ms(&self, record: &IdempotencyRecord) -> Option<i64> {
        let _ = record;
        None
    }

    /// The end of the event `record` guards, epoch **milliseconds** (as [`Event::ends_at_ms`]),
    /// read back from its labels; `None` for a routing record or an event that does not end.
    /// Default `None`: an integration whose events end (whose parse sets [`Event::ends_at_ms`])
    /// must read the end back here, or a side effect could start after it.
    fn ends_at_ms(&self, record: &IdempotencyRecord) -> Option<i64> {
        let _ = record;
        None
    }

    /// Whom `record` is for (as [`Event::subject`], from its labels): an effect the server says
    /// is for someone else is never committed. Empty: not checked.
    fn subject(&self, record: &IdempotencyRecord) -> String {
        let _ = record;
        String::new()
    }

    /// The code of `reason` on this integration's manual items (their `reason`, the SQS message
    /// attribute `reason`) and in the `record processed` log line's `detail`. Default: the
    /// core's ([`ManualReason::code`]). An integration whose manual-queue readers know other
    /// codes keeps them here (truck-slot: its legacy `terminal_rejected` for
    /// [`ManualReason::ServerRejected`]); the codes must be distinct (an item is read back by
    /// its code), lowercase ASCII letters and `_`.
    fn manual_reason_code(&self, reason: ManualReason) -> &'static str {
        reason.code()
    }

    /// What `reason` means, in this integration's words, for a person. Default: the core's
    /// ([`ManualReason::text`]).
    fn manual_reason_text(&self, reason: ManualReason) -> &'static str {
        reason.text()
    }

    /// The label names every record carries: a routing record stores each with empty text (so
    /// a reader of an older layout finds them). Default: none.
    fn label_names(&self) -> &[&'static str] {
        &[]
    }

    /// The stored names of the business row's columns on DynamoDB (the key holding the event
    /// key, the effect id, the time in epoch ms). Default: [`RowColumns::NEUTRAL`]
    /// (`source_event`, `effect_id`, `written_at`). An integration whose business table is read
    /// by others under other names keeps them here (as the model integration keeps its TMS's
    /// names). The Lambda wiring and gatectl build the store with
    /// these; a label named like one of them is refused. Never change them on a deployed table
    /// (the key at all: it is the table's key; the others: rows already written keep the old
    /// names, and only the names of [`RowColumns::LEGACY`] are read as a fallback).
    fn row_columns(&self) -> RowColumns {
        RowColumns::NEUTRAL
    }

    /// The business row committed with `record` and the effect `effect_id` at `now_ms` (epoch
    /// ms). Default: the record's labels ([`BusinessRow::for_record`]).
    fn business_row(
        &self,
        record: &IdempotencyRecord,
        effect_id: &str,
        now_ms: i64,
    ) -> BusinessRow {
        BusinessRow::for_record(record, effect_id, now_ms)
    }

    /// The natural key of `record`'s event (what identifies the real event apart from its event
    /// key: on the truck-slot path the subject and the window start), from the record alone,
    /// with its TTL at `now_ms` (epoch ms; [`crate::record::natural_key_expires_at_s`]). The gate
    /// holds it as a guard before any call ([`crate::store::IdempotencyStore::guard`]): a second
    /// event key for the same natural key goes to a person instead of calling (signal 4).
    /// Default: none (no guard).
    fn natural_key(&self, record: &IdempotencyRecord, now_ms: i64) -> Option<NaturalKey> {
        let _ = (record, now_ms);
        None
    }
}

/// A server's lookup by key: which effect it holds under an `Idempotency-Key`. The second trait
/// of an integration whose server has one, offered to the gate by
/// [`Integration::lookup_by_key`]; an integration without one implements nothing of it.
#[async_trait]
pub trait Lookup: Send + Sync {
    /// Which effect is held under `held.record().op_key` (the reconciler's and the late
    /// consumer's lookup, past the claim horizon or after the event's end). The stored request is
    /// for the secrets an answer must be scrubbed of; it need not be sent. Never called when
    /// [`Lookup::supports_lookup`] is `false` for the record. Never answer
    /// [`LookupOutcome::NotFound`] unless the server said so: a record is then routed as having
    /// no effect.
    async fn lookup(&self, held: &Held<'_>) -> LookupOutcome;

    /// The server's answer to a lookup under `held.record().op_key`, rendered for an operator's
    /// server (`gatectl lookup`) with every secret the integration knows cut out: the one place
    /// a person reads what a server chose to say. It is printed and forgotten: never logged,
    /// stored, or put in a record's `error` or a manual item's `detail`. `None` (the default):
    /// the integration cannot show it.
    async fn show_lookup(&self, held: &Held<'_>) -> Option<String> {
        let _ = held;
        None
    }

    /// Whether the server of `record`'s side effect has this lookup, when the integration knows
    /// per record (several servers, some without one). Default `true`. `false`: as an
    /// integration without [`Integration::lookup_by_key`], for this record.
    fn supports_lookup(&self, record: &IdempotencyRecord) -> bool {
        let _ = record;
        true
    }
}

/// The lookup by key for `record` ([`Integration::lookup_by_key`], where
/// [`Lookup::supports_lookup`] holds for it), `None` when its server has none: what the gate's
/// decision and an operator's lookup read.
pub(crate) fn lookup_for<'a>(
    integration: &'a dyn Integration,
    record: &IdempotencyRecord,
) -> Option<&'a dyn Lookup> {
    integration
        .lookup_by_key()
        .filter(|lookup| lookup.supports_lookup(record))
}

/// The lookup of the held record through `lookup_for`; [`LookupOutcome::Transient`] when its
/// server has none (the gate's decision never asks for one then).
pub async fn look_up(integration: &dyn Integration, held: &Held<'_>) -> LookupOutcome {
    match lookup_for(integration, held.record()) {
        Some(lookup) => lookup.lookup(held).await,
        None => LookupOutcome::Transient("the server has no lookup by key".into()),
    }
}
