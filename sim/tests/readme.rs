//! The README and `docs/` against the product: the README's demo table is what `make demo`
//! prints, the built-in scenario table (`docs/SIMULATION.md`) and `sim replay --help` name every
//! embedded scenario, every pinned tool version quoted anywhere is the one `scripts/tools.sh`
//! installs, and every test file `docs/TESTING.md` names exists.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use sim::replay::{self, ReplayOptions};
use sim::report;
use sim::scenario::Scenario;
use sim::scenarios::NAMES;

fn repo_file(path: &str) -> String {
    let full = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The first fenced block after the line containing `marker`.
fn block_after(text: &str, marker: &str) -> String {
    let rest = &text[text.find(marker).unwrap_or_else(|| panic!("no {marker:?}"))..];
    let open = rest.find("\n```").expect("a fenced block");
    let body = &rest[open + 4..];
    let body = &body[body.find('\n').expect("fence line") + 1..];
    body[..body.find("```").expect("closing fence")].to_string()
}

/// `make demo` prints `sim compare monday-2025-06-09`: the README shows that table whole.
#[tokio::test]
async fn the_readme_demo_table_is_the_demo_output() {
    let scenario = Scenario::load("monday-2025-06-09").unwrap();
    let naive = replay::run(&scenario, ReplayOptions::naive())
        .await
        .unwrap();
    let gated = replay::run(&scenario, ReplayOptions::gated())
        .await
        .unwrap();
    let printed = report::render_side_by_side(&naive, &gated);
    let shown = block_after(&repo_file("README.md"), "`make demo` prints");
    assert_eq!(
        shown, printed,
        "README.md's demo table drifted from `make demo`"
    );
}

/// `docs/SIMULATION.md`'s table of built-in scenarios lists exactly the embedded ones, in order.
#[test]
fn the_readme_lists_every_embedded_scenario() {
    let doc = repo_file("docs/SIMULATION.md");
    let table = &doc[doc
        .find("Built-in scenarios (`sim replay NAME`)")
        .expect("the built-in scenario table")..];
    let listed: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.starts_with("| name"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('`').nth(1))
        .collect();
    let embedded: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
    assert_eq!(listed, embedded);
}

/// `sim replay --help` and `sim compare --help` name every embedded scenario.
#[test]
fn the_help_names_every_embedded_scenario() {
    for command in ["replay", "compare"] {
        let out = Command::new(env!("CARGO_BIN_EXE_sim"))
            .args([command, "--help"])
            .output()
            .expect("sim runs");
        assert!(out.status.success());
        let help = String::from_utf8_lossy(&out.stdout);
        for (name, what) in NAMES {
            assert!(
                help.lines()
                    .any(|l| l.trim_start().starts_with(name) && l.ends_with(what)),
                "`sim {command} --help` does not list {name}:\n{help}"
            );
        }
    }
}

/// Every `tool==version` in `scripts/tools.sh`'s pins.
fn pins(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("==") {
        let name: String = rest[..at]
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || "-_[]".contains(*c))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let version: String = rest[at + 2..]
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        if !name.is_empty() && !version.is_empty() {
            let name = name.split('[').next().unwrap_or_default().to_string();
            found.push((name, version.trim_end_matches('.').to_string()));
        }
        rest = &rest[at + 2..];
    }
    found
}

/// A version quoted in the README, a file of `docs/`, the Makefile or a script (an install hint,
/// the deploy section) is the one the tools script installs: no second, drifting pin.
#[test]
fn every_quoted_tool_version_is_the_pinned_one() {
    let pinned: BTreeMap<String, String> =
        pins(&repo_file("scripts/tools.sh")).into_iter().collect();
    for tool in ["moto", "cargo-lambda", "aws-sam-cli", "cfn-lint", "checkov"] {
        assert!(
            pinned.contains_key(tool),
            "tools.sh pins no {tool}: {pinned:?}"
        );
    }
    let docs_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs");
    let mut files: Vec<String> = std::fs::read_dir(&docs_dir)
        .unwrap_or_else(|e| panic!("{}: {e}", docs_dir.display()))
        .map(|entry| entry.expect("a directory entry").file_name())
        .filter_map(|name| name.to_str().map(str::to_string))
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    assert!(files.len() >= 8, "docs/ has its files: {files:?}");
    files.extend(
        [
            "README.md",
            "Makefile",
            "scripts/lint-template.sh",
            "scripts/with-moto.sh",
        ]
        .map(String::from),
    );
    for file in &files {
        for (tool, version) in pins(&repo_file(file)) {
            if let Some(want) = pinned.get(&tool) {
                assert_eq!(&version, want, "{file} quotes {tool}=={version}");
            }
        }
    }
}

/// Every test file `docs/TESTING.md`'s "Behaviour and where it is tested" table names exists (a
/// bare file name is in the directory of the path before it on the same row).
#[test]
fn every_test_file_the_behaviour_table_names_exists() {
    let doc = repo_file("docs/TESTING.md");
    let start = doc
        .find("## Behaviour and where it is tested")
        .expect("docs/TESTING.md has the behaviour table");
    let end = doc[start + 3..]
        .find("\n## ")
        .map_or(doc.len(), |at| start + 3 + at);
    let mut checked = 0;
    for row in doc[start..end].lines().filter(|l| l.starts_with("| ")) {
        let Some(files) = row.rsplit('|').nth(1) else {
            continue;
        };
        let mut dir = String::new();
        for quoted in files.split('`').skip(1).step_by(2) {
            let Some(path) = quoted.split_whitespace().next() else {
                continue;
            };
            if !path.ends_with(".rs") {
                continue;
            }
            let full = if path.contains('/') {
                dir = path
                    .rsplit_once('/')
                    .map(|(d, _)| d.to_string())
                    .unwrap_or_default();
                path.to_string()
            } else {
                format!("{dir}/{path}")
            };
            let on_disk = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join(&full);
            assert!(
                on_disk.is_file(),
                "docs/TESTING.md's behaviour table names {full}, which does not exist"
            );
            checked += 1;
        }
    }
    assert!(
        checked >= 30,
        "only {checked} test files found in the table"
    );
}
