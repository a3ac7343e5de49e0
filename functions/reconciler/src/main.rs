//! The scheduled reconciler Lambda: the gate's wiring (`gate::lambda`) around the truck-slot
//! integration (`truck_slot::lambda::build`).

// The runtime as the consumer's: one thread, or a worker per CPU with several invocations at
// once (`gate::lambda::tokio_runtime`).
fn main() -> Result<(), lambda_runtime::Error> {
    gate::lambda::tokio_runtime()?.block_on(gate::lambda::run_reconciler(truck_slot::lambda::build))
}
