//! The alarm thresholds are defined once, in `gate::signals`, and the attributes the `InFlight`
//! index projects once, in `gate::dynamo`; `template.yaml` carries copies. These tests fail when
//! the two drift.

use gate::signals::{
    DISTINCT_SLOT_IDS_ALARM, DUPLICATE_RATIO_HIGH, DUPLICATE_RATIO_HIGH_MIN_RECEIVED,
    DUPLICATE_RATIO_HIGH_PERIOD_S, DUPLICATE_RATIO_ZERO_MIN_RECEIVED,
    DUPLICATE_RATIO_ZERO_PERIOD_S, NAMESPACE, OLDEST_IN_FLIGHT_MAX_S, STORE_SIGNALS_PERIOD_S,
};

fn template() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../template.yaml");
    std::fs::read_to_string(path).expect("template.yaml")
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

#[test]
fn the_duplicate_ratio_high_alarm_matches() {
    let t = template();
    let a = resource(&t, "DuplicateRatioHighAlarm");
    has(&a, &format!("Threshold: {DUPLICATE_RATIO_HIGH}"));
    has(&a, &format!(">= {DUPLICATE_RATIO_HIGH_MIN_RECEIVED},"));
    has(&a, &format!("Period: {DUPLICATE_RATIO_HIGH_PERIOD_S}\n"));
    has(&a, "ComparisonOperator: GreaterThanThreshold");
    has(&a, &format!("Namespace: {NAMESPACE}"));
}

#[test]
fn the_duplicate_ratio_zero_alarm_matches() {
    let t = template();
    let a = resource(&t, "DuplicateRatioZeroAlarm");
    has(&a, &format!(">= {DUPLICATE_RATIO_ZERO_MIN_RECEIVED} AND"));
    has(&a, &format!("Period: {DUPLICATE_RATIO_ZERO_PERIOD_S}\n"));
}

#[test]
fn the_oldest_in_flight_alarm_matches() {
    let t = template();
    let a = resource(&t, "OldestInFlightAgeAlarm");
    has(&a, &format!("Threshold: {OLDEST_IN_FLIGHT_MAX_S}\n"));
    has(&a, &format!("Period: {STORE_SIGNALS_PERIOD_S}\n"));
    has(&a, "ComparisonOperator: GreaterThanThreshold");
}

#[test]
fn the_distinct_slot_ids_alarm_matches() {
    let t = template();
    let a = resource(&t, "DistinctSlotIdsAlarm");
    has(&a, &format!("Threshold: {DISTINCT_SLOT_IDS_ALARM}\n"));
    has(&a, "ComparisonOperator: GreaterThanOrEqualToThreshold");
    has(
        &a,
        &format!("IF(FILL(multi, 0) >= 1, {DISTINCT_SLOT_IDS_ALARM}, 0)"),
    );
}

#[test]
fn the_in_flight_index_projects_what_the_code_reads_and_never_the_request() {
    let t = template();
    let table = resource(&t, "IdempotencyTable");
    let index = table
        .split("- IndexName: InFlight")
        .nth(1)
        .expect("IdempotencyTable has the InFlight index");
    let index = index.split("- IndexName:").next().unwrap_or(index);
    has(index, "ProjectionType: INCLUDE\n");
    let listed = format!(
        "NonKeyAttributes: [{}]",
        gate::dynamo::INFLIGHT_PROJECTED_ATTRIBUTES.join(", ")
    );
    has(index, &listed);
    assert!(
        !gate::dynamo::INFLIGHT_PROJECTED_ATTRIBUTES.contains(&"request"),
        "the claim request holds the release PIN"
    );
}

/// Both functions that claim slots resume stale records, so both must know how long the terminal
/// keeps a key: the consumer without it would fall back to 24 h and re-claim under a key a
/// terminal with a shorter retention has forgotten.
#[test]
fn both_functions_that_claim_get_the_key_retention() {
    let t = template();
    for function in ["ConsumerFunction", "ReconcilerFunction"] {
        let f = resource(&t, function);
        has(
            &f,
            "TERMINAL_KEY_RETENTION_SECONDS: !Ref TerminalKeyRetentionSeconds",
        );
        has(&f, "RETENTION_MARGIN_SECONDS: !Ref RetentionMarginSeconds");
        has(&f, "KEY_TTL_SECONDS: !Ref KeyTtlSeconds");
    }
}

/// The template's default record lifetime is the code's.
#[test]
fn the_key_ttl_default_matches() {
    let t = template();
    let p = resource(&t, "KeyTtlSeconds");
    has(&p, &format!("Default: {}\n", gate::gate::DEFAULT_KEY_TTL_S));
}
