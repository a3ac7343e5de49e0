//! What can go wrong, and the exit code a script sees for each.

use std::fmt;

use gate::store::StoreError;

/// The exit codes of `gatectl` (also in `gatectl --help` and `docs/OPERATING.md`):
///
/// | code | meaning |
/// | --- | --- |
/// | 0 | done (or, with `--dry-run`, the plan printed) |
/// | 1 | failed: an AWS call, the database or the terminal failed (transient; run it again) |
/// | 2 | usage: a bad argument (clap) |
/// | 3 | not found: no record, nothing under the key at the terminal |
/// | 4 | refused by the gate's conditions: not `in_flight`, a live lease, a slot recorded, or (redrive) messages too old to redrive |
/// | 5 | permission denied: the message names the IAM action (or SQL operation) and the resource; PostgreSQL's SQLSTATE 42501 too |
/// | 6 | not confirmed: the prompt was answered no, or there is no terminal to ask and no `--yes` |
/// | 7 | configuration: the stack or the environment does not say where the tables and queues are |
pub mod exit {
    /// Done.
    pub const OK: u8 = 0;
    /// An AWS call, the database (PostgreSQL store) or the terminal failed.
    pub const FAILED: u8 = 1;
    /// A bad argument (clap's own code).
    pub const USAGE: u8 = 2;
    /// No such record, or nothing under the key.
    pub const NOT_FOUND: u8 = 3;
    /// Refused by the gate's conditions.
    pub const REFUSED: u8 = 4;
    /// Missing IAM permission, or a PostgreSQL privilege (SQLSTATE 42501).
    pub const PERMISSION: u8 = 5;
    /// The confirmation was not given.
    pub const NOT_CONFIRMED: u8 = 6;
    /// The stack or the environment is incomplete.
    pub const CONFIG: u8 = 7;
}

/// A failed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CtlError {
    /// Nothing found (exit 3).
    NotFound(String),
    /// Refused by the gate's conditions; nothing (more) was written (exit 4).
    Refused(String),
    /// An IAM permission is missing (exit 5).
    PermissionDenied {
        /// The IAM action, e.g. `dynamodb:UpdateItem`.
        action: String,
        /// The resource (table name, queue URL, stack name, or the ARN AWS named).
        resource: String,
        /// AWS's message.
        message: String,
    },
    /// The prompt was not answered yes (exit 6).
    NotConfirmed(String),
    /// Configuration missing (exit 7).
    Config(String),
    /// Anything else (exit 1).
    Failed(String),
}

impl CtlError {
    /// The process exit code ([`exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::NotFound(_) => exit::NOT_FOUND,
            Self::Refused(_) => exit::REFUSED,
            Self::PermissionDenied { .. } => exit::PERMISSION,
            Self::NotConfirmed(_) => exit::NOT_CONFIRMED,
            Self::Config(_) => exit::CONFIG,
            Self::Failed(_) => exit::FAILED,
        }
    }

    /// A store error of the call `action` (an IAM action, e.g. `dynamodb:GetItem`) on
    /// `resource`: an `AccessDenied` answer becomes [`CtlError::PermissionDenied`].
    pub fn store(err: StoreError, action: &str, resource: &str) -> Self {
        Self::from_text(err.to_string(), action, resource)
    }

    /// An error text of the call `action` on `resource` (see [`CtlError::store`]).
    pub fn from_text(text: String, action: &str, resource: &str) -> Self {
        match permission_denied(&text) {
            Some((named_action, named_resource)) => Self::PermissionDenied {
                action: named_action.unwrap_or_else(|| action.to_string()),
                resource: named_resource.unwrap_or_else(|| resource.to_string()),
                message: text,
            },
            None => Self::Failed(format!("{action} on {resource}: {text}")),
        }
    }
}

/// Whether `text` (an AWS or PostgreSQL error rendered with its context) is an access denial,
/// and then the action and resource AWS named in it, if it did ("... is not authorized to
/// perform: dynamodb:UpdateItem on resource: arn:aws:dynamodb:...:table/T because ..."). A
/// PostgreSQL refusal (SQLSTATE 42501 `insufficient_privilege`,
/// [`gate_postgres::names_insufficient_privilege`]) names neither: the caller's SQL
/// operation and relation stand.
pub fn permission_denied(text: &str) -> Option<(Option<String>, Option<String>)> {
    if gate_postgres::names_insufficient_privilege(text) {
        return Some((None, None));
    }
    const CODES: [&str; 4] = [
        "AccessDeniedException",
        "AccessDenied",
        "UnauthorizedOperation",
        "not authorized to perform",
    ];
    if !CODES.iter().any(|c| text.contains(c)) {
        return None;
    }
    let word_after = |marker: &str| {
        text.find(marker).map(|i| {
            text[i + marker.len()..]
                .trim_start()
                .split(|c: char| c.is_whitespace() || c == '"' || c == ',' || c == ')')
                .next()
                .unwrap_or_default()
                .to_string()
        })
    };
    let action = word_after("not authorized to perform:").filter(|a| !a.is_empty());
    let resource = word_after("on resource:").filter(|r| !r.is_empty());
    Some((action, resource))
}

impl fmt::Display for CtlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotFound(m) => write!(f, "not found: {m}"),
            Self::Refused(m) => write!(f, "refused: {m}"),
            Self::PermissionDenied {
                action,
                resource,
                message,
            } if gate_postgres::names_insufficient_privilege(message) => write!(
                f,
                "permission denied: the connection string's role may not {action} on {resource}; \
                 gatectl needs the functions' grants on the schema. PostgreSQL said: {message}"
            ),
            Self::PermissionDenied {
                action,
                resource,
                message,
            } => write!(
                f,
                "permission denied: your credentials may not {action} on {resource}; the operator \
                 policy of the stack (OperatorPolicyArn output) grants what gatectl needs. AWS \
                 said: {message}"
            ),
            Self::NotConfirmed(m) => write!(f, "not confirmed: {m}"),
            Self::Config(m) => write!(f, "configuration: {m}"),
            Self::Failed(m) => write!(f, "failed: {m}"),
        }
    }
}

impl std::error::Error for CtlError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_access_denial_names_the_action_and_resource_aws_gave() {
        let text = "history (UpdateItem): service error: AccessDeniedException: User: \
                    arn:aws:sts::123456789012:assumed-role/oncall/alice is not authorized to \
                    perform: dynamodb:UpdateItem on resource: \
                    arn:aws:dynamodb:eu-west-1:123456789012:table/gate-idem because no \
                    identity-based policy allows the dynamodb:UpdateItem action";
        let err = CtlError::store(
            StoreError::Unavailable(text.into()),
            "dynamodb:GetItem",
            "t",
        );
        assert_eq!(err.exit_code(), exit::PERMISSION);
        match err {
            CtlError::PermissionDenied {
                action, resource, ..
            } => {
                assert_eq!(action, "dynamodb:UpdateItem");
                assert_eq!(
                    resource,
                    "arn:aws:dynamodb:eu-west-1:123456789012:table/gate-idem"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    /// PostgreSQL's `insufficient_privilege` (SQLSTATE 42501), as the store renders it, is a
    /// permission denial of the call made (exit 5), not a failure to retry (exit 1).
    #[test]
    fn a_postgres_privilege_refusal_is_a_permission_denial() {
        let text = "stale_in_flight: ERROR (42501): permission denied for view in_flight";
        let err = CtlError::store(
            StoreError::Unavailable(text.into()),
            "SELECT",
            "ops.in_flight",
        );
        assert_eq!(err.exit_code(), exit::PERMISSION);
        let shown = err.to_string();
        assert!(
            shown.contains("role may not SELECT on ops.in_flight"),
            "{shown}"
        );
        assert!(!shown.contains("OperatorPolicyArn"), "{shown}");
        let other = CtlError::store(
            StoreError::Unavailable("stale_in_flight: ERROR (42P01): relation missing".into()),
            "SELECT",
            "ops.in_flight",
        );
        assert_eq!(other.exit_code(), exit::FAILED);
    }

    #[test]
    fn a_denial_without_details_names_the_call_made() {
        let err = CtlError::from_text(
            "service error: AccessDenied: Access to the resource is denied.".into(),
            "sqs:ReceiveMessage",
            "https://sqs.eu-west-1.amazonaws.com/123456789012/dlq",
        );
        assert_eq!(
            err.to_string().lines().next().map(|l| {
                l.contains(
                "may not sqs:ReceiveMessage on https://sqs.eu-west-1.amazonaws.com/123456789012/dlq"
            )
            }),
            Some(true)
        );
        let other = CtlError::from_text("timeout".into(), "dynamodb:Scan", "t");
        assert_eq!(other.exit_code(), exit::FAILED);
    }
}
