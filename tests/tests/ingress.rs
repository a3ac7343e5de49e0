//! The webhook ingress against moto (`MOTO_ENDPOINT`): the secrets read from Secrets Manager, the
//! body queued on SQS byte for byte with its `webhook-id` attribute, every refusal leaving the
//! queue empty, a rotation done in Secrets Manager, a queue that is down (a moto of its own,
//! stopped) answered `503`; and the `ingress` binary under `cargo lambda watch` invoked with the
//! sample event `events/webhook-portbase.json`, dated and signed for now (`sim::sample_events`).

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use aws_config::Region;
use aws_lambda_events::event::apigw::ApiGatewayV2httpRequest;
use aws_sdk_secretsmanager::config::Credentials;
use gate::clock::{Clock, ManualClock, SystemClock};
use ingress::config::{IngressConfig, SecretsConfig};
use ingress::event::SignedWebhook;
use ingress::handler::{Handled, Ingress};
use ingress::signature::{SecretSet, WebhookSecret};
use integration_tests::lambda_watch::{
    dated_events, free_port, invoke, workspace_root, WatchCommand,
};
use integration_tests::{fresh_queue, moto_endpoint, sdk_config, sqs_client, unique, REGION};
use serde_json::{json, Value};

const BODY: &str = r#"{"notificationId":"PCS-CIS-20270114-000042","equipment_number":"CSQU3054383","preferred_window":{"start":"2027-01-16T08:00:00Z","end":"2027-01-16T10:00:00Z"},"terminal":"ECT-DELTA","pin":"RLS-104233"}"#;

/// The ingress's own SDK settings (retries, timeouts) pointed at `endpoint`.
async fn aws_for(endpoint: &str) -> aws_config::SdkConfig {
    ingress::lambda::aws_loader()
        .endpoint_url(endpoint)
        .region(Region::new(REGION))
        .credentials_provider(Credentials::new("test", "test", None, None, "moto"))
        .load()
        .await
}

fn secret(byte: u8) -> WebhookSecret {
    WebhookSecret::from_bytes(vec![byte; 32]).unwrap()
}

fn secrets_json(secrets: &[&WebhookSecret]) -> String {
    let written: Vec<String> = secrets.iter().map(|s| s.to_written()).collect();
    json!({ "active": written }).to_string()
}

fn now_s() -> i64 {
    SystemClock.now_ms() / 1000
}

fn request(signers: &[WebhookSecret], id: &str, ts: i64, body: &str) -> ApiGatewayV2httpRequest {
    serde_json::from_value(
        SignedWebhook::sign(signers, id, ts, body).http_api_event(ts * 1000, "req-1"),
    )
    .unwrap()
}

/// Every message on `queue_url` now (received and deleted), as (body, webhook-id attribute).
async fn drain(sqs: &aws_sdk_sqs::Client, queue_url: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    loop {
        let received = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .message_attribute_names("All")
            .send()
            .await
            .unwrap();
        if received.messages().is_empty() {
            return out;
        }
        for m in received.messages() {
            let id = m
                .message_attributes()
                .and_then(|a| a.get("webhook-id"))
                .and_then(|v| v.string_value())
                .unwrap_or_default()
                .to_string();
            out.push((m.body().unwrap_or_default().to_string(), id));
            sqs.delete_message()
                .queue_url(queue_url)
                .receipt_handle(m.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
    }
}

fn status(handled: &Handled) -> (u16, &'static str) {
    (handled.status(), handled.outcome())
}

#[tokio::test]
async fn webhooks_are_verified_with_secrets_manager_and_queued_byte_for_byte_on_sqs() {
    let endpoint = moto_endpoint();
    let sqs = sqs_client().await;
    let queue_url = fresh_queue(&sqs, "ingress").await;
    let secrets = aws_sdk_secretsmanager::Client::new(&sdk_config().await);
    let (old, new, other) = (secret(1), secret(2), secret(3));
    let arn = secrets
        .create_secret()
        .name(unique("webhook-secrets"))
        .secret_string(secrets_json(&[&old]))
        .send()
        .await
        .unwrap()
        .arn()
        .unwrap()
        .to_string();
    let config = IngressConfig {
        queue_url: queue_url.clone(),
        secrets: SecretsConfig::SecretsManager { arn: arn.clone() },
        integration: "ingress-test".into(),
    };
    let mut ingress: Ingress = ingress::lambda::build(&config, &aws_for(&endpoint).await)
        .await
        .unwrap();

    // Accepted and queued as sent, the webhook-id as the message attribute.
    let now = now_s();
    let odd_body = format!("{BODY}\n  ");
    let accepted = ingress
        .handle(&request(
            std::slice::from_ref(&old),
            "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W",
            now,
            &odd_body,
        ))
        .await;
    assert_eq!(status(&accepted), (202, "accepted"));
    let queued = drain(&sqs, &queue_url).await;
    assert_eq!(
        queued,
        vec![(
            odd_body.clone(),
            "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W".to_string()
        )]
    );
    assert!(accepted
        .message_id
        .as_deref()
        .is_some_and(|m| !m.is_empty()));

    // Each way to fail: its status, nothing queued.
    let mut other_id: Value =
        SignedWebhook::sign(std::slice::from_ref(&old), "msg_other", now, BODY)
            .http_api_event(now * 1000, "r");
    other_id["headers"]["webhook-id"] = json!("msg_1");
    let mut tampered: Value = SignedWebhook::sign(std::slice::from_ref(&old), "msg_1", now, BODY)
        .http_api_event(now * 1000, "r");
    tampered["body"] = json!(BODY.replace("CSQU3054383", "MSKU1234565"));
    let mut unsigned: Value = SignedWebhook::sign(std::slice::from_ref(&old), "msg_1", now, BODY)
        .http_api_event(now * 1000, "r");
    for h in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
        unsigned["headers"].as_object_mut().unwrap().remove(h);
    }
    let big = format!(
        "{BODY}{}",
        " ".repeat(truck_slot::notification::MAX_BODY_BYTES)
    );
    let refusals: Vec<(&str, ApiGatewayV2httpRequest, (u16, &str))> = vec![
        (
            "wrong secret",
            request(std::slice::from_ref(&other), "msg_1", now, BODY),
            (401, "invalid_signature"),
        ),
        (
            "tampered body",
            serde_json::from_value(tampered).unwrap(),
            (401, "invalid_signature"),
        ),
        (
            "another webhook-id",
            serde_json::from_value(other_id).unwrap(),
            (401, "invalid_signature"),
        ),
        (
            "no headers",
            serde_json::from_value(unsigned).unwrap(),
            (401, "missing_signature_headers"),
        ),
        (
            "6 minutes old",
            request(std::slice::from_ref(&old), "msg_1", now - 360, BODY),
            (400, "stale_timestamp"),
        ),
        (
            "6 minutes ahead",
            request(std::slice::from_ref(&old), "msg_1", now + 360, BODY),
            (400, "stale_timestamp"),
        ),
        (
            "oversized",
            request(std::slice::from_ref(&old), "msg_1", now, &big),
            (413, "body_too_large"),
        ),
        (
            "empty",
            request(std::slice::from_ref(&old), "msg_1", now, ""),
            (400, "empty_body"),
        ),
    ];
    for (what, r, expected) in refusals {
        assert_eq!(status(&ingress.handle(&r).await), expected, "{what}");
    }
    assert_eq!(
        drain(&sqs, &queue_url).await,
        vec![],
        "a refusal queued something"
    );

    // The rotation, done in Secrets Manager: the new secret added next to the old one. Running
    // environments read the secrets again after an unmatched signature, at most once a minute:
    // a minute on, a webhook signed with the new secret only is accepted (secret index 1).
    secrets
        .put_secret_value()
        .secret_id(&arn)
        .secret_string(secrets_json(&[&old, &new]))
        .send()
        .await
        .unwrap();
    let later_ms = SystemClock.now_ms() + 61_000;
    ingress.clock = Arc::new(ManualClock::new(later_ms));
    let later = later_ms / 1000;
    let rotated = ingress
        .handle(&request(std::slice::from_ref(&new), "msg_new", later, BODY))
        .await;
    assert_eq!(status(&rotated), (202, "accepted"));
    assert_eq!(rotated.secret_index, Some(1));
    // Both secrets work while both are listed; the sender may sign with both.
    for (signers, id) in [
        (vec![old.clone()], "msg_o"),
        (vec![old.clone(), new.clone()], "msg_b"),
    ] {
        assert_eq!(
            status(&ingress.handle(&request(&signers, id, later, BODY)).await),
            (202, "accepted"),
            "{id}"
        );
    }
    let queued: Vec<String> = drain(&sqs, &queue_url)
        .await
        .into_iter()
        .map(|(_, id)| id)
        .collect();
    assert_eq!(queued.len(), 3);
    for id in ["msg_new", "msg_o", "msg_b"] {
        assert!(
            queued.iter().any(|q| q == id),
            "{id} not queued: {queued:?}"
        );
    }
}

/// A moto of this test's own on a free port, stopped on drop.
struct OwnMoto(std::process::Child);

impl Drop for OwnMoto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_queue_that_is_down_answers_503_and_the_retry_is_queued_once_it_is_back() {
    let moto = workspace_root().join(".venv/bin/moto_server");
    let port = free_port();
    let start = || {
        Command::new(&moto)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map(OwnMoto)
            .expect("moto_server in .venv (make test installs it)")
    };
    let endpoint = format!("http://127.0.0.1:{port}");
    let aws = aws_for(&endpoint).await;
    let sqs = aws_sdk_sqs::Client::new(&aws);
    let create = || async {
        for _ in 0..100 {
            if let Ok(out) = sqs.create_queue().queue_name("ingress-down").send().await {
                return out.queue_url().unwrap().to_string();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("moto on {endpoint} did not start")
    };
    let running = start();
    let queue_url = create().await;
    let s = secret(5);
    let config = IngressConfig {
        queue_url: queue_url.clone(),
        secrets: SecretsConfig::Local(SecretSet::new(vec![s.clone()]).unwrap()),
        integration: "ingress-test".into(),
    };
    let ingress = ingress::lambda::build(&config, &aws).await.unwrap();
    let now = now_s();
    assert_eq!(
        status(
            &ingress
                .handle(&request(std::slice::from_ref(&s), "msg_up", now, BODY))
                .await
        ),
        (202, "accepted")
    );

    // moto stopped: SendMessage cannot connect; the sender gets a 503 problem and retries.
    drop(running);
    let down = ingress
        .handle(&request(std::slice::from_ref(&s), "msg_down", now, BODY))
        .await;
    assert_eq!(status(&down), (503, "queue_unavailable"));
    assert_eq!(
        down.response.headers["content-type"],
        "application/problem+json"
    );

    // Back (a fresh moto: an empty queue of the same URL): the sender's retry is queued.
    let _back = start();
    let queue_url_again = create().await;
    assert_eq!(queue_url_again, queue_url);
    let retry = ingress
        .handle(&request(
            std::slice::from_ref(&s),
            "msg_down",
            now_s(),
            BODY,
        ))
        .await;
    assert_eq!(status(&retry), (202, "accepted"));
    assert_eq!(
        drain(&sqs, &queue_url).await,
        vec![(BODY.to_string(), "msg_down".to_string())]
    );
}

/// The `ingress` binary under `cargo lambda watch` (docs/WEBHOOK_INGRESS.md), logging at TRACE:
/// after an unsigned warm-up (`401`, while the watcher builds the function), the sample event,
/// dated and signed for now with the sample's local secret, is answered `202`
/// and its body queued; the same event with its signature broken is answered `401`. One log line
/// per request with its outcome, the EMF counters, and neither the PIN nor the secret anywhere in
/// the output (the SDK's and the runtime's TRACE payload lines are filtered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ingress_binary_queues_the_sample_event() {
    let sqs = sqs_client().await;
    let queue_url = fresh_queue(&sqs, "ingress-binary").await;
    let logs = std::env::temp_dir().join(unique("ingress-watch"));
    let mut watch = WatchCommand::new();
    let port = watch.port();
    watch
        .against_moto()
        .json_logs(Some("TRACE"))
        .ingress_to(&queue_url);
    let watch = watch.spawn_logged(&logs);

    // The watcher builds `ingress` on its first invocation, which can take minutes on a cold
    // machine, longer than the 300 s a signed timestamp is good for: warm it up with an
    // unsigned copy of the sample (refused, `401`), and date and sign the sample only then.
    let raw = workspace_root()
        .join("events")
        .join("webhook-portbase.json");
    let mut unsigned: Value = serde_json::from_str(&std::fs::read_to_string(raw).unwrap()).unwrap();
    let headers = unsigned["headers"].as_object_mut().unwrap();
    headers.retain(|name, _| !name.starts_with("webhook-"));
    let warm_file = std::env::temp_dir().join(unique("ingress-warm.json"));
    std::fs::write(&warm_file, unsigned.to_string()).unwrap();
    let warm = warm_file.clone();
    let answer = tokio::task::spawn_blocking(move || invoke(port, "ingress", warm))
        .await
        .unwrap();
    assert_eq!(answer["statusCode"], 401, "{answer}");
    let problem: Value = serde_json::from_str(answer["body"].as_str().unwrap()).unwrap();
    assert_eq!(problem["reason"], "missing_signature_headers");

    let events = dated_events("ingress-events");
    let sample = events.join("webhook-portbase.json");
    let event: Value = serde_json::from_str(&std::fs::read_to_string(&sample).unwrap()).unwrap();
    let file = sample.clone();
    let answer = tokio::task::spawn_blocking(move || invoke(port, "ingress", file))
        .await
        .unwrap();
    assert_eq!(answer["statusCode"], 202, "{answer}");
    let queued = drain(&sqs, &queue_url).await;
    assert_eq!(
        queued,
        vec![(
            event["body"].as_str().unwrap().to_string(),
            event["headers"]["webhook-id"].as_str().unwrap().to_string()
        )]
    );

    let mut broken = event.clone();
    broken["headers"]["webhook-signature"] =
        json!("v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=");
    let broken_file = events.join("broken.json");
    std::fs::write(&broken_file, broken.to_string()).unwrap();
    let answer = tokio::task::spawn_blocking(move || invoke(port, "ingress", broken_file))
        .await
        .unwrap();
    assert_eq!(answer["statusCode"], 401, "{answer}");
    let problem: Value = serde_json::from_str(answer["body"].as_str().unwrap()).unwrap();
    assert_eq!(problem["reason"], "invalid_signature");
    assert_eq!(drain(&sqs, &queue_url).await, vec![]);

    let (stdout, stderr) = watch.stop().await;
    let text = format!("{stdout}\n{stderr}");
    let lines: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    let webhook_lines: Vec<&Value> = lines
        .iter()
        .filter(|l| l["fields"]["message"] == "webhook")
        .collect();
    let mut outcomes: Vec<(&Value, &Value)> = webhook_lines
        .iter()
        .map(|l| (&l["fields"]["outcome"], &l["fields"]["webhook_id"]))
        .collect();
    // The warm-up: once, or more if `invoke` retried an attempt that reached the function.
    let warm_ups = outcomes
        .iter()
        .take_while(|o| o.0 == "missing_signature_headers" && o.1 == "")
        .count();
    assert!(warm_ups >= 1, "the warm-up is logged:\n{text}");
    outcomes.drain(..warm_ups);
    let id = event["headers"]["webhook-id"].clone();
    assert_eq!(
        outcomes,
        vec![
            (&json!("accepted"), &id),
            // Unsigned: the sender's id only by its keyed digest.
            (&json!("invalid_signature"), &json!(""))
        ],
        "one line per request:\n{text}"
    );
    assert!(webhook_lines
        .iter()
        .all(|l| l["fields"]["latency_ms"].as_f64().is_some()));
    let emf: Vec<&Value> = lines.iter().filter(|l| l.get("_aws").is_some()).collect();
    assert!(
        emf.iter().any(|d| d["WebhooksAccepted"] == 1)
            && emf
                .iter()
                .any(|d| d["WebhooksRejected"] == 1 && d["Reason"] == "invalid_signature"),
        "the EMF counters: {emf:?}"
    );
    assert!(
        text.contains("TRACE logging: other crates are capped at INFO"),
        "TRACE was on"
    );
    let pin = serde_json::from_str::<Value>(event["body"].as_str().unwrap()).unwrap()["pin"]
        .as_str()
        .unwrap()
        .to_string();
    let key_b64 = ingress::event::LOCAL_SAMPLE_SECRET.trim_start_matches("whsec_");
    for secret in [pin.as_str(), key_b64, "local-only-sample-secret"] {
        assert!(
            !text.contains(secret),
            "the output holds {secret:?}:\n{text}"
        );
    }
    let _ = std::fs::remove_dir_all(&events);
    let _ = std::fs::remove_dir_all(&logs);
    let _ = std::fs::remove_file(&warm_file);
}

/// The ingress refuses (`413`) exactly the bodies the consumer's integration would reject for
/// their size: its limit is truck-slot's, which it no longer depends on.
#[test]
fn the_ingress_limit_is_the_consumers() {
    assert_eq!(
        ingress::handler::MAX_BODY_BYTES,
        truck_slot::notification::MAX_BODY_BYTES
    );
}
