//! The scheduled metrics Lambda. All decisions live in the `gate` library.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    gate::lambda::run_metrics().await
}
