//! Asking a person before a write: [`Confirm`], `--yes` ([`Yes`]), the prompt ([`Prompt`]),
//! and the dry run ([`approve`]).

use std::io::{BufRead, IsTerminal, Write};

use super::Output;
use crate::error::CtlError;

/// Asks a person before a write.
pub trait Confirm: Send {
    /// Shows `plan` and asks whether to go on; `true` only for a yes.
    fn confirm(&mut self, plan: &str) -> bool;
}

/// The gate before one record's write: with `dry_run`, the plan as the output
/// (`Ok(Some(..))`, nothing written); otherwise `confirm` asks, and `Ok(None)` means go on.
///
/// # Errors
/// [`CtlError::NotConfirmed`] when the answer is not yes.
pub(super) fn approve(
    plan: &str,
    plan_json: serde_json::Value,
    dry_run: bool,
    confirm: &mut dyn Confirm,
) -> Result<Option<Output>, CtlError> {
    if dry_run {
        return Ok(Some(Output::ok(format!("dry run: {plan}\n"), plan_json)));
    }
    if !confirm.confirm(plan) {
        return Err(CtlError::NotConfirmed("nothing written".into()));
    }
    Ok(None)
}

/// `--yes`: every write confirmed.
pub struct Yes;

impl Confirm for Yes {
    fn confirm(&mut self, _plan: &str) -> bool {
        true
    }
}

/// The prompt on the terminal (stderr, stdin): `y` or `yes` goes on. Without a terminal on stdin
/// nothing is confirmed (pass `--yes` in scripts).
pub struct Prompt;

impl Confirm for Prompt {
    fn confirm(&mut self, plan: &str) -> bool {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            eprintln!("{plan}\nstdin is not a terminal: pass --yes to confirm");
            return false;
        }
        eprint!("{plan}\nProceed? [y/N] ");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        if stdin.lock().read_line(&mut line).is_err() {
            return false;
        }
        matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes")
    }
}
