//! The SQS-triggered consumer Lambda: the gate's wiring (`gate_lambda`) around the truck-slot
//! integration (`truck_slot::lambda::build`).

// One thread when the environment runs one invocation at a time: the records of a batch run
// concurrently on one task (I/O-bound), and against the multi-thread runtime it measured about
// 8 ms less init, 0.4 MB less peak RSS, no change in CPU per batch (docs/BENCHMARKS.md, "Client
// CPU against its floor"). A worker per CPU when it runs several at once (Lambda Managed
// Instances, `AWS_LAMBDA_MAX_CONCURRENCY`): `gate_lambda::tokio_runtime`.
fn main() -> Result<(), lambda_runtime::Error> {
    gate_lambda::tokio_runtime()?.block_on(gate_lambda::run_consumer(truck_slot::lambda::build))
}
