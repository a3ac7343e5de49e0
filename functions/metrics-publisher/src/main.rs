//! The scheduled metrics Lambda: the gate's (`gate_lambda::run_metrics`), generic; it reads no
//! integration's data, only the idempotency table's indexes.

// The runtime as the consumer's: one thread, or a worker per CPU with several invocations at
// once (`gate_lambda::tokio_runtime`).
fn main() -> Result<(), lambda_runtime::Error> {
    // `INTEGRATION_NAME` when unset: the stack's (as the consumer's, truck-slot's default).
    gate_lambda::tokio_runtime()?.block_on(gate_lambda::run_metrics(Some("ect-delta-slots")))
}
