//! Signed webhooks as API Gateway delivers them: the HTTP API event (payload format 2.0) for a
//! body signed at a given time, for the local signer (`sim sign-webhook`), the sample event in
//! `events/`, the simulator, the tests and the benchmark.

use serde_json::{json, Value};

use crate::signature::{
    signature_header, WebhookSecret, HEADER_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP,
};

/// The route (`{method} {path}`), as the HTTP API names it in `routeKey`.
pub const ROUTE_KEY: &str = "POST /webhooks/portbase";
/// The route's path.
pub const ROUTE_PATH: &str = "/webhooks/portbase";

/// The signing secret of the sample event `events/webhook-portbase.json` and of the local runs
/// of `docs/WEBHOOK_INGRESS.md` (`WEBHOOK_SECRETS='{"active": ["whsec_..."]}'`). Public by
/// design: **never configure it in a stack**; a deployed stack reads its secrets from Secrets
/// Manager.
pub const LOCAL_SAMPLE_SECRET: &str = "whsec_bG9jYWwtb25seS1zYW1wbGUtc2VjcmV0LTMyYnl0ZXM=";

/// One signed delivery: the three headers' values and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedWebhook {
    /// `webhook-id`.
    pub id: String,
    /// `webhook-timestamp`, epoch seconds.
    pub timestamp: i64,
    /// `webhook-signature`: one `v1,` signature per secret, space-separated.
    pub signature: String,
    /// The body, unchanged.
    pub body: String,
}

impl SignedWebhook {
    /// `body` sent as `id` at `timestamp_s` (epoch seconds), signed with every secret of
    /// `secrets` (a sender in the middle of a rotation signs with two).
    pub fn sign(secrets: &[WebhookSecret], id: &str, timestamp_s: i64, body: &str) -> Self {
        Self {
            id: id.to_string(),
            timestamp: timestamp_s,
            signature: signature_header(secrets, id, timestamp_s, body.as_bytes()),
            body: body.to_string(),
        }
    }

    /// The three `webhook-*` headers, names in lower case.
    pub fn headers(&self) -> [(&'static str, String); 3] {
        [
            (HEADER_ID, self.id.clone()),
            (HEADER_TIMESTAMP, self.timestamp.to_string()),
            (HEADER_SIGNATURE, self.signature.clone()),
        ]
    }

    /// The HTTP API event (payload 2.0) of this delivery as API Gateway invokes the function,
    /// received at `received_ms` (epoch ms: `requestContext.timeEpoch` and `time`), with API
    /// Gateway's request id `request_id`; `Content-Type: application/json`, the body not base64.
    pub fn http_api_event(&self, received_ms: i64, request_id: &str) -> Value {
        let mut headers = json!({
            "content-type": "application/json",
            "content-length": self.body.len().to_string(),
            "host": "a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com",
            "user-agent": "Svix-Webhooks/1.63 (sender; Portbase)",
            "x-amzn-trace-id": "Root=1-674b8a10-3f1e2d3c4b5a69788796a5b4",
            "x-forwarded-for": "203.0.113.10",
            "x-forwarded-port": "443",
            "x-forwarded-proto": "https"
        });
        for (name, value) in self.headers() {
            headers[name] = Value::String(value);
        }
        json!({
            "version": "2.0",
            "routeKey": ROUTE_KEY,
            "rawPath": ROUTE_PATH,
            "rawQueryString": "",
            "headers": headers,
            "requestContext": {
                "accountId": "123456789012",
                "apiId": "a1b2c3d4e5",
                "domainName": "a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com",
                "domainPrefix": "a1b2c3d4e5",
                "http": {
                    "method": "POST",
                    "path": ROUTE_PATH,
                    "protocol": "HTTP/1.1",
                    "sourceIp": "203.0.113.10",
                    "userAgent": "Svix-Webhooks/1.63 (sender; Portbase)"
                },
                "requestId": request_id,
                "routeKey": ROUTE_KEY,
                "stage": "$default",
                "time": clf_time(received_ms),
                "timeEpoch": received_ms
            },
            "body": self.body,
            "isBase64Encoded": false
        })
    }
}

/// `requestContext.time` as API Gateway writes it: `dd/Mon/yyyy:HH:mm:ss +0000` (UTC).
pub fn clf_time(epoch_ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(epoch_ms)
        .unwrap_or_default()
        .format("%d/%b/%Y:%H:%M:%S +0000")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_secret_is_a_valid_secret_and_the_event_deserialises() {
        let secret = WebhookSecret::parse(LOCAL_SAMPLE_SECRET).unwrap();
        let signed = SignedWebhook::sign(&[secret], "msg_1", 1_800_000_000, "{}");
        let event = signed.http_api_event(1_800_000_000_123, "req-1");
        assert_eq!(
            event["requestContext"]["time"],
            "15/Jan/2027:08:00:00 +0000"
        );
        let parsed: aws_lambda_events::event::apigw::ApiGatewayV2httpRequest =
            serde_json::from_value(event).unwrap();
        assert_eq!(parsed.headers["webhook-timestamp"], "1800000000");
        assert_eq!(parsed.body.as_deref(), Some("{}"));
    }
}
