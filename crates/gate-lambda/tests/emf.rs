//! The counters reach CloudWatch as embedded metric format documents: one JSON object per
//! invocation with `_aws.CloudWatchMetrics` naming the namespace, the `Integration` dimension and
//! each metric, the invocation's request id as a property, its own counts and nobody else's.

use gate::signals::{Counts, NAMESPACE};
use gate_lambda::Emf;
use serde_json::Value;

fn lines(out: Vec<u8>) -> Vec<Value> {
    String::from_utf8(out)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is one JSON document"))
        .collect()
}

#[test]
fn counters_are_written_as_one_emf_document_per_invocation() {
    let emf = Emf::new("emf-test");
    let counts = Counts {
        received: 10,
        duplicates: 3,
        mismatches: 1,
        rejected: 1,
        committed: 5,
        max_distinct_effect_ids: 2,
        ..Counts::default()
    };
    let mut out = Vec::new();
    emf.write_counts("request-a", &counts, &mut out);
    let docs = lines(out);
    assert_eq!(docs.len(), 1, "{docs:?}");
    let doc = &docs[0];
    let meta = &doc["_aws"]["CloudWatchMetrics"][0];
    assert_eq!(meta["Namespace"], NAMESPACE);
    assert_eq!(meta["Dimensions"], serde_json::json!([["Integration"]]));
    assert_eq!(doc["Integration"], "emf-test");
    assert_eq!(doc["RequestId"], "request-a");
    let names: Vec<&str> = meta["Metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .map(|m| m["Name"].as_str().expect("name"))
        .collect();
    assert_eq!(names.len(), 13, "{names:?}");
    assert_eq!(doc["Received"], 10);
    assert_eq!(doc["Duplicates"], 3);
    assert_eq!(doc["Mismatches"], 1);
    assert_eq!(doc["Rejected"], 1);
    assert_eq!(doc["Committed"], 5);
    assert_eq!(doc["Manual"], 0, "zeros are explicit");
    assert_eq!(doc["DistinctEffectIds"], 2);
}

/// Two invocations of one process, written in turn: each document holds its own counts under its
/// own request id (a shared registry flushed after each invocation would put both under one).
#[test]
fn two_invocations_write_two_documents_with_their_own_counts() {
    let emf = Emf::new("emf-test");
    let mut out = Vec::new();
    let a = Counts {
        received: 1,
        committed: 1,
        ..Counts::default()
    };
    let b = Counts {
        received: 2,
        duplicates: 2,
        ..Counts::default()
    };
    emf.write_counts("request-a", &a, &mut out);
    emf.write_counts("request-b", &b, &mut out);
    let docs = lines(out);
    let by_request = |id: &str| {
        docs.iter()
            .find(|d| d["RequestId"] == id)
            .unwrap_or_else(|| panic!("no document of {id}: {docs:?}"))
    };
    assert_eq!(docs.len(), 2);
    assert_eq!(
        (
            by_request("request-a")["Received"].clone(),
            by_request("request-a")["Committed"].clone()
        ),
        (1.into(), 1.into())
    );
    assert_eq!(
        (
            by_request("request-b")["Received"].clone(),
            by_request("request-b")["Duplicates"].clone()
        ),
        (2.into(), 2.into())
    );
    assert_eq!(by_request("request-b")["Committed"], 0);
    assert!(by_request("request-b").get("DistinctEffectIds").is_none());
}
