//! The scheduled reconciler: the gate's Lambda wiring around the payments integration.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), gate_lambda::Error> {
    gate_lambda::run_reconciler(payments::lambda::build).await
}
