//! `docs/INTEGRATING.md` walks through this crate: every block it marks `<!-- quoted: PATH -->`
//! is that file's text, and the sizes it states are this crate's (the integration at most 100
//! lines, counted as `src/lib.rs` says).

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Non-blank lines that are not comments (`//`, `//!`, `///`).
fn code_lines(path: &str) -> usize {
    read(path)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .count()
}

/// Each `(path, fenced text)` the walkthrough quotes.
fn quotes(doc: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = doc.lines();
    while let Some(line) = lines.next() {
        let Some(path) = line
            .strip_prefix("<!-- quoted: ")
            .and_then(|l| l.strip_suffix(" -->"))
        else {
            continue;
        };
        let fence = lines.next().unwrap_or_default();
        assert!(fence.starts_with("```"), "no fence after {line}");
        let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        out.push((path.to_string(), body.join("\n")));
    }
    out
}

#[test]
fn every_quoted_block_is_the_file_s_text() {
    let doc = read("docs/INTEGRATING.md");
    let quotes = quotes(&doc);
    assert!(quotes.len() >= 8, "{} quoted blocks", quotes.len());
    for (path, text) in quotes {
        assert!(
            read(&path).contains(&text),
            "docs/INTEGRATING.md quotes {path}, which does not hold:\n{text}"
        );
    }
}

#[test]
fn the_sizes_the_walkthrough_states_are_true() {
    let doc = read("docs/INTEGRATING.md");
    let integration =
        code_lines("examples/payments/src/lib.rs") + code_lines("examples/payments/src/lambda.rs");
    assert!(integration <= 100, "the integration is {integration} lines");
    let main = code_lines("examples/payments/src/bin/payments-consumer.rs");
    for bin in [
        "payments-consumer",
        "payments-reconciler",
        "payments-metrics",
    ] {
        let lines = code_lines(&format!("examples/payments/src/bin/{bin}.rs"));
        assert!(lines <= 10, "{bin}: {lines} lines");
        assert_eq!(lines, main, "{bin}");
    }
    let template = read("examples/payments/template.yaml")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count();
    let thousands = |n: usize| match n {
        1_000.. => format!("{},{:03}", n / 1_000, n % 1_000),
        _ => n.to_string(),
    };
    for stated in [
        format!("`src/lambda.rs`) {integration} lines"),
        format!(
            "each `main.rs` {main}, the template\n{}",
            thousands(template)
        ),
    ] {
        assert!(
            doc.contains(&stated),
            "docs/INTEGRATING.md does not say {stated:?}"
        );
    }
}

/// The `[features]` keys of a manifest (not `default`).
fn features(manifest: &str) -> Vec<String> {
    manifest
        .split("\n[")
        .find(|section| section.starts_with("features]"))
        .map(|section| {
            section
                .lines()
                .skip(1)
                .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim().to_string()))
                .filter(|k| !k.is_empty() && !k.starts_with('#') && k != "default")
                .collect()
        })
        .unwrap_or_default()
}

/// The walkthrough's table of the gate's crates names every crate and, on its row, every
/// feature that crate has: a user outside the workspace learns them there, not from manifests.
#[test]
fn the_crate_table_names_every_crate_and_feature() {
    let doc = read("docs/INTEGRATING.md");
    let crates = std::fs::read_dir(root().join("crates")).unwrap();
    let mut seen = 0;
    for entry in crates {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let manifest = read(&format!("crates/{name}/Cargo.toml"));
        let row = doc
            .lines()
            .find(|l| {
                l.starts_with("| `") && l.split('|').nth(1).unwrap().contains(&format!("`{name}`"))
            })
            .unwrap_or_else(|| panic!("no row names crate {name}"));
        for feature in features(&manifest) {
            assert!(
                row.contains(&format!("`{feature}`")),
                "the row of {name} does not name its feature {feature}: {row}"
            );
        }
        seen += 1;
    }
    assert_eq!(seen, 6, "the gate's crates");
}
