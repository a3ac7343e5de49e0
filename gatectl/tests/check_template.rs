//! `gatectl check-template`'s thresholds on this repository's templates (each with the gate
//! application it instantiates, `sam/gate/template.yaml`): they pass, a drift from
//! `gate::signals` is named, and the application is found relative to the template from any
//! directory. Also what the truck-slot and payments templates give their functions. The policy
//! rules are tests/tests/template_policy.rs; `make lint-template` runs the whole command.

use std::path::{Path, PathBuf};

use gatectl::check_template::{application_locations, load, thresholds};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The texts a template deploys: it, then its applications'.
fn deployed(path: &str) -> Vec<String> {
    load(&root().join(path))
        .unwrap()
        .into_iter()
        .map(|(_, t)| t)
        .collect()
}

fn block(template: &str, name: &str) -> String {
    thresholds::resource(template, name).unwrap_or_else(|| panic!("no {name}"))
}

fn has(block: &str, needle: &str) {
    assert!(block.contains(needle), "{needle:?} missing in:\n{block}");
}

#[test]
fn both_templates_instantiate_the_gate_application_and_match_the_code() {
    for (path, location) in [
        ("template.yaml", "sam/gate/template.yaml"),
        (
            "examples/payments/template.yaml",
            "../../sam/gate/template.yaml",
        ),
    ] {
        let text = std::fs::read_to_string(root().join(path)).unwrap();
        assert_eq!(application_locations(&text), [location], "{path}");
        let texts = deployed(path);
        assert_eq!(texts.len(), 2, "{path} and the gate application");
        assert_eq!(thresholds::check(&texts), Vec::<String>::new(), "{path}");
        // An alarm is changed in one place: neither integration declares one of the signals.
        assert!(!text.contains("DuplicateRatioHighAlarm:"), "{path}");
        assert!(!text.contains("NaturalKeyCollisionsAlarm:"), "{path}");
    }
}

/// Each way an alarm can drift from `gate::signals` is named, with the alarm.
#[test]
fn a_drifted_or_missing_alarm_is_named() {
    let texts = deployed("examples/payments/template.yaml");
    let gate = texts[1].clone();
    let cases = [
        (
            "Threshold: 180\n",
            "Threshold: 240\n",
            "OldestInFlightAgeAlarm",
        ),
        (
            "FILL(received, 0) >= 50 AND",
            "FILL(received, 0) >= 40 AND",
            "DuplicateRatioHighAlarm",
        ),
        (
            "  NaturalKeyCollisionsAlarm:\n",
            "  SomeOtherAlarm:\n",
            "NaturalKeyCollisionsAlarm: no such resource",
        ),
        (
            "NonKeyAttributes: [event_key, status, lease_owner, lease_until, expires_at]",
            "NonKeyAttributes: [event_key, status, lease_owner, lease_until, expires_at, request]",
            "InFlight index",
        ),
    ];
    for (from, to, named) in cases {
        assert!(gate.contains(from), "{from}");
        let broken = vec![texts[0].clone(), gate.replacen(from, to, 1)];
        let problems = thresholds::check(&broken);
        assert!(
            problems.iter().any(|p| p.contains(named)),
            "{named}: {problems:?}"
        );
    }
    assert!(texts[0].contains("Default: 1814400,"));
    let ttl = texts[0].replace("Default: 1814400,", "Default: 86400,");
    let problems = thresholds::check(&[ttl, gate]);
    assert!(
        problems.iter().any(|p| p.contains("KeyTtlSeconds")),
        "{problems:?}"
    );
}

/// A template outside the repository, read from another directory: its application's
/// `Location` is resolved relative to the template, not to the working directory.
#[test]
fn the_application_is_found_relative_to_the_template() {
    let dir = std::env::temp_dir().join(format!("check-template-{}", std::process::id()));
    let app = dir.join("vendor/gate");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::copy(
        root().join("sam/gate/template.yaml"),
        app.join("template.yaml"),
    )
    .unwrap();
    let own = std::fs::read_to_string(root().join("examples/payments/template.yaml"))
        .unwrap()
        .replace("../../sam/gate/template.yaml", "vendor/gate/template.yaml");
    std::fs::write(dir.join("template.yaml"), own).unwrap();
    let texts: Vec<String> = load(&dir.join("template.yaml"))
        .unwrap()
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    assert_eq!(texts.len(), 2);
    assert_eq!(thresholds::check(&texts), Vec::<String>::new());
    std::fs::remove_file(app.join("template.yaml")).unwrap();
    let err = load(&dir.join("template.yaml")).unwrap_err();
    assert!(err.contains("vendor/gate/template.yaml"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Both truck-slot functions that claim resume stale records, so both must know how long the
/// server keeps a key (with several servers, each one's retention is in `TERMINALS`).
#[test]
fn both_functions_that_claim_get_the_key_retention() {
    let t = std::fs::read_to_string(root().join("template.yaml")).unwrap();
    for function in ["ConsumerFunction", "ReconcilerFunction"] {
        let f = block(&t, function);
        has(
            &f,
            "SERVER_KEY_RETENTION_SECONDS: !If [OneTerminal, !Ref TerminalKeyRetentionSeconds, \
             !Ref AWS::NoValue]",
        );
        has(&f, "TERMINALS: !Ref Terminals");
        has(
            &f,
            "TERMINAL_TOKEN_SECRET_ARNS: !Join [\",\", !Ref TerminalTokenSecretArns]",
        );
        has(&f, "RETENTION_MARGIN_SECONDS: !Ref RetentionMarginSeconds");
        has(&f, "KEY_TTL_SECONDS: !Ref KeyTtlSeconds");
    }
}

/// Both payments functions that charge get what the horizon is made of (the retention is the
/// integration's, 24 h; the margin is the stack's), the record lifetime and the API.
#[test]
fn both_payments_functions_that_charge_get_the_margin_and_the_api() {
    let t = std::fs::read_to_string(root().join("examples/payments/template.yaml")).unwrap();
    for function in ["ConsumerFunction", "ReconcilerFunction"] {
        let f = block(&t, function);
        has(&f, "RETENTION_MARGIN_SECONDS: !Ref RetentionMarginSeconds");
        has(&f, "KEY_TTL_SECONDS: !Ref KeyTtlSeconds");
        has(&f, "PAYMENTS_API_URL: !Ref PaymentsApiUrl");
        has(&f, "PAYMENTS_KEY_SECRET_ARN: !Ref PaymentsKeySecretArn");
    }
    for (function, binary) in [
        ("ConsumerFunction", "payments-consumer"),
        ("ReconcilerFunction", "payments-reconciler"),
        ("MetricsFunction", "payments-metrics"),
    ] {
        has(&block(&t, function), &format!("Binary: {binary} }}"));
    }
}

/// The consumer hides a message for a server's `Retry-After` with `ChangeMessageVisibility`
/// (docs/OPERATING.md, "Retry-After"): the gate application's consumer role may do it on the
/// event queue, or every hide would be refused and every delay left to the reconciler.
#[test]
fn the_consumer_role_may_change_the_event_queues_visibility() {
    let gate = std::fs::read_to_string(root().join("sam/gate/template.yaml")).unwrap();
    let role = block(&gate, "ConsumerRole");
    let receive = role
        .split("- Sid: ReceiveEvents")
        .nth(1)
        .and_then(|s| s.split("- Sid:").next())
        .expect("ReceiveEvents");
    has(receive, "sqs:ChangeMessageVisibility");
}

/// Drifts of the gate application's signal alarms that make them never page, or page an hour
/// late, are each named: another namespace, statistic, evaluation, dimension or metric, or no
/// actions.
#[test]
fn an_alarm_that_can_never_page_is_named() {
    let texts = deployed("template.yaml");
    let gate = texts[1].clone();
    let cases = [
        // Watches a namespace nothing emits to.
        (
            "OldestInFlightAgeAlarm",
            "Namespace: ExactlyOnceGate",
            "Namespace: Elsewhere",
        ),
        // Pages only when the *youngest* datapoint of the minute is stuck.
        (
            "OldestInFlightAgeAlarm",
            "Statistic: Maximum",
            "Statistic: Minimum",
        ),
        // A stuck record pages after an hour instead of a minute.
        (
            "OldestInFlightAgeAlarm",
            "EvaluationPeriods: 1\n      DatapointsToAlarm: 1\n",
            "EvaluationPeriods: 60\n      DatapointsToAlarm: 60\n",
        ),
        // Watches another integration's metric.
        (
            "NaturalKeyCollisionsAlarm",
            "Value: !Ref IntegrationName",
            "Value: some-other-integration",
        ),
        // Reads a metric nobody emits.
        (
            "DistinctEffectIdsAlarm",
            "MetricName: DistinctEffectIds",
            "MetricName: Nothing",
        ),
        // Pages nobody.
        (
            "OldestInFlightAgeAlarm",
            "      AlarmActions: [!Ref AlarmTopic]\n",
            "",
        ),
    ];
    let mut undetected = Vec::new();
    for (alarm, from, to) in cases {
        let original = block(&gate, alarm);
        assert!(original.contains(from), "{alarm}: {from:?}");
        let drifted = gate.replacen(&original, &original.replacen(from, to, 1), 1);
        assert_ne!(drifted, gate);
        if thresholds::check(&[texts[0].clone(), drifted]).is_empty() {
            undetected.push(format!("{alarm}: {from:?} -> {to:?}"));
        }
    }
    assert!(
        undetected.is_empty(),
        "passed check-template: {undetected:#?}"
    );
}

/// A local `Location` that names the template itself, or a cycle of two templates, is reported
/// as a cycle naming the chain, never followed until the stack overflows.
#[test]
fn a_location_cycle_is_reported() {
    let dir = std::env::temp_dir().join(format!("check-template-cycle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let app = |location: &str| {
        format!(
            "Transform: AWS::Serverless-2016-10-31\nResources:\n  Gate:\n    Type: \
             AWS::Serverless::Application\n    Properties:\n      Location: {location}\n"
        )
    };
    std::fs::write(dir.join("self.yaml"), app("self.yaml")).unwrap();
    std::fs::write(dir.join("a.yaml"), app("b.yaml")).unwrap();
    std::fs::write(dir.join("b.yaml"), app("./a.yaml")).unwrap();
    let itself = load(&dir.join("self.yaml"));
    let pair = load(&dir.join("a.yaml"));
    let _ = std::fs::remove_dir_all(&dir);
    let err = itself.expect_err("a template that instantiates itself");
    assert!(
        err.contains("Location cycle") && err.contains("self.yaml"),
        "{err}"
    );
    let err = pair.expect_err("two templates that instantiate each other");
    assert!(
        err.contains("Location cycle") && err.contains("a.yaml") && err.contains("b.yaml"),
        "{err}"
    );
}
