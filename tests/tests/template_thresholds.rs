//! The alarm thresholds are defined once, in `gate::signals`, and the attributes the `InFlight`
//! index projects once, in `gate_dynamo`; `template.yaml` and the payments example's
//! `examples/payments/template.yaml` carry copies. These tests fail when they drift.

use gate::signals::{
    metric, DISTINCT_EFFECT_IDS_ALARM, NAMESPACE, NATURAL_KEY_COLLISIONS_ALARM,
    NATURAL_KEY_COLLISIONS_PERIOD_S, OLDEST_IN_FLIGHT_MAX_S, RATIO_ALARMS, STORE_SIGNALS_PERIOD_S,
};

fn template() -> String {
    read("template.yaml")
}

/// `path` from the workspace root.
fn read(path: &str) -> String {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path);
    std::fs::read_to_string(full).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every template that deploys the gate's signals: the truck-slot stack's and the payments
/// example's.
fn templates() -> [String; 2] {
    [template(), read("examples/payments/template.yaml")]
}

/// The text of one top-level resource: from `  Name:` to the next line indented by exactly two
/// spaces (the next resource).
fn resource(template: &str, name: &str) -> String {
    let header = format!("  {name}:");
    let mut lines = template.lines().skip_while(|l| *l != header);
    let first = lines.next().unwrap_or_else(|| panic!("no resource {name}"));
    let body: Vec<&str> = lines
        .take_while(|l| {
            let next_resource =
                l.starts_with("  ") && !l.starts_with("   ") && !l.trim_start().starts_with('#');
            !next_resource && !l.starts_with(|c: char| c.is_ascii_alphabetic())
        })
        .collect();
    format!("{first}\n{}\n", body.join("\n"))
}

fn has(block: &str, needle: &str) {
    assert!(block.contains(needle), "{needle:?} missing in:\n{block}");
}

/// Every duplicate-ratio alarm of `gate::signals::RATIO_ALARMS` is in the template with the same
/// period (both metrics), evaluation, metric math and threshold, and within CloudWatch's limit on
/// Period x EvaluationPeriods (one day below 1-hour periods, seven days from 1 hour).
#[test]
fn every_duplicate_ratio_alarm_matches() {
    for t in templates() {
        for alarm in RATIO_ALARMS {
            let a = resource(&t, &format!("{}Alarm", alarm.name));
            has(
                &a,
                &format!("AlarmName: !Sub ${{AWS::StackName}}-{}\n", alarm.name),
            );
            assert_eq!(
                a.matches(&format!("Period: {}\n", alarm.period_s)).count(),
                2,
                "{} reads both metrics over {} s:\n{a}",
                alarm.name,
                alarm.period_s
            );
            has(&a, "MetricName: Received\n");
            has(&a, "MetricName: Duplicates\n");
            has(&a, &format!("Expression: {}\n", alarm.expression()));
            has(&a, "Threshold: 1\n");
            has(&a, "ComparisonOperator: GreaterThanOrEqualToThreshold");
            has(
                &a,
                &format!("EvaluationPeriods: {}\n", alarm.evaluation_periods),
            );
            has(
                &a,
                &format!("DatapointsToAlarm: {}\n", alarm.datapoints_to_alarm),
            );
            has(&a, "TreatMissingData: notBreaching");
            has(&a, &format!("Namespace: {NAMESPACE}"));
            let span = alarm.period_s * i64::from(alarm.evaluation_periods);
            let limit = if alarm.period_s < 3_600 {
                86_400
            } else {
                7 * 86_400
            };
            assert!(
                span <= limit,
                "{}: {span} s over CloudWatch's {limit} s",
                alarm.name
            );
        }
    }
}

#[test]
fn the_natural_key_collisions_alarm_matches() {
    let t = template();
    let a = resource(&t, "NaturalKeyCollisionsAlarm");
    has(
        &a,
        &format!("MetricName: {}\n", metric::NATURAL_KEY_COLLISIONS),
    );
    has(&a, "Statistic: Sum\n");
    has(&a, &format!("Period: {NATURAL_KEY_COLLISIONS_PERIOD_S}\n"));
    has(&a, &format!("Threshold: {NATURAL_KEY_COLLISIONS_ALARM}\n"));
    has(&a, "ComparisonOperator: GreaterThanOrEqualToThreshold");
    has(&a, "TreatMissingData: notBreaching");
}

#[test]
fn the_oldest_in_flight_alarm_matches() {
    for t in templates() {
        let a = resource(&t, "OldestInFlightAgeAlarm");
        has(&a, &format!("Threshold: {OLDEST_IN_FLIGHT_MAX_S}\n"));
        has(&a, &format!("Period: {STORE_SIGNALS_PERIOD_S}\n"));
        has(&a, "ComparisonOperator: GreaterThanThreshold");
    }
}

#[test]
fn the_distinct_effect_ids_alarm_matches() {
    for t in templates() {
        let a = resource(&t, "DistinctEffectIdsAlarm");
        has(&a, &format!("Threshold: {DISTINCT_EFFECT_IDS_ALARM}\n"));
        has(&a, "ComparisonOperator: GreaterThanOrEqualToThreshold");
        has(
            &a,
            &format!("IF(FILL(multi, 0) >= 1, {DISTINCT_EFFECT_IDS_ALARM}, 0)"),
        );
    }
}

#[test]
fn the_in_flight_index_projects_what_the_code_reads_and_never_the_request() {
    for t in templates() {
        let table = resource(&t, "IdempotencyTable");
        let index = table
            .split("- IndexName: InFlight")
            .nth(1)
            .expect("IdempotencyTable has the InFlight index");
        let index = index.split("- IndexName:").next().unwrap_or(index);
        has(index, "ProjectionType: INCLUDE\n");
        let listed = format!(
            "NonKeyAttributes: [{}]",
            gate_dynamo::INFLIGHT_PROJECTED_ATTRIBUTES.join(", ")
        );
        has(index, &listed);
        assert!(
            !gate_dynamo::INFLIGHT_PROJECTED_ATTRIBUTES.contains(&"request"),
            "the claim request holds the release PIN"
        );
    }
}

/// Both functions that claim effects resume stale records, so both must know how long the server
/// keeps a key: the consumer without it would fall back to 24 h and re-claim under a key a
/// server with a shorter retention has forgotten. With several servers each one's retention
/// is in `SERVERS`, which both get too.
#[test]
fn both_functions_that_claim_get_the_key_retention() {
    let t = template();
    for function in ["ConsumerFunction", "ReconcilerFunction"] {
        let f = resource(&t, function);
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

/// Both functions of the payments example that charge get what the horizon is made of (the
/// retention is the integration's, 24 h; the margin is the stack's) and the record lifetime.
#[test]
fn both_payments_functions_that_charge_get_the_margin_and_the_api() {
    let t = read("examples/payments/template.yaml");
    for function in ["ConsumerFunction", "ReconcilerFunction"] {
        let f = resource(&t, function);
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
        has(&resource(&t, function), &format!("Binary: {binary}\n"));
    }
}

/// The template's default record lifetime is the code's.
#[test]
fn the_key_ttl_default_matches() {
    for t in templates() {
        let p = resource(&t, "KeyTtlSeconds");
        has(
            &p,
            &format!("Default: {}\n", gate::consumer::DEFAULT_KEY_TTL_S),
        );
    }
}
