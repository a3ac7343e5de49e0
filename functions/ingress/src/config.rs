//! The ingress's configuration, read once at cold start from environment variables; every
//! problem is reported together (`gate_lambda::ConfigErrors`, the consumer's format).
//!
//! | variable | meaning | default |
//! | --- | --- | --- |
//! | `NOTIFICATION_QUEUE_URL` | the queue the consumer reads (the body goes there unchanged) | required |
//! | `WEBHOOK_SECRET_ARN` | ARN of the Secrets Manager secret holding `{"active": ["whsec_...", ...]}` (the cloud) | one of the two |
//! | `WEBHOOK_SECRETS` | the same JSON document itself, **local runs only**; refused together with the ARN | one of the two |
//! | `INTEGRATION_NAME` | the metrics' `Integration` dimension | `ect-delta-slots` |

use gate_lambda::{secret_arn_valid, ConfigError, ConfigErrors};

use crate::signature::SecretSet;

/// Where the secrets come from.
#[derive(Debug, Clone)]
pub enum SecretsConfig {
    /// `WEBHOOK_SECRET_ARN`: read from Secrets Manager at cold start (and again, at most once a
    /// minute, after a signature no active secret matches).
    SecretsManager {
        /// The secret's ARN (not itself a secret).
        arn: String,
    },
    /// `WEBHOOK_SECRETS`: given in the environment (local runs). `Debug` redacts them.
    Local(SecretSet),
}

/// The ingress's configuration.
#[derive(Debug, Clone)]
pub struct IngressConfig {
    /// `NOTIFICATION_QUEUE_URL`.
    pub queue_url: String,
    /// The secrets' source.
    pub secrets: SecretsConfig,
    /// `INTEGRATION_NAME` (the metrics' dimension).
    pub integration: String,
}

impl IngressConfig {
    /// Reads the configuration through `lookup` (`std::env::var` in the function).
    ///
    /// # Errors
    /// Every missing or invalid variable, named; a refused `WEBHOOK_SECRETS` is described, never
    /// quoted.
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigErrors> {
        let get = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
        let mut problems = Vec::new();
        let mut problem = |variable: &'static str, text: String| {
            problems.push(ConfigError {
                variable,
                problem: text,
            });
        };
        let queue_url = get("NOTIFICATION_QUEUE_URL");
        if queue_url.is_none() {
            problem("NOTIFICATION_QUEUE_URL", "missing (required)".into());
        }
        let secrets = match (get("WEBHOOK_SECRET_ARN"), get("WEBHOOK_SECRETS")) {
            (Some(_), Some(_)) => {
                problem(
                    "WEBHOOK_SECRETS",
                    "set together with WEBHOOK_SECRET_ARN; WEBHOOK_SECRETS is for local runs only"
                        .into(),
                );
                None
            }
            (Some(arn), None) if secret_arn_valid(arn.trim()) => {
                Some(SecretsConfig::SecretsManager {
                    arn: arn.trim().to_string(),
                })
            }
            (Some(arn), None) => {
                problem(
                    "WEBHOOK_SECRET_ARN",
                    format!("{arn:?} is not a Secrets Manager secret ARN"),
                );
                None
            }
            (None, Some(text)) => match SecretSet::parse_json(&text) {
                Ok(set) => Some(SecretsConfig::Local(set)),
                Err(e) => {
                    problem("WEBHOOK_SECRETS", e.to_string());
                    None
                }
            },
            (None, None) => {
                problem(
                    "WEBHOOK_SECRET_ARN",
                    "missing (required; or WEBHOOK_SECRETS for local runs)".into(),
                );
                None
            }
        };
        let integration = get("INTEGRATION_NAME")
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| "ect-delta-slots".into());
        match (queue_url, secrets) {
            (Some(queue_url), Some(secrets)) if problems.is_empty() => Ok(Self {
                queue_url: queue_url.trim().to_string(),
                secrets,
                integration,
            }),
            _ => Err(ConfigErrors(problems)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    const SECRETS: &str = r#"{"active": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]}"#;

    #[test]
    fn every_problem_at_once() {
        let e = IngressConfig::from_env(env(&[])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid configuration: 2 problems: NOTIFICATION_QUEUE_URL: missing (required); \
             WEBHOOK_SECRET_ARN: missing (required; or WEBHOOK_SECRETS for local runs)"
        );
        let e = IngressConfig::from_env(env(&[
            ("NOTIFICATION_QUEUE_URL", "http://q"),
            (
                "WEBHOOK_SECRETS",
                r#"{"active": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS"]}"#,
            ),
        ]))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid configuration: 1 problem: WEBHOOK_SECRETS: a secret is not base64 after its optional whsec_ prefix"
        );
        let e = IngressConfig::from_env(env(&[
            ("NOTIFICATION_QUEUE_URL", "http://q"),
            ("WEBHOOK_SECRETS", SECRETS),
            ("WEBHOOK_SECRET_ARN", "arn:x"),
        ]))
        .unwrap_err();
        assert_eq!(e.variables(), vec!["WEBHOOK_SECRETS"]);
        let e = IngressConfig::from_env(env(&[
            ("NOTIFICATION_QUEUE_URL", "http://q"),
            ("WEBHOOK_SECRET_ARN", "my-secret"),
        ]))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid configuration: 1 problem: WEBHOOK_SECRET_ARN: \"my-secret\" is not a Secrets Manager secret ARN"
        );
        assert!(!e.to_string().contains("MfKQ9r8"));
    }

    #[test]
    fn a_local_and_a_cloud_configuration() {
        let c = IngressConfig::from_env(env(&[
            ("NOTIFICATION_QUEUE_URL", "http://q"),
            ("WEBHOOK_SECRETS", SECRETS),
        ]))
        .unwrap();
        assert!(matches!(c.secrets, SecretsConfig::Local(ref s) if s.len() == 1));
        assert_eq!(c.integration, "ect-delta-slots");
        assert!(!format!("{c:?}").contains("MfKQ9r8"), "{c:?}");
        let c = IngressConfig::from_env(env(&[
            ("NOTIFICATION_QUEUE_URL", "http://q"),
            (
                "WEBHOOK_SECRET_ARN",
                "arn:aws:secretsmanager:eu-west-1:123456789012:secret:w-AbCdEf",
            ),
            ("INTEGRATION_NAME", "x"),
        ]))
        .unwrap();
        assert!(
            matches!(c.secrets, SecretsConfig::SecretsManager { ref arn } if arn.ends_with("w-AbCdEf"))
        );
        assert_eq!(c.integration, "x");
    }
}
