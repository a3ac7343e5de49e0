//! payments under the runbook cases of `kit`, and payments' whole gatectl: its words, its
//! variables (`payments::lambda::PaymentsConfig`: `PAYMENTS_API_URL`, `PAYMENTS_KEY_SECRET_ARN`),
//! its client built as its functions build it (`payments::lambda::build`). The payments API has
//! no lookup by key: `lookup` and `finish --from-api` are refused, and a person finishes a
//! stranded charge with the charge id the API's dashboard shows (`finish KEY --charge-id ID`).

use std::sync::Arc;

use gate::clock::ManualClock;
use gate::record::IdempotencyRecord;
use gate::Integration;
use gate_lambda::{SdkConfig, SecretString};
use gate_testkit::{IdempotencyServer, MismatchAnswer, ServerConfig};
use gatectl::error::CtlError;
use gatectl::words::event_key_by_parse;
use gatectl::{Stack, View, Words};
use payments::lambda::PaymentsConfig;
use payments::Payments;
use serde_json::json;

use super::kit::Fixture;

// --- payments' gatectl ------------------------------------------------------------------------

/// payments' words.
const WORDS: Words = Words {
    effect: "charge",
    effect_id_key: "charge_id",
    effect_id_flag: "charge-id",
    from_server_flag: "from-api",
    multi_list: "multi-charge",
    subject: "invoice",
    subject_label: "invoice",
    server: "payments API",
    business_row: "charge row",
    business_row_key: "charge_row",
    written: "charged",
    manual_queue: "manual queue",
    event_queue: "invoice queue",
    request: "charge request",
    request_secret: "the card token",
    configure_server: "set PAYMENTS_API_URL and PAYMENTS_KEY_SECRET_ARN, or use --stack",
};

/// A client of `url` that parses, and is never asked (no key).
fn offline_client(url: String) -> Payments {
    Payments {
        url,
        key: SecretString::new(""),
        http: reqwest::Client::new(),
    }
}

/// How payments' records and bodies read: `show INVOICE_ID` finds the invoice's records.
pub struct PaymentsView;

impl View for PaymentsView {
    fn words(&self) -> &Words {
        &WORDS
    }

    fn matches(&self, text: &str, r: &IdempotencyRecord) -> bool {
        r.label("invoice") == text
    }

    fn event_key_of_body(&self, body: &str) -> Option<String> {
        event_key_by_parse(&offline_client("https://parse.invalid".into()), body, 0)
    }
}

/// payments' gatectl.
pub struct PaymentsStack;

impl Stack for PaymentsStack {
    type Config = PaymentsConfig;

    fn view(&self) -> Arc<dyn View> {
        Arc::new(PaymentsView)
    }

    fn parameters(&self) -> &[(&'static str, &'static str)] {
        &[
            ("PaymentsApiUrl", "PAYMENTS_API_URL"),
            ("PaymentsKeySecretArn", "PAYMENTS_KEY_SECRET_ARN"),
        ]
    }

    async fn connect(
        &self,
        config: PaymentsConfig,
        aws: &SdkConfig,
    ) -> Result<Arc<dyn Integration>, CtlError> {
        let client = payments::lambda::build(config, aws.clone())
            .await
            .map_err(|e| CtlError::Config(e.to_string()))?;
        Ok(Arc::new(client))
    }

    fn offline(&self, config: PaymentsConfig) -> Arc<dyn Integration> {
        Arc::new(offline_client(config.url))
    }
}

// --- the fixture ------------------------------------------------------------------------------

/// The card token every body carries: a secret gatectl never prints.
const CARD: &str = "pm_card_secret_4242";

/// payments with the test kit's Idempotency-Key server shaped like the payments API (`201
/// {"id": "ch-..."}`, `409` on a mismatch, no lookup by key, keys kept 24 hours).
pub struct PaymentsFixture {
    server: IdempotencyServer,
}

impl Fixture for PaymentsFixture {
    type Stack = PaymentsStack;

    fn stack() -> PaymentsStack {
        PaymentsStack
    }

    async fn start(clock: Arc<ManualClock>) -> (Self, Vec<(&'static str, String)>) {
        let api = ServerConfig::new("/v1/charges", "id")
            .id_prefix("ch")
            .mismatch(MismatchAnswer::Conflict)
            .without_lookup()
            .retention_ms(payments::KEY_RETENTION_MS);
        let server = IdempotencyServer::start(api, clock)
            .await
            .expect("a loopback port");
        let arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:payments-key-AbCdEf";
        let vars = vec![
            ("PAYMENTS_API_URL", server.url().to_string()),
            ("PAYMENTS_KEY_SECRET_ARN", arn.to_string()),
        ];
        (Self { server }, vars)
    }

    fn integration(&self) -> Arc<dyn Integration> {
        Arc::new(Payments {
            url: self.server.url().to_string(),
            key: SecretString::new("sk_test_runbooks"),
            http: gate_http::builder("payments-runbooks")
                .build()
                .expect("an HTTP client"),
        })
    }

    fn body(&self, n: u32) -> String {
        json!({"invoice_id": self.source_id(n), "customer": format!("cus_{n}"),
            "amount_minor": 12_500 + n, "currency": "EUR", "payment_method": CARD})
        .to_string()
    }

    fn source_id(&self, n: u32) -> String {
        format!("INV-{n}")
    }

    fn secret(&self) -> Option<&'static str> {
        Some(CARD)
    }

    fn effects_made(&self) -> usize {
        self.server.effects_made()
    }

    fn has_lookup(&self) -> bool {
        false
    }
}
