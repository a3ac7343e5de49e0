//! A function that cannot start (configuration missing or invalid, a secret unreadable) reports
//! it to the Runtime API's init-error endpoint ([`report_init_error`]) and exits: Lambda fails the
//! waiting invocation at once with the message, instead of the invocation waiting for a runtime
//! that never asks for its event.

use lambda_runtime::Error;

use super::env::ConfigErrors;

/// The error type (`Lambda-Runtime-Function-Error-Type` and `errorType`) of a start refused for
/// its configuration: every missing or invalid variable, named ([`ConfigErrors`]).
pub const INVALID_CONFIGURATION: &str = "Runtime.InvalidConfiguration";

/// The error type of any other failed start: a secret unreadable, a client that cannot be built,
/// a store refused by its cold-start checks.
pub const INIT_ERROR: &str = "Runtime.InitError";

/// The Runtime API path a runtime posts its initialization error to.
const INIT_ERROR_PATH: &str = "/2018-06-01/runtime/init/error";

/// How long reporting an init error may take before the function exits anyway.
const INIT_ERROR_REPORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Reports a failed start to the Lambda Runtime API, as a custom runtime must (AWS Lambda
/// Developer Guide, "Using the Lambda runtime API for custom runtimes", *Initialization error*):
/// `POST /2018-06-01/runtime/init/error` with the header `Lambda-Runtime-Function-Error-Type:
/// {error_type}` and the body `{"errorType": error_type, "errorMessage": message}`. Lambda (and
/// `cargo lambda watch`) then answers the waiting invocation with that error at once; the caller
/// exits afterwards and the next invocation starts a fresh environment.
///
/// Sent with `lambda_runtime_api_client`, the client `lambda_runtime` itself uses (base URL from
/// `AWS_LAMBDA_RUNTIME_API`, its path prefix and user agent honoured): `lambda_runtime` 1.5
/// reports init errors only for its SnapStart hooks and has no public call for them. Without
/// `AWS_LAMBDA_RUNTIME_API` (the binary run outside a Lambda runtime) nothing is sent. The
/// message is also logged; it must hold no secret (configuration errors describe a secret, never
/// quote it; a Secrets Manager failure names the ARN). A failed report is logged, never retried.
pub async fn report_init_error(error_type: &str, message: &str) {
    tracing::error!(error_type, error = %message, "cannot start; reporting the init error");
    let Some(api) = std::env::var("AWS_LAMBDA_RUNTIME_API")
        .ok()
        .filter(|v| !v.trim().is_empty())
    else {
        tracing::warn!(
            "AWS_LAMBDA_RUNTIME_API is not set: not under a Lambda runtime, not reported"
        );
        return;
    };
    let endpoint = if api.contains("://") {
        api
    } else {
        format!("http://{api}")
    };
    if let Err(e) = post_init_error(&endpoint, error_type, message).await {
        tracing::error!(error = %e, "the init error could not be reported to the Runtime API");
    }
}

/// `POST {endpoint}/2018-06-01/runtime/init/error`; `Ok` on a 2xx answer (Lambda: `202`).
async fn post_init_error(endpoint: &str, error_type: &str, message: &str) -> Result<(), Error> {
    use lambda_runtime_api_client::{body::Body, build_request, PooledClient};
    let base: http::Uri = endpoint
        .parse()
        .map_err(|e| format!("AWS_LAMBDA_RUNTIME_API {endpoint:?} is not a URI: {e}"))?;
    if base.authority().is_none() {
        return Err(format!("AWS_LAMBDA_RUNTIME_API {endpoint:?} names no host").into());
    }
    let diagnostic = lambda_runtime::Diagnostic {
        error_type: error_type.to_string(),
        error_message: message.to_string(),
    };
    let request = build_request()
        .method("POST")
        .uri(INIT_ERROR_PATH)
        .header("Lambda-Runtime-Function-Error-Type", error_type)
        .header("Content-Type", "application/json")
        .body(Body::from(serde_json::to_vec(&diagnostic)?))?;
    let client = PooledClient::builder().with_endpoint(base).build();
    let answer = tokio::time::timeout(INIT_ERROR_REPORT_TIMEOUT, client.call(request))
        .await
        .map_err(|_| "no answer within 5 s")??;
    if answer.status().is_success() {
        Ok(())
    } else {
        Err(format!("the Runtime API answered {}", answer.status()).into())
    }
}

/// Why a function could not start: its configuration ([`INVALID_CONFIGURATION`]) or anything
/// else ([`INIT_ERROR`]).
#[derive(Debug, thiserror::Error)]
pub enum InitFailure {
    /// Its configuration ([`INVALID_CONFIGURATION`]).
    #[error(transparent)]
    Config(#[from] ConfigErrors),
    /// Anything else ([`INIT_ERROR`]).
    #[error(transparent)]
    Other(#[from] Error),
}

/// Runs a function's start-up; on failure reports it ([`report_init_error`]) and returns the
/// error, which ends the process.
///
/// # Errors
/// The start-up's failure, after it was reported.
pub async fn start<T>(
    init: impl std::future::Future<Output = Result<T, InitFailure>>,
) -> Result<T, Error> {
    match init.await {
        Ok(started) => Ok(started),
        Err(failure) => {
            let error_type = match failure {
                InitFailure::Config(_) => INVALID_CONFIGURATION,
                InitFailure::Other(_) => INIT_ERROR,
            };
            report_init_error(error_type, &failure.to_string()).await;
            Err(Error::from(failure))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::Mutex;

    /// What the fake Runtime API received: path, error-type header, body.
    type Seen = Arc<Mutex<Vec<(String, Option<String>, serde_json::Value)>>>;

    /// A Runtime API stand-in on loopback that records every request and answers `202`.
    async fn runtime_api() -> (String, Seen) {
        let seen: Seen = Arc::default();
        let record = seen.clone();
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let record = record.clone();
            async move {
                let (parts, body) = request.into_parts();
                let bytes = axum::body::to_bytes(body, 1 << 20)
                    .await
                    .unwrap_or_default();
                record.lock().unwrap().push((
                    parts.uri.path().to_string(),
                    parts
                        .headers
                        .get("lambda-runtime-function-error-type")
                        .and_then(|v| v.to_str().ok())
                        .map(String::from),
                    serde_json::from_slice(&bytes).unwrap_or_default(),
                ));
                axum::http::StatusCode::ACCEPTED
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (addr.to_string(), seen)
    }

    /// The request Lambda expects: `POST /2018-06-01/runtime/init/error`, the error type in
    /// `Lambda-Runtime-Function-Error-Type` and the body `{"errorType", "errorMessage"}`; under
    /// a base path (as `cargo lambda watch` gives each function), below it.
    #[tokio::test]
    async fn an_init_error_is_posted_as_the_runtime_api_expects() {
        let (addr, seen) = runtime_api().await;
        post_init_error(
            &format!("http://{addr}"),
            INVALID_CONFIGURATION,
            "bad: X missing",
        )
        .await
        .unwrap();
        post_init_error(
            &format!("http://{addr}/.rt/consumer"),
            INIT_ERROR,
            "no secret",
        )
        .await
        .unwrap();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            vec![
                (
                    "/2018-06-01/runtime/init/error".to_string(),
                    Some("Runtime.InvalidConfiguration".to_string()),
                    serde_json::json!({
                        "errorType": "Runtime.InvalidConfiguration",
                        "errorMessage": "bad: X missing"
                    })
                ),
                (
                    "/.rt/consumer/2018-06-01/runtime/init/error".to_string(),
                    Some("Runtime.InitError".to_string()),
                    serde_json::json!({"errorType": "Runtime.InitError", "errorMessage": "no secret"})
                ),
            ]
        );
    }

    /// A Runtime API that refuses the report, or a malformed address, is an error (logged by
    /// the caller), never a panic.
    #[tokio::test]
    async fn a_refused_or_impossible_report_is_an_error() {
        let app = axum::Router::new().fallback(|| async { axum::http::StatusCode::FORBIDDEN });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let err = post_init_error(&format!("http://{addr}"), INIT_ERROR, "x")
            .await
            .unwrap_err();
        assert!(err.to_string().contains("403"), "{err}");
        assert!(post_init_error("http:///no-host", INIT_ERROR, "x")
            .await
            .is_err());
        assert!(post_init_error("http://exa mple", INIT_ERROR, "x")
            .await
            .is_err());
    }
}
