//! The command line (clap derive).

use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::ctl::{Action, Query};

/// gatectl: the exactly-once gate's runbook steps, each one safe command.
///
/// Every write goes through the gate's own fenced, conditional writes, asks before it writes
/// (unless --yes), shows what it would change with --dry-run, and leaves an audit line (who,
/// what, when) in the record's history.
///
/// Exit codes: 0 done; 1 failed (AWS or the terminal; transient); 2 usage; 3 not found;
/// 4 refused by the gate's conditions (not in_flight, a live lease, a slot recorded, dead letters
/// too old to redrive); 5 permission denied (the IAM action and resource are named);
/// 6 not confirmed; 7 configuration missing.
#[derive(Debug, Parser)]
#[command(name = "gatectl", version)]
pub struct Cli {
    /// The CloudFormation stack whose outputs and parameters say where the tables and queues
    /// are (DescribeStacks). Without it, the functions' environment variables are read
    /// (IDEMPOTENCY_TABLE, BOOKINGS_TABLE, MANUAL_QUEUE_URL, TERMINAL_BASE_URL, ...; and
    /// NOTIFICATION_QUEUE_URL, DEAD_LETTER_QUEUE_URL for the dead letters).
    #[arg(long, global = true, env = "GATECTL_STACK")]
    pub stack: Option<String>,
    /// JSON on stdout instead of text, for scripts.
    #[arg(long, global = true)]
    pub json: bool,
    /// Show what a write would change; write nothing.
    #[arg(long, global = true)]
    pub dry_run: bool,
    /// Do not ask before writing.
    #[arg(long, short = 'y', global = true)]
    pub yes: bool,
    /// Your name for the audit lines and lease tokens (`gatectl:{name}`); default $USER.
    #[arg(long = "as", global = true, value_name = "NAME")]
    pub operator: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// A record (or a container's records) with status, ages, lease, operation key, slot ids,
    /// the TMS booking, its history and what the gate does next. The PIN is never shown.
    Show {
        /// An event key (64 hex), an equipment number (ISO 6346) or a notificationId.
        query: String,
    },
    /// Lists: the InFlight index, multi-slot keys, the manual queue, the dead letters.
    List {
        /// Which list.
        #[command(subcommand)]
        what: ListCommand,
    },
    /// Asks the terminal which slot it holds under the record's operation key.
    Lookup {
        /// The event key.
        key: String,
    },
    /// Commits a slot for a stranded in_flight record (the runbook's finish), fenced as the gate
    /// commits: refused while a lease is live or when the record is not in_flight.
    Finish {
        /// The event key.
        key: String,
        /// The slot id to commit.
        #[arg(
            long,
            required_unless_present = "from_terminal",
            conflicts_with = "from_terminal"
        )]
        effect_id: Option<String>,
        /// Commit the slot the terminal holds under the record's operation key.
        #[arg(long)]
        from_terminal: bool,
    },
    /// Marks a stranded in_flight record failed, out of the InFlight index, and sends its claim
    /// request to the manual-booking queue to book by hand (reason `cancelled`).
    Cancel {
        /// The event key.
        key: String,
        /// Why (in the record's error and its history).
        #[arg(long)]
        reason: String,
    },
    /// One reconciler pass now: for one record, or for every record of the InFlight index older
    /// than the reconciler's minimum age; prints the report.
    Reconcile {
        /// The event key; all stale records without it.
        key: Option<String>,
    },
    /// Moves dead letters back to the notification queue, refusing (and listing) those older
    /// than the records' lifetime minus the notification queue's retention.
    Redrive,
}

/// The lists.
#[derive(Debug, Subcommand)]
pub enum ListCommand {
    /// Records in the InFlight index (stranded claims, pending routings), oldest first.
    InFlight {
        /// Only those older than this (e.g. `10m`, `2h`, `1d`).
        #[arg(long, value_parser = humantime::parse_duration, default_value = "0s")]
        older_than: Duration,
    },
    /// Keys for which the terminal returned two or more slot ids, with the ids to cancel.
    MultiSlot,
    /// The manual-booking queue's items, left in place (no PINs shown).
    Manual,
    /// The notification dead-letter queue's messages, left in place, and whether each may be
    /// redriven.
    DeadLetters,
}

impl Command {
    /// The action this command asks for.
    pub fn action(&self) -> Action {
        match self {
            Self::Show { query } => Action::Show(Query::parse(query)),
            Self::List { what } => match what {
                ListCommand::InFlight { older_than } => Action::ListInFlight {
                    older_than_ms: i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX),
                },
                ListCommand::MultiSlot => Action::ListMultiSlot,
                ListCommand::Manual => Action::ListManual,
                ListCommand::DeadLetters => Action::ListDeadLetters,
            },
            Self::Lookup { key } => Action::Lookup(key.clone()),
            Self::Finish { key, effect_id, .. } => Action::Finish {
                key: key.clone(),
                effect_id: effect_id.clone(),
            },
            Self::Cancel { key, reason } => Action::Cancel {
                key: key.clone(),
                reason: reason.clone(),
            },
            Self::Reconcile { key } => Action::Reconcile(key.clone()),
            Self::Redrive => Action::Redrive,
        }
    }

    /// Whether the command asks the terminal (and so needs its URL and token).
    pub fn needs_terminal(&self) -> bool {
        matches!(
            self,
            Self::Lookup { .. }
                | Self::Reconcile { .. }
                | Self::Finish {
                    from_terminal: true,
                    ..
                }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The gatectl section of `docs/OPERATING.md` names every subcommand and list, and its
    /// exit-code table is `crate::error::exit`.
    #[test]
    fn the_operating_doc_names_every_command_and_exit_code() {
        use crate::error::exit;
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/OPERATING.md"),
        )
        .unwrap();
        let section = doc
            .split("### gatectl: the runbooks' command line")
            .nth(1)
            .and_then(|s| s.split("\n### ").next())
            .expect("a gatectl section");
        let cli = Cli::command();
        for sub in cli.get_subcommands() {
            let name = sub.get_name();
            if name == "list" {
                for list in sub.get_subcommands() {
                    let cited = format!("`list {}", list.get_name());
                    assert!(section.contains(&cited), "{cited}");
                }
            } else if name != "help" {
                let cited = format!("| `{name}");
                assert!(section.contains(&cited), "{cited}");
            }
        }
        for (code, word) in [
            (exit::OK, "done"),
            (exit::FAILED, "failed"),
            (exit::USAGE, "usage"),
            (exit::NOT_FOUND, "not found"),
            (exit::REFUSED, "refused"),
            (exit::PERMISSION, "permission denied"),
            (exit::NOT_CONFIRMED, "not confirmed"),
            (exit::CONFIG, "configuration"),
        ] {
            let row = format!("| {code} | {word}");
            assert!(section.contains(&row), "{row}");
        }
    }

    #[test]
    fn finish_needs_a_slot_or_the_terminal_but_not_both() {
        let key = "a".repeat(64);
        assert!(Cli::try_parse_from(["gatectl", "finish", &key]).is_err());
        assert!(Cli::try_parse_from([
            "gatectl",
            "finish",
            &key,
            "--slot-id",
            "S",
            "--from-terminal"
        ])
        .is_err());
        let cli =
            Cli::try_parse_from(["gatectl", "finish", &key, "--from-terminal", "--yes"]).unwrap();
        assert!(cli.yes && cli.command.needs_terminal());
        let cli =
            Cli::try_parse_from(["gatectl", "list", "in-flight", "--older-than", "10m"]).unwrap();
        assert_eq!(
            cli.command.action(),
            Action::ListInFlight {
                older_than_ms: 600_000
            }
        );
    }
}
