//! The counters reach CloudWatch as embedded metric format documents: one JSON object per flush
//! with `_aws.CloudWatchMetrics` naming the namespace, the `Integration` dimension and each metric.
#![cfg(feature = "lambda")]

use gate::signals::{Counts, NAMESPACE};

#[test]
fn counters_are_written_as_emf_documents() {
    let collector = gate::lambda::init_metrics("emf-test").expect("recorder");
    let counts = Counts {
        received: 10,
        duplicates: 3,
        mismatches: 1,
        rejected: 1,
        committed: 5,
        max_distinct_effect_ids: 2,
        ..Counts::default()
    };
    counts.emit();
    let mut out = Vec::new();
    collector.flush(&mut out).expect("flush");
    let text = String::from_utf8(out).expect("utf-8");
    let docs: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("each line is one JSON document"))
        .collect();
    assert!(!docs.is_empty(), "{text}");
    let mut values = serde_json::Map::new();
    for doc in &docs {
        let meta = &doc["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(meta["Namespace"], NAMESPACE);
        assert_eq!(doc["Integration"], "emf-test");
        for m in meta["Metrics"].as_array().expect("metrics") {
            let name = m["Name"].as_str().expect("name");
            values.insert(name.to_string(), doc[name].clone());
        }
    }
    assert_eq!(values["Received"], 10);
    assert_eq!(values["Duplicates"], 3);
    assert_eq!(values["Mismatches"], 1);
    assert_eq!(values["Rejected"], 1);
    assert_eq!(values["Committed"], 5);
    assert_eq!(values["Manual"], 0, "zeros are explicit");
    let distinct = &values["DistinctEffectIds"];
    assert!(
        *distinct == serde_json::json!(2.0)
            || *distinct == serde_json::json!([2.0])
            || *distinct == serde_json::json!(2),
        "{distinct}"
    );
}
