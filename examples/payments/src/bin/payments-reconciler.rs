//! The scheduled reconciler: the gate's Lambda wiring around the payments integration.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), gate::lambda::Error> {
    gate::lambda::run_reconciler(payments::lambda::build).await
}
