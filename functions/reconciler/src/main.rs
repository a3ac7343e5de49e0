//! The scheduled reconciler Lambda: the gate's wiring (`gate::lambda`) around the truck-slot
//! integration (`truck_slot::lambda::build`).

// One thread, as the consumer (one invocation at a time per sandbox; docs/BENCHMARKS.md).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    gate::lambda::run_reconciler(truck_slot::lambda::build).await
}
