//! The command line (clap derive).

use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::ctl::Action;
use crate::words::Words;

/// gatectl: the exactly-once gate's runbook steps, each one safe command.
///
/// Every write goes through the gate's own fenced, conditional writes, asks before it writes
/// (unless --yes), shows what it would change with --dry-run, and leaves an audit line (who,
/// what, when) in the record's history.
///
/// Exit codes: 0 done; 1 failed (AWS or the server; transient); 2 usage; 3 not found;
/// 4 refused by the gate's conditions (not in_flight, a live lease, an effect recorded, dead
/// letters too old to redrive); 5 permission denied (the IAM action or SQL operation and the
/// resource are named; PostgreSQL's SQLSTATE 42501 too); 6 not confirmed; 7 configuration
/// missing.
#[derive(Debug, Parser)]
#[command(name = "gatectl", version)]
pub struct Cli {
    /// The CloudFormation stack whose outputs and parameters say where the tables and queues
    /// are (DescribeStacks). Without it, the functions' environment variables are read
    /// (IDEMPOTENCY_TABLE, BOOKINGS_TABLE, MANUAL_QUEUE_URL, the integration's own, ...; and
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
    /// A record (or the records a query names) with status, ages, lease, operation key, effect
    /// ids, the business row, its history and what the gate does next. The stored request is
    /// never shown.
    Show {
        /// An event key (64 hex), or what the integration reads (truck-slot: an equipment
        /// number or a notificationId).
        query: String,
    },
    /// Lists: the InFlight index, multi-effect keys, the manual queue, the dead letters.
    List {
        /// Which list.
        #[command(subcommand)]
        what: ListCommand,
    },
    /// Asks the server which effect it holds under the record's operation key.
    Lookup {
        /// The event key.
        key: String,
    },
    /// Commits an effect for a stranded in_flight record (the runbook's finish), fenced as the
    /// gate commits: refused while a lease is live or when the record is not in_flight.
    Finish {
        /// The event key.
        key: String,
        /// The effect id to commit (truck-slot: `--slot-id`).
        #[arg(
            long = "effect-id",
            required_unless_present = "from_server",
            conflicts_with = "from_server"
        )]
        effect_id: Option<String>,
        /// Commit the effect the server holds under the record's operation key (truck-slot:
        /// `--from-terminal`).
        #[arg(long = "from-server")]
        from_server: bool,
    },
    /// Marks a stranded in_flight record failed, out of the InFlight index, and sends its stored
    /// request to the manual queue to be done by hand (reason `cancelled`).
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
    /// Checks a template that deploys the gate, with the gate application it instantiates: the
    /// alarms against the code, the policy rules, and the lint when its tools are on PATH. Reads
    /// no stack; exits 1 on any finding.
    CheckTemplate {
        /// The template (its applications' local Locations are relative to it).
        file: std::path::PathBuf,
        /// Fail, rather than skip, when sam, cfn-lint or checkov is not installed.
        #[arg(long)]
        require_lint: bool,
    },
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
    /// Keys for which the server returned two or more effect ids, with the ids to cancel
    /// (truck-slot: `multi-slot`).
    #[command(name = "multi-effect")]
    MultiEffect,
    /// The manual queue's items, left in place (their original bodies not shown).
    Manual,
    /// The notification dead-letter queue's messages, left in place, and whether each may be
    /// redriven.
    DeadLetters,
}

impl Command {
    /// The action this command asks of a stack; `None` for `check-template` (no stack).
    pub fn action(&self) -> Option<Action> {
        Some(match self {
            Self::CheckTemplate { .. } => return None,
            Self::Show { query } => Action::Show(query.clone()),
            Self::List { what } => match what {
                ListCommand::InFlight { older_than } => Action::ListInFlight {
                    older_than_ms: i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX),
                },
                ListCommand::MultiEffect => Action::ListMultiEffect,
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
        })
    }

    /// Whether the command asks the server (and so needs its client and secrets).
    pub fn needs_server(&self) -> bool {
        matches!(
            self,
            Self::Lookup { .. }
                | Self::Reconcile { .. }
                | Self::Finish {
                    from_server: true,
                    ..
                }
        )
    }
}

/// The command line in `words`: `finish --{effect_id_flag}` and `--{from_server_flag}`, `list
/// {multi_list}` (the neutral `--effect-id`, `--from-server` and `list multi-effect` are
/// always accepted too).
pub fn command(words: &Words) -> clap::Command {
    Cli::command()
        .mut_subcommand("finish", |finish| {
            finish
                .mut_arg("effect_id", |a| {
                    a.long(words.effect_id_flag).alias("effect-id")
                })
                .mut_arg("from_server", |a| {
                    a.long(words.from_server_flag).alias("from-server")
                })
        })
        .mut_subcommand("list", |list| {
            list.mut_subcommand("multi-effect", |m| {
                if words.multi_list == "multi-effect" {
                    m
                } else {
                    m.visible_alias(words.multi_list)
                }
            })
        })
}

/// Parses this process's arguments with [`command`] (a usage error exits 2, as clap does).
pub fn parse(words: &Words) -> Cli {
    parse_from(words, std::env::args_os()).unwrap_or_else(|e| e.exit())
}

/// Parses `args` (the program name first) with [`command`].
///
/// # Errors
/// clap's usage error.
pub fn parse_from<I, T>(words: &Words, args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let matches = command(words).try_get_matches_from(args)?;
    Cli::from_arg_matches(&matches)
}

#[cfg(all(test, feature = "truck-slot"))]
mod tests {
    use super::*;
    use crate::truck::WORDS;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
        command(&WORDS).debug_assert();
        command(&Words::NEUTRAL).debug_assert();
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
        let cli = command(&WORDS);
        for sub in cli.get_subcommands() {
            let name = sub.get_name();
            if name == "list" {
                for list in sub.get_subcommands() {
                    // The forwarder's words: `list multi-slot`.
                    let word = list.get_visible_aliases().next().unwrap_or(list.get_name());
                    let cited = format!("`list {word}");
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
    fn finish_needs_a_slot_or_the_terminal_but_not_both_in_the_forwarders_words() {
        let key = "a".repeat(64);
        assert!(parse_from(&WORDS, ["gatectl", "finish", &key]).is_err());
        assert!(parse_from(
            &WORDS,
            [
                "gatectl",
                "finish",
                &key,
                "--slot-id",
                "S",
                "--from-terminal"
            ]
        )
        .is_err());
        let cli = parse_from(
            &WORDS,
            ["gatectl", "finish", &key, "--from-terminal", "--yes"],
        )
        .unwrap();
        assert!(cli.yes && cli.command.needs_server());
        let cli = parse_from(&WORDS, ["gatectl", "finish", &key, "--slot-id", "S-1"]).unwrap();
        assert_eq!(
            cli.command.action().unwrap(),
            Action::Finish {
                key: key.clone(),
                effect_id: Some("S-1".into())
            }
        );
        // The neutral words are accepted in every integration's gatectl.
        let cli = parse_from(&WORDS, ["gatectl", "finish", &key, "--effect-id", "S-1"]).unwrap();
        assert!(!cli.command.needs_server());
        let cli = parse_from(&WORDS, ["gatectl", "list", "multi-slot"]).unwrap();
        assert_eq!(cli.command.action(), Some(Action::ListMultiEffect));
        let cli = parse_from(&Words::NEUTRAL, ["gatectl", "list", "multi-effect"]).unwrap();
        assert_eq!(cli.command.action(), Some(Action::ListMultiEffect));
        assert!(parse_from(
            &Words::NEUTRAL,
            ["gatectl", "finish", &key, "--slot-id", "S"]
        )
        .is_err());
        let cli = parse_from(
            &WORDS,
            ["gatectl", "list", "in-flight", "--older-than", "10m"],
        )
        .unwrap();
        assert_eq!(
            cli.command.action().unwrap(),
            Action::ListInFlight {
                older_than_ms: 600_000
            }
        );
    }
}
