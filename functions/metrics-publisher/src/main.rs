//! The scheduled metrics Lambda. All decisions live in the `gate` library; `truck_slot` wires it to the slot terminal.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    truck_slot::lambda::run_metrics().await
}
