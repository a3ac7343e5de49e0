//! The scheduled metrics Lambda. All decisions live in the `gate` library.

// One thread, as the consumer (one invocation at a time per sandbox; BENCHMARKS.md).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    gate::lambda::run_metrics().await
}
