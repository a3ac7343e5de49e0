//! The alarms and the `InFlight` index of a template's text against the code: every threshold is
//! defined once, in [`gate::signals`], and the attributes the index projects once, in
//! [`gate_dynamo::INFLIGHT_PROJECTED_ATTRIBUTES`]; a template carries copies. Read as text, one
//! top-level resource at a time (from `  Name:` to the next two-space key), as the gate
//! application (`sam/gate/template.yaml`) writes them.

use gate::signals::{
    metric, DISTINCT_EFFECT_IDS_ALARM, NAMESPACE, NATURAL_KEY_COLLISIONS_ALARM,
    NATURAL_KEY_COLLISIONS_PERIOD_S, OLDEST_IN_FLIGHT_MAX_S, RATIO_ALARMS, STORE_SIGNALS_PERIOD_S,
};

/// The text of top-level entry `name` (a resource or a parameter) of `template`: from the line
/// `  {name}:` to the next line indented by exactly two spaces or not at all (or that one line,
/// `  {name}: { ... }`); `None` if absent.
pub fn resource(template: &str, name: &str) -> Option<String> {
    let header = format!("  {name}:");
    // `  Name:` and its block, or `  Name: { ... }` on one line.
    let mut lines = template.lines().skip_while(|l| {
        let l = l.trim_end();
        l != header && !l.starts_with(&format!("{header} "))
    });
    let first = lines.next()?;
    let body: Vec<&str> = lines
        .take_while(|l| {
            let next_entry =
                l.starts_with("  ") && !l.starts_with("   ") && !l.trim_start().starts_with('#');
            !next_entry && !l.starts_with(|c: char| c.is_ascii_alphabetic())
        })
        .collect();
    Some(format!("{first}\n{}\n", body.join("\n")))
}

/// The CloudWatch dimensions every gate metric carries: the integration's name.
const DIMENSIONS: &str = "Dimensions: [{ Name: Integration, Value: !Ref IntegrationName }]";

/// What makes alarm `name` (its block `a`) page at all: every metric it reads is in the gate's
/// namespace with the integration's dimension, and it notifies the alarm topic.
fn pages(p: &mut Vec<String>, name: &str, a: &str) {
    let metrics = a.matches("MetricName:").count();
    let in_namespace = a.matches(&format!("Namespace: {NAMESPACE}\n")).count();
    let dimensioned = a.matches(DIMENSIONS).count();
    if metrics == 0 || in_namespace != metrics || dimensioned != metrics {
        p.push(format!(
            "{name}: {metrics} metrics, {in_namespace} in namespace {NAMESPACE}, \
             {dimensioned} with the dimension {DIMENSIONS:?}: every metric needs both"
        ));
    }
    has(p, name, a, "AlarmActions: [!Ref AlarmTopic]");
}

/// Records a problem unless `block` contains `needle`.
fn has(problems: &mut Vec<String>, what: &str, block: &str, needle: &str) {
    if !block.contains(needle) {
        problems.push(format!("{what}: {:?} missing", needle.trim_end()));
    }
}

/// The first of `templates` (their texts) that has resource `name`.
fn find(templates: &[String], name: &str, problems: &mut Vec<String>) -> Option<String> {
    let found = templates.iter().find_map(|t| resource(t, name));
    if found.is_none() {
        problems.push(format!("{name}: no such resource"));
    }
    found
}

/// Every problem of the alarms of the four signals and of the `InFlight` index in `templates`
/// (a template and the applications it instantiates, as text), each naming the resource and
/// what it lacks; empty when they match the code. Checks: each duplicate-ratio alarm of
/// [`RATIO_ALARMS`] (both metrics over its period, its metric math, threshold, evaluation and
/// datapoints, within CloudWatch's limit on Period x EvaluationPeriods: one day below 1-hour
/// periods, seven days from 1 hour); `NaturalKeyCollisionsAlarm`, `OldestInFlightAgeAlarm`,
/// `DistinctEffectIdsAlarm`; that each of these alarms can page (its metrics in the gate's
/// namespace with the integration's dimension, its actions the alarm topic); the `InFlight` index's projection (never `request`); and a
/// `KeyTtlSeconds` parameter's default, where one is declared.
pub fn check(templates: &[String]) -> Vec<String> {
    let mut p = Vec::new();
    for alarm in RATIO_ALARMS {
        let name = format!("{}Alarm", alarm.name);
        let Some(a) = find(templates, &name, &mut p) else {
            continue;
        };
        has(&mut p, &name, &a, &format!("-{}\n", alarm.name));
        let periods = a.matches(&format!("Period: {}\n", alarm.period_s)).count();
        if periods != 2 {
            p.push(format!(
                "{name}: reads {periods} metrics over {} s, not both",
                alarm.period_s
            ));
        }
        for needle in [
            "MetricName: Received\n".to_string(),
            "MetricName: Duplicates\n".to_string(),
            format!("Expression: {}\n", alarm.expression()),
            "Threshold: 1\n".to_string(),
            "ComparisonOperator: GreaterThanOrEqualToThreshold".to_string(),
            format!("EvaluationPeriods: {}\n", alarm.evaluation_periods),
            format!("DatapointsToAlarm: {}\n", alarm.datapoints_to_alarm),
            "TreatMissingData: notBreaching".to_string(),
        ] {
            has(&mut p, &name, &a, &needle);
        }
        pages(&mut p, &name, &a);
        let span = alarm.period_s * i64::from(alarm.evaluation_periods);
        let limit = if alarm.period_s < 3_600 {
            86_400
        } else {
            7 * 86_400
        };
        if span > limit {
            p.push(format!("{name}: {span} s over CloudWatch's {limit} s"));
        }
    }
    if let Some(a) = find(templates, "NaturalKeyCollisionsAlarm", &mut p) {
        for needle in [
            format!("MetricName: {}\n", metric::NATURAL_KEY_COLLISIONS),
            "Statistic: Sum\n".to_string(),
            format!("Period: {NATURAL_KEY_COLLISIONS_PERIOD_S}\n"),
            format!("Threshold: {NATURAL_KEY_COLLISIONS_ALARM}\n"),
            "ComparisonOperator: GreaterThanOrEqualToThreshold".to_string(),
            "EvaluationPeriods: 1\n".to_string(),
            "DatapointsToAlarm: 1\n".to_string(),
            "TreatMissingData: notBreaching".to_string(),
        ] {
            has(&mut p, "NaturalKeyCollisionsAlarm", &a, &needle);
        }
        pages(&mut p, "NaturalKeyCollisionsAlarm", &a);
    }
    if let Some(a) = find(templates, "OldestInFlightAgeAlarm", &mut p) {
        for needle in [
            format!("MetricName: {}\n", metric::OLDEST_IN_FLIGHT_AGE),
            format!("Threshold: {OLDEST_IN_FLIGHT_MAX_S}\n"),
            format!("Period: {STORE_SIGNALS_PERIOD_S}\n"),
            "Statistic: Maximum\n".to_string(),
            "ComparisonOperator: GreaterThanThreshold".to_string(),
            "EvaluationPeriods: 1\n".to_string(),
            "DatapointsToAlarm: 1\n".to_string(),
        ] {
            has(&mut p, "OldestInFlightAgeAlarm", &a, &needle);
        }
        pages(&mut p, "OldestInFlightAgeAlarm", &a);
    }
    if let Some(a) = find(templates, "DistinctEffectIdsAlarm", &mut p) {
        for needle in [
            format!("Threshold: {DISTINCT_EFFECT_IDS_ALARM}\n"),
            "ComparisonOperator: GreaterThanOrEqualToThreshold".to_string(),
            format!("IF(FILL(multi, 0) >= 1, {DISTINCT_EFFECT_IDS_ALARM}, 0)"),
            format!("MetricName: {}\n", metric::DISTINCT_EFFECT_IDS),
            format!("MetricName: {}\n", metric::MULTI_EFFECT_KEYS),
            "EvaluationPeriods: 1\n".to_string(),
            "DatapointsToAlarm: 1\n".to_string(),
        ] {
            has(&mut p, "DistinctEffectIdsAlarm", &a, &needle);
        }
        pages(&mut p, "DistinctEffectIdsAlarm", &a);
    }
    check_in_flight_index(templates, &mut p);
    for t in templates {
        if let Some(param) = resource(t, "KeyTtlSeconds") {
            let default = format!("{}", gate::consumer::DEFAULT_KEY_TTL_S);
            let ok = param.contains(&format!("Default: {default}\n"))
                || param.contains(&format!("Default: {default} "))
                || param.contains(&format!("Default: {default},"));
            if !ok {
                p.push(format!(
                    "KeyTtlSeconds: its default is not the code's {default} s"
                ));
            }
        }
    }
    p
}

/// The `InFlight` index projects exactly [`gate_dynamo::INFLIGHT_PROJECTED_ATTRIBUTES`] (what
/// choosing and taking over a record reads), never the stored request.
fn check_in_flight_index(templates: &[String], p: &mut Vec<String>) {
    let Some(table) = find(templates, "IdempotencyTable", p) else {
        return;
    };
    let Some(index) = table.split("- IndexName: InFlight").nth(1) else {
        p.push("IdempotencyTable: no InFlight index".into());
        return;
    };
    let index = index.split("- IndexName:").next().unwrap_or(index);
    has(p, "InFlight index", index, "ProjectionType: INCLUDE\n");
    let listed = format!(
        "NonKeyAttributes: [{}]",
        gate_dynamo::INFLIGHT_PROJECTED_ATTRIBUTES.join(", ")
    );
    has(p, "InFlight index", index, &listed);
    if gate_dynamo::INFLIGHT_PROJECTED_ATTRIBUTES.contains(&"request") {
        p.push("InFlight index: projects the stored request".into());
    }
}
