//! The truck-slot integration's gatectl (feature `truck-slot`, on by default): its words (slot,
//! container, terminal, TMS booking, manual-booking queue, the release PIN), its queries (an
//! equipment number, a notificationId), the event key of a Portbase notification body, and its
//! terminal client built as the reconciler builds it. The `gatectl` binary is
//! `gatectl::main(TruckSlotStack)`.

use std::sync::Arc;

use ::truck_slot::config::TerminalConfig;
use ::truck_slot::iso6346::EquipmentNumber;
use ::truck_slot::keys::event_key_of;
use ::truck_slot::terminal::{CallOutcome, HttpTerminal, LookupOutcome, SlotTerminal};
use ::truck_slot::TruckSlot;
use async_trait::async_trait;
use gate::record::IdempotencyRecord;
use gate::Integration;
use gate_lambda::SdkConfig;
use serde_json::Value;

use crate::error::CtlError;
use crate::stack::Stack;
use crate::words::{is_event_key, Query, View, Words};

/// Truck-slot's words.
pub const WORDS: Words = Words {
    effect: "slot",
    effect_id_key: "slot_id",
    effect_id_flag: "slot-id",
    from_server_flag: "from-terminal",
    multi_list: "multi-slot",
    subject: "container",
    subject_label: "container",
    server: "terminal",
    business_row: "TMS booking",
    business_row_key: "booking",
    written: "booked",
    manual_queue: "manual-booking queue",
    event_queue: "notification queue",
    request: "claim request",
    request_secret: "the release PIN",
    configure_server: "set TERMINAL_BASE_URL and its token (TERMINAL_API_TOKEN_SECRET_ARN, or \
                       TERMINAL_API_TOKEN locally), or TERMINALS for several terminals, or use \
                       --stack",
};

/// Truck-slot's stack: [`TerminalConfig`], the terminal client (one, or the router of several),
/// the template's terminal parameters.
#[derive(Debug, Clone, Copy, Default)]
pub struct TruckSlotStack;

/// Truck-slot's records, queries and notification bodies.
#[derive(Debug, Clone, Copy, Default)]
pub struct TruckSlotView;

impl View for TruckSlotView {
    fn words(&self) -> &Words {
        &WORDS
    }

    /// 64 hex characters are an event key, a valid ISO 6346 equipment number (any case, spaces
    /// allowed) a container, anything else a notificationId.
    fn query(&self, text: &str) -> Query {
        let t = text.trim();
        if is_event_key(t) {
            return Query::EventKey(t.to_ascii_lowercase());
        }
        match EquipmentNumber::parse(t) {
            Ok(n) => Query::Label {
                name: "container".into(),
                value: n.as_str().to_string(),
            },
            Err(_) => Query::Text(t.to_string()),
        }
    }

    /// A notificationId: `SHA-256(id:container)` is the record's event key.
    fn matches(&self, text: &str, r: &IdempotencyRecord) -> bool {
        event_key_of(text, r.label("container")) == r.event_key
    }

    fn event_key_of_body(&self, body: &str) -> Option<String> {
        event_key_of_body(body)
    }

    fn record_lines(&self, r: &IdempotencyRecord) -> Vec<(String, String)> {
        vec![
            (
                "container".into(),
                format!("{} at {}", r.label("container"), r.label("terminal")),
            ),
            (
                "window".into(),
                format!("{} .. {}", r.label("window_start"), r.label("window_end")),
            ),
        ]
    }

    fn event_words(&self, r: &IdempotencyRecord) -> String {
        format!(
            "{} at {} ({} .. {})",
            r.label("container"),
            r.label("terminal"),
            r.label("window_start"),
            r.label("window_end")
        )
    }
}

/// The event key of a notification body (`notificationId` and the equipment number, canonical
/// ISO 6346), without the strict parser's other checks; `None` for a body without them.
pub fn event_key_of_body(body: &str) -> Option<String> {
    let v: Value = serde_json::from_str(body).ok()?;
    let id = v.get("notificationId")?.as_str()?;
    let number = EquipmentNumber::parse(v.get("equipment_number")?.as_str()?).ok()?;
    Some(event_key_of(id, number.as_str()))
}

impl Stack for TruckSlotStack {
    type Config = TerminalConfig;

    fn view(&self) -> Arc<dyn View> {
        Arc::new(TruckSlotView)
    }

    fn parameters(&self) -> &[(&'static str, &'static str)] {
        &[
            ("TerminalBaseUrl", "TERMINAL_BASE_URL"),
            ("TerminalApiTokenSecretArn", "TERMINAL_API_TOKEN_SECRET_ARN"),
            (
                "TerminalSupportsIdempotencyKey",
                "TERMINAL_SUPPORTS_IDEMPOTENCY_KEY",
            ),
            ("KnownTerminals", "KNOWN_TERMINALS"),
            ("TerminalConnectTimeoutMs", "TERMINAL_CONNECT_TIMEOUT_MS"),
            ("TerminalRequestTimeoutMs", "TERMINAL_REQUEST_TIMEOUT_MS"),
            // Several terminals in one stack (`docs/DEPLOYING.md`, "Several terminals in one
            // stack").
            ("Terminals", "TERMINALS"),
            ("TerminalTokenSecretArns", "TERMINAL_TOKEN_SECRET_ARNS"),
        ]
    }

    fn server_variables(&self) -> &[&'static str] {
        &["TERMINAL_BASE_URL", "TERMINALS"]
    }

    /// The functions' parser requires a terminal; gatectl does not (reads, cancel, redrive).
    /// Without one, this never-called URL lets the parser check every other variable.
    fn unconfigured_server(&self) -> &[(&'static str, &'static str)] {
        &[(
            "TERMINAL_BASE_URL",
            "https://terminal.not-configured.invalid",
        )]
    }

    async fn connect(
        &self,
        config: TerminalConfig,
        aws: &SdkConfig,
    ) -> Result<Arc<dyn Integration>, CtlError> {
        let terminal: Arc<dyn SlotTerminal> = if !config.terminals.is_empty() {
            // Several terminals: the reconciler's own router, each token from its secret.
            let client = aws_sdk_secretsmanager::Client::new(aws);
            let router =
                ::truck_slot::lambda::terminal_router(&config.terminals, &config.terminal, &client)
                    .await
                    .map_err(|e| {
                        CtlError::from_text(
                            e.to_string(),
                            "secretsmanager:GetSecretValue",
                            "the terminals' token secrets (TerminalTokenSecretArns)",
                        )
                    })?;
            Arc::new(router)
        } else {
            let mut terminal = config.terminal.clone();
            if let Some(arn) = &config.token_secret_arn {
                let client = aws_sdk_secretsmanager::Client::new(aws);
                terminal.token = Some(
                    ::truck_slot::secrets::fetch_api_token(&client, arn)
                        .await
                        .map_err(|e| {
                            CtlError::from_text(e.to_string(), "secretsmanager:GetSecretValue", arn)
                        })?,
                );
            }
            Arc::new(
                HttpTerminal::new(terminal)
                    .map_err(|e| CtlError::Config(format!("terminal client: {e}")))?,
            )
        };
        Ok(Arc::new(
            TruckSlot::new(terminal, config.known_terminals).with_policies(config.policies),
        ))
    }

    fn offline(&self, config: TerminalConfig) -> Arc<dyn Integration> {
        Arc::new(
            TruckSlot::new(Arc::new(NoTerminal), config.known_terminals)
                .with_policies(config.policies),
        )
    }
}

/// A terminal that is not configured: every call is transient with that reason. Commands that
/// need the terminal check [`crate::ctl::Ctl::server_ready`] first, so this only answers if one
/// forgot.
pub struct NoTerminal;

#[async_trait]
impl SlotTerminal for NoTerminal {
    async fn claim(&self, _op_key: &str, _request: &[u8]) -> CallOutcome {
        CallOutcome::Transient("no terminal configured (TERMINAL_BASE_URL or TERMINALS)".into())
    }
    async fn lookup(&self, _op_key: &str, _request: &[u8]) -> LookupOutcome {
        LookupOutcome::Transient("no terminal configured (TERMINAL_BASE_URL or TERMINALS)".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `show --json` on a truck-slot stack keeps the keys its operators' scripts read since
    /// before the neutral vocabulary: the row under `booking`, its id under `slot_id`, its time
    /// under `booked_at_ms` (the runbook kit reads them through the words, so only this pins them).
    #[test]
    fn show_keeps_the_deployed_json_keys() {
        assert_eq!(WORDS.business_row_key, "booking");
        assert_eq!(WORDS.effect_id_key, "slot_id");
        assert_eq!(WORDS.written_at_key(), "booked_at_ms");
    }

    #[test]
    fn a_query_is_read_as_a_person_types_it() {
        let view = TruckSlotView;
        let key = "a".repeat(64);
        assert_eq!(view.query(&key), Query::EventKey(key.clone()));
        assert_eq!(
            view.query("csqu3054383"),
            Query::Label {
                name: "container".into(),
                value: "CSQU3054383".into()
            }
        );
        // A wrong check digit is no equipment number: a notificationId.
        assert_eq!(view.query("CSQU3054384"), Query::Text("CSQU3054384".into()));
        assert_eq!(view.query("N-1"), Query::Text("N-1".into()));
    }

    #[test]
    fn the_event_key_of_a_body_is_the_gates() {
        let body = r#"{"notificationId":"N-1","equipment_number":"CSQU3054383","pin":"1"}"#;
        assert_eq!(
            event_key_of_body(body),
            Some(::truck_slot::keys::sha256_hex(b"N-1:CSQU3054383"))
        );
        assert_eq!(event_key_of_body("{bad"), None);
    }
}
