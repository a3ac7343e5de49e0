//! Reading the environment at cold start: [`Env`] reads variables through a lookup and collects
//! every problem instead of stopping at the first, so that a function that cannot start says so
//! once, naming each variable ([`ConfigErrors`]), instead of one variable per attempt.

use std::cell::RefCell;

/// A configuration error: the variable's name and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}: {problem}")]
pub struct ConfigError {
    /// The environment variable's name, e.g. `IDEMPOTENCY_TABLE` (never its value).
    pub variable: &'static str,
    /// What is wrong with it. Quotes a value only when it cannot be a secret.
    pub problem: String,
}

/// Every problem of one configuration (never empty): the integration's first, then the gate's,
/// each part in the order its variables are read ([`crate::Config::from_env`]).
/// Displayed as `invalid configuration: 2 problems: SERVER_BASE_URL: missing (required);
/// IDEMPOTENCY_TABLE: missing (required)`; it quotes values, never a secret (a refused token is
/// described, not quoted).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// The variables named, in order (a variable with two problems is named twice).
    pub fn variables(&self) -> Vec<&'static str> {
        self.0.iter().map(|e| e.variable).collect()
    }
}

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.len();
        write!(
            f,
            "invalid configuration: {n} problem{}: ",
            if n == 1 { "" } else { "s" }
        )?;
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Reads variables through a lookup (e.g. `|k| std::env::var(k).ok()`) and collects every
/// problem: an accessor that finds one records it and returns the default (or `None`), so the
/// caller reads on and [`Env::finish`] reports them all. A variable set to white space only is
/// unset.
pub struct Env<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
    problems: RefCell<Vec<ConfigError>>,
}

impl std::fmt::Debug for Env<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The lookup's values may be secrets: only the problems are shown.
        f.debug_struct("Env")
            .field("problems", &self.problems.borrow())
            .finish_non_exhaustive()
    }
}

impl<'a> Env<'a> {
    /// Reads through `lookup`, no problem recorded yet.
    pub fn new(lookup: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Self {
            lookup,
            problems: RefCell::new(Vec::new()),
        }
    }

    /// Records `problem` for `variable` (the value is then refused and the start with it).
    pub fn problem(&self, variable: &'static str, problem: impl Into<String>) {
        self.problems.borrow_mut().push(ConfigError {
            variable,
            problem: problem.into(),
        });
    }

    /// The value exactly as set, empty or white space included (`None`: unset).
    pub fn raw(&self, variable: &str) -> Option<String> {
        (self.lookup)(variable)
    }

    /// The value, `None` when unset or white space only.
    pub fn optional(&self, variable: &str) -> Option<String> {
        self.raw(variable).filter(|v| !v.trim().is_empty())
    }

    /// The value, or `None` with the problem `missing (required)` recorded.
    pub fn required(&self, variable: &'static str) -> Option<String> {
        let value = self.optional(variable);
        if value.is_none() {
            self.problem(variable, "missing (required)");
        }
        value
    }

    /// The integer in `min..=max`, `default` when unset; `None` with the problem recorded when
    /// set to anything else (the value is quoted: a number is never a secret).
    pub fn number(&self, variable: &'static str, default: i64, min: i64, max: i64) -> Option<i64> {
        let Some(raw) = self.optional(variable) else {
            return Some(default);
        };
        let Ok(value) = raw.trim().parse::<i64>() else {
            self.problem(variable, format!("{raw:?} is not an integer"));
            return None;
        };
        if !(min..=max).contains(&value) {
            self.problem(variable, format!("{value} is outside {min}..={max}"));
            return None;
        }
        Some(value)
    }

    /// `true` or `false`, `default` when unset or (with the problem recorded) anything else.
    pub fn boolean(&self, variable: &'static str, default: bool) -> bool {
        match self.optional(variable).as_deref().map(str::trim) {
            None => default,
            Some("true") => true,
            Some("false") => false,
            Some(other) => {
                self.problem(variable, format!("{other:?} is not `true` or `false`"));
                default
            }
        }
    }

    /// The full ARN of a Secrets Manager secret ([`secret_arn_valid`]), or `None` with the
    /// problem recorded (`missing (required)`, or not such an ARN: not quoted).
    pub fn secret_arn(&self, variable: &'static str) -> Option<String> {
        let arn = self.required(variable)?;
        if !secret_arn_valid(&arn) {
            self.problem(variable, "not the full ARN of a Secrets Manager secret");
            return None;
        }
        Some(arn)
    }

    /// A server's base URL (`gate_http::base_url_allowed`: `https://`, or
    /// `http://` to a loopback host; no user info, query or fragment), or `None` with the
    /// problem recorded (not quoted: a refused URL may carry a credential). Feature `http`.
    #[cfg(feature = "http")]
    pub fn base_url(&self, variable: &'static str) -> Option<String> {
        let url = self.required(variable)?;
        if !gate_http::base_url_allowed(&url) {
            self.problem(
                variable,
                "must be https:// (http:// only to a loopback host), without user info, query, \
                 fragment or white space",
            );
            return None;
        }
        Some(url)
    }

    /// Whether a problem was recorded.
    pub fn has_problems(&self) -> bool {
        !self.problems.borrow().is_empty()
    }

    /// The problems recorded, in order.
    pub fn into_problems(self) -> Vec<ConfigError> {
        self.problems.into_inner()
    }

    /// `value` when no problem was recorded, else every problem.
    ///
    /// # Errors
    /// [`ConfigErrors`]: every problem recorded, in order.
    pub fn finish<T>(self, value: impl FnOnce() -> T) -> Result<T, ConfigErrors> {
        let problems = self.into_problems();
        if problems.is_empty() {
            Ok(value())
        } else {
            Err(ConfigErrors(problems))
        }
    }
}

/// A fixed environment as a lookup for [`Env`] and `crate::Config::from_env`: the
/// variables `pairs` (name, value), nothing else set. For tests and tools that read a
/// configuration without touching the process's environment.
pub fn fixed_env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: std::collections::HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

/// Whether `arn` looks like a Secrets Manager secret ARN
/// (`arn:PARTITION:secretsmanager:REGION:ACCOUNT:secret:NAME`; AWS General Reference, "Amazon
/// Resource Names"): a 12-digit account, a name, printable ASCII only.
pub fn secret_arn_valid(arn: &str) -> bool {
    let parts: Vec<&str> = arn.splitn(7, ':').collect();
    parts.len() == 7
        && parts[0] == "arn"
        && parts[1].starts_with("aws")
        && parts[2] == "secretsmanager"
        && !parts[3].is_empty()
        && parts[4].len() == 12
        && parts[4].bytes().all(|b| b.is_ascii_digit())
        && parts[5] == "secret"
        && !parts[6].is_empty()
        && arn.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_arns_are_recognised() {
        assert!(secret_arn_valid(
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:ect-delta/token-AbCdEf"
        ));
        assert!(secret_arn_valid(
            "arn:aws-us-gov:secretsmanager:us-gov-west-1:123456789012:secret:a-AbCdEf"
        ));
        assert!(!secret_arn_valid("ect-delta/token"));
        assert!(!secret_arn_valid(
            "arn:aws:secretsmanager:eu-west-1:1234:secret:x"
        ));
        assert!(!secret_arn_valid(
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:"
        ));
        assert!(!secret_arn_valid(
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:a b"
        ));
        assert!(!secret_arn_valid(
            "arn:aws:ssm:eu-west-1:123456789012:parameter/x"
        ));
    }

    /// Every accessor records its problem and reads on; one problem is "1 problem".
    #[test]
    fn every_problem_is_collected_and_named() {
        let lookup = |k: &str| match k {
            "N" => Some("x".to_string()),
            "B" => Some("yes".to_string()),
            "BLANK" => Some("  ".to_string()),
            _ => None,
        };
        let env = Env::new(&lookup);
        assert_eq!(env.number("N", 5, 0, 10), None);
        assert_eq!(env.number("UNSET", 5, 0, 10), Some(5));
        assert!(env.boolean("B", true));
        assert_eq!(env.required("BLANK"), None);
        assert_eq!(env.raw("BLANK").as_deref(), Some("  "));
        let err = env.finish(|| ()).unwrap_err();
        assert_eq!(err.variables(), ["N", "B", "BLANK"]);
        assert_eq!(
            err.to_string(),
            "invalid configuration: 3 problems: N: \"x\" is not an integer; B: \"yes\" is not \
             `true` or `false`; BLANK: missing (required)"
        );
        let one = ConfigErrors(vec![ConfigError {
            variable: "X",
            problem: "bad".into(),
        }]);
        assert_eq!(one.to_string(), "invalid configuration: 1 problem: X: bad");
    }

    /// A secret's ARN and a server's base URL are checked; a refused value is never quoted.
    #[test]
    fn a_secret_arn_and_a_base_url_are_checked_unquoted() {
        let arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:api-key-AbCdEf";
        let lookup = |k: &str| match k {
            "ARN" => Some(arn.to_string()),
            "NOT_ARN" => Some("api-key".to_string()),
            "URL" => Some("https://api.payments.example".to_string()),
            "LOCAL" => Some("http://127.0.0.1:8080".to_string()),
            "CREDENTIAL" => Some("https://user:hunter2@api.example".to_string()),
            "PLAIN" => Some("http://api.example".to_string()),
            _ => None,
        };
        let env = Env::new(&lookup);
        assert_eq!(env.secret_arn("ARN").as_deref(), Some(arn));
        assert_eq!(env.secret_arn("NOT_ARN"), None);
        assert_eq!(env.secret_arn("UNSET"), None);
        #[cfg(feature = "http")]
        {
            assert_eq!(
                env.base_url("URL").as_deref(),
                Some("https://api.payments.example")
            );
            assert!(env.base_url("LOCAL").is_some());
            assert_eq!(env.base_url("CREDENTIAL"), None);
            assert_eq!(env.base_url("PLAIN"), None);
        }
        let err = env.finish(|| ()).unwrap_err().to_string();
        assert!(err.contains("NOT_ARN: not the full ARN"), "{err}");
        assert!(err.contains("UNSET: missing (required)"), "{err}");
        assert!(
            !err.contains("hunter2") && !err.contains("api-key\""),
            "{err}"
        );
    }
}
