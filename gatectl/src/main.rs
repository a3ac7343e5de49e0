//! `gatectl` for the truck-slot integration: [`gatectl::main`] over
//! [`gatectl::truck::TruckSlotStack`]. Everything else is in the library.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    gatectl::main(gatectl::truck::TruckSlotStack).await
}
