//! The terminal's API token from AWS Secrets Manager (moto at `MOTO_ENDPOINT`): read by ARN,
//! trimmed, validated, and every failure named without the value.

use integration_tests::{sdk_config, unique};
use truck_slot::config::FunctionConfig;
use truck_slot::secrets::{fetch_api_token, SecretError};
use truck_slot::terminal::TokenError;

const TOKEN: &str = "tok-PLUGH-0042";

async fn client() -> aws_sdk_secretsmanager::Client {
    aws_sdk_secretsmanager::Client::new(&sdk_config().await)
}

async fn secret_string(client: &aws_sdk_secretsmanager::Client, value: &str) -> String {
    client
        .create_secret()
        .name(unique("terminal-token"))
        .secret_string(value)
        .send()
        .await
        .expect("create secret in moto")
        .arn()
        .expect("an ARN")
        .to_string()
}

#[tokio::test]
async fn the_token_is_read_by_arn_and_trimmed() {
    let client = client().await;
    let arn = secret_string(&client, &format!("{TOKEN}\n")).await;
    // The ARN passes the configuration's check, as the template's parameter would.
    assert!(gate_lambda::secret_arn_valid(&arn), "{arn}");
    let token = fetch_api_token(&client, &arn).await.unwrap();
    assert_eq!(token.expose(), TOKEN);
    assert_eq!(format!("{token:?}"), "ApiToken([redacted])");
    assert_eq!(token.to_string(), "[redacted]");

    // The current version is read: after a rotation (a new AWSCURRENT), the next cold start gets
    // the new token.
    client
        .put_secret_value()
        .secret_id(&arn)
        .secret_string("tok-PLUGH-0043")
        .send()
        .await
        .unwrap();
    assert_eq!(
        fetch_api_token(&client, &arn).await.unwrap().expose(),
        "tok-PLUGH-0043"
    );
}

#[tokio::test]
async fn failures_name_the_secret_never_the_value() {
    let client = client().await;

    let missing = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:no-such-secret-AbCdEf";
    let err = fetch_api_token(&client, missing).await.unwrap_err();
    assert!(matches!(err, SecretError::Unavailable { .. }), "{err:?}");
    assert!(err.to_string().contains(missing), "{err}");

    let spaced = secret_string(&client, "tok PLUGH 0042").await;
    let err = fetch_api_token(&client, &spaced).await.unwrap_err();
    assert!(
        matches!(
            err,
            SecretError::Unusable {
                problem: TokenError::BadCharacter(3),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!format!("{err} {err:?}").contains("PLUGH"), "{err}");

    let blank = secret_string(&client, "  \n").await;
    assert!(matches!(
        fetch_api_token(&client, &blank).await.unwrap_err(),
        SecretError::Unusable {
            problem: TokenError::Empty,
            ..
        }
    ));

    let binary = client
        .create_secret()
        .name(unique("terminal-token-binary"))
        .secret_binary(aws_sdk_secretsmanager::primitives::Blob::new(
            TOKEN.as_bytes(),
        ))
        .send()
        .await
        .unwrap()
        .arn()
        .unwrap()
        .to_string();
    let err = fetch_api_token(&client, &binary).await.unwrap_err();
    assert!(matches!(err, SecretError::NotAString { .. }), "{err:?}");
    assert!(!format!("{err} {err:?}").contains("PLUGH"));
}

#[tokio::test]
async fn the_cold_start_reads_the_secret_named_by_the_configuration() {
    // The same path as `truck_slot::lambda::build`: configuration from the environment (the
    // ARN only), then the token from Secrets Manager, into the terminal client's settings.
    let client = client().await;
    let arn = secret_string(&client, TOKEN).await;
    let env = |k: &str| -> Option<String> {
        match k {
            "IDEMPOTENCY_TABLE" => Some("idem".into()),
            "BOOKINGS_TABLE" => Some("book".into()),
            "MANUAL_QUEUE_URL" => Some("http://127.0.0.1:1/q".into()),
            "TERMINAL_BASE_URL" => Some("https://slots.example".into()),
            "TERMINAL_API_TOKEN_SECRET_ARN" => Some(arn.clone()),
            _ => None,
        }
    };
    let config = FunctionConfig::from_env(env).unwrap();
    assert!(config.integration.terminal.token.is_none());
    let arn_from_config = config.integration.token_secret_arn.clone().unwrap();
    let mut terminal = config.integration.terminal.clone();
    terminal.token = Some(fetch_api_token(&client, &arn_from_config).await.unwrap());
    assert_eq!(terminal.token.as_ref().unwrap().expose(), TOKEN);
    assert!(!format!("{terminal:?} {config:?}").contains("PLUGH"));
}

/// Several terminals (`TERMINALS`): each terminal with key support gets its own token, read from
/// its own secret at cold start and sent only to it; a terminal without key support has no client
/// and its secret is never read; a secret that cannot be read stops the start, naming the
/// terminal and the ARN, never a value.
#[tokio::test]
async fn several_terminals_each_send_their_own_token() {
    use std::sync::{Arc, Mutex};

    use truck_slot::terminal::several::{parse_terminals, TerminalLimits};
    use truck_slot::terminal::{CallOutcome, HttpTerminalConfig, SlotTerminal};

    let client = client().await;
    let ect = secret_string(&client, "tok-ECT-0001").await;
    let apmt = secret_string(&client, "tok-APMT-0002").await;
    // A terminal that records the Authorization header of every request, by path.
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let record = seen.clone();
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let record = record.clone();
        async move {
            let auth = request
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            let path = request.uri().path().to_string();
            record.lock().unwrap().push((path.clone(), auth));
            let body = if path.ends_with("/v2/appointments") {
                serde_json::json!({"appointment": {"id": "A-1", "container": {"number": "CSQU3054383"}}})
            } else {
                serde_json::json!({"slot_id": "S-1", "equipment_number": "CSQU3054383"})
            };
            (axum::http::StatusCode::CREATED, body.to_string())
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let never_read = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:rwg-never-read-AbCdEf";
    let terminals = serde_json::json!([
        {"code": "ECT-DELTA", "supports_idempotency_key": true, "base_url": format!("http://{addr}/ect"),
         "token_secret_arn": ect, "key_retention_seconds": 86400, "max_concurrent_calls": 2},
        {"code": "APMT-MV2", "supports_idempotency_key": true, "api": "appointments-v2",
         "base_url": format!("http://{addr}/apmt"), "token_secret_arn": apmt,
         "key_retention_seconds": 86400, "max_concurrent_calls": 1},
        {"code": "RWG", "supports_idempotency_key": false, "token_secret_arn": never_read}
    ])
    .to_string();
    let limits = TerminalLimits {
        key_ttl_s: 1_814_400,
        retention_margin_s: 3_600,
    };
    let specs = parse_terminals(&terminals, limits).unwrap();
    let shared = HttpTerminalConfig::new("");
    let router = truck_slot::lambda::terminal_router(&specs, &shared, &client)
        .await
        .unwrap();
    assert_eq!(router.codes(), ["APMT-MV2", "ECT-DELTA"]);
    let debug = format!("{router:?}");
    assert!(!debug.contains("tok-"), "{debug}");
    let request = br#"{"equipment_number":"CSQU3054383","pin":"4711","window_end":"2026-12-01T12:00:00Z","window_start":"2026-12-01T08:00:00Z"}"#;
    for (terminal, slot) in [("ECT-DELTA", "S-1"), ("APMT-MV2", "A-1")] {
        let CallOutcome::Done(claimed) = router.claim_at(terminal, "k", request).await else {
            panic!("{terminal}: claimed");
        };
        assert_eq!(claimed.effect_id, slot);
    }
    assert_eq!(
        seen.lock().unwrap().clone(),
        [
            ("/ect/slots".to_string(), "Bearer tok-ECT-0001".to_string()),
            (
                "/apmt/v2/appointments".to_string(),
                "Bearer tok-APMT-0002".to_string()
            ),
        ]
    );
    // A keyed terminal whose secret cannot be read stops the start, named.
    let mut broken = specs.clone();
    broken[1].token_secret_arn = Some(never_read.to_string());
    let err = truck_slot::lambda::terminal_router(&broken, &shared, &client)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("terminal \"APMT-MV2\""), "{err}");
    assert!(err.contains(never_read), "{err}");
    server.abort();
}
