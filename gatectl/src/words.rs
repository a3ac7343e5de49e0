//! What gatectl needs to know of the integration whose stack it operates, beyond the gate's own
//! ports: the words its operators read ([`Words`]) and how its records, queries and queue
//! messages read ([`View`]). The integration's [`crate::Stack`] gives one; the core of gatectl
//! ([`crate::ctl`]) knows no integration.

use gate::integration::Parsed;
use gate::record::IdempotencyRecord;
use gate::Integration;

/// The words an integration's operators read where gatectl prints them (texts, table headings,
/// JSON keys). [`Words::NEUTRAL`] is the core's; truck-slot's say slot, container, terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Words {
    /// The side effect, singular (`"slot"`; neutral `"effect"`).
    pub effect: &'static str,
    /// The effect id's JSON key (`"effect_id"`; neutral `"effect_id"`); its list is the key with
    /// an `s` (`"effect_ids"`).
    pub effect_id_key: &'static str,
    /// The `finish` flag that gives an effect id, without the dashes (`"slot-id"`; neutral
    /// `"effect-id"`, always accepted as well).
    pub effect_id_flag: &'static str,
    /// The `finish` flag that commits the effect the server holds, without the dashes
    /// (`"from-terminal"`; neutral `"from-server"`, always accepted as well).
    pub from_server_flag: &'static str,
    /// The `list` of keys with two or more effect ids (`"multi-slot"`; neutral
    /// `"multi-effect"`, always accepted as well).
    pub multi_list: &'static str,
    /// Whom an effect is for (`"container"`; neutral `"subject"`): a table heading and JSON key.
    pub subject: &'static str,
    /// The record label that holds the subject (`"container"`); empty: the records carry none.
    pub subject_label: &'static str,
    /// The side effect's server (`"terminal"`; neutral `"server"`).
    pub server: &'static str,
    /// The business row committed with the record (`"TMS booking"`; neutral `"business row"`).
    pub business_row: &'static str,
    /// The business row's JSON key in `show` (`"booking"`; neutral `"business_row"`).
    pub business_row_key: &'static str,
    /// What writing the business row is called, a past participle (`"booked"`; neutral
    /// `"written"`): `show` prints `{effect} {id} {written} 5 min ago` and the row's time under the
    /// JSON key `{written}_at_ms` (epoch **milliseconds**).
    pub written: &'static str,
    /// The manual queue, as its readers call it (`"manual-booking queue"`).
    pub manual_queue: &'static str,
    /// The queue the events arrive on (`"notification queue"`; neutral `"event queue"`).
    pub event_queue: &'static str,
    /// The stored request, as `show` heads it (`"claim request"`; neutral `"request"`).
    pub request: &'static str,
    /// What the stored request holds that is never shown (`"the release PIN"`; neutral
    /// `"secrets"`): `show` says the request is redacted because it holds this.
    pub request_secret: &'static str,
    /// How to configure the server for the commands that ask it (a sentence naming the
    /// variables, e.g. `"set TERMINAL_BASE_URL and its token ..."`).
    pub configure_server: &'static str,
}

impl Words {
    /// The core's words.
    pub const NEUTRAL: Words = Words {
        effect: "effect",
        effect_id_key: "effect_id",
        effect_id_flag: "effect-id",
        from_server_flag: "from-server",
        multi_list: "multi-effect",
        subject: "subject",
        subject_label: "",
        server: "server",
        business_row: "business row",
        business_row_key: "business_row",
        written: "written",
        manual_queue: "manual queue",
        event_queue: "event queue",
        request: "request",
        request_secret: "secrets",
        configure_server: "configure the server's variables, or use --stack",
    };

    /// The JSON key of the effect ids' list (`"effect_ids"`).
    pub fn effect_ids_key(&self) -> String {
        format!("{}s", self.effect_id_key)
    }

    /// The JSON key of the business row's time in `show --json`, epoch **milliseconds**:
    /// `{written}_at_ms` (`"booked_at_ms"`; neutral `"written_at_ms"`).
    pub fn written_at_key(&self) -> String {
        format!("{}_at_ms", self.written)
    }

    /// The record's subject (its [`Words::subject_label`]; empty when there is none).
    pub fn subject_of<'r>(&self, r: &'r IdempotencyRecord) -> &'r str {
        if self.subject_label.is_empty() {
            ""
        } else {
            r.label(self.subject_label)
        }
    }
}

/// How `show` finds records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Query {
    /// An event key (64 hex characters): one read of the record.
    EventKey(String),
    /// The records whose label `name` is `value` (a scan filtered on the label's attribute).
    Label {
        /// The label (a stored attribute).
        name: String,
        /// Its value, as stored.
        value: String,
    },
    /// The records the integration recognises as `text`'s ([`View::matches`]: e.g. a source
    /// system's id the event key is derived from): a scan, each record tested.
    Text(String),
}

/// Whether `text` is an event key: 64 hex characters (any case).
pub fn is_event_key(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// How an integration's records, queries and queue messages read for gatectl. Every method but
/// [`View::words`] and [`View::event_key_of_body`] has a default that speaks the core's words.
pub trait View: Send + Sync {
    /// The words its operators read.
    fn words(&self) -> &Words;

    /// Reads a `show` query the way a person types it. The default: 64 hex characters are an
    /// event key, anything else a [`Query::Text`].
    fn query(&self, text: &str) -> Query {
        let t = text.trim();
        if is_event_key(t) {
            Query::EventKey(t.to_ascii_lowercase())
        } else {
            Query::Text(t.to_string())
        }
    }

    /// Whether record `r` is one `text` names ([`Query::Text`]). Default: none is.
    fn matches(&self, text: &str, r: &IdempotencyRecord) -> bool {
        let _ = (text, r);
        false
    }

    /// The event key of a queue message's body (a dead letter), from the fields the key is
    /// derived from, leniently (a body the strict parser would refuse may still name its record);
    /// `None` for a body without them.
    fn event_key_of_body(&self, body: &str) -> Option<String>;

    /// `show`'s lines about the event, from the record's labels, as (heading, value); the heading
    /// is padded to 13 characters. Default: one line per label, in name order.
    fn record_lines(&self, r: &IdempotencyRecord) -> Vec<(String, String)> {
        r.labels
            .iter()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect()
    }

    /// The event in a few words for a plan (`"CSQU3054383 at ECT-DELTA (.. )"`). Default: the
    /// labels as `name value`, comma separated.
    fn event_words(&self, r: &IdempotencyRecord) -> String {
        r.labels
            .iter()
            .map(|(name, value)| format!("{name} {value}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Whether `id`, given by a person to `finish`, could be an effect id: the rules the gate
    /// applies to a server's answer ([`gate::idempotency_key::effect_id_defect`]: not blank, at
    /// most [`gate::idempotency_key::MAX_EFFECT_ID_CHARS`] printable ASCII characters or
    /// spaces), so that a pasted line break, an empty argument or a whole paragraph is not
    /// committed.
    fn effect_id_acceptable(&self, id: &str) -> bool {
        gate::idempotency_key::effect_id_defect(id).is_none()
    }
}

/// The event key of `body` as the consumer derives it, through the integration's own parser
/// ([`Integration::parse`] at `now_ms`, epoch ms): an event, an ended event and an event kept
/// only if recorded all name their key; a rejected body has none. For [`View::event_key_of_body`]
/// when the parser is lenient enough for dead letters (they are bodies the consumer once read).
pub fn event_key_by_parse(
    integration: &dyn Integration,
    body: &str,
    now_ms: i64,
) -> Option<String> {
    let event = match integration.parse(body, now_ms) {
        Parsed::Event(event) | Parsed::Ended(event, _) | Parsed::IfRecorded { event, .. } => event,
        Parsed::Rejected(_) => return None,
    };
    gate::consumer::derive_keys(&event, integration.operation())
        .ok()
        .map(|keys| keys.event_key)
}

/// The core's view: the neutral words, event keys only, no body read.
pub struct Neutral;

impl View for Neutral {
    fn words(&self) -> &Words {
        &Words::NEUTRAL
    }

    fn event_key_of_body(&self, _body: &str) -> Option<String> {
        None
    }
}
