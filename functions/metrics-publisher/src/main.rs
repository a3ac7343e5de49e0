//! The scheduled metrics Lambda: the gate's (`gate::lambda::run_metrics`), generic; it reads no
//! integration's data, only the idempotency table's indexes.

// The runtime as the consumer's: one thread, or a worker per CPU with several invocations at
// once (`gate::lambda::tokio_runtime`).
fn main() -> Result<(), lambda_runtime::Error> {
    // `INTEGRATION_NAME` when unset: the stack's (as the consumer's, truck-slot's default).
    gate::lambda::tokio_runtime()?.block_on(gate::lambda::run_metrics(Some("ect-delta-slots")))
}
