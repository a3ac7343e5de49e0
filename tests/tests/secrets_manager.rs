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
    assert!(truck_slot::config::secret_arn_valid(&arn), "{arn}");
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
            SecretError::BadToken {
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
        SecretError::BadToken {
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
    // The same path as `truck_slot::lambda::build_consumer`: configuration from the environment (the
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
    assert!(config.terminal.token.is_none());
    let arn_from_config = config.token_secret_arn.clone().unwrap();
    let mut terminal = config.terminal.clone();
    terminal.token = Some(fetch_api_token(&client, &arn_from_config).await.unwrap());
    assert_eq!(terminal.token.as_ref().unwrap().expose(), TOKEN);
    assert!(!format!("{terminal:?} {config:?}").contains("PLUGH"));
}
