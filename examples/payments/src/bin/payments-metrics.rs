//! The scheduled metrics publisher (the four signals): generic, it reads only the idempotency
//! table's indexes; `INTEGRATION_NAME` defaults to the consumer's.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), gate_lambda::Error> {
    gate_lambda::run_metrics(Some("invoice-charges")).await
}
