//! The SQS-triggered consumer Lambda: the gate's wiring (`gate::lambda`) around the truck-slot
//! integration (`truck_slot::lambda::build`).

// One thread: a Lambda sandbox runs one invocation at a time, and the records of a batch run
// concurrently on this one task (I/O-bound). Measured against the multi-thread runtime
// (docs/BENCHMARKS.md, "Client CPU against its floor"): init about 8 ms less, 0.4 MB less peak
// RSS, no measurable change in CPU per batch.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    gate::lambda::run_consumer(truck_slot::lambda::build).await
}
