//! The scheduled reconciler Lambda: the gate's wiring (`gate_lambda`) around the truck-slot
//! integration (`truck_slot::lambda::build`).

// The runtime as the consumer's: one thread, or a worker per CPU with several invocations at
// once (`gate_lambda::tokio_runtime`).
fn main() -> Result<(), lambda_runtime::Error> {
    gate_lambda::tokio_runtime()?.block_on(gate_lambda::run_reconciler(truck_slot::lambda::build))
}
