//! The SQS-triggered consumer Lambda. All decisions live in the `gate` library; `truck_slot` wires it to the slot terminal.

// One thread: a Lambda sandbox runs one invocation at a time, and the records of a batch run
// concurrently on this one task (I/O-bound). Measured against the multi-thread runtime
// (docs/BENCHMARKS.md, "Client CPU against its floor"): init about 8 ms less, 0.4 MB less peak
// RSS, no measurable change in CPU per batch.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    truck_slot::lambda::run_consumer().await
}
