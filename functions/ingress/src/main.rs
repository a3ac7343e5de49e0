//! The webhook ingress Lambda (API Gateway HTTP API, `POST /webhooks/portbase`). All decisions
//! live in the `ingress` library.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    ingress::lambda::run().await
}
