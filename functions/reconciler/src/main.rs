//! The scheduled reconciler Lambda. All decisions live in the `gate` library; `truck_slot` wires it to the slot terminal.

// One thread, as the consumer (one invocation at a time per sandbox; docs/BENCHMARKS.md).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    truck_slot::lambda::run_reconciler().await
}
