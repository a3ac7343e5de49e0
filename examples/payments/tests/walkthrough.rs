//! `docs/INTEGRATING.md` walks through this crate: every block it marks `<!-- quoted: PATH -->`
//! is that file's text, and the sizes it states are this crate's (the integration at most 100
//! lines, as issue 22 asks, counted as `src/lib.rs` says).

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
    assert!(quotes.len() >= 9, "{} quoted blocks", quotes.len());
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
