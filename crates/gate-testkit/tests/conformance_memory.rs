//! The store conformance suite on `MemoryStore`: `cargo test -p gate --features testkit`.
//! The cases are listed once, in `gate_testkit::conformance`; the macro makes one test per case.

use std::sync::Arc;

use gate::store::memory::MemoryStore;

gate_testkit::store_conformance_tests!(_case => Arc::new(MemoryStore::new()));

// The whole suite on a store laid out with an integration's own business row columns: every
// case passes whatever the names, and a label named like one of them is refused.
mod own_row_columns {
    use super::*;
    const OWN: gate::record::RowColumns = gate::record::RowColumns {
        event_key: "invoice_event",
        effect_id: "charge_id",
        written_at: "charged_at",
    };
    gate_testkit::store_conformance_tests!(_case => Arc::new(MemoryStore::new().with_row_columns(OWN)));
}

// The operator's port (the scans and the audit history gatectl uses), listed apart.
mod operator {
    use super::*;
    gate_testkit::operator_store_conformance_tests!(_case => Arc::new(MemoryStore::new()));
}

/// Every `pub async fn CASE(store, prefix)` in the suite is in its one case list, so no case is
/// written and then never run.
#[test]
fn every_case_is_in_the_case_list() {
    let list_file = include_str!("../src/conformance/mod.rs");
    let sources = [
        list_file,
        include_str!("../src/conformance/reserve.rs"),
        include_str!("../src/conformance/reserve_guard.rs"),
        include_str!("../src/conformance/lease.rs"),
        include_str!("../src/conformance/commit.rs"),
        include_str!("../src/conformance/commit_conditions.rs"),
        include_str!("../src/conformance/concurrency.rs"),
        include_str!("../src/conformance/finish.rs"),
        include_str!("../src/conformance/guard.rs"),
        include_str!("../src/conformance/identity.rs"),
        include_str!("../src/conformance/index.rs"),
        include_str!("../src/conformance/limits.rs"),
        include_str!("../src/conformance/operator.rs"),
    ];
    // Every file of the folder is read above (a new concern's file must be added here too).
    let files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/src/conformance"))
        .expect("the conformance folder")
        .count();
    assert_eq!(files, sources.len(), "a conformance file is not read here");
    // The store's list and the operator's port's list.
    let list: String = [
        "macro_rules! __with_conformance_cases",
        "macro_rules! __with_operator_conformance_cases",
    ]
    .iter()
    .map(|name| {
        let start = list_file.find(name).expect("a case list macro");
        let end = start + list_file[start..].find("\n}\n").expect("its end");
        &list_file[start..end]
    })
    .collect();
    // Every public async function but `run_all*` is a case (helpers are plain `fn`s).
    let cases: Vec<&str> = sources
        .iter()
        .flat_map(|source| source.lines())
        .filter_map(|l| l.strip_prefix("pub async fn "))
        .filter_map(|rest| rest.split('(').next())
        .filter(|name| !name.starts_with("run_all"))
        .collect();
    assert!(cases.len() >= 18, "found only {cases:?}");
    let missing: Vec<&&str> = cases
        .iter()
        .filter(|c| !list.contains(&format!("{c},")) && !list.contains(&format!("{c}\n")))
        .collect();
    assert!(
        missing.is_empty(),
        "cases missing from the list: {missing:?}"
    );
}
