//! An integration's gatectl ([`Stack`]): its configuration, its integration built with and
//! without a client of its server, its [`View`], and the stack parameters that set its own
//! variables. gatectl's core ([`crate::connect`], [`crate::main`]) is generic over it, so an
//! integration's own `gatectl` is a `main.rs` of a few lines:
//!
//! ```text
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     gatectl::main(payments::Payments::gatectl()).await
//! }
//! ```
//!
//! (`truck_slot`'s is [`crate::truck_slot::TruckSlotStack`], behind the default feature
//! `truck-slot`; a test builds a [`crate::ctl::Ctl`] from a `Stack` with [`crate::ctl::Ctl`]'s
//! fields directly.)

use std::future::Future;
use std::sync::Arc;

use gate::Integration;
use gate_lambda::{IntegrationConfig, SdkConfig};

use crate::error::CtlError;
use crate::words::View;

/// What gatectl needs of an integration to operate its stack.
pub trait Stack: Send + Sync + 'static {
    /// The integration's own configuration, read from the same variables as its functions
    /// (`gate_lambda::Config<Self::Config>`).
    type Config: IntegrationConfig;

    /// How its records, queries and messages read, and its words.
    fn view(&self) -> Arc<dyn View>;

    /// The stack parameters (`template.yaml`) that set the integration's own variables on the
    /// reconciler, as (parameter, variable); the gate's are [`crate::targets::PARAMETER_VARIABLES`].
    fn parameters(&self) -> &[(&'static str, &'static str)] {
        &[]
    }

    /// The variables any of which, given and not blank, configures the server (e.g.
    /// `TERMINAL_BASE_URL`, `TERMINALS`). Empty (the default): the server is always configured.
    fn server_variables(&self) -> &[&'static str] {
        &[]
    }

    /// Values lent to the integration's required server variables when no server is configured,
    /// so that the rest of its configuration is still read and checked (`show`, `list`, `cancel`
    /// and `redrive` need no server). Nothing is ever sent to them: the commands that ask the
    /// server refuse first ([`crate::ctl::Ctl::server_ready`]).
    fn unconfigured_server(&self) -> &[(&'static str, &'static str)] {
        &[]
    }

    /// Builds the integration with a client of its server, for the commands that ask it
    /// (`lookup`, `finish` from the server, `reconcile`); its secrets read through `aws`.
    ///
    /// # Errors
    /// A [`CtlError`] naming what could not be read (a secret: the IAM action and its ARN).
    fn connect(
        &self,
        config: Self::Config,
        aws: &SdkConfig,
    ) -> impl Future<Output = Result<Arc<dyn Integration>, CtlError>> + Send;

    /// Builds the integration without a client of its server, for the commands that never ask
    /// it: its parse, labels, business row and natural key as configured; a call or lookup is
    /// transient, saying no server is configured.
    fn offline(&self, config: Self::Config) -> Arc<dyn Integration>;
}
