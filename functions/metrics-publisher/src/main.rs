//! The scheduled metrics Lambda: the gate's (`gate::lambda::run_metrics`), generic; it reads no
//! integration's data, only the idempotency table's indexes.

// One thread, as the consumer (one invocation at a time per sandbox; docs/BENCHMARKS.md).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    // `INTEGRATION_NAME` when unset: the stack's (as the consumer's, truck-slot's default).
    gate::lambda::run_metrics(Some("ect-delta-slots")).await
}
